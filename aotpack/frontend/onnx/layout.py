"""ONNX shape and view operators → IR layout ops (VIEW, PERMUTE, SLICE, SELECT, EXPAND,
UNSQUEEZE, SQUEEZE, CAT) and embedding lookups. Shape arguments are known arrays, ints or
symbolic dims (host.py), so a dynamic model gets symbolic views.
"""
from __future__ import annotations

import numpy as np

from aotpack.frontend.aten_table import Unsupported, _slice_attrs
from aotpack.frontend.onnx.host import is_symbolic_array
from aotpack.ir import ops as O
from aotpack.ir.graph import Value
from aotpack.ir.ops import Op
from aotpack.ir.sym import floordiv, is_symbolic, prod

_INT64_MAX = (1 << 63) - 1


def ints(v) -> list:
    """A known 1-D argument as Python ints (symbolic dims kept as expressions)."""
    if v is None:
        return []
    if isinstance(v, Value):
        raise Unsupported("a shape argument computed at run time (only known shapes)")
    return [x if is_symbolic(x) else int(x) for x in np.asarray(v).reshape(-1)]


def _axes(cx, ins, k: int) -> list | None:
    """Axes from input k (opset 13+) or the `axes` attribute (older forms)."""
    if len(ins) > k and ins[k] is not None:
        return [int(a) for a in ints(ins[k])]
    a = cx.attr("axes")
    return None if a is None else [int(x) for x in a]


def _shape(cx, n, ins):
    x = ins[0]
    dims = list(x.shape) if isinstance(x, Value) else list(np.shape(x))
    start, end = int(cx.attr("start", 0)), cx.attr("end")
    dims = dims[start:None if end is None else int(end)]
    if any(is_symbolic(d) for d in dims):
        return np.array(dims, dtype=object)
    return np.array(dims, dtype=np.int64)


def _size(cx, n, ins):
    total = prod(ins[0].shape)
    return np.array(total, dtype=object) if is_symbolic(total) else np.array(total, np.int64)


def _reshape(cx, n, ins):
    x = cx.tensor(ins[0])
    shape = ints(ins[1])
    if not cx.attr("allowzero", 0):
        shape = [x.shape[i] if not is_symbolic(s) and s == 0 else s
                 for i, s in enumerate(shape)]
    holes = [i for i, s in enumerate(shape) if not is_symbolic(s) and s == -1]
    if len(holes) > 1:
        raise Unsupported("more than one -1 in the shape")
    if holes:
        known = prod(s for i, s in enumerate(shape) if i != holes[0])
        total = prod(x.shape)
        inferred = floordiv(total, known)
        if inferred * known != total:
            raise Unsupported(f"shape {shape} for {list(x.shape)}: {total} is not a multiple "
                              f"of {known} at every size")
        shape[holes[0]] = inferred
    shape = tuple(shape)
    if shape == tuple(x.shape):
        return x
    return cx.emit(Op.VIEW, [x], O.ViewAttrs(shape))


def _flatten(cx, n, ins):
    x = cx.tensor(ins[0])
    axis = int(cx.attr("axis", 1))
    axis = axis + len(x.shape) if axis < 0 else axis
    shape = (prod(x.shape[:axis]), prod(x.shape[axis:]))
    return cx.emit(Op.VIEW, [x], O.ViewAttrs(shape))


def _transpose(cx, n, ins):
    x = cx.tensor(ins[0])
    perm = cx.attr("perm")
    perm = tuple(int(p) for p in perm) if perm is not None else \
        tuple(reversed(range(len(x.shape))))
    if perm == tuple(range(len(x.shape))):
        return x
    return cx.emit(Op.PERMUTE, [x], O.PermuteAttrs(perm))


def _unsqueeze(cx, n, ins):
    x = cx.tensor(ins[0])
    axes = _axes(cx, ins, 1) or []
    rank = len(x.shape) + len(axes)
    for a in sorted(a + rank if a < 0 else a for a in axes):
        x = cx.emit(Op.UNSQUEEZE, [x], O.DimAttrs((a,)))
    return x


def _squeeze(cx, n, ins):
    x = cx.tensor(ins[0])
    rank = len(x.shape)
    axes = _axes(cx, ins, 1)
    if axes is None:
        dims = tuple(i for i, d in enumerate(x.shape) if not is_symbolic(d) and d == 1)
    else:
        dims = tuple(sorted(a + rank if a < 0 else a for a in axes))
        for d in dims:
            if x.shape[d] != 1:
                raise Unsupported(f"squeezing dim {d} of size {x.shape[d]}")
    return cx.emit(Op.SQUEEZE, [x], O.DimAttrs(dims)) if dims else x


def _concat(cx, n, ins):
    parts = [cx.tensor(v) for v in ins if not (isinstance(v, np.ndarray) and v.size == 0
                                               and v.ndim == 1)]
    axis = int(cx.attr("axis"))
    if len(parts) == 1:
        return parts[0]
    return cx.emit(Op.CAT, parts, O.DimAttrs((axis + len(parts[0].shape) if axis < 0
                                              else axis,)))


def _slice(cx, n, ins):
    x = cx.tensor(ins[0])
    starts, ends = ints(ins[1]), ints(ins[2])
    rank = len(x.shape)
    axes = ints(ins[3]) if len(ins) > 3 and ins[3] is not None else list(range(len(starts)))
    steps = ints(ins[4]) if len(ins) > 4 and ins[4] is not None else [1] * len(starts)
    for start, end, axis, step in zip(starts, ends, axes, steps):
        if is_symbolic(step) or step < 1:
            raise Unsupported(f"step {step} (only positive steps)")
        axis = int(axis) + rank if int(axis) < 0 else int(axis)
        if not is_symbolic(end) and end >= _INT64_MAX // 2:
            end = None
        if not is_symbolic(start) and start <= -(_INT64_MAX // 2):
            start = 0
        if start == 0 and end is None and step == 1:
            continue
        x = cx.emit(Op.SLICE, [x], _slice_attrs(x, axis, start, end, int(step)))
    return x


def _split(cx, n, ins):
    x = cx.tensor(ins[0])
    axis = int(cx.attr("axis", 0))
    axis = axis + len(x.shape) if axis < 0 else axis
    total = x.shape[axis]
    sizes = ints(ins[1]) if len(ins) > 1 and ins[1] is not None else cx.attr("split")
    if not sizes:
        parts = int(cx.attr("num_outputs", len(n.output)))
        if is_symbolic(total):
            raise Unsupported(f"splitting the dynamic dim {total} in {parts} parts")
        chunk = -(-total // parts)
        sizes = [min(chunk, total - i * chunk) for i in range(parts)]
    outs, start = [], 0
    for size in sizes:
        outs.append(cx.emit(Op.SLICE, [x], O.SliceAttrs(axis, start, start + size)))
        start = start + size
    return outs


def _gather(cx, n, ins):
    data, idx = ins
    axis = int(cx.attr("axis", 0))
    if isinstance(idx, Value):
        if not isinstance(data, np.ndarray) or np.ndim(data) != 2 or axis != 0 \
                or idx.dtype.is_float:
            raise Unsupported("run-time indices into anything but a 2-D weight table along "
                              "axis 0 (an embedding)")
        return cx.emit(Op.EMBEDDING, [cx.tensor(n.input[0]), idx], O.NoAttrs())
    x = cx.tensor(data)
    axis = axis + len(x.shape) if axis < 0 else axis
    if is_symbolic_array(idx):
        raise Unsupported("indices that depend on dynamic dims")
    index = np.asarray(idx).astype(np.int64)
    if index.ndim == 0:
        i = int(index)
        return cx.emit(Op.SELECT, [x], O.SelectAttrs(axis, i + x.shape[axis] if i < 0 else i))
    size = x.shape[axis]
    if is_symbolic(size) and bool((index < 0).any()):
        raise Unsupported(f"negative indices into the dynamic dim {size}")
    flat = [int(i) + size if i < 0 else int(i) for i in index.reshape(-1)]
    runs = _runs(flat)
    if len(runs) > _MAX_RUNS:
        raise Unsupported(f"{len(flat)} known indices in {len(runs)} separate runs (aotpack "
                          f"gathers known indices as at most {_MAX_RUNS} slices)")
    parts = [cx.emit(Op.SLICE, [x], O.SliceAttrs(axis, lo, hi)) for lo, hi in runs]
    y = parts[0] if len(parts) == 1 else cx.emit(Op.CAT, parts, O.DimAttrs((axis,)))
    if index.ndim == 1:
        return y
    shape = tuple(x.shape[:axis]) + index.shape + tuple(x.shape[axis + 1:])
    return cx.emit(Op.VIEW, [y], O.ViewAttrs(shape))


_MAX_RUNS = 64


def _runs(flat: list[int]) -> list[tuple[int, int]]:
    """Known indices as [lo, hi) runs of consecutive indices, in order."""
    runs: list[list[int]] = []
    for i in flat:
        if runs and runs[-1][1] == i:
            runs[-1][1] = i + 1
        else:
            runs.append([i, i + 1])
    return [(lo, hi) for lo, hi in runs]


def _expand(cx, n, ins):
    x = cx.tensor(ins[0])
    shape = ints(ins[1])
    rank = max(len(shape), len(x.shape))
    src = (1,) * (rank - len(x.shape)) + tuple(x.shape)
    want = (1,) * (rank - len(shape)) + tuple(shape)
    out = tuple(s if (not is_symbolic(w) and w == 1) else w for s, w in zip(src, want))
    if out == tuple(x.shape):
        return x
    return cx.emit(Op.EXPAND, [x], O.ExpandAttrs(out))


def _constant_of_shape(cx, n, ins):
    """A fill whose shape follows dynamic dims: one element expanded (a view, no storage)."""
    from onnx import numpy_helper

    value = cx.attr("value")
    one = numpy_helper.to_array(value).reshape(-1)[:1] if value is not None else \
        np.zeros(1, np.float32)
    shape = tuple(ints(ins[0]))
    base = cx.tensor(one.reshape((1,) * len(shape)))
    return cx.emit(Op.EXPAND, [base], O.ExpandAttrs(shape))


LAYOUT_RULES = {
    "Shape": _shape, "Size": _size, "Reshape": _reshape, "Flatten": _flatten,
    "Transpose": _transpose, "Unsqueeze": _unsqueeze, "Squeeze": _squeeze,
    "Concat": _concat, "Slice": _slice, "Split": _split, "Gather": _gather,
    "Expand": _expand, "ConstantOfShape": _constant_of_shape,
}
