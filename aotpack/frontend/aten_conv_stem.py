"""A network's stem — a stride-2 convolution over an image of 1 to 4 channels (ResNet's 7x7,
EfficientNet's and MobileNet's 3x3) — as a stride-1 convolution over the image folded 2x2 into
4C channels (space to depth).

Why: the implicit GEMM reads x one (pixel, tap) at a time when a pixel has fewer than 16
channels (conv.py FLAT_K): scalar 2-byte gathers from an NCHW image, not pipelined (cp.async
moves 4 bytes or more), at stride 2. On the H200 ResNet-50's 7x7 stem took 867 µs of its
5.06 ms forward at batch 128 (35 TFLOP/s, for an output write of ~70 µs). Folded, each tap
reads 4C contiguous channels (24 bytes for RGB): vector loads the pipeline can prefetch.
The cost: the fold is one copy of the input, and the kernel grows to cover whole 2x2 blocks
(7x7x3 = 147 MACs per output become 4x4 taps of a 16-channel K step, 256).

The arithmetic, per spatial dim (rows shown; columns alike), with the kernel's rows kh, the
padding pt before the image, stride 2:
  y[oh] = sum_kh w[kh] x[2 oh + kh - pt].
An odd pt becomes even by one more row of padding and one zero row before the kernel
(w'[kh + 1] = w[kh]); the kernel is then padded with zero rows to an even length 2P. With
kh = 2p + a and the folded image x2[i][(a, c)] = x[2i + a][c]:
  y[oh] = sum_p sum_a w'[2p + a] x2[oh + p - pt/2][a]
a stride-1 convolution of the P x Q kernel w2[(a, b, c)][p, q] = w'[c][2p + a, 2q + b] with
padding pt/2 before and what the output size needs after. Zeros outside the image stay zeros.
"""
from __future__ import annotations

from aotpack.ir import ops as O
from aotpack.ir.graph import Value
from aotpack.ir.ops import Op


def applies(x: Value, w_shape, stride, pads, dilation, groups) -> bool:
    """A stride-2 2-D conv over a static, even-sized image of at most 4 channels, one group,
    a kernel wider than the stride both ways (2x2/s2 is a patch embedding: one GEMM)."""
    if len(x.shape) != 4 or len(w_shape) != 4:
        return False
    _, c, h, wd = x.shape
    _, _, kh, kw = w_shape
    return (tuple(stride) == (2, 2) and tuple(dilation) == (1, 1) and int(groups) == 1
            and isinstance(c, int) and 1 <= c <= 4 and isinstance(h, int)
            and isinstance(wd, int) and h % 2 == 0 and wd % 2 == 0 and kh > 2 and kw > 2
            and _folded_pads(h, kh, pads[0]) is not None
            and _folded_pads(wd, kw, pads[1]) is not None)


def _folded_pads(size: int, k: int, pad) -> tuple[int, int, int] | None:
    """(shift, P, (lo, hi)) of one spatial dim: shift is 1 if a zero tap goes before the
    kernel (odd lo), P the folded kernel's length; None if the folded conv cannot give the
    same output size without cropping."""
    lo, hi = pad
    out = (size + lo + hi - k) // 2 + 1
    shift = lo % 2
    p = (k + shift + 1) // 2
    lo2 = (lo + shift) // 2
    hi2 = out - 1 + p - size // 2 - lo2
    return None if hi2 < 0 or out < 1 else (shift, p, (lo2, hi2))


def folded_weight(w, pads_hw):
    """torch's [OC, C, KH, KW] as the folded conv's [OC, 4C, P, Q] (channel order a, b, c)."""
    import torch

    oc, c, kh, kw = w.shape
    (sh, p, _), (sw, q, _) = pads_hw
    wp = torch.zeros(oc, c, 2 * p, 2 * q, dtype=w.dtype)
    wp[:, :, sh:sh + kh, sw:sw + kw] = w
    wp = wp.reshape(oc, c, p, 2, q, 2).permute(0, 3, 5, 1, 2, 4)  # [OC, a, b, c, P, Q]
    return wp.reshape(oc, 4 * c, p, q).contiguous()


def folded_input(cx, x: Value) -> Value:
    """x [N, C, H, W] as [N, H/2, W/2, 4C] channels-last, channel (a, b, c): one copy."""
    n, c, h, wd = x.shape
    t = cx.emit(Op.VIEW, [x], O.ViewAttrs((n, c, h // 2, 2, wd // 2, 2)))
    t = cx.emit(Op.PERMUTE, [t], O.PermuteAttrs((0, 2, 4, 3, 5, 1)))
    t = cx.emit(Op.COPY, [t], O.NoAttrs())
    return cx.emit(Op.VIEW, [t], O.ViewAttrs((n, h // 2, wd // 2, 4 * c)))


def stem_conv(cx, x: Value, w: Value, pads) -> Value:
    """The folded convolution's channels-last [N, OH, OW, OC] result (no bias)."""
    _, _, h, wd = x.shape
    weight = cx.constant_value(w)
    dims = [_folded_pads(h, weight.shape[2], pads[0]), _folded_pads(wd, weight.shape[3], pads[1])]
    w2 = cx.add_constant("stem_weight", folded_weight(weight, dims))
    attrs = O.ConvAttrs((1, 1), (dims[0][2], dims[1][2]), (1, 1), 1)
    return cx.emit(Op.CONV, [folded_input(cx, x), w2], attrs)
