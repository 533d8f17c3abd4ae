"""aten → IR rules for sort, argsort and topk of any tensor along any dim (MoE routing's topk
over the experts and sort of the expert ids are the small cases of these).

Each has two results, each one IR node (values, indices) over the same input. The kernels
work along the last dim of [R, C] rows; another dim is swapped with the last by a permute
before and after (the kernel reads the rows through a copy when they are not a view).

topk runs its own kernel (k rounds of a max over a row held in registers) for float rows of
up to MAX_TOPK_COLS static columns; any other topk (integer rows: compared exactly; longer or
dynamic rows) is a sort and its first k columns. The sort kernel ranks every element against
its whole row: O(C^2) compares a row, fine for the routing sizes and rows of thousands, slow
for a vocabulary-wide row.

bucketize / searchsorted against constant boundaries (a model's bins) count the boundaries
below each value: a compare per boundary, summed in one pointwise kernel (NaN past them all,
as torch).
"""
from __future__ import annotations

from aotpack.dtypes import DType
from aotpack.frontend.aten_table import Unsupported
from aotpack.ir import ops as O
from aotpack.ir.graph import Value
from aotpack.ir.ops import Op
from aotpack.ir.sym import lower_bound
from aotpack.kernels.spec import MAX_TOPK_COLS


def _to_last(cx, x, dim: int, what: str) -> tuple[Value, tuple | None]:
    """x with `dim` swapped with the last dim, and the permutation that swaps them back
    (None when dim is already the last)."""
    if not isinstance(x, Value):
        raise Unsupported(f"{what} of a Python value")
    rank = len(x.shape)
    if rank == 0:
        raise Unsupported(f"{what} of a 0-d tensor (x.reshape(1) first)")
    if x.dtype == DType.F64:
        raise Unsupported(f"{what} of f64 (compared in f32 or int64: cast first)")
    d = dim + rank if dim < 0 else dim
    if d == rank - 1:
        return x, None
    perm = list(range(rank))
    perm[d], perm[-1] = perm[-1], perm[d]
    return cx.emit(Op.PERMUTE, [x], O.PermuteAttrs(tuple(perm))), tuple(perm)


def _back(cx, outs: list, perm) -> list:
    if perm is None:
        return outs
    return [cx.emit(Op.PERMUTE, [o], O.PermuteAttrs(perm)) for o in outs]


def _sort(cx, x, dim=-1, descending=False, stable=None):
    """sort / argsort along any dim, ascending or descending; always stable (torch's
    unstable sort may order equal values any way, this one is one of those ways)."""
    x, perm = _to_last(cx, x, dim, "sort")
    outs = [cx.emit(Op.SORT, [x], O.SortAttrs(indices, bool(descending)))
            for indices in (False, True)]
    return _back(cx, outs, perm)


def _sort_stable(cx, x, *, stable=None, dim=-1, descending=False):
    return _sort(cx, x, dim, descending)


def _topk(cx, x, k, dim=-1, largest=True, sorted=True):
    """topk along any dim, the largest or the smallest, values in order (a sorted result is
    one valid unsorted one too)."""
    x, perm = _to_last(cx, x, dim, "topk")
    cols = x.shape[-1]
    if not isinstance(k, int):
        raise Unsupported(f"topk with k={k} computed at run time")
    if k < 1 or k > lower_bound(cols):
        raise Unsupported(f"topk with k={k} of a dim of {cols} (1 <= k <= the dim at its "
                          f"smallest)")
    if x.dtype.is_float and isinstance(cols, int) and cols <= MAX_TOPK_COLS:
        outs = [cx.emit(Op.TOPK, [x], O.TopkAttrs(k, indices, bool(largest)))
                for indices in (False, True)]
    else:  # integers (exact), a long or dynamic dim: the sorted row's first k
        last = len(x.shape) - 1
        outs = [cx.emit(Op.SLICE, [cx.emit(Op.SORT, [x], O.SortAttrs(i, bool(largest)))],
                        O.SliceAttrs(last, 0, k)) for i in (False, True)]
    return _back(cx, outs, perm)


MAX_BOUNDARIES = 64  # compares per element in one pointwise kernel


def _bucketize(cx, x, boundaries, *, out_int32=False, right=False):
    """How many boundaries lie below x (right: at or below): bucketize's bucket index."""
    return _count_below(cx, x, _boundaries(cx, boundaries, "bucketize"), right, out_int32)


def _searchsorted(cx, sorted_sequence, x, *, out_int32=False, right=False, side=None,
                  sorter=None):
    """searchsorted of x in a constant 1-D sequence: bucketize with the operands swapped."""
    if sorter is not None:
        raise Unsupported("searchsorted with a sorter (sort the sequence first)")
    if side is not None:
        right = side == "right"
    return _count_below(cx, x, _boundaries(cx, sorted_sequence, "searchsorted"), right,
                        out_int32)


def _boundaries(cx, b, what: str) -> list:
    t = cx.constant_value(b) if isinstance(b, Value) else None
    if t is None or t.dim() != 1 or t.dtype.is_complex:
        raise Unsupported(f"{what} against boundaries computed at run time or not 1-D "
                          f"(constant 1-D boundaries only)")
    if t.numel() > MAX_BOUNDARIES:
        raise Unsupported(f"{what} against {t.numel()} boundaries (at most {MAX_BOUNDARIES})")
    values = t.tolist()
    if values != sorted(values):
        raise Unsupported(f"{what} against boundaries that are not sorted ascending")
    return values


def _count_below(cx, x, bounds: list, right: bool, out_int32: bool) -> Value:
    if not isinstance(x, Value):
        raise Unsupported("bucketize of a Python value")
    e = cx.emit

    def flag(test: Value, weight: int = 1) -> Value:  # 1 (or weight) where test holds
        one = e(Op.CAST, [test], O.CastAttrs(DType.I32))
        return one if weight == 1 else e(Op.MUL, [one], O.BinaryAttrs(weight))

    below = Op.GE if right else Op.GT  # x > b: b lies below x (x >= b with right)
    # every value is past no boundary, and NaN (false against them all) past every one
    terms = [flag(e(below, [x], O.BinaryAttrs(b))) for b in bounds]
    terms.append(flag(e(Op.NE, [x, x], O.BinaryAttrs()), len(bounds)))
    count = terms[0]
    for t in terms[1:]:
        count = e(Op.ADD, [count, t], O.BinaryAttrs())
    return e(Op.CAST, [count], O.CastAttrs(DType.I32 if out_int32 else DType.I64), final=True)


RULES = {
    "aten.topk.default": _topk, "aten.sort.default": _sort, "aten.sort.stable": _sort_stable,
    "aten.bucketize.Tensor": _bucketize, "aten.searchsorted.Tensor": _searchsorted,
}
