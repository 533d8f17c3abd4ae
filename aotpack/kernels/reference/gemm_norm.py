"""Torch reference of GemmNormOp: the GEMM's reference, then the RMSNorm's on what it wrote."""
from __future__ import annotations

from aotpack.kernels.reference import gemm, rmsnorm
from aotpack.kernels.spec import GemmNormOp


def reference(op: GemmNormOp, env) -> None:
    gemm.reference(op.gemm, env)
    rmsnorm.reference(op.norm, env)
