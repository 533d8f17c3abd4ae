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
from aotpack.kernels.triton._common import KernelPlan, entry_points, int_arg
from aotpack.kernels.triton._rowwise_jit import load_chunk, load_vector, row_block, store_chunk
from aotpack.kernels.triton.compile import F32, Const, Ptr, cdiv


@triton.jit
def layernorm_kernel(x_ptr, w_ptr, b_ptr, out_ptr, x_stride_r, x_stride_c, w_stride, b_stride,
                     out_stride_r, out_stride_c, n_rows, n_cols, eps,
                     BLOCK_C: tl.constexpr, ROWS: tl.constexpr, LOOP: tl.constexpr,
                     HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr):
    rows, row_mask = row_block(n_rows, ROWS)
    cols = tl.arange(0, BLOCK_C)
    x_row = x_ptr + rows[:, None] * x_stride_r
    out_row = out_ptr + rows[:, None] * out_stride_r
    if not LOOP:
        x, mask = load_chunk(x_row, x_stride_c, row_mask, cols, n_cols)
        mean = tl.sum(x, 1) / n_cols
        xc = tl.where(mask, x - mean[:, None], 0.0)
        y = xc * tl.rsqrt(tl.sum(xc * xc, 1) / n_cols + eps)[:, None]
        if HAS_WEIGHT:
            y = y * load_vector(w_ptr, cols, w_stride, n_cols)[None, :]
        if HAS_BIAS:
            y = y + load_vector(b_ptr, cols, b_stride, n_cols)[None, :]
        store_chunk(out_row, out_stride_c, cols, y, mask)
    else:
        # three passes over the row: mean, variance of the centred values, normalise
        acc = tl.zeros([ROWS, BLOCK_C], dtype=tl.float32)
        for start in range(0, n_cols, BLOCK_C):
            x, mask = load_chunk(x_row, x_stride_c, row_mask, start + cols, n_cols)
            acc += x
        mean = tl.sum(acc, 1) / n_cols
        acc = tl.zeros([ROWS, BLOCK_C], dtype=tl.float32)
        for start in range(0, n_cols, BLOCK_C):
            x, mask = load_chunk(x_row, x_stride_c, row_mask, start + cols, n_cols)
            xc = tl.where(mask, x - mean[:, None], 0.0)
            acc += xc * xc
        rstd = tl.rsqrt(tl.sum(acc, 1) / n_cols + eps)
        for start in range(0, n_cols, BLOCK_C):
            c = start + cols
            x, mask = load_chunk(x_row, x_stride_c, row_mask, c, n_cols)
            y = (x - mean[:, None]) * rstd[:, None]
            if HAS_WEIGHT:
                y = y * load_vector(w_ptr, c, w_stride, n_cols)[None, :]
            if HAS_BIAS:
                y = y + load_vector(b_ptr, c, b_stride, n_cols)[None, :]
            store_chunk(out_row, out_stride_c, c, y, mask)


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


# compile / run_plan_interpreted_here / run_jit, from plan() (see _common)
compile, run_plan_interpreted_here, run_jit = entry_points(plan)


def bytes_moved(op: LayerNormOp) -> int:
    n = op.x.numel * (op.x.dtype.nbytes + op.out.dtype.nbytes)
    return n + sum(t.numel * t.dtype.nbytes for t in (op.weight, op.bias) if t is not None)
