"""aten → IR rules for writes at run-time indices: scatter / scatter_add / scatter_reduce along
any dim, and index_put (index_add decomposes to it) with broadcast values, accumulate=True,
whole dims before the index tensors (x[:, i] = v) or a bool mask (x[mask] = 0.5).

Each is one SCATTER_ROWS node over x seen as a table of rows (aten_logic.rows_table): the
indices give every written row its flat id. scatter along a dim writes rows of one element
(aten_logic.coordinates: the index at that dim, aranges elsewhere); index_put writes whole
rows of the dims after the index tensors.

Accumulating writes (scatter_add, scatter_reduce sum/amax/amin/mean, accumulate=True) are the
kernel's atomics, which take f32, int32 and int64 tables: a 16-bit float tensor accumulates in
f32 and is rounded once at the end (torch on the GPU rounds after every add), an 8/16-bit
integer in int32 and is cast back (wrapping as torch's additions do). A float sum is not
deterministic to the last bit (the order of the atomic adds varies from run to run); integer
sums, amax and amin are.
"""
from __future__ import annotations

import math

from aotpack.dtypes import DType
from aotpack.frontend.aten_logic import coordinates, leading_grid, rows_table
from aotpack.frontend.aten_table import Unsupported
from aotpack.ir import ops as O
from aotpack.ir.graph import Value
from aotpack.ir.ops import Op

# what each table dtype accumulates in (the atomics' dtypes)
_WORK = {DType.F32: DType.F32, DType.BF16: DType.F32, DType.F16: DType.F32,
         DType.I64: DType.I64, DType.I32: DType.I32, DType.I16: DType.I32,
         DType.I8: DType.I32, DType.U8: DType.I32}


def write_rows(cx, x: Value, indices: list, values: Value, reduce: str = "none",
               final: bool = True) -> Value:
    """x with `values` written at (reduce "none") or combined into (sum, amax, amin) the
    rows that index tensors `indices` select over x's leading dims; values broadcast to the
    indexed shape (the indices' broadcast shape, then x's remaining dims)."""
    if not isinstance(values, Value) or values.dtype != x.dtype:
        raise Unsupported("index_put of values of another dtype than the tensor, or of a "
                          "Python number")
    work = x.dtype if reduce == "none" else _WORK.get(x.dtype)
    if work is None:
        raise Unsupported(f"accumulating writes into a {x.dtype.value} tensor (no atomics)")
    x_w, values = _cast(cx, x, work), _cast(cx, values, work)
    table, flat = rows_table(cx, x_w, indices, skip_outside=True)
    values = _broadcast_to(cx, values, tuple(flat.shape) + tuple(x.shape[len(indices):]))
    rows = math.prod(flat.shape)
    flat_rows = cx.emit(Op.VIEW, [flat], O.ViewAttrs((rows,)))
    value_rows = cx.emit(Op.VIEW, [values], O.ViewAttrs((rows, table.shape[1])))
    out = cx.emit(Op.SCATTER_ROWS, [table, flat_rows, value_rows], O.ScatterAttrs(reduce))
    out = _cast(cx, out, x.dtype)
    return cx.emit(Op.VIEW, [out], O.ViewAttrs(tuple(x.shape)), final=final)


def _cast(cx, v: Value, dtype: DType) -> Value:
    return v if v.dtype == dtype else cx.emit(Op.CAST, [v], O.CastAttrs(dtype))


def _broadcast_to(cx, v: Value, shape: tuple) -> Value:
    """v as `shape` (torch's broadcasting: v's dims right-aligned, each 1 or equal); v itself
    when its dims already are the shape's (symbolic sizes torch.export checked equal may
    carry two names)."""
    have = tuple(v.shape)
    if len(have) == len(shape) and all(a == b or not (isinstance(a, int) or isinstance(b, int))
                                       for a, b in zip(have, shape)):
        return v
    lead = len(shape) - len(have)
    if lead < 0 or any(a != 1 and a != b for a, b in zip(have, shape[lead:])):
        raise Unsupported(f"index_put values {list(have)} that do not broadcast to the indexed "
                          f"shape {list(shape)}")
    if lead:
        v = cx.emit(Op.VIEW, [v], O.ViewAttrs((1,) * lead + have))
    return cx.emit(Op.EXPAND, [v], O.ExpandAttrs(shape))


def _number(cx, x: Value, value, name: str) -> Value:
    """A Python number as a 0-d constant of x's dtype (broadcast by write_rows)."""
    import torch

    return cx.add_constant(name, torch.tensor(value, dtype=x.dtype.to_torch()))


# ----------------------------------------------------------------------------- index_put
def index_put(cx, x: Value, indices: list, values, accumulate: bool = False) -> Value:
    """x[..., i, j, ...] = values (+= with accumulate): index tensors side by side, whole dims
    before them (aranges) and after them (the written rows); a bool mask: a where."""
    indices = list(indices)
    while indices and indices[-1] is None:
        indices.pop()
    picked = [k for k, t in enumerate(indices) if t is not None]
    if not picked or picked != list(range(picked[0], len(indices))) \
            or not all(isinstance(indices[k], Value) for k in picked):
        raise Unsupported("index_put with index tensors that are not side by side")
    if not isinstance(values, Value):
        values = _number(cx, x, values, "values")
    if any(indices[k].dtype == DType.BOOL for k in picked):
        return _put_masked(cx, x, picked, indices, values, accumulate)
    grid = leading_grid(cx, x, picked[0], [indices[k] for k in picked])
    return write_rows(cx, x, grid, values, "sum" if accumulate else "none")


def _put_masked(cx, x: Value, picked: list, indices: list, values: Value,
                accumulate: bool) -> Value:
    """x[mask] = v with one number v: where(mask, v, x) (x + v with accumulate). A value per
    True entry would need the count of True entries, known only at run time: refused."""
    if len(picked) != 1:
        raise Unsupported("index_put by a bool mask beside other index tensors")
    if math.prod(values.shape) != 1:
        raise Unsupported(f"index_put by a bool mask of values {list(values.shape)} (only one "
                          f"number: x[mask] = 0.5; a value per True entry has a run-time size)")
    first, mask = picked[0], indices[picked[0]]
    rest = len(x.shape) - first - len(mask.shape)
    mask = cx.emit(Op.VIEW, [mask], O.ViewAttrs((1,) * first + tuple(mask.shape) + (1,) * rest))
    if values.shape:
        values = cx.emit(Op.VIEW, [values], O.ViewAttrs(()))
    new = cx.emit(Op.ADD, [x, values], O.BinaryAttrs()) if accumulate else values
    return cx.emit(Op.WHERE, [mask, new, x], O.NoAttrs(), final=True)


# ----------------------------------------------------------------------------- scatter
def _scatter(cx, x, dim, index, src=None, value=None, reduce=None):
    """scatter(x, dim, index, src | value[, reduce="add"]) (not in place): x copied, then
    src's elements written at x[c0, .., index, .., c_r-1]. Duplicate indices leave one of the
    written values (torch leaves it undefined); reduce="add" adds them all."""
    mode = {None: "none", "add": "sum"}.get(reduce)
    if mode is None:
        raise Unsupported(f"scatter with reduce={reduce!r} (only 'add': no atomic multiply)")
    return _scatter_elements(cx, x, dim, index, src if value is None else value, mode)


def _scatter_add(cx, x, dim, index, src):
    return _scatter_elements(cx, x, dim, index, src, "sum")


_IDENTITY = {"sum": 0, "mean": 0, "amax": "-inf", "amin": "inf"}


def _scatter_reduce(cx, x, dim, index, src, reduce, include_self=True):
    """scatter_reduce(x, dim, index, src, reduce, include_self): sum / amax / amin by the
    kernel's atomics, mean as a sum over a count; with include_self=False the indexed
    elements first become the reduction's identity. prod is refused (no atomic multiply)."""
    if reduce not in _IDENTITY:
        raise Unsupported(f"scatter_reduce(reduce={reduce!r}) (sum, mean, amax and amin only: "
                          f"no atomic multiply)")
    if reduce == "mean":
        return _scatter_mean(cx, x, dim, index, src, include_self)
    if not include_self:
        x = _scatter_elements(cx, x, dim, index, _identity(cx, x, reduce), "none", final=False)
    return _scatter_elements(cx, x, dim, index, src, reduce)


def _identity(cx, x: Value, reduce: str) -> Value:
    import torch

    value = _IDENTITY[reduce]
    if isinstance(value, str) and not x.dtype.is_float:  # an integer's most extreme value
        info = torch.iinfo(x.dtype.to_torch())
        value = info.min if value == "-inf" else info.max
    return _number(cx, x, float(value) if isinstance(value, str) else value, "identity")


def _scatter_mean(cx, x, dim, index, src, include_self):
    """The mean of what lands on each element (self counted once with include_self), in f32:
    the sums by one scatter-add, the counts by another, divided where anything landed."""
    import torch

    if not x.dtype.is_float:
        raise Unsupported("scatter_reduce(reduce='mean') of integers (torch rounds those "
                          "means down; only floats)")
    x32, src32 = _cast(cx, x, DType.F32), _cast(cx, src, DType.F32)
    if not include_self:
        x32 = _scatter_elements(cx, x32, dim, index, _identity(cx, x32, "sum"), "none",
                                final=False)
    total = _scatter_elements(cx, x32, dim, index, src32, "sum", final=False)
    start = cx.add_constant("count", torch.full((1,) * len(x.shape), float(include_self)))
    start = cx.emit(Op.EXPAND, [start], O.ExpandAttrs(tuple(x.shape)))
    count = _scatter_elements(cx, start, dim, index, _number(cx, x32, 1.0, "one"), "sum",
                              final=False)
    count = cx.emit(Op.MAX, [count], O.BinaryAttrs(1.0))  # nothing landed: x / 1
    mean = cx.emit(Op.DIV, [total, count], O.BinaryAttrs(), final=x.dtype == DType.F32)
    return mean if x.dtype == DType.F32 else cx.emit(Op.CAST, [mean], O.CastAttrs(x.dtype),
                                                     final=True)


def _scatter_elements(cx, x, dim, index, src, reduce: str, final: bool = True) -> Value:
    """src's elements written at (or combined into) x[c0, .., index, .., c_r-1]: a row
    scatter with rows of one element. Only index's shape of src is read (as torch)."""
    table, coords = coordinates(cx, x, dim, index, "scatter")
    if not isinstance(src, Value):
        src = _number(cx, x, src, "src")
    elif src.shape:  # (a 0-d src: one number, broadcast by write_rows)
        src = _cut_to(cx, src, tuple(index.shape))
        if table is not x:  # (x seen as [before, dim, after]: src too)
            src = cx.emit(Op.VIEW, [src], O.ViewAttrs(tuple(coords[1].shape)))
    if table is x:
        return write_rows(cx, x, coords, src, reduce, final)
    out = write_rows(cx, table, coords, src, reduce, final=False)
    return cx.emit(Op.VIEW, [out], O.ViewAttrs(tuple(x.shape)), final=final)


def _cut_to(cx, src: Value, shape: tuple) -> Value:
    """src's leading part of `shape` (torch's scatter reads only the index's extent)."""
    for k, (have, want) in enumerate(zip(src.shape, shape)):
        if have == want:
            continue
        if not (isinstance(have, int) and isinstance(want, int)):
            raise Unsupported(f"scatter with src {list(src.shape)} and index {list(shape)} "
                              f"whose sizes differ along a dynamic dim")
        src = cx.emit(Op.SLICE, [src], O.SliceAttrs(k, 0, want))
    return src


RULES = {
    "aten.scatter.src": _scatter, "aten.scatter.value": _scatter,
    "aten.scatter.reduce": _scatter, "aten.scatter.value_reduce": _scatter,
    "aten.scatter_add.default": _scatter_add, "aten.scatter_reduce.two": _scatter_reduce,
}
