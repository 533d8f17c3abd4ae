"""Torch reference of PoolOp (channels-last views, computed in f32)."""
from __future__ import annotations

from aotpack.kernels.reference import view, write
from aotpack.kernels.spec import PoolOp


def reference(op: PoolOp, env) -> None:
    import torch.nn.functional as F

    x = view(env, op.x).float().permute(0, 3, 1, 2)
    oh, ow = op.out.shape[1:3]
    # torch derives the output size; pad on the bottom/right so that it yields ours (ceil_mode)
    (kh, kw), (sh, sw), (ph, pw) = op.kernel, op.stride, op.padding
    ceil = (x.shape[2] + 2 * ph - kh) // sh + 1 != oh or (x.shape[3] + 2 * pw - kw) // sw + 1 != ow
    if op.kind == "max":
        y = F.max_pool2d(x, op.kernel, op.stride, op.padding, ceil_mode=ceil)
    else:
        y = F.avg_pool2d(x, op.kernel, op.stride, op.padding, ceil_mode=ceil,
                         count_include_pad=op.count_include_pad, divisor_override=op.divisor)
    write(env, op.out, y.permute(0, 2, 3, 1))
