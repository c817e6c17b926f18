"""Checks checksums printed by programs that ran the example model on 60 frames (batch 1, sin(0.001 * (i + frame)))
against the eager model's: eager_checksum.py WHO:VALUE... (exit 1 on a mismatch or a missing value)."""

import sys

import torch

from my_ops import models


def main() -> int:
    model, _ = models.identity_conv_net()
    total = 0.0
    with torch.no_grad():
        for f in range(60):
            x = torch.sin(0.001 * (torch.arange(3 * 32 * 32, dtype=torch.float32) + f)).reshape(1, 3, 32, 32)
            total += model(x).double().sum().item()
    ok = True
    for entry in sys.argv[1:]:
        who, _, value = entry.partition(":")
        if not value:
            print(f"{who}: no checksum printed", file=sys.stderr)
            ok = False
            continue
        got = float(value)
        if abs(got - total) > 1e-4 * max(1.0, abs(total)):
            print(f"{who}: checksum {got} != the eager model's {total}", file=sys.stderr)
            ok = False
        else:
            print(f"{who}: checksum {got:.9g} equals the eager model's {total:.9g}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
