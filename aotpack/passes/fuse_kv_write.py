"""A decoder layer's KV write as one kernel op (KvWriteOp): the query's RopeOp, the key's
RopeOp, and the two ScatterRowsOps that store the rotated keys and the values into the KV
cache become one launch.

Found from the attention that reads them, so each layer's four ops pair up even though every
layer shares the same cos/sin and cache rows:
  AttentionOp(q = RopeOp_q.out, k = view of cache_k, v = view of cache_v), where
  cache_k's last writer before it is ScatterRowsOp(rows, RopeOp_k.out as token rows),
  cache_v's is ScatterRowsOp(rows, v), and both ropes use the same cos/sin.
The two ropes must agree on their form (rotate-half or interleaved, rotary_dim). The rotated
queries and keys must be read by nothing else (the keys only through the scatter's token-row
view of them), and each of the four must be free to move to where the last of them ran (the
fused op runs there): nothing in between may write what it reads, or read or write what it
writes.
A layer without rope (SmolLM3's NoPE layers, learned positions) has only the two scatters,
cache_k's storing the projected keys as they are: they become a KvWriteOp without q/cos/sin,
the keys seen as [B, Hkv, S, D] through the scatter's token rows.
"""
from __future__ import annotations

import logging

from aotpack.kernels.spec import (
    AttentionOp, KvWriteOp, RopeOp, ScatterRowsOp, TensorArg, op_outputs,
)
from aotpack.passes.op_motion import free_to_move, reads, writes

log = logging.getLogger(__name__)


def fuse_kv_write(ops: list, storages: dict) -> list:
    """`ops` with every matching layer's four ops replaced by one KvWriteOp; the rotated keys'
    storages, now unused, are removed from `storages`."""
    fused, i = 0, 0
    while i < len(ops):
        match = _match(ops, i, storages) if isinstance(ops[i], AttentionOp) else None
        if match is not None:
            group, op = match
            last = max(group)
            if op.rotates:
                del storages[ops[group[1]].out.storage]  # the rotated keys: no longer written
            ops = [op if j == last else o for j, o in enumerate(ops)
                   if j == last or j not in group]
            fused += 1
            i -= len(group) - 1  # the attention moved up by the ops removed before it
        i += 1
    if fused:
        log.debug("fuse_kv_write: %d layers' rope + cache writes fused", fused)
    return ops


def _writer_before(ops: list, index: int, storage: str):
    """(i, op) of the last op before `index` writing `storage`, or None."""
    for i in range(index - 1, -1, -1):
        if storage in writes(ops[i]):
            return i, ops[i]
    return None


def _match(ops: list, att_index: int, storages: dict):
    """((q rope, k rope, k scatter, v scatter indices) or, without rope, (k scatter, v
    scatter), the KvWriteOp) for the attention at `att_index`, or None."""
    att = ops[att_index]
    found = [_writer_before(ops, att_index, t.storage) for t in (att.k, att.v)]
    if None in found:
        return None
    (isk, sk), (isv, sv) = found
    iq, rq = _writer_before(ops, att_index, att.q.storage) or (None, None)  # (None: an input)
    if not (isinstance(sk, ScatterRowsOp) and isinstance(sv, ScatterRowsOp) and isk != isv
            and sk.rows == sv.rows):
        return None
    if (sk.reduce, sv.reduce) != ("none", "none"):  # accumulating writes: not a cache store
        return None
    wk = _writer_before(ops, isk, sk.values.storage)
    if not isinstance(rq, RopeOp):
        if wk is not None and isinstance(wk[1], RopeOp):
            return None  # rotated keys but not queries: not a layer we know
        return _match_unrotated(ops, att, (isk, isv))
    if wk is None or not isinstance(wk[1], RopeOp):
        return None
    ik, rk = wk
    if (rq.cos, rq.sin) != (rk.cos, rk.sin) or not _token_rows(rk.out, sk.values):
        return None
    if (rq.interleaved, rq.rot_dim) != (rk.interleaved, rk.rot_dim):
        return None
    if rk.out.dtype != sk.out.dtype or storages[rk.out.storage].kind != "intermediate":
        return None
    group = (iq, ik, isk, isv)
    if len(set(group)) != 4 or not _only_reader(ops, rk.out.storage, isk) or \
            not _only_reader(ops, rq.out.storage, att_index):
        return None
    if not _nothing_between(ops, group) or _writers(ops, rk.out.storage) != [ik]:
        return None  # (the rotated keys' storage goes with the ops: nothing else may write it)
    op = KvWriteOp(q=rq.x, k=rk.x, v=sv.values, cos=rq.cos, sin=rq.sin, rows=sk.rows,
                   out=rq.out, k_cache=sk.out, v_cache=sv.out, interleaved=rq.interleaved,
                   rotary_dim=rq.rotary_dim)
    return _checked(ops, group, op)


def _match_unrotated(ops: list, att, group: tuple):
    """(the two scatters' indices, a KvWriteOp without rope) for an attention whose queries
    are not rotated, or None. The keys [B, Hkv, S, D] are the scatter's token rows
    [B*S, Hkv*D]: (b, h, s, d) at row b*S + s, column h*D + d."""
    sk, sv = ops[group[0]], ops[group[1]]
    b, _, s, _ = att.q.shape
    hkv, d = att.k.shape[1], att.k.shape[3]
    values = sk.values
    if tuple(values.shape) != (b * s, hkv * d) or not _nothing_between(ops, group):
        return None
    row, col = values.strides
    keys = TensorArg(values.storage, values.dtype, (b, hkv, s, d), (s * row, d * col, row, col),
                     values.offset)
    op = KvWriteOp(q=None, k=keys, v=sv.values, cos=None, sin=None, rows=sk.rows, out=None,
                   k_cache=sk.out, v_cache=sv.out)
    return _checked(ops, group, op)


def _checked(ops: list, group: tuple, op: KvWriteOp):
    """(group, op) if one kernel can do what the group's ops did, else None."""
    written = writes(op)
    if reads(op) & written or len(written) != len(op_outputs(op)):
        return None  # one kernel reads and writes at once: no operand may be written
    from aotpack.kernels.triton import kv_write

    try:  # shapes/strides the kernel takes (anything else keeps its four ops)
        kv_write.check(op)
    except ValueError:
        return None
    return group, op


def _writers(ops: list, storage: str) -> list[int]:
    return [i for i, op in enumerate(ops) if storage in writes(op)]


def _token_rows(rot, values) -> bool:
    """The scatter's values [B*S, Hkv*D] are the rotated keys [B, Hkv, S, D] by token:
    element (b, h, s, d) sits at row b*S + s, column h*D + d."""
    b, h, s, d = rot.shape
    if tuple(values.shape) != (b * s, h * d) or rot.storage != values.storage:
        return False
    row, col = values.strides
    return (rot.offset == values.offset and
            tuple(rot.strides) == (s * row, d * col, row, col))


def _only_reader(ops: list, storage: str, reader: int) -> bool:
    """Nothing but ops[reader] reads `storage`."""
    return all(i == reader or storage not in reads(op) for i, op in enumerate(ops))


def _nothing_between(ops: list, group: tuple) -> bool:
    """Each op of the group can move to the group's last index: no op between its place and
    there (the group's own aside) writes what it reads, or reads or writes what it writes."""
    last = max(group)
    return all(free_to_move(ops, ops[i], i, last, skip=group) for i in group)
