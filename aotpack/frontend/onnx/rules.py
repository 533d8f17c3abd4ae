"""ONNX operator → IR rules for arithmetic, matrix products, normalizations and reductions
(layout.py: shapes and views). A rule gets the translator, the NodeProto and its inputs (an IR
Value, a known numpy array, or None for an absent optional input) and returns the outputs.
`Unsupported` means "this form of the op is not supported": the translator names the node.
"""
from __future__ import annotations

import numpy as np

from aotpack.frontend.aten_table import Unsupported
from aotpack.frontend.onnx.conv import CONV_RULES, hard_swish_of
from aotpack.frontend.onnx.host import is_symbolic_array
from aotpack.frontend.onnx.image import IMAGE_RULES
from aotpack.frontend.onnx.layout import LAYOUT_RULES, ints
from aotpack.frontend.onnx.masks import MASK_RULES, where_known_values
from aotpack.ir import ops as O
from aotpack.ir.graph import Value
from aotpack.ir.ops import Op
from aotpack.ir.sym import is_symbolic


def _dim(d: int, rank: int) -> int:
    if not -rank <= d < max(rank, 1):
        raise Unsupported(f"axis {d} of a rank-{rank} tensor")
    return d + rank if d < 0 else d


def _scalar(v) -> float | None:
    """The number a known single-element array holds (None otherwise)."""
    if isinstance(v, np.ndarray) and not is_symbolic_array(v) and v.size == 1:
        return float(v.reshape(-1)[0])
    return None


def binary(cx, op: Op, a, b) -> Value:
    """op(a, b) with a known single number as the op's scalar (where it adds no dims)."""
    for x, y, first in ((a, b, False), (b, a, True)):
        c = _scalar(y)
        if isinstance(x, Value) and c is not None and np.ndim(y) <= len(x.shape):
            return cx.emit(op, [x], O.BinaryAttrs(c, scalar_first=first))
    return cx.emit(op, [cx.tensor(a), cx.tensor(b)], O.BinaryAttrs())


def _binary(op: Op):
    def rule(cx, n, ins):
        if len(ins) != 2:
            raise Unsupported(f"{len(ins)} operands")
        fused = _PEEPHOLES.get(op, lambda *a: None)(cx, *ins)
        out = fused if fused is not None else binary(cx, op, *ins)
        ints = [v.dtype for v in ins if isinstance(v, Value) and not v.dtype.is_float]
        if op == Op.DIV and ints and out.dtype.is_float:
            # ONNX's integer Div truncates (the IR's DIV is true division, as torch's): the
            # quotient cast back to the operands' type truncates toward zero
            out = cx.emit(Op.CAST, [out], O.CastAttrs(ints[0]))
        return out
    return rule


def _silu(cx, a, b):
    """x * Sigmoid(x) (SiLU as exporters write it) → SILU, which the SwiGLU and GEMM-epilogue
    fusions know."""
    for x, s in ((a, b), (b, a)):
        sig = cx.producer(s)
        if sig is not None and sig.op == Op.SIGMOID and sig.inputs[0] is x:
            return cx.emit(Op.SILU, [x], O.NoAttrs())
    return None


def _reciprocal_root(cx, a, b):
    """1 / Sqrt(y) → RSQRT(y): the normalizations' denominator as fuse_patterns knows it."""
    if _scalar(a) == 1.0:
        return _rsqrt_of(cx, b)
    return None


def _rsqrt_of(cx, y):
    root = cx.producer(y)
    if root is not None and root.op == Op.SQRT:
        return cx.emit(Op.RSQRT, [root.inputs[0]], O.NoAttrs())
    return None


def _mul_activation(cx, a, b):
    return _silu(cx, a, b) or hard_swish_of(cx, a, b)


_PEEPHOLES = {Op.MUL: _mul_activation, Op.DIV: _reciprocal_root}


def _reciprocal(cx, n, ins):
    fused = _rsqrt_of(cx, ins[0])
    return fused if fused is not None else cx.emit(Op.RECIP, [cx.tensor(ins[0])], O.NoAttrs())


def _variadic(op: Op):
    """Max/Min of one or more operands (broadcast): a chain of binary ops."""
    def rule(cx, n, ins):
        out = ins[0]
        for x in ins[1:]:
            out = binary(cx, op, out, x)
        return cx.tensor(out) if len(ins) == 1 else out
    return rule


def _unary(op: Op):
    return lambda cx, n, ins: cx.emit(op, [cx.tensor(ins[0])], O.NoAttrs())


def _gelu(cx, n, ins):
    return cx.emit(Op.GELU, [cx.tensor(ins[0])], O.GeluAttrs(cx.attr("approximate", "none")))


def _erf(cx, n, ins):
    """Erf outside the GELU pattern (frontend/onnx/patterns.py turns that one into GELU)."""
    return cx.emit(Op.ERF, [cx.tensor(ins[0])], O.NoAttrs())


def _matmul(cx, n, ins):
    """numpy matmul: a 1-D operand gets a unit dim (a row for a, a column for b) that the
    product drops again."""
    if _is_weight(ins[1]) and isinstance(ins[0], Value) and len(ins[0].shape) >= 2:
        return linear(cx, ins[0], ins[1], None)
    a, b = (cx.tensor(x) for x in ins)
    if not a.shape or not b.shape:
        raise Unsupported("a 0-D operand")
    row, col = len(a.shape) == 1, len(b.shape) == 1
    if row:
        a = cx.emit(Op.UNSQUEEZE, [a], O.DimAttrs((0,)))
    if col:
        b = cx.emit(Op.UNSQUEEZE, [b], O.DimAttrs((1,)))
    y = cx.emit(Op.MATMUL, [a, b], O.NoAttrs())
    rank = len(y.shape)
    drop = tuple(d for d, flag in ((rank - 2, row), (rank - 1, col)) if flag)
    return cx.emit(Op.SQUEEZE, [y], O.DimAttrs(drop)) if drop else y


def _is_weight(v) -> bool:
    return isinstance(v, np.ndarray) and not is_symbolic_array(v) and v.ndim == 2 \
        and v.dtype.kind == "f"


def linear(cx, x: Value, weight: np.ndarray, bias) -> Value:
    """x @ W (+ bias) with W [K, N] known → LINEAR(x, Wᵀ [N, K] [, bias]): the torch frontend's
    form, so GEMMs sharing an input (Q, K, V) fuse horizontally as they do for PyTorch."""
    wt = np.ascontiguousarray(weight.T)
    name = cx._names.get(id(weight))
    if name is not None:  # stored once under the initializer's name, transposed
        cx._names[id(wt)] = f"{name}.T"
    wt = cx.tensor(wt)
    return cx.emit(Op.LINEAR, [x, wt] + ([cx.tensor(bias)] if bias is not None else []),
                   O.NoAttrs())


def _gemm(cx, n, ins):
    a, b = cx.tensor(ins[0]), ins[1]
    c = ins[2] if len(ins) > 2 else None
    alpha, beta = float(cx.attr("alpha", 1.0)), float(cx.attr("beta", 1.0))
    if cx.attr("transA", 0):
        a = cx.emit(Op.PERMUTE, [a], O.PermuteAttrs((1, 0)))
    if c is not None and beta != 1.0:
        c = binary(cx, Op.MUL, c, np.array(beta, dtype=np.float32)) if isinstance(c, Value) \
            else (c * beta).astype(c.dtype)
    one_dim_bias = c is None or np.ndim(c) == 1 or (isinstance(c, Value) and len(c.shape) == 1)
    if cx.attr("transB", 0) and alpha == 1.0 and one_dim_bias:
        return cx.emit(Op.LINEAR, [a, cx.tensor(b)] + ([cx.tensor(c)] if c is not None else []),
                       O.NoAttrs())
    b = cx.tensor(b)
    if cx.attr("transB", 0):
        b = cx.emit(Op.PERMUTE, [b], O.PermuteAttrs((1, 0)))
    y = cx.emit(Op.MATMUL, [a, b], O.NoAttrs())
    if alpha != 1.0:
        y = cx.emit(Op.MUL, [y], O.BinaryAttrs(alpha))
    return y if c is None else binary(cx, Op.ADD, y, c)


def _softmax(op: Op):
    """Over the last dim as the kernels compute it; another axis is moved last and back."""
    def rule(cx, n, ins):
        x = cx.tensor(ins[0])
        rank = len(x.shape)
        d = _dim(int(cx.attr("axis", -1)), rank)
        if d == rank - 1 or rank == 0:
            return cx.emit(op, [x], O.SoftmaxAttrs(d))
        perm = tuple(i for i in range(rank) if i != d) + (d,)
        y = cx.emit(op, [cx.emit(Op.PERMUTE, [x], O.PermuteAttrs(perm))],
                    O.SoftmaxAttrs(rank - 1))
        return cx.emit(Op.PERMUTE, [y], O.PermuteAttrs(_inverse(perm)))
    return rule


def _inverse(perm) -> tuple:
    out = [0] * len(perm)
    for i, p in enumerate(perm):
        out[p] = i
    return tuple(out)


def _layer_norm(cx, n, ins):
    if len(n.output) > 1 and any(n.output[1:]):
        raise Unsupported("its Mean / InvStdDev outputs (training only)")
    x = cx.tensor(ins[0])
    axis = _dim(int(cx.attr("axis", -1)), len(x.shape))
    weights = [cx.tensor(t) for t in ins[1:] if t is not None]
    return cx.emit(Op.LAYER_NORM, [x] + weights,
                   O.NormAttrs(float(cx.attr("epsilon", 1e-5)), len(x.shape) - axis))


_REDUCE = {"ReduceMean": Op.MEAN, "ReduceSum": Op.SUM, "ReduceMax": Op.AMAX,
           "ReduceMin": Op.AMIN}


def _reduce(cx, n, ins):
    x = cx.tensor(ins[0])
    axes = cx.attr("axes")
    if axes is None and len(ins) > 1 and ins[1] is not None:
        if isinstance(ins[1], Value):
            raise Unsupported("axes computed at run time")
        axes = ints(ins[1])
    if not axes and cx.attr("noop_with_empty_axes", 0):
        return x
    rank = len(x.shape)
    dims = tuple(sorted({_dim(int(a), rank) for a in axes})) if axes else tuple(range(rank))
    keep = bool(cx.attr("keepdims", 1))
    if n.op_type in ("ReduceMax", "ReduceMin") and any(
            not is_symbolic(x.shape[d]) and x.shape[d] == 0 for d in dims):
        raise Unsupported(f"an empty reduced dim (shape {list(x.shape)})")
    if dims == tuple(range(rank - len(dims), rank)):
        return cx.emit(_REDUCE[n.op_type], [x], O.ReduceAttrs(dims, keep))
    # the kernels reduce trailing dims: move the reduced ones last, then shape the result
    rest = tuple(i for i in range(rank) if i not in dims)
    y = cx.emit(Op.PERMUTE, [x], O.PermuteAttrs(rest + dims))
    y = cx.emit(_REDUCE[n.op_type], [y], O.ReduceAttrs(tuple(range(len(rest), rank)), False))
    if not keep:
        return y
    shape = tuple(1 if i in dims else x.shape[i] for i in range(rank))
    return cx.emit(Op.VIEW, [y], O.ViewAttrs(shape))


def _cast(cx, n, ins):
    x = cx.tensor(ins[0])
    dt = cx.onnx_dtype(int(cx.attr("to")))
    return x if dt == x.dtype else cx.emit(Op.CAST, [x], O.CastAttrs(dt))


def _cast_like(cx, n, ins):
    x, like = cx.tensor(ins[0]), ins[1]
    dt = like.dtype if isinstance(like, Value) else cx.tensor(like).dtype
    return x if dt == x.dtype else cx.emit(Op.CAST, [x], O.CastAttrs(dt))


def _sum_or_mean(cx, n, ins):
    out = cx.tensor(ins[0]) if len(ins) == 1 else ins[0]
    for x in ins[1:]:
        out = binary(cx, Op.ADD, out, x)
    if n.op_type == "Mean" and len(ins) > 1:
        out = cx.emit(Op.DIV, [out], O.BinaryAttrs(float(len(ins))))
    return out


def _identity(cx, n, ins):
    return ins[0]


def _dropout(cx, n, ins):
    if len(ins) > 2 and ins[2] is not None and (not isinstance(ins[2], np.ndarray)
                                                 or bool(ins[2])):
        raise Unsupported("training_mode (aotpack compiles inference)")
    if len(n.output) > 1 and n.output[1]:  # the mask of an inference dropout: all kept
        x = cx.tensor(ins[0])
        one = cx.tensor(np.ones((1,) * len(x.shape), dtype=bool))
        return [x, cx.emit(Op.EXPAND, [one], O.ExpandAttrs(tuple(x.shape)))]
    return ins[0]


def _where(cx, n, ins):
    """A run-time condition: masks.where_known_values. A known condition choosing between a
    run-time value and a known one: a fill that is
    -inf or a huge negative where it is used (masked_fill of attention scores) → value + (0
    where kept, the fill elsewhere): the additive mask passes/fuse_attention.py recognises.
    Any other known fill → value * kept + (0 where kept, the fill elsewhere)."""
    cond, x, y = ins
    if isinstance(cond, Value):
        return where_known_values(cx, cond, x, y)
    if is_symbolic_array(cond):
        raise Unsupported("a condition computed from dynamic sizes")
    for keep_if, value, fill in ((True, x, y), (False, y, x)):
        if isinstance(value, Value) and isinstance(fill, np.ndarray) \
                and not is_symbolic_array(fill) and value.dtype.is_float:
            keep = cond.astype(bool) if keep_if else ~cond.astype(bool)
            mask = np.where(keep, np.zeros((), fill.dtype), fill)
            used = np.broadcast_to(fill, np.broadcast_shapes(fill.shape, keep.shape))[
                ~np.broadcast_to(keep, np.broadcast_shapes(fill.shape, keep.shape))]
            if used.size == 0 or bool((used.astype(np.float64) <= _MASKED).all()):
                return cx.emit(Op.ADD, [value, cx.tensor(mask)], O.BinaryAttrs())
            kept = cx.emit(Op.MUL, [value, cx.tensor(keep.astype(fill.dtype))],
                           O.BinaryAttrs())
            return cx.emit(Op.ADD, [kept, cx.tensor(mask)], O.BinaryAttrs())
    raise Unsupported("two run-time values to choose between")


# a fill at or below this masks a score (transformers fills with the dtype's minimum)
_MASKED = -1e30


def _constant_only(cx, n, ins):
    raise Unsupported("inputs computed at run time (aotpack evaluates it only on constants "
                      "and shapes, at build time)")


RULES = {
    "Add": _binary(Op.ADD), "Sub": _binary(Op.SUB), "Mul": _binary(Op.MUL),
    "Div": _binary(Op.DIV), "Pow": _binary(Op.POW), "Max": _variadic(Op.MAX),
    "Min": _variadic(Op.MIN),
    "Sqrt": _unary(Op.SQRT), "Reciprocal": _reciprocal, "Exp": _unary(Op.EXP),
    "Log": _unary(Op.LOG), "Tanh": _unary(Op.TANH), "Sigmoid": _unary(Op.SIGMOID),
    "Relu": _unary(Op.RELU), "Neg": _unary(Op.NEG), "Abs": _unary(Op.ABS),
    "Sin": _unary(Op.SIN), "Cos": _unary(Op.COS), "Gelu": _gelu, "Erf": _erf,
    "Sign": _unary(Op.SIGN), "Floor": _unary(Op.FLOOR), "Ceil": _unary(Op.CEIL),
    "Round": _unary(Op.ROUND),
    "MatMul": _matmul, "Gemm": _gemm, "Softmax": _softmax(Op.SOFTMAX),
    "LogSoftmax": _softmax(Op.LOG_SOFTMAX), "LayerNormalization": _layer_norm,
    **{k: _reduce for k in _REDUCE},
    "Cast": _cast, "CastLike": _cast_like, "Sum": _sum_or_mean, "Mean": _sum_or_mean,
    "Identity": _identity, "Dropout": _dropout, "Where": _where,
    **{k: _constant_only for k in ("Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual",
                                   "Trilu", "NonZero", "Range")}, **MASK_RULES,
    **LAYOUT_RULES, **CONV_RULES, **IMAGE_RULES,
}
