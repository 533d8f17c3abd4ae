"""Max / average pooling over channels-last views (spec.PoolOp): each program owns BP output
pixels x BC channels (channels contiguous: coalesced loads) and walks the window's taps.
Global average pooling is the window of the whole image. avg follows torch's divisor rule
(count_include_pad, divisor_override, ceil_mode windows clipped at the padded edge)."""
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


def plan(op: PoolOp, config: dict | None = None) -> KernelPlan:
    if op.kind not in ("max", "avg"):
        raise ValueError(f"pool: unknown kind {op.kind!r}")
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


compile, run_interpreted, run_plan_interpreted_here, run_jit = entry_points(plan)
