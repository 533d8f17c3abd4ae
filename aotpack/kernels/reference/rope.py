"""Torch reference of RopeOp: rotate-half or interleaved rotary embedding of the first
rotary_dim dims of each head, the rest copied; f32 math, one rounding at the store."""
from __future__ import annotations

from aotpack.kernels.reference import view, write
from aotpack.kernels.spec import RopeOp


def rotate_half(x):
    import torch

    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rotate_interleaved(x):
    """The pairs (2i, 2i+1) turned: (-x[2i+1], x[2i])."""
    import torch

    return torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)


def rotated(env, x_arg, cos_arg, sin_arg, interleaved=False, rotary_dim=None):
    """rope of the view x_arg [B, H, S, D] by the cos/sin views ([S, R] or [B, S, R]) on its
    first R = rotary_dim dims (None: all), the others passed through; f32."""
    import torch

    x = view(env, x_arg).float()
    r = rotary_dim if rotary_dim is not None else x.shape[-1]
    cos, sin = view(env, cos_arg).float(), view(env, sin_arg).float()
    if cos.dim() == 3:  # [B, S, R]: per sequence, the same for every head
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    turn = rotate_interleaved if interleaved else rotate_half
    out = x[..., :r] * cos + turn(x[..., :r]) * sin
    return torch.cat((out, x[..., r:]), dim=-1) if r < x.shape[-1] else out


def reference(op: RopeOp, env) -> None:
    write(env, op.out, rotated(env, op.x, op.cos, op.sin, op.interleaved, op.rotary_dim))
