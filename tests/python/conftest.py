import pytest
import torch

import my_ops  # noqa: F401  (the example models use it: loads its library, registers the fakes)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(scope="session")
def exported(tmp_path_factory):
    """Exported packages, each compiled once per test session: exported(name) -> (path, model, example_inputs)."""
    from export_tools import export_package, models

    recipes = {
        # portable: three CPU variants in one package
        "net_dynamic": (models.identity_conv_net, dict(dynamic_batch=(1, 32), golden=5, cpu_isa=("avx2", "avx512", "default"),
                                                        metadata={"purpose": "tests"})),
        "op_static": (models.identity_conv_op_only, dict()),
        "net_fp16": (models.identity_conv_net_fp16, dict(cpu_isa="avx2")),
        "net_bf16": (models.identity_conv_net_bf16, dict(cpu_isa="default")),
        "classifier": (models.conv_classifier_net, dict(dynamic_batch=(1, 16))),
    }
    cache = {}
    out_dir = tmp_path_factory.mktemp("packages")

    def get(name):
        if name not in cache:
            factory, kwargs = recipes[name]
            model, inputs = factory()
            path = export_package(model, inputs, out_dir / f"{name}.pt2", **kwargs)
            cache[name] = (path, model, inputs)
        return cache[name]

    return get
