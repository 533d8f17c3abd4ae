"""ONNX values computed from constants and dynamic dims only, whose contents change with the
dims: `Range(0, S)`, the causal mask exporters build from it (LessOrEqual of two Ranges,
And, Where, Expand to [B, 1, S, T]), a fill of a dynamic shape. They cannot be folded into one
array, so, as the torch frontend does (frontend/symbolic.py), the node is kept and evaluated
on the build host at concrete points (a value per symbol, through the same host evaluation
as folding); a run-time op that reads one gets the value at the dims' maxima, stored once and
read through a slice of the symbolic size (`table_at_maxima` checks, at probe points, that
the value at smaller dims is that slice).

Such a value has no IR type until then; its symbolic shape is fitted from the shapes at the
probe points (each dim an integer affine function of the symbols, checked at every point).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from aotpack.frontend.aten_table import Unsupported
from aotpack.frontend.onnx.host import HostError, fold, is_symbolic_array
from aotpack.frontend.symbolic import SymbolError, probe_points, table_at_maxima
from aotpack.ir.sym import Sym, subs


@dataclass(eq=False)
class Lazy:
    """Output `index` of `node`, whose inputs are known arrays (symbolic ones hold dims),
    Lazy values, or None."""

    name: str
    node: object  # onnx NodeProto
    index: int
    inputs: list = field(repr=False)


class LazyValues:
    def __init__(self, symbols: list[Sym], exprs: dict, opset: int, limit_bytes: int):
        self.symbols = list(symbols)
        self.exprs = exprs  # symbol name -> its Expr
        self.opset = opset
        self.limit = limit_bytes
        self._memo: dict[tuple, np.ndarray] = {}
        self._shapes: dict[int, tuple] = {}

    def outputs(self, node, ins) -> list[Lazy]:
        return [Lazy(name, node, i, list(ins)) for i, name in enumerate(node.output)]

    # -------------------------------------------------------------- evaluation
    def value(self, v: Lazy, point: dict) -> np.ndarray:
        key = (id(v), tuple(sorted(point.items())))
        if key not in self._memo:
            ins = [self._at(x, point) for x in v.inputs]
            try:
                out = fold(v.node, ins, self.opset)[v.index]
            except (MemoryError, HostError) as e:
                if not isinstance(e, MemoryError) and "MemoryError" not in str(e):
                    raise
                raise SymbolError(f"{v.name} ({v.node.op_type}) computed from constants does "
                                  f"not fit in the build host's memory at dims {point}: lower "
                                  f"the dims' maxima") from None
            if out.nbytes > self.limit:
                raise SymbolError(f"{v.name} ({v.node.op_type}) computed from constants would "
                                  f"take {out.nbytes >> 20} MiB at dims {point} on the build "
                                  f"host: lower the dims' maxima")
            self._memo[key] = out
        return self._memo[key]

    def _at(self, x, point):
        if isinstance(x, Lazy):
            return self.value(x, point)
        if is_symbolic_array(x):
            return np.array([int(subs(d, point)) for d in x.flat],
                            dtype=np.int64).reshape(x.shape)
        return x

    # -------------------------------------------------------------- as a table
    def points(self) -> list[dict]:
        return probe_points(self.symbols)

    def max_point(self) -> dict:
        return {s.name: s.hi for s in self.symbols}

    def shape(self, v: Lazy) -> tuple:
        """v's shape as dims over the symbols (ints where it does not vary)."""
        if id(v) not in self._shapes:
            dims = self._affine(lambda p: np.shape(self.value(v, p)))
            if dims is None:
                raise Unsupported(f"a value computed from the dynamic dims ({v.name}, "
                                  f"{v.node.op_type}) whose shape is not a whole multiple of "
                                  f"the dims plus a constant")
            self._shapes[id(v)] = dims
        return self._shapes[id(v)]

    def as_sizes(self, v: Lazy) -> np.ndarray | None:
        """A short integer vector of sizes (a shape an exporter computed with ops the host
        evaluates only on numbers) as a symbolic array, if each entry is an integer affine
        function of the symbols; else None."""
        small = self.value(v, {s.name: s.lo for s in self.symbols})  # cheap to compute
        if small.ndim != 1 or small.size > 8 or small.dtype.kind not in "iu":
            return None
        at_max = self.value(v, self.max_point())
        if at_max.shape != small.shape:
            return None
        try:
            if self.shape(v) != at_max.shape:
                return None
        except Unsupported:
            return None
        entries = self._affine(lambda p: tuple(int(x) for x in self.value(v, p)))
        if entries is None:
            return None
        out = np.array(entries, dtype=object)
        return out if any(not isinstance(x, int) for x in entries) else out.astype(np.int64)

    def _affine(self, at) -> tuple | None:
        """Per entry of the integer tuple `at(point)`, c0 + sum(c_i * symbol_i) with integer
        c, fitted from each symbol alone at its maximum and checked at every probe point."""
        base = {s.name: s.lo for s in self.symbols}
        out = list(at(base))
        for s in self.symbols:
            if s.hi == s.lo:
                continue
            moved = at(dict(base, **{s.name: s.hi}))
            if len(moved) != len(out):
                return None
            for i, (now, then) in enumerate(zip(out, moved)):
                step, rest = divmod(then - at(base)[i], s.hi - s.lo)
                if rest:
                    return None
                if step:
                    out[i] = now + step * (self.exprs[s.name] - s.lo)
        fitted = tuple(out)
        for p in self.points():
            if tuple(int(subs(d, p)) for d in fitted) != tuple(at(p)):
                return None
        return fitted

    def table(self, v: Lazy, to_torch):
        """(tensor to store, v's symbolic shape)."""
        shape = self.shape(v)
        full = table_at_maxima(lambda p: to_torch(self.value(v, p)), shape, self.max_point(),
                               self.points(), f"{v.name} ({v.node.op_type})")
        return full, shape

    def counts_up_to(self, v: Lazy, size) -> bool:
        """Whether v, flattened, is 0, 1, ..., size - 1 at every probe point and at the
        maxima (`size` a dim): the positions of a whole axis in order (indices an exporter
        computes as batch * T + t to gather [B, T] → [B, 1, 1, T])."""
        for p in self.points() + [self.max_point()]:
            got = self.value(v, p)
            n = int(subs(size, p))
            if got.dtype.kind not in "iu" or got.size != n \
                    or not np.array_equal(got.reshape(-1), np.arange(n)):
                return False
        return True
