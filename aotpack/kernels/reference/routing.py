"""Torch references of the mixture-of-experts routing ops: TopkOp, SortOp, HistcOp,
InversePermOp; and of the row scatter (ScatterRowsOp: a KV cache's write)."""
from __future__ import annotations

from aotpack.kernels.reference import view, write
from aotpack.kernels.spec import HistcOp, InversePermOp, ScatterRowsOp, SortOp, TopkOp


def reference(op, env) -> None:
    import torch

    if isinstance(op, TopkOp):
        # torch.topk leaves the order of equal values open (the CPU's k=1 picks the last);
        # the kernel takes the first, as a stable sort does
        values, indices = view(env, op.x).float().sort(dim=-1, descending=op.largest,
                                                       stable=True)
        keep = indices if op.indices else values
        write(env, op.out, keep[..., :op.k])
    elif isinstance(op, SortOp):
        values, order = view(env, op.x).sort(dim=-1, descending=op.descending, stable=True)
        write(env, op.out, order if op.indices else values)
    elif isinstance(op, HistcOp):
        bins = op.out.shape[0]
        write(env, op.out, torch.histc(view(env, op.x).double(), bins, op.lo, op.hi))
    elif isinstance(op, InversePermOp):
        order = view(env, op.order).long()
        out = torch.empty_like(order)
        out[order] = torch.arange(order.numel())
        write(env, op.out, out)
    elif isinstance(op, ScatterRowsOp):
        from aotpack.ir.interpret import scatter_rows_reference

        scatter_rows_reference(view(env, op.out), view(env, op.rows), view(env, op.values),
                               op.reduce)
    else:
        raise TypeError(f"not a routing op: {type(op).__name__}")
