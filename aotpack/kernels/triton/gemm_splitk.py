"""Swap-AB split-K GEMM for decode-sized M: out[M, N] = epilogue(a[M, K] @ b[N_acc, K]^T).

With M <= ~128 the GEMM is a stream over the weight b (read once, 2 * N_acc * K bytes), so what
counts is keeping enough weight bytes in flight on every SM. Each CTA computes one tile of the
TRANSPOSED product, acc[BN, BM] = b[n0:n0+BN, k-run] @ a[m0:m0+BM, k-run]^T:
- the weight is wgmma's M side (64 rows per warpgroup), the few activation rows are its N side
  (BM = 16..128, rows past M zero-filled), so no MMA work is spent on padding 16 rows to 64;
- the K tiles are cut into SPLIT_K equal runs (grid z), so even a narrow N fills the GPU;
- loads are pipelined over num_stages (TMA descriptors, or masked pointer loads via cp.async).
SPLIT_K == 1 without SwiGLU finishes the tile in place (epilogue + store). Otherwise every CTA
writes its f32 partial tile to a workspace [SPLIT_K, M, N_acc] and the partials are summed in a
fixed order (deterministic), SwiGLU gate/up columns paired by indexing (no register shuffles),
the epilogue applied and the result stored with the output's strides:
- by a second launch, `splitk_reduce_kernel` (the default);
- or (FIXUP, a tuning candidate) in the same launch, by the CTA that arrives last at its unit
  of tiles (an int32 counter per unit, CounterSlot: zero before, reset to zero by that CTA).
  One launch instead of two, but measured slower on the H200 at decode (the last CTA's serial
  tail outlasts the saved launch: SplitKConfig.FIXUP).
The workspace is a ScratchSlot shared by the op's launches (the memory planner gives them one
arena region). Epilogue device code is gemm_epilogue's, so both GEMM paths agree.
"""
from __future__ import annotations

import triton
import triton.language as tl

from aotpack.dtypes import DType
from aotpack.kernels.spec import (
    SM90, GemmOp, Launch, PtrSlot, ScratchSlot, Target, TensorArg, swiglu_group,
)
from aotpack.kernels.triton._common import KernelPlan, compile_plan, int_arg
from aotpack.ir.sym import bounds, decided, subs_tree, upper_bound
from aotpack.kernels.triton.compile import Const, Counters, Desc, I32, Ptr, cdiv
from aotpack.kernels.triton.fp8 import dot_fp8, quantize_rows, row_scales, widen as _widen
from aotpack.kernels.triton.gemm_configs import SplitKConfig
from aotpack.kernels.triton.gemm_epilogue import (
    MAX_STEPS, _activation, _finish_subtile, _swiglu_pairs, check_epilogue, epilogue_steps,
    fused_ops,
)
from aotpack.kernels.triton.pdl import (
    L2_LINE_BYTES, prefetch_l2, release_dependents, wait_for_producers,
)

WORKSPACE = "__splitk.partials"  # storage name of the partial sums in plans and torch envs
SHARED_SCRATCH_KEY = "splitk.partials"  # ScratchSlot.shared of both launches of one op
_BLOCKS_M = (16, 32, 64, 128, 256)
_BLOCKS_N = (64, 128, 256)
_BLOCKS_K = (16, 32, 64, 128)
_REDUCE_ELEMS = 512  # outputs per reduce program: 4 per thread of 4 warps (16-byte vectors)
_REDUCE_WARPS = 4
_FIXUP_ELEMS = 4096  # outputs the last CTA finishes per pass (rows are cut to stay under it)
_I32_LIMIT = 2**31
_FP8_TAG = ("fp8_weight",)  # fused_ops' name of the dequantization (the partials apply it)


# ----------------------------------------------------------------------------- device code
@triton.jit
def splitk_kernel(w_desc, a_desc, w_ptr, a_ptr, stride_wn, stride_am, M, N_acc, K,
                  ws_ptr, out_ptr, stride_om, stride_on,
                  e0, e0_m, e0_n, e1, e1_m, e1_n, e2, e2_m, e2_n, e3, e3_m, e3_n,
                  e4, e4_m, e4_n,
                  S0: tl.constexpr, S1: tl.constexpr, S2: tl.constexpr, S3: tl.constexpr,
                  S4: tl.constexpr,
                  cnt_ptr, N, bs_ptr, as_ptr,
                  BN: tl.constexpr, BM: tl.constexpr, BK: tl.constexpr, SPLIT_K: tl.constexpr,
                  USE_TMA: tl.constexpr, DIRECT: tl.constexpr, WIDE_INDEX: tl.constexpr,
                  FIXUP: tl.constexpr, UNIT: tl.constexpr, SWIGLU_G: tl.constexpr,
                  FIX_M: tl.constexpr, FIX_COLS: tl.constexpr, B_SCALE: tl.constexpr,
                  A_FP8: tl.constexpr, A_SCALED: tl.constexpr, PDL: tl.constexpr,
                  PF_LINES: tl.constexpr, PF_STEP: tl.constexpr, PF_COLS: tl.constexpr):
    off_m = tl.program_id(0) * BM
    off_n = tl.program_id(1) * BN
    pid_k = tl.program_id(2)
    offs_m = off_m + tl.arange(0, BM)
    offs_n = off_n + tl.arange(0, BN)
    k_tiles = tl.cdiv(K, BK)
    per_split = tl.cdiv(k_tiles, SPLIT_K)
    k_lo = pid_k * per_split
    k_hi = tl.minimum(k_lo + per_split, k_tiles)  # a trailing split may be empty: zeros
    if PDL:  # a programmatic dependent: the run's first weight tiles into L2, then wait
        if PF_LINES > 0:
            _prefetch_run(w_ptr, stride_wn, offs_n, N_acc, K, k_lo * BK,
                          tl.minimum(k_hi * BK, k_lo * BK + PF_COLS), PF_LINES, PF_STEP)
        wait_for_producers()
    w_rows = w_ptr
    a_rows = a_ptr
    if not USE_TMA:  # row bases once, in 64 bits (the weight may pass 2^31 elements)
        w_rows = w_ptr + offs_n.to(tl.int64)[:, None] * stride_wn
        a_rows = a_ptr + offs_m.to(tl.int64)[:, None] * stride_am
    if A_FP8:  # --precision fp8: the activations' scale per row over this CTA's K run
        amax = tl.zeros((BM,), dtype=tl.float32)
        for kt in tl.range(k_lo, k_hi):
            a = _tile(a_desc, a_rows, off_m, offs_m, kt, M, K, BK, USE_TMA)
            amax = tl.maximum(amax, tl.max(tl.abs(a.to(tl.float32)), axis=1))
        a_scale = row_scales(amax)
        a_inv = 1.0 / a_scale
    acc = tl.zeros((BN, BM), dtype=tl.float32)
    for kt in tl.range(k_lo, k_hi):
        w = _tile(w_desc, w_rows, off_n, offs_n, kt, N_acc, K, BK, USE_TMA)
        a = _tile(a_desc, a_rows, off_m, offs_m, kt, M, K, BK, USE_TMA)
        if A_FP8:  # e4m3 x e4m3 on the tensor cores: the weight as loaded
            acc = dot_fp8(w, quantize_rows(a, a_inv).T, acc)
        elif A_SCALED:  # both arrive in e4m3 (the op before quantized the activations)
            acc = dot_fp8(w, a.T, acc)
        else:  # FP8 weights widen in registers (the weight is wgmma's register operand here)
            acc = tl.dot(_widen(w, a), a.T, acc)
    if A_FP8:
        acc = acc * a_scale[None, :]
    if A_SCALED:
        acc = acc * tl.load(as_ptr + offs_m, mask=offs_m < M, other=0.0)[None, :]
    if B_SCALE:  # dequantize each weight row (linear: partial sums may be scaled one by one)
        acc = acc * tl.load(bs_ptr + offs_n, mask=offs_n < N_acc, other=0.0)[:, None]
    if DIRECT:  # the whole K in this CTA: finish [BM, BN] of the output here
        if SWIGLU_G > 0:  # whole gate/up blocks in the tile: [BM, BN / 2] outputs (gate and
            # up rows sit in other warps of the swapped accumulator: paired through smem)
            _finish_subtile(_swiglu_pairs(tl.trans(acc), BM, BN, SWIGLU_G), off_m, off_n // 2,
                            M, N, None, out_ptr, stride_om, stride_on, S0, e0, e0_m, e0_n,
                            S1, e1, e1_m, e1_n, S2, e2, e2_m, e2_n, S3, e3, e3_m, e3_n,
                            S4, e4, e4_m, e4_n, BM, BN // 2, WIDE_INDEX, False)
        else:
            _finish_subtile(tl.trans(acc), off_m, off_n, M, N_acc, None, out_ptr, stride_om,
                            stride_on, S0, e0, e0_m, e0_n, S1, e1, e1_m, e1_n, S2, e2, e2_m,
                            e2_n, S3, e3, e3_m, e3_n, S4, e4, e4_m, e4_n, BM, BN, WIDE_INDEX,
                            False)
    else:  # partial sums: workspace[pid_k, m, n], n contiguous (what the reduce reads)
        ptrs = ws_ptr + pid_k * M * N_acc + offs_m[None, :] * N_acc + offs_n[:, None]
        tl.store(ptrs, acc, mask=(offs_m[None, :] < M) & (offs_n[:, None] < N_acc))
        if FIXUP:  # the last of the unit's SPLIT_K * UNIT / BN CTAs finishes it
            tl.debug_barrier()  # every thread's partials are written before the release
            unit = off_n // UNIT
            cnt = cnt_ptr + tl.program_id(0) * tl.cdiv(N_acc, UNIT) + unit
            count = tl.atomic_add(cnt, 1, sem="acq_rel", scope="gpu")
            if count == SPLIT_K * (UNIT // BN) - 1:
                for mm in tl.static_range(0, BM, FIX_M):  # FIX_COLS outputs per unit
                    _reduce_tile(ws_ptr, off_m + mm, unit * FIX_COLS, M, N, N_acc, out_ptr,
                                 stride_om, stride_on, e0, e0_m, e0_n, e1, e1_m, e1_n,
                                 e2, e2_m, e2_n, e3, e3_m, e3_n, e4, e4_m, e4_n,
                                 S0, S1, S2, S3, S4, SPLIT_K, SWIGLU_G, FIX_M, FIX_COLS,
                                 WIDE_INDEX, ".cg")
                tl.atomic_xchg(cnt, 0)  # ready for the next launch


@triton.jit
def _prefetch_run(w_ptr, stride_wn, offs_n, N_acc, K, col_lo, col_hi, PF_LINES: tl.constexpr,
                  PF_STEP: tl.constexpr):
    """Weight rows offs_n, columns [col_lo, col_hi) into L2, one request per PF_STEP columns
    (a 128-byte line); rows and columns past the weight are clamped to its last ones."""
    rows = tl.minimum(offs_n, N_acc - 1).to(tl.int64)
    cols = tl.minimum(col_lo + tl.arange(0, PF_LINES) * PF_STEP, tl.minimum(col_hi, K) - 1)
    prefetch_l2(w_ptr + rows[:, None] * stride_wn + tl.maximum(cols, 0)[None, :])


@triton.jit
def _tile(desc, rows, off, offs, kt, R, K, BK: tl.constexpr, USE_TMA: tl.constexpr):
    """Rows off.. of a [R, K] operand, K tile kt: TMA zero-fills rows past R and columns past
    K; pointer loads mask them (`rows`: the rows' base pointers)."""
    if USE_TMA:
        tile = desc.load([off, kt * BK])
    else:
        offs_k = kt * BK + tl.arange(0, BK)
        tile = tl.load(rows + offs_k[None, :], mask=(offs[:, None] < R) & (offs_k[None, :] < K),
                       other=0.0)
    return tile


@triton.jit
def _sum_partials(ws_ptr, offs_m, cols, mask, M, N_acc, SPLIT_K: tl.constexpr,
                  CACHE: tl.constexpr):
    # fixed summation order (split 0, 1, ...): the same bits on every run, whichever CTA sums
    ptrs = ws_ptr + offs_m[:, None] * N_acc + cols[None, :]
    acc = tl.load(ptrs, mask=mask, other=0.0, cache_modifier=CACHE)
    for s in tl.static_range(1, SPLIT_K):
        acc += tl.load(ptrs + s * M * N_acc, mask=mask, other=0.0, cache_modifier=CACHE)
    return acc


@triton.jit
def _reduce_tile(ws_ptr, off_m, off_n, M, N, N_acc, out_ptr, stride_om, stride_on,
                 e0, e0_m, e0_n, e1, e1_m, e1_n, e2, e2_m, e2_n, e3, e3_m, e3_n, e4, e4_m, e4_n,
                 S0: tl.constexpr, S1: tl.constexpr, S2: tl.constexpr, S3: tl.constexpr,
                 S4: tl.constexpr, SPLIT_K: tl.constexpr, SWIGLU_G: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, WIDE_INDEX: tl.constexpr,
                 CACHE: tl.constexpr):
    """Outputs [off_m, +BLOCK_M) x [off_n, +BLOCK_N): the partials summed, epilogue, store.
    CACHE ".cg" reads past L1 (partials other SMs just wrote)."""
    offs_m = off_m + tl.arange(0, BLOCK_M)
    offs_n = off_n + tl.arange(0, BLOCK_N)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    if SWIGLU_G > 0:  # output column j: gate at 2G*(j//G) + j%G, up G columns further
        gate_cols = 2 * SWIGLU_G * (offs_n // SWIGLU_G) + offs_n % SWIGLU_G
        gate = _sum_partials(ws_ptr, offs_m, gate_cols, mask, M, N_acc, SPLIT_K, CACHE)
        up = _sum_partials(ws_ptr, offs_m, gate_cols + SWIGLU_G, mask, M, N_acc, SPLIT_K, CACHE)
        acc = _activation(gate, "silu") * up
    else:
        acc = _sum_partials(ws_ptr, offs_m, offs_n, mask, M, N_acc, SPLIT_K, CACHE)
    _finish_subtile(acc, off_m, off_n, M, N, None, out_ptr, stride_om, stride_on,
                    S0, e0, e0_m, e0_n, S1, e1, e1_m, e1_n, S2, e2, e2_m, e2_n,
                    S3, e3, e3_m, e3_n, S4, e4, e4_m, e4_n, BLOCK_M, BLOCK_N, WIDE_INDEX, False)


@triton.jit
def splitk_reduce_kernel(ws_ptr, out_ptr, stride_om, stride_on, M, N, N_acc,
                         e0, e0_m, e0_n, e1, e1_m, e1_n, e2, e2_m, e2_n, e3, e3_m, e3_n,
                         e4, e4_m, e4_n,
                         S0: tl.constexpr, S1: tl.constexpr, S2: tl.constexpr,
                         S3: tl.constexpr, S4: tl.constexpr,
                         SPLIT_K: tl.constexpr, SWIGLU_G: tl.constexpr, BLOCK_M: tl.constexpr,
                         BLOCK_N: tl.constexpr, WIDE_INDEX: tl.constexpr):
    release_dependents()  # the next GEMM may start streaming its weights (pdl.py)
    _reduce_tile(ws_ptr, tl.program_id(1) * BLOCK_M, tl.program_id(0) * BLOCK_N, M, N, N_acc,
                 out_ptr, stride_om, stride_on, e0, e0_m, e0_n, e1, e1_m, e1_n, e2, e2_m, e2_n,
                 e3, e3_m, e3_n, e4, e4_m, e4_n, S0, S1, S2, S3, S4, SPLIT_K, SWIGLU_G,
                 BLOCK_M, BLOCK_N, WIDE_INDEX, "")


# ----------------------------------------------------------------------------- checks
def _tma_problem(arg: TensorArg) -> str | None:
    from aotpack.kernels.triton.gemm import tma_problem

    return tma_problem(arg)


def check(op: GemmOp, cfg: SplitKConfig) -> None:
    """Raise ValueError naming why `cfg` cannot compile `op`."""
    a, b, out = op.a, op.b, op.out
    if len(a.shape) != 2 or len(b.shape) != 2 or len(out.shape) != 2:
        raise ValueError("gemm split-K: a, b and out must be 2-D views")
    (M, K), (n_acc, kb) = a.shape, b.shape
    N = n_acc // 2 if swiglu_group(op) else n_acc
    if kb != K or tuple(out.shape) != (M, N) or decided(lambda: min(M, N, K) <= 0, False):
        raise ValueError(f"gemm split-K: shapes do not match: a {a.shape}, b {b.shape}, "
                         f"out {out.shape}")
    from aotpack.kernels.triton.gemm import dtype_problem

    why = dtype_problem(op)
    if why:
        raise ValueError(f"gemm split-K: {why}")
    check_epilogue(op)
    for name, arg in (("a", a), ("b", b)):
        problem = _tma_problem(arg) if cfg.TMA else (
            None if arg.strides[-1] == 1 else f"inner stride {arg.strides[-1]} is not 1")
        if problem:
            raise ValueError(f"gemm split-K: operand {name} cannot be loaded"
                             f"{' by TMA' if cfg.TMA else ''}: {problem}")
    _check_tiles(op, cfg, M, n_acc, K)


def _check_tiles(op: GemmOp, cfg: SplitKConfig, M: int, n_acc: int, K: int) -> None:
    if cfg.BM not in _BLOCKS_M or cfg.BN not in _BLOCKS_N or cfg.BK not in _BLOCKS_K:
        raise ValueError(f"gemm split-K: tile BN={cfg.BN} BM={cfg.BM} BK={cfg.BK} not in "
                         f"BN {_BLOCKS_N}, BM {_BLOCKS_M}, BK {_BLOCKS_K}")
    if cfg.num_warps not in (4, 8) or cfg.num_stages < 1:
        raise ValueError(f"gemm split-K: num_warps={cfg.num_warps} (4 or 8), "
                         f"num_stages={cfg.num_stages} (>= 1)")
    if not 1 <= cfg.SPLIT_K <= cdiv(K, cfg.BK):
        raise ValueError(f"gemm split-K: SPLIT_K={cfg.SPLIT_K} must be 1..{cdiv(K, cfg.BK)} "
                         f"(the number of K tiles of {cfg.BK})")
    if cfg.PREFETCH < 0 or (cfg.PREFETCH and not cfg.PDL):
        raise ValueError(f"gemm split-K: PREFETCH={cfg.PREFETCH} must be >= 0, and > 0 only "
                         "with PDL (the prefetch runs while the kernel before does)")
    from aotpack.kernels.triton.gemm import fp8_bk_problem

    why = fp8_bk_problem(op, cfg.BK)
    if why:
        raise ValueError(f"gemm split-K: {why}")
    group = swiglu_group(op)
    if group and max(cfg.BN, 2 * group) % min(cfg.BN, 2 * group):
        raise ValueError(f"gemm split-K: tile BN={cfg.BN} and SwiGLU blocks of {2 * group} rows "
                         "do not nest")
    if cfg.FIXUP and n_acc % fixup_unit(op, cfg) and fixup_unit(op, cfg) > cfg.BN:
        raise ValueError(f"gemm split-K: fix-up units of {fixup_unit(op, cfg)} rows do not "
                         f"divide {n_acc} accumulator rows (a partial unit would never finish)")
    if upper_bound(cfg.SPLIT_K * M * n_acc) >= _I32_LIMIT:
        raise ValueError(f"gemm split-K: {cfg.SPLIT_K} x {M} x {n_acc} partial sums pass 2^31 "
                         "elements; use fewer splits")


def supports_config(op: GemmOp, cfg: SplitKConfig) -> str | None:
    """Why `cfg` cannot compile `op`, or None."""
    try:
        check(op, cfg)
    except (ValueError, TypeError) as e:
        return str(e)
    return None


def adapt_config(op: GemmOp, cfg: SplitKConfig) -> SplitKConfig:
    """The heuristic config made runnable for this op's views: pointer loads when an operand
    cannot be a TMA tensor map, no more splits than K tiles."""
    if cfg.TMA and (_tma_problem(op.a) or _tma_problem(op.b)):
        cfg = cfg.with_(TMA=False)
    return cfg.with_(SPLIT_K=max(1, min(cfg.SPLIT_K, cdiv(op.a.shape[1], cfg.BK))))


# ----------------------------------------------------------------------------- plans
def is_direct(op: GemmOp, cfg: SplitKConfig) -> bool:
    """One launch that finishes the tiles itself (no partials, no reduce): the whole K in one
    CTA, and with a SwiGLU whole gate/up blocks in its tile (paired in the CTA)."""
    group = swiglu_group(op)
    return cfg.SPLIT_K == 1 and (group is None or cfg.BN % (2 * group) == 0)


def uses_fixup(op: GemmOp, cfg: SplitKConfig) -> bool:
    """Partials finished by the last CTA of each unit, in the same launch."""
    return cfg.FIXUP and not is_direct(op, cfg)


def fixup_unit(op: GemmOp, cfg: SplitKConfig) -> int:
    """Accumulator rows one counter covers: a tile, or with SwiGLU the gate/up block pairs
    (2 * group rows) when they span several tiles."""
    group = swiglu_group(op)
    return max(cfg.BN, 2 * group) if group else cfg.BN


def counters_bytes(op: GemmOp, cfg: SplitKConfig):
    """One int32 per (row block, unit) of the fix-up; 0 without one."""
    if not uses_fixup(op, cfg):
        return 0
    return cdiv(op.a.shape[0], cfg.BM) * cdiv(op.b.shape[0], fixup_unit(op, cfg)) * 4


def workspace_bytes(op: GemmOp, cfg: SplitKConfig):
    return 0 if is_direct(op, cfg) else cfg.SPLIT_K * op.a.shape[0] * op.b.shape[0] * 4


def _workspace_arg(op: GemmOp, cfg: SplitKConfig) -> Ptr:
    return Ptr(TensorArg(WORKSPACE, DType.F32, (workspace_bytes(op, cfg) // 4,), (1,)))


def _stride_arg(v: int):
    # 0 and 1 compile in (unit strides vectorise; 0 broadcasts); others are runtime slots
    return Const(v) if v in (0, 1) else int_arg(v)


def _max_offset(arg: TensorArg) -> int:
    """The largest element offset the view reaches (at the dims' maxima)."""
    return upper_bound(arg.offset) + sum(
        upper_bound((d - 1) * s) if bounds(s)[0] >= 0 else upper_bound((d - 1) * -s)
        for d, s in zip(arg.shape, arg.strides))


def _epilogue_args(op: GemmOp) -> dict:
    """Output pointer/strides and the S{i}/e{i} step arguments of gemm_epilogue's
    _finish_subtile, plus WIDE_INDEX (some epilogue/output offset passes 2^31)."""
    steps = epilogue_steps(op)
    out = op.out
    args = {"out_ptr": Ptr(out), "stride_om": _stride_arg(out.strides[0]),
            "stride_on": _stride_arg(out.strides[1])}
    for i in range(MAX_STEPS):
        kind, t = steps[i] if i < len(steps) else ("", None)
        if kind in ("bias", "scale_n"):
            sm, sn = 0, t.strides[0]
        elif kind in ("add", "mul"):
            sm, sn = t.strides
        else:  # activations, nothing, or a per-tensor scale (one element)
            sm, sn = 0, 0
        args.update({f"S{i}": Const(kind), f"e{i}": Ptr(t) if t is not None else Const(None),
                     f"e{i}_m": _stride_arg(sm), f"e{i}_n": _stride_arg(sn)})
    views = [out] + [t for _, t in steps if t is not None]
    args["WIDE_INDEX"] = Const(any(_max_offset(v) >= _I32_LIMIT for v in views))
    return args


def _unused_epilogue_args() -> dict:
    args = {"out_ptr": Const(None), "stride_om": Const(0), "stride_on": Const(0),
            "WIDE_INDEX": Const(False)}
    for i in range(MAX_STEPS):
        args.update({f"S{i}": Const(""), f"e{i}": Const(None), f"e{i}_m": Const(0),
                     f"e{i}_n": Const(0)})
    return args


def _fixup_shape(op: GemmOp, cfg: SplitKConfig) -> tuple[int, int]:
    """(rows, columns) of output the last CTA finishes per pass: the tile's BM rows, cut so
    one pass holds at most _FIXUP_ELEMS outputs in registers, and the unit's columns."""
    cols = fixup_unit(op, cfg) // (2 if swiglu_group(op) else 1)
    rows = cfg.BM
    while rows > 1 and rows * cols > _FIXUP_ELEMS:
        rows //= 2
    return rows, cols


def _partials_plan(op: GemmOp, cfg: SplitKConfig) -> KernelPlan:
    M, K = op.a.shape
    n_acc = op.b.shape[0]
    direct = is_direct(op, cfg)
    fixup = uses_fixup(op, cfg)
    w_ptr = not cfg.TMA or cfg.PREFETCH > 0  # pointer loads, or the prefetch's addresses
    args = {
        "w_desc": Desc(op.b, (cfg.BN, cfg.BK)) if cfg.TMA else Const(None),
        "a_desc": Desc(op.a, (cfg.BM, cfg.BK)) if cfg.TMA else Const(None),
        "w_ptr": Ptr(op.b) if w_ptr else Const(None),
        "a_ptr": Const(None) if cfg.TMA else Ptr(op.a),
        "stride_wn": int_arg(op.b.strides[0]) if w_ptr else Const(0),
        "stride_am": Const(0) if cfg.TMA else int_arg(op.a.strides[0]),
        "M": I32(M), "N_acc": I32(n_acc), "K": I32(K),
        "ws_ptr": Const(None) if direct else _workspace_arg(op, cfg),
        **(_epilogue_args(op) if direct or fixup else _unused_epilogue_args()),
        "cnt_ptr": Counters(counters_bytes(op, cfg)) if fixup else Const(None),
        "N": I32(op.out.shape[1]),
        "bs_ptr": Ptr(op.b_scale) if op.b_scale is not None else Const(None),
        "as_ptr": Ptr(op.a_scale) if op.a_scale is not None else Const(None),
        "BN": Const(cfg.BN), "BM": Const(cfg.BM), "BK": Const(cfg.BK),
        "SPLIT_K": Const(cfg.SPLIT_K), "USE_TMA": Const(cfg.TMA), "DIRECT": Const(direct),
        "FIXUP": Const(fixup), "UNIT": Const(fixup_unit(op, cfg)),
        "SWIGLU_G": Const(swiglu_group(op) or 0),
        "FIX_M": Const(_fixup_shape(op, cfg)[0]), "FIX_COLS": Const(_fixup_shape(op, cfg)[1]),
        "B_SCALE": Const(op.b_scale is not None),
        "A_FP8": Const(op.quantize_a), "A_SCALED": Const(op.a_scale is not None),
        **_prefetch_args(op, cfg),
    }
    grid = (cdiv(M, cfg.BM), cdiv(n_acc, cfg.BN), cfg.SPLIT_K)
    if direct or fixup:
        fused = fused_ops(op) + (("splitk",) if direct else ("splitk", "fixup"))
    else:
        fused = ("gemm",) + _FP8_TAG * (op.b_scale is not None) + ("splitk_partials",)
    return KernelPlan(splitk_kernel, args, grid, cfg.num_warps, cfg.num_stages, fused,
                      cfg.as_dict(), pdl=cfg.PDL)


def _prefetch_args(op: GemmOp, cfg: SplitKConfig) -> dict:
    """PDL and the L2 prefetch of each CTA's first cfg.PREFETCH weight K tiles: one request per
    128-byte line (PF_STEP columns), PF_LINES a power of two covering PF_COLS columns."""
    if not (cfg.PDL and cfg.PREFETCH > 0):
        return {"PDL": Const(cfg.PDL), "PF_LINES": Const(0), "PF_STEP": Const(1),
                "PF_COLS": Const(0)}
    step = max(1, L2_LINE_BYTES // op.b.dtype.nbytes)
    cols = cfg.PREFETCH * cfg.BK
    lines = triton.next_power_of_2(cdiv(cols, step))
    return {"PDL": Const(True), "PF_LINES": Const(lines), "PF_STEP": Const(step),
            "PF_COLS": Const(cols)}


def reduce_blocks(M) -> tuple[int, int]:
    """(BLOCK_M, BLOCK_N) of the reduce: up to 4 rows, _REDUCE_ELEMS outputs per program
    (rows for the largest M of a symbolic one)."""
    block_m = 1
    while block_m < min(upper_bound(M), 4):
        block_m *= 2
    return block_m, _REDUCE_ELEMS // block_m


def _reduce_plan(op: GemmOp, cfg: SplitKConfig) -> KernelPlan:
    M, N = op.out.shape
    block_m, block_n = reduce_blocks(M)
    args = {"ws_ptr": _workspace_arg(op, cfg), **_epilogue_args(op),
            "M": I32(M), "N": I32(N), "N_acc": I32(op.b.shape[0]),
            "SPLIT_K": Const(cfg.SPLIT_K), "SWIGLU_G": Const(swiglu_group(op) or 0),
            "BLOCK_M": Const(block_m), "BLOCK_N": Const(block_n)}
    grid = (cdiv(N, block_n), cdiv(M, block_m), 1)
    fused = ("splitk_reduce",) + tuple(f for f in fused_ops(op)[1:] if f not in _FP8_TAG)
    config = {"kind": "splitk_reduce", "SPLIT_K": cfg.SPLIT_K, "BLOCK_M": block_m,
              "BLOCK_N": block_n}
    return KernelPlan(splitk_reduce_kernel, args, grid, _REDUCE_WARPS, 1, fused, config)


def plans(op: GemmOp, cfg: SplitKConfig) -> list[KernelPlan]:
    """The op's launches under `cfg`, in order: partials (or the direct kernel, or partials
    with the fix-up), then reduce."""
    check(op, cfg)
    first = _partials_plan(op, cfg)
    if is_direct(op, cfg) or uses_fixup(op, cfg):
        return [first]
    return [first, _reduce_plan(op, cfg)]


# ----------------------------------------------------------------------------- compile
def _workspace_to_scratch(launch: Launch, nbytes) -> Launch:
    """The workspace pointer becomes a scratch slot that both launches of the op share."""
    args = tuple(ScratchSlot(nbytes, 256, shared=SHARED_SCRATCH_KEY)
                 if isinstance(s, PtrSlot) and s.storage == WORKSPACE else s for s in launch.args)
    return Launch(launch.kernel, launch.grid, args)


def compile_config(op: GemmOp, cfg: SplitKConfig, target: Target = SM90) -> list[Launch]:
    """Cubins + launches of `op` with exactly `cfg` (kernels memoised per specialisation)."""
    nbytes = workspace_bytes(op, cfg)
    return [_workspace_to_scratch(compile_plan(p, target), nbytes) for p in plans(op, cfg)]


# ----------------------------------------------------------------------------- run with torch
def _env_with_workspace(op: GemmOp, env, cfg: SplitKConfig) -> dict:
    import torch

    env = dict(env)
    device = env[op.a.storage].device
    n = workspace_bytes(op, cfg) // 4
    if n:
        env[WORKSPACE] = torch.empty(n, dtype=torch.float32, device=device)
    return env


def jit_runner(op: GemmOp, env, cfg: SplitKConfig, point: dict | None = None):
    """A no-argument function running the op's launches through Triton's own launcher (GPU
    tensors in benchmarks) or its interpreter (CPU tensors, in an interpreter process): the
    same plans, arguments and workspace layout the cross-compiled bundle uses."""
    return plans_runner(plans(op, cfg), op, env, cfg, point)


def plans_runner(op_plans: list[KernelPlan], op: GemmOp, env, cfg: SplitKConfig,
                 point: dict | None = None):
    """jit_runner for `op_plans`, launches sharing `op`'s workspace (also gemm_norm's)."""
    from aotpack.kernels.triton import _interpret
    from aotpack.kernels.triton._common import jit_launcher

    if point:  # a symbolic op at one point of its dims
        op_plans = [subs_tree(p, point) for p in op_plans]
        op = subs_tree(op, point)
    env = _env_with_workspace(op, env, cfg)
    if _interpret.in_interpreter_process():
        _interpret.patch_interpreter()  # Triton 3.6's interpreter fixed to act like the GPU
        return lambda: [_interpret.run_plan_here(p, env) for p in op_plans]
    launchers = [jit_launcher(p, env) for p in op_plans]
    return lambda: [run() for run in launchers]
