// checksum.cpp — the weights' fast checksum (definition in checksum.hpp).
#include "checksum.hpp"

#include <cstdio>
#include <cstring>

#include "parallel.hpp"

namespace aotpack {

namespace {
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the checksum reads little-endian words");

constexpr uint64_t kStep = 0x9E3779B97F4A7C15ull;
constexpr uint64_t kMul = 0xBF58476D1CE4E5B9ull;
constexpr uint64_t kPieceBytes = 16ull << 20;  // a task: small enough to balance 16 threads

inline uint64_t mix(uint64_t x) {
  x ^= x >> 31;
  x *= kMul;
  return x ^ (x >> 29);
}

// Σ mix(w[i] + (first + i + 1) * kStep) over the words of `size` bytes at `p` (the last word
// zero-padded): the part of the sum that the words first, first+1, ... of a range contribute.
uint64_t partial_sum(const uint8_t* p, uint64_t size, uint64_t first) {
  const uint64_t words = size / 8;
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;  // four chains: the multiplies overlap
  uint64_t k = (first + 1) * kStep;
  uint64_t i = 0;
  for (; i + 4 <= words; i += 4, k += 4 * kStep) {
    uint64_t w[4];
    std::memcpy(w, p + 8 * i, 32);
    s0 += mix(w[0] + k);
    s1 += mix(w[1] + k + kStep);
    s2 += mix(w[2] + k + 2 * kStep);
    s3 += mix(w[3] + k + 3 * kStep);
  }
  for (; i < words; ++i, k += kStep) {
    uint64_t w;
    std::memcpy(&w, p + 8 * i, 8);
    s0 += mix(w + k);
  }
  if (size % 8) {
    uint64_t w = 0;
    std::memcpy(&w, p + 8 * words, size % 8);
    s0 += mix(w + k);
  }
  return s0 + s1 + s2 + s3;
}

std::string hex(uint64_t sum, uint64_t size) {
  char out[17];
  std::snprintf(out, sizeof(out), "%016llx", static_cast<unsigned long long>(mix(sum ^ size)));
  return out;
}
}  // namespace

uint64_t checksum64_partial(const void* data, size_t size, uint64_t first_word) {
  return partial_sum(static_cast<const uint8_t*>(data), size, first_word);
}

std::string checksum64_finish_hex(uint64_t sum, uint64_t size) { return hex(sum, size); }

std::string checksum64_hex(const void* data, size_t size) {
  return hex(partial_sum(static_cast<const uint8_t*>(data), size, 0), size);
}

std::vector<std::string> checksum64_hex_parallel(
    const std::vector<std::pair<const void*, size_t>>& ranges, unsigned max_threads) {
  struct Piece {
    size_t range;
    uint64_t offset, size;
  };
  std::vector<Piece> pieces;
  for (size_t r = 0; r < ranges.size(); ++r)
    for (uint64_t off = 0; off < ranges[r].second; off += kPieceBytes)
      pieces.push_back({r, off, std::min<uint64_t>(kPieceBytes, ranges[r].second - off)});
  std::vector<uint64_t> sums(pieces.size());
  uint64_t total = 0;
  for (const auto& r : ranges) total += r.second;
  // small models: starting threads costs more than it saves
  parallel_for(pieces.size(), total < (64u << 20) ? 1 : max_threads, [&](size_t i) {
    const Piece& pc = pieces[i];
    const uint8_t* base = static_cast<const uint8_t*>(ranges[pc.range].first);
    sums[i] = partial_sum(base + pc.offset, pc.size, pc.offset / 8);
  });
  std::vector<uint64_t> per_range(ranges.size(), 0);
  for (size_t i = 0; i < pieces.size(); ++i) per_range[pieces[i].range] += sums[i];
  std::vector<std::string> out;
  for (size_t r = 0; r < ranges.size(); ++r) out.push_back(hex(per_range[r], ranges[r].second));
  return out;
}

}  // namespace aotpack
