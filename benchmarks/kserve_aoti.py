"""The baseline of the serving benchmark: the KServe Python model server (the `kserve` package, its defaults) with a
Model that runs the same package through torch._inductor.aoti_load_package - how a KServe user serves a .pt2 today.

    python benchmarks/kserve_aoti.py --model-name net --package build/models/identity_conv_net.pt2 --http_port 8080

Needs the `kserve` venv that scripts/bench.sh makes (requirements/kserve.txt), PYTHONPATH with this checkout and
ops/python (the ops library's fakes and its loading), IDENTITY_CONV_OPS_LIBRARY.
"""

from __future__ import annotations

import argparse

import kserve
import my_ops  # noqa: F401  (loads the ops library the package calls)
import torch
from kserve import InferOutput, InferRequest, InferResponse

from export_tools.package import read_spec

_DTYPES = {"float32": "FP32", "float64": "FP64", "float16": "FP16", "bfloat16": "BF16", "int64": "INT64",
           "int32": "INT32", "bool": "BOOL", "uint8": "UINT8", "int8": "INT8", "int16": "INT16"}


class AOTIModel(kserve.Model):
    def __init__(self, name: str, package: str):
        super().__init__(name)
        self.package = package
        self.outputs = [o["name"] for o in read_spec(package)["outputs"]]
        self.load()

    def load(self) -> bool:
        self.runner = torch._inductor.aoti_load_package(self.package)
        self.ready = True
        return self.ready

    def predict(self, payload: InferRequest, headers=None, response_headers=None) -> InferResponse:
        inputs = [torch.from_numpy(i.as_numpy()) for i in payload.inputs]
        with torch.inference_mode():
            results = self.runner(*inputs)
        if isinstance(results, torch.Tensor):
            results = [results]
        outputs = []
        for name, t in zip(self.outputs, results):
            out = InferOutput(name=name, shape=list(t.shape), datatype=_DTYPES[str(t.dtype).removeprefix("torch.")])
            out.set_data_from_numpy(t.numpy(), binary_data=True)
            outputs.append(out)
        return InferResponse(response_id=payload.id or "", model_name=self.name, infer_outputs=outputs,
                             use_binary_outputs=payload.use_binary_outputs)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(parents=[kserve.model_server.parser])
    parser.add_argument("--package", required=True)
    args, _ = parser.parse_known_args()
    # ModelServer() takes kserve's own flags (--http_port, --workers, --enable_latency_logging, ...) from argv
    kserve.ModelServer().start([AOTIModel(args.model_name, args.package)])
