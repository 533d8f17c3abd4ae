"""Torch reference of ScanOp: cumsum over the last dim (int64 for integers, f32 for floats)."""
from __future__ import annotations

from aotpack.kernels.reference import view, write
from aotpack.kernels.spec import ScanOp


def reference(op: ScanOp, env) -> None:
    import torch

    x = view(env, op.x)
    x = x.to(torch.int64) if not x.dtype.is_floating_point else x.float()
    write(env, op.out, torch.cumsum(x, dim=-1))
