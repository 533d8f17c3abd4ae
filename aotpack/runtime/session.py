"""Session: one execution context of a Model (the C runtime's aotpack_session).

`run` takes torch tensors, DLPack objects and __cuda_array_interface__ objects (arrays.py).
Its per-call cost matters (a decode step is ~0.1 ms): a run whose tensors have the same keys
(pointer, shape, dtype, device, layout) as an earlier one skips the checks and reuses that
run's C arrays, and calls aotpack_session_execute through a prototype of plain ints. Run
benchmarks/binding_overhead.py to see the cost per call.
"""
from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Sequence

from aotpack.runtime._lib import (CUDA_GRAPHS_OFF, CUDA_GRAPHS_ON, SESSION_OPTIONS_V1_SIZE,
                                  SessionOptionsC, has_execute)
from aotpack.runtime.arrays import (CudaArray, as_array, c_pointers, c_shapes, check, invalid,
                                    key_of, stream_handle, wait_for_producers)
from aotpack.runtime.errors import raise_if_error

if TYPE_CHECKING:
    from aotpack.runtime.model import Model

# aotpack_session_execute with every pointer an int: ctypes converts ints fastest, and the
# arrays are kept alive by the plans that hold them
_EXECUTE = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                            ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p,
                            ctypes.c_void_p)
_MAX_PLANS = 16  # input key sets remembered per session, and output key sets per input set
_torch = None


def _import_torch():
    global _torch
    if _torch is None:
        import torch

        _torch = torch
    return _torch


class _Plan:
    """A checked set of inputs: their pointers (and shapes when dims vary) as C arrays, the
    output shapes they give, and the output key sets checked against those."""

    __slots__ = ("ins", "ins_addr", "shapes", "shapes_addr", "out_shapes", "outs")

    def __init__(self, ins, shapes, out_shapes):
        self.ins, self.ins_addr = ins, ctypes.addressof(ins)
        self.shapes = shapes
        self.shapes_addr = ctypes.addressof(shapes) if shapes is not None else None
        self.out_shapes = out_shapes
        self.outs: dict = {}  # output keys -> (uint64_t array, its address)


def _remember(cache: dict, key, value):
    if len(cache) >= _MAX_PLANS:
        cache.pop(next(iter(cache)))  # the oldest: a loop over fresh tensors stays bounded
    cache[key] = value
    return value


class Session:
    """Per-thread execution state of a Model (workspace, tensor-map cache, CUDA graphs).
    Not thread-safe: use one Session per thread. A context manager: `with` closes it."""

    def __init__(self, model: "Model", workspace=None, use_cuda_graph: bool = True,
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
        of the model's device, large enough (aotpack_session_options.skip_pointer_checks)."""
        self.model = model  # keeps the Python handle alive as long as the session
        self._lib = model._lib
        self._workspace_ref, self._state_ref = workspace, state
        self._execute = has_execute(self._lib)
        self._fast = _EXECUTE(("aotpack_session_execute", self._lib)) if self._execute else None
        self._plans: dict = {}  # input keys -> _Plan
        self._shaped: dict = {}  # input shapes -> output shapes (a model whose dims vary)
        self._device = self._out_dtypes = None  # set by the first run (_first_run)
        o = _options(self._execute, use_cuda_graph, programmatic_launch, max_cached_plans,
                     check_pointers)
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
            raise invalid(f"expected {n_in} input and {n_out} output pointers, got "
                          f"{len(input_ptrs)} and {len(output_ptrs)}")
        if input_shapes is not None and len(input_shapes) != n_in:
            raise invalid(f"expected {n_in} input shapes, got {len(input_shapes)}")
        if input_shapes is None and self.model.is_dynamic:
            names = ", ".join(s.name for s in self.model.symbols)
            raise invalid(f"the model has dims that vary at run time (symbols {names}): pass "
                          f"input_shapes")
        ins = (ctypes.c_uint64 * max(n_in, 1))(*[int(p) for p in input_ptrs])
        outs = (ctypes.c_uint64 * max(n_out, 1))(*[int(p) for p in output_ptrs])
        shapes = None if input_shapes is None else c_shapes(input_shapes, "input shape")
        if shapes is not None and not self._execute and not self.model._v2:
            self.model.output_shapes(input_shapes)  # an older library: checked here
            shapes = None
        self._enqueue(ins, shapes, outs, int(stream))

    def run(self, inputs, outputs=None, stream=None):
        """Runs the model; returns the outputs: `outputs` as given, or new torch tensors.

        inputs / outputs: sequences (one item per model input / output) of torch CUDA tensors,
        DLPack objects (`__dlpack__` and `__dlpack_device__`: JAX, CuPy, ...) or objects with
        `__cuda_array_interface__` (CuPy, Numba). Each must be C-contiguous, of the model's
        dtype (`model.inputs[i].dtype`) and shape, on the model's GPU; AotpackError
        INVALID_ARGUMENT names the tensor otherwise. A model whose dims vary takes inputs of
        any shape in its symbols' ranges, and gives outputs of the matching shapes. The
        device of a __cuda_array_interface__ object (which does not say it) is checked by the
        runtime's pointer check (Session(check_pointers=True), the default).

        DLPack out: the outputs are torch tensors, themselves DLPack objects:
        `cupy.from_dlpack(y)`, `jax.dlpack.from_dlpack(y)`, `numba.cuda.as_cuda_array(y)`
        share their memory without a copy. Or pass `outputs` of your own array type.

        Work is enqueued on `stream` (None: torch's current stream of the model's device; an
        int CUstream; a torch.cuda.Stream or cupy.cuda.Stream) and not waited for, like any
        CUDA op. DLPack objects are exported for that stream, and a __cuda_array_interface__
        object's own stream (version 3) is waited for. Keep the tensors alive until the work
        is done. Runs of one Session share its workspace: do not overlap them on two streams.

        Reusing the same tensors (same pointers, shapes, dtypes) takes the fast path: the
        checks of the first such run are remembered, and the runtime replays its CUDA graph."""
        torch = _import_torch()
        self._live()
        if self._out_dtypes is None:
            self._first_run(torch)
        device = self._device
        handle = stream_handle(torch, stream, self.model.device)
        ins = self._arrays(torch, inputs, "input", self.model.inputs, device, handle)
        key = tuple(map(key_of, ins))
        plan = self._plans.get(key) or self._plan(torch, ins, key, device)
        if outputs is None:
            outputs = [torch.empty(shape, dtype=dtype, device=device)
                       for shape, dtype in zip(plan.out_shapes, self._out_dtypes)]
            outs = c_pointers(outputs)
            outs_addr = ctypes.addressof(outs)
        else:
            arrays = self._arrays(torch, outputs, "output", self.model.outputs, device, handle)
            out_key = tuple(map(key_of, arrays))
            outs, outs_addr = plan.outs.get(out_key) or self._outputs(torch, arrays, out_key,
                                                                       plan, device)
        if self._fast is None:
            self._enqueue(plan.ins, plan.shapes, outs, handle)
        else:
            n_in, n_out = len(self.model.inputs), len(self.model.outputs)
            status = self._fast(self._handle.value, plan.ins_addr, n_in, plan.shapes_addr,
                                outs_addr, n_out, None, handle)
            if status:
                raise_if_error(self._lib, status)
        return list(outputs)

    def _first_run(self, torch) -> None:
        """What runs need from torch, made once: the outputs' dtypes and the model's device
        (unless set already: the tests run CPU tensors on the fake driver)."""
        from aotpack.dtypes import DType

        self._out_dtypes = [DType(t.dtype).to_torch() for t in self.model.outputs]
        if self._device is None:
            self._device = torch.device("cuda", self.model.device)

    def _arrays(self, torch, objs, kind: str, infos, device, stream: int) -> list:
        """`objs` as torch tensors and CudaArrays (arrays.as_array), their count checked; a
        __cuda_array_interface__ object's stream is waited for here."""
        if len(objs) != len(infos):
            raise invalid(f"expected {len(infos)} {kind}s, got {len(objs)}")
        tensor = torch.Tensor
        for x in objs:
            if not isinstance(x, tensor):
                break
        else:
            return objs  # all torch tensors: nothing to convert (the common case)
        arrays = [as_array(torch, x, f"{kind} '{info.name}'", device, stream)
                  for x, info in zip(objs, infos)]
        if any(type(a) is CudaArray and a.stream is not None for a in arrays):
            wait_for_producers(torch, arrays, stream, device)
        return arrays

    def _plan(self, torch, ins, key, device) -> _Plan:
        """Checks inputs seen for the first time (a dynamic model's shapes by the runtime,
        once per shape) and remembers them under `key`."""
        dynamic = self.model.is_dynamic
        for a, info in zip(ins, self.model.inputs):
            check(a, info, f"input '{info.name}'", torch, device,
                  None if dynamic else info.shape, output=False)
        if not dynamic:
            return _remember(self._plans, key, _Plan(c_pointers(ins), None,
                                                     [t.shape for t in self.model.outputs]))
        shapes = tuple(tuple(a.shape) for a in ins)
        out_shapes = self._shaped.get(shapes)
        if out_shapes is None:
            out_shapes = _remember(self._shaped, shapes, self.model.output_shapes(shapes))
        return _remember(self._plans, key, _Plan(c_pointers(ins),
                                                 c_shapes(shapes, "input shape"), out_shapes))

    def _outputs(self, torch, arrays, out_key, plan: _Plan, device):
        """Checks outputs seen for the first time with these inputs: (C array, address)."""
        for a, info, shape in zip(arrays, self.model.outputs, plan.out_shapes):
            check(a, info, f"output '{info.name}'", torch, device, shape, output=True)
        outs = c_pointers(arrays)
        return _remember(plan.outs, out_key, (outs, ctypes.addressof(outs)))

    def _enqueue(self, ins, shapes, outs, stream: int) -> None:
        """One run on C arrays; `shapes` None for a static model (or an old library's)."""
        n_in, n_out = len(self.model.inputs), len(self.model.outputs)
        lib, h, s = self._lib, self._handle, ctypes.c_void_p(stream or None)
        if self._execute:  # counts passed, so the runtime checks them too
            raise_if_error(lib, lib.aotpack_session_execute(h, ins, n_in, shapes, outs, n_out,
                                                            None, s))
        elif shapes is not None:
            raise_if_error(lib, lib.aotpack_session_run_shaped(h, ins, shapes, outs, s))
        else:
            raise_if_error(lib, lib.aotpack_session_run(h, ins, outs, s))

    def _live(self):
        """The C handle; a closed session raises a status (the C API would get NULL)."""
        if not self._handle:
            raise invalid("the session is closed (Session.close() was called)")
        return self._handle

    def close(self) -> None:
        """Frees the session now (waits for nothing: synchronize its stream first)."""
        h, self._handle = getattr(self, "_handle", None), None
        if h:
            self._lib.aotpack_session_free(h)

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        self.close()


def _options(execute: bool, use_cuda_graph: bool, programmatic_launch: bool,
             max_cached_plans: int, check_pointers: bool) -> SessionOptionsC:
    o = SessionOptionsC()
    if execute:
        o.struct_size = ctypes.sizeof(SessionOptionsC)
        o.cuda_graphs = CUDA_GRAPHS_ON if use_cuda_graph else CUDA_GRAPHS_OFF
        o.skip_pointer_checks = 0 if check_pointers else 1
    else:  # a 0.1 library: its layout, where this field was use_cuda_graph
        o.struct_size = SESSION_OPTIONS_V1_SIZE
        o.cuda_graphs = 1 if use_cuda_graph else 0
    o.disable_programmatic_launch = 0 if programmatic_launch else 1
    o.max_cached_plans = int(max_cached_plans)
    return o


def _memory(memory) -> tuple[int, int]:
    """(device pointer, bytes) of a torch CUDA tensor or a (pointer, nbytes) pair."""
    if isinstance(memory, tuple):
        return int(memory[0]), int(memory[1])
    return int(memory.data_ptr()), int(memory.numel() * memory.element_size())
