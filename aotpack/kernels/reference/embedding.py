"""Torch reference of EmbeddingOp (rows of a table picked by integer ids)."""
from __future__ import annotations

from aotpack.kernels.reference import view, write
from aotpack.kernels.spec import EmbeddingOp


def reference(op: EmbeddingOp, env) -> None:
    table = view(env, op.table)
    ids = view(env, op.ids).reshape(-1).long().clamp(0, table.shape[0] - 1)
    write(env, op.out, table[ids])
