"""Model and Session: Python objects over the C runtime's handles.

torch is imported lazily, only by Session.run (which takes and returns torch CUDA tensors);
Model, Model.check_file and Session.run_pointers work without torch.
"""
from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from typing import Sequence

from aotpack.runtime._lib import (ModelOptionsC, SessionOptionsC, TensorInfoC, load_library)
from aotpack.runtime.errors import AotpackError, StatusCode, raise_if_error


@dataclass(frozen=True)
class TensorInfo:
    """One input or output of a model: manifest dtype spelling ("bf16"), static shape."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int


def _model_options(weights_path, device: int) -> ModelOptionsC:
    o = ModelOptionsC()
    o.struct_size = ctypes.sizeof(ModelOptionsC)
    o.weights_path = os.fsencode(weights_path) if weights_path is not None else None
    o.device_ordinal = int(device)
    return o


class Model:
    """A bundle loaded onto one GPU (verified, cubins loaded, weights uploaded).

    Immutable; one Model may serve many Sessions on many threads."""

    def __init__(self, path, weights_path=None, device: int = 0):
        self._lib = load_library()
        self._handle = ctypes.c_void_p()
        self.path = os.fspath(path)
        opts = _model_options(weights_path, device)
        raise_if_error(self._lib, self._lib.aotpack_model_load(
            os.fsencode(self.path), ctypes.byref(opts), ctypes.byref(self._handle)))
        self.device = int(self._lib.aotpack_model_device(self._handle))
        self.inputs = self._infos(True)
        self.outputs = self._infos(False)
        self.arena_bytes = int(self._lib.aotpack_model_arena_bytes(self._handle))
        self.num_kernels = int(self._lib.aotpack_model_num_kernels(self._handle))
        self.num_steps = int(self._lib.aotpack_model_num_steps(self._handle))

    @staticmethod
    def check_file(path, weights_path=None) -> None:
        """Verifies a bundle (checksums, weights, bounds, tensor-map rules) without a GPU or
        driver. Raises AotpackError when the bundle is invalid."""
        lib = load_library()
        opts = _model_options(weights_path, 0)
        raise_if_error(lib, lib.aotpack_model_check_file(os.fsencode(os.fspath(path)),
                                                          ctypes.byref(opts)))

    def kernel_names(self) -> list[str]:
        return [self._lib.aotpack_model_kernel_name(self._handle, i).decode()
                for i in range(self.num_kernels)]

    def _infos(self, inputs: bool) -> list[TensorInfo]:
        lib, h = self._lib, self._handle
        n = lib.aotpack_model_num_inputs(h) if inputs else lib.aotpack_model_num_outputs(h)
        get = lib.aotpack_model_input_info if inputs else lib.aotpack_model_output_info
        out = []
        for i in range(n):
            info = TensorInfoC()
            raise_if_error(lib, get(h, i, ctypes.byref(info)))
            out.append(TensorInfo(info.name.decode(), info.dtype_name.decode(),
                                  tuple(int(info.dims[k]) for k in range(info.rank)),
                                  int(info.nbytes)))
        return out

    def close(self) -> None:
        """Releases the handle now (sessions created from it stay valid)."""
        h, self._handle = getattr(self, "_handle", None), None
        if h:
            self._lib.aotpack_model_free(h)

    def __del__(self):
        self.close()

    def __repr__(self) -> str:
        sig = ", ".join(f"{t.name}: {t.dtype}{list(t.shape)}" for t in self.inputs)
        return f"Model({self.path!r}, inputs=[{sig}], device={self.device})"


class Session:
    """Per-thread execution state of a Model (workspace, tensor-map cache, CUDA graphs).
    Not thread-safe: use one Session per thread."""

    def __init__(self, model: Model, workspace=None, use_cuda_graph: bool = True,
                 programmatic_launch: bool = True):
        """workspace: None (the session allocates model.arena_bytes), a torch CUDA tensor,
        or (device_pointer, nbytes). A caller-provided workspace must outlive the session.
        programmatic_launch: False launches every kernel only after the previous one ends
        (aotpack_session_options.disable_programmatic_launch; for A/B timing)."""
        self.model = model  # keeps the Python handle alive as long as the session
        self._lib = model._lib
        self._workspace_ref = workspace
        o = SessionOptionsC()
        o.struct_size = ctypes.sizeof(SessionOptionsC)
        o.use_cuda_graph = 1 if use_cuda_graph else 0
        o.disable_programmatic_launch = 0 if programmatic_launch else 1
        if workspace is not None:
            if isinstance(workspace, tuple):
                o.workspace, o.workspace_bytes = int(workspace[0]), int(workspace[1])
            else:
                o.workspace = int(workspace.data_ptr())
                o.workspace_bytes = int(workspace.numel() * workspace.element_size())
        self._handle = ctypes.c_void_p()
        raise_if_error(self._lib, self._lib.aotpack_session_create(
            model._handle, ctypes.byref(o), ctypes.byref(self._handle)))

    def run_pointers(self, input_ptrs: Sequence[int], output_ptrs: Sequence[int],
                     stream: int = 0) -> None:
        """Enqueues one run on raw device pointers (no checks beyond the C runtime's)."""
        n_in, n_out = len(self.model.inputs), len(self.model.outputs)
        if len(input_ptrs) != n_in or len(output_ptrs) != n_out:
            raise AotpackError(StatusCode.INVALID_ARGUMENT,
                               f"expected {n_in} input and {n_out} output pointers, got "
                               f"{len(input_ptrs)} and {len(output_ptrs)}")
        ins = (ctypes.c_uint64 * max(n_in, 1))(*[int(p) for p in input_ptrs])
        outs = (ctypes.c_uint64 * max(n_out, 1))(*[int(p) for p in output_ptrs])
        raise_if_error(self._lib, self._lib.aotpack_session_run(
            self._handle, ins, outs, ctypes.c_void_p(int(stream) or None)))

    def run(self, inputs, outputs=None, stream=None):
        """Runs the model on torch CUDA tensors; returns the outputs (allocated when None).

        Work is enqueued on `stream` (a torch.cuda.Stream, a raw CUstream int, or None for
        torch.cuda.current_stream()) and not waited for, like any torch CUDA op. On a stream
        other than the tensors' allocation stream, keep them alive (or `record_stream`) until
        the work is done. Runs of one Session share its workspace: do not overlap them on two
        streams. Reusing the same input/output tensors replays a cached CUDA graph."""
        import torch

        from aotpack.dtypes import DType

        device = torch.device("cuda", self.model.device)
        self._check_tensors("input", inputs, self.model.inputs, device, DType)
        if outputs is None:
            outputs = [torch.empty(t.shape, dtype=DType(t.dtype).to_torch(), device=device)
                       for t in self.model.outputs]
        else:
            self._check_tensors("output", outputs, self.model.outputs, device, DType)
        if stream is None:
            handle = torch.cuda.current_stream(device).cuda_stream
        elif isinstance(stream, int):
            handle = stream
        else:
            handle = stream.cuda_stream
        self.run_pointers([t.data_ptr() for t in inputs], [t.data_ptr() for t in outputs],
                          handle)
        return list(outputs)

    @staticmethod
    def _check_tensors(kind, tensors, infos, device, DType) -> None:
        import torch

        if len(tensors) != len(infos):
            raise AotpackError(StatusCode.INVALID_ARGUMENT,
                               f"expected {len(infos)} {kind}s, got {len(tensors)}")
        for t, info in zip(tensors, infos):
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
            if tuple(t.shape) != info.shape:
                raise AotpackError(StatusCode.INVALID_ARGUMENT,
                                   f"{where} has shape {tuple(t.shape)}, expected {info.shape}")
            if not t.is_contiguous():
                raise AotpackError(StatusCode.INVALID_ARGUMENT,
                                   f"{where} must be contiguous (call .contiguous())")

    def close(self) -> None:
        h, self._handle = getattr(self, "_handle", None), None
        if h:
            self._lib.aotpack_session_free(h)

    def __del__(self):
        self.close()
