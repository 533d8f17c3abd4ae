"""Torch reference of RopeOp (rotate-half rotary embedding)."""
from __future__ import annotations

from aotpack.kernels.reference import view, write
from aotpack.kernels.spec import RopeOp


def rotate_half(x):
    import torch

    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def reference(op: RopeOp, env) -> None:
    x = view(env, op.x).float()
    cos, sin = view(env, op.cos).float(), view(env, op.sin).float()
    if cos.dim() == 3:  # [B, S, D]: per sequence, the same for every head
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    write(env, op.out, x * cos + rotate_half(x) * sin)
