"""Transposed convolution (ConvTranspose1d/2d: `aten.convolution` with transposed=True) as one
ordinary convolution and a pixel shuffle (the sub-pixel form), so it runs the CONV kernels —
or a plain GEMM — that every other convolution runs; nothing here is a new kernel.

Along one spatial dim (input length L, kernel k, stride s, padding p, dilation d), the
transposed convolution scatters x[i] * w[j] into the full output at t = i*s + j*d; the model's
output is full[p : p + out_len] (output_padding only lengthens out_len). Output position
t = q*s + r (phase r in [0, s)) takes the taps j with j*d ≡ r (mod s), from input
i = q - e with e = (j*d - r) / s = (j*d) // s. So every phase is an ordinary stride-1
correlation over x padded with E = (d*(k-1)) // s zeros in front, kernel E + 1 taps, tap
u = E - e holding w[j] (zero where no j lands). Stacking the s phases as s times the output
channels makes it ONE convolution, followed by [.., Q, s, OC] -> [.., Q*s, OC] (a view in 1-D;
a permute + copy in 2-D) and a crop of p. Why this form:
- no multiply-adds on zeros when s divides k (HiFi-GAN's k = 2s, DCGAN's k=4, s=2), few
  otherwise, where zero insertion (scatter x into an s-times larger zero map, then convolve
  with the flipped kernel) would spend s**2 - 1 of every s**2 MACs on inserted zeros;
- stride == kernel (U-Net's and DPT's 2x / 4x upsampling: E = 0) is a 1x1 convolution of
  s*s*OC channels, which lower_conv turns into one GEMM over the pixels (with the bias in its
  epilogue), then the shuffle;
- groups, dilation, output_padding, any padding and a dynamic length fall out of the same
  arithmetic (the padding after x is a constant: Q - L = ceil((d(k-1)+1+op-p)/s) - 1).
Channels are ordered (group, phase, channel of the group): a grouped convolution's output
channels must be grouped first.
"""
from __future__ import annotations

from aotpack.frontend.aten_conv import _from_channels_last, _ints, _to_channels_last
from aotpack.frontend.aten_table import Unsupported
from aotpack.ir import ops as O
from aotpack.ir.graph import Value
from aotpack.ir.ops import Op


def conv_transpose_nchw(cx, x: Value, w, b, stride, pads, output_padding, dilation,
                        groups: int) -> Value:
    """ConvTranspose of x [N, C, (H,) W] by the torch weight tensor `w` [C, OC/g, (KH,) KW]:
    `pads` (lo, hi) cropped off each spatial dim's full output; `b` the [OC] bias, a torch
    tensor (known), a Value (computed at run time) or None. Returns the node's (final) value.
    (The ONNX frontend's ConvTranspose calls this too.)"""
    spatial = len(x.shape) - 2
    if spatial not in (1, 2) or w.dim() != len(x.shape):
        raise Unsupported(f"a {spatial}-D transposed convolution (ConvTranspose1d and "
                          f"ConvTranspose2d over a batch are supported, not 3-D)")
    stride, dilation = _ints(stride, spatial), _ints(dilation, spatial)
    output_padding, pads = _ints(output_padding, spatial), tuple(map(tuple, pads))
    if spatial == 1:  # a 1-D one is a 2-D one over an image of height 1
        w = w.unsqueeze(2)
        stride, pads, dilation = (1,) + stride, ((0, 0),) + pads, (1,) + dilation
        output_padding = (0,) + output_padding
    geo = [_Axis(k, s, p, op, d, size) for k, s, p, op, d, size in
           zip(w.shape[2:], stride, pads, output_padding, dilation, _spatial(x))]
    y = cx.emit(Op.CONV, [_to_channels_last(cx, x), _phase_weight(cx, w, geo, groups)],
                O.ConvAttrs((1, 1), tuple((a.before, a.after) for a in geo), (1, 1), groups))
    oc = w.shape[1] * groups
    if b is not None and not isinstance(b, Value):  # known: the conv's epilogue adds it
        y = cx.emit(Op.ADD, [y, _phase_bias(cx, b, geo, groups, oc)], O.BinaryAttrs())
    y = _crop(cx, _shuffle(cx, y, geo, groups, oc), geo)
    if isinstance(b, Value):  # computed at run time: added once the phases are in place
        y = cx.emit(Op.ADD, [y, b], O.BinaryAttrs())
    return _from_channels_last(cx, y, len(x.shape))


def _spatial(x: Value) -> tuple:
    return (1,) * (4 - len(x.shape)) + tuple(x.shape[2:])


class _Axis:
    """One spatial dim's geometry: E (the phase kernel's taps - 1), the zeros before and after
    x, and the crop [start, start + size) of the shuffled result."""

    def __init__(self, k: int, s: int, pads: tuple[int, int], op: int, d: int, length):
        (lo, hi), self.s, self.d = pads, s, d
        self.reach = d * (k - 1)
        self.taps = self.reach // s + 1
        self.size = (length - 1) * s + self.reach + 1 + op - lo - hi
        # the first phase computed: the one holding full[lo] (a padding past whole phases
        # skips them; a negative one, from ONNX's output_shape, starts before x's)
        first = min(lo // s, self.taps - 1)
        self.before = self.taps - 1 - first
        self.start = lo - first * s
        # phases past x's last: enough to cover full[lo + size - 1]; never negative (a
        # padding that crops into x's own span leaves them computed, then cropped)
        self.after = max(-(-(self.reach + 1 + op - hi) // s) - 1, 0)

    def place(self, j: int) -> tuple[int, int]:
        """(phase r, tap u) of kernel tap j."""
        return (j * self.d) % self.s, self.taps - 1 - (j * self.d) // self.s


def _phase_weight(cx, w, geo, groups: int) -> Value:
    """The [g*sh*sw*OCg, C/g, EH+1, EW+1] weight of the phase convolution, built from torch's
    [C, OC/g, KH, KW] at build time (taps no j lands on stay zero)."""
    import torch

    c, ocg, kh, kw = w.shape
    (ah, aw), cg = geo, c // groups
    src = w.reshape(groups, cg, ocg, kh, kw).transpose(1, 2)  # [g, OCg, Cg, KH, KW]
    out = torch.zeros(groups, ah.s, aw.s, ocg, cg, ah.taps, aw.taps, dtype=w.dtype)
    for jh in range(kh):
        rh, uh = ah.place(jh)
        for jw in range(kw):
            rw, uw = aw.place(jw)
            out[:, rh, rw, :, :, uh, uw] = src[..., jh, jw]
    return cx.add_constant("weight", out.reshape(-1, cg, ah.taps, aw.taps))


def _phase_bias(cx, b, geo, groups: int, oc: int) -> Value:
    """The known bias `b` per phase-conv channel: [g*sh*sw*OCg], each phase a copy."""
    (ah, aw), ocg = geo, oc // groups
    per = b.reshape(groups, 1, 1, ocg).expand(groups, ah.s, aw.s, ocg)
    return cx.add_constant("bias", per.reshape(-1).clone())


def _shuffle(cx, y: Value, geo, groups: int, oc: int) -> Value:
    """[N, QH, QW, (g, sh, sw, OCg)] -> [N, QH*sh, QW*sw, OC]: each phase's pixels put in
    place. A view when only sw > 1 and one group (1-D); else a permute and one copy."""
    n, qh, qw, _ = y.shape
    (ah, aw), ocg = geo, oc // groups
    out = (n, qh * ah.s, qw * aw.s, oc)
    if ah.s == 1 and (groups == 1 or aw.s == 1):
        return cx.emit(Op.VIEW, [y], O.ViewAttrs(out)) if tuple(y.shape) != out else y
    t = cx.emit(Op.VIEW, [y], O.ViewAttrs((n, qh, qw, groups, ah.s, aw.s, ocg)))
    t = cx.emit(Op.PERMUTE, [t], O.PermuteAttrs((0, 1, 4, 2, 5, 3, 6)))
    t = cx.emit(Op.COPY, [t], O.NoAttrs())
    return cx.emit(Op.VIEW, [t], O.ViewAttrs(out))


def _crop(cx, y: Value, geo) -> Value:
    """The model's output: [start, start + size) along H and W of the shuffled [N, H', W',
    OC] (views)."""
    for dim, a in enumerate(geo, start=1):
        if a.start != 0 or y.shape[dim] != a.size:
            y = cx.emit(Op.SLICE, [y], O.SliceAttrs(dim, a.start, a.start + a.size, 1))
    return y
