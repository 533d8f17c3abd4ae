"""Rotary embedding, rotate-half form, on a strided 4-D view x[B, H, S, D]:
out[..., :D/2] = x1 * cos1 - x2 * sin1,  out[..., D/2:] = x2 * cos2 + x1 * sin2
(x1/x2 = the halves of x, cos1/cos2 and sin1/sin2 the halves of cos[s] / sin[s]).

One program handles BLOCK_S positions of one (batch, head). Each half is loaded once and both
outputs come from the same registers, so x is read once and out written once. Programs are
ordered head-fastest, so the cos/sin rows of a position block stay hot in L2 across heads.
cos/sin are [S, D] tables (one for every sequence) or [B, S, D] (a generation step: each
sequence at its own positions).
"""
from __future__ import annotations

import triton
import triton.language as tl

from aotpack.kernels.spec import RopeOp
from aotpack.kernels.triton._common import (
    KernelPlan, entry_points, int_arg, require_unit_inner_stride, strides_args,
)
from aotpack.kernels.triton.compile import Const, Ptr, cdiv


@triton.jit
def rope_kernel(x_ptr, cos_ptr, sin_ptr, out_ptr,
                x_stride_b, x_stride_h, x_stride_s, cos_stride_b, cos_stride_s, sin_stride_b,
                sin_stride_s,
                out_stride_b, out_stride_h, out_stride_s, seq,
                HEADS: tl.constexpr, HALF: tl.constexpr, HALF_BLOCK: tl.constexpr,
                BLOCK_S: tl.constexpr):
    batch_head = tl.program_id(0)
    batch = (batch_head // HEADS).to(tl.int64)
    head = (batch_head % HEADS).to(tl.int64)
    pos = (tl.program_id(1) * BLOCK_S + tl.arange(0, BLOCK_S)).to(tl.int64)
    dims = tl.arange(0, HALF_BLOCK)
    mask = (pos[:, None] < seq) & (dims[None, :] < HALF)

    x_row = x_ptr + batch * x_stride_b + head * x_stride_h + pos[:, None] * x_stride_s
    x1 = tl.load(x_row + dims[None, :], mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(x_row + HALF + dims[None, :], mask=mask, other=0.0).to(tl.float32)
    cos_row = cos_ptr + batch * cos_stride_b + pos[:, None] * cos_stride_s
    sin_row = sin_ptr + batch * sin_stride_b + pos[:, None] * sin_stride_s
    cos1 = tl.load(cos_row + dims[None, :], mask=mask, other=0.0).to(tl.float32)
    cos2 = tl.load(cos_row + HALF + dims[None, :], mask=mask, other=0.0).to(tl.float32)
    sin1 = tl.load(sin_row + dims[None, :], mask=mask, other=0.0).to(tl.float32)
    sin2 = tl.load(sin_row + HALF + dims[None, :], mask=mask, other=0.0).to(tl.float32)

    out_row = out_ptr + batch * out_stride_b + head * out_stride_h + pos[:, None] * out_stride_s
    out_ty = out_ptr.dtype.element_ty
    tl.store(out_row + dims[None, :], (x1 * cos1 - x2 * sin1).to(out_ty), mask=mask)
    tl.store(out_row + HALF + dims[None, :], (x2 * cos2 + x1 * sin2).to(out_ty), mask=mask)


def default_config(head_dim: int) -> dict:
    # ~4K elements per program: enough bytes in flight per SM, few masked tail programs.
    return {"BLOCK_S": max(1, 4096 // head_dim), "num_warps": 4, "num_stages": 1}


def _check(op: RopeOp) -> None:
    b, h, s, d = op.x.shape
    if d % 2:
        raise ValueError(f"rope: head dim {d} is odd")
    tables = ((s, d), (b, s, d))
    if op.out.shape != op.x.shape or op.cos.shape not in tables or op.sin.shape not in tables:
        raise ValueError(f"rope: shapes x{op.x.shape} cos{op.cos.shape} sin{op.sin.shape} "
                         f"out{op.out.shape} do not match")
    for name in ("x", "cos", "sin", "out"):
        require_unit_inner_stride(f"rope {name}", getattr(op, name))


def plan(op: RopeOp, config: dict | None = None) -> KernelPlan:
    _check(op)
    b, h, s, d = op.x.shape
    cfg = dict(default_config(d), **(config or {}))
    block_s = triton.next_power_of_2(cfg["BLOCK_S"])
    args = {"x_ptr": Ptr(op.x), "cos_ptr": Ptr(op.cos), "sin_ptr": Ptr(op.sin),
            "out_ptr": Ptr(op.out)}
    args.update(strides_args("x", op.x, ("b", "h", "s")))
    for name, t in (("cos", op.cos), ("sin", op.sin)):
        per_batch = len(t.shape) == 3
        args[f"{name}_stride_b"] = int_arg(t.strides[0] if per_batch else 0)
        args[f"{name}_stride_s"] = int_arg(t.strides[-2])
    args.update(strides_args("out", op.out, ("b", "h", "s")))
    args.update({"seq": int_arg(s), "HEADS": Const(h), "HALF": Const(d // 2),
                 "HALF_BLOCK": Const(triton.next_power_of_2(d // 2)),
                 "BLOCK_S": Const(block_s)})
    return KernelPlan(rope_kernel, args, (b * h, cdiv(s, block_s), 1), cfg["num_warps"],
                      cfg["num_stages"], ("rope",), {"BLOCK_S": block_s})


# compile / run_plan_interpreted_here / run_jit, from plan() (see _common)
compile, run_plan_interpreted_here, run_jit = entry_points(plan)


def bytes_moved(op: RopeOp) -> int:
    b, h, s, d = op.x.shape
    return (op.x.numel * (op.x.dtype.nbytes + op.out.dtype.nbytes)
            + op.cos.numel * op.cos.dtype.nbytes + op.sin.numel * op.sin.dtype.nbytes)
