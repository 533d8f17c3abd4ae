"""Torch reference of BmmOp: batched matmul in f32 (f64 for f32 operands), cast on store."""
from __future__ import annotations

from aotpack.kernels.reference import view, write
from aotpack.kernels.spec import BmmOp


def reference(op: BmmOp, env) -> None:
    a, b = view(env, op.a), view(env, op.b)
    wide = a.dtype.itemsize == 4
    write(env, op.out, (a.double() @ b.double()) if wide else (a.float() @ b.float()))
