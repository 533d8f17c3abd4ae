"""Torch reference of LayerNormOp (f32 statistics, biased variance)."""
from __future__ import annotations

from aotpack.kernels.reference import view, write
from aotpack.kernels.spec import LayerNormOp


def reference(op: LayerNormOp, env) -> None:
    import torch.nn.functional as F

    x = view(env, op.x).float()
    w = view(env, op.weight).float() if op.weight is not None else None
    b = view(env, op.bias).float() if op.bias is not None else None
    write(env, op.out, F.layer_norm(x, (x.shape[-1],), w, b, op.eps))
