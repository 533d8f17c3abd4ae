"""aten → IR: 3-D convolutions (video models: R(2+1)D, X3D, SlowFast; VideoMAE's and ViViT's
tubelet embeddings; 3-D U-Nets) as 2-D convolutions over frames. Output frame t' of
conv3d(x, w) is the sum over the temporal taps i of conv2d(frame t'*st + i*dt of the
time-padded input, w[:, :, i]); each tap reads its frames as one strided slice folded into
the batch ([N*T', C, H, W]), so a kT-tap convolution is kT ordinary conv kernels (each a GEMM
where the 2-D geometry is a patch embedding) whose sum the next one takes as its residual
epilogue. The time dim must be static; the batch may vary.
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
