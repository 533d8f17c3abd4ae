"""torch.export → IR: export (non-strict), decompose to core aten while keeping the high-level
ops our kernels implement, then translate node by node with aten_table.RULES."""
from __future__ import annotations

import contextlib
import threading

from aotpack.dtypes import DType
from aotpack.frontend.aten_conv import RULES as CONV_RULES
from aotpack.frontend.aten_conv3d import RULES as CONV3D_RULES
from aotpack.frontend.aten_logic import RULES as LOGIC_RULES
from aotpack.frontend.aten_moe import RULES as MOE_RULES, Uninitialized
from aotpack.frontend.aten_norms import RULES as NORM_RULES
from aotpack.frontend.aten_resize import RULES as RESIZE_RULES
from aotpack.frontend.aten_math import RULES as MATH_RULES
from aotpack.frontend.aten_scatter import RULES as SCATTER_RULES
from aotpack.frontend.aten_sort import RULES as SORT_RULES
from aotpack.frontend.aten_table import RULES as TABLE_RULES, Unsupported
from aotpack.frontend.aten_writes import RULES as WRITE_RULES, TAKE_UNINITIALIZED
from aotpack.errors import UserError
from aotpack.frontend.dim_hints import is_dims_refusal
from aotpack.frontend.export_errors import model_failed
from aotpack.frontend.load import ModelLoadError, quiet_torch_logs
from aotpack.frontend.origin import source_loc
from aotpack.frontend.refusals import refusal, rule_type_error, uncomputed_operand
from aotpack.frontend.symbolic import (LazyConstants, SymbolError, SymbolTable, _is_symint,
                                       size_held_by, table_at_maxima)
from aotpack.ir.graph import Constant, Graph, GraphOutput, Node, Value
from aotpack.ir.infer import infer
from aotpack.ir.sym import SymbolicError, is_symbolic, lower_bound

RULES = {**TABLE_RULES, **CONV_RULES, **LOGIC_RULES, **MOE_RULES, **SCATTER_RULES,
         **SORT_RULES, **WRITE_RULES, **NORM_RULES,
         **RESIZE_RULES, **MATH_RULES, **CONV3D_RULES}

_COMPLEX_HINT = ("Write the rotation with real cos/sin tables (rotate-half or interleaved "
                 "pairs, as Llama and GPT-J do)")

# tensor factories: constants folded at translation when their arguments are known
_FACTORIES = {"arange", "full", "zeros", "ones", "linspace", "logspace", "scalar_tensor"}
_FOLD_LIMIT = 1 << 26  # bytes: larger computed constants would bloat the bundle
# integer/bool results (masks, ids) are evaluated on the host up to this; one over _FOLD_LIMIT
# that is still read when translation ends is refused (_check_large_index_constants), so this
# bounds host memory, not the bundle: transformers' [B, 1, S, S] causal mask at B=8, S=8192 is
# 512 MiB
_FOLD_LIMIT_INDEX = 1 << 30
# never evaluated on the build host: randomness, uninitialised memory, and the checks export
# records (an _assert_tensor_metadata of a CUDA export names a device the host may not have)
_NO_FOLD = ("rand", "normal", "bernoulli", "dropout", "empty", "_assert", "sym_constrain")


class UnsupportedOpError(UserError):
    """An operator (or a form of one) that aotpack cannot compile; the message names the aten
    op, the exported node, the user's source line and what to do."""


def kept_ops():
    """High-level aten ops that must survive decomposition (a kernel implements each)."""
    import torch

    a = torch.ops.aten
    return [a.linear.default, a.scaled_dot_product_attention.default, a.rms_norm.default,
            a.layer_norm.default, a.gelu.default, a.silu.default, a.matmul.default,
            a.hardswish.default, a.hardsigmoid.default]


def export(model, example_inputs, dynamic_shapes=None):
    """ExportedProgram decomposed to core aten + kept_ops(). `dynamic_shapes` is
    torch.export's spec (Dims per input dim); an ExportedProgram keeps its own."""
    import torch

    if isinstance(model, torch.export.ExportedProgram):
        ep = model
    else:
        try:
            with quiet_torch_logs(), _every_user_frame():
                ep = torch.export.export(model, _unaliased(example_inputs),
                                         dynamic_shapes=dynamic_shapes, strict=False)
        except (RuntimeError, AssertionError, TypeError, ValueError, IndexError,
                AttributeError, KeyError) as e:
            if is_dims_refusal(e) and dynamic_shapes is not None:  # the dims do not fit the
                raise _refused_dims(e, model, example_inputs, dynamic_shapes) from None  # code
            if isinstance(e, torch._dynamo.exc.UserError):
                raise UnsupportedOpError(f"torch.export refused the dynamic dims: {e}") from None
            raise model_failed(e, model, example_inputs) from e  # shapes, dtypes, arguments
    table = torch.export.default_decompositions()
    for op in kept_ops():
        table.pop(op, None)
    return ep.run_decompositions(table)


def _refused_dims(e, model, example_inputs, dynamic_shapes) -> UnsupportedOpError:
    """torch.export's refusal of a factory's dynamic_shapes, with aotpack's hint: the dims its
    shape arithmetic constrains and the derived Dims that work (frontend/dim_hints.py)."""
    from aotpack.frontend.dim_hints import factory_refusal

    return UnsupportedOpError(factory_refusal(e, model, _unaliased(example_inputs),
                                              dynamic_shapes))


def to_graph(model_or_ep, example_inputs, dynamic_shapes=None) -> Graph:
    """The IR graph of a model (or ExportedProgram). Dims that torch.export keeps symbolic
    (from `dynamic_shapes` or the program itself) become symbols named after their Dims.
    An ONNX model (frontend/onnx) is translated by its own frontend; its `dynamic_shapes` is
    the OnnxShapes that prepare() resolved from the command line."""
    if getattr(model_or_ep, "kind", None) == "onnx":
        from aotpack.frontend.onnx.dims import resolve
        from aotpack.frontend.onnx.translate import onnx_to_graph

        return onnx_to_graph(model_or_ep, dynamic_shapes or resolve(model_or_ep))
    ep = export(model_or_ep, example_inputs, dynamic_shapes)
    names = dim_names(ep, dynamic_shapes)
    try:
        table = SymbolTable(ep, names, example_inputs)
    except SymbolError as e:
        raise UnsupportedOpError(str(e)) from None
    return _Translator(ep, table).run()


@contextlib.contextmanager
def _every_user_frame():
    """torch.export's non-strict tracer keeps only the `forward` frames of each node's stack:
    an op inside a helper function (or a library's `_forward_impl`) pointed at the call in
    forward. Keep the frames below forward too (torch's own are still dropped), so a refusal
    names the line that holds the op."""
    import torch.fx.proxy as proxy

    with _FRAMES_LOCK:  # one patch for all threads exporting at once, removed by the last
        global _FRAMES_DEPTH, _FRAMES_ORIGINAL
        if _FRAMES_DEPTH == 0:
            _FRAMES_ORIGINAL = getattr(proxy.TracerBase, "_filter_traceback_frames", None)
            if _FRAMES_ORIGINAL is not None:
                proxy.TracerBase._filter_traceback_frames = _below_forward_too
        _FRAMES_DEPTH += 1
    try:
        yield
    finally:
        with _FRAMES_LOCK:
            _FRAMES_DEPTH -= 1
            if _FRAMES_DEPTH == 0 and _FRAMES_ORIGINAL is not None:
                proxy.TracerBase._filter_traceback_frames = _FRAMES_ORIGINAL


_FRAMES_LOCK = threading.Lock()
_FRAMES_DEPTH = 0
_FRAMES_ORIGINAL = None


def _below_forward_too(self, summary):
    """torch's frame filter with its forward-frames-only switch off (another torch without the
    switch: the attribute is ignored)."""
    saved = getattr(self, "_record_forward_stack_traces_only", False)
    self._record_forward_stack_traces_only = False
    try:
        return _FRAMES_ORIGINAL(self, summary)
    finally:
        self._record_forward_stack_traces_only = saved


def _unaliased(example_inputs) -> tuple:
    """The example inputs with every tensor that shares memory with an earlier one cloned: a
    factory's `[torch.randn(2, 16)] * 3` is three inputs to the user, but torch.export traces
    aliased inputs as one (the others unused), which the bundle's separate inputs are not."""
    import torch

    seen, out = set(), []
    for t in example_inputs:
        if isinstance(t, torch.Tensor) and t.numel():
            key = t.untyped_storage().data_ptr()
            t = t.clone() if key in seen else t
            seen.add(key)
        out.append(t)
    return tuple(out)


def dim_names(ep, dynamic_shapes) -> dict[tuple[str, int], str]:
    """{(input name, dim): the torch.export.Dim's name} from a dynamic_shapes spec (a tuple
    in input order, or a dict by argument name)."""
    if not dynamic_shapes:
        return {}
    inputs = list(ep.graph_signature.user_inputs)
    if isinstance(dynamic_shapes, dict):
        per_input = [dynamic_shapes.get(name) for name in inputs]
    else:
        per_input = list(dynamic_shapes)
    out = {}
    for name, spec in zip(inputs, per_input):
        items = spec.items() if isinstance(spec, dict) else enumerate(spec or ())
        for d, dim in items:
            root = getattr(dim, "root", None)  # a derived Dim (16*h) names its symbol h
            label = getattr(root if root is not None else dim, "__name__", None)
            if label:
                out[(name, int(d))] = label
    return out


class _Translator:
    def __init__(self, ep, table: SymbolTable | None = None):
        self.ep = ep
        self.table = table or SymbolTable(ep)
        # values computed from constants and dims only (their size depends on a dim): fx node
        # per value name, evaluated at concrete points (frontend/symbolic.py)
        self.lazy: dict[str, object] = {}
        self.lazy_eval = LazyConstants(self.table, self._known_tensor, _FOLD_LIMIT_INDEX)
        self.materialized: dict[str, Value] = {}
        self._data_memo: dict[str, bool] = {}
        self.guards: list[str] = []  # conditions on the dims torch.export recorded
        self.env: dict[str, object] = {}  # fx node name -> Value | list[Value] | None
        self.inputs: list[Value] = []
        self.state: list[str] = []  # inputs that are buffers the model writes (session state)
        self.constants: dict[str, Constant] = {}
        self.computed: set[str] = set()  # constants folded here (not weights)
        self.pads: dict[str, tuple] = {}  # zero-padded value -> (source, spatial pads)
        self.nodes: list[Node] = []
        self.producers: dict[str, Node] = {}  # value name -> the node computing it
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
        meta = {"aten_ops": counts, "symbols": self.table.symbols,
                "example": self.table.example_point(), "dim_sources": dict(self.table.sources),
                "guards": list(self.guards), "state": list(self.state)}
        # user inputs in signature order, then the state (callers pass user inputs only)
        inputs = ([v for v in self.inputs if v.name not in self.state]
                  + [v for v in self.inputs if v.name in self.state])
        return Graph(inputs, self.constants, self.nodes, outputs, meta).verify()

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
        if fqn is not None and fqn in set(sig.buffers_to_mutate.values()):
            # a buffer the model writes in place: session state (docs/generation.md), kept
            # between runs; its new value is a graph output named state:<fqn>
            self._check_state_start(fqn)
            value = self._new_value(fqn, n.meta["val"])
            self.inputs.append(value)
            self.state.append(value.name)
        elif fqn is None:
            if n.name in getattr(sig, "input_tokens", ()):
                # an op with a side effect threads this token (linalg.inv's error check, a
                # print): the op that reads it is refused, by name, where the model uses it
                self.env[n.name] = None
                return
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

    def _check_state_start(self, fqn: str) -> None:
        """Session state starts as zeros (the runtime zeroes it at session create): a buffer
        the model writes in place that starts otherwise would run from the wrong value."""
        if fqn.rsplit(".", 1)[-1] in ("running_mean", "running_var", "num_batches_tracked"):
            raise UnsupportedOpError(
                f"the model updates {fqn!r}: a batch norm in training mode; call model.eval() "
                f"before building (aotpack compiles inference)")
        tensor = self.ep.state_dict.get(fqn)
        if tensor is None:
            tensor = self.ep.constants.get(fqn)
        if tensor is not None and not getattr(tensor, "is_meta", False) \
                and bool(tensor.count_nonzero()):
            raise UnsupportedOpError(
                f"the model writes its buffer {fqn!r} in place, and it does not start as zeros: "
                f"aotpack keeps written buffers as session state, zeroed when a session starts "
                f"(a KV cache); return the buffer's new value instead, or start it at zero")

    def _outputs(self, n) -> list[GraphOutput]:
        from torch.export.graph_signature import OutputKind

        from aotpack.frontend.output_names import user_output_names

        sig = self.ep.graph_signature
        count = sum(spec.kind == OutputKind.USER_OUTPUT for spec in sig.output_specs)
        taken = {v.name for v in self.inputs} | set(self.constants) | set(self.env)
        names = user_output_names(self.ep, count, taken)
        outs, user = [], 0
        for spec, arg in zip(sig.output_specs, n.args[0]):
            if spec.kind == OutputKind.BUFFER_MUTATION:
                name = f"state:{spec.target}"
            elif spec.kind == OutputKind.USER_OUTPUT:
                name, user = names[user], user + 1
            else:
                raise UnsupportedOpError(f"the model mutates its input {spec.target} in place "
                                         f"(only buffers may be written: they become session "
                                         f"state); return the new value instead")
            value = self.env.get(arg.name) if arg is not None else None
            if not isinstance(value, Value):
                raise UnsupportedOpError(f"output {name} is not a tensor ({arg})")
            if value.name in self.lazy:
                self.fx_node = arg
                value = self._materialize(value)
            outs.append(GraphOutput(name, value))
        # user outputs first (the signature's order), state updates after
        return ([o for o in outs if not o.name.startswith("state:")]
                + [o for o in outs if o.name.startswith("state:")])

    def _call(self, n):
        self.fx_node = n
        val = n.meta.get("val")
        if self._bind_known(n, val):
            return
        if _is_symint(val) or (isinstance(val, (int, bool)) and not isinstance(n.target,
                                                                                _OpOverload())):
            self.env[n.name] = self._size_value(val)  # size arithmetic: no IR node
            return
        if str(n.target) == "aten._assert_scalar.default":
            self._guard(n)
            return
        rule = RULES.get(str(n.target))
        if self._fold_constant_call(n, computed_only=rule is not None):
            return
        if rule is None:
            parts = str(n.target).split(".")  # (higher-order ops' names have no dots)
            if len(parts) == 3 and parts[1] in _FACTORIES:  # folds, unless its arguments do not
                raise self._error(f"{n.target} with arguments read from tensor values at run "
                                  f"time (.item(), a 0-d tensor) is not supported: compute "
                                  f"them from sizes or Python numbers")
            if str(n.target) == "higher_order.with_effects" and len(n.args) > 1:
                raise self._error(f"operator {n.args[1]} (an op with a side effect: an error "
                                  f"check, a print) is not supported; the bundle cannot run "
                                  f"host code between kernels")
            if str(n.target).split(".")[1:2] in (["polar"], ["view_as_complex"], ["complex"]):
                raise self._error(f"operator {n.target} is not supported: complex numbers are "
                                  f"not (a rotary embedding written as a complex product, "
                                  f"freqs_cis)", _COMPLEX_HINT)
            raise self._error(f"operator {n.target} is not supported")
        missing = uncomputed_operand(n, self.env)
        if missing is not None:
            raise self._error(*missing, own=True)
        args = self._map(n.args)
        kwargs = self._map(n.kwargs)
        if str(n.target) not in ("aten.index_put.default", *TAKE_UNINITIALIZED) and any(
                isinstance(a, Uninitialized) for a in list(args) + list(kwargs.values())):
            raise self._error(f"{n.target} reading uninitialised memory (torch.empty) is not "
                              f"supported (only a scatter that overwrites all of it)")
        try:
            self.env[n.name] = rule(self, *args, **kwargs)
        except Unsupported as e:
            raise self._error(f"{n.target} with {e} is not supported") from None
        except TypeError as e:
            raise self._error(rule_type_error(n, e, list(args) + list(kwargs.values()))) \
                from None
        except (SymbolError, SymbolicError) as e:
            raise self._error(f"{n.target}: {e}; narrow the dims' ranges or keep this dim "
                              f"static") from None
        except (ValueError, KeyError, IndexError, NotImplementedError) as e:
            # a rule meeting what it was not written for (a complex dtype, an odd argument):
            # the user's one-line refusal with the node and the line, not a traceback
            hint = ("; values computed from constants are evaluated at the dims' maxima: a "
                    "table (positions) indexed past its end means a range larger than the "
                    "model allows, so lower that maximum"
                    if isinstance(e, IndexError) and self.table.symbols else "")
            raise self._error(f"{n.target} cannot be translated ({type(e).__name__}: "
                              f"{e}){hint}") from None

    def _guard(self, n) -> None:
        """A condition on the dims the model's code asserts (torch.export records it): kept
        for inspect when it holds at every probe point of the ranges, else the build stops
        (a bundle checks ranges only)."""
        import torch

        cond = n.args[0].meta.get("val") if n.args and hasattr(n.args[0], "meta") else None
        if not isinstance(cond, torch.SymBool):
            return
        expr = cond.node.expr
        text = self.table.rename(str(expr))
        for point in self.table.probe_points():
            held = expr.xreplace(self.table.torch_env(point))
            if held.free_symbols:  # on values computed at run time (.item()): not a dims'
                return             # condition; a size that depends on them is refused later
            if not bool(held):
                raise self._error(
                    f"the model requires {text} (a condition torch.export recorded), which "
                    f"does not hold at dims {point}: a bundle checks ranges only; narrow the "
                    f"dims' ranges to where it holds or make the model not depend on it")
        if text not in self.guards:
            self.guards.append(text)

    def _bind_known(self, n, val) -> bool:
        """`.item()` of a tensor the build knows (computed from constants and sizes only:
        Funnel's relative positions from an arange), or a size of one: the number itself, and
        torch's unbacked symbol for it bound to that number, so what export derived from it
        (an arange's length, its guards) is known too."""
        import torch

        target = str(n.target)
        if target not in ("aten.item.default", "aten._local_scalar_dense.default",
                          "aten.sym_size.int") or not n.args:
            return False
        if not isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return False
        free = val.node.expr.free_symbols
        if not free or any(str(x) in self.table.by_torch for x in free):
            return False  # a dim of the inputs: the usual size arithmetic
        t = self._value_of(self.env.get(n.args[0].name))
        if t is None:
            return self._bind_size(n, val)
        value = t.shape[n.args[1]] if target == "aten.sym_size.int" else t.reshape(-1)[0].item()
        if len(free) == 1 and val.node.expr in free:
            self.table.known[val.node.expr] = value
        self.env[n.name] = value
        return True

    def _bind_size(self, n, val) -> bool:
        """`.item()` of a tensor that holds a size of the inputs (a TorchScript trace's
        NumToTensor(S) + 1): torch's unbacked symbol for it is that size, so the shapes made
        from it are the inputs' dims again."""
        free = val.node.expr.free_symbols
        if str(n.target) == "aten.sym_size.int" or val.node.expr not in free or len(free) != 1:
            return False
        try:
            size = size_held_by(n.args[0], self.table,
                                lambda d: self._value_of(self.env.get(d.name)))
        except (SymbolError, SymbolicError) as e:
            raise self._error(str(e)) from None
        if size is None:
            return False
        low = lower_bound(size)
        if low < 0:  # as an index it would count from the end: not what the shapes say
            raise self._error(f".item() reads the size {size}, which is {low} at the smallest "
                              f"dims; narrow the dims' ranges so it stays at least 0")
        self.table.bound[val.node.expr] = size
        self.env[n.name] = size
        return True

    def _value_of(self, v, depth: int = 0):
        """The value of `v` when it is computed from constants only (through any nodes the IR
        interpreter evaluates, 64 deep at most), else None."""
        from aotpack.ir.interpret import eval_node

        if not isinstance(v, Value) or depth > 64:
            return None
        if v.name in self.constants:
            return self.constants[v.name].tensor
        if v.name in self.lazy:  # computed from sizes: one value only when no dim varies
            return None if self.table.symbols else \
                self.lazy_eval.value(self.lazy[v.name], {})
        node = self.producer(v)
        if node is None or not all(isinstance(d, int) for d in v.shape):
            return None  # (a size that varies: no one value)
        args = [self._value_of(i, depth + 1) for i in node.inputs]
        if any(a is None for a in args):
            return None
        try:
            return eval_node(node, args)
        except NotImplementedError:
            return None

    def _size_value(self, val):
        """A size computed from dims (sym_size, arithmetic on sizes) as an int or Expr; a
        symbolic bool/float (a guard) as None."""
        import torch

        if isinstance(val, (torch.SymBool, torch.SymFloat)):
            return None
        try:
            return self.table.dim(val)
        except SymbolError as e:
            raise self._error(str(e)) from None

    def _constant_like(self, d) -> bool:
        """An input of a lazily foldable op: computed from weights and dims only (a constant,
        a view of a weight, a lazy value, a size), never from an input's data."""
        v = self.env.get(d.name)
        if isinstance(v, Value):
            return not self._reads_input_data(d)
        return v is not None and not isinstance(v, (list, tuple, Uninitialized))

    def _reads_input_data(self, fx_node) -> bool:
        memo = self._data_memo
        if fx_node.name not in memo:
            if fx_node.op == "placeholder":
                memo[fx_node.name] = fx_node.name in self.ep.graph_signature.user_inputs
            elif _is_symint(fx_node.meta.get("val")):
                memo[fx_node.name] = False  # a size: its value comes from the dims
            else:
                memo[fx_node.name] = any(self._reads_input_data(a)
                                         for a in fx_node.all_input_nodes)
        return memo[fx_node.name]

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
        to evaluate here is left to its rule.
        An op on constants whose result's size depends on a dim (or that reads such a value)
        is not evaluated here: it becomes a lazy value (see `_materialize`)."""
        import torch

        name = str(n.target)
        if not isinstance(n.target, torch._ops.OpOverload) or any(w in name for w in _NO_FOLD):
            return False
        deps = [a for a in n.all_input_nodes]
        if not all(self._constant_like(d) for d in deps):
            return False
        out = n.meta.get("val")
        if not isinstance(out, torch.Tensor):
            return False
        lazy_in = any(self.env[d.name].name in self.lazy for d in deps
                      if isinstance(self.env.get(d.name), Value))
        symbolic_args = any(not isinstance(self.env.get(d.name), Value) for d in deps)
        if lazy_in or symbolic_args or not all(isinstance(d, int) for d in out.shape):
            if computed_only and not self.table.knows(out.shape):
                return False  # a size torch could not tell (u3): its rule computes it
            value = self._new_value(n.name, out)
            self.lazy[value.name] = n
            self.env[n.name] = value
            return True
        tensors = self._fold_operands(deps, computed_only)
        if tensors is None:
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

    def _fold_operands(self, deps, computed_only: bool) -> dict | None:
        """The constant tensors of a foldable op's operands. Views of weights stay views for
        an op with a rule (see _fold_constant_call); an op without one (an interpolation of a
        slice of a weight: BEiT's relative-position table) is computed on the views, replayed
        on their weights: folded, or refused."""
        values = [self.env[d.name] for d in deps]
        if all(v.name in self.constants for v in values):
            return {d.name: self.constants[v.name].tensor for d, v in zip(deps, values)}
        if computed_only:
            return None
        tensors = {d.name: self.constant_value(v) for d, v in zip(deps, values)}
        return None if any(t is None for t in tensors.values()) else tensors

    def _known_tensor(self, fx_node):
        """The tensor of a weight or a folded constant (for LazyConstants), else None."""
        v = self.env.get(fx_node.name)
        if isinstance(v, Value) and v.name in self.constants:
            return self.constants[v.name].tensor
        return None

    def constant_samples(self, v) -> list[tuple[dict, object]] | None:
        """[(point, tensor)]: what `v` holds at several concrete dims (one sample, at no dims,
        for a static constant); None if `v` is computed at run time. For masks: a value
        computed from constants and dims is checked where it is cheap and at each dim's max."""
        if isinstance(v, Value) and v.name in self.lazy:
            node = self.lazy[v.name]
            try:
                return [(p, self.lazy_eval.value(node, p)) for p in self.table.probe_points()]
            except SymbolError as e:
                raise Unsupported(str(e)) from None
        t = self.constant_value(v)
        return None if t is None else [({}, t)]

    def _materialize(self, v: Value) -> Value:
        """A lazy value as IR: its tensor at the dims' maxima, stored once (size-1 along the
        dims it does not vary over), read through a slice (and expand) of the symbolic size.
        Refused unless the value at smaller dims is exactly that slice (checked at probe
        points): a table indexed by position, not a value whose entries depend on the dims."""
        if v.name in self.materialized:
            return self.materialized[v.name]
        from aotpack.ir import Op
        from aotpack.ir import ops as O

        node = self.lazy[v.name]
        try:
            full = table_at_maxima(lambda p: self.lazy_eval.value(node, p), tuple(v.shape),
                                   self.table.max_point(), self.table.probe_points(),
                                   f"%{v.name} ({node.target})")
        except SymbolError as e:
            raise self._error(str(e)) from None
        if full.numel() * full.element_size() > _FOLD_LIMIT:
            raise self._error(f"%{v.name} computed from constants would be stored at the dims' "
                              f"maxima as {list(full.shape)} ({full.numel() * full.element_size() >> 20} "
                              f"MiB, limit {_FOLD_LIMIT >> 20} MiB): lower the maxima")
        const = self._new_value(f"{v.name}_table", full.contiguous())
        self.constants[const.name] = Constant(const, full.contiguous())
        self.computed.add(const.name)
        x = const
        for i, d in enumerate(v.shape):
            if full.shape[i] != 1 and not isinstance(d, int):
                x = self._emit_raw(Op.SLICE, [x], O.SliceAttrs(i, 0, d), f"{v.name}_slice")
        if tuple(x.shape) != tuple(v.shape):
            x = self._emit_raw(Op.EXPAND, [x], O.ExpandAttrs(tuple(v.shape)), f"{v.name}_expand")
        self.materialized[v.name] = x
        return x

    def _emit_raw(self, op, inputs, attrs, name) -> Value:
        t = infer(op, [v.type for v in inputs], attrs)
        value = Value(self._fresh(name), t.dtype, tuple(t.shape))
        loc = source_loc(self.fx_node) if self.fx_node is not None else None
        self._append(Node(op, tuple(inputs), attrs, (value,), loc))
        return value

    def _append(self, node: Node) -> None:
        self.nodes.append(node)
        self.producers[node.outputs[0].name] = node

    def producer(self, v) -> Node | None:
        """The IR node that computes `v` (None for inputs, constants and Python values)."""
        return self.producers.get(v.name) if isinstance(v, Value) else None

    def constant_value(self, v):
        """The constant tensor `v` holds, through the layout ops (expand, view, unsqueeze,
        permute) and copies (a torch.tensor(...) in forward is a clone of a lifted constant)
        between it and a constant, replayed on that constant; None if `v` is computed at run
        time."""
        from aotpack.ir import Op
        from aotpack.ir.interpret import eval_node

        layout = (Op.EXPAND, Op.VIEW, Op.UNSQUEEZE, Op.PERMUTE, Op.SLICE, Op.SELECT,
                  Op.SQUEEZE, Op.COPY)
        chain = []
        while isinstance(v, Value) and v.name not in self.constants:
            node = self.producer(v)
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

    def _error(self, what: str, hint: str | None = None, own: bool = False
               ) -> UnsupportedOpError:
        """The refusal of the current node (frontend/refusals.py); `own`: `what` names the
        user's op already."""
        n = self.fx_node
        return UnsupportedOpError(refusal(n, what, hint, own, self._shape_text(n), _near(n)))

    def _shape_text(self, n) -> str:
        """The node's output shape with aotpack's dim names ([2, 4, H + 2, W + 2]); '' when
        it has none that aotpack can name."""
        try:
            return "[" + ", ".join(str(d) for d in self._dims(n.meta["val"].shape)) + "]"
        except Exception:  # noqa: BLE001 — a refusal's decoration, never a second failure
            return ""

    # -------------------------------------------------------------- used by the rules
    def emit(self, op, inputs, attrs, final: bool = False) -> Value:
        """Append a node; its type comes from the IR type rule and, for the node that stands
        for the fx node (`final`), must match what torch computed."""
        inputs = [self._materialize(v) if v.name in self.lazy else v for v in inputs]
        t = infer(op, [v.type for v in inputs], attrs)
        name = self._fresh(self.fx_node.name if final else f"{self.fx_node.name}_{op.value}")
        value = Value(name, t.dtype, tuple(t.shape))
        if final:
            self.table.unify(getattr(self.fx_node.meta["val"], "shape", ()), value.shape)
            want = self._new_value(name, self.fx_node.meta["val"], check_only=True)
            if want.type != value.type:
                _check_sizes_only(value, want)
                mixed = sorted({v.dtype.value for v in inputs if v.dtype.is_float})
                hint = (f" (its inputs mix {' and '.join(mixed)}: give the inputs the weights' "
                        f"dtype, or cast the whole model with --dtype bf16)"
                        if len(mixed) > 1 else "")
                raise Unsupported(f"{op.value} typed {value} here but torch says {want}{hint}")
        self._append(Node(op, tuple(inputs), attrs, (value,), source_loc(self.fx_node)))
        return value

    def add_constant(self, name: str, tensor, exact=None) -> Value:
        """A constant computed by a rule (batch norm's scale and shift; `exact`: its value
        before rounding, see Constant)."""
        value = self._new_value(f"{self.fx_node.name}_{name}", tensor.contiguous())
        self.constants[value.name] = Constant(value, tensor.contiguous(), exact)
        self.computed.add(value.name)
        return value

    def padded_source(self, v: Value) -> tuple[Value, tuple]:
        """(x, per-spatial-dim (lo, hi) zeros) when `v` is a zero pad of x, else (v, zeros)."""
        if v.name in self.pads:
            return self.pads[v.name]
        return v, ((0, 0),) * max(len(v.shape) - 2, 0)

    def out_shape(self) -> tuple:
        return self._dims(self.fx_node.meta["val"].shape)

    # -------------------------------------------------------------- helpers
    def _fresh(self, name: str) -> str:
        base, i = name, 0
        while name in self.taken:
            i += 1
            name = f"{base}_{i}"
        self.taken.add(name)
        return name

    def _new_value(self, name, tensor, check_only=False) -> Value:
        try:
            dtype = DType.from_torch(tensor.dtype)
        except ValueError:  # complex (torch.polar in a rotary table), quantized, ...
            what = f"{tensor.dtype} values (no aotpack dtype: real floats, ints and bools)"
            hint = _COMPLEX_HINT if tensor.dtype.is_complex else None
            if self.fx_node is None or self.fx_node.op == "placeholder":
                raise UnsupportedOpError(f"input or weight {name} holds {what}"
                                         + (f". {hint}" if hint else "")) from None
            raise self._error(f"operator {self.fx_node.target} producing {what} is not "
                              f"supported", hint) from None
        if not check_only:
            name = self._fresh(name)
        return Value(name, dtype, self._dims(tensor.shape))

    def _dims(self, shape) -> tuple:
        try:
            return tuple(self.table.dim(d) for d in shape)
        except SymbolError as e:
            where = getattr(self.fx_node, "name", "?")
            raise UnsupportedOpError(f"{e} (node {where})") from None


def _OpOverload():
    import torch

    return torch._ops.OpOverload


def _near(fx_node) -> str:
    """For an operator aotpack has no rule for: the supported ones with similar names (the
    whole list, ~150 names, buried the message)."""
    import difflib

    target = str(fx_node.target)
    if target in RULES or not target.startswith("aten."):
        return ""
    names = sorted({k.split(".")[1] for k in RULES if k.startswith("aten.")})
    close = difflib.get_close_matches(target.split(".")[1], names, n=4, cutoff=0.6)
    return (f"\n  Supported aten operators with similar names: {', '.join(close)} (all "
            f"{len(names)}: python -m aotpack.frontend.ops)" if close else
            f"\n  (the {len(names)} supported aten operators: python -m aotpack.frontend.ops)")


def _check_sizes_only(ours: Value, torch_says: Value) -> None:
    """A type that differs from torch's only in a size expression is aotpack's own limit (two
    forms of one size it cannot prove equal), not a user's unsupported op: say so."""
    if ours.dtype != torch_says.dtype or len(ours.shape) != len(torch_says.shape):
        return
    for a, b in zip(ours.shape, torch_says.shape):
        if a != b and (is_symbolic(a) or is_symbolic(b)):
            raise SymbolicError(f"aotpack computes the size {a} where torch has {b} and cannot "
                                f"prove the two equal over the dims' ranges")
