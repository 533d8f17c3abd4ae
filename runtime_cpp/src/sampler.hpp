// sampler.hpp — picking the next token from logits on the host (temperature, top-k, top-p),
// with a counter-based random source: the draw for (seed, sequence, step) is a pure function
// of those three numbers, so a generation is reproducible for a seed whatever ran before.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace aotpack {

struct SamplerParams {
  float temperature = 1.0f;  // > 0 (0 is greedy: the caller reads next_ids instead)
  int32_t top_k = 0;         // 0: every token; else the k most likely
  float top_p = 1.0f;        // (0, 1]: the smallest most-likely set whose mass reaches p
};

// A uniform double in [0, 1) from (seed, sequence, step): SplitMix64 rounds over the three.
double uniform01(uint64_t seed, uint64_t sequence, uint64_t step);

class Sampler {
 public:
  // The tokens that may be drawn and their probabilities (summing to 1), most likely first
  // (ties: lower id first): softmax(logits / temperature) restricted to the top_k most likely,
  // then to the smallest prefix whose mass reaches top_p, renormalized. NaN logits never win.
  const std::vector<std::pair<int64_t, double>>& distribution(const float* logits,
                                                               size_t vocab,
                                                               const SamplerParams& p);
  // A token drawn from distribution() with `u` in [0, 1).
  int64_t sample(const float* logits, size_t vocab, const SamplerParams& p, double u);

 private:
  std::vector<std::pair<int64_t, double>> kept_;  // scratch, reused across calls
};

}  // namespace aotpack
