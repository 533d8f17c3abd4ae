// sampler.cpp — see sampler.hpp.
#include "sampler.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace aotpack {

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Most likely first; equal logits: the lower id first (a stable, documented order).
bool more_likely(const std::pair<int64_t, double>& a, const std::pair<int64_t, double>& b) {
  return a.second > b.second || (a.second == b.second && a.first < b.first);
}

}  // namespace

double uniform01(uint64_t seed, uint64_t sequence, uint64_t step) {
  uint64_t h = splitmix64(splitmix64(splitmix64(seed) ^ sequence) ^ step);
  return double(h >> 11) * (1.0 / 9007199254740992.0);  // 53 random bits
}

const std::vector<std::pair<int64_t, double>>& Sampler::distribution(const float* logits,
                                                                      size_t vocab,
                                                                      const SamplerParams& p) {
  kept_.clear();
  double top = -std::numeric_limits<double>::infinity();
  for (size_t v = 0; v < vocab; ++v) {
    double x = logits[v];
    if (std::isnan(x)) continue;
    kept_.emplace_back(int64_t(v), x);
    top = std::max(top, x);
  }
  if (kept_.empty()) {  // every logit NaN: nothing to prefer, token 0 (as argmax would)
    kept_.emplace_back(0, 1.0);
    return kept_;
  }
  const size_t k = p.top_k > 0 ? size_t(p.top_k) : kept_.size();
  if (k < kept_.size()) {
    std::partial_sort(kept_.begin(), kept_.begin() + long(k), kept_.end(), more_likely);
    kept_.resize(k);
  } else if (p.top_p < 1.0f) {
    std::sort(kept_.begin(), kept_.end(), more_likely);
  }
  // softmax(x / T), shifted by the maximum. A +inf logit (a 16-bit overflow) takes all the
  // mass (shared by equal ones); all -inf: equally likely.
  double total = 0;
  for (auto& e : kept_) {
    if (std::isinf(top))
      e.second = top > 0 ? (e.second == top ? 1.0 : 0.0) : 1.0;
    else
      e.second = std::exp((e.second - top) / double(p.temperature));
    total += e.second;
  }
  if (p.top_p < 1.0f) {  // kept_ is sorted here: keep the smallest prefix reaching top_p
    double mass = 0, want = double(p.top_p) * total;
    size_t n = 0;
    while (n < kept_.size() && (n == 0 || mass < want)) mass += kept_[n++].second;
    kept_.resize(n);
    total = mass;
  }
  for (auto& e : kept_) e.second /= total;
  return kept_;
}

int64_t Sampler::sample(const float* logits, size_t vocab, const SamplerParams& p, double u) {
  const auto& d = distribution(logits, vocab, p);
  double acc = 0;
  for (const auto& e : d) {
    acc += e.second;
    if (u < acc) return e.first;
  }
  return d.back().first;  // u within rounding of 1
}

}  // namespace aotpack
