"""Batched matmul of two computed operands (BmmOp): out[b] = a[b] @ b[b], f32 accumulation.

What fuse_attention cannot make an attention kernel (attention with a term between its two
products that is not a mask: BLOOM's ALiBi through baddbmm, relative-position biases added in
the model's own code) and any other product of two activations. A plain tiled Triton kernel
over strided views: grid (tiles of [M, N], batch); bf16/f16 on tensor cores, f32 in full
precision (as torch computes f32 matmuls by default: no TF32).
"""
from __future__ import annotations

import triton
import triton.language as tl

from aotpack.ir.sym import upper_bound
from aotpack.kernels.spec import BmmOp
from aotpack.kernels.triton._common import KernelPlan, entry_points, int_arg
from aotpack.kernels.triton.compile import Const, Ptr, cdiv


@triton.jit
def bmm_kernel(a_ptr, b_ptr, out_ptr, M, N, K,
               a_stride_b, a_stride_m, a_stride_k, b_stride_b, b_stride_k, b_stride_n,
               out_stride_b, out_stride_m, out_stride_n,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
               IEEE: tl.constexpr):
    tiles_n = tl.cdiv(N, BLOCK_N)
    pid = tl.program_id(0)
    batch = tl.program_id(1).to(tl.int64)
    rows = (pid // tiles_n) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = (pid % tiles_n) * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    a_base = a_ptr + batch * a_stride_b + rows[:, None] * a_stride_m
    b_base = b_ptr + batch * b_stride_b + cols[None, :] * b_stride_n
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for start in range(0, K, BLOCK_K):
        k = start + ks
        a = tl.load(a_base + k[None, :] * a_stride_k, mask=(rows[:, None] < M) & (k[None, :] < K),
                    other=0.0)
        b = tl.load(b_base + k[:, None] * b_stride_k, mask=(k[:, None] < K) & (cols[None, :] < N),
                    other=0.0)
        if IEEE:
            acc = tl.dot(a, b, acc, input_precision="ieee")
        else:
            acc = tl.dot(a, b, acc)
    out = out_ptr + batch * out_stride_b + rows[:, None] * out_stride_m + cols[None, :] * out_stride_n
    tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=(rows[:, None] < M) & (cols[None, :] < N))


def default_config(op: BmmOp) -> dict:
    """64x64 tiles (attention-sized products: S x T per head, D = 64..128), smaller when
    M or N is small (a decode row, a head dim of 32)."""
    _, m, n = op.out.shape
    bm = 64 if upper_bound(m) >= 64 else max(16, 1 << (upper_bound(m) - 1).bit_length())
    bn = 64 if upper_bound(n) >= 64 else max(16, 1 << (upper_bound(n) - 1).bit_length())
    return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": 32, "num_warps": 4, "num_stages": 3}


def plan(op: BmmOp, config: dict | None = None) -> KernelPlan:
    batch, m, n = op.out.shape
    k = op.a.shape[2]
    if op.a.shape[:2] != (batch, m) or tuple(op.b.shape) != (batch, k, n):
        raise ValueError(f"bmm: shapes a{op.a.shape} b{op.b.shape} out{op.out.shape}")
    if upper_bound(batch) >= 65536:
        raise ValueError(f"bmm: {batch} batches exceed the grid's second dim (65535)")
    cfg = dict(default_config(op), **(config or {}))
    args = {"a_ptr": Ptr(op.a), "b_ptr": Ptr(op.b), "out_ptr": Ptr(op.out),
            "M": int_arg(m), "N": int_arg(n), "K": int_arg(k)}
    for name, t, dims in (("a", op.a, "bmk"), ("b", op.b, "bkn"), ("out", op.out, "bmn")):
        args.update({f"{name}_stride_{d}": int_arg(s) for d, s in zip(dims, t.strides)})
    args.update({"BLOCK_M": Const(cfg["BLOCK_M"]), "BLOCK_N": Const(cfg["BLOCK_N"]),
                 "BLOCK_K": Const(cfg["BLOCK_K"]), "IEEE": Const(op.a.dtype.nbytes == 4)})
    grid = (cdiv(m, cfg["BLOCK_M"]) * cdiv(n, cfg["BLOCK_N"]), batch, 1)
    return KernelPlan(bmm_kernel, args, grid, cfg["num_warps"], cfg["num_stages"], ("bmm",),
                      {k: cfg[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K")})


# compile / run_plan_interpreted_here / run_jit, from plan() (see _common)
compile, run_plan_interpreted_here, run_jit = entry_points(plan)
