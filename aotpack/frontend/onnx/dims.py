"""The shapes an ONNX model is built for: its inputs' declared dims with `--input` and
`--dynamic` applied, as aotpack symbols with ranges, plus example inputs.

ONNX declares a dim as a size (dim_value), a name (dim_param: "batch", "sequence"; inputs that
share a name share the dim) or nothing. ONNX gives no ranges, and aotpack plans memory for the
largest shape, so every named or unknown dim needs one from the command line:
- `--dynamic PARAM=LO..HI` gives the dim_param PARAM a range (every input dim named PARAM);
- `--dynamic NAME.DIM=[LABEL:]LO..HI` / `NAME.DIM=LABEL` as for PyTorch models;
- `--input NAME=SHAPE[:DTYPE]` pins dims (a size) or gives ranges (`1..64`, `batch:1..64`).
A named dim left without a range is refused, naming the options that would give it one; a
declared size cannot be changed. A dim's symbol is named after its label, else its dim_param,
else `NAME_DIM`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from aotpack.frontend.dynamic import STATIC, parse_dynamic
from aotpack.frontend.inputs import parse_input
from aotpack.frontend.load import ModelLoadError
from aotpack.frontend.onnx.model import OnnxModel
from aotpack.ir.sym import Sym

_PARAM_RANGE = re.compile(r"^(?P<param>[^.=\s]+)=(?P<lo>\d+)\.\.(?P<hi>\d+)$")


@dataclass
class OnnxShapes:
    """What `to_graph` needs beside the model: each input's dims (int or symbol name)."""

    dims: dict[str, tuple]  # input name -> (int | symbol name, ...)
    symbols: list[Sym] = field(default_factory=list)
    examples: dict[str, int] = field(default_factory=dict)
    sources: dict[str, tuple[str, int]] = field(default_factory=dict)


def resolve(model: OnnxModel, inputs=(), dynamic=()) -> OnnxShapes:
    names = [i.name for i in model.inputs]
    label: dict[tuple[str, int], str] = {}  # (input, dim) -> symbol label
    size: dict[tuple[str, int], int] = {}  # pinned sizes (examples where a range is given too)
    ranges: dict[str, tuple[int, int]] = {}
    param_ranges, specs = _split_dynamic(list(dynamic))
    for opt in (parse_input(o) for o in inputs):
        spec = _spec(model, opt.name, names, "--input")
        if len(opt.dims) != len(spec.dims):
            raise ModelLoadError(f"--input {opt.name}: {len(opt.dims)} dims, but the ONNX "
                                 f"input has {len(spec.dims)} ({_show(spec.dims)})")
        for k, d in enumerate(opt.dims):
            if d.size is not None:
                size[(opt.name, k)] = d.size
                if d.label:
                    label[(opt.name, k)] = d.label
                    _set_range(ranges, d.label, (d.size, d.size))
            else:
                label[(opt.name, k)] = d.label or _default_label(spec, k)
                if d.lo is not None:
                    _set_range(ranges, label[(opt.name, k)], (d.lo, d.hi))
    static = set()
    for name, k, lab, lo, hi in parse_dynamic(specs):
        spec = _spec(model, name, names, "--dynamic")
        if not -len(spec.dims) <= k < len(spec.dims):
            raise ModelLoadError(f"--dynamic {name}.{k}: input {name!r} has {len(spec.dims)} "
                                 f"dims")
        k %= len(spec.dims)
        if lab == STATIC:
            static.add((name, k))
            continue
        label[(name, k)] = lab or label.get((name, k)) or _default_label(spec, k)
        if lo is not None:
            _set_range(ranges, label[(name, k)], (lo, hi))
    return _assemble(model, label, size, ranges, param_ranges, static)


def _split_dynamic(options: list[str]):
    """({dim_param: (lo, hi)} from `PARAM=LO..HI`, the NAME.DIM options)."""
    params, rest = {}, []
    for o in options:
        m = _PARAM_RANGE.match(o.strip())
        if m and "." not in o.split("=")[0]:
            lo, hi = int(m["lo"]), int(m["hi"])
            if not 1 <= lo <= hi:
                raise ModelLoadError(f"--dynamic {o!r}: the range must be 1 <= LO <= HI")
            params[m["param"]] = (lo, hi)
        else:
            rest.append(o)
    return params, rest


def _assemble(model, label, size, ranges, param_ranges, static) -> OnnxShapes:
    params = {d for i in model.inputs for d in i.dims if isinstance(d, str)}
    for p in param_ranges:
        if p not in params:
            raise ModelLoadError(f"--dynamic {p}=...: the ONNX model has no dim named {p!r} "
                                 f"(its named dims: {', '.join(sorted(params)) or 'none'})")
    # a dim_param joins the label an option gave one of its dims
    param_label = {}
    for i in model.inputs:
        for k, d in enumerate(i.dims):
            if isinstance(d, str) and (i.name, k) in label:
                param_label.setdefault(d, label[(i.name, k)])
    for p, rng in param_ranges.items():
        _set_range(ranges, param_label.setdefault(p, p), rng)
    out = OnnxShapes({})
    missing = []
    for i in model.inputs:
        dims = []
        for k, d in enumerate(i.dims):
            key = (i.name, k)
            lab = label.get(key) or (param_label.get(d, d) if isinstance(d, str) else None)
            if isinstance(d, int) and (key in size and size[key] != d or lab in ranges
                                       and ranges[lab] != (d, d)):
                raise ModelLoadError(f"dim {k} of ONNX input {i.name!r} is declared {d} in the "
                                     f"model; an option cannot change it")
            if isinstance(d, int) or key in static:
                dims.append(d if isinstance(d, int) else size.get(key, _no_size(i, k)))
            elif lab is not None and lab in ranges:
                lo, hi = ranges[lab]
                dims.append(lo if lo == hi else _symbol(out, lab, lo, hi, key, size))
            elif key in size:
                dims.append(size[key])
            else:
                missing.append((i, k, d))
                dims.append(None)
        out.dims[i.name] = tuple(dims)
    if missing:
        raise ModelLoadError(_missing_message(model, missing))
    _pick_examples(out)
    return out


def _symbol(out: OnnxShapes, lab: str, lo: int, hi: int, key, size) -> str:
    name = _clean(lab)
    if name not in {s.name for s in out.symbols}:
        out.symbols.append(Sym(name, lo, hi))
        out.sources[name] = key
    if key in size:
        if not lo <= size[key] <= hi:
            raise ModelLoadError(f"{key[0]}.{key[1]}: size {size[key]} is outside {lab}'s "
                                 f"range {lo}..{hi}")
        out.examples.setdefault(name, size[key])
    return name


def _pick_examples(out: OnnxShapes) -> None:
    """Each symbol's example value: a pinned size, else the smallest from 8 up in its range
    that no static dim nor another symbol uses (an example that tells the dims apart)."""
    taken = {d for dims in out.dims.values() for d in dims if isinstance(d, int)}
    taken |= set(out.examples.values())
    for s in out.symbols:
        if s.name in out.examples:
            continue
        start = max(s.lo, min(8, s.hi))
        free = [v for v in range(start, s.hi + 1) if v not in taken] or [start]
        out.examples[s.name] = free[0]
        taken.add(free[0])


def _missing_message(model, missing) -> str:
    lines, given = [], set()
    for i, k, d in missing:
        what = f"the ONNX named dim {d!r}" if isinstance(d, str) else "not declared"
        lines.append(f"  dim {k} of input {i.name!r} ({_show(i.dims)}): {what}")
        if isinstance(d, str):
            given.add(f"--dynamic {d}=1..N")
        else:
            given.add(f"--dynamic {i.name}.{k}=1..N")
    return ("the ONNX model's dims below have no range (ONNX records none, and aotpack plans "
            "memory for the largest shape):\n" + "\n".join(lines) +
            f"\n  give each a range: {' '.join(sorted(given))} (N its largest size), or pin "
            f"it with --input {missing[0][0].name}=SHAPE (e.g. "
            f"{'x'.join(str(d) if isinstance(d, int) else '1' for d in missing[0][0].dims)})")


def _spec(model, name, names, option):
    if name not in names:
        raise ModelLoadError(f"{option} {name}: the ONNX model has no input {name!r} "
                             f"(inputs: {', '.join(names)})")
    return model.inputs[names.index(name)]


def _default_label(spec, k) -> str:
    d = spec.dims[k]
    return d if isinstance(d, str) else f"{spec.name}_{k}"


def _set_range(ranges, lab, rng) -> None:
    if ranges.setdefault(lab, rng) != rng:
        raise ModelLoadError(f"dim {lab} is given two ranges: {ranges[lab]} and {rng}")


def _no_size(i, k):
    raise ModelLoadError(f"--dynamic {i.name}.{k}=static: dim {k} of ONNX input {i.name!r} has "
                         f"no declared size; pin it with --input {i.name}=SHAPE")


def _clean(name: str) -> str:
    name = re.sub(r"\W", "_", name)
    return "d_" + name if not name or name[0].isdigit() or name in ("min", "max") else name


def _show(dims) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"
