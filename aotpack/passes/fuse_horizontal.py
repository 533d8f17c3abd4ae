"""Horizontal GEMM fusion: linears that read the same input and whose outputs are only
reshaped/sliced (e.g. attention's q/k/v projections) become one linear over the concatenated
weight (a new constant, `qkv.weight` for q_proj/k_proj/v_proj); each old output becomes a
column-slice view of the fused output. One GEMM with N = Nq+Nk+Nv fills the GPU better than
three. Linears whose outputs feed epilogue-fusible ops (SwiGLU's gate/up) are left alone so
their epilogues survive. Run canonicalize afterwards to fold the new views."""
from __future__ import annotations

from aotpack.ir import ops as O
from aotpack.ir.graph import Graph, GraphBuilder, Node
from aotpack.ir.ops import Op
from aotpack.passes import fp8_sources


def fuse_horizontal(graph: Graph) -> Graph:
    groups = _groups(graph)
    if not groups:
        return graph
    first_of = {g[0].output.name: g for g in groups}
    fused_away = {n.output.name for g in groups for n in g[1:]}
    b = GraphBuilder(graph)
    for n in graph.nodes:
        if n.output.name in first_of:
            _emit_fused(b, first_of[n.output.name])
        elif n.output.name not in fused_away:
            b.keep(n)
    return b.finish().verify()


def _groups(graph: Graph) -> list[list[Node]]:
    users = graph.users()
    outputs = graph.output_names()
    by_input: dict[tuple, list[Node]] = {}
    for n in graph.nodes:
        if n.op != Op.LINEAR or not all(v.name in graph.constants for v in n.inputs[1:]):
            continue
        if n.output.name in outputs or not all(
                u.op in O.LAYOUT for u in users.get(n.output.name, [])):
            continue
        key = (n.inputs[0].name, len(n.inputs), n.inputs[1].dtype)
        by_input.setdefault(key, []).append(n)
    return [g for g in by_input.values() if len(g) > 1]


def fused_name(names: list[str]) -> str:
    """`a.q_proj.weight`, `a.k_proj.weight`, `a.v_proj.weight` → `a.qkv.weight`."""
    parts = [n.split(".") for n in names]
    parent = parts[0][:-2] if all(p[:-2] == parts[0][:-2] for p in parts) else []
    leaves = [p[-2] if len(p) > 1 else p[-1] for p in parts]
    suffix = leaves[0]
    while suffix and not all(leaf.endswith(suffix) and len(leaf) > len(suffix)
                             for leaf in leaves):
        suffix = suffix[1:]
    stems = [leaf[: len(leaf) - len(suffix)] for leaf in leaves]
    joined = "".join(stems) if all(len(s) == 1 for s in stems) else "_".join(stems)
    return ".".join(parent + [joined, parts[0][-1]])


def _emit_fused(b: GraphBuilder, group: list[Node]) -> None:
    import torch

    x = b.get(group[0].inputs[0])
    operands = []
    for i in range(1, len(group[0].inputs)):  # weight, then bias
        consts = [b.constants[n.inputs[i].name] for n in group]
        tensor = torch.cat([c.tensor for c in consts], dim=0).contiguous()
        operands.append(b.add_constant(fused_name([c.value.name for c in consts]), tensor,
                                       consts[0].value.dtype,
                                       fp8=fp8_sources.stacked([c.fp8 for c in consts])))
    n_total = operands[0].shape[0]
    shape = tuple(x.shape[:-1]) + (n_total,)
    fused = b.emit(Op.LINEAR, [x] + operands, O.NoAttrs(), x.dtype, shape,
                   operands[0].name.rsplit(".", 1)[0], group[0].loc)
    rows = len(shape) - 1
    row_strides = tuple(n_total * _prod(shape[i + 1:-1]) for i in range(rows))
    col = 0
    for n in group:
        out = n.output
        attrs = O.StridedAttrs(tuple(out.shape), row_strides + (1,), col)
        b.release(out.name)  # the view keeps the projection's name
        view = b.emit(Op.AS_STRIDED, [fused], attrs, out.dtype, out.shape, out.name, n.loc)
        b.replace(out, view)
        col += out.shape[-1]


def _prod(dims) -> int:
    out = 1
    for d in dims:
        out *= d
    return out
