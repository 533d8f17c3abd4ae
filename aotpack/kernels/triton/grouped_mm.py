"""Grouped GEMM over the experts of a mixture-of-experts layer (GroupedMmOp, torch._grouped_mm):
rows offs[g-1]..offs[g] of a[T, K] (tokens sorted by expert) times b[g] ([K, N], a strided view
of the expert weights), f32 accumulation on tensor cores.

Group sizes are known on the device only, so the grid is the most tiles any split can need,
cdiv(T, BLOCK_M) + E along the rows (each group adds at most one partial tile), times the
column tiles. Each program walks the E offsets to find which group's tile it is (E is small:
a few scalar loads), and programs past the last group's tiles write the zero rows past
offs[E-1] or exit. An empty group has no tile.

Two kernels share that walk: pointer loads (any strides, f32, decode's 16-row tiles), and TMA
(prefill: a and the experts' weights as 2-D tensor maps, b's [N, K] rows of each expert stacked
as [E*N, K]; tiles in grouped order, optionally persistent). A TMA tile may read rows of the
next group or past N (the maps clip only at the whole tensor's edge): those rows and columns
are computed and never stored.
"""
from __future__ import annotations

import triton
import triton.language as tl

from aotpack.ir.sym import sym_max, sym_min, upper_bound
from aotpack.kernels.spec import GroupedMmOp, TensorArg
from aotpack.kernels.triton._common import KernelPlan, entry_points, int_arg
from aotpack.kernels.triton.compile import Const, Desc, Ptr, cdiv
from aotpack.kernels.triton.gemm import _tile_coords, tma_problem as view_tma_problem
from aotpack.kernels.triton.gemm_epilogue import _swiglu_pairs


@triton.jit
def _tile_group(offs_ptr, pid_m, T, E, BLOCK_M: tl.constexpr):
    """Which group row tile `pid_m` is in (-1: past them all), its first row and its group's
    end; the tiles before the group past the last, and where that one starts (offs[E-1])."""
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
    return group, row0, row_end, tiles_before, start


@triton.jit
def _finish(acc, out_ptr, rows, row_end, pid_n, N_OUT, out_stride_m, out_stride_n,
            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SWIGLU_G: tl.constexpr,
            BN_OUT: tl.constexpr):
    # SWIGLU_G > 0: the accumulator's columns interleave gate and up blocks of SWIGLU_G;
    # a tile of BLOCK_N of them stores BN_OUT = BLOCK_N / 2 outputs
    if SWIGLU_G > 0:
        acc = _swiglu_pairs(acc, BLOCK_M, BLOCK_N, SWIGLU_G)
    cols = pid_n * BN_OUT + tl.arange(0, BN_OUT)
    tl.store(out_ptr + rows[:, None].to(tl.int64) * out_stride_m
             + cols[None, :] * out_stride_n, acc.to(out_ptr.dtype.element_ty),
             mask=(rows[:, None] < row_end) & (cols[None, :] < N_OUT))


@triton.jit
def _zero_rows_past_groups(out_ptr, pid_m, tiles_before, start, T, N, cols, out_stride_m,
                           out_stride_n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = start + (pid_m - tiles_before) * BLOCK_M + tl.arange(0, BLOCK_M)
    zero = tl.zeros([BLOCK_M, BLOCK_N], dtype=out_ptr.dtype.element_ty)
    tl.store(out_ptr + rows[:, None].to(tl.int64) * out_stride_m
             + cols[None, :] * out_stride_n, zero,
             mask=(rows[:, None] < T) & (rows[:, None] >= start) & (cols[None, :] < N))


@triton.jit
def grouped_mm_kernel(a_ptr, b_ptr, offs_ptr, out_ptr, T, N, N_OUT, K, E,
                      a_stride_m, a_stride_k, b_stride_e, b_stride_k, b_stride_n,
                      out_stride_m, out_stride_n, BLOCK_M: tl.constexpr,
                      BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, IEEE: tl.constexpr,
                      SWIGLU_G: tl.constexpr, BN_OUT: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    group, row0, row_end, tiles_before, start = _tile_group(offs_ptr, pid_m, T, E, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    if group < 0:  # past the groups: zero the rows no group covers (start = offs[E-1])
        _zero_rows_past_groups(out_ptr, pid_m, tiles_before, start, T, N_OUT,
                               pid_n * BN_OUT + tl.arange(0, BN_OUT), out_stride_m,
                               out_stride_n, BLOCK_M, BN_OUT)
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
        _finish(acc, out_ptr, rows, row_end, pid_n, N_OUT, out_stride_m, out_stride_n,
                BLOCK_M, BLOCK_N, SWIGLU_G, BN_OUT)


@triton.jit
def grouped_mm_tma_kernel(a_desc, b_desc, offs_ptr, out_ptr, T, N, N_OUT, K, E, out_stride_m,
                          out_stride_n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                          BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                          SWIGLU_G: tl.constexpr, BN_OUT: tl.constexpr):
    # b_desc: the experts' weights as [E*N, K] rows (K contiguous); a program walks tiles
    # (tile, tile + programs, ...) in grouped order over the row-tile bound cdiv(T, BM) + E
    tiles_m = tl.cdiv(T, BLOCK_M) + E
    tiles_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    for tile in tl.range(tl.program_id(0), tiles_m * tiles_n, tl.num_programs(0)):
        pid_m, pid_n = _tile_coords(tile, tiles_m, tiles_n, GROUP_M)
        group, row0, row_end, tiles_before, start = _tile_group(offs_ptr, pid_m, T, E, BLOCK_M)
        if group < 0:
            _zero_rows_past_groups(out_ptr, pid_m, tiles_before, start, T, N_OUT,
                                   pid_n * BN_OUT + tl.arange(0, BN_OUT), out_stride_m,
                                   out_stride_n, BLOCK_M, BN_OUT)
        else:
            b_row = group * N + pid_n * BLOCK_N
            acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
            for ki in range(k_tiles):
                a = a_desc.load([row0, ki * BLOCK_K])
                b = b_desc.load([b_row, ki * BLOCK_K])
                acc = tl.dot(a, b.T, acc)
            _finish(acc, out_ptr, row0 + tl.arange(0, BLOCK_M), row_end, pid_n, N_OUT,
                    out_stride_m, out_stride_n, BLOCK_M, BLOCK_N, SWIGLU_G, BN_OUT)


def default_config(op: GroupedMmOp) -> dict:
    """Rows per expert decide the tile: decode (a few rows per expert) takes 16-row tiles and
    wide columns (bandwidth: each expert's weights are read once per column tile); prefill
    128-row tiles, loaded by TMA where the operands allow."""
    return _defaults(op, tma_problem(op) is None)


def _defaults(op: GroupedMmOp, tma: bool) -> dict:
    t = upper_bound(op.a.shape[0])
    e = op.b.shape[0]
    per_group = max(1, t // e)
    if per_group <= 16:
        return {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 128, "num_warps": 4, "num_stages": 4}
    if per_group <= 64:
        return {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 4, "num_stages": 4}
    # Mixtral-8x7B's experts at 4,096 rows (H200, 2026-12-03, benchmarks/bench_grouped_mm.py,
    # TFLOP/s gate/up N = 28672 | down K = 14336): pointer loads 128 x 128 507 | 476, 128 x 256
    # 580 | 518; TMA 128 x 256, 3 stages 627 | 599, 4 stages 698 | 601 (persistent over 132
    # programs 670 | 588: no gain); torch._grouped_mm 724 | 716 in the same call
    wide = upper_bound(op.b.shape[2]) >= 256
    cfg = {"BLOCK_M": 128, "BLOCK_N": 256 if wide else 128, "BLOCK_K": 64, "num_warps": 8,
           "num_stages": 3}
    if tma:
        cfg.update(TMA=True, GROUP_M=8, PROGRAMS=0, num_stages=4)
    return cfg


def tma_problem(op: GroupedMmOp, block_k: int = 64) -> str | None:
    """Why the TMA kernel cannot run `op` (None: it can): 16-bit operands, a's rows and each
    expert's [N, K] weight rows contiguous in K and 16-byte aligned (nn.Linear's layout, as
    transformers' experts pass it)."""
    k = op.a.shape[1]
    n = op.b.shape[2]
    if op.a.dtype.value not in ("bf16", "f16") or op.b.dtype != op.a.dtype:
        return f"operands {op.a.dtype.value}/{op.b.dtype.value} (TMA kernel: bf16/f16)"
    if op.a.strides[1] != 1 or op.b.strides != (n * k, 1, k):
        return (f"strides a{op.a.strides} b{op.b.strides} (TMA kernel: a's rows and each "
                f"expert's [N, K] rows contiguous)")
    why = view_tma_problem(op.a) or view_tma_problem(_b_rows(op))
    if why:
        return f"rows or bases not 16-byte aligned: {why}"
    if block_k * op.a.dtype.nbytes > 128:
        return f"BLOCK_K={block_k}: TMA rows of at most 128 bytes"
    return None


def _b_rows(op: GroupedMmOp) -> TensorArg:
    """The experts' weights, b's [N, K] rows of every expert stacked: [E*N, K]."""
    e, k, n = op.b.shape
    return TensorArg(op.b.storage, op.b.dtype, (e * n, k), (k, 1), op.b.offset)


def _check(op: GroupedMmOp) -> None:
    t, k = op.a.shape
    e, kb, n = op.b.shape
    if op.swiglu_group:
        n //= 2
    if kb != k or tuple(op.out.shape) != (t, n) or tuple(op.offs.shape) != (e,):
        raise ValueError(f"grouped_mm: a{op.a.shape} b{op.b.shape} offs{op.offs.shape} "
                         f"out{op.out.shape}")
    if op.offs.dtype.value not in ("i32", "i64") or op.offs.strides != (1,):
        raise ValueError(f"grouped_mm: offsets {op.offs.dtype.value} stride "
                         f"{op.offs.strides} (contiguous int32/int64)")


def plan(op: GroupedMmOp, config: dict | None = None) -> KernelPlan:
    _check(op)
    t, k = op.a.shape
    e, _, n = op.b.shape
    # a given config without "TMA" is the pointer kernel's (records made before TMA), its
    # missing keys the pointer kernel's defaults
    cfg = dict(_defaults(op, bool(config.get("TMA"))), **config) if config \
        else default_config(op)
    if cfg.get("TMA"):
        return _tma_plan(op, cfg)
    args = {"a_ptr": Ptr(op.a), "b_ptr": Ptr(op.b), "offs_ptr": Ptr(op.offs),
            "out_ptr": Ptr(op.out), "T": int_arg(t), "N": int_arg(n),
            "N_OUT": int_arg(op.out.shape[1]), "K": int_arg(k), "E": int_arg(e)}
    for name, arg, dims in (("a", op.a, "mk"), ("b", op.b, "ekn"), ("out", op.out, "mn")):
        args.update({f"{name}_stride_{d}": int_arg(s) for d, s in zip(dims, arg.strides)})
    args.update({"BLOCK_M": Const(cfg["BLOCK_M"]), "BLOCK_N": Const(cfg["BLOCK_N"]),
                 "BLOCK_K": Const(cfg["BLOCK_K"]), "IEEE": Const(op.a.dtype.nbytes == 4),
                 **_swiglu_args(op, cfg)})
    grid = (cdiv(t, cfg["BLOCK_M"]) + e, cdiv(n, cfg["BLOCK_N"]), 1)
    return KernelPlan(grouped_mm_kernel, args, grid, cfg["num_warps"], cfg["num_stages"],
                      _fused(op), {k: cfg[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K")})


def _tma_plan(op: GroupedMmOp, cfg: dict) -> KernelPlan:
    why = tma_problem(op, cfg["BLOCK_K"])
    if why:
        raise ValueError(f"grouped_mm: TMA config {cfg} cannot run this op: {why}")
    t, k = op.a.shape
    e, _, n = op.b.shape
    bm, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    args = {"a_desc": Desc(op.a, (bm, bk)), "b_desc": Desc(_b_rows(op), (bn, bk)),
            "offs_ptr": Ptr(op.offs), "out_ptr": Ptr(op.out), "T": int_arg(t),
            "N": int_arg(n), "N_OUT": int_arg(op.out.shape[1]), "K": int_arg(k),
            "E": int_arg(e),
            "out_stride_m": int_arg(op.out.strides[0]),
            "out_stride_n": int_arg(op.out.strides[1]),
            "BLOCK_M": Const(bm), "BLOCK_N": Const(bn), "BLOCK_K": Const(bk),
            "GROUP_M": Const(cfg.get("GROUP_M", 8)), **_swiglu_args(op, cfg)}
    tiles = (cdiv(t, bm) + e) * cdiv(n, bn)
    programs = cfg.get("PROGRAMS", 0)  # 0: one per tile; else a persistent grid of so many
    grid = (sym_max(1, sym_min(tiles, programs)) if programs else tiles, 1, 1)
    return KernelPlan(grouped_mm_tma_kernel, args, grid, cfg["num_warps"], cfg["num_stages"],
                      _fused(op), {key: cfg[key] for key in cfg
                                        if key not in ("num_warps", "num_stages")})


def _fused(op: GroupedMmOp) -> tuple[str, ...]:
    return ("grouped_mm", "swiglu") if op.swiglu_group else ("grouped_mm",)


def _swiglu_args(op: GroupedMmOp, cfg: dict) -> dict:
    g, bn = op.swiglu_group, cfg["BLOCK_N"]
    if g and bn % (2 * g):
        raise ValueError(f"grouped_mm: SwiGLU group {g} needs BLOCK_N a multiple of {2 * g} "
                         f"(whole gate/up pairs per tile); got {bn}")
    return {"SWIGLU_G": Const(g), "BN_OUT": Const(bn // 2 if g else bn)}


# compile / run_plan_interpreted_here / run_jit, from plan() (see _common)
compile, run_plan_interpreted_here, run_jit = entry_points(plan)
