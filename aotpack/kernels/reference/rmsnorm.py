"""Torch reference of RMSNormOp (f32 statistics)."""
from __future__ import annotations

from aotpack.kernels.reference import view, write
from aotpack.kernels.spec import RMSNormOp


def reference(op: RMSNormOp, env) -> None:
    import torch

    x = view(env, op.x).float()
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + op.eps)
    if op.weight is not None:
        y = y * view(env, op.weight).float()
    if op.out_scale is not None:  # FP8 out: each row over its scale amax / 448
        amax = y.abs().amax(dim=-1, keepdim=True)
        scale = torch.where(amax > 0, amax / 448.0, torch.ones_like(amax))
        y = (y / scale).clamp(-448.0, 448.0)
        write(env, op.out_scale, scale[:, 0])
    write(env, op.out, y)
