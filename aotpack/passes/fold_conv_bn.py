"""Fold per-channel affine maps into the convolution before them (inference batch norm).

CONV → [+ bias b] → * s → [+ t], with b, s, t constants per output channel (shape [OC] after
leading ones, or s a Python number) and every intermediate read only by the next, becomes
CONV with weight w * s → + (b * s + t): batch norm costs nothing at run time. The products are
computed in f64 from the statistics' exact values (Constant.exact, kept by the frontend and
channels_last) and rounded once, to the weight's dtype.
Runs after canonicalize (constants are plain; a weight may be reached through a view of a
constant, e.g. a Conv1d's weight viewed as [OC, C, 1, K]).
"""
from __future__ import annotations

from aotpack.ir import ops as O
from aotpack.ir.graph import Graph, GraphBuilder, Node, Value
from aotpack.ir.ops import Op


def fold_conv_bn(graph: Graph) -> Graph:
    users = graph.users()
    producers = graph.producers()
    outputs = graph.output_names()
    plans = {}
    for n in graph.nodes:
        if n.op == Op.CONV:
            plan = _plan(n, graph, users, producers, outputs)
            if plan is not None:
                plans[n.output.name] = plan
    if not plans:
        return graph
    return _rewrite(graph, plans, producers)


def constant_tensor(v: Value, graph: Graph, producers, exact: bool = False):
    """The tensor of a constant, or of views of one (replayed); None if computed at run time.
    `exact`: the constant's value before rounding where the frontend kept it."""
    from aotpack.ir.interpret import eval_node

    chain = []
    while v.name not in graph.constants:
        n = producers.get(v.name)
        if n is None or n.op not in O.LAYOUT:
            return None
        chain.append(n)
        v = n.inputs[0]
    const = graph.constants[v.name]
    t = const.exact if exact and const.exact is not None else const.tensor
    if t.is_meta:
        return None
    for n in reversed(chain):
        t = eval_node(n, [t])
    return t


def _channel_vector(n: Node, x: Value, graph, producers, oc: int):
    """The per-channel constant operand of the binary node n (other than x), as [OC] f32."""
    if n.attrs.scalar is not None:
        if n.op == Op.MUL or (n.op == Op.ADD and not n.attrs.scalar_first):
            import torch

            return torch.full((oc,), float(n.attrs.scalar), dtype=torch.float32)
        return None
    if len(n.inputs) != 2 or n.inputs[0] == n.inputs[1] or n.output.shape != x.shape:
        return None
    other = n.inputs[1] if n.inputs[0] == x else n.inputs[0]
    dims = [d for d in other.shape]
    while dims and dims[0] == 1:
        dims.pop(0)
    if dims not in ([oc], []):
        return None
    t = constant_tensor(other, graph, producers, exact=True)
    if t is None:
        return None
    return t.double().reshape(-1).expand(oc).clone()


def _plan(conv: Node, graph, users, producers, outputs):
    """(steps folded [(kind, node, vector)], the last node) or None when no multiply folds."""
    w = constant_tensor(conv.inputs[1], graph, producers)
    if w is None:
        return None
    oc = w.shape[0]
    steps, value = [], conv.output
    for kind in ("bias", "scale", "shift"):
        us = users.get(value.name, [])
        if value.name in outputs or len(us) != 1:
            break
        n = us[0]
        want = Op.MUL if kind == "scale" else Op.ADD
        if n.op != want or (kind == "bias" and steps):
            continue
        vec = _channel_vector(n, value, graph, producers, oc)
        if vec is None:
            break
        steps.append((kind, n, vec))
        value = n.output
    if not any(kind == "scale" for kind, _, _ in steps):
        return None
    return w, steps


def _rewrite(graph, plans, producers) -> Graph:
    import torch

    b = GraphBuilder(graph)
    dropped = {}
    for name, (w, steps) in plans.items():
        for _, n, _ in steps:
            dropped[n.output.name] = name
    for n in graph.nodes:
        if n.output.name in dropped:
            continue
        if n.output.name not in plans:
            b.keep(n)
            continue
        w, steps = plans[n.output.name]
        scale = torch.ones(w.shape[0], dtype=torch.float64)
        shift = torch.zeros(w.shape[0], dtype=torch.float64)
        for kind, _, vec in steps:
            if kind == "scale":
                scale, shift = scale * vec, shift * vec
            else:
                shift = shift + vec
        w_dtype = n.inputs[1].dtype
        new_w = (w.double() * scale.reshape(-1, 1, 1, 1)).to(w_dtype.to_torch()).contiguous()
        wv = b.add_constant(f"{n.inputs[1].name}.folded", new_w, w_dtype)
        x = b.get(n.inputs[0])
        b.release(n.output.name)
        y = b.emit(Op.CONV, [x, wv], n.attrs, n.output.dtype, n.output.shape, n.output.name,
                   n.loc)
        bias = b.add_constant(f"{n.output.name}.bias", shift.to(w_dtype.to_torch()), w_dtype)
        last = steps[-1][1]
        out = b.emit(Op.ADD, [y, bias], O.BinaryAttrs(), last.output.dtype, last.output.shape,
                     f"{n.output.name}_bias", last.loc)
        b.replace(last.output, out)
    return b.finish().verify()
