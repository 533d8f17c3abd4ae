"""Grouped GEMM over the experts of a mixture-of-experts layer (GroupedMmOp, torch._grouped_mm):
rows offs[g-1]..offs[g] of a[T, K] (tokens sorted by expert) times b[g] ([K, N], a strided view
of the expert weights), f32 accumulation on tensor cores.

Group sizes are known on the device only, so the grid is the most tiles any split can need,
cdiv(T, BLOCK_M) + E along the rows (each group adds at most one partial tile), times the
column tiles. Each program walks the E offsets to find which group's tile it is (E is small:
a few scalar loads), and programs past the last group's tiles write the zero rows past
offs[E-1] or exit. An empty group has no tile.
"""
from __future__ import annotations

import triton
import triton.language as tl

from aotpack.ir.sym import upper_bound
from aotpack.kernels.spec import GroupedMmOp
from aotpack.kernels.triton._common import KernelPlan, entry_points, int_arg
from aotpack.kernels.triton.compile import Const, Ptr, cdiv


@triton.jit
def grouped_mm_kernel(a_ptr, b_ptr, offs_ptr, out_ptr, T, N, K, E,
                      a_stride_m, a_stride_k, b_stride_e, b_stride_k, b_stride_n,
                      out_stride_m, out_stride_n, BLOCK_M: tl.constexpr,
                      BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, IEEE: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    group = -1
    row0 = 0
    row_end = 0
    tiles_before = 0
    start = 0
    for g in range(0, E):
        end = tl.load(offs_ptr + g).to(tl.int32)
        end = tl.minimum(tl.maximum(end, start), T)
        tiles = tl.cdiv(end - start, BLOCK_M)
        hit = (pid_m >= tiles_before) & (pid_m < tiles_before + tiles)
        group = tl.where(hit, g, group)
        row0 = tl.where(hit, start + (pid_m - tiles_before) * BLOCK_M, row0)
        row_end = tl.where(hit, end, row_end)
        tiles_before += tiles
        start = end
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    if group < 0:  # past the groups: zero the rows no group covers (start = offs[E-1])
        rows = start + (pid_m - tiles_before) * BLOCK_M + tl.arange(0, BLOCK_M)
        zero = tl.zeros([BLOCK_M, BLOCK_N], dtype=out_ptr.dtype.element_ty)
        tl.store(out_ptr + rows[:, None].to(tl.int64) * out_stride_m
                 + cols[None, :] * out_stride_n, zero,
                 mask=(rows[:, None] < T) & (rows[:, None] >= start) & (cols[None, :] < N))
    else:
        rows = row0 + tl.arange(0, BLOCK_M)
        row_ok = rows < row_end
        ks = tl.arange(0, BLOCK_K)
        a_base = a_ptr + rows[:, None].to(tl.int64) * a_stride_m
        b_base = b_ptr + group.to(tl.int64) * b_stride_e + cols[None, :] * b_stride_n
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            k = k0 + ks
            a = tl.load(a_base + k[None, :] * a_stride_k,
                        mask=row_ok[:, None] & (k[None, :] < K), other=0.0)
            b = tl.load(b_base + k[:, None].to(tl.int64) * b_stride_k,
                        mask=(k[:, None] < K) & (cols[None, :] < N), other=0.0)
            if IEEE:
                acc = tl.dot(a, b, acc, input_precision="ieee")
            else:
                acc = tl.dot(a, b, acc)
        tl.store(out_ptr + rows[:, None].to(tl.int64) * out_stride_m
                 + cols[None, :] * out_stride_n, acc.to(out_ptr.dtype.element_ty),
                 mask=row_ok[:, None] & (cols[None, :] < N))


def default_config(op: GroupedMmOp) -> dict:
    """Rows per expert decide the tile: decode (a few rows per expert) takes 16-row tiles and
    wide columns (bandwidth: each expert's weights are read once per column tile); prefill
    128 x 128 tiles."""
    t = upper_bound(op.a.shape[0])
    e = op.b.shape[0]
    per_group = max(1, t // e)
    if per_group <= 16:
        return {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 128, "num_warps": 4, "num_stages": 4}
    if per_group <= 64:
        return {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 4, "num_stages": 4}
    # 128 x 256: Mixtral-8x7B's experts at 4,096 rows (H200, 2026-12-03,
    # benchmarks/bench_grouped_mm.py): 580 against 507 TFLOP/s for 128 x 128 (gate/up, N =
    # 28672), 518 against 476 (down, K = 14336); torch._grouped_mm reached 751 and 717
    if upper_bound(op.b.shape[2]) >= 256:
        return {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3}
    return {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3}


def plan(op: GroupedMmOp, config: dict | None = None) -> KernelPlan:
    t, k = op.a.shape
    e, kb, n = op.b.shape
    if kb != k or tuple(op.out.shape) != (t, n) or tuple(op.offs.shape) != (e,):
        raise ValueError(f"grouped_mm: a{op.a.shape} b{op.b.shape} offs{op.offs.shape} "
                         f"out{op.out.shape}")
    if op.offs.dtype.value not in ("i32", "i64") or op.offs.strides != (1,):
        raise ValueError(f"grouped_mm: offsets {op.offs.dtype.value} stride "
                         f"{op.offs.strides} (contiguous int32/int64)")
    cfg = dict(default_config(op), **(config or {}))
    args = {"a_ptr": Ptr(op.a), "b_ptr": Ptr(op.b), "offs_ptr": Ptr(op.offs),
            "out_ptr": Ptr(op.out), "T": int_arg(t), "N": int_arg(n), "K": int_arg(k),
            "E": int_arg(e)}
    for name, arg, dims in (("a", op.a, "mk"), ("b", op.b, "ekn"), ("out", op.out, "mn")):
        args.update({f"{name}_stride_{d}": int_arg(s) for d, s in zip(dims, arg.strides)})
    args.update({"BLOCK_M": Const(cfg["BLOCK_M"]), "BLOCK_N": Const(cfg["BLOCK_N"]),
                 "BLOCK_K": Const(cfg["BLOCK_K"]), "IEEE": Const(op.a.dtype.nbytes == 4)})
    grid = (cdiv(t, cfg["BLOCK_M"]) + e, cdiv(n, cfg["BLOCK_N"]), 1)
    return KernelPlan(grouped_mm_kernel, args, grid, cfg["num_warps"], cfg["num_stages"],
                      ("grouped_mm",), {k: cfg[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K")})


# compile / run_plan_interpreted_here / run_jit, from plan() (see _common)
compile, run_plan_interpreted_here, run_jit = entry_points(plan)
