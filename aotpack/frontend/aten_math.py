"""aten → IR rules for the rest of torch's elementwise math and small reductions that models
use beside the core set: erf (GELU written out, `0.5 * x * (1 + erf(x / sqrt(2)))`), log1p /
expm1 (softplus, Mish, logsigmoid, CELU, ELU/SELU), sign, rounding, isnan, fmod, atan / atan2 /
asin / acos (written with the ops the pointwise kernels have), min over a dim
with its index, any/all, and the views flip, diagonal and unfold (bidirectional RNNs, einsum
traces, patch extraction).

Functions with an IR op of their own (erf, log1p, expm1, sign, floor, ceil, trunc, round) are one
node; the others are written with them (elu = where(x > 0, x, alpha * expm1(x))), so the
pointwise fusion pass sees ordinary elementwise nodes.
"""
from __future__ import annotations

import math

from aotpack.dtypes import DType
from aotpack.frontend.aten_table import Unsupported
from aotpack.ir import ops as O
from aotpack.ir.graph import Value
from aotpack.ir.ops import Op


def _value(x, what: str) -> Value:
    if not isinstance(x, Value):
        raise Unsupported(f"{what} of a Python value")
    return x


def _float_unary(op: Op, integer_identity: bool = False):
    """`op` on floats; on integers torch's rounding functions return the input."""
    def rule(cx, x):
        x = _value(x, op.value)
        if integer_identity and not x.dtype.is_float:
            return cx.emit(Op.COPY, [x], O.NoAttrs(), final=True)
        return cx.emit(op, [x], O.NoAttrs(), final=True)
    return rule


def _scaled(cx, x: Value, factor: float, final: bool = False) -> Value:
    return cx.emit(Op.MUL, [x], O.BinaryAttrs(float(factor)), final=final)


def _erfc(cx, x):
    erf = cx.emit(Op.ERF, [_value(x, "erfc")], O.NoAttrs())
    return cx.emit(Op.SUB, [erf], O.BinaryAttrs(1.0, scalar_first=True), final=True)


def _log10(cx, x):
    return _scaled(cx, cx.emit(Op.LOG2, [_value(x, "log10")], O.NoAttrs()),
                   math.log10(2.0), final=True)


def _elu(cx, x, alpha=1.0, scale=1.0, input_scale=1.0):
    """scale * (x if x > 0 else alpha * expm1(input_scale * x)): ELU, SELU, CELU."""
    x = _value(x, "elu")
    inner = _scaled(cx, x, input_scale) if input_scale != 1.0 else x
    neg = _scaled(cx, cx.emit(Op.EXPM1, [inner], O.NoAttrs()), alpha * scale)
    pos = _scaled(cx, x, scale) if scale != 1.0 else x
    positive = cx.emit(Op.GT, [x], O.BinaryAttrs(0.0))
    return cx.emit(Op.WHERE, [positive, pos, neg], O.NoAttrs(), final=True)


def _hyperbolic(sign: float):
    """sinh (sign -1): (expm1(x) - expm1(-x)) / 2, exact near 0; cosh (sign 1): (exp(x) +
    exp(-x)) / 2."""
    def rule(cx, x):
        x = _value(x, "sinh/cosh")
        fn = Op.EXP if sign > 0 else Op.EXPM1
        up = cx.emit(fn, [x], O.NoAttrs())
        down = cx.emit(fn, [cx.emit(Op.NEG, [x], O.NoAttrs())], O.NoAttrs())
        total = cx.emit(Op.ADD if sign > 0 else Op.SUB, [up, down], O.BinaryAttrs())
        return _scaled(cx, total, 0.5, final=True)
    return rule


def _tan(cx, x):
    x = _value(x, "tan")
    return cx.emit(Op.DIV, [cx.emit(Op.SIN, [x], O.NoAttrs()), cx.emit(Op.COS, [x], O.NoAttrs())],
                   O.BinaryAttrs(), final=True)


def _isnan(cx, x):
    x = _value(x, "isnan")
    return cx.emit(Op.NE, [x, x], O.BinaryAttrs(), final=True)  # NaN is the one x != x


def _fmod(cx, x, y):
    """Refused, like remainder of floats: x - trunc(x / y) * y computed in f32 is off by up to
    y where x / y rounds onto an integer (fmod(5.0, 0.1) gives 0, torch 0.0999999), and an
    exact one needs a fused multiply-add the kernel references do not model."""
    raise Unsupported("fmod (exact only with a fused multiply-add; compute it from integers, "
                      "or outside the model)")


def _min_dim(cx, x, dim, keepdim=False):
    """min over a dim with its index: amin, and argmax of -x (the first of equal minima)."""
    x = _value(x, "min")
    if not x.dtype.is_float:  # -x of an unsigned or the most negative integer is no order
        raise Unsupported("min over a dim of integers, with its index")
    dim = dim + len(x.shape) if dim < 0 else dim
    attrs = O.ReduceAttrs((dim,), bool(keepdim))
    negated = cx.emit(Op.NEG, [x], O.NoAttrs())
    return [cx.emit(Op.AMIN, [x], attrs), cx.emit(Op.ARGMAX, [negated], attrs)]


def _any(cx, x, dims=None, keepdim=False):
    """any over dims: the largest of (x != 0), a bool (one_hot's range check, masks)."""
    x = _value(x, "any")
    rank = len(x.shape)
    dims = [dims] if isinstance(dims, int) else list(dims or range(rank))
    dims = tuple(sorted(d + rank if d < 0 else d for d in dims)) or tuple(range(rank))
    nonzero = cx.emit(Op.NE, [x], O.BinaryAttrs(0)) if x.dtype != DType.BOOL else x
    as_float = cx.emit(Op.CAST, [nonzero], O.CastAttrs(DType.F32))  # the reductions' type
    most = cx.emit(Op.AMAX, [as_float], O.ReduceAttrs(dims, bool(keepdim)))
    return cx.emit(Op.NE, [most], O.BinaryAttrs(0), final=True)


def _argmin(cx, x, dim=None, keepdim=False):
    """argmin: argmax of -x (the first of equal minima, as torch)."""
    x = _value(x, "argmin")
    if not x.dtype.is_float:  # argmax(-x): -x of an unsigned or the most negative int fails
        raise Unsupported("argmin of integers")
    if dim is None:
        raise Unsupported("argmin over all dims (give dim)")
    dim = dim + len(x.shape) if dim < 0 else dim
    negated = cx.emit(Op.NEG, [x], O.NoAttrs())
    return cx.emit(Op.ARGMAX, [negated], O.ReduceAttrs((dim,), bool(keepdim)), final=True)


def _var_mean(cx, x, dims=None, *, correction=None, keepdim=False):
    """(var, mean) over dims."""
    from aotpack.frontend.aten_table import _reduce_dims, variance

    x = _value(x, "var_mean")
    var = variance(cx, x, dims, correction, keepdim)
    mean = cx.emit(Op.MEAN, [x], O.ReduceAttrs(_reduce_dims(dims, len(x.shape)), bool(keepdim)))
    return [var, mean]


def _xor(cx, a, b):
    """xor of bools: a != b."""
    if not (isinstance(a, Value) and isinstance(b, Value)) or a.dtype != DType.BOOL \
            or b.dtype != DType.BOOL:
        raise Unsupported("xor of other than two bool tensors")
    return cx.emit(Op.NE, [a, b], O.BinaryAttrs(), final=True)


def _hypot(cx, a, b):
    a, b = _value(a, "hypot"), _value(b, "hypot")
    squares = cx.emit(Op.ADD, [cx.emit(Op.MUL, [a, a], O.BinaryAttrs()),
                               cx.emit(Op.MUL, [b, b], O.BinaryAttrs())], O.BinaryAttrs())
    return cx.emit(Op.SQRT, [squares], O.NoAttrs(), final=True)


def _adaptive_max_pool(cx, x, output_size):
    """Adaptive max pooling; its indices output is not computed. Each output cell takes an
    equal block (the input a whole multiple of the output): a max pool. Otherwise blocks of
    unequal sizes that may overlap: per axis, the largest of L row gathers (L the longest
    block; row lo + t, or the block's last row past its end), the two axes one after the
    other (a block is rows x columns, and max is taken over each in turn)."""
    x = _value(x, "adaptive max pooling")
    if len(x.shape) != 4 or not all(isinstance(d, int) for d in x.shape[2:]):
        raise Unsupported("adaptive max pooling of other than a static [N, C, H, W]")
    h, w = x.shape[2:]
    oh, ow = (output_size, output_size) if isinstance(output_size, int) else output_size
    if h % oh == 0 and w % ow == 0:
        from aotpack.frontend.aten_conv import _pool

        kernel = (h // oh, w // ow)
        return [_pool(cx, x, O.PoolAttrs("max", kernel, kernel), False), None]
    for axis, out in ((2, oh), (3, ow)):
        x = _max_over_blocks(cx, x, axis, out)
    return [x, None]


def _max_over_blocks(cx, x: Value, axis: int, out: int) -> Value:
    """torch's adaptive blocks along `axis`: block i is rows [i*n // out, ceil((i+1)*n / out))."""
    from aotpack.frontend.aten_resize import gather_axis

    n = x.shape[axis]
    if n == out:
        return x
    lo = [(i * n) // out for i in range(out)]
    hi = [-(-(i + 1) * n // out) for i in range(out)]
    most = None
    for t in range(max(b - a for a, b in zip(lo, hi))):
        rows = gather_axis(cx, x, axis, [min(a + t, b - 1) for a, b in zip(lo, hi)])
        most = rows if most is None else cx.emit(Op.MAX, [most, rows], O.BinaryAttrs())
    return most


def _embedding_bag(cx, weight, indices, offsets, scale_grad_by_freq=False, mode=0,
                   sparse=False, per_sample_weights=None, include_last_offset=False,
                   padding_idx=None):
    """nn.EmbeddingBag of bags of one length (2-D ids, which torch flattens with offsets
    arange(0, B*L, L)): an embedding lookup viewed [B, L, D] and reduced over the bag (sum,
    mean, max; per-sample weights with sum). Bags of run-time lengths are refused."""
    import torch

    from aotpack.ir.sym import floordiv

    samples = cx.constant_samples(offsets) if isinstance(offsets, Value) else None
    if samples is None:
        raise Unsupported("embedding bags with offsets computed at run time (bags of "
                          "run-time lengths)")
    if padding_idx is not None and padding_idx >= 0:
        raise Unsupported("embedding bags with a padding_idx")
    steps = set()
    for _, t in samples:
        t = t.reshape(-1).long()
        step = int(t[1] - t[0]) if t.numel() > 1 else None
        if int(t[0]) != 0 or (step is not None and not bool(
                (t == step * torch.arange(t.numel())).all())):
            raise Unsupported("embedding bags of different lengths")
        steps.add(step)
    steps.discard(None)
    length = steps.pop() if len(steps) == 1 else indices.shape[0] if not steps else None
    if length is None or include_last_offset:
        raise Unsupported("embedding bags of different lengths (or include_last_offset)")
    rows = cx.emit(Op.EMBEDDING, [weight, indices], O.NoAttrs())  # [B*L, D]
    if per_sample_weights is not None:
        if mode != 0:
            raise Unsupported("per-sample weights with a mode other than sum")
        scale = cx.emit(Op.UNSQUEEZE, [per_sample_weights], O.DimAttrs((1,)))
        rows = cx.emit(Op.MUL, [rows, scale], O.BinaryAttrs())
    bags = floordiv(indices.shape[0], length)
    rows = cx.emit(Op.VIEW, [rows], O.ViewAttrs((bags, length, weight.shape[1])))
    op = {0: Op.SUM, 1: Op.MEAN, 2: Op.AMAX}[int(mode)]
    return [cx.emit(op, [rows], O.ReduceAttrs((1,), False)), None, None, None]


def _flip(cx, x, dims):
    """x reversed along `dims` (static sizes): a row gather by reversed constant indices per
    dim, leading dims kept by aranges (the bidirectional LSTM/GRU's backward direction)."""
    import torch

    from aotpack.frontend.aten_logic import leading_grid, rows_table

    x = _value(x, "flip")
    rank = len(x.shape)
    dims = sorted({d + rank if d < 0 else d for d in dims})
    dims = [d for d in dims if x.shape[d] != 1]
    if any(not isinstance(x.shape[d], int) for d in dims):
        raise Unsupported("flip along a dynamic dim")
    if not dims:
        return cx.emit(Op.COPY, [x], O.NoAttrs(), final=True)
    for i, d in enumerate(dims):
        reversed_ids = cx.add_constant("reversed", torch.arange(x.shape[d] - 1, -1, -1))
        table, flat = rows_table(cx, x, leading_grid(cx, x, d, [reversed_ids]))
        rows = cx.emit(Op.EMBEDDING, [table, flat], O.NoAttrs())
        x = cx.emit(Op.VIEW, [rows], O.ViewAttrs(tuple(x.shape)), final=i == len(dims) - 1)
    return x


def _strided_view(cx, x: Value, shape, strides, offset: int) -> Value:
    attrs = O.StridedAttrs(tuple(shape), tuple(strides), offset)
    return cx.emit(Op.AS_STRIDED, [x], attrs, final=True)


def _diagonal(cx, x, offset=0, dim1=0, dim2=1):
    """The diagonal of dims dim1, dim2 as a strided view (stride of dim1 + stride of dim2),
    moved to the last dim as torch does."""
    from aotpack.ir.types import contiguous_strides

    x = _value(x, "diagonal")
    rank = len(x.shape)
    dim1, dim2 = (d + rank if d < 0 else d for d in (dim1, dim2))
    n1, n2 = x.shape[dim1], x.shape[dim2]
    if not (isinstance(n1, int) and isinstance(n2, int)):
        raise Unsupported("diagonal of dynamic dims")
    length = max(0, min(n1 + min(offset, 0), n2 - max(offset, 0)))
    strides = contiguous_strides(tuple(x.shape))
    start = (max(offset, 0) * strides[dim2] - min(offset, 0) * strides[dim1])
    keep = [k for k in range(rank) if k not in (dim1, dim2)]
    shape = [x.shape[k] for k in keep] + [length]
    view_strides = [strides[k] for k in keep] + [strides[dim1] + strides[dim2]]
    return _strided_view(cx, x, shape, view_strides, start)


def _unfold(cx, x, dim, size, step):
    """Tensor.unfold: windows of `size` every `step` along `dim`, a strided view with the
    window as a new last dim."""
    from aotpack.ir.types import contiguous_strides

    x = _value(x, "unfold")
    rank = max(len(x.shape), 1)
    dim = dim + rank if dim < 0 else dim
    n = x.shape[dim] if x.shape else 1
    if not isinstance(n, int):
        raise Unsupported("unfold along a dynamic dim")
    strides = contiguous_strides(tuple(x.shape))
    shape = list(x.shape)
    shape[dim] = (n - size) // step + 1
    view_strides = list(strides)
    view_strides[dim] = strides[dim] * step
    return _strided_view(cx, x, shape + [size], view_strides + [strides[dim]], 0)


def _f32(cx, x: Value, what: str) -> Value:
    """x as f32 (16-bit floats are computed in f32 and rounded once, as torch does)."""
    x = _value(x, what)
    if not x.dtype.is_float:
        raise Unsupported(f"{what} of {x.dtype.value} values")
    return x if x.dtype == DType.F32 else cx.emit(Op.CAST, [x], O.CastAttrs(DType.F32))


def _atan_f32(cx, x: Value) -> Value:
    """atan in f32 from ops the pointwise kernels have: Cephes' atanf (|x| reduced by
    tan(pi/8) and tan(3pi/8) to [0, 0.4142], a degree-9 odd polynomial; within 2 ulp), the
    sign restored last (NaN stays NaN, +-inf gives +-pi/2)."""
    e = cx.emit
    ax = e(Op.ABS, [x], O.NoAttrs())
    big = e(Op.GT, [ax], O.BinaryAttrs(2.414213562373095))
    mid = e(Op.GT, [ax], O.BinaryAttrs(0.4142135623730950))
    t_big = e(Op.DIV, [ax], O.BinaryAttrs(-1.0, scalar_first=True))
    t_mid = e(Op.DIV, [e(Op.SUB, [ax], O.BinaryAttrs(1.0)), e(Op.ADD, [ax], O.BinaryAttrs(1.0))],
              O.BinaryAttrs())
    t = e(Op.WHERE, [big, t_big, e(Op.WHERE, [mid, t_mid, ax], O.NoAttrs())], O.NoAttrs())
    y0 = e(Op.ADD, [_scaled(cx, e(Op.CAST, [big], O.CastAttrs(DType.F32)), math.pi / 4),
                    _scaled(cx, e(Op.CAST, [mid], O.CastAttrs(DType.F32)), math.pi / 4)],
           O.BinaryAttrs())
    z = e(Op.MUL, [t, t], O.BinaryAttrs())
    p = _scaled(cx, z, 8.05374449538e-2)
    for c in (-1.38776856032e-1, 1.99777106478e-1, -3.33329491539e-1):
        p = e(Op.MUL, [e(Op.ADD, [p], O.BinaryAttrs(c)), z], O.BinaryAttrs())
    r = e(Op.ADD, [y0, e(Op.ADD, [e(Op.MUL, [p, t], O.BinaryAttrs()), t], O.BinaryAttrs())],
          O.BinaryAttrs())
    return e(Op.WHERE, [_negative(cx, x), e(Op.NEG, [r], O.NoAttrs()), r], O.NoAttrs())


def _negative(cx, x: Value) -> Value:
    """x < 0, -0.0 and -inf included (the sign bit: 1 / -0.0 is -inf)."""
    e = cx.emit
    recip = e(Op.DIV, [x], O.BinaryAttrs(1.0, scalar_first=True))
    return e(Op.OR, [e(Op.LT, [x], O.BinaryAttrs(0.0)), e(Op.LT, [recip], O.BinaryAttrs(0.0))],
             O.BinaryAttrs())


def _atan2_f32(cx, y: Value, x: Value) -> Value:
    """atan2 from atan(y / x), turned by pi towards y's side where x is negative; y (a signed
    zero) where both are zeros, so (+-0, -0) gives +-pi and (+-0, +0) +-0, and the diagonals
    where both are infinite, as torch."""
    e = cx.emit
    both_zero = e(Op.AND, [e(Op.EQ, [y], O.BinaryAttrs(0.0)), e(Op.EQ, [x], O.BinaryAttrs(0.0))],
                  O.BinaryAttrs())
    ratio = e(Op.WHERE, [both_zero, y, e(Op.DIV, [y, x], O.BinaryAttrs())], O.NoAttrs())
    infinite = [e(Op.EQ, [e(Op.ABS, [v], O.NoAttrs())], O.BinaryAttrs(math.inf)) for v in (y, x)]
    diagonal = e(Op.MUL, [e(Op.SIGN, [y], O.NoAttrs()), e(Op.SIGN, [x], O.NoAttrs())],
                 O.BinaryAttrs())  # inf / inf: the diagonal, +-pi/4 before the turn
    ratio = e(Op.WHERE, [e(Op.AND, infinite, O.BinaryAttrs()), diagonal, ratio], O.NoAttrs())
    r = _atan_f32(cx, ratio)
    below = e(Op.CAST, [_negative(cx, y)], O.CastAttrs(DType.F32))
    turn = e(Op.SUB, [_scaled(cx, below, 2 * math.pi)], O.BinaryAttrs(math.pi, scalar_first=True))
    return e(Op.WHERE, [_negative(cx, x), e(Op.ADD, [r, turn], O.BinaryAttrs()), r],
             O.NoAttrs())


def _rounded(cx, out: Value, dtype: DType) -> Value:
    """The f32 result in torch's result dtype (f64 ones are computed in f32 too)."""
    return cx.emit(Op.CAST, [out], O.CastAttrs(dtype), final=True) \
        if dtype != DType.F32 else cx.emit(Op.COPY, [out], O.NoAttrs(), final=True)


def _atan(cx, x):
    return _rounded(cx, _atan_f32(cx, _f32(cx, x, "atan")), x.dtype)


def _atan2(cx, y, x):
    from aotpack.ir.types import promote

    y32, x32 = _f32(cx, y, "atan2"), _f32(cx, x, "atan2")
    return _rounded(cx, _atan2_f32(cx, y32, x32), promote(y.dtype, x.dtype))


def _inverse_sine(cosine: bool):
    """asin(x) = atan2(x, sqrt((1 - x)(1 + x))), acos(x) = atan2(sqrt(...), x): exact at +-1,
    NaN past them (sqrt of a negative), as torch; (1 - x)(1 + x), not 1 - x^2, keeps the
    digits near +-1."""
    def rule(cx, x):
        x32 = _f32(cx, x, "acos" if cosine else "asin")
        e = cx.emit
        rest = e(Op.SQRT, [e(Op.MUL, [e(Op.SUB, [x32], O.BinaryAttrs(1.0, scalar_first=True)),
                                      e(Op.ADD, [x32], O.BinaryAttrs(1.0))], O.BinaryAttrs())],
                 O.NoAttrs())
        out = _atan2_f32(cx, rest, x32) if cosine else _atan2_f32(cx, x32, rest)
        return _rounded(cx, out, x.dtype)
    return rule


RULES = {
    "aten.erf.default": _float_unary(Op.ERF), "aten.erfc.default": _erfc,
    "aten.log1p.default": _float_unary(Op.LOG1P), "aten.expm1.default": _float_unary(Op.EXPM1),
    "aten.sign.default": _float_unary(Op.SIGN),
    "aten.floor.default": _float_unary(Op.FLOOR, integer_identity=True),
    "aten.ceil.default": _float_unary(Op.CEIL, integer_identity=True),
    "aten.trunc.default": _float_unary(Op.TRUNC, integer_identity=True),
    "aten.round.default": _float_unary(Op.ROUND, integer_identity=True),
    "aten.log2.default": _float_unary(Op.LOG2), "aten.log10.default": _log10,
    "aten.exp2.default": _float_unary(Op.EXP2), "aten.elu.default": _elu,
    "aten.sinh.default": _hyperbolic(-1.0), "aten.cosh.default": _hyperbolic(1.0),
    "aten.tan.default": _tan, "aten.isnan.default": _isnan,
    "aten.atan.default": _atan, "aten.atan2.default": _atan2,
    "aten.asin.default": _inverse_sine(False), "aten.acos.default": _inverse_sine(True),
    "aten.fmod.Scalar": _fmod, "aten.fmod.Tensor": _fmod,
    "aten.min.dim": _min_dim,
    "aten.any.dim": _any, "aten.any.dims": _any, "aten.any.default": _any,
    "aten.flip.default": _flip, "aten.diagonal.default": _diagonal,
    "aten.unfold.default": _unfold, "aten.argmin.default": _argmin,
    "aten.var_mean.correction": _var_mean, "aten.logical_xor.default": _xor,
    "aten.bitwise_xor.Tensor": _xor, "aten.hypot.default": _hypot,
    "aten.adaptive_max_pool2d.default": _adaptive_max_pool,
    "aten._embedding_bag.default": _embedding_bag,
    "aten._embedding_bag_forward_only.default": _embedding_bag,
    # a data check inside torch's own code (one_hot's class range): not run in a bundle, as
    # torch._check and _assert_scalar are not
    "aten._assert_async.msg": lambda cx, *args, **kwargs: None,
    "aten._assert_async.default": lambda cx, *args, **kwargs: None,
}
