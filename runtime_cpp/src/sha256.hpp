// sha256.hpp — SHA-256 (FIPS 180-4), used to verify cubins and weights at load time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace aotpack {

// Incremental hasher: update() any number of times, then hex_digest() once.
class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t size);
  // Lower-case hex of the digest (64 chars). Finalizes: do not update() afterwards.
  std::string hex_digest();

 private:
  void compress(const uint8_t* block);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t buf_len_ = 0;
  uint64_t total_ = 0;
};

// Whether this CPU's SHA instructions (x86-64 SHA-NI) do the hashing (else portable C++).
bool sha256_uses_cpu_instructions();

// One-shot helper: hex SHA-256 of `size` bytes at `data`.
std::string sha256_hex(const void* data, size_t size);

// Hex SHA-256 of each (data, size) range, computed on up to `max_threads` threads (one range
// per task, largest first). Load time of big models is dominated by hashing their weights
// (~200 MB/s per core), so this spreads it over the host's cores.
std::vector<std::string> sha256_hex_parallel(
    const std::vector<std::pair<const void*, size_t>>& ranges, unsigned max_threads = 16);

}  // namespace aotpack
