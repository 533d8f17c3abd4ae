// sha256.cpp — SHA-256 (FIPS 180-4): portable C++ (~200 MB/s per core) and, on x86-64 CPUs
// with the SHA extensions (cpuid), the SHA-NI instructions (several times faster): `--verify
// full` hashes every weight byte, and the largest weight bounds a load.
#include "sha256.hpp"

#include <algorithm>
#include <cstring>
#include <numeric>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#define AOTPACK_SHA_NI 1
#endif

#include "parallel.hpp"

namespace aotpack {

namespace {

const uint32_t kK[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
    0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
    0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
    0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
    0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
    0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
    0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
    0xc67178f2};

inline uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

// Compresses `n` consecutive 64-byte blocks at `p` into the state `h`.
void compress_portable(uint32_t* h_, const uint8_t* p, size_t n) {
  for (; n > 0; --n, p += 64) {
    uint32_t w[64];
    for (int i = 0; i < 16; ++i)
      w[i] = uint32_t(p[4 * i]) << 24 | uint32_t(p[4 * i + 1]) << 16 |
             uint32_t(p[4 * i + 2]) << 8 | uint32_t(p[4 * i + 3]);
    for (int i = 16; i < 64; ++i) {
      uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h_[0], b = h_[1], c = h_[2], d = h_[3], e = h_[4], f = h_[5], g = h_[6],
             h = h_[7];
    for (int i = 0; i < 64; ++i) {
      uint32_t S1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
      uint32_t ch = (e & f) ^ (~e & g);
      uint32_t t1 = h + S1 + ch + kK[i] + w[i];
      uint32_t S0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
      uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
      uint32_t t2 = S0 + maj;
      h = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
    }
    h_[0] += a; h_[1] += b; h_[2] += c; h_[3] += d;
    h_[4] += e; h_[5] += f; h_[6] += g; h_[7] += h;
  }
}

#ifdef AOTPACK_SHA_NI
// The same with SHA-NI. The instructions keep the state as (A, B, E, F) and (C, D, G, H) and
// take 4 message words per 4 rounds: group g = W[4g .. 4g+3]; sha256msg1/msg2 extend the
// schedule, one group ahead of the rounds that consume it (see the comments inside).
__attribute__((target("sha,sse4.1,ssse3")))
void compress_shani(uint32_t* h, const uint8_t* p, size_t n) {
  const __m128i swap = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
  __m128i tmp = _mm_shuffle_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h)), 0xB1);
  __m128i cdgh = _mm_shuffle_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + 4)),
                                   0x1B);
  __m128i abef = _mm_alignr_epi8(tmp, cdgh, 8);
  cdgh = _mm_blend_epi16(cdgh, tmp, 0xF0);
  for (; n > 0; --n, p += 64) {
    const __m128i abef_in = abef, cdgh_in = cdgh;
    __m128i w[4];  // w[g % 4]: group g (or, ahead of time, msg1's half of it)
    for (int g = 0; g < 4; ++g)
      w[g] = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * g)),
                              swap);
    for (int g = 0; g < 16; ++g) {
      __m128i m = _mm_add_epi32(w[g % 4], _mm_loadu_si128(
                                              reinterpret_cast<const __m128i*>(kK + 4 * g)));
      cdgh = _mm_sha256rnds2_epu32(cdgh, abef, m);
      if (g >= 3 && g < 15) {  // group g+1 = msg2(msg1 part + W[4g-3 .. 4g], group g)
        __m128i& next = w[(g + 1) % 4];
        next = _mm_add_epi32(next, _mm_alignr_epi8(w[g % 4], w[(g + 3) % 4], 4));
        next = _mm_sha256msg2_epu32(next, w[g % 4]);
      }
      abef = _mm_sha256rnds2_epu32(abef, cdgh, _mm_shuffle_epi32(m, 0x0E));
      if (g >= 1 && g < 13)  // msg1's half of group g+3, from groups g-1 and g
        w[(g + 3) % 4] = _mm_sha256msg1_epu32(w[(g + 3) % 4], w[g % 4]);
    }
    abef = _mm_add_epi32(abef, abef_in);
    cdgh = _mm_add_epi32(cdgh, cdgh_in);
  }
  tmp = _mm_shuffle_epi32(abef, 0x1B);
  cdgh = _mm_shuffle_epi32(cdgh, 0xB1);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(h), _mm_blend_epi16(tmp, cdgh, 0xF0));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(h + 4), _mm_alignr_epi8(cdgh, tmp, 8));
}

bool cpu_has_sha_ni() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_SSE4_1) || !(c & bit_SSSE3)) return false;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  return (b & (1u << 29)) != 0;  // CPUID.(EAX=7, ECX=0):EBX.SHA[bit 29]
}
#endif

using CompressFn = void (*)(uint32_t*, const uint8_t*, size_t);

CompressFn pick_compress() {
#ifdef AOTPACK_SHA_NI
  if (cpu_has_sha_ni()) return compress_shani;
#endif
  return compress_portable;
}

const CompressFn kCompress = pick_compress();

}  // namespace

bool sha256_uses_cpu_instructions() { return kCompress != compress_portable; }

Sha256::Sha256() {
  const uint32_t init[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                            0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  std::memcpy(h_, init, sizeof(h_));
}

void Sha256::compress(const uint8_t* p) { kCompress(h_, p, 1); }

void Sha256::update(const void* data, size_t size) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  total_ += size;
  if (buf_len_ > 0) {  // top up a partial block first
    size_t take = 64 - buf_len_ < size ? 64 - buf_len_ : size;
    std::memcpy(buf_ + buf_len_, p, take);
    buf_len_ += take; p += take; size -= take;
    if (buf_len_ == 64) { compress(buf_); buf_len_ = 0; }
  }
  if (size >= 64) {
    kCompress(h_, p, size / 64);
    p += size / 64 * 64;
    size %= 64;
  }
  if (size > 0) { std::memcpy(buf_, p, size); buf_len_ = size; }
}

std::string Sha256::hex_digest() {
  uint64_t bits = total_ * 8;
  uint8_t pad = 0x80;
  update(&pad, 1);
  uint8_t zero = 0;
  while (buf_len_ != 56) update(&zero, 1);
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = uint8_t(bits >> (56 - 8 * i));
  update(len, 8);
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (uint32_t v : h_)
    for (int s = 28; s >= 0; s -= 4) out += hex[(v >> s) & 15];
  return out;
}

std::string sha256_hex(const void* data, size_t size) {
  Sha256 h;
  h.update(data, size);
  return h.hex_digest();
}

std::vector<std::string> sha256_hex_parallel(
    const std::vector<std::pair<const void*, size_t>>& ranges, unsigned max_threads) {
  std::vector<std::string> out(ranges.size());
  std::vector<size_t> order(ranges.size());  // largest first: the longest task starts first
  std::iota(order.begin(), order.end(), size_t(0));
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return ranges[a].second > ranges[b].second; });
  uint64_t total = 0;
  for (const auto& r : ranges) total += r.second;
  // small models: starting threads costs more than it saves
  parallel_for(order.size(), total < (64u << 20) ? 1 : max_threads, [&](size_t k) {
    out[order[k]] = sha256_hex(ranges[order[k]].first, ranges[order[k]].second);
  });
  return out;
}

}  // namespace aotpack
