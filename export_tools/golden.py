"""Golden cases: inputs the exporter picks, the eager model's outputs, and tolerances per dtype.

The file is `torch.save` (zip) of a dict of lists of tensors, which C++ reads with `torch::pickle_load`:
    {"format": "pt2rt-golden/1",
     "names": [str, ...],                      # one per case
     "inputs": [[Tensor, ...], ...],           # per case, in the model's input order
     "outputs": [[Tensor, ...], ...]}          # per case, eager results on the export device, stored on CPU
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass

import torch

from .errors import first_line

FORMAT = "pt2rt-golden/1"

# (rtol, atol, atol_rel) per dtype. An output compares elementwise as |actual - expected| <= atol' + rtol*|expected|
# with atol' = atol_rel * its magnitude, the largest finite |value| of the expected or the actual output in that case:
# the absolute slack scales with the output (an output of ~1e-9 is held to ~1e-14, not to a fixed 1e-5 that any
# wrong value would pass), and nonzero values where zeros are expected fail as well. atol applies only to the
# outputs the exporter was allowed to keep although they were degenerate (all zeros or constant). rtol and atol are
# torch.testing.assert_close's defaults; atol_rel is that atol for an output of magnitude 1 in float32/float64, and
# a few units in the last place for the half types (a compiled graph rounds intermediates differently from eager).
DEFAULT_TOLERANCES = {
    torch.float16: (1e-3, 1e-5, 4e-3),
    torch.bfloat16: (1.6e-2, 1e-5, 3.2e-2),
    torch.float32: (1.3e-6, 1e-5, 1e-5),
    torch.float64: (1e-7, 1e-7, 1e-7),
}


def tolerance_for(dtype: torch.dtype) -> tuple[float, float, float | None]:
    """(rtol, atol, atol_rel) for comparing outputs of this dtype; exact for integer and bool outputs."""
    return DEFAULT_TOLERANCES.get(dtype, (0.0, 0.0, None))


def magnitude(*tensors: torch.Tensor) -> float:
    """The largest finite |value| in the tensors (0 if none)."""
    best = 0.0
    for t in tensors:
        mag = t.detach().cpu().double().abs()
        mag = mag[torch.isfinite(mag)]
        if mag.numel():
            best = max(best, float(mag.max()))
    return best


def effective_atol(scale: float, atol: float, atol_rel: float | None) -> float:
    """The absolute tolerance for one output of magnitude `scale` (see magnitude: of expected and actual together):
    atol_rel * scale (0 when both are all zeros: they must then be equal), or atol without atol_rel (a table from
    before the rule, an override that asked for a fixed atol, or an output kept although degenerate)."""
    return atol if atol_rel is None else atol_rel * scale


def degenerate_outputs(cases: list["Case"]) -> dict[int, str]:
    """Floating outputs that are all zeros or one constant (or not finite at all) in every case: a golden check on
    them cannot tell a right model from a wrong one. Output index -> a description."""
    found = {}
    for o, first in enumerate(cases[0].outputs):
        if not first.dtype.is_floating_point:
            continue
        what = set()
        for case in cases:
            t = case.outputs[o].double()
            finite = t[torch.isfinite(t)]
            if not finite.numel():
                what.add("not finite")
            elif t.numel() > 1 and bool((finite == finite.flatten()[0]).all()) and finite.numel() == t.numel():
                what.add("all zero" if float(finite.flatten()[0]) == 0 else "constant")
            else:
                break
        else:
            found[o] = f"output {o} ({' / '.join(sorted(what))} in every golden case)"
    return found


@dataclass
class Case:
    name: str
    inputs: list[torch.Tensor]
    outputs: list[torch.Tensor]


def tiled_like(t: torch.Tensor, shape: list[int]) -> torch.Tensor:
    """The example's own values laid over `shape`: position i of each dim holds the example's i mod its size. A
    padding mask keeps its structure (every row a run of the example's rows: none padded whole unless the example
    has one), token ids stay the example's tokens."""
    if t.dim() == 0:
        return t.clone()
    reps = [-(-n // e) for n, e in zip(shape, t.shape)]
    return t.repeat(*reps)[tuple(slice(0, n) for n in shape)].contiguous()


def random_like(t: torch.Tensor, shape: list[int], gen: torch.Generator) -> torch.Tensor:
    """A case's input like example input t, of `shape`: floating inputs random normal; bool and integer inputs
    (masks, token ids, indices) follow the example's own pattern (tiled_like), which a coin flip would not - a
    random mask pads whole rows and gives NaN where no caller would; random when the example is empty."""
    if t.dtype.is_floating_point:
        out = torch.randn(shape, generator=gen, dtype=torch.float32).to(t.dtype)
    elif t.numel():
        return tiled_like(t, shape)
    elif t.dtype == torch.bool:
        out = torch.rand(shape, generator=gen) > 0.5
    else:
        out = torch.randint(0, 2, shape, generator=gen, dtype=t.dtype)
    return out.to(t.device)


def _nbytes(shapes_dtypes) -> int:
    return sum(math.prod(int(d) for d in shape) * dtype.itemsize for shape, dtype in shapes_dtypes)


def case_bytes(case: Case) -> int:
    return _nbytes([(t.shape, t.dtype) for t in case.inputs + case.outputs])


def make_cases(run, example_inputs: list[torch.Tensor], spec_inputs: list[dict], sizes: list[tuple[str, dict]],
               seed: int = 0, max_bytes: int | None = None, given: list[list[torch.Tensor]] = ()
               ) -> tuple[list[Case], list[tuple[str, int]]]:
    """The example itself, the caller's own cases (`given`, named given_0, ...), then one generated case per
    (name, {dynamic dim name: size}) of `sizes` that no given case has the sizes of (static inputs keep the
    example's shape), while all cases' tensors fit in max_bytes (None: no cap); `run(inputs)` returns the eager
    outputs. Returns (cases, [(name, bytes) of the cases left out for the cap]); the example and the given cases
    are always kept."""
    from .dynamic import roots, shape_for

    gen = torch.Generator().manual_seed(seed)
    cases = [Case("example", [t.detach() for t in example_inputs], run(example_inputs))]
    covered = []
    for i, inputs in enumerate(given):
        cases.append(Case(f"given_{i}", [t.detach() for t in inputs], run(list(inputs))))
        covered.append({r.name: r.example for r in roots(spec_inputs, inputs)})
    used = sum(case_bytes(c) for c in cases)
    left_out = []
    for name, assignment in sizes:
        if assignment and assignment in covered:
            continue
        label = name + "".join(f"_{k}={v}" for k, v in assignment.items())
        shapes = [shape_for(t, entry["dynamic_dims"], assignment) for t, entry in zip(example_inputs, spec_inputs)]
        need = _nbytes([(shape, t.dtype) for shape, t in zip(shapes, example_inputs)])
        if max_bytes is not None and used + need > max_bytes:
            left_out.append((label, need))  # its inputs alone do not fit: not even run
            continue
        inputs = [random_like(t, shape, gen) for t, shape in zip(example_inputs, shapes)]
        case = Case(label, inputs, run(inputs))
        if max_bytes is not None and used + case_bytes(case) > max_bytes:
            left_out.append((label, case_bytes(case)))
            continue
        cases.append(case)
        used += case_bytes(case)
    return cases, left_out


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
            tolerances: dict[str, tuple] | None = None, degenerate: set[int] = frozenset()
            ) -> tuple[bool, float, float, str]:
    """(passed, max abs error, max error relative to each output's magnitude, reason) of actual vs expected
    outputs. tolerances: dtype name -> (rtol, atol) or (rtol, atol, atol_rel); see DEFAULT_TOLERANCES. degenerate:
    indices of outputs the package was exported with although degenerate (compared with the fixed atol)."""
    if len(actual) != len(expected):
        return False, float("inf"), float("inf"), f"expected {len(expected)} outputs, got {len(actual)}"
    max_abs = max_scaled = 0.0
    for i, (a, e) in enumerate(zip(actual, expected)):
        a = a.detach().cpu()
        if a.shape != e.shape or a.dtype != e.dtype:
            return False, float("inf"), float("inf"), (
                f"output {i}: expected {e.dtype} {list(e.shape)}, got {a.dtype} {list(a.shape)}")
        rtol, atol, atol_rel = (tuple((tolerances or {}).get(dtype_name(e.dtype), tolerance_for(e.dtype))) +
                                (None,))[:3]
        if not e.dtype.is_floating_point:
            rtol = atol = 0.0  # integers and bools compare exactly, as the runtime compares them
            atol_rel = None
        scale = magnitude(e, a)
        atol = effective_atol(scale, atol, None if i in degenerate else atol_rel)
        if e.numel():
            diff = (a.double() - e.double()).abs()
            finite = torch.isfinite(diff)
            worst = float(diff[finite].max()) if finite.any() else 0.0
            max_abs = max(max_abs, worst)
            max_scaled = max(max_scaled, worst / scale if scale > 0 else 0.0)
        try:
            torch.testing.assert_close(a, e, rtol=rtol, atol=atol, equal_nan=True)
        except AssertionError as err:
            return False, max_abs, max_scaled, f"output {i}: " + (_nonfinite_only(a, e, rtol, atol) or first_line(err))
    return True, max_abs, max_scaled, ""


NONFINITE_HINT = "non-finite only where"


def _nonfinite_only(a: torch.Tensor, e: torch.Tensor, rtol: float, atol: float) -> str:
    """When a and e differ only in where they are finite, says so ("" otherwise)."""
    if not e.dtype.is_floating_point:
        return ""
    fa, fe = torch.isfinite(a), torch.isfinite(e)
    if bool((fa == fe).all()):
        return ""
    both = fa & fe
    if not torch.allclose(a[both].double(), e[both].double(), rtol=rtol, atol=atol):
        return ""
    return (f"{NONFINITE_HINT} one of them is: the eager model gives {int((fa & ~fe).sum())} non-finite values "
            f"where the package is finite, the package {int((fe & ~fa).sum())} where eager is finite; every other "
            f"value is within tolerance")


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
