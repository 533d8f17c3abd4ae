"""The terms between an attention's two products: what fuse_attention reads between
softmax(...) and matmul(q, k^T), and the kernel's mask operands made from them.

Written-out attention adds to its scores any number of terms, in any order with the scale
factors: a relative-position bias and a padding mask (MPNet), an ALiBi bias and a
masked_fill of a bool mask (MPT), a causal mask and a padding mask (BLOOM, GPT-J). The kernel
takes a causal flag, a mask (added to the scaled scores, or a bool one kept where True) and a
bias (added). So:
- a term that is the constant causal mask becomes the causal flag (beside other terms only
  if it masks with -inf: with a finite value, rows the others hide everywhere average over
  every key), and a term computed from it and a run-time mask (attention_masks.causal_part)
  the flag plus the run-time part;
- a masked_fill (where(m, fill, s), or where(keep, s, fill)) whose fill masks (the dtype's
  lowest or -inf) replaces the sum of the terms inside it (where(m, fill, inside)); the
  scores themselves plus it round to it, so the kernel adding it is filling;
- a term the scale factors after it multiply is multiplied by them (softmax((s + m) * c) =
  softmax(s * c + m * c));
- the remaining terms go in f32 sums to the two operands (fuse_attention._terms_operands):
  those the heads share ([B, 1, S, T] masks) to the mask, those that vary by head (ALiBi,
  relative-position biases) to the bias, each broadcast through strides: never a
  [B, H, S, T] sum; a group of one plain term is that tensor.
One term alone, added and not scaled, stays fuse_attention's own case (positional masks).
"""
from __future__ import annotations

import dataclasses

from aotpack.dtypes import DType
from aotpack.ir import ops as O
from aotpack.ir.graph import GraphBuilder, Node, Value
from aotpack.ir.ops import Op
from aotpack.passes.gemm_chain import scalar_factor

_MASKING = -1e30  # a fill at or below this masks: any score plus it rounds to it


@dataclasses.dataclass(frozen=True)
class Term:
    """`value` added to the scores (fill None), or where `value` is True (`masked_where`) /
    False (not `masked_where`) the scores replaced by `fill`; `factor`: what multiplies the
    term after it (the scale factors between it and the softmax)."""

    value: Value
    factor: float
    fill: float | None = None
    masked_where: bool = True
    split: tuple | None = None  # (B, H): a 3-D term of [B*H, S, T] scores (heads_split)


def score_terms(graph, node: Node, single, scale: float, lift: tuple | None = None):
    """Walk from the softmax's input towards the product: (the node where the walk stopped,
    `scale` (the softmax's own) times the scale factors, the terms). Scalar factors, float
    casts (the kernel's scores stay f32), additive terms and masking fills, in any order.
    lift = (B, H): the product is 3-D ([B*H, S, T], BLOOM's baddbmm) and a reshape to
    [B, H, S, T] must be on the way (None is returned otherwise); the terms under it are
    3-D too (Term.split)."""
    outside, terms, split = scale, [], None
    while node is not None:
        if lift and split is None and node.op == Op.AS_STRIDED \
                and heads_split(node) == lift:
            split, node = lift, single(node.inputs[0])
            continue
        factor = scalar_factor(node)
        if factor is not None and factor > 0:
            scale, outside = scale * factor, outside * factor
            node = single(node.inputs[0])
        elif node.op == Op.CAST and node.output.dtype.is_float and node.inputs[0].dtype.is_float:
            node = single(node.inputs[0])
        elif node.op == Op.ADD and node.attrs.scalar is None and len(node.inputs) == 2:
            sides = _scores_side(node.inputs, single)
            if sides is None:
                break
            scores, term = sides
            if not term.dtype.is_float:  # a bool or integer added is a number, not a mask
                break
            terms.append(Term(term, outside, split=split))
            node = single(scores)
        elif node.op == Op.WHERE and len(node.inputs) == 3:
            found = _fill_of(graph, node, single)
            if found is None:
                break
            scores, term = found
            terms.append(dataclasses.replace(term, factor=outside, split=split))
            node = single(scores)
        else:
            break
    if lift and split is None:
        return None, scale, terms
    return node, scale, terms


def heads_split(n: Node) -> tuple | None:
    """(B, H) if n reshapes [B*H, S, T] into [B, H, S, T] (a view of the whole of it)."""
    return _heads_reshape(n, 3)


def heads_merged(n: Node) -> tuple | None:
    """(B, H) if n reshapes [B, H, S, T] into [B*H, S, T]."""
    return _heads_reshape(n, 4)


def _heads_reshape(n: Node, src_rank: int) -> tuple | None:
    from aotpack.passes.views import is_reshape

    if n.op != Op.AS_STRIDED or len(n.inputs[0].shape) != src_rank \
            or len(n.output.shape) != 7 - src_rank or not is_reshape(n.attrs, n.inputs[0].shape):
        return None
    four, three = ((n.output.shape, n.inputs[0].shape) if src_rank == 3
                   else (n.inputs[0].shape, n.output.shape))
    return tuple(four[:2]) if tuple(four[2:]) == tuple(three[1:]) else None


def split_heads(b: GraphBuilder, v: Value, split: tuple, loc) -> Value:
    """v, 3-D (or fewer dims) beside [B*H, S, T] scores, as its 4-D view beside [B, H, S, T]:
    a leading dim of B*H splits into (B, H); a broadcast one (1, or missing) into (1, 1)."""
    from aotpack.passes.views import View, strided_attrs

    shape = (1,) * (3 - len(v.shape)) + tuple(v.shape)
    lead = tuple(split) if shape[0] != 1 else (1, 1)
    view = View.contiguous(lead + shape[1:])
    return b.emit(Op.AS_STRIDED, [v], strided_attrs(view), v.dtype, view.shape,
                  f"{v.name}_heads", loc)


def _scores_side(inputs, single):
    """(the scores side, the term) of an ADD: the side whose chain reaches the product."""
    for s, t in (inputs, inputs[::-1]):
        if _reaches_product(s, single, 24):
            return s, t
    return None


def _reaches_product(v: Value, single, budget: int) -> bool:
    node = single(v)
    while node is not None and budget > 0:
        budget -= 1
        if node.op == Op.MATMUL:
            return True
        if node.op == Op.ADD and node.attrs.scalar is None and len(node.inputs) == 2:
            return any(_reaches_product(x, single, budget) for x in node.inputs)
        if node.op == Op.WHERE and len(node.inputs) == 3:
            v = node.inputs[2] if node.inputs[1].shape == () else node.inputs[1]
        elif node.op in (Op.CAST, Op.TANH) or (scalar_factor(node) or 0) > 0 \
                or (node.op == Op.AS_STRIDED and heads_split(node)):
            v = node.inputs[0]
        else:
            return False
        node = single(v)
    return False


def _fill_of(graph, n: Node, single):
    """(scores, Term) if n = where(m, fill, scores) or where(keep, scores, fill) with a
    masking fill (a constant scalar)."""
    cond, a, b = n.inputs
    if cond.dtype != DType.BOOL:
        return None
    for fill, scores, masked_where in ((a, b, True), (b, a, False)):
        value = scalar_constant(graph, fill)
        if value is not None and value <= _MASKING and _reaches_product(scores, single, 24):
            return scores, Term(cond, 1.0, value, masked_where)
    return None


def scalar_constant(graph, v: Value) -> float | None:
    """The number a one-element constant holds, or None (not a constant, or a meta one)."""
    c = graph.constants.get(v.name)
    t = None if c is None else c.tensor
    if t is None or getattr(t, "is_meta", False) or t.numel() != 1:
        return None
    return float(t.reshape(()))


def emit_sum(b: GraphBuilder, terms: list[Term], loc) -> Value:
    """The terms (already in the new graph: b.get'd values) as one f32 additive mask."""
    def emit(op, ins, attrs, name):
        return b.emit_inferred(op, ins, attrs, name, loc)

    total = None
    for term in reversed(terms):  # from the product outwards: a fill replaces what is inside
        v = term.value
        if term.split is not None:
            v = split_heads(b, v, term.split, loc)
        if term.fill is not None:
            fill = b.add_constant("mask_fill", _f32(term.fill * term.factor), DType.F32)
            inside = total if total is not None else b.add_constant("mask_zero", _f32(0.0),
                                                                    DType.F32)
            ins = [v, fill, inside] if term.masked_where else [v, inside, fill]
            total = emit(Op.WHERE, ins, O.NoAttrs(), "mask_filled")
            continue
        if v.dtype != DType.F32:
            v = emit(Op.CAST, [v], O.CastAttrs(DType.F32), "mask_f32")
        if term.factor != 1.0:
            v = emit(Op.MUL, [v], O.BinaryAttrs(term.factor, False), "mask_scaled")
        total = v if total is None else emit(Op.ADD, [total, v], O.BinaryAttrs(None, False),
                                             "mask_sum")
    return total


def _f32(x: float):
    import torch

    return torch.tensor(x, dtype=torch.float32)
