"""Common subexpressions: a node computing what an earlier node computed (same op, same
inputs, same attrs) is dropped and its readers read the earlier value.

Frontends emit the same small computations once per layer: a generation step's cache rows
(batch row * max_seq_len + position, for each layer's K and V), a mask compare, a cast of the
positions. Each would be a kernel launch per layer; after this pass it is one per step.
The IR is pure (every node a function of its inputs), so merging never changes a result.
Equal small integer and bool constants count as one input (a frontend rule adds its helper
constant, e.g. the -1 of a skipped cache row, once per call).
Only integer and bool values are merged (indices, masks, positions): a float value computed
twice is often two parts of two fused kernels (a cast absorbed by each reduction that reads
it, a mean inside a layer norm's pattern), which one shared value would split apart.
"""
from __future__ import annotations

from aotpack.ir.graph import Graph, GraphBuilder


_SMALL = 4096  # elements of a constant compared by value


def _constant_names(graph: Graph) -> dict[str, str]:
    """Each small integer or bool constant's name -> the first equal constant's name."""
    first: dict[tuple, str] = {}
    alias = {}
    for name, c in graph.constants.items():
        t = c.tensor
        if t.dtype.is_floating_point or t.is_complex() or t.numel() > _SMALL or \
                t.device.type != "cpu":
            continue
        key = (c.value.dtype, tuple(c.value.shape), str(t.dtype), tuple(t.shape),
               t.contiguous().numpy().tobytes())
        alias[name] = first.setdefault(key, name)
    return alias


def cse(graph: Graph) -> Graph:
    b = GraphBuilder(graph)
    seen: dict[tuple, object] = {}
    alias = _constant_names(graph)
    for n in graph.nodes:
        node = b.keep(n)
        if any(v.dtype.is_float for v in node.outputs):
            continue
        try:
            key = (n.op, tuple(alias.get(v.name, v.name) for v in node.inputs), node.attrs,
                   tuple((v.dtype, tuple(v.shape)) for v in node.outputs))
            hash(key)
        except TypeError:  # attrs holding something unhashable: keep the node as it is
            continue
        first = seen.get(key)
        if first is None:
            seen[key] = node
            continue
        b.nodes.pop()
        for old, new in zip(node.outputs, first.outputs):
            b.replace(old, new)
    return b.finish().verify()
