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
from aotpack.frontend.onnx.lazy import Lazy
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
    """Where(run-time condition, a, b) with a and b known numbers, or one of them a run-time
    tensor and the other a known number (masked_fill)."""
    if isinstance(a, Value) and _is_number(b):
        return _masked_fill(cx, cond, a, b, keep_if=True)
    if isinstance(b, Value) and _is_number(a):
        return _masked_fill(cx, cond, b, a, keep_if=False)
    if not (_is_number(a) and _is_number(b)):
        raise Unsupported("a condition computed at run time choosing between run-time values "
                          "(aotpack has no select kernel; a run-time condition may choose "
                          "between known numbers, or between a tensor and a number)")
    dtype = _float_dtype(cx, a)
    base, _ = _unexpanded(cx, cond)
    t = cx.emit(Op.CAST, [base], O.CastAttrs(dtype))
    y = _select(cx, t, float(a.reshape(-1)[0]), float(b.reshape(-1)[0]), dtype)
    rank = max(np.ndim(a), np.ndim(b), len(cond.shape))
    return _broadcast(cx, y, (1,) * (rank - len(cond.shape)) + tuple(cond.shape))


def _is_number(v) -> bool:
    return _known(v) and v.size == 1


def _float_dtype(cx, a: np.ndarray) -> DType:
    from aotpack.frontend.onnx.translate import to_torch

    dtype = cx.float_dtype(DType.from_torch(to_torch(np.asarray(a)).dtype))
    if not dtype.is_float:
        raise Unsupported(f"a run-time condition choosing between {a.dtype} numbers (only "
                          f"floating values)")
    return dtype


def _masked_fill(cx, cond: Value, x: Value, fill, keep_if: bool) -> Value:
    """x where cond is keep_if, else the number `fill`: x + (0 | fill) when the fill masks
    (-inf or below -1e30, as attention scores are masked: the additive mask
    passes/fuse_attention.py recognises), else x * kept + (0 | fill)."""
    if not x.dtype.is_float:
        raise Unsupported(f"a masked fill of a {x.dtype.value} tensor (only floating ones)")
    value = float(fill.reshape(-1)[0])
    base, _ = _unexpanded(cx, cond)
    t = cx.emit(Op.CAST, [base], O.CastAttrs(x.dtype))
    kept, dropped = (1.0, 0.0) if keep_if else (0.0, 1.0)
    add = _select(cx, t, 0.0 if keep_if else value, value if keep_if else 0.0, x.dtype)
    if value <= _MASKS:
        return cx.emit(Op.ADD, [x, add], O.BinaryAttrs())
    keep = _select(cx, t, kept, dropped, x.dtype)
    y = cx.emit(Op.MUL, [x, keep], O.BinaryAttrs())
    return cx.emit(Op.ADD, [y, add], O.BinaryAttrs())


_MASKS = -1e30  # a fill at or below this masks an attention score (finfo.min, -inf)


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
            flags = _uniform(cx, known)
            if flags is not None and isinstance(other, (Value, Lazy)):
                shape = known.shape if _known(known) else cx.lazy.shape(known)
                if flags == is_and:  # x and True, x or False: x, broadcast (a view)
                    return _broadcast(cx, cx.tensor(other), shape)
        # 0/1 arithmetic: a product (and) or a maximum (or), one pointwise kernel
        fa, fb = (cx.emit(Op.CAST, [cx.tensor(x)], O.CastAttrs(DType.F32)) for x in (a, b))
        y = cx.emit(Op.MUL if is_and else Op.MAX, [fa, fb], O.BinaryAttrs())
        return cx.emit(Op.CAST, [y], O.CastAttrs(DType.BOOL))
    return rule


def _uniform(cx, v) -> bool | None:
    """True / False if v is known (or computed from the dims: checked at the probe points)
    and all True / all False; None otherwise."""
    if _known(v):
        values = [v.astype(bool)]
    elif isinstance(v, Lazy):
        values = [cx.lazy.value(v, p).astype(bool) for p in cx.lazy.points()]
    else:
        return None
    if all(x.all() for x in values):
        return True
    if not any(x.any() for x in values):
        return False
    return None


def _broadcast(cx, x: Value, shape) -> Value:
    """x viewed and expanded (stride 0, no copy) to its broadcast with `shape`."""
    rank = max(len(x.shape), len(shape))
    src = (1,) * (rank - len(x.shape)) + tuple(x.shape)
    other = (1,) * (rank - len(shape)) + tuple(shape)
    want = tuple(a if isinstance(b, int) and b == 1 else b for a, b in zip(src, other))
    if src != tuple(x.shape):
        x = cx.emit(Op.VIEW, [x], O.ViewAttrs(src))
    return x if tuple(x.shape) == want else cx.emit(Op.EXPAND, [x], O.ExpandAttrs(want))


def _not(cx, n, ins):
    t = cx.emit(Op.CAST, [cx.tensor(ins[0])], O.CastAttrs(DType.F32))
    t = cx.emit(Op.ADD, [cx.emit(Op.NEG, [t], O.NoAttrs())], O.BinaryAttrs(1.0))
    return cx.emit(Op.CAST, [t], O.CastAttrs(DType.BOOL))


MASK_RULES = {"And": _logical(True), "Or": _logical(False), "Not": _not}
