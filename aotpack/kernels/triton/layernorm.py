"""LayerNorm over the last dim of a 2-D view:
out = (x - mean) * rsqrt(var + eps) [* weight] [+ bias], biased variance, f32 statistics.

Whole rows in registers (C <= 16384): x is read once and the variance is the two-pass
sum((x - mean)^2) on the registers (no E[x^2] - E[x]^2 cancellation). Longer rows loop over
4096-column chunks: pass 1 the mean, pass 2 the centred variance, pass 3 normalise and store
(per-lane f32 accumulators, combined once). See _rowwise.py for the row packing.
"""
from __future__ import annotations

import triton
import triton.language as tl

from aotpack.kernels.spec import LayerNormOp
from aotpack.kernels.triton import _rowwise as rw
from aotpack.kernels.triton._common import entry_points, KernelPlan, int_arg
from aotpack.kernels.triton.compile import F32, Const, Ptr, cdiv


@triton.jit
def layernorm_kernel(x_ptr, w_ptr, b_ptr, out_ptr, x_stride_r, x_stride_c, w_stride, b_stride,
                     out_stride_r, out_stride_c, n_rows, n_cols, eps,
                     BLOCK_C: tl.constexpr, ROWS: tl.constexpr, LOOP: tl.constexpr,
                     HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_mask = rows < n_rows
    rows = rows.to(tl.int64)
    cols = tl.arange(0, BLOCK_C)
    x_row = x_ptr + rows[:, None] * x_stride_r
    out_row = out_ptr + rows[:, None] * out_stride_r
    if not LOOP:
        mask = row_mask[:, None] & (cols[None, :] < n_cols)
        x = tl.load(x_row + cols[None, :] * x_stride_c, mask=mask, other=0.0).to(tl.float32)
        mean = tl.sum(x, 1) / n_cols
        xc = tl.where(mask, x - mean[:, None], 0.0)
        var = tl.sum(xc * xc, 1) / n_cols
        y = xc * tl.rsqrt(var + eps)[:, None]
        if HAS_WEIGHT:
            w = tl.load(w_ptr + cols * w_stride, mask=cols < n_cols, other=0.0).to(tl.float32)
            y = y * w[None, :]
        if HAS_BIAS:
            b = tl.load(b_ptr + cols * b_stride, mask=cols < n_cols, other=0.0).to(tl.float32)
            y = y + b[None, :]
        tl.store(out_row + cols[None, :] * out_stride_c, y.to(out_ptr.dtype.element_ty),
                 mask=mask)
    else:
        acc = tl.zeros([ROWS, BLOCK_C], dtype=tl.float32)
        for start in range(0, n_cols, BLOCK_C):
            c = start + cols
            mask = row_mask[:, None] & (c[None, :] < n_cols)
            acc += tl.load(x_row + c[None, :] * x_stride_c, mask=mask, other=0.0).to(tl.float32)
        mean = tl.sum(acc, 1) / n_cols
        acc = tl.zeros([ROWS, BLOCK_C], dtype=tl.float32)
        for start in range(0, n_cols, BLOCK_C):
            c = start + cols
            mask = row_mask[:, None] & (c[None, :] < n_cols)
            x = tl.load(x_row + c[None, :] * x_stride_c, mask=mask, other=0.0).to(tl.float32)
            xc = tl.where(mask, x - mean[:, None], 0.0)
            acc += xc * xc
        rstd = tl.rsqrt(tl.sum(acc, 1) / n_cols + eps)
        for start in range(0, n_cols, BLOCK_C):
            c = start + cols
            mask = row_mask[:, None] & (c[None, :] < n_cols)
            x = tl.load(x_row + c[None, :] * x_stride_c, mask=mask, other=0.0).to(tl.float32)
            y = (x - mean[:, None]) * rstd[:, None]
            if HAS_WEIGHT:
                w = tl.load(w_ptr + c * w_stride, mask=c < n_cols, other=0.0).to(tl.float32)
                y = y * w[None, :]
            if HAS_BIAS:
                b = tl.load(b_ptr + c * b_stride, mask=c < n_cols, other=0.0).to(tl.float32)
                y = y + b[None, :]
            tl.store(out_row + c[None, :] * out_stride_c, y.to(out_ptr.dtype.element_ty),
                     mask=mask)


def plan(op: LayerNormOp, config: dict | None = None) -> KernelPlan:
    rows, cols = rw.check_2d("layernorm x", op.x)
    if op.out.shape != op.x.shape:
        raise ValueError(f"layernorm: out {op.out.shape} != x {op.x.shape}")
    for what, t in (("weight", op.weight), ("bias", op.bias)):
        if t is not None:
            rw.check_vector(f"layernorm {what}", t, cols)
    cfg = rw.config(rows, cols, config)
    args = {
        "x_ptr": Ptr(op.x),
        "w_ptr": Ptr(op.weight) if op.weight is not None else Const(None),
        "b_ptr": Ptr(op.bias) if op.bias is not None else Const(None),
        "out_ptr": Ptr(op.out),
        **rw.view_args("x", op.x),
        "w_stride": int_arg(op.weight.strides[0]) if op.weight is not None else Const(0),
        "b_stride": int_arg(op.bias.strides[0]) if op.bias is not None else Const(0),
        **rw.view_args("out", op.out),
        "n_rows": int_arg(rows), "n_cols": int_arg(cols), "eps": F32(op.eps),
        "BLOCK_C": Const(cfg["BLOCK_C"]), "ROWS": Const(cfg["ROWS"]), "LOOP": Const(cfg["LOOP"]),
        "HAS_WEIGHT": Const(op.weight is not None), "HAS_BIAS": Const(op.bias is not None),
    }
    grid = (cdiv(rows, cfg["ROWS"]), 1, 1)
    return KernelPlan(layernorm_kernel, args, grid, cfg["num_warps"], cfg["num_stages"],
                      ("layer_norm",), rw.plan_config(cfg))


# compile / run_interpreted / run_plan_interpreted_here / run_jit, from plan() (see _common)
compile, run_interpreted, run_plan_interpreted_here, run_jit = entry_points(plan)


def bytes_moved(op: LayerNormOp) -> int:
    n = op.x.numel * (op.x.dtype.nbytes + op.out.dtype.nbytes)
    return n + sum(t.numel * t.dtype.nbytes for t in (op.weight, op.bias) if t is not None)
