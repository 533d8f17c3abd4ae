"""An ONNX model file as the build sees it: the checked, shape-inferred ModelProto with its
external data, its inputs' declared types, and an eager run (onnxruntime where installed, else
the onnx package's reference evaluator) that verify compares the bundle with; a model that
computes in bf16 runs there as its float32 self (float32_copy).

Nothing here converts ONNX to PyTorch: the eager run executes the ONNX graph itself.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from aotpack.dtypes import DType
from aotpack.frontend.load import ModelLoadError

MIN_OPSET = 13

# ONNX TensorProto element types aotpack has dtypes for
_ELEM = {1: DType.F32, 2: DType.U8, 3: DType.I8, 5: DType.I16, 6: DType.I32, 7: DType.I64,
         9: DType.BOOL, 10: DType.F16, 11: DType.F64, 16: DType.BF16}


def elem_dtype(elem_type: int, where: str) -> DType:
    dt = _ELEM.get(elem_type)
    if dt is None:
        import onnx

        name = onnx.TensorProto.DataType.Name(elem_type)
        raise ModelLoadError(f"{where} has element type {name}, which aotpack has no dtype for "
                             f"(supported: {', '.join(sorted(d.value for d in _ELEM.values()))})")
    return dt


@dataclass(frozen=True)
class OnnxInput:
    name: str
    dtype: DType
    dims: tuple  # per dim: int (dim_value), str (dim_param) or None (unknown)


class OnnxModel:
    """A loaded .onnx file. `cast`: the floating dtype `--dtype` asked for (None: as stored);
    the translator casts floating weights and inputs to it, the eager run computes in the
    stored precision and rounds its outputs to it."""

    def __init__(self, path: Path, proto, cast: DType | None = None):
        self.path = path
        self.proto = proto
        self.cast = cast
        self.opset = opset_of(proto)
        inits = {t.name for t in proto.graph.initializer}
        self.inputs = [_input(v) for v in proto.graph.input if v.name not in inits]
        self.output_names = [v.name for v in proto.graph.output]
        self._session = None

    # the torch.nn.Module-like surface verify uses on a model
    def eval(self):
        return self

    def to(self, what):
        """A dtype: the model cast to it (`--dtype`); a device: the same model (the eager run
        is on the CPU, its outputs return to the inputs' device)."""
        import torch

        if isinstance(what, torch.dtype) and what.is_floating_point:
            other = copy.copy(self)
            other.cast = None if what == torch.float32 else DType.from_torch(what)
            other._session = None
            return other
        return self

    def float(self):
        return self.to(__import__("torch").float32)

    def __call__(self, *tensors):
        import numpy as np
        import torch

        if len(tensors) != len(self.inputs):
            raise ModelLoadError(f"{self.path.name} takes {len(self.inputs)} inputs, "
                                 f"got {len(tensors)}")
        device = tensors[0].device if tensors else torch.device("cpu")
        feeds = {}
        for spec, t in zip(self.inputs, tensors):
            t = t.detach().cpu()
            if t.is_floating_point():
                t = t.to(spec.dtype.to_torch() if spec.dtype != DType.BF16 else torch.float32)
            a = t.numpy()
            feeds[spec.name] = a.astype(_bfloat16()) if spec.dtype == DType.BF16 else a
        outs = self._run(feeds)
        result = []
        for o in outs:
            o = np.asarray(o)
            if o.dtype == _bfloat16():  # numpy has no bf16 of its own: through float32
                o = o.astype(np.float32)
            t = torch.from_numpy(np.ascontiguousarray(o))
            if self.cast is not None and t.is_floating_point():
                t = t.to(self.cast.to_torch())
            result.append(t.to(device))
        return tuple(result)

    def _run(self, feeds: dict) -> list:
        if self._session is None:
            self._session = _session(self)
        return self._session(feeds)

    @property
    def kind(self) -> str:
        return "onnx"


def _bfloat16():
    import ml_dtypes  # onnx's own dependency: its bf16 arrays

    return ml_dtypes.bfloat16


def _session(model: OnnxModel):
    """feeds -> outputs: onnxruntime (CPU) if installed, else onnx.reference; a model that
    computes in bf16 always the reference (onnxruntime's CPU provider has no bf16 Conv,
    MatMul, ...: its session refuses the graph)."""
    try:
        import onnxruntime as ort
    except ImportError:
        ort = None
    if ort is not None and _has_bf16(model.proto):
        proto = float32_copy(model.proto)
        sess = ort.InferenceSession(proto.SerializeToString(), _quiet(ort),
                                    providers=["CPUExecutionProvider"])
        return lambda feeds: sess.run(None, {k: np.asarray(v, np.float32)
                                             if v.dtype == _bfloat16() else v
                                             for k, v in feeds.items()})
    if ort is not None:
        sess = ort.InferenceSession(str(model.path), _quiet(ort),
                                    providers=["CPUExecutionProvider"])
        return lambda feeds: sess.run(None, feeds)
    from onnx.reference import ReferenceEvaluator

    ref = ReferenceEvaluator(model.proto)
    return lambda feeds: ref.run(None, feeds)


def _quiet(ort):
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return opts


def float32_copy(proto):
    """The model computing in float32 where it computes in bf16 (weights, inputs, outputs,
    intermediate types, casts and constants): onnxruntime's CPU provider has no bf16 Conv,
    MatMul, ..., so a bf16 model's eager run is its float32 self (verify says so)."""
    import onnx
    from onnx import numpy_helper

    proto = copy.deepcopy(proto)
    g = proto.graph

    def retype(t):
        if t.data_type == 16:
            t.CopyFrom(numpy_helper.from_array(
                numpy_helper.to_array(t).astype(np.float32), t.name))

    for t in g.initializer:
        retype(t)
    for v in list(g.input) + list(g.output) + list(g.value_info):
        if v.type.tensor_type.elem_type == 16:
            v.type.tensor_type.elem_type = 1
    for n in g.node:
        for a in n.attribute:
            if n.op_type == "Cast" and a.name == "to" and a.i == 16:
                a.i = 1
            elif a.type == onnx.AttributeProto.TENSOR:
                retype(a.t)
    return proto


def _has_bf16(proto) -> bool:
    g = proto.graph
    types = [v.type.tensor_type.elem_type for v in list(g.input) + list(g.output)]
    return 16 in types + [t.data_type for t in g.initializer]


def opset_of(proto) -> int:
    for o in proto.opset_import:
        if o.domain in ("", "ai.onnx"):
            return int(o.version)
    return 1


def _input(v) -> OnnxInput:
    t = v.type.tensor_type
    if not v.type.HasField("tensor_type"):
        raise ModelLoadError(f"ONNX graph input {v.name!r} is not a tensor (sequences, maps "
                             f"and optionals are not supported)")
    dims = []
    for d in t.shape.dim:
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        elif d.HasField("dim_param") and d.dim_param:
            dims.append(d.dim_param)
        else:
            dims.append(None)
    return OnnxInput(v.name, elem_dtype(t.elem_type, f"ONNX graph input {v.name!r}"),
                     tuple(dims))


def load_onnx(path: Path) -> OnnxModel:
    """The model at `path`: checked (onnx.checker), shapes inferred, external-data files read
    from beside it. ModelLoadError when it is no ONNX model or its opset is out of range."""
    import onnx

    if not path.is_file():
        raise ModelLoadError(f"model file {str(path)!r} does not exist")
    try:
        proto = onnx.load(str(path), load_external_data=False)
    except Exception as e:  # noqa: BLE001 — a protobuf parse error says little more
        raise ModelLoadError(f"{path} is not an ONNX model: {type(e).__name__}: {e}") from None
    opset = opset_of(proto)
    newest = onnx.defs.onnx_opset_version()
    if not MIN_OPSET <= opset <= newest:
        raise ModelLoadError(f"{path.name} uses ONNX opset {opset}; aotpack reads opsets "
                             f"{MIN_OPSET}..{newest} (the installed onnx {onnx.__version__}): "
                             f"convert it with onnx.version_converter.convert_version(model, "
                             f"{max(MIN_OPSET, min(opset, newest))})")
    try:
        onnx.checker.check_model(str(path))  # by path: works for models over 2 GB
    except Exception as e:  # noqa: BLE001
        raise ModelLoadError(f"{path.name} fails onnx.checker: {str(e).strip().splitlines()[0]}"
                             ) from None
    try:
        proto = onnx.shape_inference.infer_shapes(proto)
    except Exception as e:  # noqa: BLE001
        raise ModelLoadError(f"{path.name}: ONNX shape inference failed: {e}") from None
    try:
        onnx.external_data_helper.load_external_data_for_model(proto, str(path.parent))
    except OSError as e:
        raise ModelLoadError(f"{path.name}: its external data could not be read ({e}); keep "
                             f"the data files where they were written, beside the model") from None
    return OnnxModel(path, proto)
