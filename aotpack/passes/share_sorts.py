"""One sort where a model asks for both results of the same sort.

`values, order = x.sort()` exports as two SORT nodes over x (one per result: ir/ops.py), each
its own O(n^2) ranking kernel. When both exist, the values are x gathered at the order:
x.view(n, 1)[order], a copy of n elements (transformers' MoE routing sorts its T*k expert
ids this way: two 20 us sorts of 4,096 ids at a 2,048-token Mixtral prefill become one sort
and a gather of a few us). Only sorts of one row (1-D, or leading dims all 1), where the
order indexes x directly.
"""
from __future__ import annotations

from aotpack.ir import ops as O
from aotpack.ir.graph import Graph, GraphBuilder, Node
from aotpack.ir.ops import Op


def share_sorts(graph: Graph) -> Graph:
    orders = {}  # (input, descending) -> the indices node
    for n in graph.nodes:
        if n.op == Op.SORT and n.attrs.indices and _one_row(n):
            orders.setdefault((n.inputs[0].name, n.attrs.descending), n)
    pairs = {n.output.name: orders[key] for n in graph.nodes
             if n.op == Op.SORT and not n.attrs.indices
             and (key := (n.inputs[0].name, n.attrs.descending)) in orders}
    if not pairs:
        return graph
    b = GraphBuilder(graph)
    emitted: set[str] = set()
    for n in graph.nodes:
        name = n.outputs[0].name
        order_node = pairs.get(name)
        if order_node is not None:
            if order_node.output.name not in emitted:  # the order first: the gather reads it
                b.keep(order_node)
                emitted.add(order_node.output.name)
            _gather(b, n, order_node)
        elif name not in emitted:
            b.keep(n)
            emitted.add(name)
    return b.finish()


def _one_row(n: Node) -> bool:
    return all(d == 1 for d in n.inputs[0].shape[:-1])


def _gather(b: GraphBuilder, values: Node, order_node: Node) -> None:
    """values := x.view(n, 1)[order].view(x.shape), as `values`' own output."""
    x = values.inputs[0]
    n = x.shape[-1]
    table = b.emit_inferred(Op.VIEW, [x], O.ViewAttrs((n, 1)), b.fresh(f"{x.name}_rows"),
                            values.loc)
    rows = b.emit_inferred(Op.EMBEDDING, [table, order_node.output], O.NoAttrs(),
                           b.fresh(f"{values.output.name}_gather"), values.loc)
    b.nodes.append(Node(Op.VIEW, (rows,), O.ViewAttrs(tuple(x.shape)), values.outputs,
                        values.loc))
