"""sum / mean / amax / amin over the last dim of a 2-D view [R, C] -> out[R], f32 accumulation.

Whole rows in registers (C <= 16384, several short rows per program) or, for longer rows, a
loop over 4096-column chunks into per-lane f32 accumulators combined once at the end (argmax:
each lane's max and its column, the first column of the row's max at the end).
amax/amin propagate NaN like torch (the hardware max/min drop it, so NaNs are counted).
"""
from __future__ import annotations

import triton
import triton.language as tl

from aotpack.kernels.spec import REDUCE_KINDS, ReduceOp
from aotpack.kernels.triton import _rowwise as rw
from aotpack.kernels.triton._common import KernelPlan, entry_points, int_arg
from aotpack.kernels.triton._rowwise_jit import load_chunk, row_block
from aotpack.kernels.triton.compile import Const, Ptr, cdiv

_KIND_CODE = {k: i for i, k in enumerate(REDUCE_KINDS)}  # sum 0 mean 1 amax 2 amin 3 argmax 4


@triton.jit
def _combine(acc, x, KIND: tl.constexpr):
    if KIND == 2:
        return tl.maximum(acc, x)
    elif KIND == 3:
        return tl.minimum(acc, x)
    else:
        return acc + x


@triton.jit
def _finish(acc, nan, n_cols, KIND: tl.constexpr):
    if KIND == 4:
        r = tl.argmax(acc, 1, tie_break_left=True)
    elif KIND == 2:
        r = tl.where(tl.sum(nan, 1) > 0, float("nan"), tl.max(acc, 1))
    elif KIND == 3:
        r = tl.where(tl.sum(nan, 1) > 0, float("nan"), tl.min(acc, 1))
    elif KIND == 1:
        r = tl.sum(acc, 1) / n_cols
    else:
        r = tl.sum(acc, 1)
    return r


@triton.jit
def reduce_kernel(x_ptr, out_ptr, x_stride_r, x_stride_c, out_stride, n_rows, n_cols,
                  BLOCK_C: tl.constexpr, ROWS: tl.constexpr, LOOP: tl.constexpr,
                  KIND: tl.constexpr):
    rows, row_mask = row_block(n_rows, ROWS)
    cols = tl.arange(0, BLOCK_C)
    x_row = x_ptr + rows[:, None] * x_stride_r
    if KIND == 2 or KIND == 4:
        fill = float("-inf")
    elif KIND == 3:
        fill = float("inf")
    else:
        fill = 0.0
    if not LOOP:
        x, mask = load_chunk(x_row, x_stride_c, row_mask, cols, n_cols)
        acc = tl.where(mask, x, fill)
        nan = (acc != acc).to(tl.int32)
    elif KIND == 4:  # argmax of a long row (a vocabulary): each lane keeps its max and where
        acc = tl.full([ROWS, BLOCK_C], fill, dtype=tl.float32)
        at = tl.zeros([ROWS, BLOCK_C], dtype=tl.int32)
        for start in range(0, n_cols, BLOCK_C):
            x, mask = load_chunk(x_row, x_stride_c, row_mask, start + cols, n_cols)
            x = tl.where(mask, x, fill)
            better = x > acc  # strict: a lane keeps the first of equal maxima
            at = tl.where(better, start + cols[None, :], at)
            acc = tl.where(better, x, acc)
        best = tl.max(acc, 1)
    else:
        acc = tl.full([ROWS, BLOCK_C], fill, dtype=tl.float32)
        nan = tl.zeros([ROWS, BLOCK_C], dtype=tl.int32)
        for start in range(0, n_cols, BLOCK_C):
            x, mask = load_chunk(x_row, x_stride_c, row_mask, start + cols, n_cols)
            x = tl.where(mask, x, fill)
            acc = _combine(acc, x, KIND)
            nan = nan | (x != x).to(tl.int32)
    if KIND == 4 and LOOP:  # the first column holding the row's max
        r = tl.min(tl.where(acc == best[:, None], at, n_cols), 1)
    else:
        r = _finish(acc, nan, n_cols, KIND)
    tl.store(out_ptr + rows * out_stride, r.to(out_ptr.dtype.element_ty), mask=row_mask)


def plan(op: ReduceOp, config: dict | None = None) -> KernelPlan:
    if op.kind not in _KIND_CODE:
        raise ValueError(f"reduce: unknown kind {op.kind!r} (one of {', '.join(REDUCE_KINDS)})")
    rows, cols = rw.check_2d("reduce x", op.x)
    if op.out.shape != (rows,):
        raise ValueError(f"reduce: out must be a [{rows}] vector, got {op.out.shape}")
    cfg = rw.config(rows, cols, config)
    args = {
        "x_ptr": Ptr(op.x), "out_ptr": Ptr(op.out), **rw.view_args("x", op.x),
        "out_stride": int_arg(op.out.strides[0]),
        "n_rows": int_arg(rows), "n_cols": int_arg(cols),
        "BLOCK_C": Const(cfg["BLOCK_C"]), "ROWS": Const(cfg["ROWS"]), "LOOP": Const(cfg["LOOP"]),
        "KIND": Const(_KIND_CODE[op.kind]),
    }
    grid = (cdiv(rows, cfg["ROWS"]), 1, 1)
    return KernelPlan(reduce_kernel, args, grid, cfg["num_warps"], cfg["num_stages"],
                      (op.kind,), dict(rw.plan_config(cfg), kind=op.kind))


# compile / run_interpreted / run_plan_interpreted_here / run_jit, from plan() (see _common)
compile, run_interpreted, run_plan_interpreted_here, run_jit = entry_points(plan)


def bytes_moved(op: ReduceOp) -> int:
    return op.x.numel * op.x.dtype.nbytes + op.out.numel * op.out.dtype.nbytes
