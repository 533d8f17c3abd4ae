"""Convolution kernels (spec.ConvOp): channels-last, f32 accumulation, the GEMM's fused epilogue.

- `conv_kernel`, an implicit GEMM: out[M = N*OH*OW, OC] = im2col(x)[M, K] @ w[OC, K]^T with
  K = KH*KW*C/groups ordered (kh, kw, c), never materialised: each K step gathers a [BM, BK]
  tile of x at the pixels' window positions (zeros outside the image: the padding) and loads a
  [BN, BK] tile of the packed weight; tl.dot runs them on tensor cores (wgmma). One flattened
  K loop (taps x channel blocks) so Triton pipelines its loads. Groups are the grid's second
  axis. With few channels per group (a 3-channel stem) the K loop walks the flattened K
  directly (FLAT_K) instead of one tap at a time, so a 7x7x3 stem does 147 useful of 160 MACs
  per row, not 147 of 49*16.
- `depthwise_kernel`: groups == C == OC, a direct loop over the taps on [BP pixels, BC channels]
  tiles (channels contiguous: coalesced), bandwidth-bound, no tensor cores needed.
Both read x through its strides (a model's NCHW input is read in place by the first conv), take
the batch (M) at run time (dynamic batch), and finish with gemm_epilogue._epilogue_step (bias,
activations, residual add, ...) before one masked store into the [M, OC] output view.
"""
from __future__ import annotations

import triton
import triton.language as tl

from aotpack.dtypes import DType
from aotpack.ir.sym import bounds, upper_bound
from aotpack.kernels.spec import ConvOp
from aotpack.kernels.triton._common import KernelPlan, entry_points, int_arg
from aotpack.kernels.triton.compile import Const, Ptr, cdiv
from aotpack.kernels.triton.gemm_epilogue import (
    MAX_STEPS, MAX_TENSOR_OPERANDS, _epilogue_step, epilogue_steps,
)

# f32 convolutions run tl.dot on tf32 tensor cores (10-bit mantissa, f32 accumulation): what
# eager torch does for f32 convolutions by default (torch.backends.cudnn.allow_tf32 is True),
# so the bundle's numerics are the peer's, at tensor-core speed (f32 FMA would be ~8x slower)
_DOT_DTYPES = (DType.BF16, DType.F16, DType.F32)
_DIRECT_DTYPES = (DType.BF16, DType.F16, DType.F32)


# ----------------------------------------------------------------------------- device code
@triton.jit
def _pixels(offs_m, OH, OW, SH: tl.constexpr, SW: tl.constexpr, PT: tl.constexpr,
            PL: tl.constexpr):
    """Batch index and the window's top-left input row/column of each output pixel."""
    ow = offs_m % OW
    t = offs_m // OW
    oh = t % OH
    n = t // OH
    return n, oh * SH - PT, ow * SW - PL


@triton.jit
def _finish(acc, offs_m, offs_n, M, n_limit, out_ptr, OH, OW, s_on, s_oh, s_ow, s_oc,
            S0: tl.constexpr, e0, e0_m, e0_n, S1: tl.constexpr, e1, e1_m, e1_n,
            S2: tl.constexpr, e2, e2_m, e2_n, S3: tl.constexpr, e3, e3_m, e3_n,
            S4: tl.constexpr, e4, e4_m, e4_n):
    # offs_n are absolute output channels; n_limit ends this group's channels
    acc = _epilogue_step(acc, S0, e0, e0_m, e0_n, offs_m, offs_n, M, n_limit)
    acc = _epilogue_step(acc, S1, e1, e1_m, e1_n, offs_m, offs_n, M, n_limit)
    acc = _epilogue_step(acc, S2, e2, e2_m, e2_n, offs_m, offs_n, M, n_limit)
    acc = _epilogue_step(acc, S3, e3, e3_m, e3_n, offs_m, offs_n, M, n_limit)
    acc = _epilogue_step(acc, S4, e4, e4_m, e4_n, offs_m, offs_n, M, n_limit)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < n_limit)
    # the output pixel's own strides: [M, OC] rows, or an NCHW output written in place
    ow = offs_m % OW
    t = offs_m // OW
    row = (t // OH) * s_on + (t % OH) * s_oh + ow * s_ow
    ptrs = out_ptr + row[:, None] + offs_n[None, :] * s_oc
    tl.store(ptrs, acc.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def conv_kernel(x_ptr, w_ptr, out_ptr, sx_n, sx_h, sx_w, sx_c, s_on, s_oh, s_ow, s_oc,
                xs_ptr, sxs_n, sxs_c, M, H, W, OH, OW, C_G, OC_G, K_TOT,
                e0, e0_m, e0_n, e1, e1_m, e1_n, e2, e2_m, e2_n, e3, e3_m, e3_n,
                e4, e4_m, e4_n,
                S0: tl.constexpr, S1: tl.constexpr, S2: tl.constexpr, S3: tl.constexpr,
                S4: tl.constexpr,
                KH: tl.constexpr, KW: tl.constexpr, SH: tl.constexpr, SW: tl.constexpr,
                PT: tl.constexpr, PL: tl.constexpr, DH: tl.constexpr, DW: tl.constexpr,
                BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
                FLAT_K: tl.constexpr, WIDE_INDEX: tl.constexpr, X_SCALE: tl.constexpr):
    g = tl.program_id(1)
    tiles_m = tl.cdiv(M, BM)
    tiles_n = tl.cdiv(OC_G, BN)
    # grouped order: GROUP_M tile-rows share weight column blocks while they are hot in L2
    tile = tl.program_id(0)
    per_group = GROUP_M * tiles_n
    first_m = (tile // per_group) * GROUP_M
    rows = tl.minimum(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (tile % per_group) % rows
    pid_n = (tile % per_group) // rows
    offs_m = pid_m * BM + tl.arange(0, BM)
    local_n = pid_n * BN + tl.arange(0, BN)
    offs_n = g * OC_G + local_n
    if WIDE_INDEX:
        offs_m = offs_m.to(tl.int64)
        offs_n = offs_n.to(tl.int64)
    m_ok = offs_m < M
    n_ok = local_n < OC_G
    n, ih0, iw0 = _pixels(offs_m, OH, OW, SH, SW, PT, PL)
    x_rows = x_ptr + n * sx_n + (g * C_G) * sx_c
    w_rows = w_ptr + offs_n * K_TOT
    kk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    if FLAT_K:
        for k0 in range(0, K_TOT, BK):
            k = k0 + kk
            c = k % C_G
            tap = k // C_G
            ih = ih0[:, None] + (tap // KW)[None, :] * DH
            iw = iw0[:, None] + (tap % KW)[None, :] * DW
            ok = m_ok[:, None] & (k < K_TOT)[None, :] & (ih >= 0) & (ih < H) & (iw >= 0) \
                & (iw < W)
            a = tl.load(x_rows[:, None] + ih * sx_h + iw * sx_w + c[None, :] * sx_c, mask=ok,
                        other=0.0)
            if X_SCALE:
                s = tl.load(xs_ptr + (n * sxs_n)[:, None] + (g * C_G + c)[None, :] * sxs_c,
                            mask=ok, other=0.0)
                a = (a.to(tl.float32) * s.to(tl.float32)).to(a.dtype)
            b = tl.load(w_rows[:, None] + k[None, :], mask=n_ok[:, None] & (k < K_TOT)[None, :],
                        other=0.0)
            acc = tl.dot(a, b.T, acc)
    else:
        c_steps = tl.cdiv(C_G, BK)
        for it in range(0, KH * KW * c_steps):
            tap = it // c_steps
            c = (it % c_steps) * BK + kk
            ih = ih0 + (tap // KW) * DH
            iw = iw0 + (tap % KW) * DW
            row_ok = m_ok & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
            c_ok = c < C_G
            a = tl.load((x_rows + ih * sx_h + iw * sx_w)[:, None] + c[None, :] * sx_c,
                        mask=row_ok[:, None] & c_ok[None, :], other=0.0)
            if X_SCALE:
                s = tl.load(xs_ptr + (n * sxs_n)[:, None] + (g * C_G + c)[None, :] * sxs_c,
                            mask=row_ok[:, None] & c_ok[None, :], other=0.0)
                a = (a.to(tl.float32) * s.to(tl.float32)).to(a.dtype)
            b = tl.load(w_rows[:, None] + (tap * C_G + c)[None, :],
                        mask=n_ok[:, None] & c_ok[None, :], other=0.0)
            acc = tl.dot(a, b.T, acc)
    _finish(acc, offs_m, offs_n, M, g * OC_G + OC_G, out_ptr, OH, OW, s_on, s_oh, s_ow, s_oc,
            S0, e0, e0_m, e0_n, S1, e1, e1_m, e1_n, S2, e2, e2_m, e2_n, S3, e3, e3_m, e3_n,
            S4, e4, e4_m, e4_n)


@triton.jit
def _depthwise_row(acc, x_rows, x_cols, w_ptr, offs_c, m_ok, c_ok, ih0, iw0, kh, H, W, C, sx_h,
                   sx_w, KW: tl.constexpr, DH: tl.constexpr, DW: tl.constexpr):
    """acc + the taps of window row kh."""
    ih = ih0 + kh * DH
    h_ok = m_ok & (ih >= 0) & (ih < H)
    for kw in tl.static_range(KW):
        iw = iw0 + kw * DW
        ok = h_ok & (iw >= 0) & (iw < W)
        xv = tl.load((x_rows + ih * sx_h + iw * sx_w)[:, None] + x_cols[None, :],
                     mask=ok[:, None] & c_ok[None, :], other=0.0)
        wv = tl.load(w_ptr + (kh * KW + kw) * C + offs_c, mask=c_ok, other=0.0)
        acc += xv.to(tl.float32) * wv.to(tl.float32)[None, :]
    return acc


@triton.jit
def depthwise_kernel(x_ptr, w_ptr, out_ptr, sx_n, sx_h, sx_w, sx_c, s_on, s_oh, s_ow, s_oc,
                     M, H, W, OH, OW, C,
                     e0, e0_m, e0_n, e1, e1_m, e1_n, e2, e2_m, e2_n, e3, e3_m, e3_n,
                     e4, e4_m, e4_n,
                     S0: tl.constexpr, S1: tl.constexpr, S2: tl.constexpr, S3: tl.constexpr,
                     S4: tl.constexpr,
                     KH: tl.constexpr, KW: tl.constexpr, SH: tl.constexpr, SW: tl.constexpr,
                     PT: tl.constexpr, PL: tl.constexpr, DH: tl.constexpr, DW: tl.constexpr,
                     BP: tl.constexpr, BC: tl.constexpr, WIDE_INDEX: tl.constexpr,
                     ROW_LOOP: tl.constexpr):
    offs_m = tl.program_id(0) * BP + tl.arange(0, BP)
    offs_c = tl.program_id(1) * BC + tl.arange(0, BC)
    if WIDE_INDEX:
        offs_m = offs_m.to(tl.int64)
        offs_c = offs_c.to(tl.int64)
    m_ok = offs_m < M
    c_ok = offs_c < C
    n, ih0, iw0 = _pixels(offs_m, OH, OW, SH, SW, PT, PL)
    x_rows = x_ptr + n * sx_n
    x_cols = offs_c * sx_c
    acc = tl.zeros((BP, BC), dtype=tl.float32)
    if ROW_LOOP:
        # a run-time loop over the window's rows: the compiler cannot hoist every tap's load
        # to the top (KH*KW tiles live at once spill at 5x5 and wide tiles)
        for kh in range(KH):
            acc = _depthwise_row(acc, x_rows, x_cols, w_ptr, offs_c, m_ok, c_ok, ih0, iw0, kh,
                                 H, W, C, sx_h, sx_w, KW, DH, DW)
    else:
        for kh in tl.static_range(KH):
            acc = _depthwise_row(acc, x_rows, x_cols, w_ptr, offs_c, m_ok, c_ok, ih0, iw0, kh,
                                 H, W, C, sx_h, sx_w, KW, DH, DW)
    _finish(acc, offs_m, offs_c, M, C, out_ptr, OH, OW, s_on, s_oh, s_ow, s_oc,
            S0, e0, e0_m, e0_n, S1, e1, e1_m, e1_n, S2, e2, e2_m, e2_n, S3, e3, e3_m, e3_n,
            S4, e4, e4_m, e4_n)


# ----------------------------------------------------------------------------- host side
def supports(op: ConvOp) -> str | None:
    """Why the kernels cannot run `op` (None if they can)."""
    steps = epilogue_steps(op)
    if len(steps) > MAX_STEPS or len([t for _, t in steps if t is not None]) > \
            MAX_TENSOR_OPERANDS:
        return (f"its epilogue {[k for k, _ in steps]} is longer than {MAX_STEPS} steps / "
                f"{MAX_TENSOR_OPERANDS} tensor operands")
    dtypes = _DIRECT_DTYPES if op.depthwise else _DOT_DTYPES
    if op.x.dtype not in dtypes or op.w.dtype != op.x.dtype:
        return (f"convolutions run in bf16, f16 or f32 (tf32 tensor cores), and this one's "
                f"input is {op.x.dtype.value} with a {op.w.dtype.value} weight: give the model "
                f"one float dtype, or build with --dtype bf16 (casts the model's weights and "
                f"float inputs)")
    if op.out.dtype not in _DIRECT_DTYPES:
        return f"output dtype {op.out.dtype.value} (bf16, f16 or f32)"
    return None


def check_op(op: ConvOp) -> None:
    why = supports(op)
    if why is not None:
        raise ValueError(f"conv: {why}")
    if len(op.out.shape) not in (2, 4):
        raise ValueError(f"conv: the output must be a [M, OC] or [N, OH, OW, OC] view, got "
                         f"{op.out}")
    if op.x_scale is not None and (op.depthwise or len(op.x_scale.shape) != 2
                                   or op.x_scale.dtype != op.x.dtype):
        raise ValueError(f"conv: x_scale must be an [N, C] view of x's dtype, on an implicit-"
                         f"GEMM conv; got {op.x_scale}")
    if len(op.w.shape) != 2 or not op.w.is_contiguous():
        raise ValueError(f"conv: the packed weight must be a contiguous 2-D view, got {op.w}")


def _epilogue_args(op: ConvOp) -> dict:
    args = {}
    steps = epilogue_steps(op)
    for i in range(MAX_STEPS):
        kind, t = steps[i] if i < len(steps) else ("", None)
        args[f"S{i}"] = Const(kind)
        args[f"e{i}"] = Ptr(t) if t is not None else Const(None)
        if kind in ("bias", "scale_n", "scale"):
            sm, sn = 0, (t.strides[0] if kind != "scale" else 0)
        else:
            sm, sn = t.strides if t is not None else (0, 0)
        args[f"e{i}_m"], args[f"e{i}_n"] = int_arg(sm), int_arg(sn)
    return args


def _max_offset(arg) -> int:
    return sum(upper_bound((d - 1) * abs_s) for d, abs_s in
               zip(arg.shape, (s if bounds(s)[0] >= 0 else -s for s in arg.strides)))


def _geometry_args(op: ConvOp) -> dict:
    n, h, w, c = op.x.shape
    (kh, kw), (sh, sw), (dh, dw) = op.kernel, op.stride, op.dilation
    (pt, _), (pl, _) = op.padding
    wide = any(_max_offset(t) >= 2**31 for t in (op.x, op.out, op.w) +
               tuple(t for _, t in epilogue_steps(op) if t is not None))
    return {
        "x_ptr": Ptr(op.x), "w_ptr": Ptr(op.w), "out_ptr": Ptr(op.out),
        "sx_n": int_arg(op.x.strides[0]), "sx_h": int_arg(op.x.strides[1]),
        "sx_w": int_arg(op.x.strides[2]), "sx_c": int_arg(op.x.strides[3]),
        **{k: int_arg(s) for k, s in zip(("s_on", "s_oh", "s_ow", "s_oc"), _out_strides(op))},
        "M": int_arg(op.rows), "H": int_arg(h), "W": int_arg(w),
        "OH": int_arg(op.out_hw[0]), "OW": int_arg(op.out_hw[1]),
        "KH": Const(kh), "KW": Const(kw), "SH": Const(sh), "SW": Const(sw),
        "PT": Const(pt), "PL": Const(pl), "DH": Const(dh), "DW": Const(dw),
        "WIDE_INDEX": Const(wide),
    }


def _out_strides(op: ConvOp) -> tuple:
    """(image, output row, output column, channel) strides of op.out, 2-D or 4-D."""
    if len(op.out.shape) == 4:
        return tuple(op.out.strides)
    r, c = op.out.strides
    oh, ow = op.out_hw
    return oh * ow * r, ow * r, r, c


def plan(op: ConvOp, config: dict | None = None) -> KernelPlan:
    from aotpack.kernels.spec import SM90
    from aotpack.kernels.triton import conv_configs

    check_op(op)
    cfg = dict(conv_configs.default_config(op, SM90), **(config or {}))
    args = {**_geometry_args(op), **_epilogue_args(op)}
    m, oc = op.rows, op.out_channels
    c = op.x.shape[3]
    if op.depthwise:
        args.update({"C": int_arg(c), "BP": Const(cfg["BP"]), "BC": Const(cfg["BC"]),
                     "ROW_LOOP": Const(cfg.get("ROW_LOOP", False))})
        grid = (cdiv(m, cfg["BP"]), cdiv(c, cfg["BC"]), 1)
        return KernelPlan(depthwise_kernel, args, grid, cfg["num_warps"], cfg["num_stages"],
                          ("depthwise_conv",) + _fused(op), cfg)
    cg, ocg = c // op.groups, oc // op.groups
    xs = op.x_scale
    args.update({"xs_ptr": Ptr(xs) if xs is not None else Const(None),
                 "sxs_n": int_arg(xs.strides[0] if xs is not None else 0),
                 "sxs_c": int_arg(xs.strides[1] if xs is not None else 0),
                 "X_SCALE": Const(xs is not None)})
    args.update({"C_G": int_arg(cg), "OC_G": int_arg(ocg), "K_TOT": int_arg(op.w.shape[1])})
    for k in ("BM", "BN", "BK", "GROUP_M", "FLAT_K"):
        args[k] = Const(cfg[k])
    grid = (cdiv(m, cfg["BM"]) * cdiv(ocg, cfg["BN"]), op.groups, 1)
    return KernelPlan(conv_kernel, args, grid, cfg["num_warps"], cfg["num_stages"],
                      ("conv",) + _fused(op), cfg)


def _fused(op: ConvOp) -> tuple[str, ...]:
    scale = ("x_scale",) if op.x_scale is not None else ()
    return scale + tuple(kind for kind, _ in epilogue_steps(op))


# compile / run_plan_interpreted_here / run_jit, from plan() (see _common)
compile, run_plan_interpreted_here, run_jit = entry_points(plan)
