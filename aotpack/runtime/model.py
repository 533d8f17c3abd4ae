"""Model: a loaded bundle (the C runtime's aotpack_model); Session lives in session.py and is
re-exported here.

torch is imported lazily, only by Session.run (tensors in, torch tensors out); Model,
Model.check_file and Session.run_pointers work without torch.

A bundle whose dims vary at run time (format v2, `Model.symbols` not empty) runs at any shape
in its symbols' ranges: `Session.run` takes the shapes from the tensors, `run_pointers` from
its `input_shapes` argument, and `Model.output_shapes` says how large the outputs are.
"""
from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from typing import Sequence

from aotpack.runtime._lib import (ModelOptionsC, ShapeC, SymbolInfoC, TensorInfoC,
                                  has_dynamic_shapes, load_library)
from aotpack.runtime.arrays import c_shapes
from aotpack.runtime.errors import AotpackError, StatusCode, raise_if_error
from aotpack.runtime.session import Session  # noqa: F401 (re-exported)


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
        ins, outs = c_shapes(input_shapes, "input shape"), (ShapeC * max(n_out, 1))()
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
