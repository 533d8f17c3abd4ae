"""RoPE recognition on canonical IR: the rotary embeddings models write out become one ROPE
node (ops.RopeAttrs), whatever form of the rotation, table dtype or rotated width they use.
Three rewrites, each on the previous one's graph:
1. x*cos + rot(x)*sin → ROPE(x, cos, sin), rot either
   - rotate-half, cat(-x[.., D/2:], x[.., :D/2]) (Llama and most), or
   - interleaved, stack(-x[.., 1::2], x[.., 0::2], -1).flatten(-2) (GLM, Helium, Ernie 4.5);
   x and rot(x) may each come through an exact float widening (Ernie: q.float()), and cos/sin
   may be of a wider dtype than x (OLMo-2 keeps them in f32): the node computes in the dtype
   they promote to, as the model did.
2. cast(ROPE(x) computed wider, narrower dtype) → ROPE(x){dtype}: the kernels do f32 math and
   round once at the store, so the cast-back is part of the rope (no extra kernel).
3. cat(ROPE(x[.., :R]), x[.., R:], -1) → ROPE(x){rotary_dim=R} (StableLM, Phi, GLM: partial
   rotary): the kernel copies the passed-through dims itself, so the result is one op over
   whole heads, which the KV-write fusion (passes/fuse_kv_write.py) can take.
A form not matched keeps its pointwise ops: the result is the same, only slower.
"""
from __future__ import annotations

from aotpack.ir import ops as O
from aotpack.ir.graph import Graph, GraphBuilder, Node, Value
from aotpack.ir.ops import Op
from aotpack.ir.types import promote
from aotpack.passes.fuse_patterns import _prod, _rewrite, _tensor_binary
from aotpack.passes.views import View


def fuse_rope(graph: Graph) -> Graph:
    graph = _rewrite(graph, _match_rope)
    graph = _rewrite(graph, _match_rounded_rope)
    return _fold_partial(graph)


def _view_of(v: Value, producers) -> tuple[str, View]:
    """(base value's name, v's view of it): an AS_STRIDED's input, else v itself."""
    n = producers.get(v.name)
    if n is not None and n.op == Op.AS_STRIDED:
        return n.inputs[0].name, View(n.attrs.shape, n.attrs.strides, n.attrs.offset)
    return v.name, View.contiguous(v.shape)


def _same_view(a: View | None, b: View | None) -> bool:
    """Equal as views (strides of size-1 dims do not matter)."""
    if a is None or b is None or a.shape != b.shape or a.offset != b.offset:
        return False
    return all(n == 1 or s == t for n, s, t in zip(a.shape, a.strides, b.strides))


def _lane(v: Value, x: Value, producers, start: int, step: int, count: int,
          unit: bool = False) -> bool:
    """v == x[..., start::step] (`count` elements; `unit`: with a trailing size-1 dim), as
    views of the same base."""
    vb, vv = _view_of(v, producers)
    xb, xv = _view_of(x, producers)
    inner = xv.strides[-1]
    tail = (1,) if unit else ()
    want = View(tuple(xv.shape[:-1]) + (count,) + tail,
                tuple(xv.strides[:-1]) + (inner * step,) + tail, xv.offset + start * inner)
    return vb == xb and _same_view(vv, want)


def _is_rotate_half(v: Value, x: Value, producers) -> bool:
    """v == cat(-x[..., D/2:], x[..., :D/2], dim=-1)."""
    cat = _prod(v, producers, Op.CAT)
    if cat is None or len(cat.inputs) != 2 or cat.attrs.dims != (len(v.shape) - 1,):
        return False
    neg = _prod(cat.inputs[0], producers, Op.NEG)
    half = x.shape[-1] // 2
    return (neg is not None and x.shape == v.shape
            and _lane(neg.inputs[0], x, producers, half, 1, half)
            and _lane(cat.inputs[1], x, producers, 0, 1, half))


def _is_rotate_interleaved(v: Value, x: Value, producers) -> bool:
    """v == stack(-x[..., 1::2], x[..., 0::2], dim=-1).flatten(-2): canonical IR has it as a
    reshape of cat(unsqueeze(neg(odd)), even as [.., D/2, 1], dim=-1)."""
    flat = _prod(v, producers, Op.AS_STRIDED)
    cat = flat and _prod(flat.inputs[0], producers, Op.CAT)
    half = x.shape[-1] // 2
    if cat is None or len(cat.inputs) != 2 or x.shape != v.shape or \
            tuple(cat.output.shape) != tuple(x.shape[:-1]) + (half, 2):
        return False
    a = flat.attrs
    if not _same_view(View(a.shape, a.strides, a.offset), View.contiguous(tuple(v.shape))):
        return False
    neg_name, neg_view = _view_of(cat.inputs[0], producers)
    neg = producers.get(neg_name)
    if neg is None or neg.op != Op.NEG or \
            not _same_view(neg_view, View.contiguous(tuple(neg.output.shape) + (1,))):
        return False
    return (_lane(neg.inputs[0], x, producers, 1, 2, half)
            and _lane(cat.inputs[1], x, producers, 0, 2, half, unit=True))


def _widened_from(v: Value, producers) -> Value:
    """v's value before an exact float widening (bf16/f16 → f32: q.float()), else v."""
    c = _prod(v, producers, Op.CAST)
    if c is not None and c.inputs[0].dtype.is_float and \
            c.inputs[0].dtype.nbytes < v.dtype.nbytes:
        return c.inputs[0]
    return v


def _rotation(x: Value, rot: Value, producers) -> tuple[Value, bool] | None:
    """(the x the rotation is of, interleaved) when rot == rotate(x), either form, looking
    through exact widenings of x and rot (the same numbers in the wider dtype; the caller
    checks the math's dtype)."""
    for xa in dict.fromkeys((_widened_from(x, producers), x)):
        for ra in dict.fromkeys((_widened_from(rot, producers), rot)):
            if len(xa.shape) != 4 or xa.shape[-1] % 2:  # RopeOp is [B, H, S, D]
                continue
            if _is_rotate_half(ra, xa, producers):
                return xa, False
            if _is_rotate_interleaved(ra, xa, producers):
                return xa, True
    return None


def _rope_table_ok(t: Value, x: Value) -> bool:
    """cos/sin must be [S, D] after dropping leading 1s, or [B, 1, S, D] (each sequence at
    its own positions), of a float dtype: what RopeOp reads."""
    dims = list(t.shape)
    while len(dims) > 2 and dims[0] == 1:
        dims.pop(0)
    per_batch = (len(t.shape) == 4 and t.shape[0] == x.shape[0] and t.shape[1] == 1
                 and tuple(t.shape[2:]) == tuple(x.shape[-2:]))
    return (tuple(dims) == tuple(x.shape[-2:]) or per_batch) and t.dtype.is_float


def _match_rope(n: Node, producers):
    if n.op != Op.ADD or not _tensor_binary(n):
        return None
    for p, r in (n.inputs, n.inputs[::-1]):
        mul_cos, mul_sin = _prod(p, producers, Op.MUL), _prod(r, producers, Op.MUL)
        if not (_tensor_binary(mul_cos) and _tensor_binary(mul_sin)):
            continue
        for x, cos in (mul_cos.inputs, mul_cos.inputs[::-1]):
            for rot, sin in (mul_sin.inputs, mul_sin.inputs[::-1]):
                found = _rotation(x, rot, producers)
                if found is None:
                    continue
                x0, interleaved = found
                # the node computes in what x0, cos and sin promote to: that must be the
                # dtype the model's math ran in
                math = promote(promote(x0.dtype, cos.dtype), sin.dtype)
                if (_rope_table_ok(cos, x0) and _rope_table_ok(sin, x0)
                        and tuple(n.output.shape) == tuple(x0.shape)
                        and n.output.dtype == math):
                    return Op.ROPE, [x0, cos, sin], O.RopeAttrs(interleaved=interleaved)
    return None


def _match_rounded_rope(n: Node, producers):
    """cast(ROPE(..) computed in a wider float dtype, narrower float) → ROPE(..){dtype}."""
    if n.op != Op.CAST:
        return None
    rope = _prod(n.inputs[0], producers, Op.ROPE)
    if rope is None or rope.attrs.dtype is not None:
        return None
    wide, narrow = rope.output.dtype, n.output.dtype
    if not (narrow.is_float and narrow.nbytes < wide.nbytes):
        return None
    attrs = O.RopeAttrs(rope.attrs.interleaved, rope.attrs.rotary_dim, narrow)
    return Op.ROPE, list(rope.inputs), attrs


def _fold_partial(graph: Graph) -> Graph:
    """cat(ROPE(x[.., :R]), x[.., R:], -1) → ROPE(x){rotary_dim=R}; x is a new view of the
    base both slices view."""
    producers = graph.producers()
    b = GraphBuilder(graph)
    for n in graph.nodes:
        found = _partial(n, producers)
        if found is None:
            b.keep(n)
            continue
        rope, base, view = found
        x = b.emit(Op.AS_STRIDED, [base], O.StridedAttrs(view.shape, view.strides, view.offset),
                   base.dtype, view.shape, f"{n.output.name}_x", n.loc)
        attrs = O.RopeAttrs(rope.attrs.interleaved, rope.inputs[0].shape[-1], rope.attrs.dtype)
        inputs = (x, b.get(rope.inputs[1]), b.get(rope.inputs[2]))
        b.nodes.append(Node(Op.ROPE, inputs, attrs, n.outputs, n.loc))
    return b.finish()


def _partial(n: Node, producers):
    """(the rope, the base value, the view of the whole heads) when n is cat(ROPE(x[.., :R]),
    x[.., R:], dim=-1), the two slices adjacent in one base; else None."""
    if n.op != Op.CAT or len(n.inputs) != 2 or len(n.output.shape) != 4 or \
            n.attrs.dims != (3,):
        return None
    rope = _prod(n.inputs[0], producers, Op.ROPE)
    if rope is None or rope.attrs.rotary_dim is not None or \
            rope.output.dtype != n.output.dtype:
        return None
    x_rot, x_pass = rope.inputs[0], n.inputs[1]
    sliced = _prod(x_rot, producers, Op.AS_STRIDED)
    if sliced is None or x_pass.dtype != x_rot.dtype or \
            tuple(x_pass.shape[:-1]) != tuple(x_rot.shape[:-1]):
        return None
    r, d = x_rot.shape[-1], n.output.shape[-1]
    a = sliced.attrs
    whole = View(tuple(a.shape[:-1]) + (d,), tuple(a.strides), a.offset)
    if not _lane(x_pass, x_rot, producers, r, 1, d - r):  # x[.., R:] right after x[.., :R]
        return None
    return rope, sliced.inputs[0], whole
