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
    if not isinstance(index, Value) or len(index.shape) != len(x.shape) or not x.shape:
        coordinates(cx, x, dim, index, "gather")  # (refuses with the reason)
    size = x.shape[dim % len(x.shape)]
    if isinstance(size, int):  # torch raises on an index outside the dim; read within its row
        index = cx.emit(Op.MIN, [cx.emit(Op.MAX, [index], O.BinaryAttrs(0))],
                        O.BinaryAttrs(size - 1))
    table, coords = coordinates(cx, x, dim, index, "gather")
    return _gather_rows(cx, table, coords, list(range(len(table.shape))))


def coordinates(cx, x: Value, dim: int, index: Value, what: str) -> tuple[Value, list]:
    """(x seen as t, the index tensors that make t[c0, .., index, .., c_r-1] the gather (or
    scatter) along `dim`): `index` at dim, an arange over each other dim of index's shape.
    When index spans x on every other dim, t is x as [dims before, dim, dims after] (three
    coordinates; the row ids then multiply by static sizes only, unless dims after `dim`
    are dynamic: a gather over the vocabulary of a [B, S, V] with B and S dynamic works)."""
    rank = len(x.shape)
    dim = dim + rank if dim < 0 else dim
    if rank == 0:
        raise Unsupported(f"{what} of a 0-d tensor (x.reshape(1) first)")
    if not isinstance(index, Value) or len(index.shape) != rank:
        raise Unsupported(f"{what} with an index of another rank than the tensor")
    if all(index.shape[k] == x.shape[k] for k in range(rank) if k != dim):
        before, after = math.prod(x.shape[:dim]), math.prod(x.shape[dim + 1:])
        x = cx.emit(Op.VIEW, [x], O.ViewAttrs((before, x.shape[dim], after)))
        index = cx.emit(Op.VIEW, [index], O.ViewAttrs((before, index.shape[dim], after)))
        return x, [arange_along(cx, before, 0, 3), index, arange_along(cx, after, 2, 3)]
    return x, [index if k == dim else arange_along(cx, n, k, rank)
               for k, n in enumerate(index.shape)]


_MAX_ARANGE = 1 << 24


def arange_along(cx, n, k: int, rank: int) -> Value:
    """arange(n) laid along dim k of `rank` dims (size 1 elsewhere), a constant: stored at
    the dim's maximum and sliced to n when n is a symbolic size."""
    import torch

    from aotpack.ir.sym import upper_bound

    most = n if isinstance(n, int) else upper_bound(n)
    if most > _MAX_ARANGE:
        raise Unsupported(f"indices over a dim of up to {most} (at most {_MAX_ARANGE}: narrow "
                          f"the dim's range)")
    shape = [1] * rank
    shape[k] = most
    v = cx.add_constant(f"coord{k}", torch.arange(most).reshape(shape))
    return v if isinstance(n, int) else cx.emit(Op.SLICE, [v], O.SliceAttrs(k, 0, n))


def leading_grid(cx, x: Value, first: int, idx: list) -> list[Value]:
    """Index tensors over x's dims 0..: an arange for each whole dim before `first` (x[:, i]:
    torch's result keeps those dims in front of the index tensors' broadcast shape), then
    the index tensors themselves."""
    rank = first + max(len(v.shape) for v in idx)
    return [arange_along(cx, x.shape[k], k, rank) for k in range(first)] + list(idx)


def _index(cx, x, indices):
    """x[i0, i1, ...] (None: the whole dim): a constant x with constant indices folds;
    constant indices that step evenly through x's dims are a strided view of x; other
    indices, side by side, are a row gather (_gather_rows)."""
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
    probed = [s for s in samples if len(s) > 1]
    if probed:  # a static constant beside indices that follow the dims: the same at each point
        samples = [s if len(s) > 1 else [(p, s[0][1]) for p, _ in probed[0]] for s in samples]
    if len(samples[0]) == 1 and any(not isinstance(x.shape[k], int) for k in picked):
        # static constants along a dynamic dim: no size to check the steps against
        if any(bool((s[0][1] < 0).any()) for s in samples):
            raise Unsupported("negative constant indices along a dynamic dim")
        return _gather_rows(cx, x, [indices[k] for k in picked], picked)
    out_shape = cx.out_shape()
    first, n_idx = picked[0], len(picked)
    rank_b = len(out_shape) - (len(x.shape) - n_idx)  # the broadcast index dims
    coeffs = None
    for j in range(len(samples[0])):
        point = samples[0][j][0]
        tensors = torch.broadcast_tensors(*(s[j][1] for s in samples))
        sizes = [_at(x.shape[k], point) for k in picked]
        fit = [_affine(t.long(), size) for t, size in zip(tensors, sizes)]
        if any(f is not None and any(a is not None and a < 0 for a in f[1]) for f in fit):
            fit = [None]  # a descending index (x[:, [2, 1, 0]], BGR to RGB): no view has
            #               negative strides, so a row gather
        if any(f is None for f in fit):
            if len(samples[0]) > 1:
                raise Unsupported("index tensors that follow the dims' sizes and do not step "
                                  "evenly through them")
            # static constants in no even steps (x[:, [0, 0, 2]]): a row gather as well
            return _gather_rows(cx, x, [indices[k] for k in picked], picked)
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
    import torch

    # aten.index's own semantics: a None entry is a whole dim (in Python indexing, a new one)
    return cx.add_constant("picked", torch.ops.aten.index.Tensor(table, picks).contiguous())


def _gather_rows(cx, x: Value, idx: list, picked: list[int]) -> Value:
    """x[i0, i1, ...] with index tensors side by side of which some are computed at run time
    (CLIP's pooling: hidden[arange(B), ids.argmax(-1)]; x[:, i] with aranges over the whole
    dims before): x seen as a table of rows [prod(indexed dims), prod(the rest)], read by the
    embedding kernel at flat row ids i0 * n1 + i1 (a pointwise int64 expression; negative
    indices count from the end)."""
    table, flat = rows_table(cx, x, leading_grid(cx, x, picked[0], idx))
    out = cx.emit(Op.EMBEDDING, [table, flat], O.NoAttrs())
    return cx.emit(Op.VIEW, [out], O.ViewAttrs(tuple(cx.out_shape())), final=True)


def rows_table(cx, x: Value, idx: list, skip_outside: bool = False) -> tuple[Value, Value]:
    """x viewed as [prod(the indexed leading dims), prod(the rest)] and the flat int64 row
    ids of the index tensors (broadcast together; negative indices count from the end).
    `skip_outside`: a row with an index outside its dim gets id -1 (a write skips it, where
    torch would raise; a position past a KV cache's end must not land in the next row).
    Every intermediate has one reader, so the ids are one pointwise kernel."""
    import torch

    sizes = [x.shape[k] for k in range(len(idx))]
    flat = outside = None
    for k, (v, size) in enumerate(zip(idx, sizes)):
        later = math.prod(sizes[k + 1:])
        if not isinstance(later, int) or not isinstance(size, int) and k:
            raise Unsupported("indices computed at run time with a dynamic dim after the "
                              "first indexed one")
        if v.dtype not in (DType.I64, DType.I32):
            raise Unsupported(f"indices of {v.dtype.value}")
        inside = _known_inside(cx, v, size)  # (an arange over a whole dim: nothing to check)
        term = v if inside or not isinstance(size, int) else _wrapped(cx, v, size)
        term = cx.emit(Op.MUL, [term], O.BinaryAttrs(later)) if later != 1 else term
        flat = term if flat is None else cx.emit(Op.ADD, [flat, term], O.BinaryAttrs())
        if skip_outside and isinstance(size, int) and not inside:
            # outside [-size, size): checked on v itself (the wrapped v has one reader)
            bad = cx.emit(Op.OR, [cx.emit(Op.LT, [v], O.BinaryAttrs(-size)),
                                  cx.emit(Op.GE, [v], O.BinaryAttrs(size))], O.BinaryAttrs())
            outside = bad if outside is None else cx.emit(Op.OR, [outside, bad],
                                                          O.BinaryAttrs())
    if outside is not None:
        minus_one = cx.add_constant("skip", torch.tensor(-1, dtype=flat.dtype.to_torch()))
        flat = cx.emit(Op.WHERE, [outside, minus_one, flat], O.NoAttrs())
    rows, width = math.prod(sizes), math.prod(x.shape[len(idx):])
    return cx.emit(Op.VIEW, [x], O.ViewAttrs((rows, width))), flat


def _wrapped(cx, v: Value, size: int) -> Value:
    """v + size where v is negative (an index from the end)."""
    negative = cx.emit(Op.LT, [v], O.BinaryAttrs(0))
    return cx.emit(Op.WHERE, [negative, cx.emit(Op.ADD, [v], O.BinaryAttrs(size)), v],
                   O.NoAttrs())


def _known_inside(cx, v: Value, size) -> bool:
    """v's entries lie in [0, size): a constant that does, or arange(n) sliced from a longer
    arange (arange_along's form for a symbolic n)."""
    import torch

    node = cx.producer(v)
    if node is not None and node.op == Op.SLICE and node.attrs.start == 0 \
            and node.attrs.end == size:
        t = cx.constant_value(node.inputs[0])
        return (t is not None and t.shape[node.attrs.dim] == t.numel()
                and torch.equal(t.reshape(-1), torch.arange(t.numel())))
    t = cx.constant_value(v)
    return (t is not None and isinstance(size, int) and t.numel() > 0
            and bool(((t >= 0) & (t < size)).all()))


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
    "aten.index_select.default": _index_select, "aten.roll.default": _roll,
}
