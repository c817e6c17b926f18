import os
import shutil
from pathlib import Path

import pytest
import torch

import my_ops  # noqa: F401  (the example models use it: loads its library, registers the fakes)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(scope="session")
def exported(tmp_path_factory):
    """Exported packages, each compiled once per test session: exported(name) -> (path, model, example_inputs)."""
    from export_tools import export_package
    from my_ops import models

    recipes = {
        # portable: three CPU variants in one package
        "net_dynamic": (models.identity_conv_net, dict(dynamic_batch=(1, 32), cpu_isa=("avx2", "avx512", "default"),
                                                        metadata={"purpose": "tests"})),
        "op_static": (models.identity_conv_op_only, dict()),
        "net_fp16": (models.identity_conv_net_fp16, dict(cpu_isa="avx2")),
        "net_bf16": (models.identity_conv_net_bf16, dict(cpu_isa="default")),
        "classifier": (models.conv_classifier_net, dict(dynamic_batch=(1, 16))),
        # the example net with my_ops::identity_conv_op and no TorchBind object, with a lite variant
        "lite/net_dynamic": (models.identity_conv_net_lite, dict(dynamic_batch=(1, 32), cpu_isa="default", lite=True)),
    }
    cache = {}
    out_dir = tmp_path_factory.mktemp("packages")

    def get(name):
        if name not in cache:
            factory, kwargs = recipes[name]
            model, inputs = factory()
            path = out_dir / f"{name}.pt2"
            path.parent.mkdir(exist_ok=True)
            shared = _shared_package(name, kwargs)
            if shared:
                shutil.copyfile(shared, path)
            else:
                export_package(model, inputs, path, **kwargs)
            cache[name] = (path, model, inputs)
        return cache[name]

    return get


def _shared_package(name: str, kwargs: dict) -> Path | None:
    """The C++ tests' package of the same factory and arguments (tests/cpp/export_packages.py), when scripts/test.sh
    names their folder (PT2RT_TEST_PACKAGES_DIR, exported by ctest just before): one compile less per package. Its
    spec must say it was made with these arguments by this torch, else the package is exported here."""
    from export_tools import read_spec
    folder = os.environ.get("PT2RT_TEST_PACKAGES_DIR")
    src = Path(folder) / f"{name}.pt2" if folder else None
    if src is None or not src.is_file():
        return None
    spec = read_spec(src)
    lo_hi = kwargs.get("dynamic_batch")
    dynamic = [[{"dim": 0, "name": "batch", "min": lo_hi[0], "max": lo_hi[1]}] if lo_hi else [] for _ in spec["inputs"]]
    isa = kwargs.get("cpu_isa") or "native"
    isas = [isa] if isinstance(isa, str) else list(isa)
    same = (spec["torch_version"] == torch.__version__ and spec["golden"]["count"] == kwargs.get("golden", 4)
            and bool(spec.get("lite_variants")) == bool(kwargs.get("lite"))
            and spec["metadata"] == kwargs.get("metadata", {}) and [v["isa"] for v in spec["variants"]] == isas
            and [i["dynamic_dims"] for i in spec["inputs"]] == dynamic)
    return src if same else None
