"""cumsum over the last dim of a 2-D view [R, C] (ScanOp): position ids from a padding mask
(RoBERTa, OPT, BLOOM: `cumsum(attention_mask, 1)`), and prefix sums in general.

One row per program, walked in BLOCK_C chunks: each chunk is scanned in registers (tl.cumsum)
and offset by the running total of the chunks before it. Integer inputs accumulate in int64
(exact), floating ones in f32.
"""
from __future__ import annotations

import triton
import triton.language as tl

from aotpack.ir.sym import upper_bound
from aotpack.kernels.spec import ScanOp
from aotpack.kernels.triton import _rowwise as rw
from aotpack.kernels.triton._common import KernelPlan, entry_points, int_arg
from aotpack.kernels.triton.compile import Const, Ptr

MAX_BLOCK = 4096


@triton.jit
def cumsum_kernel(x_ptr, out_ptr, x_stride_r, x_stride_c, out_stride_r, out_stride_c, n_cols,
                  BLOCK_C: tl.constexpr, INTEGER: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_C)
    if INTEGER:
        carry = tl.zeros([1], dtype=tl.int64)
    else:
        carry = tl.zeros([1], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_C):
        c = start + cols
        ok = c < n_cols
        x = tl.load(x_ptr + row * x_stride_r + c * x_stride_c, mask=ok, other=0)
        if INTEGER:
            x = x.to(tl.int64)
        else:
            x = x.to(tl.float32)
        total = tl.cumsum(x, 0) + carry
        tl.store(out_ptr + row * out_stride_r + c * out_stride_c,
                 total.to(out_ptr.dtype.element_ty), mask=ok)
        carry = tl.sum(tl.where(cols == BLOCK_C - 1, total, 0), 0, keep_dims=True)


def default_config(n_cols) -> dict:
    block = min(MAX_BLOCK, rw.next_pow2(n_cols))
    return {"BLOCK_C": block, "num_warps": 4 if block <= 1024 else 8, "num_stages": 1}


def plan(op: ScanOp, config: dict | None = None) -> KernelPlan:
    rows, cols = rw.check_2d("cumsum x", op.x)
    if tuple(op.out.shape) != (rows, cols):
        raise ValueError(f"cumsum: out {op.out.shape} is not x's shape {op.x.shape}")
    if upper_bound(rows) >= 2**31:
        raise ValueError(f"cumsum: {rows} rows is too many for one grid")
    cfg = dict(default_config(cols), **(config or {}))
    args = {"x_ptr": Ptr(op.x), "out_ptr": Ptr(op.out),
            "x_stride_r": int_arg(op.x.strides[0]), "x_stride_c": int_arg(op.x.strides[1]),
            "out_stride_r": int_arg(op.out.strides[0]),
            "out_stride_c": int_arg(op.out.strides[1]), "n_cols": int_arg(cols),
            "BLOCK_C": Const(cfg["BLOCK_C"]), "INTEGER": Const(not op.x.dtype.is_float)}
    return KernelPlan(cumsum_kernel, args, (rows, 1, 1), cfg["num_warps"], cfg["num_stages"],
                      ("cumsum",), {"BLOCK_C": cfg["BLOCK_C"]})


# compile / run_plan_interpreted_here / run_jit, from plan() (see _common)
compile, run_plan_interpreted_here, run_jit = entry_points(plan)
