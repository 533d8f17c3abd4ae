"""RMSNorm over the last dim of a 2-D view: out = x * rsqrt(mean(x^2) + eps) [* weight], f32 math.

Each program holds whole rows (C up to 16384) in registers, so x is read once and the statistics
are plain f32 sums (no Welford needed for a mean of squares). Memory bound: one row per program
for long rows (warps grow with C so each thread keeps 8-32 elements in 16-byte vectors), several
rows per program for short ones.
"""
from __future__ import annotations

import triton
import triton.language as tl

from aotpack.dtypes import DType
from aotpack.kernels.spec import RMSNormOp
from aotpack.kernels.triton._common import (
    KernelPlan, entry_points, int_arg, require_unit_inner_stride,
)
from aotpack.kernels.triton.compile import F32, Const, Ptr, cdiv
from aotpack.kernels.triton.fp8 import quantize_rows, row_scales
from aotpack.kernels.triton.pdl import release_dependents

MAX_COLS = 16384


@triton.jit
def rmsnorm_kernel(x_ptr, weight_ptr, out_ptr, x_stride_r, out_stride_r, n_rows, n_cols, eps,
                   scale_ptr,
                   BLOCK_C: tl.constexpr, ROWS: tl.constexpr, HAS_WEIGHT: tl.constexpr,
                   OUT_FP8: tl.constexpr):
    release_dependents()  # a decode GEMM reading this norm may start its prefetch (pdl.py)
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_C)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    rows = rows.to(tl.int64)
    x_ptrs = x_ptr + rows[:, None] * x_stride_r + cols[None, :]
    x = tl.load(x_ptrs, mask=mask, other=0.0).to(tl.float32)
    mean_sq = tl.sum(x * x, 1) / n_cols
    y = x * tl.rsqrt(mean_sq + eps)[:, None]
    if HAS_WEIGHT:
        w = tl.load(weight_ptr + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        y = y * w[None, :]
    out_ptrs = out_ptr + rows[:, None] * out_stride_r + cols[None, :]
    if OUT_FP8:  # the next GEMMs' e4m3 input and its scale per row (whole rows are here)
        scale = row_scales(tl.max(tl.abs(y), 1))
        tl.store(scale_ptr + rows, scale, mask=rows < n_rows)
        y = quantize_rows(y, 1.0 / scale)
    tl.store(out_ptrs, y.to(out_ptr.dtype.element_ty), mask=mask)


def default_config(n_cols: int) -> dict:
    """Whole rows in registers; short rows are packed several per program so that every
    program still moves >= 2K elements (16-byte vectors for all threads)."""
    block = triton.next_power_of_2(n_cols)
    rows = max(1, 2048 // block)
    warps = 4 if block * rows <= 2048 else 8 if block <= 4096 else 16
    return {"BLOCK_C": block, "ROWS": rows, "num_warps": warps, "num_stages": 1}


def plan(op: RMSNormOp, config: dict | None = None) -> KernelPlan:
    rows, cols = op.x.shape
    if op.out.shape != op.x.shape:
        raise ValueError(f"rmsnorm: out {op.out.shape} != x {op.x.shape}")
    if cols > MAX_COLS:
        raise ValueError(f"rmsnorm: {cols} columns > {MAX_COLS} (one row per program)")
    require_unit_inner_stride("rmsnorm x", op.x)
    require_unit_inner_stride("rmsnorm out", op.out)
    if (op.out_scale is not None) != (op.out.dtype is DType.F8E4M3):
        raise ValueError("rmsnorm: an f8e4m3 output and its out_scale come together")
    if op.out_scale is not None and (op.out_scale.dtype is not DType.F32 or tuple(
            op.out_scale.shape) != (rows,) or tuple(op.out_scale.strides) != (1,)):
        raise ValueError(f"rmsnorm: out_scale must be a contiguous f32 [{rows}]")
    if op.weight is not None:
        if op.weight.shape != (cols,) or op.weight.strides != (1,):
            raise ValueError(f"rmsnorm: weight must be a contiguous [{cols}] vector")
    cfg = dict(default_config(cols), **(config or {}))
    args = {
        "x_ptr": Ptr(op.x),
        "weight_ptr": Ptr(op.weight) if op.weight is not None else Const(None),
        "out_ptr": Ptr(op.out),
        "x_stride_r": int_arg(op.x.strides[0]), "out_stride_r": int_arg(op.out.strides[0]),
        "n_rows": int_arg(rows), "n_cols": int_arg(cols), "eps": F32(op.eps),
        "scale_ptr": Ptr(op.out_scale) if op.out_scale is not None else Const(None),
        "BLOCK_C": Const(cfg["BLOCK_C"]), "ROWS": Const(cfg["ROWS"]),
        "HAS_WEIGHT": Const(op.weight is not None),
        "OUT_FP8": Const(op.out_scale is not None),
    }
    grid = (cdiv(rows, cfg["ROWS"]), 1, 1)
    fused = ("rmsnorm", "quant_fp8") if op.out_scale is not None else ("rmsnorm",)
    return KernelPlan(rmsnorm_kernel, args, grid, cfg["num_warps"], cfg["num_stages"],
                      fused, {"BLOCK_C": cfg["BLOCK_C"], "ROWS": cfg["ROWS"]})


# compile / run_plan_interpreted_here / run_jit, from plan() (see _common)
compile, run_plan_interpreted_here, run_jit = entry_points(plan)


def bytes_moved(op: RMSNormOp) -> int:
    n = op.x.numel * (op.x.dtype.nbytes + op.out.dtype.nbytes)
    return n + (op.weight.numel * op.weight.dtype.nbytes if op.weight is not None else 0)
