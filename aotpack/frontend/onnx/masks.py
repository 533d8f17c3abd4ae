"""Run-time boolean masks in ONNX graphs: what exporters write to turn a model's
`attention_mask` input into the additive mask attention adds to its scores.

transformers' mask code exports as Cast(attention_mask → bool) → views and gathers of known
indices → And with known masks → Expand to [B, 1, S, T] → Where(mask, 0, finfo.min), whose
result is added to the scores. Here:
- And / Or with one known operand are decided where the known one is uniform (all True: the
  other operand; all False: a known result); a known operand that differs per position would
  need logic kernels aotpack does not have, and is refused naming the node;
- Where(run-time condition, known a, known b) is b + cast(condition) · (a - b), computed on the
  condition before any Expand (the Expand is applied to the result, a stride-0 view), so the
  mask stays [B, 1, 1, T] in memory and passes/fuse_attention.py hands it to the attention
  kernel as its mask operand. An infinite a or b becomes the dtype's finite extreme (the
  arithmetic would give inf - inf): as an attention mask it masks the same keys, and a row
  masked everywhere then averages its values as torch's finfo.min masks do.
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
    lo, hi = _finite_range(dtype)
    va, vb = (min(max(float(x.reshape(-1)[0]), lo), hi) for x in (a, b))
    base, _ = _unexpanded(cx, cond)
    t = cx.emit(Op.CAST, [base], O.CastAttrs(dtype))
    y = cx.emit(Op.MUL, [t], O.BinaryAttrs(va - vb)) if va - vb != 1.0 else t
    y = cx.emit(Op.ADD, [y], O.BinaryAttrs(vb)) if vb != 0.0 else y
    rank = max(np.ndim(a), np.ndim(b), len(cond.shape))
    return _broadcast(cx, y, (1,) * (rank - len(cond.shape)) + tuple(cond.shape))


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
                raise Unsupported(f"a run-time mask combined with a known mask that differs "
                                  f"per position ({'And' if is_and else 'Or'} needs a logic "
                                  f"kernel aotpack does not have)")
        raise Unsupported("two run-time operands (aotpack has no logic kernels)")
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
