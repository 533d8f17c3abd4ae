"""Torch reference of ReduceOp (f32 accumulation over the last dim of a 2-D view; integer and
bool rows in int64)."""
from __future__ import annotations

from aotpack.kernels.reference import view, write
from aotpack.kernels.spec import ReduceOp


def reference(op: ReduceOp, env) -> None:
    x = view(env, op.x)
    x = x.float() if x.is_floating_point() or op.kind in ("mean", "argmax") else x.long()
    if op.kind == "sum":
        y = x.sum(-1)
    elif op.kind == "mean":
        y = x.mean(-1)
    elif op.kind == "amax":
        y = x.amax(-1)
    elif op.kind == "amin":
        y = x.amin(-1)
    elif op.kind == "argmax":
        y = x.argmax(-1)
    else:
        raise ValueError(f"unknown reduction {op.kind!r}")
    write(env, op.out, y)
