// host_tensor.hpp — host-side helpers of aotpack-run: deterministic random inputs of any
// dtype (normal-ish floats, small non-zero integers) and conversion to double for summaries.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "aotpack/aotpack.h"

namespace aotpack_run {

// xorshift64*: deterministic, seedable, good enough for test inputs.
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed ? seed : 0x9E3779B97F4A7C15ull) {}
  uint64_t next() {
    s_ ^= s_ >> 12; s_ ^= s_ << 25; s_ ^= s_ >> 27;
    return s_ * 0x2545F4914F6CDD1Dull;
  }
  double uniform() { return double(next() >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1)
  double normal() {  // Box-Muller
    double u1 = uniform(), u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  uint64_t s_;
};

inline uint32_t float_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float bits_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

// float → bfloat16, round to nearest even (NaN kept quiet).
inline uint16_t to_bf16(float f) {
  uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40);
  x += 0x7fffu + ((x >> 16) & 1u);
  return uint16_t(x >> 16);
}

// float → IEEE half, round to nearest even, with subnormals and overflow to inf.
inline uint16_t to_f16(float f) {
  uint32_t x = float_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t(sign | 0x7e00u);
  int32_t exp = int32_t((x >> 23) & 0xff) - 127 + 15;
  uint32_t mant = x & 0x7fffffu;
  if (exp >= 31) return uint16_t(sign | 0x7c00u);
  if (exp <= 0) {
    if (exp < -10) return uint16_t(sign);
    mant |= 0x800000u;
    uint32_t shift = uint32_t(14 - exp);
    uint32_t h = mant >> shift, rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1))) ++h;
    return uint16_t(sign | h);
  }
  uint32_t h = (uint32_t(exp) << 10) | (mant >> 13), rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) ++h;  // a carry rolls into the exponent
  return uint16_t(sign | h);
}

inline float from_f16(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  if (exp == 0) return (sign ? -1.0f : 1.0f) * std::ldexp(float(mant), -24);
  if (exp == 31) return bits_float(sign | 0x7f800000u | (mant << 13));
  return bits_float(sign | ((exp + 112) << 23) | (mant << 13));
}

// Fills `out` (nbytes of dtype) with random values: floats ~ N(0, 1), integers in 1..16,
// bools 0/1. Never all zeros: zero inputs hide most kernel bugs.
inline void fill_random(aotpack_dtype dt, std::vector<uint8_t>& out, Rng& rng) {
  uint8_t* p = out.data();
  size_t n = out.size();
  auto small_int = [&] { return int64_t(1 + rng.next() % 16); };
  switch (dt) {
    case AOTPACK_DTYPE_BF16:
      for (size_t i = 0; i + 2 <= n; i += 2) { uint16_t v = to_bf16(float(rng.normal())); std::memcpy(p + i, &v, 2); }
      break;
    case AOTPACK_DTYPE_F16:
      for (size_t i = 0; i + 2 <= n; i += 2) { uint16_t v = to_f16(float(rng.normal())); std::memcpy(p + i, &v, 2); }
      break;
    case AOTPACK_DTYPE_F32:
      for (size_t i = 0; i + 4 <= n; i += 4) { float v = float(rng.normal()); std::memcpy(p + i, &v, 4); }
      break;
    case AOTPACK_DTYPE_F64:
      for (size_t i = 0; i + 8 <= n; i += 8) { double v = rng.normal(); std::memcpy(p + i, &v, 8); }
      break;
    case AOTPACK_DTYPE_I16:
      for (size_t i = 0; i + 2 <= n; i += 2) { int16_t v = int16_t(small_int()); std::memcpy(p + i, &v, 2); }
      break;
    case AOTPACK_DTYPE_I32:
      for (size_t i = 0; i + 4 <= n; i += 4) { int32_t v = int32_t(small_int()); std::memcpy(p + i, &v, 4); }
      break;
    case AOTPACK_DTYPE_I64:
      for (size_t i = 0; i + 8 <= n; i += 8) { int64_t v = small_int(); std::memcpy(p + i, &v, 8); }
      break;
    case AOTPACK_DTYPE_BOOL:
      for (size_t i = 0; i < n; ++i) p[i] = uint8_t(rng.next() & 1);
      break;
    default:  // i8, u8
      for (size_t i = 0; i < n; ++i) p[i] = uint8_t(small_int());
      break;
  }
}

// An e4m3 byte (torch.float8_e4m3fn: bias 7, no infinities, 0x7F / 0xFF are NaN) as double.
inline double from_e4m3(uint8_t b) {
  const int exp = (b >> 3) & 0xF, man = b & 7;
  const double sign = (b & 0x80) ? -1.0 : 1.0;
  if (exp == 0xF && man == 7) return std::nan("");
  if (exp == 0) return sign * std::ldexp(man / 8.0, -6);  // subnormal
  return sign * std::ldexp(1.0 + man / 8.0, exp - 7);
}

// Element i of a host buffer as double (for output summaries).
inline double element(aotpack_dtype dt, const uint8_t* p, size_t i) {
  switch (dt) {
    case AOTPACK_DTYPE_BF16: { uint16_t v; std::memcpy(&v, p + 2 * i, 2); return bits_float(uint32_t(v) << 16); }
    case AOTPACK_DTYPE_F16: { uint16_t v; std::memcpy(&v, p + 2 * i, 2); return from_f16(v); }
    case AOTPACK_DTYPE_F32: { float v; std::memcpy(&v, p + 4 * i, 4); return v; }
    case AOTPACK_DTYPE_F64: { double v; std::memcpy(&v, p + 8 * i, 8); return v; }
    case AOTPACK_DTYPE_I16: { int16_t v; std::memcpy(&v, p + 2 * i, 2); return v; }
    case AOTPACK_DTYPE_I32: { int32_t v; std::memcpy(&v, p + 4 * i, 4); return v; }
    case AOTPACK_DTYPE_I64: { int64_t v; std::memcpy(&v, p + 8 * i, 8); return double(v); }
    case AOTPACK_DTYPE_I8: return double(int8_t(p[i]));
    case AOTPACK_DTYPE_F8E4M3: return from_e4m3(p[i]);
    default: return p[i];
  }
}

}  // namespace aotpack_run
