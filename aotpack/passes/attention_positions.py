"""An attention mask computed from the queries' positions, `keys <= positions[b, s]` (and
`keys > positions[b, s] - window`), becomes the positions themselves (SdpaAttrs.positions):
the kernel reads B*S positions instead of a [B, 1, S, T] mask, and loops only over the keys a
block of queries can see. A generation step's mask over its KV cache (docs/generation.md)
has this form; so has any model that builds its causal mask from position ids.
"""
from __future__ import annotations

import dataclasses

from aotpack.ir import ops as O
from aotpack.ir.graph import Graph, GraphBuilder, Node, Value
from aotpack.ir.ops import Op


def rewrite_positional(graph: Graph, b: GraphBuilder, n: Node, producers) -> bool:
    """Emit `n` (an SDPA with a mask operand) reading positions if its mask has the form;
    False (nothing emitted) otherwise."""
    q, k, v, mask = n.inputs
    found = _positional(graph, mask, producers, k.shape[2])
    if found is None:
        return False
    view, window = found
    base = view.inputs[0]
    a = view.attrs
    if (a.shape[0], a.shape[2]) != (q.shape[0], q.shape[2]):
        return False  # positions shared by the batch, or one per sequence: the mask path
    positions = b.emit(Op.AS_STRIDED, [b.get(base)],
                       O.StridedAttrs((a.shape[0], a.shape[2]), (a.strides[0], a.strides[2]),
                                      a.offset),
                       base.dtype, (a.shape[0], a.shape[2]), f"{mask.name}_positions", n.loc)
    attrs = dataclasses.replace(n.attrs, positions=True, window=window)
    b.nodes.append(Node(Op.SDPA, (b.get(q), b.get(k), b.get(v), positions), attrs,
                        n.outputs, n.loc))
    return True


def _positional(graph, mask: Value, producers, keys: int):
    """(the view of the positions [B, 1, S, 1], window) or None."""
    mask = _additive_of(graph, mask, producers) or mask
    if mask.dtype.value != "bool" or len(mask.shape) != 4 or not isinstance(keys, int):
        return None
    n = producers.get(mask.name)
    if n is not None and n.op == Op.AND and len(n.inputs) == 2:
        for seen, recent in (n.inputs, n.inputs[::-1]):
            base = _seen(graph, seen, producers, keys)
            w = base is not None and _window(graph, recent, producers, keys, base)
            if w:
                return base, w
        return None
    base = _seen(graph, mask, producers, keys)
    return None if base is None else (base, 0)


def _additive_of(graph, mask: Value, producers) -> Value | None:
    """The bool mask m (True: seen) when `mask` is its additive form, 0 where m holds and
    the dtype's lowest value (or -inf) elsewhere: where(~m, lowest, 0) or where(m, 0,
    lowest), as transformers' eager mask, and the generation step for models with their own
    attention code, write it. Every row sees key 0 (t <= position), so the two agree."""
    import torch

    from aotpack.passes.attention_terms import scalar_constant

    n = producers.get(mask.name)
    if n is None or n.op != Op.WHERE or len(n.inputs) != 3 or not mask.dtype.is_float:
        return None
    cond, a, b = n.inputs
    a, b = (scalar_constant(graph, v) for v in (a, b))
    if a is None or b is None:
        return None
    lowest = torch.finfo(mask.dtype.to_torch()).min
    inverted = producers.get(cond.name)
    if a <= lowest and b == 0 and inverted is not None and inverted.op == Op.NOT:
        return inverted.inputs[0]
    return cond if a == 0 and b <= lowest else None


def _seen(graph, v: Value, producers, keys: int):
    """The positions view p of `v = arange(T) <= p`, or None."""
    n = producers.get(v.name)
    if n is None or n.op != Op.LE or len(n.inputs) != 2 or n.attrs.scalar is not None:
        return None
    iota, p = n.inputs
    return _positions_view(p, producers) if _is_key_iota(graph, iota, producers, keys) else None


def _window(graph, v: Value, producers, keys: int, positions: Node) -> int:
    """w if `v = arange(T) > p - w` over the same positions, else 0."""
    n = producers.get(v.name)
    if n is None or n.op != Op.GT or len(n.inputs) != 2 or n.attrs.scalar is not None:
        return 0
    iota, lower = n.inputs
    sub = producers.get(lower.name)
    if (not _is_key_iota(graph, iota, producers, keys) or sub is None or sub.op != Op.SUB
            or not isinstance(sub.attrs.scalar, int) or sub.attrs.scalar_first
            or sub.attrs.scalar <= 0):
        return 0
    view = _positions_view(sub.inputs[0], producers)
    same = view is not None and view.inputs[0] == positions.inputs[0] and \
        view.attrs == positions.attrs
    return int(sub.attrs.scalar) if same else 0


def _positions_view(p: Value, producers) -> Node | None:
    """The AS_STRIDED node viewing an integer [B, S] tensor as [B, 1, S, 1]."""
    n = producers.get(p.name)
    if n is None or n.op != Op.AS_STRIDED or len(p.shape) != 4:
        return None
    if p.shape[1] != 1 or p.shape[3] != 1 or p.dtype.value not in ("i64", "i32"):
        return None
    return n


def _is_key_iota(graph, v: Value, producers, keys: int) -> bool:
    """v is a constant that broadcasts as [1, 1, 1, T] holding 0..T-1."""
    import torch

    from aotpack.ir.interpret import eval_node
    from aotpack.passes.attention_masks import const_base

    found = const_base(graph, v, producers)
    if found is None:
        return False
    name, chain = found
    t = graph.constants[name].tensor
    if getattr(t, "is_meta", False):
        return False
    for node in chain:
        t = eval_node(node, [t])
    if t.dim() != 4 or tuple(t.shape[:3]) != (1, 1, 1) or t.shape[3] != keys:
        return False
    return bool(torch.equal(t.reshape(-1).long(), torch.arange(keys)))
