"""Device helpers of the GEMMs' FP8 paths (docs/precision.md):
- `widen` (--precision fp8-weights): an f8e4m3 weight tile to the activations' dtype in
  registers, for a bf16/f16 wgmma;
- `row_scales`, `quantize_rows`, `dot_fp8` (--precision fp8): activations to e4m3 with a scale
  per row, for the FP8 wgmma (no widening: the weight goes from shared memory to the tensor
  cores as it was loaded).

To f16 the hardware converts two values per instruction. To bf16 sm_90 has no conversion:
Triton goes through f16 and then one scalar F2F per value, which held the decode GEMM to about
half the memory bandwidth on the H200 (measured 2026-12-02: Llama-3.2-1B's LM head 121 us in
FP8 against 131 us in bf16, for half the bytes). So the bits are moved instead: an e4m3 byte
(sign, 4 exponent bits, 3 mantissa bits) placed as a bf16's sign, low exponent and high
mantissa bits IS the value times 2^-120 (bias 7 against 127), exactly, e4m3 subnormals included
(they become bf16 subnormals); one bf16 multiply by 2^120 restores it. On the GPU that is inline
PTX over four values per register (2 byte permutes, 3 logic ops, 1 shift, 2 paired multiplies:
2 instructions per value); Triton's interpreter, which cannot run PTX, gets the same bits by
tensor arithmetic in f32 (its bf16 tensors are raw bits).
"""
from __future__ import annotations

import triton
import triton.language as tl

from aotpack.kernels.triton._interpret import in_interpreter_process

_INTERPRETED = tl.constexpr(in_interpreter_process())

# $0, $1: four bf16 (two per register); $2: four e4m3 bytes b3 b2 b1 b0.
# prmt 0x1404 -> [b1 0 b0 0]: each byte at the top of a 16-bit half; (x & 0x7F007F00) >> 4
# puts exponent and mantissa under the bf16 exponent's low bits; | (x & 0x80008000) keeps the
# sign; * 2^120 (0x7B80 in each half) rebiases.
_E4M3X4_TO_BF16X4 = tl.constexpr("""{
.reg .b32 lo, hi, m, s;
prmt.b32 lo, $2, 0, 0x1404;
prmt.b32 hi, $2, 0, 0x3424;
mov.b32 s, 0x7B807B80;
and.b32 m, lo, 0x7F007F00;
shr.b32 m, m, 4;
and.b32 lo, lo, 0x80008000;
or.b32 lo, lo, m;
mul.rn.bf16x2 $0, lo, s;
and.b32 m, hi, 0x7F007F00;
shr.b32 m, m, 4;
and.b32 hi, hi, 0x80008000;
or.b32 hi, hi, m;
mul.rn.bf16x2 $1, hi, s;
}""")


@triton.jit
def widen(w, like):
    """`w` in `like`'s dtype when it is an f8e4m3 tile (see the module doc); else `w`."""
    if w.dtype == tl.float8e4nv:
        if like.dtype == tl.bfloat16:
            if _INTERPRETED:
                u = w.to(tl.uint8, bitcast=True).to(tl.uint32)
                bits = ((u & 0x80) << 24) | ((u & 0x7F) << 20)
                w = (bits.to(tl.float32, bitcast=True) * 1.329227995784916e36).to(tl.bfloat16)
            else:
                w = tl.inline_asm_elementwise(_E4M3X4_TO_BF16X4, "=r,=r,r",
                                              [w.to(tl.uint8, bitcast=True)],
                                              dtype=tl.bfloat16, is_pure=True, pack=4)
        else:
            w = w.to(like.dtype)
    return w


@triton.jit
def row_scales(amax):
    """Dequantization scales of rows whose largest magnitude is `amax` (1 for a zero row)."""
    return tl.where(amax > 0, amax / 448.0, 1.0)


@triton.jit
def quantize_rows(a, inv):
    """Rows of `a` times `inv` (1 / their scale) in e4m3, rounded to nearest even. The row's
    largest value times 1 / (amax / 448) can round to just above 448: clamped there (the GPU's
    conversion saturates anyway; Triton's interpreter would not)."""
    x = tl.minimum(tl.maximum(a.to(tl.float32) * inv[:, None], -448.0), 448.0)
    if _INTERPRETED:  # its f32 -> e4m3 conversion does not round to nearest: done here, the
        return _round_e4m3(x)  # values stay f32 (dot_fp8 takes them so)
    return x.to(tl.float8e4nv)


@triton.jit
def _round_e4m3(x):
    """The e4m3 value nearest to x (|x| <= 448; ties to even), as f32: normal values keep 3
    mantissa bits (integer rounding of the f32 bits), subnormals are multiples of 2^-9
    (rounded by adding and removing 1.5 * 2^23 to x * 2^9)."""
    bits = x.to(tl.uint32, bitcast=True)
    normal = ((bits + 0x7FFFF + ((bits >> 20) & 1)) & 0xFFF00000).to(tl.float32, bitcast=True)
    sub = ((x * 512.0 + 12582912.0) - 12582912.0) / 512.0
    return tl.where(tl.abs(x) >= 0.015625, normal, sub)


@triton.jit
def dot_fp8(x, y, acc):
    """acc + x @ y on e4m3 tiles: the FP8 wgmma; the interpreter (whose dot reads raw bits of
    narrow floats) multiplies the same values in f32."""
    if _INTERPRETED:
        return tl.dot(x.to(tl.float32), y.to(tl.float32), acc)
    return tl.dot(x, y, acc)
