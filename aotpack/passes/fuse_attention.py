"""Attention written out → SDPA, on canonical IR (after fuse_patterns).

ONNX exports and eager attention (transformers' attn_implementation="eager") compute
    matmul(softmax([cast f32] ([cap *] [tanh(] matmul(q, k^T) [* c | / c] [)] [+ mask]))
           [cast], v)
which would need a batched activation × activation GEMM that no kernel implements. It is the
attention kernel's job: the chain becomes SDPA(q, k, v, scale = c · the softmax's own scale),
with k the transposed view of k^T (a view, no copy). q, k^T and v are [B, H, S, D],
[B, H, D, T], [B, H, T, Dv] with equal B and H (heads repeated for GQA are folded after by
fuse_patterns._fold_repeat_kv). A positive scalar factor on q or on k^T that only the product
reads (torch's sdpa export multiplies each by √scale) joins the SDPA scale.

A tanh between the product and the mask is a soft cap (Gemma-2's attn_logit_softcapping:
cap * tanh(scores * c / cap)): SDPA's softcap attribute, the factors inside the tanh its scale.

A constant mask (through views) is classified as the torch frontend classifies an sdpa mask
(aten_table._constant_mask_kind: no-op masks are dropped, the top-left causal pattern becomes
`causal`), at several sizes when it follows dynamic dims. Any other mask (computed at run time
from the model's `attention_mask`, or a constant bias, padding or window) becomes SDPA's fourth
operand as it is, a view broadcast to [B, H, S, T] (the masked attention kernel reads it
through stride-0 dims, so a [B, 1, 1, T] padding mask is never expanded), provided it is added
to the already scaled scores. A causal constant combined with a run-time mask (And of the two,
or a sum of additive masks) is split: the kernel's causal flag, and the run-time part alone as
its operand. A softmax over another dim, or an intermediate something else
reads, leaves the chain alone (its matmuls stay batched matmuls).
"""
from __future__ import annotations

import dataclasses

from aotpack.dtypes import DType
from aotpack.ir import ops as O
from aotpack.ir.graph import Graph, GraphBuilder, Node, Value
from aotpack.ir.ops import Op
from aotpack.ir.sym import free_symbols, subs_tree
from aotpack.passes.canonicalize import dead_code
from aotpack.passes.gemm_chain import scalar_factor

_PROBES = (2, 3, 5, 7, 11, 13)


def fuse_attention(graph: Graph) -> Graph:
    from aotpack.passes.attention_positions import rewrite_positional
    from aotpack.passes.fuse_patterns import _fold_repeat_kv

    producers, users = graph.producers(), graph.users()
    outputs = graph.output_names()
    b = GraphBuilder(graph)
    fused = 0
    without_causal: dict[str, Value] = {}  # mask name -> the mask with its causal part split off
    for n in graph.nodes:
        if n.op == Op.SDPA and len(n.inputs) == 4 and not n.attrs.causal \
                and not n.attrs.positions:
            if rewrite_positional(graph, b, n, producers):
                fused += 1
                continue
            fused += _split_sdpa_mask(graph, b, n, producers, without_causal)
            continue
        match = _match(graph, n, producers, users, outputs)
        if match is None:
            b.keep(n)
            continue
        q, kt, v, causal, scale, mask, narrow, softcap = match
        if narrow:
            q, kt = (_narrowed(b, x, producers, n) for x in (q, kt))
        split = None if mask is None else _causal_part(graph, mask, producers, q.shape[2],
                                                        kt.shape[3])
        if split is not None:
            if mask.name not in without_causal:
                without_causal[mask.name] = _rebuild(b, *split)
            mask, causal = without_causal[mask.name], True
        k = _untransposed(b, kt, producers, n)
        attrs = O.SdpaAttrs(causal, scale, False, softcap=float(softcap))
        ins = (b.get(q), k, b.get(v)) + ((b.get(mask),) if mask is not None else ())
        sdpa = Node(Op.SDPA, ins, attrs, n.outputs, n.loc)
        if mask is None or causal or not rewrite_positional(graph, b, sdpa, producers):
            b.nodes.append(sdpa)
        fused += 1
    if not fused:
        return graph
    return _fold_repeat_kv(dead_code(b.finish())).verify()


def _match(graph, n: Node, producers, users, outputs):
    """(q, k^T, v, causal, scale, mask operand or None, narrow, softcap) if n =
    matmul(attention weights, v), else None; narrow: q and k^T are f32 upcasts of 16-bit
    values (read them narrow)."""
    if n.op != Op.MATMUL or len(n.output.shape) != 4:
        return None
    p, v = n.inputs

    def single(x: Value) -> Node | None:  # x's producer, if n's chain is x's only reader
        node = producers.get(x.name)
        ok = node is not None and len(users.get(x.name, [])) == 1 and x.name not in outputs
        return node if ok else None

    node = single(p)
    if node is not None and node.op == Op.CAST:
        node = single(node.inputs[0])
    if node is None or node.op != Op.SOFTMAX or node.attrs.dim != len(p.shape) - 1:
        return None
    scale, mask = node.attrs.scale, None
    scale_outside_mask = scale  # what multiplies the mask too: softmax((s + m) * c)
    node = single(node.inputs[0])
    if node is not None and node.op == Op.CAST and node.output.dtype == DType.F32:
        node = single(node.inputs[0])
    while node is not None:  # scalar factors and at most one mask, in any order
        factor = scalar_factor(node)
        if factor is not None and factor > 0:
            scale *= factor
            if mask is None:
                scale_outside_mask *= factor
            node = single(node.inputs[0])
        elif node.op == Op.ADD and node.attrs.scalar is None and mask is None:
            a, c = node.inputs
            if _const_base(graph, a, producers) is not None:
                a, c = c, a
            mask = c
            node = single(a)
        else:
            break
    if node is None:
        return None
    softcap = 0.0
    if node is not None and node.op == Op.TANH and scale > 0:
        # soft-capped scores (Gemma-2): cap * tanh(s * c), the cap being what multiplied the
        # tanh (the mask, if any, is added after it: scale_outside_mask checks it stays 1)
        softcap, scale, node = scale, 1.0, single(node.inputs[0])
        while node is not None and (scalar_factor(node) or 0) > 0:
            scale *= scalar_factor(node)
            node = single(node.inputs[0])
    if node is None or node.op != Op.MATMUL:
        return None
    # a positive scalar on q or on k^T read only here joins the scale (torch's sdpa export
    # scales each by √scale)
    q, q_scale = _unscaled(node.inputs[0], single)
    kt, k_scale = _unscaled(node.inputs[1], single)
    scale *= q_scale * k_scale
    # the op's scale multiplies q k^T before the cap: softcap * tanh(q k^T * scale / softcap)
    scale *= softcap if softcap else 1.0
    narrow = all(_upcast(x, v, single) is not None for x in (q, kt))
    if not _shapes_ok(q, kt, v, n.output, narrow):
        return None
    causal, operand = False, None
    if mask is not None:
        from aotpack.passes.attention_positions import _additive_of, _positional

        # the additive form (0 / the lowest value) of a positional mask is that bool mask,
        # scaled or not: every query sees key 0, so no row is fully masked (where torch's
        # additive softmax averages and the kernel's bool one gives zeros)
        seen = _additive_of(graph, mask, producers)
        if seen is not None and _positional(graph, seen, producers, kt.shape[3]) is not None:
            mask = seen
        kind = _mask_kind(graph, mask, producers, q.shape[2], kt.shape[3])
        causal = kind == "causal"
        if kind is None:  # a run-time mask, or a constant bias / padding / window
            scores = (q.shape[0], q.shape[1], q.shape[2], kt.shape[3])
            if not _mask_operand_ok(mask, scores, scale_outside_mask):
                return None
            operand = mask
    return q, kt, v, causal, float(scale), operand, narrow, softcap


def _mask_operand_ok(mask: Value, scores: tuple, scale_outside: float) -> bool:
    """The kernel adds a floating mask to the scaled scores as it is (or keeps where a bool
    one is True), broadcast through stride-0 dims: it must broadcast to [B, H, S, T] and not
    be scaled with the scores (softmax((s + m) * c) with c != 1)."""
    from aotpack.ir.types import broadcast_shapes

    if len(mask.shape) > 4 or not (mask.dtype.is_float or mask.dtype == DType.BOOL):
        return False
    try:
        if tuple(broadcast_shapes(tuple(mask.shape), scores)) != tuple(scores):
            return False
    except (TypeError, ValueError):
        return False
    return scale_outside == 1.0 or mask.dtype == DType.BOOL


def _unscaled(x: Value, single) -> tuple[Value, float]:
    """(y, c) if x = y * c with c a positive number and x read only here, else (x, 1)."""
    node = single(x)
    factor = scalar_factor(node) if node is not None else None
    if factor is not None and factor > 0:
        return node.inputs[0], factor
    return x, 1.0


def _upcast(x: Value, v: Value, single) -> Node | None:
    """The CAST to f32 of v's 16-bit values that x is (or a view of, read only here)."""
    node = single(x)
    if node is not None and node.op == Op.AS_STRIDED:
        node = single(node.inputs[0])
    ok = (node is not None and node.op == Op.CAST and node.output.dtype == DType.F32
          and node.inputs[0].dtype == v.dtype and v.dtype in (DType.BF16, DType.F16))
    return node if ok else None


def _narrowed(b: GraphBuilder, x: Value, producers, n: Node) -> Value:
    """x (an upcast to f32, or a view of one: _upcast) computed on the 16-bit values: GPT-J's
    and CodeGen's eager attention take q and k in f32; the kernel's f32-accumulated product
    of the 16-bit values is that same product (16-bit products are exact in f32)."""
    node = producers[x.name]
    if node.op == Op.CAST:
        return b.get(node.inputs[0])
    src = b.get(producers[node.inputs[0].name].inputs[0])
    return b.emit(Op.AS_STRIDED, [src], node.attrs, src.dtype, tuple(x.shape), f"{x.name}_16",
                  n.loc)


def _shapes_ok(q: Value, kt: Value, v: Value, out: Value, narrow: bool) -> bool:
    if not (len(q.shape) == len(kt.shape) == len(v.shape) == 4):
        return False
    qk = v.dtype if narrow else q.dtype
    if not (qk == v.dtype == out.dtype and (narrow or q.dtype == kt.dtype)) \
            or not v.dtype.is_float:
        return False
    same = q.shape[:2] == kt.shape[:2] == v.shape[:2]
    return same and q.shape[3] == kt.shape[2] and kt.shape[3] == v.shape[2]


def _untransposed(b: GraphBuilder, kt: Value, producers, n: Node) -> Value:
    """k as a strided view of what k^T views (its last two dims swapped back)."""
    src = producers.get(kt.name)
    if src is not None and src.op == Op.AS_STRIDED:
        base, a = src.inputs[0], src.attrs
        shape, strides, offset = list(a.shape), list(a.strides), a.offset
    else:
        from aotpack.passes.views import View

        view = View.contiguous(tuple(kt.shape))
        base, shape, strides, offset = kt, list(view.shape), list(view.strides), 0
    shape[-2:], strides[-2:] = shape[-1:-3:-1], strides[-1:-3:-1]
    attrs = O.StridedAttrs(tuple(shape), tuple(strides), offset)
    return b.emit(Op.AS_STRIDED, [base], attrs, kt.dtype, tuple(shape), f"{kt.name}_k", n.loc)


# ----------------------------------------------------------------------------- masks
def _split_sdpa_mask(graph, b: GraphBuilder, n: Node, producers, without_causal) -> int:
    """An SDPA the frontend made (sdpa's attn_mask) whose mask has a causal part: the same
    split as for written-out attention. 1 if it was rewritten."""
    q, k, v, mask = n.inputs
    split = _causal_part(graph, mask, producers, q.shape[2], k.shape[2])
    if split is None:
        b.keep(n)
        return 0
    if mask.name not in without_causal:
        without_causal[mask.name] = _rebuild(b, *split)
    attrs = dataclasses.replace(n.attrs, causal=True)
    ins = (b.get(q), b.get(k), b.get(v), without_causal[mask.name])
    b.nodes.append(Node(Op.SDPA, ins, attrs, n.outputs, n.loc))
    return 1


def _causal_part(graph, mask: Value, producers, seq_q, seq_k):
    """A mask computed from a constant causal mask c and another (a padding mask), f(c ∧ m):
    ∧ a product of 0/1 keeps whose one side is a bool constant cast (And of two masks), or a
    sum of additive masks; f elementwise ops of one operand (casts, the scalar arithmetic or
    log of Where(keep, 0, fill)). Returns (the ops of f from the inside out, m) so that the
    attention kernel applies the causal part itself (its causal flag masks what c masks;
    where c keeps, f(c ∧ m) is f(m)) and reads m, [B, 1, 1, T], instead of a [B, 1, S, T]
    mask computed every run. None if the mask is not of that form."""
    path, v = [], mask
    for _ in range(16):
        n = producers.get(v.name)
        if n is None or n.op not in O.ELEMENTWISE:
            return None
        if len(n.inputs) == 2 and n.op in (Op.MUL, Op.ADD, Op.AND) and n.attrs.scalar is None:
            for c, other in (n.inputs, n.inputs[::-1]):
                if _is_causal(graph, c, producers, n.op, seq_q, seq_k):
                    masked = 0.0 if n.op in (Op.MUL, Op.AND) else _lowest(
                        graph, c, producers, seq_q, seq_k)
                    ok = other.dtype == n.output.dtype and len(other.shape) <= 4 \
                        and _hides_rows(path[::-1], n.output.dtype, masked)
                    return (path[::-1], other) if ok else None
            return None
        if len(n.inputs) != 1:
            return None
        path.append(n)
        v = n.inputs[0]
    return None


def _is_causal(graph, c: Value, producers, op: Op, seq_q, seq_k) -> bool:
    if op == Op.MUL:  # keeps as 0/1: the causal side a cast of a bool constant
        cast = producers.get(c.name)
        if cast is None or cast.op != Op.CAST or cast.inputs[0].dtype != DType.BOOL:
            return False
        c = cast.inputs[0]
    return _mask_kind(graph, c, producers, seq_q, seq_k) == "causal"


def _lowest(graph, c: Value, producers, seq_q, seq_k) -> float:
    """The most negative entry of an additive constant mask (what it masks with)."""
    return min(float(t.float().min()) for _, t in _samples(graph, c, producers, seq_q, seq_k))


def _hides_rows(path: list[Node], dtype: DType, masked: float) -> bool:
    """Whether what the causal part masks reaches the kernel as -inf or False: then a row
    masked everywhere gives zeros whether the kernel or the mask masks its future keys. A
    finite fill (finfo.min) would average a row masked everywhere over all keys, which the
    split would change to the past keys only."""
    import torch

    from aotpack.ir.interpret import eval_node

    t = torch.full((1,), masked, dtype=dtype.to_torch())
    for n in path:
        t = eval_node(n, [t])
    if t.dtype == torch.bool:
        return not bool(t.item())
    return t.is_floating_point() and t.item() == float("-inf")


def _rebuild(b: GraphBuilder, path: list[Node], other: Value) -> Value:
    """The ops of `path` applied to `other` (new nodes: the old chain may have other readers
    and dies with the dead code otherwise)."""
    from aotpack.ir.infer import infer

    v = b.get(other)
    for n in path:
        t = infer(n.op, [v.type], n.attrs)
        v = b.emit(n.op, [v], n.attrs, t.dtype, tuple(t.shape), f"{n.output.name}_nc", n.loc)
    return v


def _const_base(graph, v: Value, producers):
    """(constant name, nodes from it to v) if v is a constant seen through views and
    elementwise ops of one operand (a mask made from a constant: cast, log(1 - keep), ...)."""
    chain = []
    while v.name not in graph.constants:
        node = producers.get(v.name)
        if node is None or not (node.op in O.LAYOUT or (node.op in O.ELEMENTWISE
                                                          and len(node.inputs) == 1)):
            return None
        chain.append(node)
        v = node.inputs[0]
    return v.name, chain[::-1]


class _Samples:
    """What aten_table._constant_mask_kind asks of its context: the mask's values at points."""

    def __init__(self, samples):
        self.samples = samples

    def constant_samples(self, mask):
        return self.samples


def _mask_kind(graph, mask: Value, producers, seq_q, seq_k) -> str | None:
    from aotpack.frontend.aten_table import _constant_mask_kind

    samples = _samples(graph, mask, producers, seq_q, seq_k)
    if samples is None:
        return None
    return _constant_mask_kind(_Samples(samples), mask, seq_q, seq_k)


def _samples(graph, mask: Value, producers, seq_q, seq_k) -> list | None:
    """[(point, the constant mask's value there)], None if it is not a constant."""
    from aotpack.ir.interpret import eval_node

    found = _const_base(graph, mask, producers)
    if found is None:
        return None
    name, chain = found
    base = graph.constants[name].tensor
    if base.is_meta:
        return None
    samples = []
    for point in _points(mask, seq_q, seq_k):
        t = base
        for node in chain:
            t = eval_node(dataclasses.replace(node, attrs=subs_tree(node.attrs, point)), [t])
        samples.append((point, t))
    return samples


def _points(mask: Value, seq_q, seq_k) -> list[dict]:
    """Where a mask that follows dynamic dims is checked: every dim at its minimum, at small
    values, and each alone at its maximum ({} for a static mask)."""
    syms = sorted(free_symbols(tuple(mask.shape)) | free_symbols((seq_q, seq_k)),
                  key=lambda s: s.name)
    if not syms:
        return [{}]
    points = [{s.name: s.lo for s in syms}]
    for k in range(0, len(_PROBES), 2):
        points.append({s.name: min(max(_PROBES[k + i % 2] + i // 2, s.lo), s.hi)
                       for i, s in enumerate(syms)})
    for s in syms:
        points.append({t.name: (t.hi if t is s else t.lo) for t in syms})
    return [p for i, p in enumerate(points) if p not in points[:i]]
