// generate.hpp — the token loop of aotpack_session_generate (docs/generation.md): argument
// checks, the session-owned step buffers, prefill then decode runs, greedy or sampled tokens,
// stop ids, streaming callback and timings.
#pragma once

#include <cstdint>
#include <vector>

#include "aotpack/aotpack.h"
#include "cuda_driver.hpp"
#include "manifest.hpp"
#include "sampler.hpp"

namespace aotpack {

class Session;

// One aotpack_session_generate call, its options resolved.
struct GenerateRequest {
  const int64_t* const* prompts = nullptr;
  const size_t* lens = nullptr;
  size_t batch = 0;
  size_t max_new = 0;
  bool greedy = true;
  SamplerParams sampling;
  uint64_t seed = 0;
  std::vector<int64_t> stop_ids;  // the caller's, plus the model's eos ids unless ignored
  aotpack_token_callback on_token = nullptr;
  void* user_data = nullptr;
  int64_t* out_tokens = nullptr;  // batch × max_new
  size_t* out_counts = nullptr;   // batch
};

struct GenerateStats {
  double ttft_ms = 0, decode_ms = 0;
  int64_t decode_steps = 0, prompt_tokens = 0, generated_tokens = 0, decode_tokens = 0;
  bool stopped_by_callback = false;
};

// The request from the C arguments, every check of aotpack_session_generate that needs no
// driver done (INVALID_ARGUMENT naming the sequence and the numbers).
GenerateRequest make_generate_request(const Manifest& m, const int64_t* const* prompts,
                                      const size_t* lens, size_t batch, size_t max_new,
                                      const aotpack_generate_options* options,
                                      int64_t* out_tokens, size_t* out_counts);

class Generator {
 public:
  // Allocates the step's inputs and outputs at their maxima (once per session).
  explicit Generator(Session& session);
  ~Generator();
  Generator(const Generator&) = delete;
  Generator& operator=(const Generator&) = delete;

  GenerateStats generate(const GenerateRequest& r, cu::CUstream stream);

 private:
  void step(size_t batch, size_t len, bool prefill, bool greedy, cu::CUstream stream);
  int64_t pick(const GenerateRequest& r, size_t b, size_t step);

  Session& session_;
  const GenerationSpec& g_;
  std::vector<uint64_t> in_ptrs_, out_ptrs_;  // device buffers, owned
  std::vector<aotpack_shape> shapes_;          // per input
  std::vector<int64_t> ids_, pos_, last_, next_;  // host staging
  std::vector<float> logits_;
  std::vector<int64_t> prev_;  // each sequence's latest token (the next decode input)
  std::vector<bool> done_;
  Sampler sampler_;
};

}  // namespace aotpack
