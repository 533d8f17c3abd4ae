"""Attention masks as fuse_attention reads them: a constant mask classified as sdpa masks are
(none / causal / anything else: aten_table._constant_mask_kind, at several sizes when it
follows dynamic dims), and a mask computed from the constant causal mask and a run-time one
split into the kernel's causal flag and the run-time part (causal_part)."""
from __future__ import annotations

import dataclasses

from aotpack.dtypes import DType
from aotpack.ir import ops as O
from aotpack.ir.graph import GraphBuilder, Node, Value
from aotpack.ir.ops import Op
from aotpack.ir.sym import free_symbols, subs_tree

_PROBES = (2, 3, 5, 7, 11, 13)


def split_sdpa_mask(graph, b: GraphBuilder, n: Node, producers, without_causal) -> int:
    """An SDPA the frontend made (sdpa's attn_mask) whose mask has a causal part: the same
    split as for written-out attention. 1 if it was rewritten."""
    q, k, v, mask = n.inputs
    split = causal_part(graph, mask, producers, q.shape[2], k.shape[2])
    if split is None:
        b.keep(n)
        return 0
    if mask.name not in without_causal:
        without_causal[mask.name] = rebuild(b, *split)
    attrs = dataclasses.replace(n.attrs, causal=True)
    ins = (b.get(q), b.get(k), b.get(v), without_causal[mask.name])
    b.nodes.append(Node(Op.SDPA, ins, attrs, n.outputs, n.loc))
    return 1


def causal_part(graph, mask: Value, producers, seq_q, seq_k):
    """A mask computed from a constant causal mask c and another (a padding mask), f(c ∧ m):
    ∧ a product of 0/1 keeps whose one side is a bool constant cast (And of two masks), or a
    sum of additive masks; f elementwise ops of one operand (casts, the scalar arithmetic or
    log of Where(keep, 0, fill)). Returns (the ops of f from the inside out, m) so that the
    attention kernel applies the causal part itself (its causal flag masks what c masks;
    where c keeps, f(c ∧ m) is f(m)) and reads m, [B, 1, 1, T], instead of a [B, 1, S, T]
    mask computed every run. None if the mask is not of that form."""
    path, v = [], mask
    for _ in range(16):
        n = producers.get(v.name)
        if n is None or n.op not in O.ELEMENTWISE:
            return None
        if len(n.inputs) == 2 and n.op in (Op.MUL, Op.ADD, Op.AND) and n.attrs.scalar is None:
            for c, other in (n.inputs, n.inputs[::-1]):
                if _is_causal(graph, c, producers, n.op, seq_q, seq_k):
                    masked = 0.0 if n.op in (Op.MUL, Op.AND) else lowest(
                        graph, c, producers, seq_q, seq_k)
                    ok = other.dtype == n.output.dtype and len(other.shape) <= 4 \
                        and _hides_rows(path[::-1], n.output.dtype, masked)
                    return (path[::-1], other) if ok else None
            return None
        if len(n.inputs) != 1:
            return None
        path.append(n)
        v = n.inputs[0]
    return None


def _is_causal(graph, c: Value, producers, op: Op, seq_q, seq_k) -> bool:
    if op == Op.MUL:  # keeps as 0/1: the causal side a cast of a bool constant
        cast = producers.get(c.name)
        if cast is None or cast.op != Op.CAST or cast.inputs[0].dtype != DType.BOOL:
            return False
        c = cast.inputs[0]
    return mask_kind(graph, c, producers, seq_q, seq_k) == "causal"


def lowest(graph, c: Value, producers, seq_q, seq_k) -> float:
    """The most negative entry of an additive constant mask (what it masks with)."""
    return min(float(t.float().min()) for _, t in _samples(graph, c, producers, seq_q, seq_k))


def _hides_rows(path: list[Node], dtype: DType, masked: float) -> bool:
    """Whether what the causal part masks reaches the kernel as -inf or False: then a row
    masked everywhere gives zeros whether the kernel or the mask masks its future keys. A
    finite fill (finfo.min) would average a row masked everywhere over all keys, which the
    split would change to the past keys only."""
    import torch

    from aotpack.ir.interpret import eval_node

    t = torch.full((1,), masked, dtype=dtype.to_torch())
    for n in path:
        t = eval_node(n, [t])
    if t.dtype == torch.bool:
        return not bool(t.item())
    return t.is_floating_point() and t.item() == float("-inf")


def rebuild(b: GraphBuilder, path: list[Node], other: Value) -> Value:
    """The ops of `path` applied to `other` (new nodes: the old chain may have other readers
    and dies with the dead code otherwise)."""
    v = b.get(other)
    for n in path:
        v = b.emit_inferred(n.op, [v], n.attrs, f"{n.output.name}_nc", n.loc)
    return v


def const_base(graph, v: Value, producers):
    """(constant name, nodes from it to v) if v is a constant seen through views and
    elementwise ops of one operand (a mask made from a constant: cast, log(1 - keep), ...)."""
    chain = []
    while v.name not in graph.constants:
        node = producers.get(v.name)
        if node is None or not (node.op in O.LAYOUT or (node.op in O.ELEMENTWISE
                                                          and len(node.inputs) == 1)):
            return None
        chain.append(node)
        v = node.inputs[0]
    return v.name, chain[::-1]


class _Samples:
    """What aten_table._constant_mask_kind asks of its context: the mask's values at points."""

    def __init__(self, samples):
        self.samples = samples

    def constant_samples(self, mask):
        return self.samples


def mask_kind(graph, mask: Value, producers, seq_q, seq_k) -> str | None:
    from aotpack.frontend.aten_table import _constant_mask_kind

    samples = _samples(graph, mask, producers, seq_q, seq_k)
    if samples is None:
        return None
    return _constant_mask_kind(_Samples(samples), mask, seq_q, seq_k)


def _samples(graph, mask: Value, producers, seq_q, seq_k) -> list | None:
    """[(point, the constant mask's value there)], None if it is not a constant."""
    from aotpack.ir.interpret import eval_node

    found = const_base(graph, mask, producers)
    if found is None:
        return None
    name, chain = found
    base = graph.constants[name].tensor
    if base.is_meta:
        return None
    samples = []
    for point in _points(mask, seq_q, seq_k):
        t = base
        for node in chain:
            t = eval_node(dataclasses.replace(node, attrs=subs_tree(node.attrs, point)), [t])
        samples.append((point, t))
    return samples


def _points(mask: Value, seq_q, seq_k) -> list[dict]:
    """Where a mask that follows dynamic dims is checked: every dim at its minimum, at small
    values, and each alone at its maximum ({} for a static mask)."""
    syms = sorted(free_symbols(tuple(mask.shape)) | free_symbols((seq_q, seq_k)),
                  key=lambda s: s.name)
    if not syms:
        return [{}]
    points = [{s.name: s.lo for s in syms}]
    for k in range(0, len(_PROBES), 2):
        points.append({s.name: min(max(_PROBES[k + i % 2] + i // 2, s.lo), s.hi)
                       for i, s in enumerate(syms)})
    for s in syms:
        points.append({t.name: (t.hi if t is s else t.lo) for t in syms})
    return [p for i, p in enumerate(points) if p not in points[:i]]
