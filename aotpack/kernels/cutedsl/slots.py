"""Bytes of the value slots CuTeDSL kernels take (host-side mirror of what the runtime packs).

- `FastDivmodSlot(divisor)` (aotpack.kernels.spec): CuTe's `fast_divmod_divisor<32>`,
  12 bytes, align 4: u32 divisor | u32 multiplier | u8 shift1 | u8 shift2 | 2 zero bytes, with
  l = ceil(log2(divisor)), multiplier = floor(2^32 * (2^l - divisor) / divisor) + 1,
  shift1 = min(l, 1), shift2 = max(l - 1, 0); the kernel computes
  q = (umulhi(n, multiplier) + ((n - umulhi(n, multiplier)) >> shift1)) >> shift2.
  (Measured against CuTeDSL 4.8.1's host code, see tests/test_cutedsl_gemm.py; CuTe leaves the
  padding uninitialised, we write zeros.) The C++ runtime computes the same fields from the
  divisor at load time (runtime_cpp/src/manifest.cpp, fastdivmod_fields).
- A CuTe TMA coordinate tensor's shape {i32 a, i32 b} (8 bytes, align 4) is passed as one
  `u64` slot, a | b << 32 (`i32_pair`): same bytes, no aggregate slot kind needed.
"""
from __future__ import annotations

import struct

from aotpack.ir.sym import bounds
from aotpack.kernels.spec import FastDivmodSlot, IntSlot

_FMT = {"i32": "<i", "u32": "<I", "i64": "<q", "u64": "<Q"}


def fastdivmod(divisor: int) -> tuple[int, int, int, int]:
    """(divisor, multiplier, shift1, shift2) as CuTe's create_divisor computes them."""
    if not 1 <= divisor < 2**31:
        raise ValueError(f"fastdivmod divisor out of range: {divisor}")
    l = (divisor - 1).bit_length()  # ceil(log2(divisor))
    mult = (2**32 * (2**l - divisor)) // divisor + 1
    return divisor, mult & 0xFFFFFFFF, min(l, 1), max(l - 1, 0)


def i32_pair(a, b) -> IntSlot:
    """A by-value struct {i32 a, i32 b} as the u64 with the same little-endian bytes
    (a + b * 2^32: an expression when a size is symbolic)."""
    for v in (a, b):
        lo, hi = bounds(v)
        if not (0 <= lo and hi < 2**31):
            raise ValueError(f"struct field out of range: {v}")
    return IntSlot("u64", a + b * (1 << 32))


def pack(slot) -> bytes:
    """Parameter bytes of a value slot (integers, fastdivmod)."""
    if isinstance(slot, IntSlot):
        return struct.pack(_FMT[slot.kind], slot.value)
    if isinstance(slot, FastDivmodSlot):
        d, m, s1, s2 = fastdivmod(slot.divisor)
        return struct.pack("<IIBBxx", d, m, s1, s2)
    raise TypeError(f"not a value slot: {slot!r}")
