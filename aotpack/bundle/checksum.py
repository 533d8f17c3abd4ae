"""The weights' fast checksum, as the C runtime computes it (runtime_cpp/src/checksum.hpp,
docs/manifest.md "Verification"): 64 bits over every byte, recorded beside each weight's sha256
so a load can check every byte at memory speed (`aotpack_verify` FAST, the default).

    words w[i]: the bytes as little-endian uint64 (the last one zero-padded)
    mix(x):     x ^= x >> 31; x *= 0xBF58476D1CE4E5B9; x ^= x >> 29
    sum  = Σ mix(w[i] + (i + 1) * 0x9E3779B97F4A7C15)  mod 2^64
    checksum = mix(sum ^ nbytes), 16 lower-case hex digits
"""
from __future__ import annotations

import numpy as np

_STEP = 0x9E3779B97F4A7C15
_MUL = 0xBF58476D1CE4E5B9
_MASK = (1 << 64) - 1
_CHUNK_WORDS = 1 << 22  # 32 MiB of words per numpy pass: bounded temporaries


def _mix(x: int) -> int:
    x ^= x >> 31
    x = (x * _MUL) & _MASK
    return x ^ (x >> 29)


def _mix_words(w: np.ndarray) -> np.ndarray:
    w ^= w >> np.uint64(31)
    w *= np.uint64(_MUL)
    w ^= w >> np.uint64(29)
    return w


def checksum64(data) -> str:
    """The checksum of a bytes-like object (bytes, memoryview, a contiguous numpy array)."""
    raw = np.frombuffer(memoryview(data).cast("B"), dtype=np.uint8)
    n = raw.size
    words = n // 8
    total = 0
    with np.errstate(over="ignore"):
        for start in range(0, words, _CHUNK_WORDS):
            count = min(_CHUNK_WORDS, words - start)
            w = raw[8 * start:8 * (start + count)].view("<u8").astype(np.uint64)
            w += np.arange(start + 1, start + count + 1, dtype=np.uint64) * np.uint64(_STEP)
            total = (total + int(_mix_words(w).sum(dtype=np.uint64))) & _MASK
    if n % 8:
        last = int.from_bytes(raw[8 * words:].tobytes(), "little")
        total = (total + _mix((last + (words + 1) * _STEP) & _MASK)) & _MASK
    return f"{_mix(total ^ n):016x}"
