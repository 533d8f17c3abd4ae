"""ONNX subgraphs translated as one IR node, found before translation.

GELU written with Erf (torch's exporter below opset 20, BERT's `x * 0.5 * (1 + erf(x /
sqrt(2)))`): Erf(x / √2 | x * 1/√2) → Add 1 → a chain of Muls by x and 0.5 (or by 0.5 * x) in
any order becomes GELU(x) at the chain's last Mul. The Erf, the Add and the chain's inner Muls
are skipped (each has that one user); the division by √2 is translated and dropped later as
dead code when nothing else reads it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from aotpack.ir import ops as O
from aotpack.ir.ops import Op


@dataclass
class Matches:
    skip: set = field(default_factory=set)  # node indices translated by another's replacement
    replace: dict = field(default_factory=dict)  # node index -> fn(translator) -> outputs


def find(graph, env: dict) -> Matches:
    producer = {o: i for i, n in enumerate(graph.node) for o in n.output}
    users: dict[str, list[int]] = {}
    for i, n in enumerate(graph.node):
        for name in n.input:
            users.setdefault(name, []).append(i)
    outputs = {o.name for o in graph.output}
    consts = _scalars(graph, env)
    known = dict(env)
    for n in graph.node:  # exporters share equal weights through Identity (zero biases)
        if n.op_type == "Identity" and n.input[0] in known:
            known[n.output[0]] = known[n.input[0]]
    out = Matches()
    for i, n in enumerate(graph.node):
        if n.domain not in ("", "ai.onnx"):
            continue
        if n.op_type == "Erf":
            _match_gelu(graph, i, producer, users, outputs, consts, out)
        elif n.op_type == "MatMul":
            _match_linear_bias(graph, i, users, outputs, known, out)
        elif n.op_type == "IsNaN":
            _match_nan_guard(graph, i, producer, users, outputs, consts, out)
    return out


def _match_nan_guard(graph, i, producer, users, outputs, consts, out: Matches) -> None:
    """Where(IsNaN(p), 0, p) with p = Softmax(...): torch's exporter guards sdpa's
    probabilities this way (a row whose every score is masked). The attention kernel gives
    such a row zeros itself (a -inf or False mask), so p passes through."""
    src = producer.get(graph.node[i].input[0])
    where = _only_user(graph.node[i].output[0], users, outputs, graph, "Where")
    if src is None or graph.node[src].op_type != "Softmax" or where is None:
        return
    w = graph.node[where]
    p = graph.node[i].input[0]
    if list(w.input[::2]) != [graph.node[i].output[0], p] or consts.get(w.input[1]) != 0.0:
        return
    out.skip.add(i)
    out.replace[where] = lambda cx, p=p: cx.env[p]


def _match_linear_bias(graph, i, users, outputs, env, out: Matches) -> None:
    """MatMul(x, W) → Add(·, b) with W [K, N] and b [N] known: one LINEAR with its bias
    (the PyTorch frontend's form of nn.Linear on a 3-D input)."""
    from aotpack.frontend.onnx.rules import _is_weight, linear

    mm = graph.node[i]
    w = env.get(mm.input[1])
    add = _only_user(mm.output[0], users, outputs, graph, "Add")
    if not _is_weight(w) or add is None:
        return
    b_name = _other(graph.node[add], mm.output[0])
    b = env.get(b_name)
    if not isinstance(b, np.ndarray) or b.dtype != w.dtype or b.shape != (w.shape[1],):
        return
    x = mm.input[0]

    def replace(cx, x=x, w=mm.input[1], b=b_name):
        cx._names.update({id(cx.env[w]): w, id(cx.env[b]): b})
        return linear(cx, cx.tensor(x), cx.env[w], cx.env[b])

    out.skip.add(i)
    out.replace[add] = replace


def _scalars(graph, env) -> dict[str, float]:
    from onnx import numpy_helper

    vals = {k: v for k, v in env.items() if isinstance(v, np.ndarray) and v.size == 1
            and v.dtype != object}
    for n in graph.node:
        if n.op_type == "Constant":
            for a in n.attribute:
                if a.name == "value":
                    t = numpy_helper.to_array(a.t)
                    if t.size == 1:
                        vals[n.output[0]] = t
                elif a.name == "value_float":
                    vals[n.output[0]] = np.array(a.f)
    out = {k: float(v.reshape(-1)[0]) for k, v in vals.items()}
    for n in graph.node:  # scalars computed from scalars: a function's expansion casts them
        fn, arity = _SCALAR_OPS.get(n.op_type, (None, 0))
        if fn is not None and len(n.input) >= arity and all(i in out for i in n.input[:arity]):
            out[n.output[0]] = fn(*(out[i] for i in n.input[:arity]))
    return out


# op -> (what it does to scalars, how many leading inputs it reads): CastLike's dtype source
# is not a value
_SCALAR_OPS = {"Cast": (float, 1), "CastLike": (float, 1), "Identity": (float, 1),
               "Sqrt": (math.sqrt, 1), "Mul": (lambda a, b: a * b, 2),
               "Div": (lambda a, b: a / b if b else math.nan, 2), "Add": (lambda a, b: a + b, 2)}


def _close(c: float | None, want: float) -> bool:
    return c is not None and abs(c - want) <= 1e-3 * abs(want)


def _other(node, name: str) -> str | None:
    if len(node.input) != 2 or name not in node.input:
        return None
    return node.input[1] if node.input[0] == name else node.input[0]


def _only_user(name, users, outputs, graph, op_type):
    u = users.get(name, [])
    if len(u) != 1 or name in outputs or graph.node[u[0]].op_type != op_type:
        return None
    return u[0]


def _match_gelu(graph, e, producer, users, outputs, consts, out: Matches) -> None:
    erf = graph.node[e]
    src = graph.node[producer[erf.input[0]]] if erf.input[0] in producer else None
    if src is None or src.op_type not in ("Div", "Mul"):
        return
    x, c = src.input[0], consts.get(src.input[1])
    if src.op_type == "Mul" and not _close(c, 1 / math.sqrt(2)):
        x, c = src.input[1], consts.get(src.input[0])
        if not _close(c, 1 / math.sqrt(2)):
            return
    if src.op_type == "Div" and not _close(c, math.sqrt(2)):
        return
    add = _only_user(erf.output[0], users, outputs, graph, "Add")
    if add is None:  # the Gelu function's own expansion adds with Sum
        add = _only_user(erf.output[0], users, outputs, graph, "Sum")
    if add is None or not _close(consts.get(_other(graph.node[add], erf.output[0])), 1.0):
        return
    chain, has_x, has_half, cur = [], False, False, graph.node[add].output[0]
    while not (has_x and has_half):
        m = _only_user(cur, users, outputs, graph, "Mul")
        if m is None:
            return
        o = _other(graph.node[m], cur)
        half = graph.node[producer[o]] if o in producer else None
        if o == x and not has_x:
            has_x = True
        elif _close(consts.get(o), 0.5) and not has_half:
            has_half = True
        elif (half is not None and half.op_type == "Mul" and x in half.input
              and _close(consts.get(_other(half, x)), 0.5) and not (has_x or has_half)):
            has_x = has_half = True
        else:
            return
        chain.append(m)
        cur = graph.node[m].output[0]
    out.skip.update([e, add] + chain[:-1])
    out.replace[chain[-1]] = lambda cx, x=x: cx.emit(Op.GELU, [cx.tensor(x)],
                                                     O.GeluAttrs("none"))
