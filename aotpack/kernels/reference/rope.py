"""Torch reference of RopeOp (rotate-half rotary embedding)."""
from __future__ import annotations

from aotpack.kernels.reference import view, write
from aotpack.kernels.spec import RopeOp


def rotate_half(x):
    import torch

    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rotated(env, x_arg, cos_arg, sin_arg):
    """rope of the view x_arg [B, H, S, D] by the cos/sin views ([S, D] or [B, S, D]), f32."""
    x = view(env, x_arg).float()
    cos, sin = view(env, cos_arg).float(), view(env, sin_arg).float()
    if cos.dim() == 3:  # [B, S, D]: per sequence, the same for every head
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return x * cos + rotate_half(x) * sin


def reference(op: RopeOp, env) -> None:
    write(env, op.out, rotated(env, op.x, op.cos, op.sin))
