"""A GEMM and the RMSNorm of its output rows (GemmNormOp): where the GEMM runs split-K, the
reduce that sums its partials also normalizes the rows, so the norm costs no launch of its own.

At decode every projection is a split-K GEMM whose second launch (the reduce) adds up a few KB
of partial sums; the norm that follows the attention output and the MLP output (RMSNorm of
the residual stream) was one more launch of ~1.7 us per layer and step on the H200. Here one
program per output row:
 1. sums the partials, applies the GEMM's epilogue (the residual add) and stores the row h,
    summing h^2 as stored (rounded to h's dtype: the values the separate norm would read);
 2. scales the row by rsqrt(mean(h^2) + eps) and the norm's weight and stores it.
Rows wider than BLOCK_N are walked in chunks (step 2 re-reads h from L1/L2 after a barrier).
Every other config (tiles, CuTeDSL, a one-launch split-K, SwiGLU) launches the GEMM's own
kernels and then the RMSNorm kernel: the same semantics, one launch more.
"""
from __future__ import annotations

import triton
import triton.language as tl

from aotpack.ir.sym import upper_bound
from aotpack.kernels.spec import SM90, GemmNormOp, Launch, Target, swiglu_group
from aotpack.kernels.triton import gemm_splitk as splitk
from aotpack.kernels.triton._common import KernelPlan, compile_plan, int_arg
from aotpack.kernels.triton.compile import F32, I32, Const, Ptr
from aotpack.kernels.triton.gemm_configs import SplitKConfig
from aotpack.kernels.triton.gemm_epilogue import _epilogue_step, fused_ops
from aotpack.kernels.triton.pdl import release_dependents

MAX_BLOCK_N = 2048  # columns per chunk


def _warps(block_n: int) -> int:
    """16 warps for 2048-wide chunks (4 columns per thread): on the H200 the whole fused op
    (partials + this reduce, M = 1 and 8, N = 2048) took 0.3-0.5 us less than with 4 warps
    (8 warps: no gain); narrower chunks keep 4."""
    return 16 if block_n >= 2048 else 4


@triton.jit
def splitk_reduce_norm_kernel(ws_ptr, out_ptr, stride_om, stride_on, M, N, N_acc,
                              e0, e0_m, e0_n, e1, e1_m, e1_n, e2, e2_m, e2_n, e3, e3_m, e3_n,
                              e4, e4_m, e4_n,
                              S0: tl.constexpr, S1: tl.constexpr, S2: tl.constexpr,
                              S3: tl.constexpr, S4: tl.constexpr,
                              w_ptr, y_ptr, stride_ym, eps,
                              SPLIT_K: tl.constexpr, BLOCK_N: tl.constexpr,
                              CHUNKS: tl.constexpr, HAS_WEIGHT: tl.constexpr,
                              WIDE_INDEX: tl.constexpr):
    release_dependents()  # the next GEMM may start streaming its weights (pdl.py)
    m = tl.program_id(0)
    offs_m = m + tl.arange(0, 1)
    if WIDE_INDEX:
        offs_m = offs_m.to(tl.int64)
    sumsq = tl.zeros((1, BLOCK_N), dtype=tl.float32)
    for c in tl.static_range(CHUNKS):  # 1: h = epilogue(sum of partials), stored
        offs_n = c * BLOCK_N + tl.arange(0, BLOCK_N)
        if WIDE_INDEX:
            offs_n = offs_n.to(tl.int64)
        mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
        acc = splitk._sum_partials(ws_ptr, offs_m, offs_n, mask, M, N_acc, SPLIT_K, "")
        acc = _epilogue_step(acc, S0, e0, e0_m, e0_n, offs_m, offs_n, M, N)
        acc = _epilogue_step(acc, S1, e1, e1_m, e1_n, offs_m, offs_n, M, N)
        acc = _epilogue_step(acc, S2, e2, e2_m, e2_n, offs_m, offs_n, M, N)
        acc = _epilogue_step(acc, S3, e3, e3_m, e3_n, offs_m, offs_n, M, N)
        acc = _epilogue_step(acc, S4, e4, e4_m, e4_n, offs_m, offs_n, M, N)
        h = acc.to(out_ptr.dtype.element_ty)
        tl.store(out_ptr + offs_m[:, None] * stride_om + offs_n[None, :] * stride_on, h,
                 mask=mask)
        h = tl.where(mask, h.to(tl.float32), 0.0)
        sumsq += h * h
    if CHUNKS > 1:
        tl.debug_barrier()  # every thread's stores of h are visible to the whole program
    scale = tl.rsqrt(tl.sum(sumsq, axis=1) / N + eps)  # [1]
    for c in tl.static_range(CHUNKS):  # 2: y = h * rsqrt(mean(h^2) + eps) * weight
        offs_n = c * BLOCK_N + tl.arange(0, BLOCK_N)
        if WIDE_INDEX:
            offs_n = offs_n.to(tl.int64)
        mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
        if CHUNKS > 1:  # h of this chunk again (one chunk: still in registers)
            h = tl.load(out_ptr + offs_m[:, None] * stride_om + offs_n[None, :] * stride_on,
                        mask=mask, other=0.0).to(tl.float32)
        y = h * scale[:, None]
        if HAS_WEIGHT:
            y = y * tl.load(w_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)[None, :]
        tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :],
                 y.to(y_ptr.dtype.element_ty), mask=mask)


# ----------------------------------------------------------------------------- plans
def fuses_norm(op: GemmNormOp, cfg) -> bool:
    """The config's reduce can normalize: a two-launch split-K without SwiGLU."""
    return (isinstance(cfg, SplitKConfig) and swiglu_group(op.gemm) is None
            and not splitk.is_direct(op.gemm, cfg) and not splitk.uses_fixup(op.gemm, cfg))


def check(op: GemmNormOp) -> None:
    """Raise ValueError naming why the pair cannot be one op."""
    g, n = op.gemm, op.norm
    if n.x != g.out:
        raise ValueError("gemm_norm: the norm must read the GEMM's whole output")
    if n.out_scale is not None:
        raise ValueError("gemm_norm: an FP8 norm output (out_scale) is not fused")
    if n.out.shape != g.out.shape or n.out.strides[-1] != 1:
        raise ValueError(f"gemm_norm: norm out {n.out.shape} strides {n.out.strides}: "
                         f"must be {g.out.shape} with a unit inner stride")
    if n.weight is not None and (n.weight.shape != (g.out.shape[1],) or n.weight.strides != (1,)):
        raise ValueError(f"gemm_norm: norm weight must be a contiguous [{g.out.shape[1]}]")


def reduce_norm_plan(op: GemmNormOp, cfg: SplitKConfig) -> KernelPlan:
    M, N = op.gemm.out.shape
    block = min(MAX_BLOCK_N, triton.next_power_of_2(upper_bound(N)))
    chunks = -(-upper_bound(N) // block)
    epi = splitk._epilogue_args(op.gemm)
    args = {"ws_ptr": splitk._workspace_arg(op.gemm, cfg), **epi,
            "M": I32(M), "N": I32(N), "N_acc": I32(op.gemm.b.shape[0]),
            "w_ptr": Ptr(op.norm.weight) if op.norm.weight is not None else Const(None),
            "y_ptr": Ptr(op.norm.out), "stride_ym": int_arg(op.norm.out.strides[0]),
            "eps": F32(op.norm.eps), "SPLIT_K": Const(cfg.SPLIT_K), "BLOCK_N": Const(block),
            "CHUNKS": Const(chunks), "HAS_WEIGHT": Const(op.norm.weight is not None)}
    # 64-bit offsets when the output, an epilogue operand or the normalized output reaches
    # past 2^31 elements (the last may be a view into a larger buffer)
    args["WIDE_INDEX"] = Const(args["WIDE_INDEX"].value or
                               splitk._max_offset(op.norm.out) >= splitk._I32_LIMIT)
    fused = ("splitk_reduce",) + tuple(
        f for f in fused_ops(op.gemm)[1:] if f not in splitk._FP8_TAG) + ("rmsnorm",)
    config = {"kind": "splitk_reduce_norm", "SPLIT_K": cfg.SPLIT_K, "BLOCK_N": block,
              "CHUNKS": chunks}
    return KernelPlan(splitk_reduce_norm_kernel, args, (M, 1, 1), _warps(block), 1, fused,
                      config)


def plans(op: GemmNormOp, cfg: SplitKConfig) -> list[KernelPlan]:
    """The fused form's two launches: the split-K partials, then the reduce that normalizes."""
    check(op)
    if not fuses_norm(op, cfg):
        raise ValueError("gemm_norm: only a two-launch split-K config fuses the norm")
    return [splitk.plans(op.gemm, cfg)[0], reduce_norm_plan(op, cfg)]


def compile(op: GemmNormOp, gemm_launches, cfg, target: Target = SM90) -> list[Launch]:
    """The op's launches, given the GEMM's own (compiled with `cfg`): the reduce swapped for
    the normalizing one where `cfg` allows, otherwise the RMSNorm kernel appended."""
    check(op)
    if fuses_norm(op, cfg) and len(gemm_launches) == 2:
        nbytes = splitk.workspace_bytes(op.gemm, cfg)
        reduce = splitk._workspace_to_scratch(compile_plan(reduce_norm_plan(op, cfg), target),
                                              nbytes)
        return [gemm_launches[0], reduce]
    from aotpack.kernels.triton import rmsnorm

    return list(gemm_launches) + rmsnorm.compile(op.norm, target)


def jit_runner(op: GemmNormOp, env, cfg: SplitKConfig, point: dict | None = None):
    """As gemm_splitk.jit_runner, for the fused form's plans (interpreter or Triton's JIT)."""
    return splitk.plans_runner(plans(op, cfg), op.gemm, env, cfg, point)
