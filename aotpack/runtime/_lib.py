"""Finding and loading libaotpack.so, and the ctypes declarations of its C API
(runtime_cpp/include/aotpack/aotpack.h). No torch import.

Search order: env AOTPACK_LIB; the runtime installed inside the package
(`aotpack/_runtime/lib/libaotpack.so`, see aotpack.runtime_files); the newest
`<repo>/build/**/libaotpack.so` of a development build (not `build-*`: sanitizer builds
live there and cannot be loaded into a plain Python).
"""
from __future__ import annotations

import ctypes
import threading
from pathlib import Path

_REPO = Path(__file__).resolve().parents[2]
_lock = threading.Lock()
_lib: ctypes.CDLL | None = None

MAX_RANK = 8


class TensorInfoC(ctypes.Structure):
    """aotpack_tensor_info."""

    _fields_ = [
        ("name", ctypes.c_char_p),
        ("dtype", ctypes.c_int),
        ("dtype_name", ctypes.c_char_p),
        ("rank", ctypes.c_int32),
        ("dims", ctypes.c_int64 * MAX_RANK),
        ("nbytes", ctypes.c_uint64),
    ]


class ShapeC(ctypes.Structure):
    """aotpack_shape."""

    _fields_ = [
        ("rank", ctypes.c_int32),
        ("dims", ctypes.c_int64 * MAX_RANK),
    ]


class SymbolInfoC(ctypes.Structure):
    """aotpack_symbol_info."""

    _fields_ = [
        ("name", ctypes.c_char_p),
        ("min", ctypes.c_int64),
        ("max", ctypes.c_int64),
        ("example", ctypes.c_int64),
    ]


class ModelOptionsC(ctypes.Structure):
    """aotpack_model_options."""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("weights_path", ctypes.c_char_p),
        ("device_ordinal", ctypes.c_int),
        ("verify", ctypes.c_int),
        ("reserved", ctypes.c_int * 3),
    ]


class SessionOptionsC(ctypes.Structure):
    """aotpack_session_options. A library without aotpack_session_execute (0.1) reads only the
    first SESSION_OPTIONS_V1_SIZE bytes, and its `cuda_graphs` field means use_cuda_graph
    (0 = off): Session fills it so (has_execute)."""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("workspace", ctypes.c_uint64),
        ("workspace_bytes", ctypes.c_size_t),
        ("cuda_graphs", ctypes.c_int),  # CUDA_GRAPHS_DEFAULT / _ON / _OFF
        ("disable_programmatic_launch", ctypes.c_int),
        ("max_cached_plans", ctypes.c_int),
        ("skip_pointer_checks", ctypes.c_int),
        ("state", ctypes.c_uint64),
        ("state_bytes", ctypes.c_uint64),
    ]


class GenerationInfoC(ctypes.Structure):
    """aotpack_generation_info."""

    _fields_ = [
        ("max_batch", ctypes.c_int64),
        ("max_seq_len", ctypes.c_int64),
        ("vocab_size", ctypes.c_int64),
        ("num_eos_ids", ctypes.c_size_t),
        ("eos_ids", ctypes.POINTER(ctypes.c_int64)),
    ]


# aotpack_token_callback: int (*)(void* user_data, size_t sequence, int64_t token, size_t step)
TOKEN_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t,
                                  ctypes.c_int64, ctypes.c_size_t)


class GenerateOptionsC(ctypes.Structure):
    """aotpack_generate_options."""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("temperature", ctypes.c_float),
        ("top_k", ctypes.c_int32),
        ("top_p", ctypes.c_float),
        ("seed", ctypes.c_uint64),
        ("stop_ids", ctypes.POINTER(ctypes.c_int64)),
        ("num_stop_ids", ctypes.c_size_t),
        ("ignore_eos", ctypes.c_int32),
        ("on_token", TOKEN_CALLBACK),
        ("user_data", ctypes.c_void_p),
        ("reserved", ctypes.c_uint64 * 4),
    ]


class GenerateStatsC(ctypes.Structure):
    """aotpack_generate_stats."""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("ttft_ms", ctypes.c_double),
        ("decode_ms", ctypes.c_double),
        ("decode_steps", ctypes.c_int64),
        ("prompt_tokens", ctypes.c_int64),
        ("generated_tokens", ctypes.c_int64),
        ("decode_tokens_per_s", ctypes.c_double),
        ("stopped_by_callback", ctypes.c_int32),
    ]


SESSION_OPTIONS_V1_SIZE = 40
CUDA_GRAPHS_ON, CUDA_GRAPHS_OFF = 1, 2


def _candidates() -> list[Path]:
    found: list[Path] = []
    from aotpack import knobs

    explicit = knobs.lib_path()
    if explicit is not None:
        return [explicit]  # explicit: nothing else is tried
    try:
        from aotpack import runtime_files

        p = runtime_files.library_path()
        if p is not None:
            found.append(Path(p))
    except Exception:  # the helper is optional; fall back to our own search
        pass
    found.append(Path(__file__).resolve().parents[1] / "_runtime" / "lib" / "libaotpack.so")
    build = _REPO / "build"
    dev = [p for p in build.rglob("libaotpack.so")] if build.is_dir() else []
    dev.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    return found + dev


def library_path() -> Path:
    """The libaotpack.so that load_library() would open; raises FileNotFoundError."""
    for p in _candidates():
        if p.is_file():
            return p
    raise FileNotFoundError(
        "libaotpack.so not found: set AOTPACK_LIB, install aotpack with pip (it builds the "
        "runtime), or build it: cmake -S . -B build && cmake --build build")


def _declare(lib: ctypes.CDLL) -> None:
    vp, u64, sz, cint = ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_int
    i64 = ctypes.c_int64
    sigs = {
        "aotpack_status_code": (cint, [vp]),
        "aotpack_status_message": (ctypes.c_char_p, [vp]),
        "aotpack_status_code_name": (ctypes.c_char_p, [cint]),
        "aotpack_status_free": (None, [vp]),
        "aotpack_version": (ctypes.c_char_p, []),
        "aotpack_model_load": (vp, [ctypes.c_char_p, ctypes.POINTER(ModelOptionsC),
                                    ctypes.POINTER(vp)]),
        "aotpack_model_check_file": (vp, [ctypes.c_char_p, ctypes.POINTER(ModelOptionsC)]),
        "aotpack_model_free": (None, [vp]),
        "aotpack_model_num_inputs": (sz, [vp]),
        "aotpack_model_num_outputs": (sz, [vp]),
        "aotpack_model_input_info": (vp, [vp, sz, ctypes.POINTER(TensorInfoC)]),
        "aotpack_model_output_info": (vp, [vp, sz, ctypes.POINTER(TensorInfoC)]),
        "aotpack_model_arena_bytes": (u64, [vp]),
        "aotpack_model_num_kernels": (sz, [vp]),
        "aotpack_model_num_steps": (sz, [vp]),
        "aotpack_model_kernel_name": (ctypes.c_char_p, [vp, sz]),
        "aotpack_model_kernel_entry": (ctypes.c_char_p, [vp, sz]),
        "aotpack_model_device": (cint, [vp]),
        "aotpack_model_num_symbols": (sz, [vp]),
        "aotpack_model_symbol_info": (vp, [vp, sz, ctypes.POINTER(SymbolInfoC)]),
        "aotpack_model_input_dim": (vp, [vp, sz, ctypes.c_int32, ctypes.POINTER(ctypes.c_char_p),
                                         ctypes.POINTER(i64), ctypes.POINTER(i64)]),
        "aotpack_model_output_dim": (vp, [vp, sz, ctypes.c_int32, ctypes.POINTER(ctypes.c_char_p),
                                          ctypes.POINTER(i64), ctypes.POINTER(i64)]),
        "aotpack_model_output_shapes": (vp, [vp, ctypes.POINTER(ShapeC), sz,
                                             ctypes.POINTER(ShapeC), sz]),
        "aotpack_session_create": (vp, [vp, ctypes.POINTER(SessionOptionsC), ctypes.POINTER(vp)]),
        "aotpack_session_run": (vp, [vp, ctypes.POINTER(u64), ctypes.POINTER(u64), vp]),
        "aotpack_session_run_shaped": (vp, [vp, ctypes.POINTER(u64), ctypes.POINTER(ShapeC),
                                            ctypes.POINTER(u64), vp]),
        "aotpack_session_execute": (vp, [vp, ctypes.POINTER(u64), sz, ctypes.POINTER(ShapeC),
                                         ctypes.POINTER(u64), sz, ctypes.POINTER(ShapeC), vp]),
        "aotpack_session_free": (None, [vp]),
        "aotpack_model_num_states": (sz, [vp]),
        "aotpack_model_state_info": (vp, [vp, sz, ctypes.POINTER(TensorInfoC)]),
        "aotpack_model_state_bytes": (u64, [vp]),
        "aotpack_model_generation_info": (vp, [vp, ctypes.POINTER(GenerationInfoC)]),
        "aotpack_session_reset_state": (vp, [vp, vp]),
        "aotpack_session_generate": (vp, [vp, ctypes.POINTER(ctypes.POINTER(i64)),
                                          ctypes.POINTER(sz), sz, sz,
                                          ctypes.POINTER(GenerateOptionsC), ctypes.POINTER(i64),
                                          ctypes.POINTER(sz), ctypes.POINTER(GenerateStatsC),
                                          vp]),
    }
    for name, (res, args) in sigs.items():
        if name in _SINCE_V2 | _SINCE_0_2 | _SINCE_GENERATION and not hasattr(lib, name):
            continue  # an older library: has_dynamic_shapes() / has_execute() say so
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args


# Entry points added with bundle format v2 (dims that vary at run time). A libaotpack.so built
# before them still loads: static bundles run as before, and v2 calls raise a clear error.
_SINCE_V2 = frozenset({"aotpack_model_num_symbols", "aotpack_model_symbol_info",
                       "aotpack_model_input_dim", "aotpack_model_output_dim",
                       "aotpack_model_output_shapes", "aotpack_session_run_shaped"})


# Entry points of release 0.2 (run with counts, pointer checks, zero = default options).
_SINCE_0_2 = frozenset({"aotpack_session_execute"})


# Entry points of state buffers and text generation (docs/generation.md).
_SINCE_GENERATION = frozenset({"aotpack_model_num_states", "aotpack_model_state_info",
                               "aotpack_model_state_bytes", "aotpack_model_generation_info",
                               "aotpack_session_reset_state", "aotpack_session_generate"})


def has_generation(lib: ctypes.CDLL) -> bool:
    """Whether `lib` has the state and text-generation entry points."""
    return all(hasattr(lib, name) for name in _SINCE_GENERATION)


def has_execute(lib: ctypes.CDLL) -> bool:
    """Whether `lib` has aotpack_session_execute (and the 0.2 session options layout)."""
    return hasattr(lib, "aotpack_session_execute")


def has_dynamic_shapes(lib: ctypes.CDLL) -> bool:
    """Whether `lib` has the v2 (dynamic shape) entry points."""
    return all(hasattr(lib, name) for name in _SINCE_V2)


def load_library() -> ctypes.CDLL:
    """Loads libaotpack.so once per process (it does not load the CUDA driver by itself)."""
    global _lib
    with _lock:
        if _lib is None:
            lib = ctypes.CDLL(str(library_path()))
            _declare(lib)
            _lib = lib
        return _lib
