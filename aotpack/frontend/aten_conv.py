"""aten → IR rules for convolutional networks: convolution (transposed: aten_conv_transpose.py),
batch norm (eval), pooling, zero padding, and the hard activations (relu6, hardswish,
hardsigmoid, hardtanh, clamp, leaky_relu).

CONV and POOL compute on channels-last tensors ([N, H, W, C]); each rule here wraps one in the
permutes that keep the model's own NCHW (NCL) semantics, and passes/channels_last.py later moves
those permutes past elementwise ops so that consecutive convolutions meet channels-last with no
copy in between. A 1-D convolution is a 2-D one over an image of height 1.
"""
from __future__ import annotations

from aotpack.frontend import aten_conv_stem
from aotpack.frontend.aten_table import Unsupported, _conv2d, _pair, binary
from aotpack.ir import ops as O
from aotpack.ir.graph import Value
from aotpack.ir.ops import Op


def _to_channels_last(cx, x: Value) -> Value:
    """[N, C, H, W] → [N, H, W, C]; [N, C, L] → [N, 1, L, C]."""
    if len(x.shape) == 4:
        return cx.emit(Op.PERMUTE, [x], O.PermuteAttrs((0, 2, 3, 1)))
    n, c, length = x.shape
    t = cx.emit(Op.PERMUTE, [x], O.PermuteAttrs((0, 2, 1)))
    return cx.emit(Op.VIEW, [t], O.ViewAttrs((n, 1, length, c)))


def _from_channels_last(cx, y: Value, rank: int, final: bool = True) -> Value:
    """The inverse of _to_channels_last for a result of the given rank (`final`: it is the fx
    node's value, typed against torch's; not for the tuple results of multi-output ops)."""
    if rank == 4:
        return cx.emit(Op.PERMUTE, [y], O.PermuteAttrs((0, 3, 1, 2)), final=final)
    n, _, length, c = y.shape
    t = cx.emit(Op.VIEW, [y], O.ViewAttrs((n, length, c)))
    return cx.emit(Op.PERMUTE, [t], O.PermuteAttrs((0, 2, 1)), final=final)


def _ints(v, n: int) -> tuple[int, ...]:
    v = tuple(v) if isinstance(v, (list, tuple)) else (v,)
    v = v * n if len(v) == 1 else v
    if len(v) != n or not all(isinstance(i, int) for i in v):
        raise Unsupported(f"geometry {v} (want {n} integers)")
    return v


def _convolution(cx, x, w, b, stride, padding, dilation, transposed, output_padding, groups):
    if transposed:  # one ordinary convolution + a pixel shuffle (aten_conv_transpose.py)
        from aotpack.frontend.aten_conv_transpose import conv_transpose_nchw

        weight = cx.constant_value(_constant_weight(cx, w))
        known = cx.constant_value(b) if b is not None else None  # the bias, if a constant
        pads = tuple((p, p) for p in _ints(padding, max(len(x.shape) - 2, 1)))
        return conv_transpose_nchw(cx, x, weight, b if known is None else known, stride, pads,
                                   output_padding, dilation, int(groups))
    if len(x.shape) == 5 and len(w.shape) == 5:
        from aotpack.frontend.aten_conv3d import conv3d_nchw

        return conv3d_nchw(cx, x, _constant_weight(cx, w), b, stride, padding, dilation,
                           int(groups))
    if len(x.shape) not in (3, 4) or len(w.shape) != len(x.shape):
        raise Unsupported(f"a {len(x.shape) - 2}-D convolution (Conv1d, Conv2d and Conv3d "
                          f"over a batch are supported)")
    w = _constant_weight(cx, w)
    spatial = len(x.shape) - 2
    stride, dilation = _ints(stride, spatial), _ints(dilation, spatial)
    if isinstance(padding, str):
        raise Unsupported(f"padding={padding!r} left unresolved by torch.export")
    padding = _ints(padding, spatial)
    x, pads = cx.padded_source(x)  # a zero pad before the conv joins its padding
    pads = tuple((p + lo, p + hi) for p, (lo, hi) in zip(padding, pads))
    return convolution_nchw(cx, x, w, b, stride, pads, dilation, groups)


def convolution_nchw(cx, x: Value, w: Value, b, stride, pads, dilation, groups,
                     final: bool = True) -> Value:
    """A 1-D or 2-D convolution of x [N, C, (H,) W] by a known weight, `pads` (lo, hi) zeros
    per spatial dim: CONV between the channels-last permutes (the ONNX frontend's Conv too).
    `final`: the result is the fx node's value (not a step of a 3-D convolution)."""
    spatial = len(x.shape) - 2
    stride, dilation = tuple(stride), tuple(dilation)
    if spatial == 2 and not any(map(any, pads)) and not _is_channels_last(cx, x) \
            and _is_patch_embedding(x, w, stride, (0, 0), dilation, groups):
        return _conv2d(cx, x, w, b, stride, 0, dilation, groups, final)  # one GEMM: fast
    if spatial == 2 and not _is_channels_last(cx, x) and _is_stem(cx, x, w, stride, pads,
                                                                  dilation, groups):
        y = aten_conv_stem.stem_conv(cx, x, w, pads)  # folded 2x2: aten_conv_stem
        if b is not None:
            y = cx.emit(Op.ADD, [y, b], O.BinaryAttrs())
        return _from_channels_last(cx, y, 4, final)
    if spatial == 1:
        stride, dilation, pads = (1,) + stride, (1,) + dilation, ((0, 0),) + tuple(pads)
        oc, cg, k = w.shape
        w = cx.emit(Op.VIEW, [w], O.ViewAttrs((oc, cg, 1, k)))
    attrs = O.ConvAttrs(stride, tuple(tuple(p) for p in pads), dilation, int(groups))
    y = cx.emit(Op.CONV, [_to_channels_last(cx, x), w], attrs)
    if b is not None:
        y = cx.emit(Op.ADD, [y, b], O.BinaryAttrs())
    return _from_channels_last(cx, y, len(x.shape), final)


def _is_stem(cx, x, w, stride, pads, dilation, groups) -> bool:
    weight = cx.constant_value(w)
    return weight is not None and not weight.is_meta and \
        aten_conv_stem.applies(x, w.shape, stride, pads, dilation, groups)


def _constant_weight(cx, w: Value) -> Value:
    """The conv's weight as a constant: a parameter (through views), or a value computed from
    parameters only (weight_norm's g * v / |v|, as wav2vec2's positional conv exports),
    evaluated now: its inputs are then read by no kernel and are not stored."""
    if cx.constant_value(w) is not None:
        return w
    t = _evaluate_from_constants(cx, w, {})
    if t is None:
        raise Unsupported("a convolution whose weight is computed at run time from the "
                          "inputs (its weight must be a parameter or buffer of the model, or "
                          "computed from them alone)")
    return cx.add_constant("weight", t)


def _evaluate_from_constants(cx, v: Value, memo: dict, depth: int = 0):
    """The tensor `v` holds when every leaf it is computed from is a constant, else None."""
    from aotpack.ir.interpret import eval_node

    if not isinstance(v, Value) or depth > 64:
        return None
    if v.name in cx.constants:
        t = cx.constants[v.name].tensor
        return None if t.is_meta else t
    if v.name not in memo:
        node = cx.producer(v)
        args = [] if node is None else [_evaluate_from_constants(cx, a, memo, depth + 1)
                                          for a in node.inputs]
        try:
            memo[v.name] = None if node is None or any(a is None for a in args) \
                else eval_node(node, args)
        except NotImplementedError:
            memo[v.name] = None
    return memo[v.name]


def _is_channels_last(cx, x: Value) -> bool:
    """x is an NCHW view of a channels-last result (ConvNeXt's downsampling conv reads its
    LayerNorm2d's output): the implicit GEMM reads it in place, where the patch-embedding GEMM
    would first copy it into patches."""
    node = cx.producer(x)
    return node is not None and node.op == Op.PERMUTE and tuple(node.attrs.dims) == (0, 3, 1, 2)


def _is_patch_embedding(x, w, stride, padding, dilation, groups) -> bool:
    (_, c, h, wd), (_, cw, p, q) = x.shape, w.shape
    return (tuple(stride) == (p, q) and tuple(padding) == (0, 0) and tuple(dilation) == (1, 1)
            and groups == 1 and cw == c and isinstance(h, int) and isinstance(wd, int)
            and h % p == 0 and wd % q == 0 and p * q > 1)


def _constant_pad(cx, x, pad, value=0.0):
    """Zero (or constant) padding as a cat with constant blocks; remembered so that a
    convolution reading it folds the zeros into its own padding instead (padding='same' with
    an even kernel exports as constant_pad_nd + convolution)."""
    if len(pad) % 2:
        raise Unsupported(f"pad {list(pad)} (an odd number of entries)")
    rank = len(x.shape)
    pairs = [(pad[2 * i], pad[2 * i + 1]) for i in range(len(pad) // 2)]  # last dim first
    for i, (lo, hi) in enumerate(pairs):  # a negative pad crops (RWKV's time shift: (1, -1))
        if lo < 0 or hi < 0:
            dim, size = rank - 1 - i, x.shape[rank - 1 - i]
            x = cx.emit(Op.SLICE, [x], O.SliceAttrs(dim, max(-lo, 0), size + min(hi, 0), 1))
    pairs = [(max(lo, 0), max(hi, 0)) for lo, hi in pairs]
    if not any(lo or hi for lo, hi in pairs):
        return cx.emit(Op.COPY, [x], O.NoAttrs())
    out = x
    for i, (lo, hi) in enumerate(pairs):
        dim = rank - 1 - i
        parts = [fill_block(cx, out, dim, lo, value), out, fill_block(cx, out, dim, hi, value)]
        parts = [p for p in parts if p is not None]
        if len(parts) > 1:
            out = cx.emit(Op.CAT, parts, O.DimAttrs((dim,)))
    if value == 0 and rank >= 3:
        spatial = [(0, 0)] * (rank - 2)
        for i, p in enumerate(pairs):
            if i < rank - 2:
                spatial[rank - 3 - i] = p
            elif p != (0, 0):
                return out  # pads batch or channels: not a conv's padding
        cx.pads[out.name] = (x, tuple(spatial))
    return out


def fill_block(cx, x: Value, dim: int, size: int, fill: float) -> Value | None:
    """A block of `fill` shaped like `x` but `size` long along `dim` (None if size 0): one
    element per position along `dim`, expanded (a view)."""
    import torch

    if size == 0:
        return None
    shape = tuple(size if i == dim else 1 for i in range(len(x.shape)))
    c = cx.add_constant(f"pad{dim}", torch.full(shape, fill, dtype=x.dtype.to_torch()))
    want = tuple(size if i == dim else d for i, d in enumerate(x.shape))
    return cx.emit(Op.EXPAND, [c], O.ExpandAttrs(want)) if want != shape else c


def _batch_norm_eval(cx, x, weight, bias, mean, var, momentum, eps):
    """Inference batch norm: x * scale + shift per channel (dim 1), scale and shift computed
    here from the statistics; passes/fold_conv_bn.py folds them into a preceding conv."""
    tensors = [cx.constant_value(t) if t is not None else None
               for t in (weight, bias, mean, var)]
    if any(t is None for t, v in zip(tensors, (weight, bias, mean, var)) if v is not None):
        raise Unsupported("batch norm whose statistics or affine parameters are computed at "
                          "run time")
    return [batch_norm_affine(cx, x, *tensors, eps), None, None]  # (out, mean, invstd)


def batch_norm_affine(cx, x: Value, w, b, m, v, eps: float) -> Value:
    """x * scale + shift per channel (dim 1) from the statistics (torch tensors; w and b may
    be None), computed in f64 here (the ONNX frontend's BatchNormalization too)."""
    import torch

    if m is None or v is None:
        raise Unsupported("batch norm without running statistics (track_running_stats=False "
                          "normalizes by the batch: not an inference op)")
    scale = torch.rsqrt(v.double() + eps)
    if w is not None:
        scale = scale * w.double()
    shift = -m.double() * scale + (b.double() if b is not None else 0.0)
    c = x.shape[1]
    shape = (c,) + (1,) * (len(x.shape) - 2)
    dtype = x.dtype.to_torch()
    # the f64 values travel along: folded into a conv, they are rounded once, with the weights
    s = cx.add_constant("bn_scale", scale.to(dtype).reshape(shape), scale.reshape(shape))
    t = cx.add_constant("bn_shift", shift.to(dtype).reshape(shape), shift.reshape(shape))
    y = cx.emit(Op.MUL, [x, s], O.BinaryAttrs())
    return cx.emit(Op.ADD, [y, t], O.BinaryAttrs())


def _group_norm(cx, x, weight, bias, n, c, hw, groups, eps):
    """GroupNorm: a LayerNorm (no affine) over each group's channels and positions of the
    view [N, G, C/G, ...], then the per-channel affine map (wav2vec2's feature extractor
    normalizes each channel over time: G = C)."""
    shape = tuple(x.shape)
    if len(shape) < 3 or shape[1] % groups:
        raise Unsupported(f"group norm of a {list(shape)} tensor in {groups} groups")
    grouped = (shape[0], groups, shape[1] // groups) + shape[2:]
    y = cx.emit(Op.VIEW, [x], O.ViewAttrs(grouped))
    y = cx.emit(Op.LAYER_NORM, [y], O.NormAttrs(float(eps), len(grouped) - 2))
    y = cx.emit(Op.VIEW, [y], O.ViewAttrs(shape))
    per_channel = (shape[1],) + (1,) * (len(shape) - 2)
    if weight is not None:
        y = cx.emit(Op.MUL, [y, cx.emit(Op.VIEW, [weight], O.ViewAttrs(per_channel))],
                    O.BinaryAttrs())
    if bias is not None:
        y = cx.emit(Op.ADD, [y, cx.emit(Op.VIEW, [bias], O.ViewAttrs(per_channel))],
                    O.BinaryAttrs())
    return [y, None, None]  # (out, mean, rstd)


def _batch_norm_training(cx, *args, **kwargs):
    raise Unsupported("batch norm in training mode: call model.eval() before exporting")


def _pool_attrs(x, kind, kernel, stride, padding, ceil_mode=False, count_include_pad=True,
                divisor=None):
    if len(x.shape) != 4:
        raise Unsupported(f"{kind} pooling over a {len(x.shape)}-D tensor (2-D pooling of "
                          f"[N, C, H, W] is supported)")
    kernel = _ints(kernel, 2)
    stride = _ints(stride, 2) if stride else kernel
    padding = _ints(padding, 2)
    return O.PoolAttrs(kind, kernel, stride, padding, bool(ceil_mode), bool(count_include_pad),
                       None if divisor is None else int(divisor))


def _pool(cx, x, attrs: O.PoolAttrs, final: bool = True) -> Value:
    y = cx.emit(Op.POOL, [_to_channels_last(cx, x)], attrs)
    return _from_channels_last(cx, y, 4, final)


def _max_pool(cx, x, kernel, stride=(), padding=0, dilation=1, ceil_mode=False, final=True):
    if _ints(dilation, 2) != (1, 1):
        return _dilated_max_pool(cx, x, _pool_attrs(x, "max", kernel, stride, padding,
                                                    ceil_mode), _ints(dilation, 2))
    return _pool(cx, x, _pool_attrs(x, "max", kernel, stride, padding, ceil_mode), final)


def _dilated_max_pool(cx, x, attrs: O.PoolAttrs, dilation) -> Value:
    """Max pooling over a dilated window (static image sizes): the image padded with the
    dtype's lowest value, then the largest of one strided slice per tap (a pointwise max over
    KH*KW views, one kernel)."""
    import torch

    sizes = x.shape[2:]
    if not all(isinstance(d, int) for d in sizes):
        raise Unsupported("dilated max pooling over a dynamic image size")
    outs = [_dilated_pool_size(n, k, s, p, d, attrs.ceil_mode) for n, k, s, p, d in
            zip(sizes, attrs.kernel, attrs.stride, attrs.padding, dilation)]
    # the right/bottom padding the last window reaches (ceil_mode may reach past `padding`)
    ends = [max(p, (o - 1) * s + d * (k - 1) + 1 - n - p) for n, o, k, s, p, d in
            zip(sizes, outs, attrs.kernel, attrs.stride, attrs.padding, dilation)]
    lowest = float("-inf") if x.dtype.is_float else torch.iinfo(x.dtype.to_torch()).min
    (pt, pl), (pb, pr) = attrs.padding, ends
    padded = _constant_pad(cx, x, [pl, pr, pt, pb], lowest) if pt or pl or pb or pr else x
    most = None
    for i in range(attrs.kernel[0]):
        for j in range(attrs.kernel[1]):
            v = padded
            for dim, start, step, count in ((2, i * dilation[0], attrs.stride[0], outs[0]),
                                            (3, j * dilation[1], attrs.stride[1], outs[1])):
                v = cx.emit(Op.SLICE, [v], O.SliceAttrs(dim, start,
                                                         start + (count - 1) * step + 1, step))
            most = v if most is None else cx.emit(Op.MAX, [most, v], O.BinaryAttrs())
    return most


def _dilated_pool_size(n: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    """torch's pooling output length with dilation (with ceil_mode, a last window that would
    start inside the right padding does not count)."""
    reach = n + 2 * p - d * (k - 1) - 1
    out = (-(-reach // s) if ceil_mode else reach // s) + 1
    return out - 1 if ceil_mode and (out - 1) * s >= n + p else out


def _max_pool_with_indices(cx, *args, **kwargs):
    return [_max_pool(cx, *args, **kwargs, final=False), None]  # (values, indices unused)


def _avg_pool(cx, x, kernel, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
              divisor_override=None, final=True):
    return _pool(cx, x, _pool_attrs(x, "avg", kernel, stride, padding, ceil_mode,
                                    count_include_pad, divisor_override), final)


def _adaptive_avg_pool(cx, x, output_size):
    """Adaptive average pooling where it is a plain one: each output cell averages an equal
    block (the input a whole multiple of the output; global pooling included)."""
    if len(x.shape) != 4:
        raise Unsupported("adaptive average pooling of anything but [N, C, H, W]")
    h, w = x.shape[2:]
    oh, ow = _ints(output_size, 2)
    if not (isinstance(h, int) and isinstance(w, int)):
        raise Unsupported(f"adaptive pooling over a dynamic image size {h}x{w}")
    if h % oh or w % ow:
        return _adaptive_by_matrices(cx, x, oh, ow)
    kernel = (h // oh, w // ow)
    return _pool(cx, x, O.PoolAttrs("avg", kernel, kernel))


def _adaptive_by_matrices(cx, x, oh: int, ow: int):
    """Adaptive average pooling to a size that does not divide the input (VGG's 7x7 head on
    other image sizes, PSPNet's pyramid): cells average overlapping blocks of unequal sizes,
    a linear map per axis, x @ Pw^T then (.)ᵀ @ Ph^T with constant averaging matrices (two
    GEMMs over the pixels)."""
    import torch

    def averaging(size: int, out: int):  # [size, out]: column i averages torch's block i
        m = torch.zeros(size, out, dtype=torch.float64)
        for i in range(out):
            lo, hi = (i * size) // out, -(-(i + 1) * size // out)
            m[lo:hi, i] = 1.0 / (hi - lo)
        return m.to(x.dtype.to_torch())

    h, w = x.shape[2:]
    n, c = x.shape[:2]
    y = cx.emit(Op.MATMUL, [x, cx.add_constant("pool_w", averaging(w, ow))], O.NoAttrs())
    y = cx.emit(Op.PERMUTE, [y], O.PermuteAttrs((0, 1, 3, 2)))  # [N, C, OW, H]
    y = cx.emit(Op.MATMUL, [y, cx.add_constant("pool_h", averaging(h, oh))], O.NoAttrs())
    return cx.emit(Op.PERMUTE, [y], O.PermuteAttrs((0, 1, 3, 2)), final=True)


def _as_strided(cx, x, size, stride, offset=None):
    """as_strided over the input's storage: the identity when it maps every element where the
    input's own strides do (adaptive_avg_pool2d of a channels-last tensor exports as mean then
    a restride of the [N, C, 1, 1] result), a view of the contiguous layout (from an offset
    within it) when the input is contiguous; else refused."""
    src = cx.fx_node.args[0].meta.get("val")
    size, stride, offset = tuple(size), tuple(stride), offset or 0
    if src is None or src.storage_offset() != 0:
        raise Unsupported("as_strided of a tensor that is itself a view with an offset, or "
                          "of an unknown layout")
    same = lambda have, want: all(a == b for d, a, b in zip(size, have, want) if d != 1)  # noqa
    if offset == 0 and size == tuple(x.shape) and same(tuple(src.stride()), stride):
        return x
    if src.is_contiguous():
        if offset and (not all(isinstance(v, int) for v in size + stride + (offset,))
                       or offset < 0 or min(stride, default=0) < 0 or offset + sum(
                           (d - 1) * s for d, s in zip(size, stride) if d) >= src.numel()):
            raise Unsupported(f"as_strided {list(size)}/{list(stride)} at offset {offset}: "
                              f"elements outside the {list(src.shape)} input (or sizes "
                              f"computed at run time)")
        return cx.emit(Op.AS_STRIDED, [x], O.StridedAttrs(size, stride, offset), final=True)
    raise Unsupported(f"as_strided {list(size)}/{list(stride)} of a non-contiguous "
                      f"{list(src.shape)}/{list(src.stride())} tensor")


def _hardtanh(cx, x, lo=-1.0, hi=1.0):
    if (lo, hi) == (0, 6):
        return cx.emit(Op.RELU6, [x], O.NoAttrs(), final=True)
    y = cx.emit(Op.MAX, [x], O.BinaryAttrs(float(lo)))
    return cx.emit(Op.MIN, [y], O.BinaryAttrs(float(hi)), final=True)


def _clamp(cx, x, lo=None, hi=None):
    if not all(v is None or isinstance(v, (int, float)) for v in (lo, hi)):
        raise Unsupported("clamp with tensor bounds")
    if lo is None and hi is None:
        return x
    if not x.dtype.is_float:  # int bounds keep integers integer (expert ids: GPT-OSS)
        out = x
        for op, v in ((Op.MAX, lo), (Op.MIN, hi)):
            if v is not None:
                out = cx.emit(op, [out], O.BinaryAttrs(int(v) if isinstance(v, int)
                                                       else float(v)))
        return out
    if lo is not None and hi is not None:
        return _hardtanh(cx, x, lo, hi)
    op, v = (Op.MAX, lo) if lo is not None else (Op.MIN, hi)
    return cx.emit(op, [x], O.BinaryAttrs(float(v)), final=True)


def _clamp_tensor(cx, x, lo=None, hi=None):
    """clamp with tensor bounds (broadcast like any binary op): max(x, lo), then min(., hi)."""
    bounds = [(op, v) for op, v in ((Op.MAX, lo), (Op.MIN, hi)) if v is not None]
    out = x
    for k, (op, v) in enumerate(bounds):
        out = binary(cx, op, out, v, final=k == len(bounds) - 1)
    return out


def _leaky_relu(cx, x, slope=0.01):
    """leaky_relu (HiFi-GAN's vocoder stages, GAN discriminators) as where(x > 0, x, x *
    slope): elementwise ops the pointwise fusion compiles into one kernel, exact for any
    slope."""
    positive = cx.emit(Op.GT, [x], O.BinaryAttrs(0.0))
    scaled = cx.emit(Op.MUL, [x], O.BinaryAttrs(float(slope)))
    return cx.emit(Op.WHERE, [positive, x, scaled], O.NoAttrs(), final=True)


def _unary(op: Op):
    return lambda cx, x: cx.emit(op, [x], O.NoAttrs(), final=True)


RULES = {
    "aten.convolution.default": _convolution,
    "aten.conv1d.default": lambda cx, x, w, b=None, s=1, p=0, d=1, g=1:
        _convolution(cx, x, w, b, s, p, d, False, 0, g),
    "aten.conv2d.default": lambda cx, x, w, b=None, s=1, p=0, d=1, g=1:
        _convolution(cx, x, w, b, s, p, d, False, 0, g),
    "aten.conv_transpose1d.default": lambda cx, x, w, b=None, s=1, p=0, op=0, g=1, d=1:
        _convolution(cx, x, w, b, s, p, d, True, op, g),
    "aten.conv_transpose2d.input": lambda cx, x, w, b=None, s=1, p=0, op=0, g=1, d=1:
        _convolution(cx, x, w, b, s, p, d, True, op, g),
    "aten.constant_pad_nd.default": _constant_pad,
    "aten._native_batch_norm_legit_no_training.default": _batch_norm_eval,
    "aten._native_batch_norm_legit.default": _batch_norm_training,
    "aten.native_group_norm.default": _group_norm,
    "aten._native_batch_norm_legit_functional.default": _batch_norm_training,
    "aten.max_pool2d_with_indices.default": _max_pool_with_indices,
    "aten.max_pool2d.default": _max_pool,
    "aten.avg_pool2d.default": _avg_pool,
    "aten._adaptive_avg_pool2d.default": _adaptive_avg_pool,
    "aten.adaptive_avg_pool2d.default": _adaptive_avg_pool,
    "aten.as_strided.default": _as_strided,
    "aten.hardtanh.default": _hardtanh, "aten.clamp.default": _clamp,
    "aten.clamp.Tensor": _clamp_tensor,
    "aten.relu6.default": _unary(Op.RELU6), "aten.leaky_relu.default": _leaky_relu,
    "aten.hardswish.default": _unary(Op.HARDSWISH),
    "aten.hardsigmoid.default": _unary(Op.HARDSIGMOID),
}

__all__ = ["RULES", "_pair"]
