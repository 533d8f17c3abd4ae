"""Rotary embedding on a strided 4-D view x[B, H, S, D], of the first R = rotary_dim dims of
each head (the other D - R are copied), in rotate-half or interleaved form (RopeOp):
  rotate-half  out[i]    = x[i] * cos[i] - x[i+R/2] * sin[i]          (i < R/2)
               out[i+R/2] = x[i+R/2] * cos[i+R/2] + x[i] * sin[i+R/2]
  interleaved  out[2i]   = x[2i] * cos[2i] - x[2i+1] * sin[2i]
               out[2i+1] = x[2i+1] * cos[2i+1] + x[2i] * sin[2i+1]
Both are one computation over the pairs (a, b) of a position: (i, i+R/2) or (2i, 2i+1).

One program handles BLOCK_S positions of one (batch, head). Each element of x is loaded once
and both outputs of a pair come from the same registers, so x is read once and out written
once. Programs are ordered head-fastest, so the cos/sin rows of a position block stay hot in
L2 across heads. cos/sin are [S, R] tables (one for every sequence) or [B, S, R] (a generation
step: each sequence at its own positions). `rope_rows` is shared with the KV-write kernel.
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
def rope_rows(x_row, cos_row, sin_row, dst, ok, HALF: tl.constexpr, HALF_BLOCK: tl.constexpr,
              INTERLEAVED: tl.constexpr, PASS: tl.constexpr, PASS_BLOCK: tl.constexpr):
    """dst = rope(x) for rows of pointers ([rows, 1]; `ok` [rows]: which rows are real): the
    first 2*HALF dims rotated (f32 math, cast to dst's dtype), the next PASS copied. HALF = 0:
    a plain copy (cos_row/sin_row are then not read)."""
    ty = dst.dtype.element_ty
    if HALF > 0:
        dims = tl.arange(0, HALF_BLOCK)
        if INTERLEAVED:  # the pair of dim a is its neighbour
            a = 2 * dims
            b = a + 1
        else:  # the pair of dim a is R/2 further
            a = dims
            b = dims + HALF
        mask = ok[:, None] & (dims[None, :] < HALF)
        x1 = tl.load(x_row + a[None, :], mask=mask, other=0.0).to(tl.float32)
        x2 = tl.load(x_row + b[None, :], mask=mask, other=0.0).to(tl.float32)
        cos1 = tl.load(cos_row + a[None, :], mask=mask, other=0.0).to(tl.float32)
        cos2 = tl.load(cos_row + b[None, :], mask=mask, other=0.0).to(tl.float32)
        sin1 = tl.load(sin_row + a[None, :], mask=mask, other=0.0).to(tl.float32)
        sin2 = tl.load(sin_row + b[None, :], mask=mask, other=0.0).to(tl.float32)
        tl.store(dst + a[None, :], (x1 * cos1 - x2 * sin1).to(ty), mask=mask)
        tl.store(dst + b[None, :], (x2 * cos2 + x1 * sin2).to(ty), mask=mask)
    if PASS > 0:  # the dims after the rotated ones (partial rotary), as they are
        cols = 2 * HALF + tl.arange(0, PASS_BLOCK)
        keep = ok[:, None] & (cols[None, :] < 2 * HALF + PASS)
        tl.store(dst + cols[None, :], tl.load(x_row + cols[None, :], mask=keep).to(ty),
                 mask=keep)


@triton.jit
def rope_kernel(x_ptr, cos_ptr, sin_ptr, out_ptr,
                x_stride_b, x_stride_h, x_stride_s, cos_stride_b, cos_stride_s, sin_stride_b,
                sin_stride_s,
                out_stride_b, out_stride_h, out_stride_s, seq,
                HEADS: tl.constexpr, HALF: tl.constexpr, HALF_BLOCK: tl.constexpr,
                INTERLEAVED: tl.constexpr, PASS: tl.constexpr, PASS_BLOCK: tl.constexpr,
                BLOCK_S: tl.constexpr):
    batch_head = tl.program_id(0)
    batch = (batch_head // HEADS).to(tl.int64)
    head = (batch_head % HEADS).to(tl.int64)
    pos = (tl.program_id(1) * BLOCK_S + tl.arange(0, BLOCK_S)).to(tl.int64)
    x_row = x_ptr + batch * x_stride_b + head * x_stride_h + pos[:, None] * x_stride_s
    cos_row = cos_ptr + batch * cos_stride_b + pos[:, None] * cos_stride_s
    sin_row = sin_ptr + batch * sin_stride_b + pos[:, None] * sin_stride_s
    out_row = out_ptr + batch * out_stride_b + head * out_stride_h + pos[:, None] * out_stride_s
    rope_rows(x_row, cos_row, sin_row, out_row, pos < seq, HALF, HALF_BLOCK, INTERLEAVED, PASS,
              PASS_BLOCK)


def pair_consts(rot_dim: int, head_dim: int, interleaved: bool) -> dict:
    """The constexprs of rope_rows for R of D dims rotated."""
    passed = head_dim - rot_dim
    return {"HALF": Const(rot_dim // 2),
            "HALF_BLOCK": Const(triton.next_power_of_2(max(1, rot_dim // 2))),
            "INTERLEAVED": Const(bool(interleaved)), "PASS": Const(passed),
            "PASS_BLOCK": Const(triton.next_power_of_2(max(1, passed)))}


def default_config(head_dim: int) -> dict:
    # ~4K elements per program: enough bytes in flight per SM, few masked tail programs.
    return {"BLOCK_S": max(1, 4096 // head_dim), "num_warps": 4, "num_stages": 1}


def _check(op: RopeOp) -> None:
    b, h, s, d = op.x.shape
    r = op.rot_dim
    if r % 2 or not 0 < r <= d:
        raise ValueError(f"rope: rotary dim {r} is odd or outside (0, {d}]")
    tables = ((s, r), (b, s, r))
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
    args.update({"seq": int_arg(s), "HEADS": Const(h), "BLOCK_S": Const(block_s),
                 **pair_consts(op.rot_dim, d, op.interleaved)})
    return KernelPlan(rope_kernel, args, (b * h, cdiv(s, block_s), 1), cfg["num_warps"],
                      cfg["num_stages"], ("rope",), {"BLOCK_S": block_s})


# compile / run_plan_interpreted_here / run_jit, from plan() (see _common)
compile, run_plan_interpreted_here, run_jit = entry_points(plan)


def bytes_moved(op: RopeOp) -> int:
    b, h, s, d = op.x.shape
    return (op.x.numel * (op.x.dtype.nbytes + op.out.dtype.nbytes)
            + op.cos.numel * op.cos.dtype.nbytes + op.sin.numel * op.sin.dtype.nbytes)
