"""Mixture-of-experts routing kernels: topk over the experts, the stable sort of the chosen
expert ids, their histogram (tokens per expert), and the inverse of the sort's permutation.

The sizes they see are small on one side (E experts, k picks) and follow the token count on
the other (T*k ids, a run-time size), so:
 - topk: ROWS rows of the [R, C] scores per program, k rounds of (max, first index of it);
 - sort: the rank of each element is the number of elements that sort before it (smaller, or
   equal and earlier: stable); each program ranks a block against all N and scatters it to
   its rank. O(N^2) compares, no inter-program sync: a few microseconds at the prefill sizes
   of one GPU batch (2 x 4096 ids), the grid growing with N;
 - histc: each program counts a block of bins over all of x;
 - inverse permutation: out[order[i]] = i, one scatter.
And the row scatter (a KV cache's write, out[rows[r], :] = values[r, :]): a program per
(block of rows, block of columns), rows outside the table skipped.
"""
from __future__ import annotations

import triton
import triton.language as tl

from aotpack.ir.sym import upper_bound
from aotpack.kernels.spec import HistcOp, InversePermOp, ScatterRowsOp, SortOp, TopkOp
from aotpack.kernels.triton import _rowwise as rw
from aotpack.kernels.triton._common import KernelPlan, entry_points, int_arg
from aotpack.kernels.triton.compile import Const, Ptr, cdiv

MAX_TOPK_COLS = 4096


@triton.jit
def topk_kernel(x_ptr, out_ptr, n_rows, n_cols, x_stride_r, x_stride_c, out_stride_r,
                out_stride_c, K: tl.constexpr, INDICES: tl.constexpr, ROWS: tl.constexpr,
                BLOCK_C: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_C)
    row_ok = rows < n_rows
    alive = row_ok[:, None] & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + rows[:, None].to(tl.int64) * x_stride_r + cols[None, :] * x_stride_c,
                mask=alive, other=float("-inf")).to(tl.float32)
    for j in tl.static_range(K):
        best = tl.max(tl.where(alive, x, float("-inf")), axis=1)
        hit = alive & (x == best[:, None])
        first = tl.min(tl.where(hit, cols[None, :], BLOCK_C), axis=1)
        # a row of NaNs / -inf only: the first column still alive
        first = tl.where(first == BLOCK_C,
                         tl.min(tl.where(alive, cols[None, :], BLOCK_C), axis=1), first)
        alive = alive & (cols[None, :] != first[:, None])
        dst = out_ptr + rows.to(tl.int64) * out_stride_r + j * out_stride_c
        if INDICES:
            tl.store(dst, first.to(out_ptr.dtype.element_ty), mask=row_ok)
        else:
            tl.store(dst, best.to(out_ptr.dtype.element_ty), mask=row_ok)


@triton.jit
def sort_kernel(x_ptr, out_ptr, n, x_stride, out_stride, INDICES: tl.constexpr,
                BLOCK_I: tl.constexpr, BLOCK_J: tl.constexpr):
    i = tl.program_id(0) * BLOCK_I + tl.arange(0, BLOCK_I)
    i_ok = i < n
    xi = tl.load(x_ptr + i.to(tl.int64) * x_stride, mask=i_ok, other=0).to(tl.int64)
    rank = tl.zeros([BLOCK_I], dtype=tl.int32)
    for start in range(0, n, BLOCK_J):
        j = start + tl.arange(0, BLOCK_J)
        xj = tl.load(x_ptr + j.to(tl.int64) * x_stride, mask=j < n, other=0).to(tl.int64)
        before = (xj[None, :] < xi[:, None]) | ((xj[None, :] == xi[:, None])
                                                & (j[None, :] < i[:, None]))
        rank += tl.sum((before & (j[None, :] < n)).to(tl.int32), axis=1)
    dst = out_ptr + rank.to(tl.int64) * out_stride
    if INDICES:
        tl.store(dst, i.to(out_ptr.dtype.element_ty), mask=i_ok)
    else:
        tl.store(dst, xi.to(out_ptr.dtype.element_ty), mask=i_ok)


@triton.jit
def histc_kernel(x_ptr, out_ptr, n, x_stride, bins, lo, hi, BLOCK_B: tl.constexpr,
                 BLOCK_N: tl.constexpr):
    b = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
    counts = tl.zeros([BLOCK_B], dtype=tl.int32)
    for start in range(0, n, BLOCK_N):
        j = start + tl.arange(0, BLOCK_N)
        ok = j < n
        x = tl.load(x_ptr + j.to(tl.int64) * x_stride, mask=ok, other=0).to(tl.float32)
        ok = ok & (x >= lo) & (x <= hi)
        at = ((x - lo) * bins / (hi - lo)).to(tl.int32)
        at = tl.where(at >= bins, bins - 1, at)  # hi itself: the last bin (torch)
        counts += tl.sum(((at[None, :] == b[:, None]) & ok[None, :]).to(tl.int32), axis=1)
    tl.store(out_ptr + b, counts.to(out_ptr.dtype.element_ty), mask=b < bins)


@triton.jit
def inverse_perm_kernel(order_ptr, out_ptr, n, order_stride, out_stride, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = i < n
    at = tl.load(order_ptr + i.to(tl.int64) * order_stride, mask=ok, other=0).to(tl.int64)
    tl.store(out_ptr + at * out_stride, i.to(out_ptr.dtype.element_ty), mask=ok)


@triton.jit
def scatter_rows_kernel(rows_ptr, values_ptr, out_ptr, n_rows, n_table, n_cols, rows_stride,
                        values_stride_r, values_stride_c, out_stride_r, out_stride_c,
                        ROWS: tl.constexpr, BLOCK_C: tl.constexpr):
    r = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    r_ok = r < n_rows
    at = tl.load(rows_ptr + r.to(tl.int64) * rows_stride, mask=r_ok, other=-1).to(tl.int64)
    ok = (r_ok & (at >= 0) & (at < n_table))[:, None] & (c[None, :] < n_cols)
    x = tl.load(values_ptr + r[:, None].to(tl.int64) * values_stride_r
                + c[None, :] * values_stride_c, mask=ok)
    tl.store(out_ptr + at[:, None] * out_stride_r + c[None, :] * out_stride_c,
             x.to(out_ptr.dtype.element_ty), mask=ok)


def _plan_scatter_rows(op: ScatterRowsOp, config: dict) -> KernelPlan:
    n_table, cols = rw.check_2d("scatter_rows out", op.out)
    n_rows = op.rows.shape[0]
    if len(op.rows.shape) != 1 or tuple(op.values.shape) != (n_rows, cols):
        raise ValueError(f"scatter_rows: rows {op.rows.shape}, values {op.values.shape}, "
                         f"out {op.out.shape} are not [R], [R, C], [N, C]")
    block_c = min(rw.next_pow2(upper_bound(cols)), 1024)
    rows_per = max(1, min(16, 4096 // block_c))
    args = {"rows_ptr": Ptr(op.rows), "values_ptr": Ptr(op.values), "out_ptr": Ptr(op.out),
            "n_rows": int_arg(n_rows), "n_table": int_arg(n_table), "n_cols": int_arg(cols),
            "rows_stride": int_arg(op.rows.strides[0]),
            "values_stride_r": int_arg(op.values.strides[0]),
            "values_stride_c": int_arg(op.values.strides[1]),
            "out_stride_r": int_arg(op.out.strides[0]),
            "out_stride_c": int_arg(op.out.strides[1]),
            "ROWS": Const(rows_per), "BLOCK_C": Const(block_c)}
    return KernelPlan(scatter_rows_kernel, args,
                      (cdiv(n_rows, rows_per), cdiv(cols, block_c), 1), 4, 1,
                      ("scatter_rows",), {})


def _plan_topk(op: TopkOp, config: dict) -> KernelPlan:
    rows, cols = rw.check_2d("topk x", op.x)
    if not isinstance(cols, int) or cols > MAX_TOPK_COLS:
        raise ValueError(f"topk: a last dim of {cols} (static, up to {MAX_TOPK_COLS})")
    if tuple(op.out.shape) != (rows, op.k):
        raise ValueError(f"topk: out {op.out.shape} is not [{rows}, {op.k}]")
    block_c = rw.next_pow2(cols)
    n_rows = config.get("ROWS", max(1, min(64, 2048 // block_c)))
    args = {"x_ptr": Ptr(op.x), "out_ptr": Ptr(op.out), "n_rows": int_arg(rows),
            "n_cols": int_arg(cols), "x_stride_r": int_arg(op.x.strides[0]),
            "x_stride_c": int_arg(op.x.strides[1]), "out_stride_r": int_arg(op.out.strides[0]),
            "out_stride_c": int_arg(op.out.strides[1]), "K": Const(op.k),
            "INDICES": Const(op.indices), "ROWS": Const(n_rows), "BLOCK_C": Const(block_c)}
    return KernelPlan(topk_kernel, args, (cdiv(rows, n_rows), 1, 1), 4, 1, ("topk",),
                      {"ROWS": n_rows})


def _plan_sort(op: SortOp, config: dict) -> KernelPlan:
    (n,) = _check_1d("sort", op.x, op.out)
    if upper_bound(n) >= 2**31:
        raise ValueError(f"sort: {n} elements (under 2**31)")
    block_i, block_j = config.get("BLOCK_I", 64), config.get("BLOCK_J", 128)
    args = {"x_ptr": Ptr(op.x), "out_ptr": Ptr(op.out), "n": int_arg(n),
            "x_stride": int_arg(op.x.strides[0]), "out_stride": int_arg(op.out.strides[0]),
            "INDICES": Const(op.indices), "BLOCK_I": Const(block_i), "BLOCK_J": Const(block_j)}
    return KernelPlan(sort_kernel, args, (cdiv(n, block_i), 1, 1), 4, 1, ("sort",),
                      {"BLOCK_I": block_i, "BLOCK_J": block_j})


def _plan_histc(op: HistcOp, config: dict) -> KernelPlan:
    (n,) = _check_1d("histc", op.x, None)
    bins = op.out.shape[0]
    if len(op.out.shape) != 1 or not isinstance(bins, int):
        raise ValueError(f"histc: out {op.out.shape} is not [bins]")
    block_b = min(64, rw.next_pow2(bins))
    args = {"x_ptr": Ptr(op.x), "out_ptr": Ptr(op.out), "n": int_arg(n),
            "x_stride": int_arg(op.x.strides[0]), "bins": Const(bins),
            "lo": Const(float(op.lo)), "hi": Const(float(op.hi)),
            "BLOCK_B": Const(block_b), "BLOCK_N": Const(128)}
    return KernelPlan(histc_kernel, args, (cdiv(bins, block_b), 1, 1), 4, 1, ("histc",),
                      {"BLOCK_B": block_b})


def _plan_inverse_perm(op: InversePermOp, config: dict) -> KernelPlan:
    (n,) = _check_1d("inverse_perm", op.order, op.out)
    args = {"order_ptr": Ptr(op.order), "out_ptr": Ptr(op.out), "n": int_arg(n),
            "order_stride": int_arg(op.order.strides[0]),
            "out_stride": int_arg(op.out.strides[0]), "BLOCK": Const(256)}
    return KernelPlan(inverse_perm_kernel, args, (cdiv(n, 256), 1, 1), 4, 1,
                      ("inverse_perm",), {})


def _check_1d(what, x, out) -> tuple:
    if len(x.shape) != 1 or (out is not None and tuple(out.shape) != tuple(x.shape)):
        raise ValueError(f"{what}: x {x.shape} and out {getattr(out, 'shape', None)} are not "
                         f"one [N] vector")
    return tuple(x.shape)


_PLANS = {TopkOp: _plan_topk, SortOp: _plan_sort, HistcOp: _plan_histc,
          InversePermOp: _plan_inverse_perm, ScatterRowsOp: _plan_scatter_rows}


def plan(op, config: dict | None = None) -> KernelPlan:
    return _PLANS[type(op)](op, config or {})


# compile / run_plan_interpreted_here / run_jit, from plan() (see _common)
compile, run_plan_interpreted_here, run_jit = entry_points(plan)
