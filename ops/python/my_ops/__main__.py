"""`python -m my_ops`: the op and the class at work from Python (make demo)."""

import sys

import torch
import torch.nn.functional as F

from . import library_path


def demo_ops() -> int:
    torch.manual_seed(0)
    print(f"ops library: {library_path()}  (torch {torch.__version__})")
    x = torch.randn(2, 3, 8, 8)
    y = torch.ops.my_ops.identity_conv_op(x)
    print(f"my_ops.identity_conv_op: output equals input: {torch.equal(x, y)}, new memory: "
          f"{y.data_ptr() != x.data_ptr()}")

    conv = torch.classes.my_ops.IdentityConvClass(3, 3)
    print(f"my_ops.IdentityConvClass(3, 3) with the identity kernel: output equals input: "
          f"{torch.equal(conv.forward(x), x)}")
    weight = torch.randn(3, 1, 3, 3)
    conv.set_weight(weight)
    err = (conv.forward(x) - F.conv2d(x, weight, padding=1, groups=3)).abs().max().item()
    print(f"with random weights: max |forward - F.conv2d(groups=3)| = {err:.2e}")
    restored = torch._C._pickle_load_obj(torch._C._pickle_save(conv))
    print(f"pickle round trip keeps the weight: {torch.equal(restored.get_weight(), weight)}")
    ok = torch.equal(x, y) and err < 1e-5 and torch.equal(restored.get_weight(), weight)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(demo_ops())
