"""Max / average pooling over channels-last views (spec.PoolOp): each program owns BP output
pixels x BC channels (channels contiguous: coalesced loads) and walks the window's taps.
avg follows torch's divisor rule (count_include_pad, divisor_override, ceil_mode windows
clipped at the padded edge).

Global pooling (one window over the whole unpadded image: squeeze-excitation, the classifier's
average pool) has its own kernel: a program per (image, BC channels) streams the image's
[H*W, BC] slab in [BR, BC] tiles (pipelined) and reduces at the end. The windowed kernel would
walk H*W taps one pixel row at a time, serially: 12544 dependent loads for a 112x112
squeeze-excitation at batch 1."""
from __future__ import annotations

import triton
import triton.language as tl

from aotpack.kernels.spec import PoolOp
from aotpack.kernels.triton._common import KernelPlan, entry_points, int_arg
from aotpack.kernels.triton.compile import Const, Ptr, cdiv


@triton.jit
def pool_kernel(x_ptr, out_ptr, sx_n, sx_h, sx_w, sx_c, so_n, so_h, so_w, so_c,
                M, H, W, OH, OW, C,
                KH: tl.constexpr, KW: tl.constexpr, SH: tl.constexpr, SW: tl.constexpr,
                PH: tl.constexpr, PW: tl.constexpr, IS_MAX: tl.constexpr,
                COUNT_PAD: tl.constexpr, DIVISOR: tl.constexpr,
                BP: tl.constexpr, BC: tl.constexpr):
    offs_m = tl.program_id(0) * BP + tl.arange(0, BP)
    offs_c = tl.program_id(1) * BC + tl.arange(0, BC)
    m_ok = offs_m < M
    c_ok = offs_c < C
    ow = offs_m % OW
    t = offs_m // OW
    oh = t % OH
    n = t // OH
    h0 = oh * SH - PH
    w0 = ow * SW - PW
    x_rows = x_ptr + n.to(tl.int64) * sx_n
    if IS_MAX:
        acc = tl.full((BP, BC), float("-inf"), dtype=tl.float32)
    else:
        acc = tl.zeros((BP, BC), dtype=tl.float32)
    for kh in range(KH):
        ih = h0 + kh
        h_ok = m_ok & (ih >= 0) & (ih < H)
        for kw in range(KW):
            iw = w0 + kw
            ok = (h_ok & (iw >= 0) & (iw < W))[:, None] & c_ok[None, :]
            ptrs = (x_rows + ih * sx_h + iw * sx_w)[:, None] + offs_c[None, :] * sx_c
            if IS_MAX:
                v = tl.load(ptrs, mask=ok, other=float("-inf")).to(tl.float32)
                acc = tl.where(v > acc, v, acc)
            else:
                acc += tl.load(ptrs, mask=ok, other=0.0).to(tl.float32)
    if not IS_MAX:
        if DIVISOR > 0:
            acc = acc / DIVISOR
        else:
            h1 = tl.minimum(h0 + KH, H + PH)
            w1 = tl.minimum(w0 + KW, W + PW)
            if COUNT_PAD:
                count = (h1 - h0) * (w1 - w0)
            else:
                count = (tl.minimum(h1, H) - tl.maximum(h0, 0)) * \
                    (tl.minimum(w1, W) - tl.maximum(w0, 0))
            acc = acc / tl.maximum(count, 1).to(tl.float32)[:, None]
    out = (out_ptr + n.to(tl.int64) * so_n + oh * so_h + ow * so_w)[:, None] + \
        offs_c[None, :] * so_c
    tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=m_ok[:, None] & c_ok[None, :])


@triton.jit
def global_pool_kernel(x_ptr, out_ptr, sx_n, sx_h, sx_w, sx_c, so_n, so_c, C,
                       H: tl.constexpr, W: tl.constexpr, IS_MAX: tl.constexpr,
                       DIVISOR: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr,
                       STAGES: tl.constexpr):
    n = tl.program_id(0).to(tl.int64)
    offs_c = tl.program_id(1) * BC + tl.arange(0, BC)
    c_ok = offs_c < C
    rows = tl.arange(0, BR)
    x_img = x_ptr + n * sx_n
    if IS_MAX:
        acc = tl.full((BR, BC), float("-inf"), dtype=tl.float32)
    else:
        acc = tl.zeros((BR, BC), dtype=tl.float32)
    for p0 in tl.range(0, H * W, BR, num_stages=STAGES):
        p = p0 + rows
        ok = (p < H * W)[:, None] & c_ok[None, :]
        ptrs = (x_img + (p // W) * sx_h + (p % W) * sx_w)[:, None] + offs_c[None, :] * sx_c
        if IS_MAX:
            v = tl.load(ptrs, mask=ok, other=float("-inf")).to(tl.float32)
            acc = tl.where(v > acc, v, acc)
        else:
            acc += tl.load(ptrs, mask=ok, other=0.0).to(tl.float32)
    if IS_MAX:
        r = tl.max(acc, 0)
    else:
        r = tl.sum(acc, 0) / DIVISOR
    tl.store(out_ptr + n * so_n + offs_c * so_c, r.to(out_ptr.dtype.element_ty), mask=c_ok)


def is_global(op: PoolOp) -> bool:
    """One window over the whole unpadded image."""
    _, h, w, _ = op.x.shape
    return tuple(op.kernel) == (h, w) and tuple(op.padding) == (0, 0) \
        and tuple(op.out.shape[1:3]) == (1, 1)


def _plan_global(op: PoolOp, config: dict | None) -> KernelPlan:
    from aotpack.ir.sym import upper_bound
    from aotpack.kernels.spec import SM90

    n, h, w, c = op.x.shape
    # channels per program: 32 (64-byte rows), 16 when that leaves SMs idle (batch 1)
    bc = 32 if upper_bound(n) * -(-c // 32) >= SM90.sm_count else 16
    cfg = {"BR": 2048 // bc, "BC": bc, "num_warps": 4, "STAGES": 3, **(config or {})}
    args = {"x_ptr": Ptr(op.x), "out_ptr": Ptr(op.out)}
    for name, s in zip("nhwc", op.x.strides):
        args[f"sx_{name}"] = int_arg(s)
    args.update({"so_n": int_arg(op.out.strides[0]), "so_c": int_arg(op.out.strides[3]),
                 "C": int_arg(c), "H": Const(h), "W": Const(w),
                 "IS_MAX": Const(op.kind == "max"),
                 "DIVISOR": Const(float(op.divisor or h * w)),
                 "BR": Const(cfg["BR"]), "BC": Const(cfg["BC"]), "STAGES": Const(cfg["STAGES"])})
    grid = (n, cdiv(c, cfg["BC"]), 1)
    return KernelPlan(global_pool_kernel, args, grid, cfg["num_warps"], 1,
                      (f"global_{op.kind}_pool",), cfg)


def plan(op: PoolOp, config: dict | None = None) -> KernelPlan:
    if op.kind not in ("max", "avg"):
        raise ValueError(f"pool: unknown kind {op.kind!r}")
    if is_global(op) and isinstance(op.x.shape[1], int) and isinstance(op.x.shape[2], int):
        return _plan_global(op, config)
    n, h, w, c = op.x.shape
    _, oh, ow, _ = op.out.shape
    taps = op.kernel[0] * op.kernel[1]
    bc = 16
    while bc < c and bc < 128:
        bc *= 2
    cfg = {"BP": 4 if taps >= 64 else 16, "BC": bc, "num_warps": 4, "num_stages": 1,
           **(config or {})}
    m = n * oh * ow
    args = {"x_ptr": Ptr(op.x), "out_ptr": Ptr(op.out)}
    for prefix, t in (("sx", op.x), ("so", op.out)):
        for name, s in zip("nhwc", t.strides):
            args[f"{prefix}_{name}"] = int_arg(s)
    args.update({"M": int_arg(m), "H": int_arg(h), "W": int_arg(w), "OH": int_arg(oh),
                 "OW": int_arg(ow), "C": int_arg(c),
                 "KH": Const(op.kernel[0]), "KW": Const(op.kernel[1]),
                 "SH": Const(op.stride[0]), "SW": Const(op.stride[1]),
                 "PH": Const(op.padding[0]), "PW": Const(op.padding[1]),
                 "IS_MAX": Const(op.kind == "max"), "COUNT_PAD": Const(op.count_include_pad),
                 "DIVISOR": Const(op.divisor or 0), "BP": Const(cfg["BP"]), "BC": Const(cfg["BC"])})
    grid = (cdiv(m, cfg["BP"]), cdiv(c, cfg["BC"]), 1)
    return KernelPlan(pool_kernel, args, grid, cfg["num_warps"], cfg["num_stages"],
                      (f"{op.kind}_pool",), cfg)


compile, run_plan_interpreted_here, run_jit = entry_points(plan)
