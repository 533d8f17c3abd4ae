// checksum.hpp — the weights' fast checksum ("checksum" in the manifest, docs/manifest.md
// "Verification"): 64 bits over every byte, computed in parallel pieces at memory speed.
//
//   words w[i], i = 0 .. ceil(n / 8) - 1: the bytes read as little-endian uint64 (the last one
//   zero-padded); mix(x) = x ^= x >> 31, x *= 0xBF58476D1CE4E5B9, x ^= x >> 29 (a bijection);
//   sum = Σ mix(w[i] + (i + 1) * 0x9E3779B97F4A7C15) mod 2^64; checksum = mix(sum ^ n),
//   written as 16 lower-case hex digits.
//
// The sum makes any split of the bytes into pieces hashable independently; the index term
// makes it depend on where each word is; mix being a bijection makes any single changed word
// change the sum. Not cryptographic: full verification (sha256) is for forged weights.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace aotpack {

// Hex checksum of each (data, size) range, each split into pieces over up to `max_threads`
// threads.
std::vector<std::string> checksum64_hex_parallel(
    const std::vector<std::pair<const void*, size_t>>& ranges, unsigned max_threads = 16);

// Hex checksum of one range (single-threaded).
std::string checksum64_hex(const void* data, size_t size);

// The sum's share of the words first_word, first_word + 1, ... held by `size` bytes at `data`
// (the last word zero-padded when size % 8 != 0, which only a range's last piece may be):
// a load adds the shares of every piece of a weight as it reads them (mod 2^64, any order),
// then checksum64_finish_hex(total, weight size) is its checksum.
uint64_t checksum64_partial(const void* data, size_t size, uint64_t first_word);
std::string checksum64_finish_hex(uint64_t sum, uint64_t size);

}  // namespace aotpack
