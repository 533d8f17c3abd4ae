"""Softmax over the last dim of a 2-D view: out = softmax(x * scale), f32 math, stable
(the row max is subtracted before exp; a row of -inf gives NaN like torch); with LOG,
out = x * scale - (max + log(sum(exp(x * scale - max)))).

Whole rows in registers (C <= 16384): one read of x. Longer rows (vocabularies) use the online
form: pass 1 keeps a per-lane running max and rescaled sum over 4096-column chunks (combined
once at the end), pass 2 re-reads x, writes exp(x - max) / sum. See _rowwise.py.
"""
from __future__ import annotations

import triton
import triton.language as tl

from aotpack.kernels.spec import SoftmaxOp
from aotpack.kernels.triton import _rowwise as rw
from aotpack.kernels.triton._common import KernelPlan, entry_points, int_arg
from aotpack.kernels.triton._rowwise_jit import load_chunk, row_block, store_chunk
from aotpack.kernels.triton.compile import F32, Const, Ptr, cdiv


@triton.jit
def softmax_kernel(x_ptr, out_ptr, x_stride_r, x_stride_c, out_stride_r, out_stride_c,
                   n_rows, n_cols, scale,
                   BLOCK_C: tl.constexpr, ROWS: tl.constexpr, LOOP: tl.constexpr,
                   HAS_SCALE: tl.constexpr, LOG: tl.constexpr):
    rows, row_mask = row_block(n_rows, ROWS)
    cols = tl.arange(0, BLOCK_C)
    x_row = x_ptr + rows[:, None] * x_stride_r
    out_row = out_ptr + rows[:, None] * out_stride_r
    if not LOOP:
        x, mask = load_chunk(x_row, x_stride_c, row_mask, cols, n_cols)
        if HAS_SCALE:
            x = x * scale
        x = tl.where(mask, x, float("-inf"))
        m = tl.max(x, 1)
        e = tl.where(mask, tl.exp(x - m[:, None]), 0.0)
        if LOG:
            y = x - (m + tl.log(tl.sum(e, 1)))[:, None]
        else:
            y = e / tl.sum(e, 1)[:, None]
        store_chunk(out_row, out_stride_c, cols, y, mask)
    else:
        # online max/sum per lane in one pass, combined across lanes, then one writing pass
        m_vec = tl.full([ROWS, BLOCK_C], float("-inf"), dtype=tl.float32)
        s_vec = tl.zeros([ROWS, BLOCK_C], dtype=tl.float32)
        for start in range(0, n_cols, BLOCK_C):
            x, mask = load_chunk(x_row, x_stride_c, row_mask, start + cols, n_cols)
            if HAS_SCALE:
                x = x * scale
            x = tl.where(mask, x, float("-inf"))
            m_new = tl.maximum(m_vec, x)
            live = m_new != float("-inf")  # lanes that have seen a finite value
            s_vec = (s_vec * tl.where(live, tl.exp(m_vec - m_new), 0.0)
                     + tl.where(live, tl.exp(x - m_new), 0.0))
            m_vec = m_new
        m = tl.max(m_vec, 1)
        s = tl.sum(tl.where(m_vec != float("-inf"), s_vec * tl.exp(m_vec - m[:, None]), 0.0), 1)
        inv = 1.0 / s
        lse = m + tl.log(s)
        for start in range(0, n_cols, BLOCK_C):
            c = start + cols
            x, mask = load_chunk(x_row, x_stride_c, row_mask, c, n_cols)
            if HAS_SCALE:
                x = x * scale
            if LOG:
                y = x - lse[:, None]
            else:
                y = tl.exp(x - m[:, None]) * inv[:, None]
            store_chunk(out_row, out_stride_c, c, y, mask)


def plan(op: SoftmaxOp, config: dict | None = None) -> KernelPlan:
    rows, cols = rw.check_2d("softmax x", op.x)
    if op.out.shape != op.x.shape:
        raise ValueError(f"softmax: out {op.out.shape} != x {op.x.shape}")
    cfg = rw.config(rows, cols, config)
    has_scale = op.scale != 1.0
    args = {
        "x_ptr": Ptr(op.x), "out_ptr": Ptr(op.out),
        **rw.view_args("x", op.x), **rw.view_args("out", op.out),
        "n_rows": int_arg(rows), "n_cols": int_arg(cols),
        "scale": F32(op.scale) if has_scale else Const(1.0),
        "BLOCK_C": Const(cfg["BLOCK_C"]), "ROWS": Const(cfg["ROWS"]), "LOOP": Const(cfg["LOOP"]),
        "HAS_SCALE": Const(has_scale), "LOG": Const(op.log),
    }
    grid = (cdiv(rows, cfg["ROWS"]), 1, 1)
    name = "log_softmax" if op.log else "softmax"
    fused = ("scale", name) if has_scale else (name,)
    return KernelPlan(softmax_kernel, args, grid, cfg["num_warps"], cfg["num_stages"], fused,
                      rw.plan_config(cfg))


# compile / run_plan_interpreted_here / run_jit, from plan() (see _common)
compile, run_plan_interpreted_here, run_jit = entry_points(plan)


def bytes_moved(op: SoftmaxOp) -> int:
    return op.x.numel * (op.x.dtype.nbytes + op.out.dtype.nbytes)
