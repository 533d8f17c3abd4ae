"""sum / mean / amax / amin over the last dim of a 2-D view [R, C] -> out[R], f32 accumulation
(integer and bool rows: sum / amax / amin in int64, reduce_int_kernel).

Whole rows in registers (C <= 16384, several short rows per program) or, for longer rows, a
loop over 4096-column chunks into per-lane f32 accumulators combined once at the end (argmax:
each lane's max and its column, the first column of the row's max at the end).
amax/amin propagate NaN like torch (the hardware max/min drop it, so NaNs are counted).
argmax over a long row (a vocabulary, the last op of a generation step) is cut into PARTS
column ranges, one program each (a 128k-word row is 32 programs of 4k columns, not one program
walking it all: ~2 us instead of ~40 at batch 1); each writes its best value and first column,
and the row's last program to finish picks the first column of the row's maximum (counters:
zero before, reset by that program).
"""
from __future__ import annotations

import triton
import triton.language as tl

from aotpack.kernels.spec import REDUCE_KINDS, ReduceOp
from aotpack.kernels.triton import _rowwise as rw
from aotpack.kernels.triton._common import KernelPlan, entry_points, int_arg
from aotpack.kernels.triton._rowwise_jit import load_chunk, row_block
from aotpack.ir.sym import upper_bound
from aotpack.dtypes import DType
from aotpack.kernels.triton.compile import Const, Counters, Ptr, Scratch, cdiv

_KIND_CODE = {k: i for i, k in enumerate(REDUCE_KINDS)}  # sum 0 mean 1 amax 2 amin 3 argmax 4
_PART_BLOCK = 2048  # argmax by parts: columns per step (4 warps x 16 per thread)
_PART_COLS = 4096  # ... and per program, about
_MAX_PARTS = 64


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


@triton.jit
def reduce_int_kernel(x_ptr, out_ptr, x_stride_r, x_stride_c, out_stride, n_rows, n_cols,
                      BLOCK_C: tl.constexpr, ROWS: tl.constexpr, KIND: tl.constexpr):
    """sum / amax / amin of integer or bool rows in int64 (a mask's count of ones, a length):
    exact at any size, unlike the f32 path."""
    rows, row_mask = row_block(n_rows, ROWS)
    cols = tl.arange(0, BLOCK_C)
    x_row = x_ptr + rows[:, None] * x_stride_r
    if KIND == 2:
        fill = -9223372036854775807 - 1
    elif KIND == 3:
        fill = 9223372036854775807
    else:
        fill = 0
    acc = tl.full([ROWS, BLOCK_C], fill, dtype=tl.int64)
    for start in range(0, n_cols, BLOCK_C):
        c = start + cols
        mask = row_mask[:, None] & (c[None, :] < n_cols)
        x = tl.load(x_row + c[None, :] * x_stride_c, mask=mask, other=0).to(tl.int64)
        acc = _combine(acc, tl.where(mask, x, fill), KIND)
    if KIND == 2:
        r = tl.max(acc, 1)
    elif KIND == 3:
        r = tl.min(acc, 1)
    else:
        r = tl.sum(acc, 1)
    tl.store(out_ptr + rows * out_stride, r.to(out_ptr.dtype.element_ty), mask=row_mask)


_INT_KINDS = ("sum", "amax", "amin")  # of integer / bool rows (reduce_int_kernel)


def _int_plan(op: ReduceOp, rows, cols) -> KernelPlan:
    if op.kind not in _INT_KINDS:
        raise ValueError(f"reduce: {op.kind} of {op.x.dtype.value} rows (integers take "
                         f"{', '.join(_INT_KINDS)})")
    block_c = min(1024, rw.next_pow2(max(1, upper_bound(cols))))
    rows_per = max(1, min(16, 1024 // block_c))
    args = {
        "x_ptr": Ptr(op.x), "out_ptr": Ptr(op.out), **rw.view_args("x", op.x),
        "out_stride": int_arg(op.out.strides[0]), "n_rows": int_arg(rows),
        "n_cols": int_arg(cols), "BLOCK_C": Const(block_c), "ROWS": Const(rows_per),
        "KIND": Const(_KIND_CODE[op.kind]),
    }
    return KernelPlan(reduce_int_kernel, args, (cdiv(rows, rows_per), 1, 1), 4, 1,
                      (op.kind, "int64"), {"kind": op.kind, "BLOCK_C": block_c,
                                           "ROWS": rows_per, "int64": True})


@triton.jit
def argmax_parts_kernel(x_ptr, out_ptr, val_ptr, idx_ptr, cnt_ptr, x_stride_r, x_stride_c,
                        out_stride, n_cols, BLOCK_C: tl.constexpr, PARTS: tl.constexpr,
                        PART: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    part = tl.program_id(1)
    cols = tl.arange(0, BLOCK_C)
    x_row = x_ptr + row * x_stride_r
    acc = tl.full([BLOCK_C], float("-inf"), dtype=tl.float32)
    at = tl.zeros([BLOCK_C], dtype=tl.int32)
    lo = part * PART
    for start in range(lo, tl.minimum(lo + PART, n_cols), BLOCK_C):
        c = start + cols
        x = tl.load(x_row + c * x_stride_c, mask=c < n_cols, other=float("-inf")).to(tl.float32)
        better = x > acc  # strict: a lane keeps the first of equal maxima
        at = tl.where(better, c, at)
        acc = tl.where(better, x, acc)
    best = tl.max(acc, 0)
    slot = row * PARTS + part
    tl.store(val_ptr + slot, best)
    tl.store(idx_ptr + slot, tl.min(tl.where(acc == best, at, n_cols), 0))
    tl.debug_barrier()  # every thread's stores are done before the release
    cnt = cnt_ptr + row
    if tl.atomic_add(cnt, 1, sem="acq_rel", scope="gpu") == PARTS - 1:  # the row's last part
        p = row * PARTS + tl.arange(0, PARTS)
        vals = tl.load(val_ptr + p, cache_modifier=".cg")
        idxs = tl.load(idx_ptr + p, cache_modifier=".cg")
        r = tl.min(tl.where(vals == tl.max(vals, 0), idxs, n_cols), 0)
        tl.store(out_ptr + row * out_stride, r.to(out_ptr.dtype.element_ty))
        tl.atomic_xchg(cnt, 0)  # ready for the next launch


def _argmax_parts_plan(op: ReduceOp, rows, cols, config: dict | None) -> KernelPlan:
    n = upper_bound(cols)
    parts = int((config or {}).get("PARTS") or min(_MAX_PARTS, rw.next_pow2(cdiv(n, _PART_COLS))))
    if parts & (parts - 1) or not 1 < parts <= _MAX_PARTS:
        raise ValueError(f"reduce argmax: PARTS={parts} must be a power of two in 2..{_MAX_PARTS}")
    part = cdiv(cdiv(n, parts), _PART_BLOCK) * _PART_BLOCK
    args = {
        "x_ptr": Ptr(op.x), "out_ptr": Ptr(op.out),
        "val_ptr": Scratch(DType.F32, rows * parts * 4), "idx_ptr": Scratch(DType.I32,
                                                                            rows * parts * 4),
        "cnt_ptr": Counters(rows * 4), **rw.view_args("x", op.x),
        "out_stride": int_arg(op.out.strides[0]), "n_cols": int_arg(cols),
        "BLOCK_C": Const(_PART_BLOCK), "PARTS": Const(parts), "PART": Const(part),
    }
    return KernelPlan(argmax_parts_kernel, args, (rows, parts, 1), 4, 1, ("argmax", "parts"),
                      {"kind": "argmax", "BLOCK_C": _PART_BLOCK, "PARTS": parts})


def plan(op: ReduceOp, config: dict | None = None) -> KernelPlan:
    if op.kind not in _KIND_CODE:
        raise ValueError(f"reduce: unknown kind {op.kind!r} (one of {', '.join(REDUCE_KINDS)})")
    rows, cols = rw.check_2d("reduce x", op.x)
    if op.out.shape != (rows,):
        raise ValueError(f"reduce: out must be a [{rows}] vector, got {op.out.shape}")
    if not op.x.dtype.is_float and op.kind != "argmax":  # argmax of ids: f32 is exact < 2**24
        return _int_plan(op, rows, cols)
    if op.kind == "argmax" and upper_bound(cols) > rw.MAX_COLS and \
            (config or {}).get("PARTS", 0) != 1:
        return _argmax_parts_plan(op, rows, cols, config)
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


# compile / run_plan_interpreted_here / run_jit, from plan() (see _common)
compile, run_plan_interpreted_here, run_jit = entry_points(plan)


def bytes_moved(op: ReduceOp) -> int:
    return op.x.numel * op.x.dtype.nbytes + op.out.numel * op.out.dtype.nbytes
