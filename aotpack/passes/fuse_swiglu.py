"""SwiGLU fusion: silu(h @ Wg^T) * (h @ Wu^T) (either operand order) becomes ONE linear over a
new constant weight whose rows interleave Wg and Wu in blocks of GROUP, followed by a SWIGLU
node (x[..., 2N] -> [..., N]) that the GEMM takes as its first epilogue step (EpSwiGLU).

One GEMM with N_acc = 2N reads h once and writes N columns instead of 2 x N plus a pointwise
kernel's 3 x N. The interleaving puts a gate block and its up block in the same output tile,
so the kernel pairs them in registers.

The same holds for ONE linear over a stacked [2N, K] weight whose output is split in halves
(Phi-3's gate_up_proj + chunk(2)): the halves are its gate and up weights. And for a grouped
GEMM over experts' stacked [E, 2N, K] weights (transformers' grouped-GEMM experts: Mixtral,
Qwen2-MoE, OLMoE): each expert's rows are interleaved alike and the GROUPED_MM itself says
`swiglu_group` (its kernel pairs the columns in registers, as the GEMM's epilogue does); at
2,048 Mixtral tokens that skips writing and re-reading a [4096, 28672] gate/up product.

Fused only when it is exact and simple: both products read the same h, both weights are
constants of one dtype and shape [N, K] with N a multiple of GROUP, neither has a bias (a bias
would be added before the SwiGLU, which EpSwiGLU, the first step, cannot express), and the
gate/silu/up values have no other user. Anything else keeps the old lowering (gate GEMM + silu,
up GEMM * gate).

The new weight's bytes are a pure function of Wg and Wu (stack + reshape, no arithmetic), so
scripts/make-weights, which reruns the passes on another machine, reproduces them exactly.
"""
from __future__ import annotations

from aotpack.dtypes import DType
from aotpack.ir import ops as O
from aotpack.ir.graph import Graph, GraphBuilder, Node, Value
from aotpack.ir.ops import Op
from aotpack.passes import fp8_sources
from aotpack.passes.canonicalize import dead_code
from aotpack.passes.fuse_horizontal import fused_name

# gate/up block width: 2 * GROUP accumulator columns fit every GEMM tile we use, the decode
# split-K's 64-row weight tiles included (those then finish the SwiGLU themselves, no reduce
# launch); a multiple of 8, so the tile GEMMs' wgmma accumulator pairs them by register
# renaming (the swapped split-K one pairs them through shared memory)
GROUP = 32


def fuse_swiglu(graph: Graph) -> Graph:
    matches = _matches(graph)
    if not matches:
        return graph
    b = GraphBuilder(graph)
    for n in graph.nodes:
        m = matches.get(n.output.name)
        if m is None:
            b.keep(n)
            continue
        if isinstance(m[0], Node):  # (grouped_mm node, its weight's view, wg, wu, name)
            _emit_grouped(b, n, *m)
            continue
        h, wg, wu, name, fp8 = m
        w = b.add_constant(name, _interleave(wg, wu), h.dtype, fp8=fp8)
        shape = tuple(h.shape[:-1]) + (w.shape[0],)
        acc = b.emit(Op.LINEAR, [h, w], O.NoAttrs(), h.dtype, shape,
                     w.name.rsplit(".", 1)[0], n.loc)
        b.nodes.append(Node(Op.SWIGLU, (acc,), O.SwiGLUAttrs(GROUP), n.outputs, n.loc))
    return dead_code(b.finish()).verify()  # the old linears and the silu are unused now


def _emit_grouped(b: GraphBuilder, mul: Node, gmm: Node, view: Node, wg, wu, name: str) -> None:
    """GROUPED_MM(a, view of the interleaved weights, offs) with the SwiGLU, as `mul`'s
    output."""
    a, _, offs = (b.get(v) for v in gmm.inputs)
    w = b.add_constant(name, _interleave(wg, wu), view.output.dtype)
    w_view = b.emit(Op.AS_STRIDED, [w], view.attrs, w.dtype, view.attrs.shape,
                    b.fresh(f"{name}_t"), view.loc)
    b.nodes.append(Node(Op.GROUPED_MM, (a, w_view, offs), O.GroupedMmAttrs(GROUP),
                        mul.outputs, mul.loc))


def _interleave(wg, wu):
    """Rows [g_0..g_{G-1}, u_0..u_{G-1}, g_G.., u_G.., ...] of two [..., N, K] weights."""
    import torch

    *batch, n, k = wg.shape
    blocks = (*batch, n // GROUP, GROUP, k)
    pairs = torch.stack((wg.reshape(blocks), wu.reshape(blocks)), -3)
    return pairs.reshape(*batch, 2 * n, k).contiguous()


def _matches(graph: Graph) -> dict[str, tuple]:
    """mul output name -> (h, gate weight, up weight, fused weight's name, the fused weight's
    FP8 parts or None) for every fusible SwiGLU (the weights as tensors); for a grouped GEMM
    (grouped_mm node, its weight's view, gate, up, name)."""
    producers, users = graph.producers(), graph.users()
    outputs = graph.output_names()

    def sole_use(v: Value, by: Node) -> bool:
        return v.name not in outputs and users.get(v.name, []) == [by]

    out = {}
    for n in graph.nodes:
        if n.op != Op.MUL or n.attrs.scalar is not None or len(n.inputs) != 2:
            continue
        for s, u in (n.inputs, n.inputs[::-1]):
            silu = producers.get(s.name)
            if silu is None or silu.op != Op.SILU or not sole_use(s, n) or not sole_use(u, n):
                continue
            gate, up = producers.get(silu.inputs[0].name), producers.get(u.name)
            if gate is None or up is None or gate is up or not sole_use(gate.output, silu):
                continue
            m = _pair(graph, gate, up, n) or _halves(graph, gate, up, n, producers, users)
            if m is not None:
                out[n.output.name] = m
                break
    return out


def _pair(graph: Graph, gate: Node, up: Node, mul: Node):
    """(h, wg, wu, name, FP8 parts) if gate and up are bias-free linears of one h with constant
    [N, K] weights that fuse (see the module doc), else None."""
    if gate.op != Op.LINEAR or up.op != Op.LINEAR or len(gate.inputs) != 2 \
            or len(up.inputs) != 2:
        return None
    (h, wg), (h2, wu) = gate.inputs, up.inputs
    if h != h2 or wg.name not in graph.constants or wu.name not in graph.constants:
        return None
    n = wg.shape[0]
    same = wg.shape == wu.shape and wg.dtype == wu.dtype == h.dtype
    # f32 GEMMs run as 1x1 convs (lower_conv.f32_gemm_as_conv), which pair no SwiGLU halves
    same = same and h.dtype in (DType.BF16, DType.F16)
    types_kept = gate.output.type == up.output.type == mul.output.type  # no promotion
    if not same or not types_kept or not isinstance(n, int) or n % GROUP:
        return None
    cg, cu = graph.constants[wg.name], graph.constants[wu.name]
    return (h, cg.tensor, cu.tensor, fused_name([wg.name, wu.name]),
            fp8_sources.interleaved(cg.fp8, cu.fp8, _interleave))


def _halves(graph: Graph, gate: Node, up: Node, mul: Node, producers, users):
    """(h, wg, wu, name, FP8 parts) if gate and up are the first and second half (either way
    round) of the last dim of one bias-free linear's contiguous output, its weight a constant
    [2N, K], and the halves are its only users; else None."""
    from aotpack.ir.types import contiguous_strides

    if gate.op != Op.AS_STRIDED or up.op != Op.AS_STRIDED or gate.inputs != up.inputs:
        return None
    lin = producers.get(gate.inputs[0].name)
    if lin is None or lin.op not in (Op.LINEAR, Op.GROUPED_MM) \
            or lin.output.name in graph.output_names() \
            or sorted(id(u) for u in users.get(lin.output.name, [])) != sorted((id(gate), id(up))):
        return None
    if lin.op == Op.GROUPED_MM:
        weights = _expert_weights(graph, lin, producers)
        if weights is None:
            return None
        view, w = weights
    elif len(lin.inputs) != 2:
        return None
    else:
        h, w = lin.inputs
        if w.name not in graph.constants or w.dtype != h.dtype or len(w.shape) != 2 \
                or h.dtype not in (DType.BF16, DType.F16):  # f32 GEMMs run as 1x1 convs
            return None  # (passes/lower_conv.f32_gemm_as_conv), which take no SwiGLU
    n2, shape = w.shape[-2], tuple(lin.output.shape)
    n = n2 // 2
    half = shape[:-1] + (n,)
    full = contiguous_strides(shape)
    for v in (gate, up):
        a = v.attrs  # strides of size-1 dims are free (canonical views set them their way)
        if (tuple(a.shape) != half or a.offset not in (0, n) or any(
                d != 1 and s != c for d, s, c in zip(a.shape, a.strides, full))):
            return None
    if gate.attrs.offset == up.attrs.offset or n2 % 2 or n % GROUP \
            or lin.output.dtype != mul.output.dtype:
        return None
    c = graph.constants[w.name]
    first, second = c.tensor[..., :n, :], c.tensor[..., n:, :]
    wg, wu = (first, second) if gate.attrs.offset == 0 else (second, first)
    base, _, leaf = w.name.rpartition(".")
    name = f"{base}_swiglu.{leaf}" if base else f"{w.name}_swiglu"
    if lin.op == Op.GROUPED_MM:
        return lin, view, wg, wu, name
    pg, pu = fp8_sources.rows_of(c.fp8, slice(0, n)), fp8_sources.rows_of(c.fp8, slice(n, None))
    if gate.attrs.offset != 0:
        pg, pu = pu, pg
    return h, wg, wu, name, fp8_sources.interleaved(pg, pu, _interleave)


def _expert_weights(graph: Graph, gmm: Node, producers):
    """(the view node, the constant) when a grouped GEMM's b is its experts' constant
    [E, 2N, K] weights viewed as [E, K, 2N] (a transpose, as transformers passes them), of
    the activations' dtype and with no SwiGLU yet; else None."""
    view = producers.get(gmm.inputs[1].name)
    if gmm.attrs.swiglu_group or view is None or view.op != Op.AS_STRIDED \
            or view.inputs[0].name not in graph.constants:
        return None
    w = view.inputs[0]
    if len(w.shape) != 3 or w.dtype != gmm.inputs[0].dtype or w.dtype != gmm.output.dtype:
        return None
    e, n2, k = w.shape
    if (tuple(view.attrs.shape), tuple(view.attrs.strides), view.attrs.offset) != \
            ((e, k, n2), (n2 * k, 1, k), 0):
        return None
    return view, w
