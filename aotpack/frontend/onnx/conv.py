"""ONNX operators of convolutional networks → the IR the torch frontend emits for them
(frontend/aten_conv.py and aten_conv_transpose.py, whose helpers these rules call): Conv,
ConvTranspose, BatchNormalization (inference), MaxPool, AveragePool, GlobalAveragePool,
GlobalMaxPool, Clip, HardSigmoid, HardSwish.

CONV and POOL compute channels-last between permutes, so passes/channels_last.py,
fold_conv_bn.py and the conv lowering apply to ONNX models as they do to PyTorch ones.

ONNX geometry differs from torch's in two ways handled here: pads may be asymmetric
(`pads` = [begin..., end...], or auto_pad SAME_UPPER / SAME_LOWER with an even total), and a
pool's pads are explicit windows where torch pads symmetrically. Convolutions take asymmetric
zeros directly. A pool whose pads torch's rule cannot express is computed over the input
padded explicitly (with -inf for max, zeros for average) and, for an average, multiplied by a
constant map that turns the window size into ONNX's divisor (onnxruntime's: the window
clipped to the padded image, or to the image without count_include_pad).
"""
from __future__ import annotations

import numpy as np

from aotpack.frontend.aten_conv import (_clamp, _dilated_max_pool, _from_channels_last,
                                        _to_channels_last, batch_norm_affine, convolution_nchw,
                                        fill_block)
from aotpack.frontend.aten_conv_transpose import conv_transpose_nchw
from aotpack.frontend.aten_table import Unsupported
from aotpack.frontend.onnx.host import is_symbolic_array
from aotpack.ir import ops as O
from aotpack.ir.graph import Value
from aotpack.ir.infer import conv_out_size
from aotpack.ir.ops import Op
from aotpack.ir.sym import is_symbolic


def _spatial(x: Value, what: str) -> int:
    if len(x.shape) not in (3, 4):
        raise Unsupported(f"a {what} over a rank-{len(x.shape)} tensor (1-D [N, C, L] and 2-D "
                          f"[N, C, H, W] {what}s are supported, not 3-D)")
    return len(x.shape) - 2


def _geometry(cx, x: Value, kernel, dilation) -> tuple:
    """(strides, ((lo, hi) per spatial dim)) from strides, pads and auto_pad."""
    spatial = len(x.shape) - 2
    strides = [int(s) for s in cx.attr("strides", [1] * spatial)]
    auto = cx.attr("auto_pad", "NOTSET")
    if auto in ("NOTSET", "VALID"):
        pads = [int(p) for p in cx.attr("pads", [0] * 2 * spatial)] if auto == "NOTSET" \
            else [0] * 2 * spatial
        return strides, tuple((pads[i], pads[i + spatial]) for i in range(spatial))
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        raise Unsupported(f"auto_pad={auto!r}")
    pairs = []
    for size, k, s, d in zip(x.shape[2:], kernel, strides, dilation):
        reach = d * (k - 1) + 1
        if s == 1:
            total = reach - 1  # the same at every size
        elif is_symbolic(size):
            raise Unsupported(f"auto_pad={auto} with stride {s} over the dynamic dim {size} "
                              f"(its padding depends on the size: export with explicit pads "
                              f"or a static size)")
        else:
            total = max(0, (-(-size // s) - 1) * s + reach - size)
        small = total // 2
        pairs.append((small, total - small) if auto == "SAME_UPPER" else (total - small, small))
    return strides, tuple(pairs)


def _known(v, what: str):
    if not isinstance(v, np.ndarray) or is_symbolic_array(v):
        raise Unsupported(f"a {what} computed at run time (it must be a weight of the model)")
    return v


def _conv(cx, n, ins):
    x = cx.tensor(ins[0])
    spatial = _spatial(x, "convolution")
    w = _known(ins[1], "convolution weight")
    if w.ndim != len(x.shape):
        raise Unsupported(f"weight of shape {list(w.shape)} for an input of rank {len(x.shape)}")
    kernel = [int(k) for k in cx.attr("kernel_shape", w.shape[2:])]
    if tuple(kernel) != tuple(w.shape[2:]):
        raise Unsupported(f"kernel_shape {kernel} unlike the weight's {list(w.shape[2:])}")
    dilation = [int(d) for d in cx.attr("dilations", [1] * spatial)]
    strides, pads = _geometry(cx, x, kernel, dilation)
    x, zeros = cx.padded_source(x)  # a zero Pad before the convolution joins its padding
    pads = tuple((p + lo, q + hi) for (p, q), (lo, hi) in zip(pads, zeros))
    bias = cx.tensor(ins[2]) if len(ins) > 2 and ins[2] is not None else None
    return convolution_nchw(cx, x, cx.tensor(ins[1]), bias, strides, pads, dilation,
                            int(cx.attr("group", 1)))


def _conv_transpose(cx, n, ins):
    """ConvTranspose: frontend/aten_conv_transpose.py's phase convolution + shuffle, with
    ONNX's pads (begin, end), or pads derived from output_shape / auto_pad SAME_*."""
    from aotpack.frontend.onnx.translate import to_torch

    x = cx.tensor(ins[0])
    spatial = _spatial(x, "transposed convolution")
    w = to_torch(_known(ins[1], "transposed convolution weight"))
    kernel = [int(k) for k in cx.attr("kernel_shape", w.shape[2:])]
    if tuple(kernel) != tuple(w.shape[2:]):
        raise Unsupported(f"kernel_shape {kernel} unlike the weight's {list(w.shape[2:])}")
    strides = [int(v) for v in cx.attr("strides", [1] * spatial)]
    dilation = [int(v) for v in cx.attr("dilations", [1] * spatial)]
    extra = [int(v) for v in cx.attr("output_padding", [0] * spatial)]
    pads = _transposed_pads(cx, x, kernel, strides, dilation, extra)
    bias = None
    if len(ins) > 2 and ins[2] is not None:
        known = isinstance(ins[2], np.ndarray) and not is_symbolic_array(ins[2])
        bias = to_torch(ins[2]) if known else cx.tensor(ins[2])
    return conv_transpose_nchw(cx, x, w, bias, strides, pads, extra, dilation,
                               int(cx.attr("group", 1)))


def _transposed_pads(cx, x: Value, kernel, strides, dilation, extra) -> tuple:
    """((begin, end) per spatial dim) cropped off the full output: `pads`, or the total
    that output_shape (auto_pad SAME_*: input size x stride) leaves, split as ONNX says
    (SAME_UPPER puts the odd one at the end, otherwise at the beginning)."""
    spatial = len(x.shape) - 2
    auto = cx.attr("auto_pad", "NOTSET")
    shape = cx.attr("output_shape", None)
    if shape is None and auto in ("NOTSET", "VALID"):
        pads = [int(p) for p in cx.attr("pads", [0] * 2 * spatial)] if auto == "NOTSET" \
            else [0] * 2 * spatial
        return tuple((pads[i], pads[i + spatial]) for i in range(spatial))
    if shape is None and auto not in ("SAME_UPPER", "SAME_LOWER"):
        raise Unsupported(f"auto_pad={auto!r}")
    pairs = []
    for i, (size, k, s, d, op) in enumerate(zip(x.shape[2:], kernel, strides, dilation, extra)):
        out = size * s if shape is None else int(list(shape)[-spatial:][i])
        total = s * (size - 1) + op + d * (k - 1) + 1 - out
        if is_symbolic(total):
            raise Unsupported(f"an output size set by output_shape or auto_pad={auto} over "
                              f"the dynamic input size {size} (export with a static size)")
        if total < 0 and shape is None:  # (with output_shape: zeros + bias past x's reach)
            raise Unsupported(f"auto_pad={auto} with a kernel that reaches less than the "
                              f"stride (onnxruntime gives the full output, the ONNX spec "
                              f"input size x stride): give explicit pads")
        small = total // 2
        pairs.append((small, total - small) if auto == "SAME_UPPER" else (total - small, small))
    return tuple(pairs)


def _batch_norm(cx, n, ins):
    from aotpack.frontend.onnx.translate import to_torch

    if cx.attr("training_mode", 0) or (len(n.output) > 1 and any(n.output[1:])):
        raise Unsupported("training mode (running statistics as outputs): export the model "
                          "in eval mode")
    x = cx.tensor(ins[0])
    if len(x.shape) < 2:
        raise Unsupported(f"an input of rank {len(x.shape)} (channels are dim 1)")
    stats = [to_torch(_known(v, "batch-norm parameter")) for v in ins[1:5]]
    return batch_norm_affine(cx, x, *stats, float(cx.attr("epsilon", 1e-5)))


# ----------------------------------------------------------------------------- pooling
def _pool(kind: str):
    def rule(cx, n, ins):
        if len(n.output) > 1 and n.output[1]:
            raise Unsupported("the Indices output (argmax positions)")
        x = cx.tensor(ins[0])
        spatial = _spatial(x, "pooling")
        kernel = [int(k) for k in cx.attr("kernel_shape")]
        dilation = [int(d) for d in cx.attr("dilations", [1] * spatial)]
        strides, pads = _geometry(cx, x, kernel, dilation)
        ceil = bool(cx.attr("ceil_mode", 0))
        if any(d != 1 for d in dilation):
            if kind != "max" or spatial != 2 or any(lo != hi for lo, hi in pads):
                raise Unsupported(f"dilations {dilation} of other than a 2-D max pool with "
                                  f"symmetric pads")
            attrs = O.PoolAttrs("max", tuple(kernel), tuple(strides),
                                tuple(lo for lo, _ in pads), ceil, False)
            return _dilated_max_pool(cx, x, attrs, tuple(dilation))
        include = bool(cx.attr("count_include_pad", 0))
        if spatial == 1:
            kernel, strides, pads = [1] + kernel, [1] + strides, ((0, 0),) + pads
        if _as_torch_pads(kernel, pads):
            attrs = O.PoolAttrs(kind, tuple(kernel), tuple(strides), tuple(p for p, _ in pads),
                                ceil, include)
            return _pooled(cx, x, attrs)
        return _explicit_pool(cx, x, kind, kernel, strides, pads, ceil, include)
    return rule


def _as_torch_pads(kernel, pads) -> bool:
    """Whether the IR's pool (torch's rule: symmetric pads of at most half the window) takes
    these pads. It then means what onnxruntime computes, ceil_mode and count_include_pad
    included: both clip a window's divisor to the padded image (or to the image)."""
    return all(lo == hi and 2 * lo <= k for (lo, hi), k in zip(pads, kernel))


def _pooled(cx, x: Value, attrs: O.PoolAttrs) -> Value:
    y = cx.emit(Op.POOL, [_to_channels_last(cx, x)], attrs)
    return _from_channels_last(cx, y, len(x.shape))


def _explicit_pool(cx, x, kind, kernel, strides, pads, ceil, include) -> Value:
    """Pads torch cannot express: pad the image (an [N, C, H, W] view of a 1-D input), pool
    with none, keep ONNX's windows, and rescale an average to ONNX's divisor."""
    flat = len(x.shape) == 3
    if flat:
        x = cx.emit(Op.UNSQUEEZE, [x], O.DimAttrs((2,)))
    sizes = x.shape[2:]
    if any(is_symbolic(s) for s in sizes):
        raise Unsupported(f"pads {list(pads)} over the dynamic image size {list(sizes)} "
                          f"(asymmetric pooling pads need a static size)")
    outs = [_onnx_out(s, k, st, p, ceil) for s, k, st, p in zip(sizes, kernel, strides, pads)]
    fill = float("-inf") if kind == "max" else 0.0
    for i, (size, k, st, (lo, _), out) in enumerate(zip(sizes, kernel, strides, pads, outs)):
        end = max(0, (out - 1) * st + k - lo - size)
        dim = 2 + i
        parts = [fill_block(cx, x, dim, lo, fill), x, fill_block(cx, x, dim, end, fill)]
        parts = [p for p in parts if p is not None]
        x = cx.emit(Op.CAT, parts, O.DimAttrs((dim,))) if len(parts) > 1 else x
    y = _pooled(cx, x, O.PoolAttrs(kind, tuple(kernel), tuple(strides)))
    for i, out in enumerate(outs):
        if y.shape[2 + i] != out:
            y = cx.emit(Op.SLICE, [y], O.SliceAttrs(2 + i, 0, out))
    if kind == "avg":
        rescale = _divisor_map(sizes, kernel, strides, pads, outs, include)
        if not np.all(rescale == 1.0):
            c = cx.add_constant("pool_divisor", _torch(rescale, y.dtype))
            y = cx.emit(Op.MUL, [y, c], O.BinaryAttrs())
    if flat:
        y = cx.emit(Op.SQUEEZE, [y], O.DimAttrs((2,)))
    return y


def _onnx_out(size, k, stride, pad, ceil) -> int:
    """onnxruntime's output length: torch's rule over asymmetric pads."""
    lo, hi = pad
    if not ceil:
        return conv_out_size(size, pad, k, stride)
    out = -(-(size + lo + hi - k) // stride) + 1
    return out - 1 if (out - 1) * stride >= size + lo else out


def _divisor_map(sizes, kernel, strides, pads, outs, include) -> np.ndarray:
    """[OH, OW]: window size / ONNX's divisor (the window clipped to the padded image, or to
    the image without count_include_pad)."""
    per_dim = []
    for size, k, st, (lo, hi), out in zip(sizes, kernel, strides, pads, outs):
        start = np.arange(out) * st - lo
        end = np.minimum(start + k, size + hi)
        if not include:
            start, end = np.maximum(start, 0), np.minimum(end, size)
        per_dim.append((end - start).astype(np.float64))
    count = per_dim[0][:, None] * per_dim[1][None, :]
    return float(np.prod(kernel)) / count


def _torch(a: np.ndarray, dtype):
    import torch

    return torch.from_numpy(np.ascontiguousarray(a)).to(dtype.to_torch())


def _global_pool(kind: str):
    """POOL over the whole image (torch's adaptive pooling to 1x1); a dynamic image size is
    a reduction over the spatial dims."""
    def rule(cx, n, ins):
        x = cx.tensor(ins[0])
        spatial = _spatial(x, "pooling")
        sizes = tuple(x.shape[2:])
        if any(is_symbolic(s) for s in sizes):
            op = Op.MEAN if kind == "avg" else Op.AMAX
            return cx.emit(op, [x], O.ReduceAttrs(tuple(range(2, 2 + spatial)), True))
        kernel = sizes if spatial == 2 else (1,) + sizes
        return _pooled(cx, x, O.PoolAttrs(kind, kernel, kernel))
    return rule


# ----------------------------------------------------------------------------- activations
def _bound(v, what: str):
    if v is None:
        return None
    if not isinstance(v, np.ndarray) or is_symbolic_array(v) or v.size != 1:
        raise Unsupported(f"a {what} bound computed at run time (only known numbers)")
    a = v.reshape(-1)[0]
    return float(a) if a.dtype.kind == "f" else int(a)


def _clip(cx, n, ins):
    """Clip(0, 6) is RELU6 (MobileNet's ReLU6); other bounds a MAX and/or a MIN."""
    x = cx.tensor(ins[0])
    lo = _bound(ins[1] if len(ins) > 1 else None, "min")
    hi = _bound(ins[2] if len(ins) > 2 else None, "max")
    return _clamp(cx, x, lo, hi)


_TORCH_HARD = (1 / 6, 0.5)  # torch's hardsigmoid: relu6(x + 3) / 6 = clip(x / 6 + 0.5, 0, 1)


def _hard_sigmoid(cx, n, ins):
    x = cx.tensor(ins[0])
    alpha, beta = float(cx.attr("alpha", 0.2)), float(cx.attr("beta", 0.5))
    if np.allclose((alpha, beta), _TORCH_HARD, rtol=1e-6, atol=0):
        return cx.emit(Op.HARDSIGMOID, [x], O.NoAttrs())
    y = cx.emit(Op.MUL, [x], O.BinaryAttrs(alpha))
    y = cx.emit(Op.ADD, [y], O.BinaryAttrs(beta))
    y = cx.emit(Op.MAX, [y], O.BinaryAttrs(0.0))
    return cx.emit(Op.MIN, [y], O.BinaryAttrs(1.0))


def hard_swish_of(cx, a, b):
    """x * HardSigmoid(x) with torch's constants (HardSwish exported below opset 14) →
    HARDSWISH."""
    for x, s in ((a, b), (b, a)):
        hs = cx.producer(s)
        if hs is not None and hs.op == Op.HARDSIGMOID and hs.inputs[0] is x:
            return cx.emit(Op.HARDSWISH, [x], O.NoAttrs())
    return None


CONV_RULES = {
    "Conv": _conv, "ConvTranspose": _conv_transpose, "BatchNormalization": _batch_norm,
    "MaxPool": _pool("max"), "AveragePool": _pool("avg"),
    "GlobalAveragePool": _global_pool("avg"), "GlobalMaxPool": _global_pool("max"),
    "Clip": _clip, "HardSigmoid": _hard_sigmoid,
    "HardSwish": lambda cx, n, ins: cx.emit(Op.HARDSWISH, [cx.tensor(ins[0])], O.NoAttrs()),
}

