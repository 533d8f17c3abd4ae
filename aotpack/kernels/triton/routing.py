"""Mixture-of-experts routing kernels: topk over the experts, the stable sort of the chosen
expert ids, their histogram (tokens per expert), and the inverse of the sort's permutation;
topk and sort serve any tensor's rows too (torch.topk / sort / argsort).

The sizes they see are small on one side (E experts, k picks) and follow the token count on
the other (T*k ids, a run-time size), so:
 - topk: ROWS rows of the [R, C] scores per program, k rounds of (max or min, first index of
   it);
 - sort: along rows of [R, C]; the rank of each element is the number of elements of its row
   that sort before it (smaller, or larger when descending, or equal and earlier: stable; a
   NaN after every number, as torch); each program ranks a block against its whole row and
   scatters it to its rank. O(C^2) compares per row, no inter-program sync: a few
   microseconds at the prefill sizes of one GPU batch (2 x 4096 ids), the grid growing with
   C; long rows (a vocabulary) cost C^2 / (BLOCK_I * BLOCK_J) loop steps in all;
 - histc: each program counts a block of bins over all of x;
 - inverse permutation: out[order[i]] = i, one scatter.
And the row scatter (a KV cache's write, out[rows[r], :] = values[r, :], or += / max= / min=
with atomics: scatter_add, index_put(accumulate=True)): a program per (block of rows, block
of columns), rows outside the table skipped.
"""
from __future__ import annotations

import triton
import triton.language as tl

from aotpack.ir.sym import upper_bound
from aotpack.kernels.spec import (
    MAX_TOPK_COLS, HistcOp, InversePermOp, ScatterRowsOp, SortOp, TopkOp,
)
from aotpack.kernels.triton import _rowwise as rw
from aotpack.kernels.triton._common import KernelPlan, entry_points, int_arg
from aotpack.kernels.triton.compile import Const, Ptr, cdiv



@triton.jit
def topk_kernel(x_ptr, out_ptr, n_rows, n_cols, x_stride_r, x_stride_c, out_stride_r,
                out_stride_c, K: tl.constexpr, INDICES: tl.constexpr, LARGEST: tl.constexpr,
                ROWS: tl.constexpr, BLOCK_C: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_C)
    row_ok = rows < n_rows
    alive = row_ok[:, None] & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + rows[:, None].to(tl.int64) * x_stride_r + cols[None, :] * x_stride_c,
                mask=alive, other=float("-inf")).to(tl.float32)
    if not LARGEST:  # the smallest are the largest of -x (exact, NaN stays NaN)
        x = -x
    nan = x != x
    for j in tl.static_range(K):
        real = alive & ~nan
        best = tl.max(tl.where(real, x, float("-inf")), axis=1)
        hit = real & (x == best[:, None])
        if LARGEST:  # a NaN ranks above every number (torch); for the smallest, below
            left_nan = alive & nan
            any_nan = tl.max(left_nan.to(tl.int32), axis=1) > 0
            hit = tl.where(any_nan[:, None], left_nan, hit)
        first = tl.min(tl.where(hit, cols[None, :], BLOCK_C), axis=1)
        # no number left (NaNs, for the smallest): the first column still alive
        first = tl.where(first == BLOCK_C,
                         tl.min(tl.where(alive, cols[None, :], BLOCK_C), axis=1), first)
        picked = cols[None, :] == first[:, None]
        value = tl.sum(tl.where(picked, x, 0.0), axis=1)  # x at first (a NaN too)
        alive = alive & ~picked
        dst = out_ptr + rows.to(tl.int64) * out_stride_r + j * out_stride_c
        if INDICES:
            tl.store(dst, first.to(out_ptr.dtype.element_ty), mask=row_ok)
        elif LARGEST:
            tl.store(dst, value.to(out_ptr.dtype.element_ty), mask=row_ok)
        else:
            tl.store(dst, (-value).to(out_ptr.dtype.element_ty), mask=row_ok)


@triton.jit
def _before(a, b, FLOAT: tl.constexpr):
    """a sorts before b ascending: smaller; a NaN after every number, as torch sorts."""
    if FLOAT:
        return (a < b) | ((b != b) & (a == a))
    else:
        return a < b


@triton.jit
def _tied(a, b, FLOAT: tl.constexpr):
    if FLOAT:
        return (a == b) | ((a != a) & (b != b))
    else:
        return a == b


@triton.jit
def sort_kernel(x_ptr, out_ptr, n, x_stride_r, x_stride_c, out_stride_r, out_stride_c,
                INDICES: tl.constexpr, DESCENDING: tl.constexpr, FLOAT: tl.constexpr,
                BLOCK_I: tl.constexpr, BLOCK_J: tl.constexpr):
    # one program: BLOCK_I elements of one row, ranked against the whole row
    row = tl.program_id(0).to(tl.int64)
    i = tl.program_id(1) * BLOCK_I + tl.arange(0, BLOCK_I)
    i_ok = i < n
    x_row = x_ptr + row * x_stride_r
    raw = tl.load(x_row + i.to(tl.int64) * x_stride_c, mask=i_ok, other=0)
    # compared as f32 (exact for 16-bit floats) or int64
    xi = raw.to(tl.float32) if FLOAT else raw.to(tl.int64)
    rank = tl.zeros([BLOCK_I], dtype=tl.int32)
    for start in range(0, n, BLOCK_J):
        j = start + tl.arange(0, BLOCK_J)
        xj = tl.load(x_row + j.to(tl.int64) * x_stride_c, mask=j < n, other=0)
        xj = xj.to(tl.float32) if FLOAT else xj.to(tl.int64)
        if DESCENDING:
            first = _before(xi[:, None], xj[None, :], FLOAT)
        else:
            first = _before(xj[None, :], xi[:, None], FLOAT)
        # stable: of equal elements the earlier one sorts first
        first = first | (_tied(xj[None, :], xi[:, None], FLOAT) & (j[None, :] < i[:, None]))
        rank += tl.sum((first & (j[None, :] < n)).to(tl.int32), axis=1)
    dst = out_ptr + row * out_stride_r + rank.to(tl.int64) * out_stride_c
    if INDICES:
        tl.store(dst, i.to(out_ptr.dtype.element_ty), mask=i_ok)
    else:
        tl.store(dst, raw.to(out_ptr.dtype.element_ty), mask=i_ok)


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
                        REDUCE: tl.constexpr, ROWS: tl.constexpr, BLOCK_C: tl.constexpr):
    r = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    r_ok = r < n_rows
    at = tl.load(rows_ptr + r.to(tl.int64) * rows_stride, mask=r_ok, other=-1).to(tl.int64)
    ok = (r_ok & (at >= 0) & (at < n_table))[:, None] & (c[None, :] < n_cols)
    x = tl.load(values_ptr + r[:, None].to(tl.int64) * values_stride_r
                + c[None, :] * values_stride_c, mask=ok)
    dst = out_ptr + at[:, None] * out_stride_r + c[None, :] * out_stride_c
    x = x.to(out_ptr.dtype.element_ty)
    # relaxed atomics: nothing in this launch reads out, only the combined values matter
    if REDUCE == "sum":
        tl.atomic_add(dst, x, mask=ok, sem="relaxed")
    elif REDUCE == "amax":
        tl.atomic_max(dst, x, mask=ok, sem="relaxed")
    elif REDUCE == "amin":
        tl.atomic_min(dst, x, mask=ok, sem="relaxed")
    else:
        tl.store(dst, x, mask=ok)


_ATOMIC_DTYPES = ("f32", "i32", "i64")


def _plan_scatter_rows(op: ScatterRowsOp, config: dict) -> KernelPlan:
    n_table, cols = rw.check_2d("scatter_rows out", op.out)
    n_rows = op.rows.shape[0]
    if len(op.rows.shape) != 1 or tuple(op.values.shape) != (n_rows, cols):
        raise ValueError(f"scatter_rows: rows {op.rows.shape}, values {op.values.shape}, "
                         f"out {op.out.shape} are not [R], [R, C], [N, C]")
    if op.reduce != "none" and op.out.dtype.value not in _ATOMIC_DTYPES:
        raise ValueError(f"scatter_rows: reduce={op.reduce!r} into {op.out.dtype.value} "
                         f"(atomics of {', '.join(_ATOMIC_DTYPES)} only)")
    block_c = min(rw.next_pow2(upper_bound(cols)), 1024)
    # narrow rows (an element-wise scatter has rows of one element): ~1024 elements a program
    rows_per = max(1, min(16, 4096 // block_c)) if block_c >= 16 else 1024 // block_c
    args = {"rows_ptr": Ptr(op.rows), "values_ptr": Ptr(op.values), "out_ptr": Ptr(op.out),
            "n_rows": int_arg(n_rows), "n_table": int_arg(n_table), "n_cols": int_arg(cols),
            "rows_stride": int_arg(op.rows.strides[0]),
            "values_stride_r": int_arg(op.values.strides[0]),
            "values_stride_c": int_arg(op.values.strides[1]),
            "out_stride_r": int_arg(op.out.strides[0]),
            "out_stride_c": int_arg(op.out.strides[1]),
            "REDUCE": Const(op.reduce), "ROWS": Const(rows_per), "BLOCK_C": Const(block_c)}
    name = "scatter_rows" if op.reduce == "none" else f"scatter_rows_{op.reduce}"
    return KernelPlan(scatter_rows_kernel, args,
                      (cdiv(n_rows, rows_per), cdiv(cols, block_c), 1), 4, 1, (name,), {})


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
            "INDICES": Const(op.indices), "LARGEST": Const(op.largest), "ROWS": Const(n_rows),
            "BLOCK_C": Const(block_c)}
    return KernelPlan(topk_kernel, args, (cdiv(rows, n_rows), 1, 1), 4, 1, ("topk",),
                      {"ROWS": n_rows})


_MAX_SORT_BLOCKS = 65535  # the grid's second axis: blocks of one row


def _plan_sort(op: SortOp, config: dict) -> KernelPlan:
    rows, n = rw.check_2d("sort x", op.x)
    if tuple(op.out.shape) != (rows, n):
        raise ValueError(f"sort: out {op.out.shape} is not x's {op.x.shape}")
    if op.x.dtype.is_float and op.x.dtype.nbytes > 4:
        raise ValueError(f"sort of {op.x.dtype.value} (compared in f32 or int64)")
    block_i, block_j = config.get("BLOCK_I", _sort_block_i(rows, n)), config.get("BLOCK_J", 128)
    if upper_bound(n) > _MAX_SORT_BLOCKS * block_i:
        raise ValueError(f"sort: rows of up to {upper_bound(n)} elements (at most "
                         f"{_MAX_SORT_BLOCKS * block_i})")
    args = {"x_ptr": Ptr(op.x), "out_ptr": Ptr(op.out), "n": int_arg(n),
            "x_stride_r": int_arg(op.x.strides[0]), "x_stride_c": int_arg(op.x.strides[1]),
            "out_stride_r": int_arg(op.out.strides[0]),
            "out_stride_c": int_arg(op.out.strides[1]), "INDICES": Const(op.indices),
            "DESCENDING": Const(op.descending), "FLOAT": Const(op.x.dtype.is_float),
            "BLOCK_I": Const(block_i), "BLOCK_J": Const(block_j)}
    return KernelPlan(sort_kernel, args, (rows, cdiv(n, block_i), 1),
                      config.get("num_warps", 4), 1, ("sort",),
                      {"BLOCK_I": block_i, "BLOCK_J": block_j})


def _sort_block_i(rows, n) -> int:
    """Elements ranked per program. Each program reads its whole row, so fewer per program
    means more reads in all (n^2 / BLOCK_I), but a MoE prefill's one row of 2 x 2,048 ids in
    blocks of 64 is 64 programs for 132 SMs: small rows take 16 (4x the programs)."""
    return 16 if upper_bound(rows * n) <= 16384 else 64


def _plan_histc(op: HistcOp, config: dict) -> KernelPlan:
    (n,) = _check_1d("histc", op.x, None)
    bins = op.out.shape[0]
    if len(op.out.shape) != 1 or not isinstance(bins, int):
        raise ValueError(f"histc: out {op.out.shape} is not [bins]")
    block_b = min(64, rw.next_pow2(bins))
    # 8192 (bin, element) tests per step: each step waits for its loads, so the few bins of
    # an MoE router take long steps (8 experts: 4 steps over 2 x 2,048 ids, not 32 of 128)
    block_n = max(128, min(2048, 8192 // block_b))
    args = {"x_ptr": Ptr(op.x), "out_ptr": Ptr(op.out), "n": int_arg(n),
            "x_stride": int_arg(op.x.strides[0]), "bins": Const(bins),
            "lo": Const(float(op.lo)), "hi": Const(float(op.hi)),
            "BLOCK_B": Const(block_b), "BLOCK_N": Const(block_n)}
    return KernelPlan(histc_kernel, args, (cdiv(bins, block_b), 1, 1), 4, 1, ("histc",),
                      {"BLOCK_B": block_b, "BLOCK_N": block_n})


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
