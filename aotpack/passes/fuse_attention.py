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

Several terms between the products (a bias and a mask, a masked_fill, BLOOM's 3-D baddbmm
over [B*H, S, T]) are passes/attention_terms.py's: summed into the one mask operand.

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
from aotpack.passes.attention_masks import (
    causal_part, lowest, mask_kind, rebuild, split_sdpa_mask,
)
from aotpack.passes.attention_terms import (
    emit_sum, heads_merged, score_terms, split_heads,
)
from aotpack.passes.canonicalize import dead_code
from aotpack.passes.decompose_attention import kernel_takes
from aotpack.passes.gemm_chain import scalar_factor


def fuse_attention(graph: Graph) -> Graph:
    from aotpack.passes.attention_positions import rewrite_positional
    from aotpack.passes.fuse_patterns import _fold_repeat_kv

    producers, users = graph.producers(), graph.users()
    outputs = graph.output_names()
    b = GraphBuilder(graph)
    fused = 0
    without_causal: dict = {}  # mask (name, or split key) -> the mask without its causal part
    sums: dict[tuple, Value] = {}  # terms -> their sum (passes/attention_terms.py)
    for n in graph.nodes:
        if n.op == Op.SDPA and len(n.inputs) == 4 and not n.attrs.causal \
                and not n.attrs.positions:
            if rewrite_positional(graph, b, n, producers):
                fused += 1
                continue
            fused += split_sdpa_mask(graph, b, n, producers, without_causal)
            continue
        match = _match(graph, n, producers, users, outputs)
        if match is None:
            b.keep(n)
            continue
        q, kt, v, causal, scale, mask, narrow, softcap, lift = match
        if narrow:
            q, kt = (_narrowed(b, x, producers, n) for x in (q, kt))
        several, bias = isinstance(mask, list), None  # a lifted match has a list of terms
        if several:  # several terms: their f32 sums (the causal parts split off)
            mask, bias = _terms_operands(b, mask, n.loc, (q, v), producers, sums,
                                         without_causal)
        else:
            split = None if mask is None else causal_part(graph, mask, producers, q.shape[2],
                                                            kt.shape[3])
            if split is not None:
                if mask.name not in without_causal:
                    without_causal[mask.name] = rebuild(b, *split)
                mask, causal = without_causal[mask.name], True
            mask = None if mask is None else b.get(mask)
        qkv = (b.get(q), _untransposed(b, kt, producers, n), b.get(v))
        if lift:  # BLOOM's [B*H, S, D]: their [B, H, S, D] views
            qkv = tuple(split_heads(b, x, lift, n.loc) for x in qkv)
        attrs = O.SdpaAttrs(causal, scale, False, softcap=float(softcap))
        ins = qkv + tuple(x for x in (mask, bias) if x is not None)
        sdpa = Node(Op.SDPA, ins, attrs, (_lifted_output(b, n, lift) if lift else n.output,),
                    n.loc)
        if mask is None or causal or several \
                or not rewrite_positional(graph, b, sdpa, producers):
            b.nodes.append(sdpa)
        if lift:
            _view_back(b, n, sdpa.output)
        fused += 1
    if not fused:
        return graph
    return _fold_repeat_kv(dead_code(b.finish())).verify()


def _lifted_output(b: GraphBuilder, n: Node, lift: tuple) -> Value:
    """The [B, H, S, Dv] output of a lifted (3-D, BLOOM) attention n."""
    out = n.output
    return Value(b.fresh(f"{out.name}_heads"), out.dtype, (*lift, *out.shape[1:]))


def _view_back(b: GraphBuilder, n: Node, out4: Value) -> None:
    """n's [B*H, S, Dv] output as the view of the lifted attention's [B, H, S, Dv]."""
    from aotpack.passes.views import View, strided_attrs

    out = n.output
    b.release(out.name)
    b.emit(Op.AS_STRIDED, [out4], strided_attrs(View.contiguous(out.shape)), out.dtype,
           out.shape, out.name, n.loc)


def _terms_operands(b: GraphBuilder, terms, loc, qv, producers, sums, without_causal):
    """(mask, bias): the terms the heads share (a padding or causal mask, [B, 1, S, T]) and
    those that vary by head (ALiBi, a relative-position bias, [B?, H, 1?, T]) as the kernel's
    two operands, so their sum is never [B, H, S, T]; one operand (bias None) when either
    group is empty or the head dims are written out (decompose_attention takes one)."""
    shared = [t for t in terms if _term_shape(t)[1] == 1]
    per_head = [t for t in terms if _term_shape(t)[1] != 1]
    if not shared or not per_head or not kernel_takes(qv[0], qv[0], qv[1]):
        return _terms_sum(b, terms, loc, producers, sums, without_causal), None
    return tuple(_terms_sum(b, group, loc, producers, sums, without_causal)
                 for group in (shared, per_head))


def _terms_sum(b: GraphBuilder, terms, loc, producers, sums, without_causal) -> Value:
    key = tuple((_term_key(t.value, producers), t.factor, t.fill, t.masked_where, t.split)
                for t in terms)
    if key not in sums:  # every layer adds the same terms: one sum
        new = [_in_new_graph(b, t, without_causal) for t in terms]
        plain = len(new) == 1 and new[0].fill is None and new[0].factor == 1.0 \
            and new[0].split is None and new[0].value.dtype.is_float
        sums[key] = new[0].value if plain else emit_sum(b, new, loc)
    return sums[key]


def _term_key(value, producers):
    """A term's value, or a causal split (path, other): the path's ops and the other's key."""
    if isinstance(value, tuple):
        return ("split", tuple(n.output.name for n in value[0]), _value_key(value[1], producers))
    return _value_key(value, producers)


def _value_key(v: Value, producers):
    """What v computes, for sharing one sum among the layers: its name, or for a cast or a
    view (each layer casts or reshapes the same bias again: cse leaves float values apart)
    the cast or view of its input."""
    n = producers.get(v.name)
    if n is not None and n.op in (Op.CAST, Op.AS_STRIDED):
        return (n.op, n.attrs, _value_key(n.inputs[0], producers))
    return v.name


def _in_new_graph(b: GraphBuilder, term, without_causal):
    """The term with its value in the new graph (a causal split, (path, other), rebuilt)."""
    v = term.value
    if isinstance(v, tuple):
        key = (v[1].name, tuple(n.output.name for n in v[0]))
        if key not in without_causal:
            without_causal[key] = rebuild(b, *v)
        return dataclasses.replace(term, value=without_causal[key])
    return dataclasses.replace(term, value=b.get(v))


def _match(graph, n: Node, producers, users, outputs):
    """(q, k^T, v, causal, scale, mask, narrow, softcap, lift) if n = matmul(attention
    weights, v), else None. mask: None, the one mask operand, or a list of terms to sum
    (passes/attention_terms.py); narrow: q and k^T are f32 upcasts of 16-bit values (read them
    narrow); lift: (B, H) when the products are 3-D over B*H (BLOOM), else None."""
    if n.op != Op.MATMUL or len(n.output.shape) not in (3, 4):
        return None
    p, v = n.inputs

    def single(x: Value) -> Node | None:  # x's producer, if n's chain is x's only reader
        node = producers.get(x.name)
        ok = node is not None and len(users.get(x.name, [])) == 1 and x.name not in outputs
        return node if ok else None

    node, lift = single(p), None
    if len(n.output.shape) == 3:  # BLOOM: [B*H, S, T] products around [B, H, S, T] scores
        lift = None if node is None else heads_merged(node)
        node = None if lift is None else single(node.inputs[0])
    if node is not None and node.op == Op.CAST:
        node = single(node.inputs[0])
    if node is None or node.op != Op.SOFTMAX or node.attrs.dim != len(node.output.shape) - 1:
        return None
    node_scale, node = node.attrs.scale, single(node.inputs[0])
    if node is not None and node.op == Op.CAST and node.output.dtype == DType.F32:
        node = single(node.inputs[0])
    node, scale, terms = score_terms(graph, node, single, node_scale, lift)
    if node is None:
        return None
    softcap = 0.0
    if node is not None and node.op == Op.TANH and scale > 0:
        # soft-capped scores (Gemma-2): cap * tanh(s * c), the cap being what multiplied the
        # tanh (the terms, if any, are added after it, each with the factors after it)
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
    if lift and q.shape[0] != lift[0] * lift[1]:
        return None
    causal, operand = False, None
    if len(terms) == 1 and terms[0].fill is None and not lift:
        found = _one_mask(graph, terms[0], producers, q, kt)
    elif terms:
        found = _many_terms(graph, terms, producers, q, kt, lift)
    else:
        found = False, None
    if found is None:
        return None
    causal, operand = found
    return q, kt, v, causal, float(scale), operand, narrow, softcap, lift


def _one_mask(graph, term, producers, q: Value, kt: Value):
    """(causal, operand) of one added mask, or None: a constant causal mask is the flag, a
    positional one its bool form, any other the operand as it is."""
    from aotpack.passes.attention_positions import _additive_of, _positional

    mask = term.value
    # the additive form (0 / the lowest value) of a positional mask is that bool mask,
    # scaled or not: every query sees key 0, so no row is fully masked (where torch's
    # additive softmax averages and the kernel's bool one gives zeros)
    seen = _additive_of(graph, mask, producers)
    if seen is not None and _positional(graph, seen, producers, kt.shape[3]) is not None:
        mask = seen
    kind = mask_kind(graph, mask, producers, q.shape[2], kt.shape[3])
    if kind is not None:  # "none": no mask
        return kind == "causal", None
    # a run-time mask, or a constant bias / padding / window
    scores = (q.shape[0], q.shape[1], q.shape[2], kt.shape[3])
    return (False, mask) if _mask_operand_ok(mask, scores, term.factor) else None


def _many_terms(graph, terms: list, producers, q: Value, kt: Value, lift=None):
    """(causal, [terms left] or None) of several terms or a masking fill
    (passes/attention_terms.py), or None if a term does not broadcast to the scores. The
    3-D terms of lifted products (Term.split) are read as they are."""
    from aotpack.ir.types import broadcast_shapes

    sq, sk = q.shape[-2], kt.shape[-1]
    causal, left = False, []
    for term in terms:
        keep_form = term.fill is not None and not term.masked_where
        if term.split is None and (term.fill is None or keep_form):
            kind = mask_kind(graph, term.value, producers, sq, sk)
            # a causal part that masks with a finite value stays a term beside others: a row
            # the others hide everywhere averages over all keys in torch, the past ones with
            # the kernel's flag
            finite = (term.fill if term.fill is not None else
                      lowest(graph, term.value, producers, sq, sk) if kind == "causal"
                      else 0.0) > float("-inf")
            if kind == "none" or (kind == "causal" and not (finite and len(terms) > 1)):
                causal = causal or kind == "causal"
                continue
        if term.fill is None and term.split is None:
            split = causal_part(graph, term.value, producers, sq, sk)
            if split is not None:
                causal = True
                term = dataclasses.replace(term, value=split)
        left.append(term)
    scores = (*(lift or q.shape[:2]), sq, sk)
    for term in left:
        shape = tuple(_term_shape(term))
        try:
            if len(shape) > 4 or tuple(broadcast_shapes(shape, scores)) != scores:
                return None
        except (TypeError, ValueError):
            return None
    return causal, (left or None)


def _term_shape(term):
    """The term's shape beside [B, H, S, T] scores (4 dims: leading 1s where it has fewer)."""
    v = term.value
    shape = tuple(v[1].shape if isinstance(v, tuple) else v.shape)
    if term.split is None:
        return (1,) * (4 - len(shape)) + shape
    shape = (1,) * (3 - len(shape)) + shape
    return (tuple(term.split) if shape[0] != 1 else (1, 1)) + shape[1:]


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
    """[..., S, D] @ [..., D, T], then @ [..., T, Dv], with equal leading dims (B, H; or
    B*H of a lifted 3-D product)."""
    rank = len(q.shape)
    if rank not in (3, 4) or not (len(kt.shape) == len(v.shape) == rank):
        return False
    qk = v.dtype if narrow else q.dtype
    if not (qk == v.dtype == out.dtype and (narrow or q.dtype == kt.dtype)) \
            or not v.dtype.is_float:
        return False
    same = q.shape[:-2] == kt.shape[:-2] == v.shape[:-2]
    return same and q.shape[-1] == kt.shape[-2] and kt.shape[-1] == v.shape[-2]


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
