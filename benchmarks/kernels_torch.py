"""The kernel benchmarks from Python, for machines without Google Benchmark (the GPU check): CUDA by default.

    IDENTITY_CONV_OPS_LIBRARY=... python benchmarks/kernels_torch.py --device cuda [--json out.json]

identity_conv_op vs clone() (device-to-device copy) and IdentityConvClass.forward (NCHW) vs ATen conv2d(groups=C)
(cuDNN on CUDA) on NCHW and channels_last, timed with torch.utils.benchmark in the same run; prints the ratios.
"""

from __future__ import annotations

import argparse
import json

import torch
import torch.nn.functional as F
from torch.utils import benchmark

SHAPES = [(8, 64, 56, 56, 3), (4, 32, 112, 112, 5), (1, 256, 28, 28, 3), (16, 64, 128, 128, 3)]


def timed(fn, min_run_time: float) -> float:
    """Median seconds per call."""
    return benchmark.Timer(stmt="fn()", globals={"fn": fn}).blocked_autorange(min_run_time=min_run_time).median


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--json", help="write the numbers here")
    parser.add_argument("--min-run-time", type=float, default=0.3)
    args = parser.parse_args()

    import my_ops  # noqa: F401  (loads the ops library, registers the fakes)

    dev = torch.device(args.device)
    results = {"device": torch.cuda.get_device_name() if dev.type == "cuda" else "cpu", "identity_op": [],
               "class_forward": []}
    print(f"{'identity_conv_op vs clone()':40} ratio (>= 1 is as fast as the copy)")
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for mib in (1, 16, 64, 256):
            x = torch.randn(mib * 2**20 // torch.finfo(dtype).bits * 8, device=dev).to(dtype).view(-1, 1, 64, 64)
            op = timed(lambda: torch.ops.my_ops.identity_conv_op(x), args.min_run_time)
            clone = timed(lambda: x.clone(), args.min_run_time)
            results["identity_op"].append({"dtype": str(dtype)[6:], "mib": mib, "op_s": op, "clone_s": clone})
            print(f"  {str(dtype)[6:]:9} {mib:4} MiB {'':20} {clone / op:6.2f}x")
            del x
    print(f"{'IdentityConvClass.forward vs ATen conv2d':40} vs best  vs nchw  (>= 1 is faster)")
    for n, c, h, w, k in SHAPES:
        for dtype in (torch.float32, torch.bfloat16):
            obj = torch.classes.my_ops.IdentityConvClass(c, k)
            weight = torch.randn(c, 1, k, k)
            obj.set_weight(weight)
            x = torch.randn(n, c, h, w, device=dev).to(dtype)
            wt = weight.to(dev, dtype)
            xcl, wcl = x.contiguous(memory_format=torch.channels_last), wt.contiguous(memory_format=torch.channels_last)
            ours = timed(lambda: obj.forward(x), args.min_run_time)
            nchw = timed(lambda: F.conv2d(x, wt, padding=k // 2, groups=c), args.min_run_time)
            cl = timed(lambda: F.conv2d(xcl, wcl, padding=k // 2, groups=c), args.min_run_time)
            results["class_forward"].append({"shape": f"{n}x{c}x{h}x{w}_k{k}", "dtype": str(dtype)[6:],
                                             "class_s": ours, "aten_nchw_s": nchw, "aten_channels_last_s": cl})
            print(f"  {n}x{c}x{h}x{w} k{k} {str(dtype)[6:]:9} {'':14} {min(nchw, cl) / ours:6.2f}x {nchw / ours:6.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
