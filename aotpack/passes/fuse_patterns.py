"""Pattern fusion on canonical IR: recognise the decomposed forms of ops our kernels implement
and replace them by one IR node.
- RoPE: x*cos + rot(x)*sin → ROPE(x, cos, sin) {interleaved, rotary_dim, dtype}
  (passes/fuse_rope.py: rotate-half and interleaved, f32 tables, partial rotary)
- RMSNorm: x * rsqrt(mean(x², -1, keepdim) + eps) [→ cast] [* w] → RMS_NORM(x [, w])
- LayerNorm written out (BERT's original, ConvNeXt): (x - mean(x)) / sqrt(mean((x - mean(x))²)
  + eps) (or * rsqrt) [* w [+ b]] over the last dim → LAYER_NORM(x [, w [, b]])
- (log_)softmax of a scaled input: softmax(x * c | x / c) → SOFTMAX(x, scale) (scaled in f32)
- a norm computed on an upcast copy and cast back (Gemma's RMSNorm: f32 math, f32 weight):
  cast(norm(cast(x, f32), w...), dtype(x)) → norm(x, w...) (the kernels do f32 math and round
  once at the store: the same numbers, without two cast kernels)
- GELU, tanh form written out (GPT-2's gelu_new): 0.5 * x * (1 + tanh(sqrt(2/pi) * (x +
  0.044715 * x³))) → GELU(x, tanh) (one f32 evaluation instead of eight rounded steps)
- GELU, erf form written out (BERT's original, ESM): x * 0.5 * (1 + erf(x / sqrt(2))) →
  GELU(x) (then a GEMM epilogue like any GELU)
- GQA by repetition (HF repeat_kv: k[:, :, None].expand(..).reshape(..), repeat_interleave):
  sdpa(q, repeat(k), repeat(v)) → sdpa(q, k, v, gqa) — the repeated copies disappear
Unused leftovers are removed by dead_code."""
from __future__ import annotations

import dataclasses

from aotpack.dtypes import DType
from aotpack.ir import ops as O
from aotpack.ir.graph import Graph, GraphBuilder, Node, Value
from aotpack.ir.ops import Op
from aotpack.passes.canonicalize import dead_code
from aotpack.passes.gemm_chain import scalar_factor
from aotpack.passes.views import View


def fuse_patterns(graph: Graph) -> Graph:
    # LayerNorm first: its rsqrt form contains an RMSNorm of the centred x
    graph = _rewrite(graph, _match_layer_norm)
    graph = _rewrite(graph, _match_layer_norm_affine)  # * w
    graph = _rewrite(graph, _match_layer_norm_affine)  # + b
    graph = _rewrite(graph, _match_rms_norm)
    graph = _rewrite(graph, _match_rms_weight)
    from aotpack.passes.fuse_rope import fuse_rope  # (it uses this module's helpers)

    graph = fuse_rope(graph)
    graph = _rewrite(graph, _match_softmax_scale)
    graph = _rewrite(graph, _match_gelu_tanh)
    graph = _rewrite(graph, _match_gelu_erf)
    graph = _rewrite(graph, _match_upcast_norm)
    graph = _fold_repeat_kv(graph)
    return dead_code(graph).verify()


def _rewrite(graph: Graph, matcher) -> Graph:
    """Run `matcher(node, producers)` on every node; a match is (op, inputs, attrs) that
    replaces the node (its output keeps its name and type)."""
    producers = graph.producers()
    b = GraphBuilder(graph)
    for n in graph.nodes:
        match = matcher(n, producers)
        if match is None:
            b.keep(n)
            continue
        op, inputs, attrs = match
        b.nodes.append(Node(op, tuple(b.get(v) for v in inputs), attrs, n.outputs, n.loc))
    return b.finish()


def _match_upcast_norm(n: Node, producers):
    """n = cast(norm(cast(x, f32) [, w [, b]]), x.dtype) with norm RMS_NORM or LAYER_NORM
    → norm(x [, w [, b]]) typed as x."""
    if n.op != Op.CAST:
        return None
    norm = producers.get(n.inputs[0].name)
    if norm is None or norm.op not in (Op.RMS_NORM, Op.LAYER_NORM):
        return None
    up = _prod(norm.inputs[0], producers, Op.CAST)
    if up is None or up.output.dtype != DType.F32:
        return None
    x = up.inputs[0]
    if x.dtype != n.output.dtype or not x.dtype.is_float or x.dtype == DType.F64:
        return None
    return norm.op, [x, *norm.inputs[1:]], norm.attrs


def _scaled(v: Value, producers, c: float) -> Value | None:
    """x if v = x * c (or c * x), c to 1e-4 relative."""
    n = _prod(v, producers, Op.MUL)
    if n is None or n.attrs.scalar is None or abs(n.attrs.scalar - c) > 1e-4 * abs(c):
        return None
    return n.inputs[0]


def _match_gelu_tanh(n: Node, producers):
    """n = (0.5 * x) * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x**3))) (either operand order,
    and x + c*x**3 either way round)."""
    if n.op != Op.MUL or not _tensor_binary(n):
        return None
    for half, one_plus in (n.inputs, n.inputs[::-1]):
        x = _scaled(half, producers, 0.5)
        add1 = _prod(one_plus, producers, Op.ADD)
        if x is None or add1 is None or add1.attrs.scalar != 1.0 or x.type != n.output.type:
            continue
        tanh = _prod(add1.inputs[0], producers, Op.TANH)
        inner = tanh and _scaled(tanh.inputs[0], producers, 0.7978845608028654)
        add = inner and _prod(inner, producers, Op.ADD)
        if not _tensor_binary(add) or x not in add.inputs:
            continue
        other = add.inputs[1] if add.inputs[0] == x else add.inputs[0]
        cube = _scaled(other, producers, 0.044715)
        pw = cube and _prod(cube, producers, Op.POW)
        if (pw is not None and pw.inputs[0] == x and pw.attrs.scalar == 3.0
                and not pw.attrs.scalar_first):
            return Op.GELU, [x], O.GeluAttrs("tanh")
    return None


def _match_gelu_erf(n: Node, producers):
    """n = (0.5 * x) * (1 + erf(x / sqrt(2) | x * 1/sqrt(2))), or x * (0.5 * (1 + erf(..)))
    (either operand order)."""
    if n.op != Op.MUL or not _tensor_binary(n):
        return None
    for a, b in (n.inputs, n.inputs[::-1]):
        x = _scaled(a, producers, 0.5)
        one_plus = b
        if x is None:  # x * (0.5 * (1 + erf(..)))
            x, one_plus = a, _scaled(b, producers, 0.5)
        add1 = one_plus is not None and _prod(one_plus, producers, Op.ADD)
        if not add1 or add1.attrs.scalar != 1.0 or x.type != n.output.type:
            continue
        erf = _prod(add1.inputs[0], producers, Op.ERF)
        inner = erf and erf.inputs[0]
        if inner and (_scaled(inner, producers, 0.7071067811865476) == x
                      or _divided(inner, producers, 1.4142135623730951) == x):
            return Op.GELU, [x], O.GeluAttrs("none")
    return None


def _divided(v: Value, producers, c: float) -> Value | None:
    """x if v = x / c, c to 1e-4 relative."""
    n = _prod(v, producers, Op.DIV)
    if n is None or n.attrs.scalar is None or n.attrs.scalar_first \
            or abs(n.attrs.scalar - c) > 1e-4 * abs(c):
        return None
    return n.inputs[0]


def _prod(v: Value, producers, op: Op) -> Node | None:
    n = producers.get(v.name)
    return n if n is not None and n.op == op else None


def _tensor_binary(n: Node | None) -> bool:
    return n is not None and n.op in O.BINARY and n.attrs.scalar is None and len(n.inputs) == 2


def _last_dim_mean(v: Value, producers) -> Node | None:
    mean = _prod(v, producers, Op.MEAN)
    x = mean and mean.inputs[0]
    ok = mean and mean.attrs.keepdim and mean.attrs.dims == (len(x.shape) - 1,)
    return mean if ok else None


def _norm_denominator(r: Value, root_op: Op, producers) -> tuple[float, Value] | None:
    """(eps, d) if r = root_op(mean(d*d | d**2, -1, keepdim) + eps), root_op SQRT or RSQRT."""
    root = _prod(r, producers, root_op)
    add = root and _prod(root.inputs[0], producers, Op.ADD)
    if not add or add.attrs.scalar is None:
        return None
    mean = _last_dim_mean(add.inputs[0], producers)
    sq = mean and producers.get(mean.inputs[0].name)
    if sq is None:
        return None
    # x ** 2, not 2 ** x (a POW with the scalar first is an exponential)
    if ((sq.op == Op.POW and sq.attrs.scalar == 2.0 and not sq.attrs.scalar_first)
            or (sq.op == Op.MUL and _tensor_binary(sq) and sq.inputs[0] == sq.inputs[1])):
        return float(add.attrs.scalar), sq.inputs[0]
    return None


# ----------------------------------------------------------------------------- RMSNorm
def _match_rms_norm(n: Node, producers):
    """n = x * rsqrt(mean(x*x | x**2, -1, keepdim) + eps) (either operand order), x also
    the 16-bit original of the f32 copy the statistics read (T5's norm multiplies the bf16
    hidden state by the f32 factor: type promotion makes that the f32 copy's product)."""
    if n.op != Op.MUL or not _tensor_binary(n):
        return None
    for x, r in (n.inputs, n.inputs[::-1]):
        m = _norm_denominator(r, Op.RSQRT, producers)
        if m is None:
            continue
        up = _prod(m[1], producers, Op.CAST)
        if m[1] == x or (up is not None and up.inputs[0] == x):
            if n.output.type == m[1].type:
                return Op.RMS_NORM, [m[1]], O.NormAttrs(m[0], 1)
    return None


def _match_rms_weight(n: Node, producers):
    """n = w * [cast](rms_norm(x)) with w of shape [C] → rms_norm(x, w), if dtypes allow."""
    if n.op != Op.MUL or not _tensor_binary(n):
        return None
    for y, w in (n.inputs, n.inputs[::-1]):
        src = y
        cast = _prod(y, producers, Op.CAST)
        if cast is not None:
            src = cast.inputs[0]
        norm = _prod(src, producers, Op.RMS_NORM)
        if norm is None or len(norm.inputs) != 1 or tuple(w.shape) != (y.shape[-1],):
            continue
        x = norm.inputs[0]
        if x.type == n.output.type:
            return Op.RMS_NORM, [x, w], norm.attrs
        # x was upcast for the statistics (HF style): read the original x instead
        up = _prod(x, producers, Op.CAST)
        if up is not None and up.inputs[0].type == n.output.type:
            return Op.RMS_NORM, [up.inputs[0], w], norm.attrs
    return None


# ----------------------------------------------------------------------------- LayerNorm
def _centred(v: Value, producers) -> Value | None:
    """x if v = x - mean(x, -1, keepdim)."""
    sub = _prod(v, producers, Op.SUB)
    if not _tensor_binary(sub):
        return None
    x, m = sub.inputs
    mean = _last_dim_mean(m, producers)
    return x if mean is not None and mean.inputs[0] == x and sub.output.type == x.type else None


def _match_layer_norm(n: Node, producers):
    """n = (x - mean(x)) / sqrt(var + eps) or (x - mean(x)) * rsqrt(var + eps)."""
    if n.op not in (Op.DIV, Op.MUL) or not _tensor_binary(n):
        return None
    pairs = [n.inputs] if n.op == Op.DIV else [n.inputs, n.inputs[::-1]]
    for d, r in pairs:
        x = _centred(d, producers)
        if x is None or n.output.type != x.type:
            continue
        m = _norm_denominator(r, Op.SQRT if n.op == Op.DIV else Op.RSQRT, producers)
        if m is not None and _centred(m[1], producers) == x:
            return Op.LAYER_NORM, [x], O.NormAttrs(m[0], 1)
    return None


def _match_layer_norm_affine(n: Node, producers):
    """w * layer_norm(x) → layer_norm(x, w); then layer_norm(x, w) + b → layer_norm(x, w, b)
    (w, b of shape [C] and the norm's dtype)."""
    if n.op not in (Op.MUL, Op.ADD) or not _tensor_binary(n):
        return None
    for y, t in (n.inputs, n.inputs[::-1]):
        norm = _prod(y, producers, Op.LAYER_NORM)
        if (norm is None or norm.attrs.ndim != 1 or tuple(t.shape) != (y.shape[-1],)
                or t.dtype != y.dtype or n.output.type != y.type):
            continue
        if (n.op == Op.MUL and len(norm.inputs) == 1) or (n.op == Op.ADD
                                                          and len(norm.inputs) == 2):
            return Op.LAYER_NORM, [*norm.inputs, t], norm.attrs
    return None


# ----------------------------------------------------------------------------- softmax
def _match_softmax_scale(n: Node, producers):
    """softmax(x * c) or softmax(x / c) (c a Python number) → softmax(x, scale=c or 1/c).
    The scaled value stays if something else reads it (dead_code drops it otherwise)."""
    if n.op not in (Op.SOFTMAX, Op.LOG_SOFTMAX):
        return None
    src = producers.get(n.inputs[0].name)
    scale = None if src is None else scalar_factor(src)
    if scale is None or src.inputs[0].type != n.inputs[0].type:
        return None
    return n.op, [src.inputs[0]], O.SoftmaxAttrs(n.attrs.dim, n.attrs.scale * scale)


# ----------------------------------------------------------------------------- GQA
def _unrepeated(v: Value, producers) -> tuple[Value, View] | None:
    """(base, view [B, Hkv, S, D]) if v = contiguous copy of base viewed [B, Hkv, g, S, D] with
    a 0 stride on g, reshaped to [B, Hkv*g, S, D]."""
    view = _prod(v, producers, Op.AS_STRIDED)
    copy = view and _prod(view.inputs[0], producers, Op.COPY)
    expand = copy and _prod(copy.inputs[0], producers, Op.AS_STRIDED)
    if expand is None or len(v.shape) != 4 or len(expand.attrs.shape) != 5:
        return None
    if view.attrs != O.StridedAttrs(*_contiguous_attrs(v.shape)):
        return None
    b, hkv, g, s, d = expand.attrs.shape
    if expand.attrs.strides[2] != 0 or (b, hkv * g, s, d) != tuple(v.shape):
        return None
    strides = expand.attrs.strides
    return expand.inputs[0], View((b, hkv, s, d), strides[:2] + strides[3:],
                                  expand.attrs.offset)


def _contiguous_attrs(shape):
    c = View.contiguous(tuple(shape))
    return c.shape, c.strides, c.offset


def _fold_repeat_kv(graph: Graph) -> Graph:
    producers = graph.producers()
    b = GraphBuilder(graph)
    for n in graph.nodes:
        if n.op != Op.SDPA or n.attrs.gqa:
            b.keep(n)
            continue
        k, v = (_unrepeated(x, producers) for x in n.inputs[1:3])
        if k is None or v is None:
            b.keep(n)
            continue
        kv = [b.emit(Op.AS_STRIDED, [base], O.StridedAttrs(view.shape, view.strides,
                                                            view.offset),
                     base.dtype, view.shape, f"{old.name}_kv", n.loc)
              for (base, view), old in ((k, n.inputs[1]), (v, n.inputs[2]))]
        attrs = dataclasses.replace(n.attrs, gqa=True)  # positions, window, cap kept
        mask = tuple(b.get(m) for m in n.inputs[3:])
        b.nodes.append(Node(Op.SDPA, (b.get(n.inputs[0]), *kv, *mask), attrs, n.outputs, n.loc))
    return b.finish()
