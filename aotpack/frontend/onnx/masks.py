"""Run-time boolean masks in ONNX graphs: what exporters write to turn a model's
`attention_mask` input into the additive mask attention adds to its scores.

transformers' mask code exports as Cast(attention_mask → bool) → views and gathers of known
indices → And with known masks → Expand to [B, 1, S, T] → Where(mask, 0, finfo.min), whose
result is added to the scores. Here:
- And / Or with a uniform known operand are decided here (all True: the other operand, a
  view; all False: a known result); other operands (a causal mask and a padding mask) are
  combined as 0/1 numbers (a product, a maximum) by one pointwise kernel;
- Where(run-time condition, known a, known b) is b + cast(condition) · (a - b), computed on the
  condition before any Expand (the Expand is applied to the result, a stride-0 view), so the
  mask stays [B, 1, 1, T] in memory and passes/fuse_attention.py hands it to the attention
  kernel as its mask operand. A -inf side goes through log(cast(condition)) (no inf - inf),
  so a row masked everywhere gets zeros from the kernel as from torch's sdpa.
"""
from __future__ import annotations

import numpy as np

from aotpack.dtypes import DType
from aotpack.frontend.aten_table import Unsupported
from aotpack.frontend.onnx.host import is_symbolic_array
from aotpack.ir import ops as O
from aotpack.ir.graph import Value
from aotpack.ir.ops import Op


def _known(v) -> bool:
    return isinstance(v, np.ndarray) and not is_symbolic_array(v)


def _unexpanded(cx, v: Value) -> tuple[Value, tuple | None]:
    """(what an Expand expanded, the expanded shape) or (v, None)."""
    node = cx.producer(v)
    if node is not None and node.op == Op.EXPAND:
        return node.inputs[0], tuple(v.shape)
    return v, None


def where_known_values(cx, cond: Value, a, b) -> Value:
    if not (_known(a) and _known(b) and a.size == 1 and b.size == 1):
        raise Unsupported("a condition computed at run time choosing between run-time values "
                          "(aotpack has no select kernel; a run-time condition may choose "
                          "between two known numbers, as attention masks do)")
    from aotpack.frontend.onnx.translate import to_torch

    dtype = cx.float_dtype(DType.from_torch(to_torch(np.asarray(a)).dtype))
    if not dtype.is_float:
        raise Unsupported(f"a run-time condition choosing between {a.dtype} numbers (only "
                          f"floating values)")
    va, vb = (float(x.reshape(-1)[0]) for x in (a, b))
    base, _ = _unexpanded(cx, cond)
    t = cx.emit(Op.CAST, [base], O.CastAttrs(dtype))
    y = _select(cx, t, va, vb, dtype)
    rank = max(np.ndim(a), np.ndim(b), len(cond.shape))
    return _broadcast(cx, y, (1,) * (rank - len(cond.shape)) + tuple(cond.shape))


def _select(cx, t: Value, va: float, vb: float, dtype: DType) -> Value:
    """va where t is 1, vb where it is 0: vb + t * (va - vb), or through log(t) (0 where t
    is 1, -inf where 0) when one side is -inf (sdpa's mask: a row it masks everywhere then
    gives zeros, as torch does, where a finite fill would average). +inf becomes the dtype's
    largest finite value."""
    lo, hi = _finite_range(dtype)
    va, vb = (min(x, hi) for x in (va, vb))
    if vb == float("-inf") or va == float("-inf"):
        if va == vb:
            raise Unsupported("a run-time condition choosing between -inf and -inf")
        if va == float("-inf"):  # keep where t is 0
            t = cx.emit(Op.ADD, [cx.emit(Op.NEG, [t], O.NoAttrs())], O.BinaryAttrs(1.0))
            va, vb = vb, va
        y = cx.emit(Op.LOG, [t], O.NoAttrs())
        return cx.emit(Op.ADD, [y], O.BinaryAttrs(va)) if va != 0.0 else y
    va, vb = max(va, lo), max(vb, lo)
    y = cx.emit(Op.MUL, [t], O.BinaryAttrs(va - vb)) if va - vb != 1.0 else t
    return cx.emit(Op.ADD, [y], O.BinaryAttrs(vb)) if vb != 0.0 else y


def _finite_range(dtype: DType) -> tuple[float, float]:
    import torch

    info = torch.finfo(dtype.to_torch())
    return float(info.min), float(info.max)


def _logical(is_and: bool):
    def rule(cx, n, ins):
        a, b = ins
        for known, other in ((a, b), (b, a)):
            if _known(known) and isinstance(other, Value):
                flags = known.astype(bool)
                if flags.all() if is_and else not flags.any():
                    return _broadcast(cx, other, known.shape)  # x and True, x or False
                if not flags.any() if is_and else flags.all():
                    shape = np.broadcast_shapes(known.shape, tuple(other.shape))
                    return np.full(shape, not is_and)  # x and False, x or True: known
        # 0/1 arithmetic: a product (and) or a maximum (or), one pointwise kernel
        fa, fb = (cx.emit(Op.CAST, [cx.tensor(x)], O.CastAttrs(DType.F32)) for x in (a, b))
        y = cx.emit(Op.MUL if is_and else Op.MAX, [fa, fb], O.BinaryAttrs())
        return cx.emit(Op.CAST, [y], O.CastAttrs(DType.BOOL))
    return rule


def _broadcast(cx, x: Value, shape) -> Value:
    """x viewed and expanded (stride 0, no copy) to its broadcast with `shape`."""
    rank = max(len(x.shape), len(shape))
    src = (1,) * (rank - len(x.shape)) + tuple(x.shape)
    other = (1,) * (rank - len(shape)) + tuple(shape)
    want = tuple(a if isinstance(b, int) and b == 1 else b for a, b in zip(src, other))
    if src != tuple(x.shape):
        x = cx.emit(Op.VIEW, [x], O.ViewAttrs(src))
    return x if tuple(x.shape) == want else cx.emit(Op.EXPAND, [x], O.ExpandAttrs(want))


MASK_RULES = {"And": _logical(True), "Or": _logical(False)}
