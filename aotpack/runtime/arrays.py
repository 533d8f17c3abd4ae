"""What Session.run accepts as a tensor, reduced to what the C API takes (a device pointer and a
shape) after the checks the C API cannot make (dtype, device, contiguity, writability).

Accepted: torch tensors; objects with `__cuda_array_interface__` (CuPy, Numba; read as a dict,
nothing imported); objects with `__dlpack__` / `__dlpack_device__` (JAX, ...), wrapped as torch
tensors by torch.utils.dlpack. Every check reads only what `key_of` puts in an array's key, so a
Session may skip the checks for a key it has checked before (the per-call fast path).
Importing this module imports no torch; the functions that need it take it as an argument.
"""
from __future__ import annotations

import ctypes
import sys
from typing import Sequence

from aotpack.runtime._lib import ShapeC
from aotpack.runtime.errors import AotpackError, StatusCode

# DLPack device types (dlpack.h DLDeviceType) that can hold a tensor of a run
DL_CPU, DL_CUDA, DL_CUDA_HOST, DL_CUDA_MANAGED = 1, 2, 3, 13
_DL_NAMES = {DL_CPU: "cpu", DL_CUDA: "cuda", DL_CUDA_HOST: "cuda pinned host memory",
             DL_CUDA_MANAGED: "cuda managed memory"}

# manifest dtype -> __cuda_array_interface__ typestr without its byte-order character; bf16 and
# f8e4m3 have none (numpy has no such type): such tensors come as torch tensors or by DLPack
_TYPESTRS = {"f16": "f2", "f32": "f4", "f64": "f8", "i8": "i1", "i16": "i2", "i32": "i4",
             "i64": "i8", "u8": "u1", "bool": "b1"}
_NATIVE = "<" if sys.byteorder == "little" else ">"


def invalid(message: str) -> AotpackError:
    return AotpackError(StatusCode.INVALID_ARGUMENT, message)


def c_shapes(shapes: Sequence[Sequence[int]], what: str):
    """aotpack_shape[len(shapes)] (at least one element, so the pointer is never NULL)."""
    arr = (ShapeC * max(len(shapes), 1))()
    for i, shape in enumerate(shapes):
        dims = [int(d) for d in shape]
        if len(dims) > len(arr[i].dims):
            raise invalid(f"{what} {i} has rank {len(dims)}, more than the runtime's "
                          f"{len(arr[i].dims)}")
        arr[i].rank = len(dims)
        for k, d in enumerate(dims):
            arr[i].dims[k] = d
    return arr


class CudaArray:
    """An object's __cuda_array_interface__ (versions 0-3), read once per run.

    Device: the interface has no field for it; the runtime's pointer check (the first run of a
    pointer set, Session(check_pointers=True)) refuses memory of another device."""

    __slots__ = ("obj", "ptr", "shape", "typestr", "strides", "readonly", "masked", "stream",
                 "key")

    def __init__(self, obj, cai: dict):
        self.obj = obj
        self.ptr, self.readonly = int(cai["data"][0]), bool(cai["data"][1])
        self.shape = tuple(int(d) for d in cai["shape"])
        self.typestr = cai["typestr"]
        strides = cai.get("strides")
        self.strides = None if strides is None else tuple(int(s) for s in strides)
        self.masked = cai.get("mask") is not None
        self.stream = cai.get("stream")  # a stream to wait for before reading (version 3)
        self.key = ("cai", self.ptr, self.shape, self.typestr, self.strides, self.readonly,
                    self.masked)

    def data_ptr(self) -> int:
        return self.ptr

    def is_contiguous(self) -> bool:
        """C order: strides absent, or equal to the packed ones where a dim has > 1 element."""
        if self.strides is None or 0 in self.shape:
            return True
        step = int(self.typestr[2:])
        for dim, stride in zip(reversed(self.shape), reversed(self.strides)):
            if dim != 1 and stride != step:
                return False
            step *= dim
        return True


def key_of(a) -> tuple:
    """Everything the checks of `a` read (a torch tensor or a CudaArray): equal keys, equal
    verdicts. A torch tensor's shape and pointer can change in place (resize_, set_), its
    dtype and device by `.data =`, so all are read on every call. The device as is_cuda and
    its index (get_device): a torch.device object costs ~0.4 us more to make and hash."""
    if type(a) is CudaArray:
        return a.key
    return (a.data_ptr(), a.shape, a.dtype, a.is_cuda, a.get_device(), a.is_contiguous())


def as_array(torch, x, where: str, device, stream: int):
    """`x` as a torch tensor or a CudaArray. DLPack objects are checked for `device` first
    and exported for `stream` (the producer orders its pending work before it)."""
    if isinstance(x, torch.Tensor):
        return x
    cai = getattr(x, "__cuda_array_interface__", None)
    if cai is not None:
        return CudaArray(x, cai)
    if hasattr(x, "__dlpack__") and hasattr(x, "__dlpack_device__"):
        return _from_dlpack(torch, x, where, device, stream)
    raise invalid(f"{where} must be a torch tensor, a DLPack object or an object with "
                  f"__cuda_array_interface__, got {type(x).__name__}")


def _from_dlpack(torch, x, where: str, device, stream: int):
    dev_type, dev_id = (int(v) for v in x.__dlpack_device__())
    want = (DL_CUDA if device.type == "cuda" else DL_CPU, device.index or 0)
    ok = (dev_type, dev_id) == want or (dev_type == DL_CUDA_MANAGED and want[0] == DL_CUDA
                                        and dev_id == want[1])
    if not ok:
        name = _DL_NAMES.get(dev_type, f"DLPack device type {dev_type}")
        raise invalid(f"{where} is on {name}:{dev_id} (its __dlpack_device__), the model runs "
                      f"on {device}")
    # the consumer's stream per the DLPack protocol: 1 is the legacy default stream (0 is
    # refused as ambiguous); a CPU producer takes None
    capsule = x.__dlpack__(stream=(stream or 1) if want[0] == DL_CUDA else None)
    return torch.utils.dlpack.from_dlpack(capsule)


def check(a, info, where: str, torch, device, shape, output: bool) -> None:
    """Raises INVALID_ARGUMENT unless `a` (as_array's) has the dtype of `info` (a TensorInfo),
    is on `device`, C-contiguous, of `shape` (None: the runtime checks it) and, for an output,
    writable."""
    if type(a) is CudaArray:
        _check_cai(a, info, where, output)
    else:
        if a.device != device:
            raise invalid(f"{where} is on {a.device}, the model runs on {device}")
        from aotpack.dtypes import DType

        want = DType(info.dtype).to_torch()
        if a.dtype != want:
            raise invalid(f"{where} has dtype {a.dtype}, expected {want}")
    if shape is not None and tuple(a.shape) != tuple(shape):
        raise invalid(f"{where} has shape {tuple(a.shape)}, expected {tuple(shape)}")
    if not a.is_contiguous():
        raise invalid(f"{where} must be contiguous (C order, no gaps: copy it first)")


def _check_cai(a: CudaArray, info, where: str, output: bool) -> None:
    want = _TYPESTRS.get(info.dtype)
    if want is None:
        raise invalid(f"{where} is {info.dtype}, which __cuda_array_interface__ cannot "
                      f"describe: pass a torch tensor or a DLPack object")
    order, code = a.typestr[:1], a.typestr[1:]
    if code != want or order not in (_NATIVE, "|", "="):
        raise invalid(f"{where} has typestr {a.typestr!r}, expected {_NATIVE}{want} "
                      f"({info.dtype})")
    if a.masked:
        raise invalid(f"{where} has a mask: masked arrays are not supported")
    if output and a.readonly:
        raise invalid(f"{where} is read-only (its __cuda_array_interface__ says so)")


def wait_for_producers(torch, arrays, stream: int, device) -> None:
    """__cuda_array_interface__ version 3: the consumer's `stream` waits for the stream each
    array names (events, no host wait). 0 and 1 both mean the legacy default stream."""
    mine = stream or 1
    for a in arrays:
        theirs = a.stream if type(a) is CudaArray else None
        if theirs is None or (int(theirs) or 1) == mine:
            continue
        event = torch.cuda.Event()
        event.record(_torch_stream(torch, int(theirs), device))
        _torch_stream(torch, mine, device).wait_event(event)


def _torch_stream(torch, handle: int, device):
    """A torch stream object for a CUstream of `device` (the model's: torch would take its
    current device): the legacy default stream (0 or 1, which torch.cuda.ExternalStream
    refuses: 'invalid StreamId') is torch's default stream of that device."""
    if handle in (0, 1):
        return torch.cuda.default_stream(device)
    return torch.cuda.ExternalStream(handle, device=device)


def stream_handle(torch, stream, device_index: int) -> int:
    """A CUstream as an int: None is torch's current stream of the device; an int is used as
    is; else a torch.cuda.Stream (.cuda_stream) or a cupy.cuda.Stream (.ptr)."""
    if stream is None:
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # no Stream object made
        if raw is not None:
            return raw(device_index)
        return torch.cuda.current_stream(device_index).cuda_stream
    if isinstance(stream, int):
        return stream
    for attr in ("cuda_stream", "ptr"):
        value = getattr(stream, attr, None)
        if isinstance(value, int):
            return value
    raise invalid(f"stream must be None, an int (CUstream), a torch.cuda.Stream or a "
                  f"cupy.cuda.Stream, got {type(stream).__name__}")


def c_pointers(arrays) -> ctypes.Array:
    """uint64_t[len(arrays)] of their data pointers (at least one element)."""
    return (ctypes.c_uint64 * max(len(arrays), 1))(*[a.data_ptr() for a in arrays])
