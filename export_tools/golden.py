"""Golden cases: inputs the exporter picks, the eager model's outputs, and tolerances per dtype.

The file is `torch.save` (zip) of a dict of lists of tensors, which C++ reads with `torch::pickle_load`:
    {"format": "pt2rt-golden/1",
     "names": [str, ...],                      # one per case
     "inputs": [[Tensor, ...], ...],           # per case, in the model's input order
     "outputs": [[Tensor, ...], ...]}          # per case, eager results on the export device, stored on CPU
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import torch

FORMAT = "pt2rt-golden/1"

# torch.testing.assert_close's defaults.
DEFAULT_TOLERANCES = {
    torch.float16: (1e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
    torch.float32: (1.3e-6, 1e-5),
    torch.float64: (1e-7, 1e-7),
}


def tolerance_for(dtype: torch.dtype) -> tuple[float, float]:
    """(rtol, atol) for comparing outputs of this dtype; exact for integer and bool outputs."""
    return DEFAULT_TOLERANCES.get(dtype, (0.0, 0.0))


@dataclass
class Case:
    name: str
    inputs: list[torch.Tensor]
    outputs: list[torch.Tensor]


def batch_sizes(example_batch: int, dynamic_batch: tuple[int, int] | None, count: int) -> list[int]:
    """Batch sizes of the random cases: the range's min and max first, then evenly spread values between."""
    if count <= 0:
        return []
    if dynamic_batch is None:
        return [example_batch] * count
    lo, hi = dynamic_batch
    sizes = [lo, hi][:count]
    between = count - len(sizes)
    for i in range(between):
        sizes.append(lo + round((hi - lo) * (i + 1) / (between + 1)))
    return sizes


def random_like(t: torch.Tensor, batch: int | None, gen: torch.Generator) -> torch.Tensor:
    """A random tensor with t's dtype, device and shape, dim 0 replaced by `batch` when given."""
    shape = list(t.shape)
    if batch is not None:
        shape[0] = batch
    if t.dtype.is_floating_point:
        out = torch.randn(shape, generator=gen, dtype=torch.float32).to(t.dtype)
    elif t.dtype == torch.bool:
        out = torch.rand(shape, generator=gen) > 0.5
    else:
        lo = int(t.min()) if t.numel() else 0
        hi = int(t.max()) + 1 if t.numel() else 2
        out = torch.randint(lo, max(hi, lo + 1), shape, generator=gen, dtype=t.dtype)
    return out.to(t.device)


def make_cases(run, example_inputs: list[torch.Tensor], count: int,
               dynamic_batch: tuple[int, int] | None, seed: int = 0) -> list[Case]:
    """`count` cases: the example itself, then random inputs. `run(inputs)` returns the eager outputs."""
    gen = torch.Generator().manual_seed(seed)
    cases = [Case("example", [t.detach() for t in example_inputs], run(example_inputs))]
    example_batch = example_inputs[0].shape[0] if example_inputs[0].dim() else 1
    for i, batch in enumerate(batch_sizes(example_batch, dynamic_batch, count - 1)):
        inputs = [random_like(t, batch if dynamic_batch else None, gen) for t in example_inputs]
        name = f"random_{i}" + (f"_batch{batch}" if dynamic_batch else "")
        cases.append(Case(name, inputs, run(inputs)))
    return cases


def dumps(cases: list[Case]) -> bytes:
    buf = io.BytesIO()
    torch.save({
        "format": FORMAT,
        "names": [c.name for c in cases],
        "inputs": [[t.detach().cpu().contiguous() for t in c.inputs] for c in cases],
        "outputs": [[t.detach().cpu().contiguous() for t in c.outputs] for c in cases],
    }, buf)
    return buf.getvalue()


def loads(data: bytes) -> list[Case]:
    obj = torch.load(io.BytesIO(data), weights_only=True)
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        raise ValueError(f"not a golden file of format {FORMAT}")
    return [Case(n, list(i), list(o)) for n, i, o in zip(obj["names"], obj["inputs"], obj["outputs"])]


def compare(actual: list[torch.Tensor], expected: list[torch.Tensor],
            tolerances: dict[str, tuple[float, float]] | None = None) -> tuple[bool, float, float, str]:
    """(passed, max abs error, max rel error, reason) of actual vs expected outputs."""
    if len(actual) != len(expected):
        return False, float("inf"), float("inf"), f"expected {len(expected)} outputs, got {len(actual)}"
    max_abs = max_rel = 0.0
    for i, (a, e) in enumerate(zip(actual, expected)):
        a = a.detach().cpu()
        if a.shape != e.shape or a.dtype != e.dtype:
            return False, float("inf"), float("inf"), (
                f"output {i}: expected {e.dtype} {list(e.shape)}, got {a.dtype} {list(a.shape)}")
        rtol, atol = (tolerances or {}).get(dtype_name(e.dtype), tolerance_for(e.dtype))
        if not e.dtype.is_floating_point:
            rtol = atol = 0.0  # integers and bools compare exactly, as the runtime compares them
        if e.numel():
            diff = (a.double() - e.double()).abs()
            finite = torch.isfinite(diff)
            max_abs = max(max_abs, float(diff[finite].max()) if finite.any() else 0.0)
            rel = diff / e.double().abs().clamp_min(torch.finfo(torch.float64).tiny)
            max_rel = max(max_rel, float(rel[finite].max()) if finite.any() else 0.0)
        try:
            torch.testing.assert_close(a, e, rtol=rtol, atol=atol, equal_nan=True)
        except AssertionError as err:
            return False, max_abs, max_rel, f"output {i}: " + str(err).splitlines()[0]
    return True, max_abs, max_rel, ""


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
