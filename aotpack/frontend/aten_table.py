"""aten operator → IR translation rules, one small function per operator family.

Each rule gets the translation context and the node's (args, kwargs) with fx nodes already
mapped to IR Values, and returns the node's Value (or a list for multi-output ops, or None for
assertion ops that produce nothing). `Unsupported` inside a rule means "this call form is not
supported"; the context turns it into an UnsupportedOpError with the node and source line.
"""
from __future__ import annotations

import math

from aotpack.dtypes import DType
from aotpack.ir import ops as O
from aotpack.ir.graph import Value
from aotpack.ir.ops import Op
from aotpack.ir.sym import SymbolicError, sym_max, sym_min


class Unsupported(Exception):
    pass


def _dim(d: int, rank: int) -> int:
    return d + rank if d < 0 else d


def _binary(op: Op):
    def rule(cx, x, y, alpha=1, **kw):
        if kw.get("rounding_mode") == "floor" and op == Op.DIV:
            return _binary(Op.FLOORDIV)(cx, x, y, alpha)
        if kw.get("rounding_mode") is not None:
            raise Unsupported(f"rounding_mode={kw['rounding_mode']!r}")
        if alpha != 1:
            y = cx.emit(Op.MUL, [y], O.BinaryAttrs(float(alpha))) if isinstance(y, Value) \
                else y * alpha
        return binary(cx, op, x, y, final=True)
    return rule


def binary(cx, op: Op, x, y, final: bool = False) -> Value:
    """`op` of two operands, each a Value or a Python number (kept in the attrs)."""
    if isinstance(x, Value) and isinstance(y, Value):
        return cx.emit(op, [x, y], O.BinaryAttrs(), final=final)
    if isinstance(x, Value):
        return cx.emit(op, [x], O.BinaryAttrs(_number(y)), final=final)
    if isinstance(y, Value):
        return cx.emit(op, [y], O.BinaryAttrs(_number(x), scalar_first=True), final=final)
    raise Unsupported("both operands are Python numbers")


def _number(v):
    """A Python scalar operand as BinaryAttrs keeps it: an int stays an int (int tensor + 1 is
    an int tensor in torch, + 1.0 is a float one)."""
    return int(v) if isinstance(v, (bool, int)) else float(v)


def _remainder(cx, x, y):
    """remainder(x, y) = x - floor(x / y) * y (the sign of the divisor, as torch and Python)
    for integers: position and bucket arithmetic on ids. Floats are refused: computed this
    way the result can round to y itself, which torch's fmod-based remainder never gives."""
    if not isinstance(x, Value):
        raise Unsupported("remainder of a Python number by a tensor")
    if x.dtype.is_float or isinstance(y, float) or (isinstance(y, Value) and y.dtype.is_float):
        raise Unsupported("remainder of floating-point values (only integers: ids, positions)")
    qy = binary(cx, Op.MUL, binary(cx, Op.FLOORDIV, x, y), y)
    return binary(cx, Op.SUB, x, qy, final=True)


def _rsub(cx, x, y, alpha=1):
    """rsub(x, y) = y - alpha * x."""
    if alpha != 1:
        raise Unsupported(f"alpha={alpha}")
    return _binary(Op.SUB)(cx, y, x)


def _unary(op: Op):
    return lambda cx, x: cx.emit(op, [x], O.NoAttrs(), final=True)


def _gelu(cx, x, approximate="none"):
    return cx.emit(Op.GELU, [x], O.GeluAttrs(approximate), final=True)


def _linear(cx, x, w, b=None):
    return cx.emit(Op.LINEAR, [x, w] + ([b] if b is not None else []), O.NoAttrs(), final=True)


def _matmul(cx, a, b):
    return cx.emit(Op.MATMUL, [a, b], O.NoAttrs(), final=True)


def _embedding(cx, table, ids, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    # padding_idx, scale_grad_by_freq and sparse only change gradients
    return cx.emit(Op.EMBEDDING, [table, ids], O.NoAttrs(), final=True)


def _addmm(cx, bias, a, b, beta=1, alpha=1):
    if beta != 1 or alpha != 1:
        raise Unsupported("addmm with alpha/beta")
    return cx.emit(Op.ADD, [cx.emit(Op.MATMUL, [a, b], O.NoAttrs()), bias], O.BinaryAttrs(),
                   final=True)


def _to_copy(cx, x, dtype=None, **kw):
    if dtype is None:
        return cx.emit(Op.COPY, [x], O.NoAttrs(), final=True)
    return cx.emit(Op.CAST, [x], O.CastAttrs(DType.from_torch(dtype)), final=True)


def _to_dtype(cx, x, dtype, *rest, **kw):
    return _to_copy(cx, x, dtype)


def _copy(cx, x, **kw):
    return cx.emit(Op.COPY, [x], O.NoAttrs(), final=True)


def _identity(cx, x, *rest, **kw):
    return x


def _reduce_dims(dims, rank: int) -> tuple[int, ...]:
    """aten's reduction `dim` argument as sorted non-negative dims (none or [] means all)."""
    return tuple(range(rank)) if not dims else tuple(sorted(_dim(d, rank) for d in dims))


def _reduce(op: Op):
    def rule(cx, x, dims=None, keepdim=False, dtype=None):
        if dtype is not None and dtype != x.dtype.to_torch():  # (a cast of the input, not
            x = cx.emit(Op.CAST, [x], O.CastAttrs(DType.from_torch(dtype)))  # the result)
        dims = _reduce_dims(dims, len(x.shape))
        if op == Op.SUM and not x.dtype.is_float and x.dtype != DType.I64:
            # torch sums bools and narrower integers to int64 (reduce_int_kernel: exact)
            x = cx.emit(Op.CAST, [x], O.CastAttrs(DType.I64))
        if op == Op.SUM and _few_inner(x, dims):
            return _sum_of_slices(cx, x, dims[0], keepdim)
        return cx.emit(op, [x], O.ReduceAttrs(dims, bool(keepdim)), final=True)
    return rule


_MAX_SLICES = 8


def _few_inner(x, dims) -> bool:
    """A float sum over one short dim that is not the last (MoE's combine of the k expert
    outputs of each token: [T, k, D].sum(1)): the reduction kernels reduce the last dims only."""
    if len(dims) != 1 or not x.dtype.is_float:
        return False
    d = dims[0]
    size = x.shape[d]
    return (isinstance(size, int) and 1 <= size <= _MAX_SLICES
            and any(s != 1 for s in x.shape[d + 1:]))


def _sum_of_slices(cx, x, dim: int, keepdim: bool):
    """x.sum(dim) as x[.., 0, ..] + x[.., 1, ..] + ...: one pointwise kernel reading the
    slices as strided views (f32 arithmetic, one rounding at the store)."""
    total = None
    for i in range(x.shape[dim]):
        part = cx.emit(Op.SELECT, [x], O.SelectAttrs(dim, i))
        total = part if total is None else cx.emit(Op.ADD, [total, part], O.BinaryAttrs())
    if keepdim:
        return cx.emit(Op.UNSQUEEZE, [total], O.DimAttrs((dim,)), final=True)
    return total


def _var(sqrt: bool):
    """var / std as mean, centre, square, reduce: the reduction kernels run it (and a written-out
    LayerNorm over var(unbiased=False) is still recognised by fuse_patterns)."""
    def rule(cx, x, dims=None, *, correction=None, keepdim=False):
        var = variance(cx, x, dims, correction, keepdim, final=not sqrt)
        return cx.emit(Op.SQRT, [var], O.NoAttrs(), final=True) if sqrt else var
    return rule


def variance(cx, x, dims, correction, keepdim, final: bool = False) -> Value:
    """x's variance over dims (torch's correction, default 1): mean, centre, square, reduce."""
    dims = _reduce_dims(dims, len(x.shape))
    n = 1
    for d in dims:
        if not isinstance(x.shape[d], int):
            raise Unsupported("a symbolic reduced dim")
        n *= x.shape[d]
    correction = 1 if correction is None else correction
    if n - correction <= 0:
        raise Unsupported(f"correction={correction} over {n} elements")
    mean = cx.emit(Op.MEAN, [x], O.ReduceAttrs(dims, True))
    centred = cx.emit(Op.SUB, [x, mean], O.BinaryAttrs())
    square = cx.emit(Op.MUL, [centred, centred], O.BinaryAttrs())
    if correction == 0:
        return cx.emit(Op.MEAN, [square], O.ReduceAttrs(dims, bool(keepdim)), final=final)
    total = cx.emit(Op.SUM, [square], O.ReduceAttrs(dims, bool(keepdim)))
    return cx.emit(Op.MUL, [total], O.BinaryAttrs(1.0 / (n - correction)), final=final)


def _softmax(op: Op):
    def rule(cx, x, dim, half_to_float=False):
        if half_to_float:
            raise Unsupported("half_to_float")
        return cx.emit(op, [x], O.SoftmaxAttrs(_dim(dim, len(x.shape))), final=True)
    return rule


def _rms_norm(cx, x, normalized_shape, weight=None, eps=None):
    if eps is None:
        import torch

        eps = torch.finfo(x.dtype.to_torch()).eps
    ins = [x] + ([weight] if weight is not None else [])
    return cx.emit(Op.RMS_NORM, ins, O.NormAttrs(float(eps), len(normalized_shape)), final=True)


def _layer_norm(cx, x, normalized_shape, weight=None, bias=None, eps=1e-5, cudnn=True):
    if weight is None and bias is not None:
        raise Unsupported("layer_norm with a bias but no weight")
    ins = [x] + [t for t in (weight, bias) if t is not None]
    return cx.emit(Op.LAYER_NORM, ins, O.NormAttrs(float(eps), len(normalized_shape)),
                   final=True)


def _sdpa(cx, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
          enable_gqa=False):
    """A mask that masks nothing is dropped and the causal pattern becomes is_causal (the
    kernel then skips the hidden tiles; a causal part ANDed with a run-time mask is split off by
    passes/fuse_attention, which does the same for written-out attention); any other
    mask, computed at run time (a padding mask from attention_mask) or constant (a window, a
    bias), is the attention kernel's run-time input."""
    inputs = [q, k, v]
    if attn_mask is not None:
        kind = _constant_mask_kind(cx, attn_mask, q.shape[-2], k.shape[-2])
        if kind is None:
            inputs.append(attn_mask)  # a causal part is split off by passes/fuse_attention
        is_causal = is_causal or kind == "causal"
    if dropout_p:
        raise Unsupported(f"dropout_p={dropout_p}")
    # one k/v head broadcast over the query heads (multi-query attention written without
    # enable_gqa, as Falcon does): the GQA kernel with one group
    mqa = k.shape[1] == 1 and v.shape[1] == 1 and q.shape[1] != 1
    attrs = O.SdpaAttrs(bool(is_causal), None if scale is None else float(scale),
                        bool(enable_gqa) or mqa)
    return cx.emit(Op.SDPA, inputs, attrs, final=True)


def _constant_mask_kind(cx, mask, seq_q, seq_k) -> str | None:
    """What a constant attention mask does: "none" (all True, or all 0 when additive),
    "causal" (query i sees keys 0..i in every batch and head: sdpa's is_causal), or None
    (anything else, or not a constant). HF models build one from arange even when nothing or
    only the future is masked (ViT and BERT without padding: nothing; GPT-2: causal); it folds
    to a constant before this rule sees it. An additive mask's masked entries must be -inf or
    a large negative number (what HF writes: the dtype's minimum).
    A mask whose size follows a dynamic dim is classified at several sizes (frontend/symbolic.py
    probe points, each dim's maximum included, so a sliding window wider than the small sizes
    is not mistaken for causal); every size must agree. "none" agrees with "causal" only at a
    size where the causal mask itself keeps every key (one key: a 1x1 mask)."""
    from aotpack.ir.sym import subs

    samples = cx.constant_samples(mask)
    if samples is None:
        return None
    kinds = []
    for point, t in samples:
        sq, sk = subs(seq_q, point), subs(seq_k, point)
        kind = _mask_kind_at(t, sq, sk)
        kinds.append("both" if kind == "none" and sk <= 1 else kind)
    if all(k in ("none", "both") for k in kinds):
        return "none"
    if all(k in ("causal", "both") for k in kinds):
        return "causal"
    return None


def _mask_kind_at(t, seq_q: int, seq_k: int) -> str | None:
    import torch

    if t.dtype == torch.bool:
        keep = t
    else:
        keep = t == 0
        if not bool((keep | (t <= -1e4)).all()):
            return None  # a bias, not a mask
    if bool(keep.all()):
        return "none"
    causal = torch.ones(seq_q, seq_k, dtype=torch.bool).tril()  # top-left, as sdpa's
    try:
        full = keep.expand(*keep.shape[:-2], seq_q, seq_k) if keep.dim() >= 2 else None
    except RuntimeError:  # its last dims do not broadcast to [seq_q, seq_k]
        full = None
    if full is not None and bool((full == causal).all()):
        return "causal"
    return None


def _conv2d(cx, x, w, b=None, stride=1, padding=0, dilation=1, groups=1, final=True):
    """(aten_conv.py sends this case here.) Patch embedding (ViT): kernel == stride, no padding, dilation or groups, image a whole
    number of patches. It is a GEMM over patches: x [B, C, H, W] → patches [B·H/p·W/p, C·p·q]
    (a view, a permute and one copy), times the weight viewed [oc, C·p·q], (+ bias), back to
    [B, oc, H/p, W/q] as a view."""
    if len(x.shape) != 4 or len(w.shape) != 4:
        raise Unsupported("a convolution that is not 2-D over a batch")
    (B, C, H, W), (oc, Cw, p, q) = x.shape, w.shape
    if (_pair(stride) != (p, q) or _pair(padding) != (0, 0) or _pair(dilation) != (1, 1)
            or groups != 1 or Cw != C or H % p or W % q):
        raise Unsupported("anything but a non-overlapping patch embedding (kernel == stride, "
                          "padding 0, dilation 1, groups 1, image a whole number of patches)")
    hp, wq = H // p, W // q
    t = cx.emit(Op.VIEW, [x], O.ViewAttrs((B, C, hp, p, wq, q)))
    t = cx.emit(Op.PERMUTE, [t], O.PermuteAttrs((0, 2, 4, 1, 3, 5)))
    t = cx.emit(Op.COPY, [t], O.NoAttrs())
    t = cx.emit(Op.VIEW, [t], O.ViewAttrs((B * hp * wq, C * p * q)))
    wv = cx.emit(Op.VIEW, [w], O.ViewAttrs((oc, C * p * q)))
    y = cx.emit(Op.LINEAR, [t, wv] + ([b] if b is not None else []), O.NoAttrs())
    y = cx.emit(Op.VIEW, [y], O.ViewAttrs((B, hp, wq, oc)))
    return cx.emit(Op.PERMUTE, [y], O.PermuteAttrs((0, 3, 1, 2)), final=final)


def _pair(v) -> tuple:
    if isinstance(v, (list, tuple)):
        return tuple(v) * (2 // len(v)) if len(v) in (1, 2) else tuple(v)
    return (v, v)


def _view(cx, x, *shape_or_dims):  # view(x, shape), flatten(x, start, end)
    return cx.emit(Op.VIEW, [x], O.ViewAttrs(cx.out_shape()), final=True)


def _permute(cx, x, dims):
    rank = len(x.shape)
    return cx.emit(Op.PERMUTE, [x], O.PermuteAttrs(tuple(_dim(d, rank) for d in dims)),
                   final=True)


def _transpose(cx, x, d0, d1):
    dims = list(range(len(x.shape)))
    d0, d1 = _dim(d0, len(dims)), _dim(d1, len(dims))
    dims[d0], dims[d1] = dims[d1], dims[d0]
    return cx.emit(Op.PERMUTE, [x], O.PermuteAttrs(tuple(dims)), final=True)


def _t(cx, x):
    return _transpose(cx, x, 0, 1) if len(x.shape) == 2 else x


def _slice_attrs(x, dim, start, end, step):
    dim = _dim(dim, len(x.shape))
    size = x.shape[dim]
    start = 0 if start is None else _wrap(start, size)
    end = size if end is None else _wrap(end, size)
    start = sym_max(0, sym_min(start, size))
    end = sym_max(0, sym_min(end, size))
    return O.SliceAttrs(dim, start, sym_max(start, end), step)


def _wrap(i, size):
    """A negative index counts from the end (a symbolic index must be decidably either)."""
    try:
        return i + size if i < 0 else i
    except SymbolicError:
        raise Unsupported(f"index {i}, which may be negative or not") from None


def _slice(cx, x, dim=0, start=None, end=None, step=1):
    return cx.emit(Op.SLICE, [x], _slice_attrs(x, dim, start, end, step), final=True)


def _select(cx, x, dim, index):
    dim = _dim(dim, len(x.shape))
    index = _wrap(index, x.shape[dim])
    return cx.emit(Op.SELECT, [x], O.SelectAttrs(dim, index), final=True)


def _expand(cx, x, sizes, implicit=False):
    return cx.emit(Op.EXPAND, [x], O.ExpandAttrs(cx.out_shape()), final=True)


_REPEAT_FOLD_BYTES = 1 << 26  # as translate._FOLD_LIMIT: constants stored in the bundle


def _repeat(cx, x, repeats):
    """x.repeat(r0, r1, ...): x viewed as (1, s0, 1, s1, ...), expanded to (r0, s0, r1, s1,
    ...), copied and viewed as (r0·s0, r1·s1, ...): the tiling is one copy kernel."""
    reps, rank = tuple(repeats), len(x.shape)
    if len(reps) < rank:
        raise Unsupported(f"repeat with {len(reps)} counts for a {rank}-D tensor")
    t = cx.constant_value(x)
    if t is not None and all(isinstance(r, int) for r in reps) and \
            t.numel() * t.element_size() * math.prod(reps) <= _REPEAT_FOLD_BYTES:
        return cx.add_constant("repeat", t.repeat(*reps))  # a table (GPT-J's sin/cos): fold
    shape = (1,) * (len(reps) - rank) + tuple(x.shape)
    v = cx.emit(Op.VIEW, [x], O.ViewAttrs(tuple(d for s in shape for d in (1, s))))
    e = cx.emit(Op.EXPAND, [v], O.ExpandAttrs(tuple(d for r, s in zip(reps, shape)
                                                    for d in (r, s))))
    return cx.emit(Op.VIEW, [cx.emit(Op.COPY, [e], O.NoAttrs())], O.ViewAttrs(cx.out_shape()),
                   final=True)


def _full_like(cx, x, fill_value, dtype=None, **_layout):
    """zeros_like / ones_like / full_like of a run-time tensor: only its shape is read (a
    constant fold would need its data): one value broadcast to that shape, symbolic dims
    included."""
    import torch

    if not isinstance(x, Value):
        raise Unsupported("full_like of a Python value")
    td = dtype if dtype is not None else x.dtype.to_torch()
    fill = cx.add_constant("fill", torch.full((1,) * len(x.shape), fill_value, dtype=td))
    return cx.emit(Op.EXPAND, [fill], O.ExpandAttrs(cx.out_shape()), final=True)


def _unsqueeze(cx, x, dim):
    return cx.emit(Op.UNSQUEEZE, [x], O.DimAttrs((_dim(dim, len(x.shape) + 1),)), final=True)


def _squeeze(cx, x, dims=None):
    rank = len(x.shape)
    if dims is None:
        dims = [i for i, d in enumerate(x.shape) if d == 1]
    elif isinstance(dims, int):
        dims = [dims]
    dims = tuple(sorted(_dim(d, rank) for d in dims))
    return cx.emit(Op.SQUEEZE, [x], O.DimAttrs(dims), final=True)


def _cat(cx, xs, dim=0):
    xs = [x for x in xs if not (len(x.shape) == 1 and x.shape[0] == 0)]  # torch skips [0]
    return cx.emit(Op.CAT, xs, O.DimAttrs((_dim(dim, len(xs[0].shape)),)), final=True)


def _split(cx, x, sizes, dim=0):
    dim = _dim(dim, len(x.shape))
    total = x.shape[dim]
    if isinstance(sizes, int) and not isinstance(total, int):
        raise Unsupported(f"splitting the dynamic dim {total} in chunks of {sizes}")
    if isinstance(sizes, int):
        sizes = [min(sizes, total - s) for s in range(0, total, sizes)]
    outs, start = [], 0
    for size in sizes:
        outs.append(cx.emit(Op.SLICE, [x], O.SliceAttrs(dim, start, start + size)))
        start += size
    return outs


def _getitem(cx, xs, index):
    return xs[index]


def _nothing(cx, *args, **kwargs):
    return None


RULES = {
    "aten.linear.default": _linear, "aten.mm.default": _matmul, "aten.bmm.default": _matmul,
    "aten.matmul.default": _matmul, "aten.addmm.default": _addmm,
    "aten.embedding.default": _embedding,
    "aten.add.Tensor": _binary(Op.ADD), "aten.add.Scalar": _binary(Op.ADD),
    "aten.sub.Tensor": _binary(Op.SUB), "aten.sub.Scalar": _binary(Op.SUB),
    "aten.rsub.Scalar": _rsub, "aten.rsub.Tensor": _rsub,
    "aten.mul.Tensor": _binary(Op.MUL), "aten.mul.Scalar": _binary(Op.MUL),
    "aten.div.Tensor": _binary(Op.DIV), "aten.div.Scalar": _binary(Op.DIV),
    "aten.div.Tensor_mode": _binary(Op.DIV),
    "aten.remainder.Scalar": _remainder, "aten.remainder.Tensor": _remainder,
    "aten.maximum.default": _binary(Op.MAX), "aten.minimum.default": _binary(Op.MIN),
    "aten.pow.Tensor_Scalar": _binary(Op.POW), "aten.pow.Tensor_Tensor": _binary(Op.POW),
    "aten.pow.Scalar": _binary(Op.POW),
    "aten.neg.default": _unary(Op.NEG), "aten.exp.default": _unary(Op.EXP),
    "aten.log.default": _unary(Op.LOG), "aten.sqrt.default": _unary(Op.SQRT),
    "aten.rsqrt.default": _unary(Op.RSQRT), "aten.reciprocal.default": _unary(Op.RECIP),
    "aten.abs.default": _unary(Op.ABS), "aten.sin.default": _unary(Op.SIN),
    "aten.cos.default": _unary(Op.COS), "aten.tanh.default": _unary(Op.TANH),
    "aten.sigmoid.default": _unary(Op.SIGMOID), "aten.relu.default": _unary(Op.RELU),
    "aten.silu.default": _unary(Op.SILU), "aten.gelu.default": _gelu,
    "aten._to_copy.default": _to_copy, "aten.to.dtype": _to_dtype,
    "aten.clone.default": _copy, "aten.contiguous.default": _copy,
    "aten.alias.default": _identity, "aten.detach.default": _identity,
    "aten.lift_fresh_copy.default": _identity, "aten.dropout.default": _identity,
    "aten.mean.dim": _reduce(Op.MEAN), "aten.mean.default": _reduce(Op.MEAN),
    "aten.sum.dim_IntList": _reduce(Op.SUM), "aten.sum.default": _reduce(Op.SUM),
    "aten.amax.default": _reduce(Op.AMAX), "aten.amin.default": _reduce(Op.AMIN),
    "aten.var.correction": _var(False), "aten.std.correction": _var(True),
    "aten._softmax.default": _softmax(Op.SOFTMAX), "aten.softmax.int": _softmax(Op.SOFTMAX),
    "aten._log_softmax.default": _softmax(Op.LOG_SOFTMAX),
    "aten.log_softmax.int": _softmax(Op.LOG_SOFTMAX),
    "aten.rms_norm.default": _rms_norm, "aten.layer_norm.default": _layer_norm,
    "aten.scaled_dot_product_attention.default": _sdpa,
    "aten.view.default": _view, "aten.reshape.default": _view,
    "aten._unsafe_view.default": _view, "aten.permute.default": _permute,
    "aten.flatten.using_ints": _view,  # convolutions: aten_conv.py
    "aten.transpose.int": _transpose, "aten.t.default": _t, "aten.slice.Tensor": _slice,
    "aten.select.int": _select, "aten.expand.default": _expand,
    "aten.full_like.default": _full_like, "aten.repeat.default": _repeat,
    "aten.unsqueeze.default": _unsqueeze, "aten.squeeze.dim": _squeeze,
    "aten.squeeze.dims": _squeeze, "aten.squeeze.default": _squeeze, "aten.cat.default": _cat,
    "aten.split.Tensor": _split, "aten.split_with_sizes.default": _split,
    "<built-in function getitem>": _getitem,
    "aten._assert_tensor_metadata.default": _nothing, "aten._assert_scalar.default": _nothing,
    "aten.sym_constrain_range_for_size.default": _nothing,
}

