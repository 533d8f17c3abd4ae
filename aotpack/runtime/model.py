"""Model and Session: Python objects over the C runtime's handles.

torch is imported lazily, only by Session.run (which takes and returns torch CUDA tensors);
Model, Model.check_file and Session.run_pointers work without torch.

A bundle whose dims vary at run time (format v2, `Model.symbols` not empty) runs at any shape
in its symbols' ranges: `Session.run` takes the shapes from the tensors, `run_pointers` from
its `input_shapes` argument, and `Model.output_shapes` says how large the outputs are.
"""
from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from typing import Sequence

from aotpack.runtime._lib import (CUDA_GRAPHS_OFF, CUDA_GRAPHS_ON, SESSION_OPTIONS_V1_SIZE,
                                  ModelOptionsC, SessionOptionsC, ShapeC, SymbolInfoC,
                                  TensorInfoC, has_dynamic_shapes, has_execute, load_library)
from aotpack.runtime.errors import AotpackError, StatusCode, raise_if_error


@dataclass(frozen=True)
class DimInfo:
    """One dim of an input or output: `expr` is its expression over the symbols ("2*S") or
    None when static; `min` / `max` its value with every symbol at its min / at its max."""

    expr: str | None
    min: int
    max: int


@dataclass(frozen=True)
class TensorInfo:
    """One input or output of a model: manifest dtype spelling ("bf16"), shape (-1 for a dim
    that varies at run time, as in the C API), bytes (at every symbol's max when dims vary),
    and per dim its expression and range."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int
    dims: tuple[DimInfo, ...] = ()

    @property
    def is_static(self) -> bool:
        return all(d >= 0 for d in self.shape)


@dataclass(frozen=True)
class Symbol:
    """A run-time integer of a v2 bundle, in [min, max]; example is -1 when the bundle has
    none (mirrors aotpack_symbol_info)."""

    name: str
    min: int
    max: int
    example: int


# aotpack_verify (aotpack.h): how a load checks the weights' bytes
VERIFY_MODES = {None: 0, "full": 1, "fast": 2, "none": 3}


def _model_options(weights_path, device: int, verify=None) -> ModelOptionsC:
    if verify not in VERIFY_MODES:
        raise ValueError(f"verify must be 'full', 'fast', 'none' or None, not {verify!r}")
    o = ModelOptionsC()
    o.struct_size = ctypes.sizeof(ModelOptionsC)
    o.weights_path = os.fsencode(weights_path) if weights_path is not None else None
    o.device_ordinal = int(device)
    o.verify = VERIFY_MODES[verify]
    return o


def _c_shapes(shapes: Sequence[Sequence[int]], what: str):
    arr = (ShapeC * max(len(shapes), 1))()
    for i, shape in enumerate(shapes):
        dims = [int(d) for d in shape]
        if len(dims) > len(arr[i].dims):
            raise AotpackError(StatusCode.INVALID_ARGUMENT,
                               f"{what} {i} has rank {len(dims)}, more than the runtime's "
                               f"{len(arr[i].dims)}")
        arr[i].rank = len(dims)
        for k, d in enumerate(dims):
            arr[i].dims[k] = d
    return arr


class Model:
    """A bundle loaded onto one GPU (verified, cubins loaded, weights uploaded).

    Immutable; one Model may serve many Sessions on many threads.

    verify: how the weights' bytes are checked while loading — "fast" (the default: a 64-bit
    checksum of every byte), "full" (sha256 of every byte: also refuses a weights file forged
    to pass "fast") or "none" (names, dtypes and shapes only); the manifest and the cubins are
    always checked by sha256 (docs/manifest.md "Verification")."""

    def __init__(self, path, weights_path=None, device: int = 0, verify=None):
        self._lib = load_library()
        self._handle = ctypes.c_void_p()
        self.path = os.fspath(path)
        opts = _model_options(weights_path, device, verify)
        raise_if_error(self._lib, self._lib.aotpack_model_load(
            os.fsencode(self.path), ctypes.byref(opts), ctypes.byref(self._handle)))
        self.device = int(self._lib.aotpack_model_device(self._handle))
        self._v2 = has_dynamic_shapes(self._lib)
        self.symbols = self._symbols()
        self.inputs = self._infos(True)
        self.outputs = self._infos(False)
        self.arena_bytes = int(self._lib.aotpack_model_arena_bytes(self._handle))
        self.num_kernels = int(self._lib.aotpack_model_num_kernels(self._handle))
        self.num_steps = int(self._lib.aotpack_model_num_steps(self._handle))

    @staticmethod
    def check_file(path, weights_path=None, verify=None) -> None:
        """Verifies a bundle (checksums, weights, bounds, tensor-map rules) without a GPU or
        driver; `verify` as for Model (default here: "full"). Raises AotpackError when the
        bundle is invalid."""
        lib = load_library()
        opts = _model_options(weights_path, 0, verify)
        raise_if_error(lib, lib.aotpack_model_check_file(os.fsencode(os.fspath(path)),
                                                          ctypes.byref(opts)))

    @property
    def is_dynamic(self) -> bool:
        """Whether some input/output dims vary at run time (the model has symbols)."""
        return bool(self.symbols)

    def _live(self):
        """The C handle; a closed model raises a status (the C API would get NULL)."""
        if not self._handle:
            raise AotpackError(StatusCode.INVALID_ARGUMENT,
                               f"the model {self.path} is closed (Model.close() was called)")
        return self._handle

    def kernel_names(self) -> list[str]:
        self._live()
        return [self._lib.aotpack_model_kernel_name(self._handle, i).decode()
                for i in range(self.num_kernels)]

    def output_shapes(self, input_shapes: Sequence[Sequence[int]]) -> list[tuple[int, ...]]:
        """The output shapes for these input shapes, checked as a run checks them
        (AotpackError INVALID_ARGUMENT naming the input, dim and allowed values)."""
        n_in, n_out = len(self.inputs), len(self.outputs)
        self._live()
        if len(input_shapes) != n_in:
            raise AotpackError(StatusCode.INVALID_ARGUMENT,
                               f"expected {n_in} input shapes, got {len(input_shapes)}")
        if not self._v2:
            shapes = [tuple(int(d) for d in s) for s in input_shapes]
            for info, shape in zip(self.inputs, shapes):
                if shape != info.shape:
                    raise AotpackError(StatusCode.INVALID_ARGUMENT,
                                       f"input '{info.name}' has shape {shape}, expected "
                                       f"{info.shape}")
            return [t.shape for t in self.outputs]
        ins, outs = _c_shapes(input_shapes, "input shape"), (ShapeC * max(n_out, 1))()
        raise_if_error(self._lib, self._lib.aotpack_model_output_shapes(
            self._handle, ins, n_in, outs, n_out))
        return [tuple(int(outs[i].dims[k]) for k in range(outs[i].rank)) for i in range(n_out)]

    def _symbols(self) -> list[Symbol]:
        if not self._v2:
            return []
        lib, h, out = self._lib, self._handle, []
        for i in range(lib.aotpack_model_num_symbols(h)):
            info = SymbolInfoC()
            raise_if_error(lib, lib.aotpack_model_symbol_info(h, i, ctypes.byref(info)))
            out.append(Symbol(info.name.decode(), int(info.min), int(info.max),
                              int(info.example)))
        return out

    def _dims(self, inputs: bool, index: int, shape: tuple[int, ...]) -> tuple[DimInfo, ...]:
        if not self._v2:
            return tuple(DimInfo(None, d, d) for d in shape)
        get = self._lib.aotpack_model_input_dim if inputs else self._lib.aotpack_model_output_dim
        dims = []
        for k in range(len(shape)):
            expr, lo, hi = ctypes.c_char_p(), ctypes.c_int64(), ctypes.c_int64()
            raise_if_error(self._lib, get(self._handle, index, k, ctypes.byref(expr),
                                          ctypes.byref(lo), ctypes.byref(hi)))
            dims.append(DimInfo(expr.value.decode() if expr.value is not None else None,
                                int(lo.value), int(hi.value)))
        return tuple(dims)

    def _infos(self, inputs: bool) -> list[TensorInfo]:
        lib, h = self._lib, self._handle
        n = lib.aotpack_model_num_inputs(h) if inputs else lib.aotpack_model_num_outputs(h)
        get = lib.aotpack_model_input_info if inputs else lib.aotpack_model_output_info
        out = []
        for i in range(n):
            info = TensorInfoC()
            raise_if_error(lib, get(h, i, ctypes.byref(info)))
            shape = tuple(int(info.dims[k]) for k in range(info.rank))
            out.append(TensorInfo(info.name.decode(), info.dtype_name.decode(), shape,
                                  int(info.nbytes), self._dims(inputs, i, shape)))
        return out

    def session(self, **options) -> "Session":
        """A new Session of this model (`options`: those of Session)."""
        return Session(self, **options)

    def close(self) -> None:
        """Releases the handle now (sessions created from it stay valid)."""
        h, self._handle = getattr(self, "_handle", None), None
        if h:
            self._lib.aotpack_model_free(h)

    def __enter__(self) -> "Model":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        self.close()

    def __repr__(self) -> str:
        def dims(t: TensorInfo) -> str:
            return "[" + ", ".join(d.expr if d.expr is not None else str(d.min)
                                   for d in t.dims) + "]"
        sig = ", ".join(f"{t.name}: {t.dtype}{dims(t)}" for t in self.inputs)
        syms = "".join(f", {s.name} in {s.min}..{s.max}" for s in self.symbols)
        return f"Model({self.path!r}, inputs=[{sig}]{syms}, device={self.device})"


class Session:
    """Per-thread execution state of a Model (workspace, tensor-map cache, CUDA graphs).
    Not thread-safe: use one Session per thread."""

    def __init__(self, model: Model, workspace=None, use_cuda_graph: bool = True,
                 programmatic_launch: bool = True, max_cached_plans: int = 0,
                 check_pointers: bool = True, state=None):
        """workspace: None (the session allocates model.arena_bytes), a torch CUDA tensor,
        or (device_pointer, nbytes). A caller-provided workspace must outlive the session.
        state: the same for the model's session state (a KV cache; aotpack_model_state_bytes),
        zeroed at create and written in place by every run.
        programmatic_launch: False launches every kernel only after the previous one ends
        (aotpack_session_options.disable_programmatic_launch; for A/B timing).
        max_cached_plans: (shape, pointer set) plans kept, each with its CUDA graph; 0: 8.
        check_pointers: False skips the driver's check that new pointers are device memory
        large enough (aotpack_session_options.skip_pointer_checks)."""
        self.model = model  # keeps the Python handle alive as long as the session
        self._lib = model._lib
        self._shaped: dict = {}  # input shapes -> (output shapes, C shapes): dynamic models
        self._workspace_ref = workspace
        self._state_ref = state
        o = SessionOptionsC()
        self._execute = has_execute(self._lib)
        if self._execute:
            o.struct_size = ctypes.sizeof(SessionOptionsC)
            o.cuda_graphs = CUDA_GRAPHS_ON if use_cuda_graph else CUDA_GRAPHS_OFF
            o.skip_pointer_checks = 0 if check_pointers else 1
        else:  # a 0.1 library: its layout, where this field was use_cuda_graph
            o.struct_size = SESSION_OPTIONS_V1_SIZE
            o.cuda_graphs = 1 if use_cuda_graph else 0
        o.disable_programmatic_launch = 0 if programmatic_launch else 1
        o.max_cached_plans = int(max_cached_plans)
        if workspace is not None:
            o.workspace, o.workspace_bytes = _memory(workspace)
        if state is not None:
            o.state, o.state_bytes = _memory(state)
        self._handle = ctypes.c_void_p()
        raise_if_error(self._lib, self._lib.aotpack_session_create(
            model._live(), ctypes.byref(o), ctypes.byref(self._handle)))

    def run_pointers(self, input_ptrs: Sequence[int], output_ptrs: Sequence[int],
                     stream: int = 0, input_shapes: Sequence[Sequence[int]] | None = None
                     ) -> None:
        """Enqueues one run on raw device pointers (no checks beyond the C runtime's).
        `input_shapes` (one per input) is required when the model has symbols; for a static
        model it is optional and then checked."""
        n_in, n_out = len(self.model.inputs), len(self.model.outputs)
        self._live()
        if len(input_ptrs) != n_in or len(output_ptrs) != n_out:
            raise AotpackError(StatusCode.INVALID_ARGUMENT,
                               f"expected {n_in} input and {n_out} output pointers, got "
                               f"{len(input_ptrs)} and {len(output_ptrs)}")
        ins = (ctypes.c_uint64 * max(n_in, 1))(*[int(p) for p in input_ptrs])
        outs = (ctypes.c_uint64 * max(n_out, 1))(*[int(p) for p in output_ptrs])
        handle = ctypes.c_void_p(int(stream) or None)
        if self._execute:  # counts passed, so the runtime checks them too
            shapes = None if input_shapes is None else _c_shapes(input_shapes, "input shape")
            if shapes is not None and len(input_shapes) != n_in:
                raise AotpackError(StatusCode.INVALID_ARGUMENT,
                                   f"expected {n_in} input shapes, got {len(input_shapes)}")
            raise_if_error(self._lib, self._lib.aotpack_session_execute(
                self._handle, ins, n_in, shapes, outs, n_out, None, handle))
            return
        if input_shapes is None and not self.model.is_dynamic:
            raise_if_error(self._lib, self._lib.aotpack_session_run(self._handle, ins, outs,
                                                                    handle))
            return
        if input_shapes is None:
            names = ", ".join(s.name for s in self.model.symbols)
            raise AotpackError(StatusCode.INVALID_ARGUMENT,
                               f"the model has dims that vary at run time (symbols {names}): "
                               f"pass input_shapes")
        if len(input_shapes) != n_in:
            raise AotpackError(StatusCode.INVALID_ARGUMENT,
                               f"expected {n_in} input shapes, got {len(input_shapes)}")
        if not self.model._v2:  # an older library: a static model's shapes checked here
            self.model.output_shapes(input_shapes)
            raise_if_error(self._lib, self._lib.aotpack_session_run(self._handle, ins, outs,
                                                                    handle))
            return
        shapes = _c_shapes(input_shapes, "input shape")
        raise_if_error(self._lib, self._lib.aotpack_session_run_shaped(
            self._handle, ins, shapes, outs, handle))

    def run(self, inputs, outputs=None, stream=None):
        """Runs the model on torch CUDA tensors; returns the outputs (allocated when None).

        A model whose dims vary takes inputs of any shape in its symbols' ranges (the shapes
        are read from the tensors) and gives outputs of the matching shapes.

        Work is enqueued on `stream` (a torch.cuda.Stream, a raw CUstream int, or None for
        torch.cuda.current_stream()) and not waited for, like any torch CUDA op. On a stream
        other than the tensors' allocation stream, keep them alive (or `record_stream`) until
        the work is done. Runs of one Session share its workspace: do not overlap them on two
        streams. Reusing the same input/output tensors (and shapes) replays a cached CUDA
        graph."""
        import torch

        from aotpack.dtypes import DType

        self._live()
        device = torch.device("cuda", self.model.device)
        dynamic = self.model.is_dynamic
        self._check_tensors("input", inputs, self.model.inputs, device, DType,
                            None if dynamic else [t.shape for t in self.model.inputs])
        in_shapes = [tuple(t.shape) for t in inputs]
        if not dynamic:
            out_shapes = [t.shape for t in self.model.outputs]
        else:  # asked of the runtime once per input shape (a bad shape is refused there)
            key = tuple(in_shapes)
            cached = self._shaped.get(key)
            if cached is None:
                cached = (self.model.output_shapes(in_shapes),
                          _c_shapes(in_shapes, "input shape"))
                self._shaped[key] = cached
                if len(self._shaped) > 64:
                    self._shaped.pop(next(iter(self._shaped)))
            out_shapes, c_shapes = cached
        if outputs is None:
            outputs = [torch.empty(shape, dtype=DType(t.dtype).to_torch(), device=device)
                       for shape, t in zip(out_shapes, self.model.outputs)]
        else:
            self._check_tensors("output", outputs, self.model.outputs, device, DType, out_shapes)
        if stream is None:
            handle = torch.cuda.current_stream(device).cuda_stream
        elif isinstance(stream, int):
            handle = stream
        else:
            handle = stream.cuda_stream
        if dynamic:  # the shapes were checked and converted once, above
            n_in, n_out = len(inputs), len(outputs)
            ins = (ctypes.c_uint64 * max(n_in, 1))(*[t.data_ptr() for t in inputs])
            outs = (ctypes.c_uint64 * max(n_out, 1))(*[t.data_ptr() for t in outputs])
            stream_handle = ctypes.c_void_p(int(handle) or None)
            if self._execute:
                raise_if_error(self._lib, self._lib.aotpack_session_execute(
                    self._handle, ins, n_in, c_shapes, outs, n_out, None, stream_handle))
            else:
                raise_if_error(self._lib, self._lib.aotpack_session_run_shaped(
                    self._handle, ins, c_shapes, outs, stream_handle))
        else:
            self.run_pointers([t.data_ptr() for t in inputs], [t.data_ptr() for t in outputs],
                              handle)
        return list(outputs)

    @staticmethod
    def _check_tensors(kind, tensors, infos, device, DType, shapes) -> None:
        """Count, type, device, dtype and contiguity of `tensors`; their shapes against
        `shapes` when given (a dynamic model's input shapes are checked by the runtime)."""
        import torch

        if len(tensors) != len(infos):
            raise AotpackError(StatusCode.INVALID_ARGUMENT,
                               f"expected {len(infos)} {kind}s, got {len(tensors)}")
        for i, (t, info) in enumerate(zip(tensors, infos)):
            where = f"{kind} '{info.name}'"
            if not isinstance(t, torch.Tensor):
                raise AotpackError(StatusCode.INVALID_ARGUMENT,
                                   f"{where} must be a torch.Tensor, got {type(t).__name__}")
            if t.device != device:
                raise AotpackError(StatusCode.INVALID_ARGUMENT,
                                   f"{where} is on {t.device}, the model runs on {device}")
            want = DType(info.dtype).to_torch()
            if t.dtype != want:
                raise AotpackError(StatusCode.INVALID_ARGUMENT,
                                   f"{where} has dtype {t.dtype}, expected {want}")
            if shapes is not None and tuple(t.shape) != tuple(shapes[i]):
                raise AotpackError(StatusCode.INVALID_ARGUMENT,
                                   f"{where} has shape {tuple(t.shape)}, expected "
                                   f"{tuple(shapes[i])}")
            if not t.is_contiguous():
                raise AotpackError(StatusCode.INVALID_ARGUMENT,
                                   f"{where} must be contiguous (call .contiguous())")

    def _live(self):
        """The C handle; a closed session raises a status (the C API would get NULL)."""
        if not self._handle:
            raise AotpackError(StatusCode.INVALID_ARGUMENT,
                               "the session is closed (Session.close() was called)")
        return self._handle

    def close(self) -> None:
        h, self._handle = getattr(self, "_handle", None), None
        if h:
            self._lib.aotpack_session_free(h)

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        self.close()


def _memory(memory) -> tuple[int, int]:
    """(device pointer, bytes) of a torch CUDA tensor or a (pointer, nbytes) pair."""
    if isinstance(memory, tuple):
        return int(memory[0]), int(memory[1])
    return int(memory.data_ptr()), int(memory.numel() * memory.element_size())
