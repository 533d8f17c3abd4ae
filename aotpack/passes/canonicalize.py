"""Canonicalization: dead code, no-op folding, trivial constant folding, and every layout op
turned into one AS_STRIDED view of a non-view value (or COPY + view where no strided view
exists). After this pass no node reads a VIEW/PERMUTE/SLICE/... node, and an AS_STRIDED never
reads another AS_STRIDED: a kernel operand is always (storage, strides, offset)."""
from __future__ import annotations

from aotpack.errors import UserError
from aotpack.ir import ops as O
from aotpack.ir.graph import Graph, GraphBuilder, Node, Value
from aotpack.ir.ops import Op
from aotpack.ir.types import is_static
from aotpack.passes.views import View, compose, layout_view, strided_attrs

# Constants bigger than this are never produced by folding (it would bloat the bundle).
_FOLD_LIMIT = 1 << 26


def canonicalize(graph: Graph) -> Graph:
    graph = dead_code(graph)
    graph = fold_noops(graph)
    graph = fold_constants(graph)
    graph = scalar_constants(graph)
    graph = to_strided_views(graph)
    return dead_code(graph).verify()


def dead_code(graph: Graph) -> Graph:
    """Drop nodes whose outputs no output depends on, and constants nobody reads."""
    live = {o.value.name for o in graph.outputs}
    kept = []
    for n in reversed(graph.nodes):
        if any(v.name in live for v in n.outputs):
            kept.append(n)
            live.update(v.name for v in n.inputs)
    constants = {k: c for k, c in graph.constants.items() if k in live}
    return Graph(list(graph.inputs), constants, list(reversed(kept)), list(graph.outputs),
                 dict(graph.meta))


def _is_noop(n: Node) -> bool:
    x, out = n.inputs[0] if n.inputs else None, n.output
    if x is None or x.type != out.type:
        return False
    if n.op in (Op.CAST, Op.COPY, Op.VIEW, Op.EXPAND, Op.SQUEEZE):
        return True
    if n.op == Op.PERMUTE:
        return list(n.attrs.dims) == sorted(n.attrs.dims)
    if n.op == Op.SLICE:
        return n.attrs.step == 1
    if n.op == Op.AS_STRIDED:
        return View(n.attrs.shape, n.attrs.strides, n.attrs.offset).is_identity_of(x.shape)
    if n.op in (Op.ADD, Op.SUB) and n.attrs.scalar == 0 and not n.attrs.scalar_first:
        return True
    if n.op in (Op.MUL, Op.DIV) and n.attrs.scalar == 1 and not n.attrs.scalar_first:
        return True
    return n.op == Op.CAT and len(n.inputs) == 1


def fold_noops(graph: Graph) -> Graph:
    """Identity casts/copies/views/permutes/slices, x+0, x*1 → their input. COPY is always
    removed here: in a functional graph a copy means nothing; to_strided_views re-inserts the
    copies that layout actually needs."""
    b = GraphBuilder(graph)
    for n in graph.nodes:
        if n.op == Op.COPY or _is_noop(n):
            b.replace(n.output, b.get(n.inputs[0]))
        else:
            b.keep(n)
    return b.finish()


class FoldError(UserError):
    """A computation on constants that torch refuses (the model's, as exported)."""


def fold_constants(graph: Graph) -> Graph:
    """Compute nodes whose inputs are all constant-valued (constants, or views of them) become
    constants, e.g. a cast of a weight or a rotary table computed from a buffer. Layout ops on
    constants stay views (free); meta (shape-only) tensors are never evaluated."""
    from aotpack.ir.interpret import eval_node
    from aotpack.passes.fp8_sources import parts_of_fold

    b = GraphBuilder(graph)
    known = {name: c.tensor for name, c in graph.constants.items() if not c.tensor.is_meta}
    fp8 = {name: c.fp8 for name, c in graph.constants.items() if c.fp8 is not None}
    for n in graph.nodes:
        ins = [b.get(v) for v in n.inputs]
        if not ins or not all(v.name in known for v in ins) or not is_static(n.output.shape):
            b.keep(n)
            continue
        try:
            tensor = eval_node(n, [known[v.name] for v in ins])
        except (RuntimeError, IndexError, ValueError) as e:  # torch refuses what the model says
            dtypes = sorted({v.dtype.value for v in ins if v.dtype.is_float})
            hint = (f"; it mixes {' and '.join(dtypes)} (a TorchScript trace keeps the dtypes it "
                    f"was traced in: trace it in the dtype you build)" if len(dtypes) > 1 else
                    "; an index beyond the table: is an input longer than the model's position "
                    "table?" if isinstance(e, IndexError) else "")
            raise FoldError(f"{n.op.value} node %{n.output.name} ({n.loc or 'no source'}) on "
                            f"constants cannot be computed: {e}{hint}") from None
        parts = parts_of_fold(n, ins, fp8, known)  # a weight the model dequantizes from FP8
        big = tensor.numel() * tensor.element_size() > _FOLD_LIMIT  # (an FP8 one is stored
        if n.op in O.LAYOUT or big and parts is None:  # as its e4m3 bytes: folded anyway)
            b.keep(n)
            known[n.output.name] = tensor
            continue
        value = b.add_constant(n.output.name, tensor.contiguous(), n.output.dtype, fp8=parts)
        known[value.name] = tensor
        if parts is not None:
            fp8[value.name] = parts
        b.replace(n.output, value)
    return b.finish()


def scalar_constants(graph: Graph) -> Graph:
    """x op c with c a one-element float constant tensor → op(x, scalar c), the form the
    fusions match (an attention's scale, a GEMM epilogue's factor): TorchScript's converter and
    ONNX keep such factors as tensors (a traced attention's 1/sqrt(d) lost its fusion). Only
    where the tensor form's output has x's shape and dtype: a [1]-shaped f32 constant
    promotes a bf16 x to f32, and a scalar would not."""
    b = GraphBuilder(graph)
    for n in graph.nodes:
        found = _scalar_operand(n, graph) if n.op in (Op.ADD, Op.SUB, Op.MUL, Op.DIV) else None
        if found is None:
            b.keep(n)
            continue
        x, c, first = found
        b.nodes.append(Node(n.op, (b.get(x),), O.BinaryAttrs(scalar=c, scalar_first=first),
                            n.outputs, n.loc))
    return b.finish()


def _scalar_operand(n: Node, graph: Graph):
    """(x, c, c is the first operand) for x op c with c a one-element float constant, else
    None."""
    if n.attrs.scalar is not None or len(n.inputs) != 2:
        return None
    for i, j in ((1, 0), (0, 1)):
        const, x = graph.constants.get(n.inputs[i].name), n.inputs[j]
        if const is None or x.name in graph.constants or const.tensor.is_meta \
                or const.tensor.numel() != 1 or not const.tensor.is_floating_point():
            continue
        if x.dtype.is_float and x.dtype == n.output.dtype and tuple(x.shape) == \
                tuple(n.output.shape):
            return x, float(const.tensor.reshape(())), i == 0
    return None


def _numel(shape) -> int:
    out = 1
    for d in shape:
        out *= d
    return out


def to_strided_views(graph: Graph) -> Graph:
    """Every layout op → AS_STRIDED of a non-view value; COPY where no strided view exists."""
    b = GraphBuilder(graph)
    views: dict[str, tuple[Value, View]] = {}  # new value name -> (base, view over base)

    def view_of(v: Value) -> tuple[Value, View]:
        return views.get(v.name, (v, View.contiguous(v.shape)))

    for n in graph.nodes:
        if n.op not in O.LAYOUT:
            b.keep(n)
            continue
        src = b.get(n.inputs[0])
        base, inner = view_of(src)
        outer = layout_view(n.op, n.attrs, tuple(src.shape))
        view = compose(inner, outer)
        if view is None:  # not expressible as a view: materialize the input first
            base = b.emit(Op.COPY, [src], O.NoAttrs(), src.dtype, src.shape,
                          f"{src.name}_contig", n.loc)
            view = outer
        if view.is_identity_of(base.shape):
            b.replace(n.output, base)
            continue
        b.release(n.output.name)  # the view keeps the layout op's name
        out = b.emit(Op.AS_STRIDED, [base], strided_attrs(view), n.output.dtype, view.shape,
                     n.output.name, n.loc)
        views[out.name] = (base, view)
        b.replace(n.output, out)
    return b.finish()
