"""Torch reference of ConvOp: unpack the weight, convolve in f32 (NCHW, as torch does), then
the GEMM epilogue over [pixels, channels], cast at the end."""
from __future__ import annotations

from aotpack.kernels.reference import view, write
from aotpack.kernels.reference.gemm import apply_epilogue
from aotpack.kernels.spec import ConvOp


def unpacked_weight(op: ConvOp, env):
    """The packed weight back in torch's [OC, C/groups, KH, KW]."""
    kh, kw = op.kernel
    w = view(env, op.w).float()
    if op.depthwise:
        return w.t().reshape(-1, 1, kh, kw)
    oc = w.shape[0]
    return w.reshape(oc, kh, kw, -1).permute(0, 3, 1, 2)


def reference(op: ConvOp, env) -> None:
    import torch.nn.functional as F

    (pt, pb), (pl, pr) = op.padding
    x = view(env, op.x)
    if op.x_scale is not None:  # in x's dtype, as the model multiplies before the conv
        x = x * view(env, op.x_scale)[:, None, None, :]
    x = x.float().permute(0, 3, 1, 2)
    x = F.pad(x, (pl, pr, pt, pb))
    y = F.conv2d(x, unpacked_weight(op, env), None, op.stride, 0, op.dilation, op.groups)
    acc = y.permute(0, 2, 3, 1).reshape(-1, y.shape[1])
    write(env, op.out, apply_epilogue(acc, op.epilogue, env).reshape(op.out.shape))
