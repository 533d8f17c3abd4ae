"""The few CUDA driver calls the binding's cold-start process needs, through ctypes: that process
must not import torch (it measures what an application that embeds libaotpack pays), so device
buffers, copies and cuMemGetInfo come straight from libcuda.so.1.

The primary context of the device is made current here first, so the runtime (which retains the
same primary context) and these calls share it, and cuMemGetInfo's baseline excludes the
context itself.
"""
from __future__ import annotations

import ctypes
import os


class CudaError(RuntimeError):
    pass


class Driver:
    def __init__(self, device: int = 0):
        self.lib = ctypes.CDLL("libcuda.so.1")
        self._check(self.lib.cuInit(0), "cuInit")
        dev = ctypes.c_int()
        self._check(self.lib.cuDeviceGet(ctypes.byref(dev), device), "cuDeviceGet")
        self.ctx = ctypes.c_void_p()
        self._check(self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(self.ctx), dev),
                    "cuDevicePrimaryCtxRetain")
        self._check(self.lib.cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")

    def _check(self, rc: int, what: str) -> None:
        if rc != 0:
            name = ctypes.c_char_p()
            self.lib.cuGetErrorName(rc, ctypes.byref(name))
            raise CudaError(f"{what} failed: {rc} {name.value.decode() if name.value else ''}")

    def mem_free(self) -> int:
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        self._check(self.lib.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)),
                    "cuMemGetInfo")
        return free.value

    def alloc(self, nbytes: int) -> int:
        p = ctypes.c_uint64()
        self._check(self.lib.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(max(nbytes, 1))),
                    "cuMemAlloc")
        return p.value

    def upload(self, ptr: int, data: bytes) -> None:
        rc = self.lib.cuMemcpyHtoD_v2(ctypes.c_uint64(ptr), data, ctypes.c_size_t(len(data)))
        self._check(rc, "cuMemcpyHtoD")

    def download(self, ptr: int, nbytes: int) -> bytes:
        buf = ctypes.create_string_buffer(nbytes)
        self._check(self.lib.cuMemcpyDtoH_v2(buf, ctypes.c_uint64(ptr), ctypes.c_size_t(nbytes)),
                    "cuMemcpyDtoH")
        return buf.raw

    def synchronize(self) -> None:
        self._check(self.lib.cuCtxSynchronize(), "cuCtxSynchronize")


# Masks that clear the top exponent bit of each element's high byte: random bytes become finite
# values of magnitude < 2 (no NaN/Inf), made at C speed with bytes.translate.
_HIGH_BYTE = {"bf16": (2, 1), "f16": (2, 1), "f32": (4, 3)}
_CLEAR_BIT6 = bytes(b & 0xBF for b in range(256))


def finite_random_bytes(dtype: str, nbytes: int) -> bytes:
    """Random input bytes for a tensor of manifest dtype `dtype` (bf16/f16/f32 finite values;
    other dtypes: zeros, which is safe for integer ids)."""
    if dtype not in _HIGH_BYTE:
        return bytes(nbytes)
    size, hi = _HIGH_BYTE[dtype]
    data = bytearray(os.urandom(nbytes))
    data[hi::size] = bytes(data[hi::size]).translate(_CLEAR_BIT6)
    return bytes(data)
