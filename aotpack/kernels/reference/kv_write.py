"""Torch reference of KvWriteOp: RopeOp's on the queries and the keys, ScatterRowsOp's of the
rotated keys and of the values into the caches."""
from __future__ import annotations

from aotpack.kernels.reference import view, write
from aotpack.kernels.reference.rope import rotate_half
from aotpack.kernels.spec import KvWriteOp


def _rope(env, x, op: KvWriteOp):
    cos, sin = view(env, op.cos).float(), view(env, op.sin).float()
    if cos.dim() == 3:  # [B, S, D]: per sequence, the same for every head
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    x = x.float()
    return x * cos + rotate_half(x) * sin


def reference(op: KvWriteOp, env) -> None:
    write(env, op.out, _rope(env, view(env, op.q), op))
    b, hkv, s, d = op.k.shape
    # the rotated keys as the row scatter saw them: token-major rows [B*S, Hkv*D], rounded
    # to the cache's dtype
    keys = _rope(env, view(env, op.k), op).permute(0, 2, 1, 3).reshape(b * s, hkv * d)
    rows = view(env, op.rows).long()
    k_cache, v_cache = view(env, op.k_cache), view(env, op.v_cache)
    inside = (rows >= 0) & (rows < k_cache.shape[0])
    k_cache[rows[inside]] = keys[inside].to(k_cache.dtype)
    v_cache[rows[inside]] = view(env, op.v)[inside].to(v_cache.dtype)
