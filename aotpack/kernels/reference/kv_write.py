"""Torch reference of KvWriteOp: RopeOp's on the queries and the keys (none for a layer
without rope), ScatterRowsOp's of the (rotated) keys and of the values into the caches."""
from __future__ import annotations

from aotpack.kernels.reference import view, write
from aotpack.kernels.reference.rope import rotated
from aotpack.kernels.spec import KvWriteOp


def reference(op: KvWriteOp, env) -> None:
    if op.rotates:
        write(env, op.out, rotated(env, op.q, op.cos, op.sin, op.interleaved, op.rotary_dim))
        keys = rotated(env, op.k, op.cos, op.sin, op.interleaved, op.rotary_dim)
    else:
        keys = view(env, op.k)
    b, hkv, s, d = op.k.shape
    # the keys as the row scatter saw them: token-major rows [B*S, Hkv*D], rounded to the
    # cache's dtype
    keys = keys.permute(0, 2, 1, 3).reshape(b * s, hkv * d)
    rows = view(env, op.rows).long()
    k_cache, v_cache = view(env, op.k_cache), view(env, op.v_cache)
    inside = (rows >= 0) & (rows < k_cache.shape[0])
    k_cache[rows[inside]] = keys[inside].to(k_cache.dtype)
    v_cache[rows[inside]] = view(env, op.v)[inside].to(v_cache.dtype)
