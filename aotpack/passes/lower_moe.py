"""Lowering rules for the mixture-of-experts ops: TOPK → TopkOp, SORT → SortOp, HISTC →
HistcOp, INVERSE_PERM → InversePermOp, GROUPED_MM → GroupedMmOp (kernels in
kernels/triton/routing.py and grouped_mm.py). Operands are viewed as the kernels read them
([R, C] rows, [N] vectors, the expert weights as a strided [E, K, N] view); a contiguous copy
is made first where a view does not flatten.

Every rule is `rule(lowering, node)` (lowering is passes.lower._Lowering), hooked in lower.py.
"""
from __future__ import annotations

from aotpack.ir.graph import Node
from aotpack.ir.ops import Op
from aotpack.kernels.spec import GroupedMmOp, HistcOp, InversePermOp, SortOp, TopkOp
from aotpack.passes.lower_reductions import _out, _rows, _vector


def lower_topk(lw, n: Node) -> None:
    x = _rows(lw, n.inputs[0], 1)
    lw.ops.append(TopkOp(x, _out(lw, n, 1), n.attrs.k, n.attrs.indices, n.attrs.largest))


def lower_sort(lw, n: Node) -> None:
    lw.ops.append(SortOp(_rows(lw, n.inputs[0], 1), _out(lw, n, 1), n.attrs.indices,
                         n.attrs.descending))


def lower_histc(lw, n: Node) -> None:
    lw.ops.append(HistcOp(_vector(lw, n.inputs[0]), _out(lw, n, None), n.attrs.lo, n.attrs.hi))


def lower_inverse_perm(lw, n: Node) -> None:
    lw.ops.append(InversePermOp(_vector(lw, n.inputs[0]), _out(lw, n, None)))


def lower_grouped_mm(lw, n: Node) -> None:
    a = _rows(lw, n.inputs[0], 1)
    b = lw.args[n.inputs[1].name]
    offs = _vector(lw, n.inputs[2])
    if offs.strides != (1,):
        offs = _vector_copy(lw, n.inputs[2])
    lw.ops.append(GroupedMmOp(a, b, offs, _out(lw, n, 1), n.attrs.swiglu_group))


def _vector_copy(lw, v):
    from aotpack.passes.lower_reductions import merge_1d

    return merge_1d(lw._materialize(lw.args[v.name], v.name))


RULES = {Op.TOPK: lower_topk, Op.SORT: lower_sort, Op.HISTC: lower_histc,
         Op.INVERSE_PERM: lower_inverse_perm, Op.GROUPED_MM: lower_grouped_mm}
