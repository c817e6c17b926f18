"""Dynamic dims: torch.export's `dynamic_shapes` in positional form, the example torch traces with, the names the
spec gives each dim, and the sizes golden cases take.

A spec records every dynamic dim of an input by name with its range. A dim derived from another one (torch's
`2 * Dim("h") + 1`: always A * root + B with A > 0) also records the root's name and A, B, so that the runtime checks
it against the root's other uses.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass
from typing import Any, Sequence

import torch
from torch.export.dynamic_shapes import Dim, _DerivedDim, _DimHint

from .errors import DynamicShapesError


def _is_dim(v: Any) -> bool:
    return isinstance(v, (Dim, _DimHint))


def normalize(model: torch.nn.Module, inputs: Sequence[torch.Tensor], dynamic_batch: tuple[int, int] | None,
              dynamic_shapes: Any) -> list[dict[int, Any]] | None:
    """Per example input, {dim: Dim}; None when every shape is static. `dynamic_shapes` as torch.export takes it for
    tensor inputs: a tuple/list with one entry per input, or a dict keyed by the forward's parameter names; each
    entry None, {dim: Dim} or a tuple/list of Dim/None per dim."""
    if dynamic_batch is not None and dynamic_shapes is not None:
        raise DynamicShapesError("give dynamic_batch or dynamic_shapes, not both")
    if dynamic_batch is not None:
        lo, hi = dynamic_batch
        batch = Dim("batch", min=lo, max=hi) if hi > lo else None
        for i, t in enumerate(inputs):
            if t.dim() == 0:
                raise DynamicShapesError(f"a dynamic batch needs a batch dim, but example input {i} is a scalar")
            if not lo <= t.shape[0] <= hi:
                raise DynamicShapesError(f"example input {i} has batch {t.shape[0]}, outside the dynamic batch range "
                                         f"{lo}:{hi}")
        # min == max: a batch of one size is a static shape
        return [{0: batch} for _ in inputs] if batch is not None else None
    if dynamic_shapes is None:
        return None
    names = input_names(model, len(inputs))
    if isinstance(dynamic_shapes, dict):
        unknown = [k for k in dynamic_shapes if k not in names]
        if unknown:
            raise DynamicShapesError(f"dynamic_shapes names {unknown[0]!r}, which is not an input of the model "
                                     f"(its inputs: {', '.join(names)})")
        per_input = [dynamic_shapes.get(n) for n in names]
    elif isinstance(dynamic_shapes, (tuple, list)):
        if len(dynamic_shapes) != len(inputs):
            raise DynamicShapesError(f"dynamic_shapes has {len(dynamic_shapes)} entries for {len(inputs)} inputs")
        per_input = list(dynamic_shapes)
    else:
        raise DynamicShapesError(f"expected dynamic_shapes as a tuple or a dict of input names, got "
                                 f"{type(dynamic_shapes).__name__}")
    dims: list[dict[int, Any]] = []
    seen: dict[str, tuple[Any, str]] = {}
    for i, (t, entry) in enumerate(zip(inputs, per_input)):
        where = names[i]
        if entry is None:
            entry = {}
        elif isinstance(entry, (tuple, list)):
            if len(entry) != t.dim():
                raise DynamicShapesError(f"dynamic_shapes for {where} has {len(entry)} dims, the example has {t.dim()}")
            entry = {d: v for d, v in enumerate(entry) if v is not None}
        elif not isinstance(entry, dict):
            raise DynamicShapesError(f"expected the dynamic_shapes of {where} as a dict or tuple of Dims, got "
                                     f"{type(entry).__name__}")
        out: dict[int, Any] = {}
        for d, dim in entry.items():
            if dim is None:
                continue
            if not isinstance(d, int) or not -t.dim() <= d < t.dim():
                raise DynamicShapesError(f"{where} has no dim {d!r} (the example has {t.dim()} dims)")
            if not _is_dim(dim):
                raise DynamicShapesError(f"expected a torch.export.Dim for {where}.{d}, got {type(dim).__name__}")
            d %= t.dim()
            if isinstance(dim, Dim):
                size, lo, hi = int(t.shape[d]), int(dim.min), bound(dim.max)
                if size < lo or (hi is not None and size > hi):
                    raise DynamicShapesError(f"example {where}.{d} is {size}, outside the range of {dim.__name__} "
                                             f"({lo}:{hi})")
                key = dim.root.__name__ if isinstance(dim, _DerivedDim) else dim.__name__
                other = seen.setdefault(key, (dim.root if isinstance(dim, _DerivedDim) else dim, f"{where}.{d}"))
                if not isinstance(dim, _DerivedDim) and other[0] is not dim and (other[0].min, other[0].max) != (
                        dim.min, dim.max):
                    raise DynamicShapesError(f"two Dims named {key} with different ranges ({other[1]} and {where}.{d})")
            out[d] = dim
        dims.append(out)
    return dims if any(dims) else None


def bound(value: Any) -> int | None:
    """A Dim's max as an int, None for torch's unbounded int_oo."""
    from torch.utils._sympy.numbers import int_oo

    return None if value is None or value == int_oo else int(value)


def input_names(model: torch.nn.Module, count: int) -> list[str]:
    """The forward's parameter names for `count` positional inputs (input0, ... where it takes *args)."""
    try:
        params = [p for p in inspect.signature(model.forward).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    names = [p.name for p in params[:count]]
    return names + [f"input{i}" for i in range(len(names), count)]


def trace_inputs(inputs: list[torch.Tensor], dims: list[dict[int, Any]] | None) -> list[torch.Tensor]:
    """The example torch.export traces with. torch specialises an example dim of size 1 to the constant 1, so each
    named Dim whose example is 1 (and whose range goes above it) is traced at 2: the example repeated along it (the
    graph runs size 1 all the same; the user's example stays a golden case)."""
    if dims is None:
        return inputs
    ones = {dim.__name__ for t, entry in zip(inputs, dims) for d, dim in entry.items()
            if isinstance(dim, Dim) and not isinstance(dim, _DerivedDim) and t.shape[d] == 1
            and (bound(dim.max) is None or bound(dim.max) >= 2)}
    if not ones:
        return inputs
    out = []
    for t, entry in zip(inputs, dims):
        for d, dim in entry.items():
            if isinstance(dim, Dim) and not isinstance(dim, _DerivedDim) and dim.__name__ in ones:
                t = torch.cat([t, t], dim=d)
        out.append(t)
    return out


def for_torch(dims: list[dict[int, Any]] | None) -> tuple | None:
    return None if dims is None else tuple(entry or None for entry in dims)


def symbol_names(ep: torch.export.ExportedProgram, dims: list[dict[int, Any]] | None) -> dict[Any, str]:
    """sympy symbol of the exported graph -> the name of the user's Dim it stands for."""
    names: dict[Any, str] = {}
    if dims is None:
        return names
    placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    for name, entry in zip(ep.graph_signature.user_inputs, dims):
        shape = placeholders[name].meta["val"].shape
        for d, dim in entry.items():
            if isinstance(shape[d], int):
                continue
            expr = shape[d].node.expr
            # Dim.AUTO / Dim.DYNAMIC have no name: the input's, with the dim's index
            root = (dim.root.__name__ if isinstance(dim, _DerivedDim) else dim.__name__ if isinstance(dim, Dim)
                    else f"{name}_{d}")
            if expr.is_Symbol:
                names.setdefault(expr, root)
            elif len(expr.free_symbols) == 1:
                names.setdefault(next(iter(expr.free_symbols)), root)
    return names


def describe(expr: Any, names: dict[Any, str], ep: torch.export.ExportedProgram,
             is_input: bool) -> dict[str, Any]:
    """The spec entry of one dynamic dim (without its index): name, range, and for an input dim derived from a
    root, the root's name and A, B of A * root + B."""
    import sympy

    from torch.utils._sympy.numbers import int_oo

    named = expr.subs({s: sympy.Symbol(n) for s, n in names.items()})
    entry: dict[str, Any] = {"name": str(named).replace(" ", "")}
    rng = ep.range_constraints.get(expr)
    if expr.is_Symbol:
        if rng is not None:
            entry["min"] = int(rng.lower)
            entry["max"] = None if rng.upper == int_oo or not rng.upper.is_finite else int(rng.upper)
        return entry
    entry["expr"] = entry["name"]
    symbols = sorted(expr.free_symbols, key=str)
    if len(symbols) == 1:
        s = symbols[0]
        poly = sympy.Poly(expr, s) if expr.is_polynomial(s) else None
        if poly is not None and poly.degree() == 1 and all(c.is_Integer for c in poly.all_coeffs()):
            a, b = (int(c) for c in poly.all_coeffs())
            root = ep.range_constraints.get(s)
            if a > 0 and root is not None:
                entry.update({"of": names.get(s, str(s)), "scale": a, "offset": b, "min": a * int(root.lower) + b})
                entry["max"] = (None if root.upper == int_oo or not root.upper.is_finite
                                else a * int(root.upper) + b)
                return entry
    if is_input:
        raise DynamicShapesError(f"input dim {entry['name']} is not of the form A*dim+B; the runtime could not check "
                                 f"it (derive dims with Dim arithmetic: 2*h, h+1)")
    return entry


@dataclass
class Root:
    name: str
    min: int
    max: int | None
    example: int


def roots(spec_inputs: list[dict[str, Any]], example_inputs: Sequence[torch.Tensor]) -> list[Root]:
    """Each independent dynamic size of the spec's inputs, with its range and its example value."""
    found: dict[str, Root] = {}
    for entry, t in zip(spec_inputs, example_inputs):
        for dd in entry["dynamic_dims"]:
            size = int(t.shape[dd["dim"]])
            if "of" in dd:
                a, b = dd["scale"], dd["offset"]
                found.setdefault(dd["of"], Root(dd["of"], (dd["min"] - b) // a,
                                                None if dd.get("max") is None else (dd["max"] - b) // a,
                                                (size - b) // a))
            elif "expr" not in dd:
                found.setdefault(dd["name"], Root(dd["name"], dd.get("min", 0), dd.get("max"), size))
    return list(found.values())


def case_sizes(rs: list[Root], count: int) -> list[tuple[str, dict[str, int]]]:
    """Named size assignments for golden cases: every root at its min; each root at its max with the others at
    their min (an unbounded max: twice the example); then values spread between min and max for all roots at once,
    up to `count` cases in all (the corners are always there)."""
    if not rs:
        return [(f"random_{i}", {}) for i in range(count)]

    def top(r: Root) -> int:
        return r.max if r.max is not None else max(r.min, 2 * r.example, 2)

    low = {r.name: r.min for r in rs}
    cases = [("min", dict(low))]
    for r in rs:
        cases.append((f"max_{r.name}" if len(rs) > 1 else "max", {**low, r.name: top(r)}))
    between = max(1, count - len(cases))
    for i in range(between):
        sizes = {r.name: r.min + round((top(r) - r.min) * (i + 1) / (between + 1)) for r in rs}
        cases.append((f"between_{i}", sizes))
    return cases


def shape_for(t: torch.Tensor, dynamic_dims: list[dict[str, Any]], sizes: dict[str, int]) -> list[int]:
    shape = list(t.shape)
    for dd in dynamic_dims:
        if "of" in dd and dd["of"] in sizes:
            shape[dd["dim"]] = dd["scale"] * sizes[dd["of"]] + dd["offset"]
        elif dd["name"] in sizes:
            shape[dd["dim"]] = sizes[dd["name"]]
    return shape


_SPEC = re.compile(r"^(?P<input>[A-Za-z_][A-Za-z0-9_]*|\d+)\.(?P<dim>-?\d+)=(?:(?P<scale>\d+)\*)?"
                   r"(?P<name>[A-Za-z_][A-Za-z0-9_]*):(?P<min>\d+):(?P<max>\d+)$")


def parse_cli(items: Sequence[str], names: list[str]) -> dict[str, dict[int, Dim]]:
    """--dynamic INPUT.DIM=NAME:MIN:MAX (repeatable; INPUT an input name or index) -> dynamic_shapes by input name.
    One Dim per NAME: equal names are one size. INPUT.DIM=K*NAME:MIN:MAX: the dim is K times NAME (a multiple of
    K between MIN and MAX; NAME's own range is MIN/K..MAX/K), as torch's 8*Dim("h")."""
    made: dict[str, Dim] = {}
    out: dict[str, dict[int, Dim]] = {}
    for item in items:
        m = _SPEC.match(item)
        if m is None:
            raise DynamicShapesError(f"expected --dynamic INPUT.DIM=NAME:MIN:MAX or INPUT.DIM=K*NAME:MIN:MAX (e.g. "
                                     f"x.0=batch:1:32, image.2=8*h:32:256), got {item!r}")
        which = m["input"]
        if which.isdigit():
            if int(which) >= len(names):
                raise DynamicShapesError(f"--dynamic {item}: the model has {len(names)} inputs")
            which = names[int(which)]
        elif which not in names:
            raise DynamicShapesError(f"--dynamic {item}: the model has no input {which} (its inputs: {', '.join(names)})")
        lo, hi = int(m["min"]), int(m["max"])
        if lo > hi:
            raise DynamicShapesError(f"--dynamic {item}: expected MIN <= MAX")
        scale = int(m["scale"] or 1)
        if scale < 1:
            raise DynamicShapesError(f"--dynamic {item}: expected K >= 1 in K*NAME")
        if scale > 1:  # the root's range: the multiples of K within MIN..MAX
            lo, hi = -(-lo // scale), hi // scale
            if lo > hi:
                raise DynamicShapesError(f"--dynamic {item}: no multiple of {scale} lies between "
                                         f"{m['min']} and {m['max']}")
        name = m["name"]
        dim = made.get(name)
        if dim is None:
            if lo == hi:
                raise DynamicShapesError(f"--dynamic {item}: a range of one size is a static dim; leave it out")
            dim = made[name] = Dim(name, min=lo, max=hi)
        elif (dim.min, dim.max) != (lo, hi):
            raise DynamicShapesError(f"--dynamic {item}: {name} was given the range {dim.min}:{dim.max} before")
        d = int(m["dim"])
        if d in out.setdefault(which, {}):
            raise DynamicShapesError(f"--dynamic {item}: {which}.{d} was made dynamic before")
        out[which][d] = scale * dim if scale > 1 else dim
    return out


_FIX_ROOT = re.compile(r"^\s*(?P<root>\w+) = Dim\('\w+', min=(?P<min>\d+), max=(?P<max>\d+)\)\s*$")
_FIX_DERIVED = re.compile(r"^\s*(?P<name>\w+) = (?P<scale>\d+)\*(?P<root>\w+)\s*$")


def suggested_multiples(text: str) -> dict[str, tuple[int, int, int]]:
    """torch.export's "Suggested fixes" of the form `_h = Dim('_h', min=4, max=32)`, `h = 8*_h`, as
    {"h": (8, 4, 32)}: dim h must be 8 times a size in 4..32."""
    roots, out = {}, {}
    for line in text.splitlines():
        if (r := _FIX_ROOT.match(line)):
            roots[r["root"]] = (int(r["min"]), int(r["max"]))
        elif (d := _FIX_DERIVED.match(line)) and d["root"] in roots:
            out[d["name"]] = (int(d["scale"]), *roots[d["root"]])
    return out
