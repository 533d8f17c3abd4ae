"""The ONNX backend node tests (shipped inside the onnx package) run through aotpack's ONNX
frontend and the CPU reference execution: which cases apply, how each is built, how it is run.

A node test is a one-node model (or a function's expansion: `*_expanded`) whose inputs are all
graph inputs, with input and expected output arrays. In models a user brings, the arguments
that say *how* an op works (Reshape's shape, Slice's starts, a Where's condition, reduction
axes, ...) are constants and weights, and aotpack evaluates them at build time: so those inputs
become initializers here, with the test's own values, and the data inputs stay run-time
inputs. Ops aotpack computes only on known values (Shape, Equal, Range, ...) get every input as
an initializer: their test checks the build-time evaluation.
"""
from __future__ import annotations

import functools
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# (op, input index) whose value must be known at build time in aotpack
ARGUMENTS = {
    "Reshape": {1}, "Expand": {1}, "Unsqueeze": {1}, "Squeeze": {1}, "Split": {1},
    "Slice": {1, 2, 3, 4}, "Gather": {1}, "ReduceMean": {1}, "ReduceSum": {1},
    "ReduceMax": {1}, "ReduceMin": {1}, "ConstantOfShape": {0}, "Where": {0},
    "Dropout": {1, 2}, "Trilu": {1}, "Range": {0, 1, 2},
    "Conv": {1, 2}, "ConvTranspose": {1, 2}, "BatchNormalization": {1, 2, 3, 4},
    "Clip": {1, 2}, "Resize": {1, 2, 3}, "Pad": {1, 2, 3},
    "InstanceNormalization": {1, 2}, "GroupNormalization": {1, 2},
}


def claimed_ops() -> set[str]:
    """The ONNX ops the frontend translates (rules.RULES) plus those it only folds."""
    from aotpack.frontend.onnx.rules import RULES

    return set(RULES) | {"Constant"}


def folded_only() -> set[str]:
    """Ops the frontend computes on known inputs only (their rules refuse run-time data)."""
    from aotpack.frontend.onnx import rules

    return {op for op, fn in rules.RULES.items() if fn is rules._constant_only} | {"Constant"}


@dataclass
class Case:
    name: str
    model: object  # onnx.ModelProto
    inputs: list  # numpy arrays, one per graph input
    outputs: list  # expected numpy arrays
    rtol: float
    atol: float

    @property
    def ops(self) -> set[str]:
        return {n.op_type for n in self.model.graph.node}


@functools.lru_cache(maxsize=1)
def all_cases() -> tuple:
    """Every node test: from the package's data folder where the wheel ships it, else made by
    the package's own generators (onnx.backend.test.case.node), which is what writes it."""
    folder = Path(__import__("onnx").__file__).parent / "backend/test/data/node"
    if folder.is_dir() and any(folder.iterdir()):
        return tuple(_from_folder(d) for d in sorted(folder.iterdir()) if d.is_dir())
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings(), open(os.devnull, "w") as null:
        warnings.simplefilter("ignore")
        os.environ.setdefault("ONNX_BACKEND_TEST_NO_WRITE", "1")
        cases = collect_testcases(None)
        del null
    out = []
    for c in cases:
        if c.kind != "node" or not c.data_sets:
            continue
        ins, outs = c.data_sets[0]
        out.append(Case(c.name, c.model, [_array(v) for v in ins], [_array(v) for v in outs],
                        c.rtol, c.atol))
    return tuple(out)


def _array(v):
    from onnx import TensorProto, numpy_helper

    return numpy_helper.to_array(v) if isinstance(v, TensorProto) else v


def _from_folder(d: Path) -> Case:
    import onnx
    from onnx import numpy_helper

    def read(p):
        t = onnx.TensorProto()
        t.ParseFromString(p.read_bytes())
        return numpy_helper.to_array(t)

    model = onnx.load(str(d / "model.onnx"))
    data = d / "test_data_set_0"
    ins = [read(p) for p in sorted(data.glob("input_*.pb"), key=lambda p: int(p.stem[6:]))]
    outs = [read(p) for p in sorted(data.glob("output_*.pb"), key=lambda p: int(p.stem[7:]))]
    return Case(d.name, model, ins, outs, 1e-3, 1e-7)


def applicable_cases() -> list[Case]:
    """Node tests whose every node is an op the frontend claims (main domain only)."""
    claimed = claimed_ops()
    return [c for c in all_cases()
            if all(n.domain in ("", "ai.onnx") for n in c.model.graph.node)
            and c.ops <= claimed and len(c.inputs) == _n_inputs(c.model)]


def _n_inputs(model) -> int:
    inits = {t.name for t in model.graph.initializer}
    return len([i for i in model.graph.input if i.name not in inits])


def as_user_model(case: Case):
    """(model, run-time input arrays): build-time arguments moved into initializers, each
    array in its input's declared type and shape; a model below opset 13 converted to 13 as
    aotpack's error tells a user to."""
    import onnx
    from onnx import helper, numpy_helper

    from aotpack.frontend.onnx.model import MIN_OPSET, opset_of

    model = onnx.ModelProto()
    model.CopyFrom(case.model)
    if opset_of(model) < MIN_OPSET:
        model = onnx.version_converter.convert_version(model, MIN_OPSET)
    g = model.graph
    inits = {t.name for t in g.initializer}
    runtime = [i for i in g.input if i.name not in inits]
    known = _known_inputs(g, [i.name for i in runtime], folded_only())
    keep, values = [], []
    for spec, value in zip(runtime, case.inputs):
        value = _declared(spec, value, helper)
        if spec.name in known:
            g.initializer.append(numpy_helper.from_array(value, spec.name))
            if model.ir_version < 4:  # initializers were graph inputs too then
                keep.append(spec)
        else:
            keep.append(spec)
            values.append(value)
    del g.input[:]
    g.input.extend(keep)
    _drop_training_outputs(g)
    return model, values


def _drop_training_outputs(graph) -> None:
    """LayerNormalization's Mean / InvStdDev outputs exist for training; an exported inference
    model has none (aotpack refuses them), so their cases check the normalized output Y."""
    for n in graph.node:
        if n.op_type == "LayerNormalization" and len(n.output) > 1:
            extra = set(n.output[1:])
            del n.output[1:]
            kept = [o for o in graph.output if o.name not in extra]
            del graph.output[:]
            graph.output.extend(kept)


def _declared(spec, value, helper) -> np.ndarray:
    """`value` as the graph input declares it (some cases store object arrays, or [1] for a
    declared scalar)."""
    t = spec.type.tensor_type
    value = np.asarray(value)
    if value.dtype == object:
        value = value.astype(helper.tensor_dtype_to_np_dtype(t.elem_type))
    dims = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
    if t.HasField("shape") and None not in dims and int(np.prod(dims)) == value.size:
        value = value.reshape(dims)
    return value


def _known_inputs(graph, names: list[str], folded: set[str]) -> set[str]:
    """Graph inputs whose values a user's model would have at build time: those that reach an
    argument position or a folded-only op (through any chain of nodes: a window's size goes
    through Cast and Sub to a Range), and a table gathered along rows (an embedding)."""
    needed: set[str] = set()
    for n in reversed(graph.node):
        if n.op_type in folded or any(o in needed for o in n.output):
            needed.update(n.input)
            continue
        needed.update(name for k, name in enumerate(n.input)
                      if k in ARGUMENTS.get(n.op_type, ()))
    tables = {n.input[0] for n in graph.node
              if n.op_type == "Gather" and n.input[0] in names and _is_table(graph, n)}
    if tables:
        needed |= tables
        needed -= {n.input[1] for n in graph.node if n.op_type == "Gather"
                   and n.input[0] in tables}
    return {name for name in names if name in needed}


def _is_table(graph, node) -> bool:
    axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
    spec = next(i for i in graph.input if i.name == node.input[0])
    t = spec.type.tensor_type
    return axis == 0 and len(t.shape.dim) == 2 and t.elem_type in (1, 10, 16)


def build(model, folder: Path, dtype: str | None = None):
    """(loaded, program) through the front door a user takes: the file, --dtype."""
    import onnx

    from aotpack.shared_steps import check_supported
    from aotpack.frontend import load_spec, to_graph
    from aotpack.frontend.prepare import prepare
    from aotpack.passes import compile_graph

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.onnx"
    onnx.save(model, str(path))
    loaded = prepare(load_spec(str(path)), dtype=dtype)
    program = compile_graph(to_graph(loaded.model, loaded.inputs, loaded.dynamic_shapes))
    check_supported(program)
    return loaded, program


@dataclass
class Outcome:
    dtype: str | None  # the --dtype the case was built with (None: the model's own)
    errors: list  # per output: max |got - want| / (atol + rtol * |want|), <= 1 passes
    kernels: list  # the program's kernel op kinds

    @property
    def passed(self) -> bool:
        return all(e <= 1.0 for e in self.errors)


def run_case(case: Case, folder: Path) -> Outcome:
    """Build the case (its own float dtype; --dtype bf16 where a kernel needs it, as the
    build's error says), run the plan with the kernel references, compare with the expected
    outputs. A refusal propagates (a UserError)."""
    import torch

    from aotpack.shared_steps import BuildError
    from aotpack.executor import run_reference

    model, values = as_user_model(case)
    dtype = None
    try:
        loaded, program = build(model, folder)
    except BuildError as e:
        if "--dtype" not in str(e):
            raise
        dtype = "bf16"
        loaded, program = build(model, folder, dtype)
    xs = [_tensor(v, t.dtype) for v, t in zip(values, loaded.inputs)]
    got = run_reference(program, xs)
    rtol, atol = (case.rtol, max(case.atol, 1e-6)) if dtype is None else (2e-2, 2e-2)
    errors = []
    for g, want in zip(got, case.outputs):
        w = _tensor(want)
        if tuple(g.shape) != tuple(w.shape):
            errors.append(float("inf"))
            continue
        g, w = g.double(), w.double()
        scale = w.abs().max().item() if dtype is not None else 0.0
        bound = atol * max(scale, 1.0) + rtol * w.abs()
        same = (g == w) | ((g - w).abs() <= bound) | (g.isnan() & w.isnan())
        worst = ((g - w).abs() / bound).nan_to_num(0.0)
        errors.append(0.0 if bool(same.all()) else max(float(worst.max()), 1.0 + 1e-9))
    return Outcome(dtype, errors, [type(op).__name__ for op in program.ops])


def _tensor(v, dtype=None):
    from aotpack.frontend.onnx.translate import to_torch

    t = to_torch(np.asarray(v))
    return t if dtype is None else t.to(dtype)
