"""aten → IR: 3-D convolutions (video models: R(2+1)D, X3D, SlowFast; VideoMAE's and ViViT's
tubelet embeddings; 3-D U-Nets) as 2-D convolutions over frames. Output frame t' of
conv3d(x, w) is the sum over the temporal taps i of conv2d(frame t'*st + i*dt of the
time-padded input, w[:, :, i]); each tap reads its frames as one strided slice folded into
the batch ([N*T', C, H, W]), so a kT-tap convolution is kT ordinary conv kernels (each a GEMM
where the 2-D geometry is a patch embedding) whose sum the next one takes as its residual
epilogue. The time dim must be static; the batch may vary.

3-D pooling the same way: output frame t' of max_pool3d is the elementwise max over the
temporal taps of a 2-D max pool of each tap's frames (time padded with -inf frames); of
avg_pool3d the mean of 2-D average pools (every frame's spatial count is the same, so the
mean of per-frame averages is the 3-D average; time padded with zero frames, which
count_include_pad=True counts and False would not: refused there).
"""
from __future__ import annotations

from aotpack.frontend.aten_table import Unsupported
from aotpack.ir import ops as O
from aotpack.ir.graph import Value
from aotpack.ir.ops import Op


def _triple(v, what: str) -> tuple[int, int, int]:
    v = tuple(v) if isinstance(v, (list, tuple)) else (v,)
    v = v * 3 if len(v) == 1 else v
    if len(v) != 3 or not all(isinstance(i, int) for i in v):
        raise Unsupported(f"3-D convolution {what} {v}")
    return v


def conv3d_nchw(cx, x: Value, w: Value, b, stride, padding, dilation, groups: int) -> Value:
    from aotpack.frontend.aten_conv import convolution_nchw, fill_block

    if isinstance(padding, str):
        raise Unsupported(f"padding={padding!r} left unresolved by torch.export")
    (st, sh, sw), (pt, ph, pw) = _triple(stride, "stride"), _triple(padding, "padding")
    dt, dh, dw = _triple(dilation, "dilation")
    n, c, t, h, wd = x.shape
    oc, _, kt, _, _ = w.shape
    if not isinstance(t, int):
        raise Unsupported("a 3-D convolution over a dynamic time dim (keep it static)")
    t_out = (t + 2 * pt - dt * (kt - 1) - 1) // st + 1
    if t_out < 1:
        raise Unsupported(f"a 3-D convolution with no output frame (time {t}, kernel {kt})")
    if pt:
        zeros = fill_block(cx, x, 2, pt, 0.0)
        x = cx.emit(Op.CAT, [zeros, x, zeros], O.DimAttrs((2,)))
    frames = cx.emit(Op.PERMUTE, [x], O.PermuteAttrs((0, 2, 1, 3, 4)))  # [N, T, C, H, W]
    weight = cx.constant_value(w)
    total = None
    for i in range(kt):
        start = i * dt
        taps = cx.emit(Op.SLICE, [frames], O.SliceAttrs(1, start, start + st * (t_out - 1) + 1,
                                                         st))
        batch = cx.emit(Op.VIEW, [cx.emit(Op.COPY, [taps], O.NoAttrs())],
                        O.ViewAttrs((n * t_out, c, h, wd)))
        wi = cx.add_constant(f"tap{i}", weight[:, :, i].contiguous())
        y = convolution_nchw(cx, batch, wi, None, (sh, sw), ((ph, ph), (pw, pw)), (dh, dw),
                             groups, final=False)
        total = y if total is None else cx.emit(Op.ADD, [total, y], O.BinaryAttrs())
    _, _, oh, ow = total.shape
    y = cx.emit(Op.VIEW, [total], O.ViewAttrs((n, t_out, oc, oh, ow)))
    y = cx.emit(Op.PERMUTE, [y], O.PermuteAttrs((0, 2, 1, 3, 4)))
    if b is not None:
        bias = b if isinstance(b, Value) else cx.add_constant("bias", b)
        y = cx.emit(Op.ADD, [y, cx.emit(Op.VIEW, [bias], O.ViewAttrs((oc, 1, 1, 1)))],
                    O.BinaryAttrs())
    return cx.emit(Op.COPY, [y], O.NoAttrs(), final=True)


def _temporal_taps(cx, x: Value, kt: int, st: int, pt: int, dt: int, ceil_mode: bool,
                   fill: float, kind: str) -> tuple[list[Value], int]:
    """Each temporal tap's frames of x [N, C, T, H, W] (time padded with `fill` frames),
    folded into the batch: [N*T', C, H, W] per tap, and T'."""
    from aotpack.frontend.aten_conv import fill_block

    n, c, t, h, w = x.shape
    if not isinstance(t, int):
        raise Unsupported("3-D pooling over a dynamic time dim (keep it static)")
    span = t + 2 * pt - dt * (kt - 1) - 1
    t_out = (-(-span // st) if ceil_mode else span // st) + 1
    if ceil_mode and (t_out - 1) * st >= t + pt:  # torch: the last window starts inside
        t_out -= 1
    if t_out < 1:
        raise Unsupported(f"3-D pooling with no output frame (time {t}, kernel {kt})")
    right = max(pt, (t_out - 1) * st + dt * (kt - 1) + 1 - t - pt)
    if right > pt and kind == "avg":  # torch divides the last window by fewer frames
        raise Unsupported("3-D average pooling with ceil_mode whose last window runs past the "
                          "padded time dim (torch averages it over fewer frames)")
    parts = [fill_block(cx, x, 2, pt, fill), x, fill_block(cx, x, 2, right, fill)]
    parts = [p for p in parts if p is not None]
    if len(parts) > 1:
        x = cx.emit(Op.CAT, parts, O.DimAttrs((2,)))
    frames = cx.emit(Op.PERMUTE, [x], O.PermuteAttrs((0, 2, 1, 3, 4)))  # [N, T, C, H, W]
    taps = []
    for i in range(kt):
        start = i * dt
        sl = cx.emit(Op.SLICE, [frames], O.SliceAttrs(1, start, start + st * (t_out - 1) + 1,
                                                       st))
        taps.append(cx.emit(Op.VIEW, [cx.emit(Op.COPY, [sl], O.NoAttrs())],
                            O.ViewAttrs((n * t_out, c, h, w))))
    return taps, t_out


def _pool3d(cx, x: Value, kernel, stride, padding, ceil_mode, kind: str, pool2d,
            fill: float, final: bool = True) -> Value:
    kt, kh, kw = _triple(kernel, "kernel")
    st, sh, sw = _triple(stride, "stride") if stride else (kt, kh, kw)
    pt, ph, pw = _triple(padding, "padding")
    n, c = x.shape[:2]
    taps, t_out = _temporal_taps(cx, x, kt, st, pt, 1, bool(ceil_mode), fill, kind)
    pooled = [pool2d(t, (kh, kw), (sh, sw), (ph, pw)) for t in taps]
    wide = kind == "avg" and kt > 1 and x.dtype.nbytes < 4  # one rounding, as torch's f32 sum
    if wide:
        from aotpack.dtypes import DType

        pooled = [cx.emit(Op.CAST, [y], O.CastAttrs(DType.F32)) for y in pooled]
    total = pooled[0]
    for y in pooled[1:]:
        total = cx.emit(Op.MAX if kind == "max" else Op.ADD, [total, y], O.BinaryAttrs())
    if kind == "avg" and kt > 1:
        total = cx.emit(Op.MUL, [total], O.BinaryAttrs(1.0 / kt))
    if wide:
        total = cx.emit(Op.CAST, [total], O.CastAttrs(x.dtype))
    _, _, oh, ow = total.shape
    y = cx.emit(Op.VIEW, [total], O.ViewAttrs((n, t_out, c, oh, ow)))
    y = cx.emit(Op.PERMUTE, [y], O.PermuteAttrs((0, 2, 1, 3, 4)))
    return cx.emit(Op.COPY, [y], O.NoAttrs(), final=final)


def max_pool3d(cx, x, kernel, stride=(), padding=0, dilation=1, ceil_mode=False, final=True):
    from aotpack.frontend.aten_conv import _max_pool

    import torch

    if _triple(dilation, "dilation") != (1, 1, 1):
        raise Unsupported(f"3-D max pooling with dilation {dilation}")
    lowest = float("-inf") if x.dtype.is_float else torch.iinfo(x.dtype.to_torch()).min
    return _pool3d(cx, x, kernel, stride, padding, ceil_mode, "max",
                   lambda t, k, s, p: _max_pool(cx, t, k, s, p, 1, ceil_mode, final=False),
                   lowest, final)


def max_pool3d_with_indices(cx, *args, **kwargs):
    return [max_pool3d(cx, *args, **kwargs, final=False), None]  # (values, indices unused)


def avg_pool3d(cx, x, kernel, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    from aotpack.frontend.aten_conv import _avg_pool

    if divisor_override is not None:
        raise Unsupported("3-D average pooling with divisor_override")
    if _triple(padding, "padding")[0] and not count_include_pad:
        raise Unsupported("3-D average pooling with time padding and count_include_pad=False "
                          "(the padded frames would not count; pad in time yourself)")
    return _pool3d(cx, x, kernel, stride, padding, ceil_mode, "avg",
                   lambda t, k, s, p: _avg_pool(cx, t, k, s, p, ceil_mode, count_include_pad,
                                                final=False),
                   0.0)


RULES = {
    "aten.max_pool3d_with_indices.default": max_pool3d_with_indices,
    "aten.max_pool3d.default": max_pool3d,
    "aten.avg_pool3d.default": avg_pool3d,
}
