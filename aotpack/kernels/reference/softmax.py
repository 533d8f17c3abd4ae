"""Torch reference of SoftmaxOp (f32, last dim)."""
from __future__ import annotations

from aotpack.kernels.reference import view, write
from aotpack.kernels.spec import SoftmaxOp


def reference(op: SoftmaxOp, env) -> None:
    import torch

    x = view(env, op.x).float()
    write(env, op.out, torch.softmax(x * op.scale, dim=-1))
