"""Channels-last propagation: move the permutes the frontend puts around CONV and POOL (which
compute on [N, H, W, C]) past the ops between them, so that a network of convolutions runs
channels-last end to end and its permutes cancel in pairs (canonicalize removes an identity
view). Runs on the frontend graph, before canonicalize.

A value `v = permute(t, P)` with P = (0, r-1, 1, ..., r-2) (the channels of `t`'s last dim
moved to dim 1: the model's NCHW / NCL view of a channels-last result) has `t` as its
channels-last *twin*. Then:
 - permute(v, P^-1) is `t` itself;
 - an elementwise op reading a twinned value is computed on the twins instead (other operands
   permuted alike: a small constant as a new permuted constant, anything else by a permute
   node), and its result becomes permute(new, P) with a twin;
 - mean over H and W (global average pooling) of a twinned 4-D value becomes a global POOL;
 - a cat along the channels of twinned values is a cat of the twins along their last dim.
Nothing else moves; a permute left over is an ordinary strided view.
"""
from __future__ import annotations

from aotpack.ir import ops as O
from aotpack.ir.graph import Graph, GraphBuilder, Node, Value
from aotpack.ir.ops import Op
from aotpack.ir.types import is_static

_SMALL_CONSTANT = 1 << 20  # elements: constants up to this are stored permuted, not viewed


def channels_first(rank: int) -> tuple[int, ...]:
    """P: the permutation from channels-last [N, ..., C] to channels-first [N, C, ...]."""
    return (0, rank - 1) + tuple(range(1, rank - 1))


def channels_last(rank: int) -> tuple[int, ...]:
    """P^-1: channels-first [N, C, ...] to channels-last [N, ..., C]."""
    return (0,) + tuple(range(2, rank)) + (1,)


def propagate_channels_last(graph: Graph) -> Graph:
    if not any(n.op in (Op.CONV, Op.POOL) for n in graph.nodes):
        return graph
    return _Propagation(graph).run()


class _Propagation:
    def __init__(self, graph: Graph):
        self.g = graph
        self.b = GraphBuilder(graph)
        self.twin: dict[str, Value] = {}  # channels-first value name -> channels-last twin

    def run(self) -> Graph:
        for n in self.g.nodes:
            if not self._rewrite(n):
                node = self.b.keep(n)
                self._note_twin(node)
        return self.b.finish().verify()

    def _note_twin(self, n: Node) -> None:
        r = len(n.output.shape)
        if n.op == Op.PERMUTE and r >= 3 and tuple(n.attrs.dims) == channels_first(r):
            self.twin[n.output.name] = n.inputs[0]

    def _rewrite(self, n: Node) -> bool:
        ins = [self.b.get(v) for v in n.inputs]
        r = len(n.output.shape)
        if n.op == Op.PERMUTE and ins[0].name in self.twin and r >= 3 \
                and tuple(n.attrs.dims) == channels_last(r):
            self.b.replace(n.output, self.twin[ins[0].name])
            return True
        if n.op in O.ELEMENTWISE and r >= 3 \
                and any(v.name in self.twin and len(v.shape) == r for v in ins):
            return self._elementwise(n, ins)
        if n.op == Op.MEAN and ins[0].name in self.twin and len(ins[0].shape) == 4:
            return self._global_mean(n, ins[0])
        if n.op == Op.CAT and n.attrs.dims == (1,) and ins \
                and all(v.name in self.twin for v in ins):
            twins = [self.twin[v.name] for v in ins]
            out = self._emit(n, Op.CAT, twins, O.DimAttrs((r - 1,)))
            self._finish(n, out)
            return True
        return False

    def _emit(self, n: Node, op: Op, ins, attrs) -> Value:
        return self.b.emit_inferred(op, ins, attrs, f"{n.output.name}_cl", n.loc)

    def _finish(self, n: Node, out_cl: Value) -> None:
        """n's value is now permute(out_cl, P): emitted under n's name, twinned."""
        r = len(out_cl.shape)
        self.b.release(n.output.name)
        v = self.b.emit(Op.PERMUTE, [out_cl], O.PermuteAttrs(channels_first(r)),
                        n.output.dtype, n.output.shape, n.output.name, n.loc)
        self.b.replace(n.output, v)
        self.twin[v.name] = out_cl

    def _elementwise(self, n: Node, ins: list[Value]) -> bool:
        r = len(n.output.shape)
        moved = [self._to_channels_last(v, r, n) for v in ins]
        if any(m is None for m in moved):
            return False
        self._finish(n, self._emit(n, n.op, moved, n.attrs))
        return True

    def _to_channels_last(self, v: Value, r: int, n: Node) -> Value | None:
        """`v` (broadcast against a rank-r channels-first value) as channels-last."""
        if v.name in self.twin and len(v.shape) == r:
            return self.twin[v.name]
        shape = (1,) * (r - len(v.shape)) + tuple(v.shape)
        perm = channels_last(r)
        new_shape = tuple(shape[d] for d in perm)
        if all(d == 1 for d in shape):
            return v  # a scalar-like operand broadcasts the same either way
        c = self.b.constants.get(v.name)
        if c is not None and not c.tensor.is_meta and c.tensor.numel() <= _SMALL_CONSTANT:
            t = c.tensor.reshape(shape).permute(perm).contiguous()
            exact = None if c.exact is None else \
                c.exact.reshape(shape).permute(perm).contiguous()  # for fold_conv_bn
            return self.b.add_constant(f"{v.name}_cl", t, v.dtype, exact)
        if not is_static(shape) and len(v.shape) != r:
            return None
        if len(v.shape) != r:
            v = self.b.emit(Op.VIEW, [v], O.ViewAttrs(shape), v.dtype, shape,
                            f"{v.name}_r{r}", n.loc)
        return self.b.emit(Op.PERMUTE, [v], O.PermuteAttrs(perm), v.dtype, new_shape,
                           f"{v.name}_cl", n.loc)

    def _global_mean(self, n: Node, x: Value) -> bool:
        """mean over (H, W) of a twinned [N, C, H, W]: a global average POOL of the twin."""
        if tuple(n.attrs.dims) != (2, 3):
            return False
        t = self.twin[x.name]
        h, w = t.shape[1], t.shape[2]
        if not (isinstance(h, int) and isinstance(w, int)):
            return False
        pooled = self._emit(n, Op.POOL, [t], O.PoolAttrs("avg", (h, w), (h, w)))
        if n.attrs.keepdim:
            self._finish(n, pooled)
        else:
            self.b.release(n.output.name)
            v = self.b.emit(Op.VIEW, [pooled], O.ViewAttrs(tuple(n.output.shape)),
                            n.output.dtype, n.output.shape, n.output.name, n.loc)
            self.b.replace(n.output, v)
        return True
