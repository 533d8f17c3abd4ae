"""The epilogue of the Triton GEMM template (gemm.py): device helpers that finish a tile of the
f32 accumulator in registers and store it, and the host-side mapping of the op's epilogue steps
to the kernel's constexpr step kinds.

Step kinds: "" (none), "bias", "add", "mul", "scale" (per-tensor f32), "scale_n" (per-channel
f32), activations ("gelu_tanh", "gelu_erf", "silu", "relu", "relu6", "hardswish",
"hardsigmoid", "sigmoid"). EpSwiGLU is not a step kind but
the kernel constexpr SWIGLU_G: it runs first, on the whole [BM, BN] accumulator, and halves it.
"""
from __future__ import annotations

import triton
import triton.language as tl

from aotpack.dtypes import DType
from aotpack.kernels.spec import (
    EPILOGUE_MAX_STEPS, EPILOGUE_MAX_TENSORS, SM90, EpAct, EpAdd, EpBias, EpMul, EpScale,
    EpSwiGLU, GemmOp, Target, TensorArg, swiglu_group,
)
from aotpack.kernels.triton.gemm_configs import GemmConfig, fit_smem

MAX_STEPS = EPILOGUE_MAX_STEPS  # epilogue steps compiled into one kernel
MAX_TENSOR_OPERANDS = EPILOGUE_MAX_TENSORS  # bias/add/mul/scale operands


# ----------------------------------------------------------------------------- device code
@triton.jit
def gelu_erf(x):
    """x * Phi(x), the exact (erf) GELU, in ~17 instructions where libdevice's erff takes ~34:
    erfc(z) = t * P(t) * exp(-z^2), t = 1 / (1 + p z) (Abramowitz & Stegun 7.1.26, |error|
    <= 1.5e-7), 1 + erf(z) = 2 - erfc(z) for z >= 0 and erfc(-z) below, so the negative side
    has no cancellation. Max |error| 4.2e-7 against float64 over [-12, 12] (torch's own f32
    gelu: 1.2e-6); inf, -0 and NaN as torch's. 1/d is rsqrt(d*d) (one MUFU op, d >= 1): an
    erf epilogue doubled the time of the short-K GEMMs it ends (ConvNeXt's fc1: 2x its fc2's
    time at equal FLOPs, the H200, 2026-12-04)."""
    z = tl.abs(x) * 0.7071067811865476
    d = 1.0 + 0.3275911 * z
    t = tl.math.rsqrt(d * d)
    p = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027
                                                                      + t * 1.061405429))))
    erfc = p * tl.exp2(z * z * -1.4426950408889634)
    return 0.5 * x * tl.where(x >= 0, 2.0 - erfc, erfc)


@triton.jit
def _activation(x, ACT: tl.constexpr):
    if ACT == "gelu_tanh":
        # 0.5 * (1 + tanh(z)) == sigmoid(2z): avoids a tanh (not in every libdevice / numpy path)
        z = 0.7978845608028654 * (x + 0.044715 * x * x * x)
        x = x * tl.sigmoid(2.0 * z)
    elif ACT == "gelu_erf":
        x = gelu_erf(x)
    elif ACT == "silu":
        x = x * tl.sigmoid(x)
    elif ACT == "relu":
        x = tl.maximum(x, 0.0)
    elif ACT == "relu6":
        x = tl.minimum(tl.maximum(x, 0.0), 6.0)
    elif ACT == "hardswish":
        x = x * (tl.minimum(tl.maximum(x + 3.0, 0.0), 6.0) * (1.0 / 6.0))
    elif ACT == "hardsigmoid":
        x = tl.minimum(tl.maximum(x + 3.0, 0.0), 6.0) * (1.0 / 6.0)
    elif ACT == "sigmoid":
        x = tl.sigmoid(x)
    return x


@triton.jit
def _swiglu_pairs(acc, BM: tl.constexpr, BN: tl.constexpr, G: tl.constexpr):
    # Columns [g_0..g_{G-1}, u_0..u_{G-1}, g_G.., ...]: view them as [BM, BN/(2G), 2, G], move
    # the gate/up axis last and split it. A wgmma accumulator repeats its column pattern every
    # 8 columns, so column c and c + G sit in one thread: register renaming, no data movement.
    pairs = tl.permute(tl.reshape(acc, (BM, BN // (2 * G), 2, G)), (0, 1, 3, 2))
    gate, up = tl.split(pairs)
    return tl.reshape(_activation(gate, "silu") * up, (BM, BN // 2))


@triton.jit
def _epilogue_step(acc, STEP: tl.constexpr, ptr, s_m, s_n, offs_m, offs_n, M, N):
    # STEP "" is a no-op; ptr is None then (a constexpr), so nothing is loaded.
    if STEP == "bias":
        bias = tl.load(ptr + offs_n * s_n, mask=offs_n < N, other=0.0)
        acc = acc + bias.to(tl.float32)[None, :]
    elif STEP == "scale":  # per tensor: one f32 for the whole output
        acc = acc * tl.load(ptr).to(tl.float32)
    elif STEP == "scale_n":  # per channel: an f32 per output column
        scale = tl.load(ptr + offs_n * s_n, mask=offs_n < N, other=0.0)
        acc = acc * scale.to(tl.float32)[None, :]
    elif STEP == "add" or STEP == "mul":
        mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
        x = tl.load(ptr + offs_m[:, None] * s_m + offs_n[None, :] * s_n, mask=mask, other=0.0)
        if STEP == "add":
            acc = acc + x.to(tl.float32)
        else:
            acc = acc * x.to(tl.float32)
    elif STEP != "":
        acc = _activation(acc, STEP)
    return acc


@triton.jit
def _finish_subtile(acc, off_m, off_n, M, N, out_desc, out_ptr, stride_om, stride_on,
                    S0: tl.constexpr, e0, e0_m, e0_n, S1: tl.constexpr, e1, e1_m, e1_n,
                    S2: tl.constexpr, e2, e2_m, e2_n, S3: tl.constexpr, e3, e3_m, e3_n,
                    S4: tl.constexpr, e4, e4_m, e4_n,
                    BM: tl.constexpr, BNS: tl.constexpr, WIDE_INDEX: tl.constexpr,
                    TMA_STORE: tl.constexpr):
    offs_m = off_m + tl.arange(0, BM)
    offs_n = off_n + tl.arange(0, BNS)
    if WIDE_INDEX:  # element offsets of some operand or the output pass 2^31
        offs_m = offs_m.to(tl.int64)
        offs_n = offs_n.to(tl.int64)
    acc = _epilogue_step(acc, S0, e0, e0_m, e0_n, offs_m, offs_n, M, N)
    acc = _epilogue_step(acc, S1, e1, e1_m, e1_n, offs_m, offs_n, M, N)
    acc = _epilogue_step(acc, S2, e2, e2_m, e2_n, offs_m, offs_n, M, N)
    acc = _epilogue_step(acc, S3, e3, e3_m, e3_n, offs_m, offs_n, M, N)
    acc = _epilogue_step(acc, S4, e4, e4_m, e4_n, offs_m, offs_n, M, N)
    if TMA_STORE:
        out_desc.store([off_m, off_n], acc.to(out_desc.dtype))
    else:
        mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
        ptrs = out_ptr + offs_m[:, None] * stride_om + offs_n[None, :] * stride_on
        tl.store(ptrs, acc.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _column_halves(x, BM: tl.constexpr, BN: tl.constexpr):
    # [BM, BN] -> columns [0, BN/2) and [BN/2, BN); register renaming, no data movement
    return tl.split(tl.permute(tl.reshape(x, (BM, 2, BN // 2)), (0, 2, 1)))


@triton.jit
def _column_block(acc, Q: tl.constexpr, PARTS: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    """Column block Q of PARTS (1, 2 or 4) equal blocks of the [BM, BN] accumulator."""
    if PARTS == 1:
        block = acc
    else:
        lo, hi = _column_halves(acc, BM, BN)
        if Q >= PARTS // 2:
            block = hi
        else:
            block = lo
        if PARTS == 4:
            lo2, hi2 = _column_halves(block, BM, BN // 2)
            if Q % 2 == 1:
                block = hi2
            else:
                block = lo2
    return block


# ----------------------------------------------------------------------------- host side
def epilogue_steps(op: GemmOp) -> list[tuple[str, TensorArg | None]]:
    """(kernel step kind, operand view) per epilogue step after the SwiGLU pairing (a kernel
    constexpr, SWIGLU_G), in order."""
    steps = []
    for i, step in enumerate(op.epilogue):
        if isinstance(step, EpSwiGLU):
            if i != 0:
                raise ValueError("gemm: EpSwiGLU must be the first epilogue step")
            continue
        if isinstance(step, EpScale):
            steps.append(("scale" if tuple(step.scale.shape) == (1,) else "scale_n", step.scale))
        elif isinstance(step, EpBias):
            steps.append(("bias", step.bias))
        elif isinstance(step, EpAdd):
            steps.append(("add", step.other))
        elif isinstance(step, EpMul):
            steps.append(("mul", step.other))
        elif isinstance(step, EpAct):
            steps.append((step.act.value, None))
        else:
            raise TypeError(f"gemm: unknown epilogue step {step!r}")
    return steps


def fused_ops(op: GemmOp) -> tuple[str, ...]:
    swiglu = ("swiglu",) if swiglu_group(op) else ()
    fp8 = ("fp8_weight",) if op.b_scale is not None else ()
    return ("gemm",) + fp8 + swiglu + tuple(kind for kind, _ in epilogue_steps(op))


def check_epilogue(op: GemmOp) -> None:
    steps = epilogue_steps(op)
    tensors = [t for _, t in steps if t is not None]
    if len(steps) > MAX_STEPS or len(tensors) > MAX_TENSOR_OPERANDS:
        raise ValueError(f"gemm: epilogue {[k for k, _ in steps]} too long: at most {MAX_STEPS} "
                         f"steps and {MAX_TENSOR_OPERANDS} tensor operands (bias/add/mul) fuse "
                         "into one kernel; split the rest into a pointwise op")
    M, N = op.out.shape
    for kind, t in steps:
        want = {"bias": (N,), "scale_n": (N,), "scale": (1,)}.get(kind, (M, N))
        if t is not None and tuple(t.shape) != want:
            raise ValueError(f"gemm: {kind} operand has shape {t.shape}, expected {want}")
        if t is not None and not t.dtype.is_float:
            raise ValueError(f"gemm: {kind} operand must be a float tensor, got {t.dtype.value}")
        if kind.startswith("scale") and t.dtype is not DType.F32:
            raise ValueError(f"gemm: EpScale's scale must be f32, got {t.dtype.value}")
    g = swiglu_group(op)
    if g is not None and (g < 1 or g & (g - 1) or op.b.shape[0] % (2 * g)):
        raise ValueError(f"gemm: EpSwiGLU group {g} must be a power of two and divide "
                         f"B's {op.b.shape[0]} rows into gate/up pairs (a multiple of {2 * g})")


def out_tile_n(op: GemmOp, cfg: GemmConfig) -> int:
    """Output columns per tile: BN, or BN / 2 when a SwiGLU pairs the accumulator columns."""
    return cfg.BN // 2 if swiglu_group(op) else cfg.BN


def swiglu_config(cfg: GemmConfig, group: int, op: GemmOp, target: Target = SM90) -> GemmConfig:
    """`cfg` made fit for a SwiGLU of `group`: BN a multiple of 2 * group (whole gate/up pairs
    per tile; the decode configs' narrow BN grows to 2 * group) and half the epilogue split
    (the output tile is BN / 2 wide: same subtile width as without SwiGLU)."""
    bn = max(cfg.BN, 2 * group)
    bn = -(-bn // (2 * group)) * 2 * group
    split = max(1, cfg.EPI_SPLIT // 2)
    while (bn // 2) % split:
        split //= 2
    cfg = cfg.with_(BN=bn, EPI_SPLIT=split)
    return fit_smem(cfg, op.a.dtype, op.out.dtype, target)
