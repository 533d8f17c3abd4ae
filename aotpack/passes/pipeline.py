"""compile_graph: the pass pipeline from a frontend Graph to a Program."""
from __future__ import annotations

import logging
import time

from aotpack.ir.graph import Graph
from aotpack.passes.canonicalize import canonicalize
from aotpack.passes.channels_last import propagate_channels_last
from aotpack.passes.cse import cse
from aotpack.passes.decompose_attention import decompose_attention
from aotpack.passes.exact_gemm import exact_gemm
from aotpack.passes.fold_conv_bn import fold_conv_bn
from aotpack.passes.fuse_attention import fuse_attention
from aotpack.passes.fuse_horizontal import fuse_horizontal
from aotpack.passes.fuse_patterns import fuse_patterns
from aotpack.passes.fuse_swiglu import fuse_swiglu
from aotpack.passes.int_ranges import fold_known_comparisons
from aotpack.passes.lower import lower
from aotpack.passes.share_sorts import share_sorts

log = logging.getLogger(__name__)


def optimize(graph: Graph) -> Graph:
    """The graph-to-graph part: convolutions channels-last, canonical, comparisons that value
    ranges decide folded (int_ranges.py), common subexpressions merged, f32 GEMMs of upcast
    16-bit values on 16-bit operands, batch norms folded into convolutions, pattern-fused
    (attention written out as matmul/softmax/matmul too, and SwiGLU gate/up pairs; attention
    the kernel cannot take written out again), horizontally fused, a sort's values taken from
    its order where both are used (share_sorts.py), canonical again."""
    graph = graph.verify()
    log.debug("frontend graph: %d nodes", len(graph.nodes))
    for graph_pass in (propagate_channels_last, exact_gemm, canonicalize,
                       fold_known_comparisons, cse, fold_conv_bn,
                       fuse_patterns, fuse_attention, decompose_attention, fuse_swiglu,
                       fuse_horizontal, share_sorts, canonicalize):
        start = time.perf_counter()
        graph = graph_pass(graph)
        log.debug("%s: %d nodes (%.2f s)", graph_pass.__name__, len(graph.nodes),
                  time.perf_counter() - start)
    return graph


def compile_graph(graph: Graph):
    """Graph → aotpack.program.Program (kernel ops over named storages)."""
    program = lower(optimize(graph))
    log.debug("lower: %d kernel ops %s", len(program.ops), program.summary.get("kernel_ops", ""))
    # for `aotpack inspect`: the frontend graph (nodes, ops by kind, the aten ops exported),
    # the fused graph (fused_nodes, fused_ops) and the kernel ops by kind (kernel_ops)
    program.summary = {"nodes": len(graph.nodes), "ops": graph.count_ops(),
                       "aten_ops": dict(graph.meta.get("aten_ops", {})), **program.summary}
    if graph.meta.get("symbols"):  # for inspect: where each dynamic dim comes from
        program.summary["dims"] = {s.name: "{}.{}".format(*graph.meta["dim_sources"][s.name])
                                   for s in graph.meta["symbols"]}
        program.summary["guards"] = list(graph.meta.get("guards", []))
    return program
