"""`--input NAME=SHAPE[:DTYPE]`: example inputs from the command line.

SHAPE is dims joined by `x`, or by commas (needed when a label contains an x; `ids=max_len:
1..64,` for one dim): a size (`128`), a range (`1..64`: the dim varies at run time, as with
`--dynamic`), a labelled range (`batch:1..64`: the dim's name in the bundle), or a label given
elsewhere (`batch`: the same dim). DTYPE: bf16, f16, f32, f64, i64, i32, i16, i8, u8 or bool
(torch names like int64 or bfloat16 too). Without it, an input the model already has keeps its
dtype, a traced TorchScript input keeps the dtype it was traced with, and otherwise inputs named
like token ids, positions or masks are int64 and the rest take the model's floating dtype.

Example values are drawn once, seeded: floats ~ N(0, 1); token ids in the range of the model's
smallest embedding; masks all ones; other integers zero. A dim written as a range gets an
example size inside it that no other dim of the inputs has, so that torch.export does not
take two dims for one. Inputs not given keep their example, except the dims of the same example
size as a dim an option changed: those follow it (an attention mask beside its token ids).
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass, replace

from aotpack.frontend.dynamic import input_names
from aotpack.frontend.load import LoadedModel, ModelLoadError

_DIM = re.compile(r"^(?:(?P<size>\d+)|(?:(?P<label>[A-Za-z_]\w*):)?(?P<lo>\d+)\.\.(?P<hi>\d+)"
                  r"|(?P<ref>[A-Za-z_]\w*))$")
_DTYPES = {
    "bf16": "bfloat16", "bfloat16": "bfloat16", "f16": "float16", "fp16": "float16",
    "float16": "float16", "half": "float16", "f32": "float32", "fp32": "float32",
    "float32": "float32", "float": "float32", "f64": "float64", "float64": "float64",
    "double": "float64", "i64": "int64", "int64": "int64", "long": "int64", "i32": "int32",
    "int32": "int32", "int": "int32", "i16": "int16", "int16": "int16", "i8": "int8",
    "int8": "int8", "u8": "uint8", "uint8": "uint8", "bool": "bool",
}
_INT_NAMES = re.compile(r"(^|_)(ids|indices|idx|positions?|tokens?|mask)$")


@dataclass(frozen=True)
class Dim:
    size: int | None = None  # a static size (with `label`: a range of one, LABEL:N..N)
    label: str | None = None  # a range's name, or the label this dim refers to
    lo: int | None = None
    hi: int | None = None


@dataclass(frozen=True)
class InputOption:
    name: str
    dims: tuple[Dim, ...]
    dtype: str | None  # a torch dtype's name, or None: the default


def parse_input(text: str) -> InputOption:
    """One `--input` option; ModelLoadError naming what is malformed."""
    name, eq, shape = text.strip().partition("=")
    head, colon, tail = shape.rpartition(":")
    dtype = None
    if colon and not tail[:1].isdigit():  # a dtype, not a labelled range's `:LO..HI`
        shape, dtype = head, tail
    # a name is anything without '=' or spaces: ONNX's default names (input.1, x:0) too
    if not eq or not re.fullmatch(r"[^=\s]+", name) or not shape:
        raise ModelLoadError(f"--input {text!r}: expected NAME=SHAPE[:DTYPE], e.g. "
                             f"x=1x3x224x224:bf16 or input_ids=1..64x128:int64")
    if dtype is not None and dtype.lower() not in _DTYPES:
        raise ModelLoadError(f"--input {text!r}: unknown dtype {dtype!r} (use one of bf16, f16, "
                             f"f32, f64, i64, i32, i16, i8, u8, bool)")
    commas = "," in shape
    parts = [p for p in shape.split(",") if p.strip()] if commas else shape.split("x")
    dims = tuple(_parse_dim(p, text, commas) for p in parts)
    return InputOption(name, dims, dtype and _DTYPES[dtype.lower()])


def _parse_dim(part: str, text: str, commas: bool) -> Dim:
    d = _DIM.match(part.strip())
    if d is None:
        hint = "" if commas else " (a label with an x in it: separate the dims with commas)"
        raise ModelLoadError(f"--input {text!r}: dim {part!r} is none of SIZE, LO..HI, "
                             f"LABEL:LO..HI or LABEL{hint}")
    if d["size"] is not None:
        return Dim(size=int(d["size"]))
    if d["ref"] is not None:
        return Dim(label=d["ref"])
    lo, hi = int(d["lo"]), int(d["hi"])
    if not 1 <= lo <= hi:
        raise ModelLoadError(f"--input {text!r}: the range {lo}..{hi} must have 1 <= LO <= HI")
    return Dim(size=lo, label=d["label"]) if lo == hi else Dim(label=d["label"], lo=lo, hi=hi)


def apply_inputs(loaded: LoadedModel, options: list[str]) -> tuple[LoadedModel, list[str]]:
    """(`loaded` with the example inputs the options give, the `--dynamic` options their
    ranges declare). A model without example inputs needs an option for each input it takes."""
    parsed = [parse_input(o) for o in options]
    if not parsed and loaded.inputs is not None:
        return loaded, []
    names = _names(loaded)
    given = _check_names(parsed, names, loaded)
    count = len(loaded.inputs) if loaded.inputs is not None else \
        max([names.index(n) + 1 for n in given] + [_required(loaded.model)])
    missing = [n for n in names[:count] if n not in given
               and (loaded.inputs is None or names.index(n) >= len(loaded.inputs))]
    if missing:
        raise ModelLoadError(f"{_what(loaded)} needs every input up to the last one given, in "
                             f"forward's order: add --input for {', '.join(missing)} "
                             f"(inputs: {', '.join(names)})")
    sizes = _example_sizes(parsed, loaded)
    static = {d.label for o in parsed for d in o.dims if d.size is not None and d.label}
    tensors, dynamic, moved = [], [], {}
    for i, name in enumerate(names[:count]):
        if name in given:
            opt = given[name]
            shape = [d.size if d.size is not None else sizes[_label(opt, k)]
                     for k, d in enumerate(opt.dims)]
            dynamic += _dynamic_options(opt, static)
            old = _old(loaded, i)
            if old is not None:
                _record_moves(moved, old.shape, shape, opt, static)
            dtype = opt.dtype or _script_dtype(loaded, i)
            tensors.append(_example(name, shape, dtype, old, loaded.model, seed=i))
        else:
            tensors.append(None)
    notes = []
    for i, name in enumerate(names[:count]):
        if tensors[i] is None:
            tensors[i], more, said = _follow(name, loaded.inputs[i], moved, loaded.model, i)
            dynamic, notes = dynamic + more, notes + said
    return replace(loaded, inputs=tuple(tensors), notes=loaded.notes + notes), dynamic


def is_script(model) -> bool:
    import torch

    return isinstance(model, torch.jit.ScriptModule)


# ------------------------------------------------------------------------------ names
def _names(loaded: LoadedModel) -> list[str]:
    if loaded.input_names is not None:
        return list(loaded.input_names)
    if loaded.inputs is None:
        _check_signature(loaded.model)
    n = len(loaded.inputs) if loaded.inputs is not None else None
    return input_names(loaded.model, n)


def _check_signature(model) -> None:
    """A saved module's forward must name the inputs it needs, by position."""
    import inspect

    params = inspect.signature(model.forward).parameters.values()
    star = [p.name for p in params if p.kind == p.VAR_POSITIONAL]
    keyword = [p.name for p in params if p.kind == p.KEYWORD_ONLY and p.default is p.empty]
    if star or keyword:
        what = f"*{star[0]}" if star else f"keyword-only {', '.join(keyword)}"
        raise ModelLoadError(f"the saved model's forward takes {what}: aotpack passes inputs by "
                             f"position and by name; save a module whose forward names each "
                             f"input it needs, or build from a file.py:factory")


def _required(model) -> int:
    """How many inputs the model's forward needs (those without a default)."""
    import inspect

    if is_script(model):
        return len(model.forward.schema.arguments) - 1  # the converter takes every argument
    if hasattr(model, "graph_signature"):
        return len(model.graph_signature.user_inputs)
    return sum(1 for p in inspect.signature(model.forward).parameters.values()
               if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
               and p.default is p.empty)


def _check_names(parsed, names, loaded) -> dict[str, InputOption]:
    given: dict[str, InputOption] = {}
    for opt in parsed:
        if opt.name not in names:
            raise ModelLoadError(f"--input {opt.name}: {_what(loaded)} has no input "
                                 f"{opt.name!r} (inputs: {', '.join(names) or 'none'})")
        if opt.name in given:
            raise ModelLoadError(f"--input {opt.name} is given twice")
        old = _old(loaded, names.index(opt.name))
        if old is not None and old.dim() != len(opt.dims):
            raise ModelLoadError(f"--input {opt.name}: {len(opt.dims)} dims, but the example "
                                 f"input has {old.dim()}")
        given[opt.name] = opt
    if loaded.inputs is None and not given:
        raise ModelLoadError(_no_inputs(loaded, names))
    return given


def _no_inputs(loaded: LoadedModel, names: list[str]) -> str:
    """A model with no example inputs and no --input: how to give them (forward's first
    parameters: the ones after them are mostly optional), and for a transformers language
    model, the task that needs none."""
    shown = ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")
    text = (f"{_what(loaded)} carries no example inputs: give each it needs with --input "
            f"NAME=SHAPE[:DTYPE] (forward takes {shown or 'no named inputs'}), e.g. --input "
            f"{names[0] if names else 'x'}=1x128")
    transformers = sys.modules.get("transformers")
    if transformers is not None and isinstance(loaded.model, transformers.GenerationMixin):
        text += ("; or, for text generation (prefill and decode over a KV cache), build with "
                 "--task text-generation, which makes its own inputs")
    return text


def _what(loaded: LoadedModel) -> str:
    return "the TorchScript model" if loaded.kind == "torchscript" else "the model"


def _old(loaded: LoadedModel, i: int):
    return loaded.inputs[i] if loaded.inputs is not None and i < len(loaded.inputs) else None


# ------------------------------------------------------------------------------ sizes
def _label(opt: InputOption, k: int) -> str:
    return opt.dims[k].label or f"{opt.name}_{k}"


def _example_sizes(parsed, loaded) -> dict[str, int]:
    """{label: example size}: a range's is the smallest size from 8 up (or the range's bottom,
    if higher) inside the range that no static dim nor another range uses, never 0 or 1 where
    the range goes higher; a labelled range of one (B:4..4) is its size."""
    ranges: dict[str, tuple[int, int]] = {}
    sizes: dict[str, int] = {}
    for opt in parsed:
        for k, d in enumerate(opt.dims):
            if d.label is None or (d.lo is None and d.size is None):
                continue
            rng = (d.lo, d.hi) if d.lo is not None else (d.size, d.size)
            label = _label(opt, k)
            if ranges.setdefault(label, rng) != rng:
                raise ModelLoadError(f"--input: dim {label} given two ranges")
    for opt in parsed:
        for k, d in enumerate(opt.dims):
            if d.lo is not None and d.label is None:
                ranges[_label(opt, k)] = (d.lo, d.hi)
            if d.size is None and d.lo is None and d.label not in ranges:
                hint = " (a label with an x in it? separate the dims with commas)" \
                    if "x" in d.label or len(d.label) < 3 else ""
                raise ModelLoadError(f"--input {opt.name}: dim {d.label} has no range (write "
                                     f"{d.label}:LO..HI where it first appears){hint}")
    taken = {d.size for opt in parsed for d in opt.dims if d.size is not None}
    taken |= {int(s) for t in (loaded.inputs or ()) for s in t.shape}
    for label, (lo, hi) in ranges.items():
        if lo == hi:
            sizes[label] = lo
            continue
        # torch.export fixes a dim whose example is 0 or 1, and takes two dynamic dims with one
        # example size for one dim; a static dim of the same size only looks alike
        low = max(lo, 2)
        start = max(low, min(8, hi))
        free = [v for v in range(start, hi + 1) if v not in taken] or \
            [v for v in range(low, hi + 1) if v not in taken] or \
            [v for v in range(low, hi + 1) if v not in sizes.values()] or [low]
        sizes[label] = free[0]
        taken.add(free[0])
    return sizes


def _dynamic_options(opt: InputOption, static: set) -> list[str]:
    """The option's dims as `--dynamic` options (`static`: labels of ranges of one)."""
    out = []
    for k, d in enumerate(opt.dims):
        if d.lo is not None:
            out.append(f"{opt.name}.{k}={_label(opt, k)}:{d.lo}..{d.hi}")
        elif d.size is None and d.label not in static:
            out.append(f"{opt.name}.{k}={d.label}")
    return out


def _record_moves(moved: dict, old_shape, new_shape, opt: InputOption, static: set) -> None:
    """{old example size: (new size, label of its range or None)}; a size that moves two ways
    (or that is 1: too common to follow) maps to None."""
    for k, (a, b) in enumerate(zip(old_shape, new_shape)):
        d = opt.dims[k]
        label = _label(opt, k) if d.lo is not None or (d.size is None and d.label not in static) \
            else None
        if int(a) == 1 or (int(a) == b and label is None):
            continue
        if moved.setdefault(int(a), (b, label)) != (b, label):
            moved[int(a)] = None


def _follow(name: str, old, moved: dict, model, seed: int):
    """An input no option gives: its example again where one of its dims has the example size
    of a dim an option changed (that dim's new size, tied to its range)."""
    hits = [(e, int(s), moved[int(s)]) for e, s in enumerate(old.shape) if moved.get(int(s))]
    if not hits:
        return old, [], []
    shape = list(old.shape)
    for e, _, (size, _) in hits:
        shape[e] = size
    options = [f"{name}.{e}={label}" for e, _, (_, label) in hits if label is not None]
    notes = [f"--input: {name}.{e} (example size {s}) follows "
             f"{label or size} as the dim of that size given; give --input {name} to change it"
             for e, s, (size, label) in hits]
    return _example(name, shape, None, old, model, seed), options, notes


# ------------------------------------------------------------------------------ values
_SCALAR_TYPES = {"Long": "int64", "Int": "int32", "Short": "int16", "Char": "int8",
                 "Byte": "uint8", "Bool": "bool", "Float": "float32", "Double": "float64",
                 "Half": "float16", "BFloat16": "bfloat16"}


def _script_dtype(loaded: LoadedModel, i: int) -> str | None:
    """int64 for a TorchScript input the module uses as indices (an archive keeps no input
    dtypes; a traced module in memory does: its integer ones are kept)."""
    if not is_script(loaded.model):
        return None
    from aotpack.frontend.saved import index_inputs

    try:
        t = list(loaded.model.graph.inputs())[1 + i].type()
        name = _SCALAR_TYPES.get(t.scalarType()) if t.kind() == "TensorType" else None
    except (IndexError, RuntimeError):
        name = None
    if name in ("int64", "int32", "int16", "int8", "uint8", "bool"):
        return name
    return "int64" if i in index_inputs(loaded.model) else None


def _example(name: str, shape: list[int], dtype: str | None, old, model, seed: int):
    import torch

    if dtype is not None:
        td = getattr(torch, dtype)
    elif old is not None:
        td = old.dtype
    elif _INT_NAMES.search(name.lower()):
        td = torch.int64
    else:
        td = _float_dtype(model)
    g = torch.Generator().manual_seed(seed)
    if td.is_floating_point:
        return torch.randn(shape, generator=g, dtype=torch.float32).to(td)
    if td == torch.bool or name.lower().endswith("mask"):
        return torch.ones(shape, dtype=td)
    if re.search(r"(^|_)(ids|tokens?)$", name.lower()):
        return torch.randint(0, _vocab(model), shape, generator=g, dtype=td)
    if old is not None and old.numel():  # keep the example's values where they fit
        flat = old.flatten()
        return flat[torch.arange(int(torch.tensor(shape).prod())) % flat.numel()].reshape(shape)
    return torch.zeros(shape, dtype=td)


def _float_dtype(model):
    """The dtype of the model's first floating parameter or buffer (float32 if none)."""
    import torch

    tensors = list(model.parameters()) + list(model.buffers()) if hasattr(model, "buffers") \
        else []
    return next((t.dtype for t in tensors if t.is_floating_point()), torch.float32)


def _vocab(model) -> int:
    """Rows of the model's smallest embedding table (ids below it are valid everywhere)."""
    rows = [int(m.weight.shape[0]) for m in getattr(model, "modules", lambda: [])()
            if _kind(m) == "Embedding" and hasattr(m, "weight")]
    return min(rows) if rows else 2


def _kind(module) -> str:
    return getattr(module, "original_name", None) or type(module).__name__
