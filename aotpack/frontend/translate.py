"""torch.export → IR: export (non-strict), decompose to core aten while keeping the high-level
ops our kernels implement, then translate node by node with aten_table.RULES."""
from __future__ import annotations

import re

from aotpack.dtypes import DType
from aotpack.frontend.aten_table import RULES, Unsupported
from aotpack.ir.graph import Constant, Graph, GraphOutput, Node, SourceLoc, Value
from aotpack.ir.infer import infer


_FOLD_LIMIT = 1 << 26  # bytes: larger computed constants would bloat the bundle
# integer/bool results (masks, ids) are evaluated on the host up to this; one over _FOLD_LIMIT
# that is still read when translation ends is refused (_check_large_index_constants), so this
# bounds host memory, not the bundle: transformers' [B, 1, S, S] causal mask at B=8, S=8192 is
# 512 MiB
_FOLD_LIMIT_INDEX = 1 << 30
# never evaluated on the build host: randomness, uninitialised memory, and the checks export
# records (an _assert_tensor_metadata of a CUDA export names a device the host may not have)
_NO_FOLD = ("rand", "normal", "bernoulli", "dropout", "empty", "_assert", "sym_constrain")


class UnsupportedOpError(Exception):
    """An operator (or a form of one) that aotpack cannot compile; the message names the aten
    op, the exported node, the user's source line and what to do."""


def kept_ops():
    """High-level aten ops that must survive decomposition (a kernel implements each)."""
    import torch

    a = torch.ops.aten
    return [a.linear.default, a.scaled_dot_product_attention.default, a.rms_norm.default,
            a.layer_norm.default, a.gelu.default, a.silu.default, a.matmul.default]


def export(model, example_inputs):
    """ExportedProgram decomposed to core aten + kept_ops()."""
    import torch

    if isinstance(model, torch.export.ExportedProgram):
        ep = model
    else:
        ep = torch.export.export(model, tuple(example_inputs), strict=False)
    table = torch.export.default_decompositions()
    for op in kept_ops():
        table.pop(op, None)
    return ep.run_decompositions(table)


def to_graph(model_or_ep, example_inputs) -> Graph:
    ep = export(model_or_ep, example_inputs)
    return _Translator(ep).run()


def source_loc(fx_node) -> SourceLoc:
    """The innermost frame of the node's stack trace that is user code (not torch itself)."""
    trace = fx_node.meta.get("stack_trace") or ""
    frames = re.findall(r'File "([^"]+)", line (\d+), in [^\n]*\n\s*([^\n]*)', trace)
    user = [f for f in frames if "/torch/" not in f[0]] or frames
    if not user:
        return SourceLoc(fx_node.name)
    file, line, code = user[-1]
    return SourceLoc(fx_node.name, file, int(line), code.strip())


class _Translator:
    def __init__(self, ep):
        self.ep = ep
        self.env: dict[str, object] = {}  # fx node name -> Value | list[Value] | None
        self.inputs: list[Value] = []
        self.constants: dict[str, Constant] = {}
        self.computed: set[str] = set()  # constants folded here (not weights)
        self.nodes: list[Node] = []
        self.taken: set[str] = set()
        self.fx_node = None

    # -------------------------------------------------------------- driver
    def run(self) -> Graph:
        for n in self.ep.graph.nodes:
            if n.op == "placeholder":
                self._placeholder(n)
            elif n.op == "call_function":
                self._call(n)
            elif n.op == "output":
                outputs = self._outputs(n)
            else:
                raise UnsupportedOpError(f"exported node {n.name} has kind {n.op!r}")
        counts: dict[str, int] = {}
        for n in self.ep.graph.nodes:
            if n.op == "call_function":
                counts[str(n.target)] = counts.get(str(n.target), 0) + 1
        self._check_large_index_constants(outputs)
        return Graph(self.inputs, self.constants, self.nodes, outputs,
                     {"aten_ops": counts}).verify()

    def _check_large_index_constants(self, outputs) -> None:
        """An integer/bool constant folded past the float limit is fine while nothing reads it
        (a causal mask that became is_causal); one still read would be stored in the bundle."""
        read = {v.name for n in self.nodes for v in n.inputs} | {o.value.name for o in outputs}
        for name in sorted(read & self.computed):
            t = self.constants[name].tensor
            if t.numel() * t.element_size() > _FOLD_LIMIT:
                raise UnsupportedOpError(
                    f"the computed constant %{name} ({t.dtype}, {list(t.shape)}, "
                    f"{t.numel() * t.element_size() >> 20} MiB) would be stored in the bundle: "
                    f"aotpack stores computed constants up to {_FOLD_LIMIT >> 20} MiB. A mask "
                    f"is dropped only when it masks nothing or is the causal pattern.")

    def _placeholder(self, n):
        sig = self.ep.graph_signature
        fqn = (sig.inputs_to_parameters.get(n.name) or sig.inputs_to_buffers.get(n.name)
               or sig.inputs_to_lifted_tensor_constants.get(n.name))
        if fqn is None:
            if n.name not in sig.user_inputs:
                raise UnsupportedOpError(f"graph input {n.name} is neither a user input nor a "
                                         f"weight (token or custom object inputs are unsupported)")
            value = self._new_value(n.name, n.meta["val"])
            self.inputs.append(value)
        else:
            tensor = self.ep.state_dict.get(fqn)
            if tensor is None:
                tensor = self.ep.constants[fqn]
            tensor = tensor.detach().contiguous()
            value = self._new_value(fqn, tensor)
            self.constants[fqn] = Constant(value, tensor)
        self.env[n.name] = value

    def _outputs(self, n) -> list[GraphOutput]:
        sig = self.ep.graph_signature
        if len(sig.user_outputs) != len(n.args[0]):
            raise UnsupportedOpError("the model mutates buffers or inputs in place; aotpack "
                                     "compiles pure functions only")
        outs = []
        for i, arg in enumerate(n.args[0]):
            value = self.env.get(arg.name) if arg is not None else None
            if not isinstance(value, Value):
                raise UnsupportedOpError(f"output {i} is not a tensor ({arg})")
            outs.append(GraphOutput(f"out{i}", value))
        return outs

    def _call(self, n):
        self.fx_node = n
        rule = RULES.get(str(n.target))
        if self._fold_constant_call(n, computed_only=rule is not None):
            return
        if rule is None:
            raise self._error(f"operator {n.target} is not supported")
        args = self._map(n.args)
        kwargs = self._map(n.kwargs)
        try:
            self.env[n.name] = rule(self, *args, **kwargs)
        except Unsupported as e:
            raise self._error(f"{n.target} with {e} is not supported") from None
        except TypeError as e:
            raise self._error(f"{n.target} cannot be typed: {e}") from None

    def _fold_constant_call(self, n, computed_only: bool = False) -> bool:
        """An op with no rule whose inputs are all weights/constants (torch.arange, a table
        computed from a buffer, ...) is evaluated now and becomes a constant. With
        `computed_only` (the op has a rule) only when every input was itself computed here and
        the result is no larger than its largest input: a mask built from arange (HF models
        build all-True ones) folds away, while views of weights stay views (folding them would
        store a second copy of the weight) and float broadcasts stay views (an expand folded
        would be stored dense). Integer and bool results of constants always fold: they are
        index and mask arithmetic, which the kernels do not run (HF's causal-mask code expands
        arange before it subtracts, compares and indexes; BERT gathers its token-type ids from
        a slice of a buffer); an unused one is dropped with the dead code. Anything that fails
        to evaluate here is left to its rule."""
        import torch

        name = str(n.target)
        if not isinstance(n.target, torch._ops.OpOverload) or any(w in name for w in _NO_FOLD):
            return False
        deps = [a for a in n.all_input_nodes]
        if not all(isinstance(self.env.get(d.name), Value)
                   and self.env[d.name].name in self.constants for d in deps):
            return False
        tensors = {d.name: self.constants[self.env[d.name].name].tensor for d in deps}
        out = n.meta.get("val")
        if not isinstance(out, torch.Tensor) or not all(isinstance(d, int) for d in out.shape):
            return False
        index = not (out.dtype.is_floating_point or out.dtype.is_complex)
        limit = _FOLD_LIMIT_INDEX if index else _FOLD_LIMIT
        if out.numel() * out.element_size() > limit:  # before computing it
            return False
        if computed_only and out.dtype.is_floating_point and not (
                all(self.env[d.name].name in self.computed for d in deps)
                and out.numel() <= max([t.numel() for t in tensors.values()] or [0])):
            return False
        args = torch.fx.node.map_arg(n.args, lambda d: tensors[d.name])
        kwargs = torch.fx.node.map_arg(n.kwargs, lambda d: tensors[d.name])
        try:
            result = n.target(*args, **kwargs)
        except Exception:  # e.g. a device the build host has not: the rule (or an error) then
            return False
        if not isinstance(result, torch.Tensor):
            return False
        tensor = result.detach().to("cpu").contiguous()
        value = self._new_value(n.name, tensor)
        self.constants[value.name] = Constant(value, tensor)
        self.computed.add(value.name)
        self.env[n.name] = value
        return True

    def constant_value(self, v):
        """The constant tensor `v` holds, through the layout ops (expand, view, unsqueeze,
        permute) between it and a constant, replayed on that constant; None if `v` is
        computed at run time."""
        from aotpack.ir import Op
        from aotpack.ir.interpret import eval_node

        layout = (Op.EXPAND, Op.VIEW, Op.UNSQUEEZE, Op.PERMUTE)
        chain = []
        while isinstance(v, Value) and v.name not in self.constants:
            node = next((m for m in reversed(self.nodes) if m.outputs[0].name == v.name), None)
            if node is None or node.op not in layout:
                return None
            chain.append(node)
            v = node.inputs[0]
        if not isinstance(v, Value):
            return None
        t = self.constants[v.name].tensor
        for node in reversed(chain):
            t = eval_node(node, [t])
        return t

    def _map(self, a):
        import torch.fx

        if isinstance(a, torch.fx.Node):
            return self.env[a.name]
        if isinstance(a, (list, tuple)):
            return type(a)(self._map(x) for x in a)
        if isinstance(a, dict):
            return {k: self._map(v) for k, v in a.items()}
        return a

    def _error(self, what: str) -> UnsupportedOpError:
        n = self.fx_node
        loc = source_loc(n)
        supported = ", ".join(sorted({k.split(".")[1] for k in RULES if k.startswith("aten.")}))
        return UnsupportedOpError(
            f"{what}.\n  node: {n.name} = {n.target}(...)\n  source: {loc}\n"
            f"  Rewrite that line with supported operators or open an issue.\n"
            f"  Supported aten operators: {supported}")

    # -------------------------------------------------------------- used by the rules
    def emit(self, op, inputs, attrs, final: bool = False) -> Value:
        """Append a node; its type comes from the IR type rule and, for the node that stands
        for the fx node (`final`), must match what torch computed."""
        t = infer(op, [v.type for v in inputs], attrs)
        name = self._fresh(self.fx_node.name if final else f"{self.fx_node.name}_{op.value}")
        value = Value(name, t.dtype, tuple(t.shape))
        if final:
            want = self._new_value(name, self.fx_node.meta["val"], check_only=True)
            if want.type != value.type:
                raise Unsupported(f"{op.value} typed {value} here but torch says {want}")
        self.nodes.append(Node(op, tuple(inputs), attrs, (value,), source_loc(self.fx_node)))
        return value

    def out_shape(self) -> tuple[int, ...]:
        return self._static(self.fx_node.meta["val"].shape)

    # -------------------------------------------------------------- helpers
    def _fresh(self, name: str) -> str:
        base, i = name, 0
        while name in self.taken:
            i += 1
            name = f"{base}_{i}"
        self.taken.add(name)
        return name

    def _new_value(self, name, tensor, check_only=False) -> Value:
        if not check_only:
            name = self._fresh(name)
        return Value(name, DType.from_torch(tensor.dtype), self._static(tensor.shape))

    def _static(self, shape) -> tuple[int, ...]:
        dims = []
        for d in shape:
            if not isinstance(d, int):
                raise UnsupportedOpError(f"dynamic dimension {d} (node "
                                         f"{getattr(self.fx_node, 'name', '?')}): aotpack "
                                         f"compiles static shapes only for now")
            dims.append(d)
        return tuple(dims)
