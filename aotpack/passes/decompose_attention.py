"""Attention the kernel does not take, as batched matmul / softmax / batched matmul.

The attention kernel computes head dims 16..256 (multiples of 8), the values' too (another
width than the keys': DeepSeek-V3's MLA, 128 against 192, runs the masked kernel). Other shapes
occur in real models: head dim 8 (MobileViT's small stages, LeViT's keys). Those SDPA nodes are
written out here instead, as eager attention computes them:

    softmax([cap] (q @ k^T * scale) [masked]) @ v   (k, v repeated per query head for GQA;
                                                     cap: softcap * tanh(x / softcap))

on the batched-matmul and softmax kernels: correct at any head dims, slower than the fused
kernel. A causal flag becomes a constant mask (static query and key counts), positions the
mask `keys <= positions[b, s]` (and `> positions - window`).
"""
from __future__ import annotations

from aotpack.dtypes import DType
from aotpack.ir import ops as O
from aotpack.ir.graph import Graph, GraphBuilder, Node, Value
from aotpack.ir.ops import Op
from aotpack.ir.types import promote


def kernel_takes(q: Value, k: Value, v: Value) -> bool:
    """The attention kernel's head dims (kernels/triton/attention.py: _check): keys' and
    values' each 16..256, a multiple of 8 (values of another width than the keys run the
    masked kernel)."""
    return all(isinstance(d, int) and 16 <= d <= 256 and d % 8 == 0
               for d in (q.shape[-1], v.shape[-1]))


def decompose_attention(graph: Graph) -> Graph:
    nodes = {id(n) for n in graph.nodes
             if n.op == Op.SDPA and not kernel_takes(*n.inputs[:3]) and _decomposable(n)}
    if not nodes:
        return graph
    b = GraphBuilder(graph)
    for n in graph.nodes:
        if id(n) in nodes:
            b.replace(n.output, _written_out(b, n))
        else:
            b.keep(n)
    return b.finish().verify()


def _decomposable(n: Node) -> bool:
    q, k = n.inputs[:2]
    return not n.attrs.causal or all(isinstance(d, int) for d in (q.shape[2], k.shape[2]))


def _written_out(b: GraphBuilder, n: Node) -> Value:
    q, k, v = (b.get(x) for x in n.inputs[:3])
    name, loc = n.output.name, n.loc
    bsz, hq, s, d = q.shape
    k, v = (_per_query_head(b, x, hq, loc) for x in (k, v))
    t = k.shape[2]
    kt = b.emit(Op.PERMUTE, [k], O.PermuteAttrs((0, 1, 3, 2)), k.dtype,
                (k.shape[0], hq, d, t), f"{name}_kt", loc)
    scores = b.emit(Op.MATMUL, [q, kt], O.NoAttrs(), q.dtype, (bsz, hq, s, t),
                    f"{name}_scores", loc)
    seen = _seen_mask(b, n, s, t)
    # scores, mask and softmax in the wider of q's and a float mask's dtype (an f32 additive
    # mask beside bf16 q: GPT-J-style attention that asked for f32 scores), p in v's dtype
    work = promote(q.dtype, seen.dtype) if seen is not None and seen.dtype.is_float else q.dtype
    if work != q.dtype:
        scores = b.emit(Op.CAST, [scores], O.CastAttrs(work), work, scores.shape,
                        f"{name}_wide", loc)
    scale = n.attrs.scale if n.attrs.scale is not None else d ** -0.5
    scores = b.emit(Op.MUL, [scores], O.BinaryAttrs(float(scale)), work, scores.shape,
                    f"{name}_scaled", loc)
    if n.attrs.softcap > 0:  # softcap * tanh(scores / softcap)
        cap = float(n.attrs.softcap)
        scores = b.emit(Op.MUL, [scores], O.BinaryAttrs(1.0 / cap), work, scores.shape,
                        f"{name}_uncapped", loc)
        scores = b.emit(Op.TANH, [scores], O.NoAttrs(), work, scores.shape, f"{name}_tanh", loc)
        scores = b.emit(Op.MUL, [scores], O.BinaryAttrs(cap), work, scores.shape,
                        f"{name}_capped", loc)
    if seen is not None and seen.dtype == DType.BOOL:
        low = b.add_constant(f"{name}_lowest", _lowest(work), work)
        scores = b.emit(Op.WHERE, [seen, scores, low], O.NoAttrs(), work, scores.shape,
                        f"{name}_masked", loc)
    elif seen is not None:
        scores = b.emit(Op.ADD, [scores, seen], O.BinaryAttrs(), work, scores.shape,
                        f"{name}_biased", loc)
    if len(n.inputs) == 5:  # the per-head bias beside the mask (passes/attention_terms.py)
        bias = b.get(n.inputs[4])
        if bias.dtype != work:
            bias = b.emit(Op.CAST, [bias], O.CastAttrs(work), work, bias.shape,
                          f"{name}_bias_w", loc)
        scores = b.emit(Op.ADD, [scores, bias], O.BinaryAttrs(), work, scores.shape,
                        f"{name}_plus_bias", loc)
    p = b.emit(Op.SOFTMAX, [scores], O.SoftmaxAttrs(3), work, scores.shape, f"{name}_p", loc)
    if _may_hide_whole_rows(n) and seen.dtype == DType.BOOL:
        p = _zero_unseen_rows(b, p, seen, name, loc)
    if work != v.dtype:
        p = b.emit(Op.CAST, [p], O.CastAttrs(v.dtype), v.dtype, p.shape, f"{name}_p16", loc)
    return b.emit(Op.MATMUL, [p, v], O.NoAttrs(), v.dtype, (bsz, hq, s, v.shape[3]),
                  f"{name}_out", loc)


def _may_hide_whole_rows(n: Node) -> bool:
    """A bool mask the model passes may hide every key from a query; the causal and the
    positional masks never do (each query sees itself)."""
    return len(n.inputs) >= 4 and not n.attrs.positions


def _zero_unseen_rows(b: GraphBuilder, p: Value, seen: Value, name, loc) -> Value:
    """p with the rows that see no key set to 0, as torch's sdpa and the attention kernel give
    them (the masked softmax alone averages the values there)."""
    flags = b.emit(Op.CAST, [seen], O.CastAttrs(p.dtype), p.dtype, seen.shape,
                   f"{name}_seen_f", loc)
    last = len(seen.shape) - 1
    row = b.emit(Op.AMAX, [flags], O.ReduceAttrs((last,), True), p.dtype,
                 seen.shape[:-1] + (1,), f"{name}_any_seen", loc)
    return b.emit(Op.MUL, [p, row], O.BinaryAttrs(), p.dtype, p.shape, f"{name}_p_seen", loc)


def _per_query_head(b: GraphBuilder, x: Value, hq: int, loc) -> Value:
    """k or v [B, Hkv, T, D] repeated to [B, Hq, T, D] (GQA: each kv head serves a group)."""
    bsz, hkv, t, d = x.shape
    if hkv == hq:
        return x
    group = hq // hkv
    u = b.emit(Op.UNSQUEEZE, [x], O.DimAttrs((2,)), x.dtype, (bsz, hkv, 1, t, d),
               f"{x.name}_u", loc)
    e = b.emit(Op.EXPAND, [u], O.ExpandAttrs((bsz, hkv, group, t, d)), x.dtype,
               (bsz, hkv, group, t, d), f"{x.name}_e", loc)
    c = b.emit(Op.COPY, [e], O.NoAttrs(), x.dtype, e.shape, f"{x.name}_c", loc)
    return b.emit(Op.VIEW, [c], O.ViewAttrs((bsz, hq, t, d)), x.dtype, (bsz, hq, t, d),
                  f"{x.name}_heads", loc)


def _seen_mask(b: GraphBuilder, n: Node, s, t) -> Value | None:
    """The mask operand (bool: True seen; float: added), or one made from the causal flag or
    the positions."""
    import torch

    name, loc = n.output.name, n.loc
    if n.attrs.positions:
        return _positional(b, b.get(n.inputs[3]), t, n.attrs.window, name, loc)
    mask = b.get(n.inputs[3]) if len(n.inputs) >= 4 else None
    if not n.attrs.causal:
        return mask
    causal = b.add_constant(f"{name}_causal", torch.ones(s, t, dtype=torch.bool).tril(),
                            DType.BOOL)
    if mask is None:
        return causal
    if mask.dtype == DType.BOOL:
        return b.emit(Op.AND, [mask, causal], O.BinaryAttrs(), DType.BOOL,
                      _broadcast(mask.shape, (s, t)), f"{name}_seen", loc)
    low = b.add_constant(f"{name}_blocked", _lowest(mask.dtype), mask.dtype)
    zero = b.add_constant(f"{name}_open", torch.zeros((), dtype=mask.dtype.to_torch()),
                          mask.dtype)
    add = b.emit(Op.WHERE, [causal, zero, low], O.NoAttrs(), mask.dtype, (s, t),
                 f"{name}_causal_add", loc)
    return b.emit(Op.ADD, [mask, add], O.BinaryAttrs(), mask.dtype,
                  _broadcast(mask.shape, (s, t)), f"{name}_bias", loc)


def _positional(b: GraphBuilder, positions: Value, t, window: int, name, loc) -> Value:
    """keys <= positions[b, s] (and > positions - window): bool [B, 1, S, T]."""
    import torch

    bsz, s = positions.shape
    keys = b.add_constant(f"{name}_keys", torch.arange(t).view(1, 1, 1, t), DType.I64)
    at = b.emit(Op.VIEW, [positions], O.ViewAttrs((bsz, 1, s, 1)), positions.dtype,
                (bsz, 1, s, 1), f"{name}_at", loc)
    shape = (bsz, 1, s, t)
    seen = b.emit(Op.LE, [keys, at], O.BinaryAttrs(), DType.BOOL, shape, f"{name}_le", loc)
    if window <= 0:
        return seen
    lower = b.emit(Op.SUB, [at], O.BinaryAttrs(int(window)), positions.dtype, at.shape,
                   f"{name}_lower", loc)
    recent = b.emit(Op.GT, [keys, lower], O.BinaryAttrs(), DType.BOOL, shape, f"{name}_gt", loc)
    return b.emit(Op.AND, [seen, recent], O.BinaryAttrs(), DType.BOOL, shape, f"{name}_win",
                  loc)


def _lowest(dtype: DType):
    import torch

    td = dtype.to_torch()
    return torch.tensor(torch.finfo(td).min, dtype=td)


def _broadcast(a: tuple, tail: tuple) -> tuple:
    from aotpack.ir.types import broadcast_shapes

    return tuple(broadcast_shapes(tuple(a), tuple(tail)))
