"""Torch reference of GroupedMmOp: per-group GEMMs over row ranges, f32 accumulation (f64
for f32 operands, as the kernel computes those in full precision)."""
from __future__ import annotations

from aotpack.kernels.reference import view, write
from aotpack.kernels.spec import GroupedMmOp


def reference(op: GroupedMmOp, env) -> None:
    import torch

    a, b = view(env, op.a), view(env, op.b)
    wide = torch.float64 if a.dtype.itemsize == 4 else torch.float32
    out = torch.zeros(a.shape[0], b.shape[2], dtype=wide)
    start = 0
    for g, end in enumerate(view(env, op.offs).tolist()):
        end = max(start, min(int(end), a.shape[0]))
        out[start:end] = a[start:end].to(wide) @ b[g].to(wide)
        start = end
    if op.swiglu_group:
        from aotpack.kernels.reference.gemm import swiglu

        out = swiglu(out, op.swiglu_group)
    write(env, op.out, out)
