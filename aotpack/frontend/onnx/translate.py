"""ONNX graph → IR, node by node with rules.RULES; the same IR the torch frontend produces.

Every ONNX value is either an IR `Value` (computed at run time, or a weight once a run-time
node reads it), a numpy array known at translation time (initializers, Constant nodes,
shapes and what is computed from them: host.py), or a `Lazy` value computed from constants
and dynamic dims whose contents change with the dims (lazy.py: evaluated at concrete sizes,
stored at the maxima when a run-time node reads it). A node whose inputs are all known is
evaluated here and emits no IR. Dims are ints or symbols (OnnxShapes).
"""
from __future__ import annotations

import re

import numpy as np

from aotpack.dtypes import DType
from aotpack.frontend.aten_table import Unsupported
from aotpack.frontend.onnx import patterns
from aotpack.frontend.onnx.dims import OnnxShapes
from aotpack.frontend.onnx.host import HostError, fold, is_symbolic_array
from aotpack.frontend.onnx.lazy import Lazy, LazyValues
from aotpack.frontend.onnx.model import OnnxModel, elem_dtype
from aotpack.frontend.symbolic import SymbolError
from aotpack.frontend.translate import _FOLD_LIMIT, _FOLD_LIMIT_INDEX, UnsupportedOpError
from aotpack.ir.graph import Constant, Graph, GraphOutput, Node, SourceLoc, Value
from aotpack.ir.infer import infer
from aotpack.ir.ops import ExpandAttrs, NoAttrs, Op, SliceAttrs, ViewAttrs
from aotpack.ir.sym import SymbolicError, is_symbolic, symbol

# never evaluated on the build host: their values are not functions of their inputs
_NO_FOLD = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
            "Bernoulli", "Multinomial"}


# rules that look at a lazy operand themselves (an all-True mask computed from the dims)
_TAKES_LAZY = {"And", "Or"}


def onnx_to_graph(model: OnnxModel, shapes: OnnxShapes) -> Graph:
    return OnnxTranslator(model, shapes).run()


class OnnxTranslator:
    def __init__(self, model: OnnxModel, shapes: OnnxShapes):
        self.model = model
        self.shapes = shapes
        self.opset = model.opset
        self.syms = {s.name: symbol(s.name, s.lo, s.hi) for s in shapes.symbols}
        self.env: dict[str, object] = {}  # ONNX value name -> Value | np.ndarray
        self.inputs: list[Value] = []
        self.constants: dict[str, Constant] = {}
        self.nodes: list[Node] = []
        self.producers: dict[str, Node] = {}
        self.taken: set[str] = set()
        self.as_ir: dict[str, Value] = {}  # ONNX name of a known value -> its IR constant
        # values computed from constants and dynamic dims (lazy.py), stored when read
        self.lazy = LazyValues(shapes.symbols, self.syms, self.opset, _FOLD_LIMIT_INDEX)
        self.materialized: dict[int, Value] = {}
        self.pads: dict[str, tuple] = {}  # zero-padded value -> (source, spatial pads)
        self.node = None
        self.index = 0
        self._names: dict[int, str] = {}

    # -------------------------------------------------------------- driver
    def run(self) -> Graph:
        from onnx import numpy_helper

        g = self.model.proto.graph
        for t in g.initializer:
            self.env[t.name] = numpy_helper.to_array(t)
        for spec in self.model.inputs:
            dims = tuple(self.syms[d] if isinstance(d, str) else d
                         for d in self.shapes.dims[spec.name])
            value = Value(self._fresh(spec.name), self.float_dtype(spec.dtype), dims)
            self.inputs.append(value)
            self.env[spec.name] = value
        matches = patterns.find(g, self.env)
        counts: dict[str, int] = {}
        for self.index, self.node in enumerate(g.node):
            counts[self.node.op_type] = counts.get(self.node.op_type, 0) + 1
            if self.index in matches.skip:
                continue
            self._translate(matches.replace.get(self.index))
        outputs = [GraphOutput(_clean(o), self._output(o)) for o in self.model.output_names]
        meta = {"aten_ops": {f"onnx.{k}": v for k, v in counts.items()},
                "symbols": list(self.shapes.symbols), "example": dict(self.shapes.examples),
                "dim_sources": dict(self.shapes.sources), "guards": [], "model_kind": "onnx"}
        return Graph(self.inputs, self.constants, self.nodes, outputs, meta).verify()

    def _translate(self, replacement) -> None:
        from aotpack.frontend.onnx.rules import RULES

        n = self.node
        ins = [self.env.get(name) if name else None for name in n.input]
        # known arrays by identity -> their ONNX names (a weight keeps its name in the IR)
        self._names = {id(v): name for name, v in zip(n.input, ins) if isinstance(v, np.ndarray)}
        for name, v in zip(n.input, ins):
            if name and v is None and replacement is None:
                raise self.error(f"input {name!r} is not defined before the node (a graph "
                                 f"that is not topologically sorted, or a subgraph's value)")
        try:
            if replacement is not None:
                outs = replacement(self)
            elif n.domain not in ("", "ai.onnx"):
                raise self.error(self._unsupported_text())
            elif all(isinstance(v, (np.ndarray, Lazy)) or v is None for v in ins) \
                    and n.op_type not in _NO_FOLD:
                outs = self.lazy.outputs(n, ins) if any(isinstance(v, Lazy) for v in ins) \
                    else self._fold(n, ins, RULES)
            elif n.op_type == "Gather" and isinstance(ins[0], Value) \
                    and isinstance(ins[1], Lazy) and self._counts_through(n, ins):
                outs = self._whole_axis(n, ins)
            elif n.op_type in RULES:
                ins = [self._rule_input(v) if isinstance(v, Lazy) and n.op_type not in
                       _TAKES_LAZY else v for v in ins]
                outs = RULES[n.op_type](self, n, ins)
            else:
                raise self.error(self._unsupported_text())
        except HostError as e:
            raise self.error(f"{n.op_type} cannot be computed at build time: {e}; aotpack "
                             f"evaluates shape computations on dynamic dims only through "
                             f"Shape, Gather, Slice, Concat, Unsqueeze, Squeeze, Reshape, "
                             f"Cast and integer arithmetic") from None
        except Unsupported as e:
            raise self.error(f"{n.op_type} with {e} is not supported") from None
        except (SymbolicError, SymbolError, TypeError, ValueError) as e:
            raise self.error(f"{n.op_type}: {e}") from None
        outs = outs if isinstance(outs, (list, tuple)) else [outs]
        for name, v in zip(n.output, outs):
            if name:
                self.env[name] = v

    def _fold(self, n, ins, rules):
        """A node of known inputs computed now; one of dynamic sizes the host cannot compute
        symbolically (Range(0, S), a fill of a dynamic shape) becomes lazy (lazy.py); one the
        host cannot compute otherwise goes to its rule, if it has one."""
        try:
            return fold(n, ins, self.opset)
        except (HostError, SymbolicError):
            if any(is_symbolic_array(v) for v in ins if v is not None):
                return self.lazy.outputs(n, ins)
            if n.op_type not in rules:
                raise
            return rules[n.op_type](self, n, ins)

    def _output(self, name: str) -> Value:
        v = self.env.get(name)
        if isinstance(v, Lazy):
            try:
                v = self._materialize(v)
            except Unsupported as e:
                raise UnsupportedOpError(f"ONNX graph output {name!r}: {e}") from None
        if isinstance(v, np.ndarray) and not is_symbolic_array(v):
            v = self.emit_named(Op.COPY, [self.tensor(name)], NoAttrs(), name)
        if not isinstance(v, Value):
            raise UnsupportedOpError(f"ONNX graph output {name!r} is computed from dynamic "
                                     f"sizes only (a shape): aotpack outputs tensors")
        if any(not is_symbolic(d) and d == 0 for d in v.shape):
            raise UnsupportedOpError(f"ONNX graph output {name!r} has no elements (shape "
                                     f"{list(v.shape)}): aotpack outputs non-empty tensors")
        if v in self.inputs:  # an input passed through: the output needs its own storage
            v = self.emit_named(Op.COPY, [v], NoAttrs(), name)
        return v

    # -------------------------------------------------------------- used by the rules
    def attr(self, name: str, default=None):
        from onnx import helper

        for a in self.node.attribute:
            if a.name == name:
                v = helper.get_attribute_value(a)
                return v.decode() if isinstance(v, bytes) else v
        return default

    def float_dtype(self, dt: DType) -> DType:
        """`dt`, or the --dtype cast for a floating dtype."""
        return self.model.cast if dt.is_float and self.model.cast is not None else dt

    def onnx_dtype(self, elem_type: int) -> DType:
        return self.float_dtype(elem_dtype(elem_type, f"node {self.node.name!r}"))

    def tensor(self, ref) -> Value:
        """An input as an IR value: a known numeric array becomes a constant (once per ONNX
        name; weights keep their initializer's name)."""
        v = self.env.get(ref) if isinstance(ref, str) else ref
        if isinstance(v, Value):
            return v
        if isinstance(v, Lazy):
            return self._materialize(v)
        if v is None or is_symbolic_array(v):
            raise Unsupported(f"{ref if isinstance(ref, str) else 'a value'} computed from "
                              f"dynamic sizes used as a tensor")
        key = ref if isinstance(ref, str) else self._names.get(id(v))
        if key is not None and key in self.as_ir:
            return self.as_ir[key]
        t = to_torch(v)
        dt = DType.from_torch(t.dtype)
        if dt.is_float and self.float_dtype(dt) != dt:
            t = t.to(self.float_dtype(dt).to_torch())
            dt = self.float_dtype(dt)
        name = self._fresh(key if key is not None else f"{self._base()}_const")
        value = Value(name, dt, tuple(t.shape))
        self.constants[name] = Constant(value, t.contiguous())
        if key is not None:
            self.as_ir[key] = value
        return value

    def _counts_through(self, n, ins) -> bool:
        x, axis = ins[0], int(self.attr("axis", 0)) % max(len(ins[0].shape), 1)
        return bool(x.shape) and self.lazy.counts_up_to(ins[1], x.shape[axis])

    def _whole_axis(self, n, ins) -> Value:
        """Gather of a run-time tensor at indices that count through its whole axis: a view
        (the indices' shape in place of the axis)."""
        x = ins[0]
        axis = int(self.attr("axis", 0)) % len(x.shape)
        shape = tuple(x.shape[:axis]) + self.lazy.shape(ins[1]) + tuple(x.shape[axis + 1:])
        return self.emit(Op.VIEW, [x], ViewAttrs(shape))

    def _rule_input(self, v: Lazy):
        """A lazy input of a rule: sizes (a shape argument) as a symbolic array, anything
        else as a stored table."""
        sizes = self.lazy.as_sizes(v)
        return sizes if sizes is not None else self.tensor(v)

    def _materialize(self, v: Lazy) -> Value:
        """A lazy value as IR: its table at the dims' maxima, read through slices (and an
        expand) of its symbolic shape."""
        if id(v) in self.materialized:
            return self.materialized[id(v)]
        if v.node.op_type == "ConstantOfShape" and not isinstance(v.inputs[0], Lazy):
            x = self._fill(v)  # one element expanded: nothing evaluated at the maxima
            self.materialized[id(v)] = x
            return x
        try:
            full, shape = self.lazy.table(v, to_torch)
        except SymbolError as e:
            raise Unsupported(str(e)) from None
        nbytes = full.numel() * full.element_size()
        if nbytes > _FOLD_LIMIT:
            raise Unsupported(f"{v.name} computed from constants would be stored at the dims' "
                              f"maxima as {list(full.shape)} ({nbytes >> 20} MiB, limit "
                              f"{_FOLD_LIMIT >> 20} MiB): lower the maxima")
        dt = DType.from_torch(full.dtype)
        if dt.is_float and self.float_dtype(dt) != dt:
            full = full.to(self.float_dtype(dt).to_torch())
        x = Value(self._fresh(f"{_clean(v.name)}_table"), DType.from_torch(full.dtype),
                  tuple(full.shape))
        self.constants[x.name] = Constant(x, full.contiguous())
        for i, d in enumerate(shape):
            if full.shape[i] != 1 and is_symbolic(d):
                x = self.emit_named(Op.SLICE, [x], SliceAttrs(i, 0, d), f"{v.name}_slice")
        if tuple(x.shape) != tuple(shape):
            x = self.emit_named(Op.EXPAND, [x], ExpandAttrs(tuple(shape)), f"{v.name}_expand")
        self.materialized[id(v)] = x
        return x

    def _fill(self, v: Lazy) -> Value:
        """ConstantOfShape of a dynamic shape: its one value expanded (a stride-0 view)."""
        from onnx import helper, numpy_helper

        attrs = {a.name: helper.get_attribute_value(a) for a in v.node.attribute}
        one = numpy_helper.to_array(attrs["value"]).reshape(-1)[:1] if "value" in attrs \
            else np.zeros(1, np.float32)
        shape = tuple(d if is_symbolic(d) else int(d) for d in v.inputs[0].reshape(-1))
        base = self.tensor(one.reshape((1,) * len(shape)))
        return self.emit_named(Op.EXPAND, [base], ExpandAttrs(shape), f"{v.name}_fill")

    def add_constant(self, name: str, tensor, exact=None) -> Value:
        """A constant a rule computes (batch norm's scale and shift, a pool's divisor map;
        `exact`: its value before rounding, see Constant)."""
        t = tensor.contiguous()
        value = Value(self._fresh(f"{self._base()}_{name}"), DType.from_torch(t.dtype),
                      tuple(t.shape))
        self.constants[value.name] = Constant(value, t, exact)
        return value

    def emit(self, op: Op, inputs, attrs, final: bool = False) -> Value:
        """A new node (`final` is accepted for the torch rules reused here, e.g. _conv2d)."""
        return self.emit_named(op, inputs, attrs, f"{self._base()}_{op.value}")

    def emit_named(self, op: Op, inputs, attrs, name: str) -> Value:
        inputs = [self.tensor(x) if not isinstance(x, Value) else x for x in inputs]
        t = infer(op, [v.type for v in inputs], attrs)
        value = Value(self._fresh(_clean(name)), t.dtype, tuple(t.shape))
        self.nodes.append(Node(op, tuple(inputs), attrs, (value,), self.loc()))
        self.producers[value.name] = self.nodes[-1]
        return value

    def padded_source(self, v: Value) -> tuple[Value, tuple]:
        """(x, per-spatial-dim (lo, hi) zeros) when `v` is a zero Pad of x, else (v, zeros):
        a convolution reading it takes the zeros into its own padding."""
        if v.name in self.pads:
            return self.pads[v.name]
        return v, ((0, 0),) * max(len(v.shape) - 2, 0)

    def constant_value(self, v):
        """The tensor of a constant `v` (None for anything computed)."""
        c = self.constants.get(v.name) if isinstance(v, Value) else None
        return None if c is None else c.tensor

    def producer(self, value) -> Node | None:
        """The IR node that computes `value` (None for inputs, constants, known arrays)."""
        return self.producers.get(value.name) if isinstance(value, Value) else None

    def loc(self) -> SourceLoc:
        n = self.node
        if n is None:
            return SourceLoc("output", self.model.path.name)
        code = f"{', '.join(n.output)} = {n.op_type}({', '.join(n.input)})"
        return SourceLoc(n.name or f"{n.op_type}_{self.index}", self.model.path.name,
                         self.index + 1, code)

    def error(self, what: str) -> UnsupportedOpError:
        from aotpack.frontend.onnx.rules import RULES

        n = self.node
        return UnsupportedOpError(
            f"{what}.\n  node: {n.name or '(unnamed)'} = {n.op_type}"
            f"({', '.join(n.input)}) → {', '.join(n.output)}, domain "
            f"{n.domain or 'ai.onnx'}, opset {self._opset(n.domain)}\n"
            f"  where: {self.model.path.name}, node #{self.index + 1}\n"
            f"  Export the model so that this part uses supported operators, or open an "
            f"issue.\n  Supported ONNX operators: {', '.join(sorted(RULES))}")

    def _unsupported_text(self) -> str:
        n = self.node
        hint = ""
        if n.domain == "com.microsoft":
            hint = (" (an onnxruntime contrib op, written by onnxruntime's graph optimizer: "
                    "give aotpack the model as exported, before ORT optimization)")
        elif n.op_type in ("GRU", "LSTM", "RNN"):
            hint = (" (recurrent layers are not read from ONNX: build the PyTorch model "
                    "instead, as a torch.export .pt2 or a module saved with torch.save, "
                    "docs/onnx.md)")
        return f"ONNX operator {n.op_type} is not supported{hint}"

    def _opset(self, domain: str) -> int:
        for o in self.model.proto.opset_import:
            if o.domain == domain or (domain in ("", "ai.onnx") and o.domain in ("", "ai.onnx")):
                return int(o.version)
        return 0

    def _base(self) -> str:
        n = self.node
        return _clean(n.output[0] if n is not None and n.output else "v")

    def _fresh(self, name: str) -> str:
        base, i = name or "v", 0
        name = base
        while name in self.taken:
            i += 1
            name = f"{base}_{i}"
        self.taken.add(name)
        return name


def _clean(name: str) -> str:
    """A readable value name: ONNX names like `/encoder/layer.0/MatMul_output_0`."""
    out = re.sub(r"[^\w.]+", "_", name).strip("_.")
    return out or "v"


def to_torch(a: np.ndarray):
    import torch

    a = np.ascontiguousarray(a).reshape(np.shape(a))  # ascontiguousarray makes 0-d 1-d
    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
    if a.dtype == np.uint16 or a.dtype == np.uint32 or a.dtype == np.uint64:
        a = a.astype(np.int64)
    return torch.from_numpy(a.copy())
