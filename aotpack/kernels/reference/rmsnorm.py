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
    write(env, op.out, y)
