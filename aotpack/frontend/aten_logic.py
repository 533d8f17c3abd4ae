"""aten → IR rules for comparisons, logic and selection on run-time values: what models compute
from token ids and masks (`attention_mask.bool()`, `input_ids.ne(pad)`, `where(mask, x, -inf)`,
`masked_fill`), and advanced indexing by constant index tensors (transformers' mask code picks
`mask[batch_arange, kv_arange]`).

On constants these ops fold at translation (translate._fold_constant_call); the rules here see a
run-time operand. The comparisons and logic become pointwise kernels (bool results); indexing
by constant indices that step evenly through the indexed dims becomes a strided view, no kernel.
"""
from __future__ import annotations

import math

from aotpack.dtypes import DType
from aotpack.frontend.aten_table import Unsupported
from aotpack.ir import ops as O
from aotpack.ir.graph import Value
from aotpack.ir.ops import Op
from aotpack.ir.types import contiguous_strides

# x < c is c > x: the op with its operands swapped
_SWAPPED = {Op.EQ: Op.EQ, Op.NE: Op.NE, Op.LT: Op.GT, Op.GT: Op.LT, Op.LE: Op.GE, Op.GE: Op.LE}


def _compare(op: Op):
    def rule(cx, x, y):
        if isinstance(x, Value) and isinstance(y, Value):
            return cx.emit(op, [x, y], O.BinaryAttrs(), final=True)
        if isinstance(x, Value):
            return cx.emit(op, [x], O.BinaryAttrs(float(y)), final=True)
        if isinstance(y, Value):
            return cx.emit(_SWAPPED[op], [y], O.BinaryAttrs(float(x)), final=True)
        raise Unsupported("both operands are Python numbers")
    return rule


def _logic(op: Op):
    """logical_and/or, and bitwise_and/or of bools (of integers they are bit operations).
    AND with a constant that is all True (OR: all False) is the other operand, broadcast: the
    mask code of transformers ANDs a run-time padding mask with such constants, and a [B, 1,
    S, T] mask materialized from a [B, 1, 1, T] one would be written and read for nothing."""
    def rule(cx, x, y):
        operands = [v for v in (x, y) if isinstance(v, Value)]
        if any(v.dtype != DType.BOOL for v in operands) and "bitwise" in str(cx.fx_node.target):
            raise Unsupported("bit operations on integers (only on bools)")
        if len(operands) == 2:
            for keep, other in ((x, y), (y, x)):
                if _constant_all(cx, other, op == Op.AND) and keep.dtype == DType.BOOL:
                    return _broadcast(cx, keep)
            return cx.emit(op, [x, y], O.BinaryAttrs(), final=True)
        value, number = (x, y) if isinstance(x, Value) else (y, x)
        return cx.emit(op, [value], O.BinaryAttrs(float(bool(number))), final=True)
    return rule


def _constant_all(cx, v: Value, truth: bool) -> bool:
    """v is a constant (at every probe size) whose every entry is `truth`."""
    samples = cx.constant_samples(v)
    return samples is not None and all(bool((t.bool() == truth).all()) for _, t in samples)


def _broadcast(cx, v: Value) -> Value:
    """v broadcast to the fx node's shape (a view)."""
    shape = tuple(cx.out_shape())
    if len(v.shape) < len(shape):
        v = cx.emit(Op.VIEW, [v], O.ViewAttrs((1,) * (len(shape) - len(v.shape))
                                              + tuple(v.shape)))
    return cx.emit(Op.EXPAND, [v], O.ExpandAttrs(shape), final=True)


def _not(cx, x):
    if x.dtype != DType.BOOL and "bitwise" in str(cx.fx_node.target):
        raise Unsupported("bitwise_not of integers (only of bools)")
    return cx.emit(Op.NOT, [x], O.NoAttrs(), final=True)


def _where(cx, cond, a, b):
    """where(cond, a, b); a Python number becomes a 0-d constant of the result's dtype."""
    import torch

    dtype = cx.fx_node.meta["val"].dtype
    a, b = (v if isinstance(v, Value) else cx.add_constant(name, torch.tensor(v, dtype=dtype))
            for v, name in ((a, "then"), (b, "else")))
    if cond.dtype != DType.BOOL:
        cond = cx.emit(Op.CAST, [cond], O.CastAttrs(DType.BOOL))
    return cx.emit(Op.WHERE, [cond, a, b], O.NoAttrs(), final=True)


def _masked_fill(cx, x, mask, value):
    return _where(cx, mask, value, x)


def _argmax(cx, x, dim=None, keepdim=False):
    if dim is None:
        raise Unsupported("argmax over all elements (give a dim)")
    dim = dim + len(x.shape) if dim < 0 else dim
    return cx.emit(Op.ARGMAX, [x], O.ReduceAttrs((dim,), bool(keepdim)), final=True)


def _cumsum(cx, x, dim, dtype=None):
    out = DType.from_torch(cx.fx_node.meta["val"].dtype)
    dim = dim + len(x.shape) if dim < 0 else dim
    return cx.emit(Op.CUMSUM, [x], O.ScanAttrs(dim, out), final=True)


# ----------------------------------------------------------------------------- indexing
def _gather(cx, x, dim, index, sparse_grad=False):
    """gather(x, dim, index): out[..., j, ...] = x[..., index[..., j, ...], ...]. From a
    constant whose entries are all equal (RoBERTa's all-zero token-type buffer) it is that
    value; otherwise x is indexed at every element, index along `dim` and the element's own
    coordinates elsewhere (an element-wise row gather)."""
    samples = cx.constant_samples(x) if isinstance(x, Value) else None
    if samples:
        first = samples[0][1].reshape(-1)[:1]
        if first.numel() and all(bool((t == first).all()) for _, t in samples):
            return _broadcast(cx, cx.add_constant("value", first.reshape(())))
    coords = _coordinates(cx, x, dim, index, "gather")  # (x is not 0-d past this)
    d = dim % len(x.shape)
    size = x.shape[d]
    if isinstance(size, int):  # torch raises on an index outside the dim; read within its row
        clamped = cx.emit(Op.MAX, [index], O.BinaryAttrs(0))
        coords[d] = cx.emit(Op.MIN, [clamped], O.BinaryAttrs(size - 1))
    return _gather_rows(cx, x, coords, list(range(len(x.shape))))


def _coordinates(cx, x: Value, dim: int, index: Value, what: str) -> list[Value]:
    """The index tensors that make x[c0, .., index, .., c_r-1] the gather (or scatter) along
    `dim`: `index` at dim, an arange over each other dim of index's shape (constants, so
    index's shape must be static)."""
    import torch

    rank = len(x.shape)
    dim = dim + rank if dim < 0 else dim
    if rank == 0:
        raise Unsupported(f"{what} of a 0-d tensor (x.reshape(1) first)")
    if not isinstance(index, Value) or len(index.shape) != rank:
        raise Unsupported(f"{what} with an index of another rank than the tensor")
    if not all(isinstance(n, int) for n in index.shape):
        raise Unsupported(f"{what} with an index whose shape varies at run time")
    coords = []
    for k, n in enumerate(index.shape):
        if k == dim:
            coords.append(index)
            continue
        shape = [1] * rank
        shape[k] = n
        coords.append(cx.add_constant(f"coord{k}", torch.arange(n).reshape(shape)))
    return coords


def _scatter(cx, x, dim, index, src=None, value=None, reduce=None):
    """scatter(x, dim, index, src | value) (not in place): x copied, then src's elements
    written at x[c0, .., index, .., c_r-1] (an element-wise row scatter). Duplicate indices
    leave one of the written values, as torch leaves it undefined; a reduction is refused."""
    import torch

    if reduce is not None:
        raise Unsupported(f"scatter with reduce={reduce!r} (the writes do not accumulate)")
    coords = _coordinates(cx, x, dim, index, "scatter")
    if not isinstance(src, Value):
        fill = src if value is None else value
        src = cx.add_constant("src", torch.full(tuple(index.shape), fill,
                                                dtype=x.dtype.to_torch()))
    elif tuple(src.shape) != tuple(index.shape):
        raise Unsupported(f"scatter with src {list(src.shape)} larger than its index "
                          f"{list(index.shape)}: pass src[:, ...] cut to the index's shape")
    return scatter_rows(cx, x, coords, src)


def _index(cx, x, indices):
    """x[i0, i1, ...] (None: the whole dim): a constant x with constant indices folds;
    constant indices that step evenly through x's dims are a strided view of x; indices
    computed at run time over the leading dims are a row gather (_gather_rows)."""
    import torch

    if not isinstance(x, Value):
        raise Unsupported("indexing a Python value")
    folded = _index_constants(cx, x, indices)
    if folded is not None:
        return folded
    picked = [k for k, t in enumerate(indices) if t is not None]
    if not picked or picked != list(range(picked[0], picked[-1] + 1)):
        raise Unsupported("index tensors that are not side by side")
    samples = []
    for k in picked:
        got = cx.constant_samples(indices[k])
        if got is None:  # an index computed at run time: a row gather
            return _gather_rows(cx, x, [indices[k] for k in picked], picked)
        samples.append(got)
    out_shape = cx.out_shape()
    first, n_idx = picked[0], len(picked)
    rank_b = len(out_shape) - (len(x.shape) - n_idx)  # the broadcast index dims
    coeffs = None
    for j in range(len(samples[0])):
        point = samples[0][j][0]
        tensors = torch.broadcast_tensors(*(s[j][1] for s in samples))
        sizes = [_at(x.shape[k], point) for k in picked]
        fit = [_affine(t.long(), size) for t, size in zip(tensors, sizes)]
        if any(f is None for f in fit):
            raise Unsupported("index tensors that do not step evenly through the dims "
                              "(a general gather)")
        coeffs = fit if coeffs is None else _agree(coeffs, fit)
    strides = contiguous_strides(tuple(x.shape))
    x_strides = [strides[k] for k in picked]
    b_strides = []
    for d in range(rank_b):
        b_strides.append(sum((c[1][d] or 0) * s for c, s in zip(coeffs, x_strides)))
    offset = sum(c[0] * s for c, s in zip(coeffs, x_strides))
    view_strides = (tuple(strides[:first]) + tuple(b_strides)
                    + tuple(strides[first + n_idx:]))
    attrs = O.StridedAttrs(tuple(out_shape), view_strides, offset)
    return cx.emit(Op.AS_STRIDED, [x], attrs, final=True)


def _index_select(cx, x, dim, index):
    """x.index_select(dim, constant indices) as slices of x concatenated: torch.roll (Swin's
    cyclic shift) decomposes to this with two runs of consecutive indices. A constant x is
    folded; run-time indices on the leading dim are a row gather."""
    dim = dim + len(x.shape) if dim < 0 else dim
    full = [None] * dim + [index]
    if cx.constant_samples(index) is None or cx.constant_value(x) is not None:
        return _index(cx, x, full)
    size = x.shape[dim]
    picks = cx.constant_value(index)
    if not isinstance(size, int) or picks is None:
        raise Unsupported("index_select by constant indices along a dynamic dim")
    runs = _runs([int(i) % size for i in picks.reshape(-1).tolist()])
    if len(runs) > 16:
        raise Unsupported(f"index_select picking {len(runs)} separate runs (a general gather)")
    parts = [cx.emit(Op.SLICE, [x], O.SliceAttrs(dim, lo, hi, 1)) for lo, hi in runs]
    if len(parts) == 1:
        return cx.emit(Op.COPY, parts, O.NoAttrs(), final=True)
    return cx.emit(Op.CAT, parts, O.DimAttrs((dim,)), final=True)


def _roll(cx, x, shifts, dims=()):
    shifts = [shifts] if isinstance(shifts, int) else list(shifts)
    dims = [dims] if isinstance(dims, int) else list(dims)
    if len(shifts) != len(dims) or not dims:
        raise Unsupported("roll of the flattened tensor (give dims)")
    for shift, dim in zip(shifts, dims):
        dim = dim + len(x.shape) if dim < 0 else dim
        size = x.shape[dim]
        if not isinstance(size, int):
            raise Unsupported("roll along a dynamic dim")
        shift %= size
        if shift:
            x = cx.emit(Op.CAT, [cx.emit(Op.SLICE, [x], O.SliceAttrs(dim, size - shift, size, 1)),
                                 cx.emit(Op.SLICE, [x], O.SliceAttrs(dim, 0, size - shift, 1))],
                        O.DimAttrs((dim,)))
    return cx.emit(Op.COPY, [x], O.NoAttrs(), final=True)


def _runs(picks: list[int]) -> list[tuple[int, int]]:
    """[(start, end)] of consecutive ascending indices."""
    runs = []
    for i in picks:
        if runs and runs[-1][1] == i:
            runs[-1] = (runs[-1][0], i + 1)
        else:
            runs.append((i, i + 1))
    return runs


def _index_constants(cx, x: Value, indices) -> Value | None:
    """A weight indexed by constant indices (Swin's relative-position bias table picked by
    its index buffer): computed now, a constant like any folded one."""
    table = cx.constant_value(x)
    if table is None:
        return None
    picks = [None if t is None else cx.constant_value(t) for t in indices]
    if any(p is None for p, t in zip(picks, indices) if t is not None):
        return None
    return cx.add_constant("picked", table[tuple(p for p in picks)].contiguous())


def _gather_rows(cx, x: Value, idx: list, picked: list[int]) -> Value:
    """x[i0, i1, ...] over x's leading dims with index tensors of which some are computed at
    run time (CLIP's pooling: hidden[arange(B), ids.argmax(-1)]): x seen as a table of rows
    [prod(indexed dims), prod(the rest)], read by the embedding kernel at flat row ids
    i0 * n1 + i1 (a pointwise int64 expression; negative indices count from the end)."""
    if picked[0] != 0:
        raise Unsupported("indices computed at run time on other than the leading dims")
    table, flat = _rows_table(cx, x, idx)
    out = cx.emit(Op.EMBEDDING, [table, flat], O.NoAttrs())
    return cx.emit(Op.VIEW, [out], O.ViewAttrs(tuple(cx.out_shape())), final=True)


def scatter_rows(cx, x: Value, indices: list, values: Value) -> Value:
    """index_put(x, [i0, i1, ...], values) with run-time index tensors over x's leading dims
    (a KV cache written at (row, position)): x as a table of rows, values as [R, C] rows
    written at the flat row ids (as _gather_rows reads them)."""
    if not all(isinstance(v, Value) for v in indices) or not indices:
        raise Unsupported("index_put with other than index tensors on the leading dims")
    if not isinstance(values, Value) or values.dtype != x.dtype:
        raise Unsupported("index_put of values of another dtype than the tensor, or of a "
                          "Python number")
    table, flat = _rows_table(cx, x, indices, skip_outside=True)
    rest = tuple(x.shape[len(indices):])
    index_rank = max(len(v.shape) for v in indices)
    lead, tail = tuple(values.shape[:index_rank]), tuple(values.shape[index_rank:])
    if (len(values.shape) != index_rank + len(rest) or tail != rest
            or any(isinstance(a, int) and isinstance(b, int) and a != b
                   for a, b in zip(lead, flat.shape))):
        # (symbolic sizes torch.export already checked equal may carry two names)
        raise Unsupported(f"index_put values {list(values.shape)} that are not the indexed "
                          f"rows' shape {list(flat.shape) + list(rest)} (broadcast values "
                          f"are unsupported)")
    rows = math.prod(flat.shape)
    flat_rows = cx.emit(Op.VIEW, [flat], O.ViewAttrs((rows,)))
    width = table.shape[1]
    value_rows = cx.emit(Op.VIEW, [values], O.ViewAttrs((rows, width)))
    out = cx.emit(Op.SCATTER_ROWS, [table, flat_rows, value_rows], O.NoAttrs())
    return cx.emit(Op.VIEW, [out], O.ViewAttrs(tuple(x.shape)), final=True)


def _rows_table(cx, x: Value, idx: list, skip_outside: bool = False) -> tuple[Value, Value]:
    """x viewed as [prod(the indexed leading dims), prod(the rest)] and the flat int64 row
    ids of the index tensors (broadcast together; negative indices count from the end).
    `skip_outside`: a row with an index outside its dim gets id -1 (a write skips it, where
    torch would raise; a position past a KV cache's end must not land in the next row)."""
    sizes = [x.shape[k] for k in range(len(idx))]
    flat = outside = None
    for k, (v, size) in enumerate(zip(idx, sizes)):
        later = math.prod(sizes[k + 1:])
        if not isinstance(later, int) or not isinstance(size, int) and k:
            raise Unsupported("indices computed at run time with a dynamic dim after the "
                              "first indexed one")
        if v.dtype not in (DType.I64, DType.I32):
            raise Unsupported(f"indices of {v.dtype.value}")
        negative = cx.emit(Op.LT, [v], O.BinaryAttrs(0))
        wrapped = (cx.emit(Op.WHERE, [negative, cx.emit(Op.ADD, [v], O.BinaryAttrs(size)), v],
                           O.NoAttrs()) if isinstance(size, int) else v)
        term = cx.emit(Op.MUL, [wrapped], O.BinaryAttrs(later)) if later != 1 else wrapped
        flat = term if flat is None else cx.emit(Op.ADD, [flat, term], O.BinaryAttrs())
        if skip_outside and isinstance(size, int):
            bad = cx.emit(Op.OR, [cx.emit(Op.LT, [wrapped], O.BinaryAttrs(0)),
                                  cx.emit(Op.GE, [wrapped], O.BinaryAttrs(size))],
                          O.BinaryAttrs())
            outside = bad if outside is None else cx.emit(Op.OR, [outside, bad],
                                                          O.BinaryAttrs())
    if outside is not None:  # -1 there (0 * flat - 1: an int64 tensor of flat's shape)
        minus_one = cx.emit(Op.SUB, [cx.emit(Op.MUL, [flat], O.BinaryAttrs(0))],
                            O.BinaryAttrs(1))
        flat = cx.emit(Op.WHERE, [outside, minus_one, flat], O.NoAttrs())
    rows, width = math.prod(sizes), math.prod(x.shape[len(idx):])
    return cx.emit(Op.VIEW, [x], O.ViewAttrs((rows, width))), flat


def _agree(known, fit):
    """Merge the fits of two probe sizes: a step is None where the dim had size 1 (any step
    fits it)."""
    merged = []
    for (c0, a0), (c1, a1) in zip(known, fit):
        if c0 != c1:
            raise Unsupported("index tensors whose start changes with the dims")
        if any(x is not None and y is not None and x != y for x, y in zip(a0, a1)):
            raise Unsupported("index tensors whose steps change with the dims")
        merged.append((c0, [x if x is not None else y for x, y in zip(a0, a1)]))
    return merged


def _affine(t, size: int):
    """(c, [a_d]) with t[i] == c + sum_d a_d * i_d and every entry in [0, size), or None
    (a_d None on a dim of size 1).
    Negative indices count from the end, as torch's do."""
    import torch

    t = torch.where(t < 0, t + size, t)
    if t.numel() == 0 or bool((t < 0).any()) or bool((t >= size).any()):
        return None
    c = int(t.reshape(-1)[0])
    steps = []  # None: a dim of size 1 (no step to see)
    for d, n in enumerate(t.shape):
        steps.append(int(t.narrow(d, 1, 1).reshape(-1)[0]) - c if n > 1 else None)
    grid = torch.full(t.shape, c, dtype=torch.long)
    for d, (n, a) in enumerate(zip(t.shape, steps)):
        shape = [1] * t.dim()
        shape[d] = n
        grid = grid + (a or 0) * torch.arange(n).reshape(shape)
    return (c, steps) if bool((grid == t).all()) else None


def _at(size, point: dict) -> int:
    from aotpack.ir.sym import subs

    return int(subs(size, point)) if point else int(size)


RULES = {
    **{f"aten.{name}.{form}": _compare(op) for name, op in
       (("eq", Op.EQ), ("ne", Op.NE), ("lt", Op.LT), ("le", Op.LE), ("gt", Op.GT),
        ("ge", Op.GE)) for form in ("Tensor", "Scalar")},
    "aten.logical_and.default": _logic(Op.AND), "aten.logical_or.default": _logic(Op.OR),
    "aten.bitwise_and.Tensor": _logic(Op.AND), "aten.bitwise_or.Tensor": _logic(Op.OR),
    "aten.bitwise_and.Scalar": _logic(Op.AND), "aten.bitwise_or.Scalar": _logic(Op.OR),
    "aten.logical_not.default": _not, "aten.bitwise_not.default": _not,
    "aten.where.self": _where, "aten.where.ScalarOther": _where,
    "aten.where.ScalarSelf": _where, "aten.where.Scalar": _where,
    "aten.masked_fill.Scalar": _masked_fill, "aten.masked_fill.Tensor": _masked_fill,
    "aten.index.Tensor": _index, "aten.cumsum.default": _cumsum,
    "aten.gather.default": _gather, "aten.argmax.default": _argmax,
    "aten.scatter.src": _scatter, "aten.scatter.value": _scatter,
    "aten.index_select.default": _index_select, "aten.roll.default": _roll,
}
