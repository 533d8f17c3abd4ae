"""compile_graph: the pass pipeline from a frontend Graph to a Program."""
from __future__ import annotations

from aotpack.ir.graph import Graph
from aotpack.passes.canonicalize import canonicalize
from aotpack.passes.fuse_horizontal import fuse_horizontal
from aotpack.passes.fuse_patterns import fuse_patterns
from aotpack.passes.fuse_swiglu import fuse_swiglu
from aotpack.passes.lower import lower


def optimize(graph: Graph) -> Graph:
    """The graph-to-graph part: canonical, pattern-fused (SwiGLU gate/up pairs too),
    horizontally fused, canonical again."""
    graph = canonicalize(graph.verify())
    graph = fuse_patterns(graph)
    graph = fuse_swiglu(graph)
    graph = fuse_horizontal(graph)
    return canonicalize(graph)


def compile_graph(graph: Graph):
    """Graph → aotpack.program.Program (kernel ops over named storages)."""
    program = lower(optimize(graph))
    # for `aotpack inspect`: the frontend graph (nodes, ops by kind, the aten ops exported),
    # the fused graph (fused_nodes, fused_ops) and the kernel ops by kind (kernel_ops)
    program.summary = {"nodes": len(graph.nodes), "ops": graph.count_ops(),
                       "aten_ops": dict(graph.meta.get("aten_ops", {})), **program.summary}
    if graph.meta.get("symbols"):  # for inspect: where each dynamic dim comes from
        program.summary["dims"] = {s.name: "{}.{}".format(*graph.meta["dim_sources"][s.name])
                                   for s in graph.meta["symbols"]}
        program.summary["guards"] = list(graph.meta.get("guards", []))
    return program
