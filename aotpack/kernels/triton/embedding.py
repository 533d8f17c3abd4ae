"""Embedding lookup: out[i, :] = table[ids[i], :] (spec.EmbeddingOp).

One program copies ROWS rows of D elements. The ids are a 2-D view [R, C] read in row-major
order (flattened index i → ids[i // C, i % C]), so an expanded or sliced id tensor (position ids
broadcast over the batch) is read in place. An id outside [0, V) is clamped into the table: a
device-side error would poison the CUDA context, and torch's own check runs on the host.
"""
from __future__ import annotations

import triton
import triton.language as tl

from aotpack.ir.sym import decided
from aotpack.kernels.spec import EmbeddingOp
from aotpack.kernels.triton._common import (
    KernelPlan, entry_points, int_arg, require_unit_inner_stride,
)
from aotpack.kernels.triton.compile import Const, Ptr, cdiv


@triton.jit
def embedding_kernel(table_ptr, ids_ptr, out_ptr, n, vocab, table_stride, ids_stride_r,
                     ids_stride_c, out_stride, ids_cols, D: tl.constexpr,
                     BLOCK_D: tl.constexpr, ROWS: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < n
    id_offset = (rows // ids_cols).to(tl.int64) * ids_stride_r \
        + (rows % ids_cols).to(tl.int64) * ids_stride_c
    ids = tl.load(ids_ptr + id_offset, mask=row_ok, other=0).to(tl.int64)
    ids = tl.minimum(tl.maximum(ids, 0), vocab - 1)
    cols = tl.arange(0, BLOCK_D)
    mask = row_ok[:, None] & (cols[None, :] < D)
    x = tl.load(table_ptr + ids[:, None] * table_stride + cols[None, :], mask=mask)
    tl.store(out_ptr + rows[:, None].to(tl.int64) * out_stride + cols[None, :], x, mask=mask)


def _check(op: EmbeddingOp) -> None:
    (v, d), (r, c) = op.table.shape, op.ids.shape
    if op.out.shape != (r * c, d) or op.out.dtype != op.table.dtype:
        raise ValueError(f"embedding: out {op.out.shape} {op.out.dtype.value} does not match "
                         f"table {op.table.shape} {op.table.dtype.value} and ids {op.ids.shape}")
    if decided(lambda: r * c == 0, False):
        raise ValueError("embedding: no ids")
    if op.ids.dtype.value not in ("i32", "i64"):
        raise ValueError(f"embedding: ids are {op.ids.dtype.value}, not i32/i64")
    require_unit_inner_stride("embedding table", op.table)
    require_unit_inner_stride("embedding out", op.out)


def plan(op: EmbeddingOp, config: dict | None = None) -> KernelPlan:
    _check(op)
    (vocab, d), (r, c) = op.table.shape, op.ids.shape
    n = r * c
    block_d = triton.next_power_of_2(d)
    # ~4K elements per program, as the other row-wise templates
    rows = dict({"ROWS": max(1, 4096 // block_d), "num_warps": 4}, **(config or {}))
    args = {"table_ptr": Ptr(op.table), "ids_ptr": Ptr(op.ids), "out_ptr": Ptr(op.out),
            "n": int_arg(n), "vocab": int_arg(vocab), "table_stride": int_arg(op.table.strides[0]),
            "ids_stride_r": int_arg(op.ids.strides[0]), "ids_stride_c": int_arg(op.ids.strides[1]),
            "out_stride": int_arg(op.out.strides[0]), "ids_cols": int_arg(c), "D": Const(d),
            "BLOCK_D": Const(block_d), "ROWS": Const(rows["ROWS"])}
    return KernelPlan(embedding_kernel, args, (cdiv(n, rows["ROWS"]), 1, 1), rows["num_warps"], 1,
                      ("embedding",), {"ROWS": rows["ROWS"]})


# compile / run_plan_interpreted_here / run_jit, from plan() (see _common)
compile, run_plan_interpreted_here, run_jit = entry_points(plan)


def bytes_moved(op: EmbeddingOp) -> int:
    n, d = op.out.shape
    return n * d * (op.table.dtype.nbytes + op.out.dtype.nbytes) + n * op.ids.dtype.nbytes
