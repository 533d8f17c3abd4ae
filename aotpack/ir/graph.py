"""The typed graph: Values, Nodes, Constants, Graph (+ verify and a readable dump).

Values and Nodes are immutable; a pass builds a new node list (see `GraphBuilder`). Names are
unique in a graph: inputs keep the user's names, constants the module's names (`fc1.weight`).
"""
from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Iterable

from aotpack.dtypes import DType
from aotpack.ir.infer import TensorType, infer
from aotpack.ir.ops import Op, attrs_type
from aotpack.ir.sym import SymbolicError
from aotpack.ir.types import Shape, format_shape


@dataclass(frozen=True)
class Value:
    name: str
    dtype: DType
    shape: Shape

    @property
    def type(self) -> TensorType:
        return TensorType(self.dtype, tuple(self.shape))

    def __str__(self) -> str:
        return f"%{self.name}: {self.dtype.value}{format_shape(self.shape)}"


@dataclass(frozen=True)
class SourceLoc:
    """Where a node came from: the exported node's name and the user's source line."""

    node: str
    file: str | None = None
    line: int | None = None
    code: str | None = None

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.file else "<unknown source>"
        return f"{where}" + (f": {self.code}" if self.code else "")


@dataclass(frozen=True)
class Node:
    op: Op
    inputs: tuple[Value, ...]
    attrs: Any
    outputs: tuple[Value, ...]
    loc: SourceLoc | None = None

    @property
    def output(self) -> Value:
        if len(self.outputs) != 1:
            raise ValueError(f"{self.op.value} has {len(self.outputs)} outputs")
        return self.outputs[0]

    def __str__(self) -> str:
        outs = ", ".join(str(v) for v in self.outputs)
        args = ", ".join("%" + v.name for v in self.inputs)
        attrs = _format_attrs(self.attrs)
        attrs = " " + attrs if attrs else ""
        return f"{outs} = {self.op.value}({args}){attrs}"


def _format_attrs(attrs) -> str:
    parts = []
    for f in fields(attrs):
        v = getattr(attrs, f.name)
        if f.default is not MISSING and v == f.default:
            continue  # keep dumps short: defaults are not printed
        parts.append(f"{f.name}={v.value if isinstance(v, DType) else v}")
    return "{" + ", ".join(parts) + "}" if parts else ""


@dataclass
class Constant:
    """A weight or buffer: a contiguous CPU torch tensor (or a meta tensor for shape-only
    graphs) behind `value`."""

    value: Value
    tensor: Any
    # the value before it was rounded to `value`'s dtype (a batch norm's scale and shift, in
    # f64): a pass that computes with it (folding into a conv's weights) rounds once, at its end
    exact: Any = None
    # (e4m3 tensor, f32 scale per row) when the model computes this [.., N, K] weight from an
    # FP8 one (passes/fp8_sources.py): the bundle keeps those instead (passes/quantize.py)
    fp8: Any = None


@dataclass(frozen=True)
class GraphOutput:
    name: str
    value: Value


class VerifyError(Exception):
    pass


@dataclass
class Graph:
    inputs: list[Value]
    constants: dict[str, Constant]
    nodes: list[Node]
    outputs: list[GraphOutput]
    meta: dict = field(default_factory=dict)

    # ------------------------------------------------------------------ queries
    def producers(self) -> dict[str, Node]:
        return {v.name: n for n in self.nodes for v in n.outputs}

    def users(self) -> dict[str, list[Node]]:
        out: dict[str, list[Node]] = {}
        for n in self.nodes:
            for v in n.inputs:
                out.setdefault(v.name, [])
                if n not in out[v.name]:
                    out[v.name].append(n)
        return out

    def output_names(self) -> set[str]:
        return {o.value.name for o in self.outputs}

    def names(self) -> set[str]:
        names = {v.name for v in self.inputs} | set(self.constants)
        return names | {v.name for n in self.nodes for v in n.outputs}

    def count_ops(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for n in self.nodes:
            counts[n.op.value] = counts.get(n.op.value, 0) + 1
        return counts

    # ------------------------------------------------------------------ checks
    def verify(self) -> "Graph":
        """SSA, every use defined before it, attrs of the right kind, types match the type
        rules, outputs defined. Returns self; raises VerifyError."""
        defined: dict[str, Value] = {}
        for v in list(self.inputs) + [c.value for c in self.constants.values()]:
            self._define(defined, v, "graph input/constant")
        for name, c in self.constants.items():
            if c.value.name != name:
                raise VerifyError(f"constant {name!r} holds value {c.value.name!r}")
        for n in self.nodes:
            self._verify_node(n, defined)
            for v in n.outputs:
                self._define(defined, v, str(n))
        for o in self.outputs:
            if defined.get(o.value.name) != o.value:
                raise VerifyError(f"output {o.name!r} uses undefined value {o.value}")
        if len({o.name for o in self.outputs}) != len(self.outputs):
            raise VerifyError("duplicate output names")
        return self

    @staticmethod
    def _define(defined: dict, v: Value, where: str) -> None:
        if v.name in defined:
            raise VerifyError(f"value %{v.name} defined twice (SSA), again by {where}")
        defined[v.name] = v

    @staticmethod
    def _verify_node(n: Node, defined: dict) -> None:
        for v in n.inputs:
            if defined.get(v.name) != v:
                raise VerifyError(f"{n}: input %{v.name} is used before it is defined "
                                  f"(or with another type)")
        if not isinstance(n.attrs, attrs_type(n.op)):
            raise VerifyError(f"{n}: attrs {type(n.attrs).__name__}, expected "
                              f"{attrs_type(n.op).__name__}")
        try:
            want = infer(n.op, [v.type for v in n.inputs], n.attrs)
        except (TypeError, ValueError) as e:
            raise VerifyError(f"{n}: {e}") from None
        except SymbolicError as e:  # a size that may be 0 or less within the dims' ranges
            where = f", from {n.loc}" if n.loc is not None and n.loc.file else ""
            raise SymbolicError(f"{e}: the {n.op.value} of %{n.output.name}{where}; narrow the "
                                f"dims' ranges to where its sizes stay positive") from None
        got = n.output.type
        if want != got:
            raise VerifyError(f"{n}: type rule gives {want.dtype.value}"
                              f"{format_shape(want.shape)}")

    # ------------------------------------------------------------------ printing
    def __str__(self) -> str:
        lines = ["graph(" + ", ".join(str(v) for v in self.inputs) + ") {"]
        for c in self.constants.values():
            lines.append(f"  const {c.value}")
        for n in self.nodes:
            lines.append(f"  {n}")
        outs = ", ".join(f"{o.name}=%{o.value.name}" for o in self.outputs)
        lines.append(f"  return {outs}")
        lines.append("}")
        return "\n".join(lines)


class GraphBuilder:
    """Builds the node list of a new graph from an old one: passes re-emit nodes with their
    inputs substituted (`subst`), drop nodes by mapping their outputs to other values, or emit
    new nodes with fresh names."""

    def __init__(self, graph: Graph):
        self.old = graph
        self.nodes: list[Node] = []
        self.subst: dict[str, Value] = {}
        self.constants = dict(graph.constants)
        self._taken = graph.names()

    def get(self, v: Value) -> Value:
        while v.name in self.subst:
            v = self.subst[v.name]
        return v

    def replace(self, old: Value, new: Value) -> None:
        if old.name != new.name:
            self.subst[old.name] = new

    def fresh(self, prefix: str) -> str:
        name, i = prefix, 0
        while name in self._taken:
            i += 1
            name = f"{prefix}_{i}"
        self._taken.add(name)
        return name

    def release(self, name: str) -> None:
        """`name` belongs to a dropped node: a node emitted next may reuse it."""
        self._taken.discard(name)

    def keep(self, n: Node) -> Node:
        node = Node(n.op, tuple(self.get(v) for v in n.inputs), n.attrs, n.outputs, n.loc)
        self.nodes.append(node)
        return node

    def emit(self, op: Op, inputs: Iterable[Value], attrs, dtype: DType, shape: Shape,
             name: str, loc: SourceLoc | None = None) -> Value:
        out = Value(self.fresh(name), dtype, tuple(shape))
        self.nodes.append(Node(op, tuple(self.get(v) for v in inputs), attrs, (out,), loc))
        return out

    def emit_inferred(self, op: Op, inputs: Iterable[Value], attrs, name: str,
                      loc: SourceLoc | None = None) -> Value:
        """emit, with the output's type from the IR type rule."""
        inputs = [self.get(v) for v in inputs]
        t = infer(op, [v.type for v in inputs], attrs)
        return self.emit(op, inputs, attrs, t.dtype, tuple(t.shape), name, loc)

    def add_constant(self, name: str, tensor, dtype: DType, exact=None, fp8=None) -> Value:
        value = Value(self.fresh(name), dtype, tuple(tensor.shape))
        self.constants[value.name] = Constant(value, tensor, exact, fp8)
        return value

    def finish(self) -> Graph:
        outputs = [GraphOutput(o.name, self.get(o.value)) for o in self.old.outputs]
        return Graph(list(self.old.inputs), self.constants, self.nodes, outputs,
                     dict(self.old.meta))
