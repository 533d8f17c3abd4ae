// generate.cpp — see generate.hpp. Each token costs one run, one copy of B ids (greedy) or
// B × vocab logits (sampling) to the host, and one stream synchronization: the host decides
// the next input. Decode runs keep their shape (B, 1) and pointers, so the session replays
// the CUDA graph it captured for that batch size; the prefill runs without capture (a new
// length each call).
#include "generate.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "error.hpp"
#include "session.hpp"

namespace aotpack {

namespace {

aotpack_generate_options read_options(const aotpack_generate_options* in) {
  aotpack_generate_options o;
  std::memset(&o, 0, sizeof(o));
  if (!in) return o;
  if (in->struct_size < sizeof(size_t))
    fail(AOTPACK_INVALID_ARGUMENT, "aotpack_generate_options.struct_size is not set");
  std::memcpy(&o, in, std::min(in->struct_size, sizeof(o)));
  for (uint64_t r : o.reserved)
    if (r)
      fail(AOTPACK_INVALID_ARGUMENT, "aotpack_generate_options.reserved must be zero "
           "(zero-initialize the struct)");
  if (!std::isfinite(o.temperature) || o.temperature < 0)
    fail(AOTPACK_INVALID_ARGUMENT, "temperature is ", o.temperature,
         ": use 0 (greedy) or a finite positive value");
  if (o.top_k < 0)
    fail(AOTPACK_INVALID_ARGUMENT, "top_k is ", o.top_k, ": use 0 (all tokens) or a positive "
         "count");
  if (!(o.top_p >= 0 && o.top_p <= 1))
    fail(AOTPACK_INVALID_ARGUMENT, "top_p is ", o.top_p, ": use a value in (0, 1] (0 means "
         "the default, 1)");
  if (o.num_stop_ids && !o.stop_ids)
    fail(AOTPACK_INVALID_ARGUMENT, "stop_ids is NULL but num_stop_ids is ", o.num_stop_ids);
  return o;
}

void check_prompts(const GenerationSpec& g, const int64_t* const* prompts, const size_t* lens,
                   size_t batch, size_t max_new) {
  for (size_t b = 0; b < batch; ++b) {
    if (lens[b] == 0)
      fail(AOTPACK_INVALID_ARGUMENT, "sequence ", b, " has an empty prompt: every sequence "
           "needs at least one token");
    if (!prompts[b]) fail(AOTPACK_INVALID_ARGUMENT, "prompts[", b, "] is NULL");
    if (lens[b] > uint64_t(g.max_seq_len) || lens[b] + max_new - 1 > uint64_t(g.max_seq_len))
      fail(AOTPACK_INVALID_ARGUMENT, "sequence ", b, ": prompt length ", lens[b],
           " + max_new_tokens ", max_new, " - 1 = ", lens[b] + max_new - 1,
           " exceeds max_seq_len = ", g.max_seq_len, " of this bundle");
    for (size_t i = 0; i < lens[b]; ++i)
      if (prompts[b][i] < 0 || prompts[b][i] >= g.vocab_size)
        fail(AOTPACK_INVALID_ARGUMENT, "sequence ", b, " token ", i, " is id ", prompts[b][i],
             ", outside the vocabulary [0, ", g.vocab_size, ")");
  }
}

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

GenerateRequest make_generate_request(const Manifest& m, const int64_t* const* prompts,
                                      const size_t* lens, size_t batch, size_t max_new,
                                      const aotpack_generate_options* options,
                                      int64_t* out_tokens, size_t* out_counts) {
  const GenerationSpec& g = m.generation;
  if (!g.present)
    fail(AOTPACK_INVALID_ARGUMENT, "this bundle is not a text-generation bundle (its manifest "
         "has no \"generation\" section): build it with aotpack build --task text-generation");
  aotpack_generate_options o = read_options(options);
  if (batch == 0 || batch > uint64_t(g.max_batch))
    fail(AOTPACK_INVALID_ARGUMENT, "batch is ", batch, ": this bundle generates 1 to ",
         g.max_batch, " sequences at once (max_batch)");
  if (max_new == 0) fail(AOTPACK_INVALID_ARGUMENT, "max_new_tokens is 0: ask for 1 or more");
  if (max_new > uint64_t(g.max_seq_len))
    fail(AOTPACK_INVALID_ARGUMENT, "max_new_tokens ", max_new, " exceeds max_seq_len = ",
         g.max_seq_len, " of this bundle");
  if (!prompts || !lens || !out_tokens || !out_counts)
    fail(AOTPACK_INVALID_ARGUMENT, "prompts, prompt_lens, out_tokens and out_counts must not "
         "be NULL");
  check_prompts(g, prompts, lens, batch, max_new);
  GenerateRequest r;
  for (size_t i = 0; i < o.num_stop_ids; ++i) {
    if (o.stop_ids[i] < 0 || o.stop_ids[i] >= g.vocab_size)
      fail(AOTPACK_INVALID_ARGUMENT, "stop_ids[", i, "] is ", o.stop_ids[i],
           ", outside the vocabulary [0, ", g.vocab_size, ")");
    r.stop_ids.push_back(o.stop_ids[i]);
  }
  if (!o.ignore_eos) r.stop_ids.insert(r.stop_ids.end(), g.eos_ids.begin(), g.eos_ids.end());
  r.prompts = prompts;
  r.lens = lens;
  r.batch = batch;
  r.max_new = max_new;
  r.greedy = o.temperature == 0;
  r.sampling.temperature = o.temperature;
  r.sampling.top_k = o.top_k;
  r.sampling.top_p = o.top_p == 0 ? 1.0f : o.top_p;
  r.seed = o.seed;
  r.on_token = o.on_token;
  r.user_data = o.user_data;
  r.out_tokens = out_tokens;
  r.out_counts = out_counts;
  return r;
}

Generator::Generator(Session& session)
    : session_(session), g_(session.model().manifest().generation) {
  const Manifest& m = session.model().manifest();
  const cu::Driver& d = cu::driver();
  in_ptrs_.assign(m.inputs.size(), 0);
  out_ptrs_.assign(m.outputs.size(), 0);
  shapes_.assign(m.inputs.size(), aotpack_shape{});
  try {
    for (size_t i = 0; i < m.inputs.size(); ++i)
      cu::check(d.cuMemAlloc(&in_ptrs_[i], size_t(m.inputs[i].nbytes)), "cuMemAlloc",
                cat("generate: allocating input '", m.inputs[i].name, "'"));
    for (size_t i = 0; i < m.outputs.size(); ++i)
      cu::check(d.cuMemAlloc(&out_ptrs_[i], size_t(std::max<uint64_t>(m.outputs[i].nbytes, 1))),
                "cuMemAlloc", cat("generate: allocating output '", m.outputs[i].name, "'"));
  } catch (...) {
    for (uint64_t p : in_ptrs_) if (p) d.cuMemFree(p);
    for (uint64_t p : out_ptrs_) if (p) d.cuMemFree(p);
    throw;
  }
  const size_t B = size_t(g_.max_batch), S = size_t(g_.max_seq_len);
  ids_.resize(B * S);
  pos_.resize(B * S);
  last_.resize(B);
  next_.resize(B);
  logits_.resize(B * size_t(g_.vocab_size));
  prev_.resize(B);
}

Generator::~Generator() {
  const cu::Driver& d = cu::driver();
  for (uint64_t p : in_ptrs_) if (p) d.cuMemFree(p);  // waits for pending work
  for (uint64_t p : out_ptrs_) if (p) d.cuMemFree(p);
}

void Generator::step(size_t batch, size_t len, bool prefill, bool greedy, cu::CUstream stream) {
  const cu::Driver& d = cu::driver();
  const size_t n = batch * len;
  const char* what = prefill ? "generate: the prefill run" : "generate: a decode run";
  auto upload = [&](uint32_t input, const int64_t* src, size_t count, size_t rank) {
    cu::check(d.cuMemcpyHtoDAsync(in_ptrs_[input], src, count * 8, stream), "cuMemcpyHtoDAsync",
              what);
    aotpack_shape& s = shapes_[input];
    s.rank = int32_t(rank);
    s.dims[0] = int64_t(batch);
    s.dims[1] = rank == 2 ? int64_t(len) : 0;
  };
  upload(g_.input_ids, ids_.data(), n, 2);
  upload(g_.positions, pos_.data(), n, 2);
  upload(g_.last_index, last_.data(), batch, 1);
  session_.run(in_ptrs_.data(), shapes_.data(), out_ptrs_.data(), stream, !prefill);
  if (greedy)
    cu::check(d.cuMemcpyDtoHAsync(next_.data(), out_ptrs_[g_.next_ids], batch * 8, stream),
              "cuMemcpyDtoHAsync", what);
  else
    cu::check(d.cuMemcpyDtoHAsync(logits_.data(), out_ptrs_[g_.logits],
                                  batch * size_t(g_.vocab_size) * 4, stream),
              "cuMemcpyDtoHAsync", what);
  cu::check(d.cuStreamSynchronize(stream), "cuStreamSynchronize", what);
}

int64_t Generator::pick(const GenerateRequest& r, size_t b, size_t step) {
  const size_t V = size_t(g_.vocab_size);
  int64_t t = r.greedy ? next_[b]
                       : sampler_.sample(&logits_[b * V], V, r.sampling,
                                         uniform01(r.seed, b, step));
  if (t < 0 || t >= g_.vocab_size)
    fail(AOTPACK_INTERNAL, "generate: the step returned token id ", t, " for sequence ", b,
         " at step ", step, ", outside the vocabulary [0, ", g_.vocab_size, "): the bundle's "
         "next_ids output is wrong (a compiler bug: please report it)");
  return t;
}

GenerateStats Generator::generate(const GenerateRequest& r, cu::CUstream stream) {
  GenerateStats st;
  const size_t B = r.batch, N = r.max_new;
  std::fill(r.out_tokens, r.out_tokens + B * N, int64_t(-1));
  std::fill(r.out_counts, r.out_counts + B, size_t(0));
  done_.assign(B, false);
  // Prefill: every prompt right-padded with id 0 to the longest; positions run 0..S-1 in
  // every row (padding is overwritten in the cache before any query can see it).
  const size_t S = *std::max_element(r.lens, r.lens + B);
  for (size_t b = 0; b < B; ++b) {
    for (size_t s = 0; s < S; ++s) {
      ids_[b * S + s] = s < r.lens[b] ? r.prompts[b][s] : 0;
      pos_[b * S + s] = int64_t(s);
    }
    last_[b] = int64_t(b * S + r.lens[b]) - 1;  // its last token as a row of [B * S]
    st.prompt_tokens += int64_t(r.lens[b]);
  }
  bool stop = false;
  auto emit = [&](size_t b, size_t k) {
    int64_t t = pick(r, b, k);
    r.out_tokens[b * N + r.out_counts[b]++] = t;
    prev_[b] = t;
    ++st.generated_tokens;
    if (k > 0) ++st.decode_tokens;
    if (r.out_counts[b] == N ||
        std::find(r.stop_ids.begin(), r.stop_ids.end(), t) != r.stop_ids.end())
      done_[b] = true;
    if (r.on_token && r.on_token(r.user_data, b, t, k) != 0) stop = st.stopped_by_callback = true;
  };
  const auto t0 = std::chrono::steady_clock::now();
  step(B, S, true, r.greedy, stream);
  for (size_t b = 0; b < B && !stop; ++b) emit(b, 0);
  st.ttft_ms = ms_since(t0);
  // Decode: one token per sequence per run. A finished sequence still rides along (the
  // batch keeps its shape, so its graph is replayed) at a position still inside its rows.
  const auto t1 = std::chrono::steady_clock::now();
  for (size_t k = 1; !stop && std::find(done_.begin(), done_.end(), false) != done_.end(); ++k) {
    for (size_t b = 0; b < B; ++b) {
      ids_[b] = prev_[b];
      pos_[b] = int64_t(r.lens[b] + k - 1);
      last_[b] = int64_t(b);  // S = 1: row b of [B * 1]
    }
    step(B, 1, false, r.greedy, stream);
    ++st.decode_steps;
    for (size_t b = 0; b < B && !stop; ++b)
      if (!done_[b]) emit(b, k);
  }
  st.decode_ms = st.decode_steps ? ms_since(t1) : 0.0;
  return st;
}

}  // namespace aotpack
