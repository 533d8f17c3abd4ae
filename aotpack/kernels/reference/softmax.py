"""Torch reference of SoftmaxOp (f32, last dim; log_softmax when op.log)."""
from __future__ import annotations

from aotpack.kernels.reference import view, write
from aotpack.kernels.spec import SoftmaxOp


def reference(op: SoftmaxOp, env) -> None:
    import torch

    x = view(env, op.x).float()
    fn = torch.log_softmax if op.log else torch.softmax
    write(env, op.out, fn(x * op.scale, dim=-1))
