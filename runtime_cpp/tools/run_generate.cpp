// run_generate.cpp — see run_generate.hpp.
#include "run_generate.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>

#include "aotpack/aotpack.h"
#include "c_api_util.hpp"
#include "cuda_driver.hpp"
#include "load_trace.hpp"
#include "error.hpp"
#include "host_tensor.hpp"

namespace aotpack_run {

namespace {

using aotpack::cat;

// The prompts to run: the --prompt-ids ones, or one of --prompt-len random in-range ids
// (seeded); --batch K turns one prompt into K of lengths L, L-1, ... (at least 1 each).
std::vector<std::vector<int64_t>> make_prompts(const GenerateArgs& g, int64_t vocab,
                                               uint64_t seed) {
  std::vector<std::vector<int64_t>> prompts = g.prompts;
  if (prompts.empty()) {
    Rng rng(seed * 7919 + 17);
    std::vector<int64_t> p;
    for (long i = 0; i < g.prompt_len; ++i) p.push_back(int64_t(rng.next() % uint64_t(vocab)));
    prompts.push_back(p);
  }
  if (g.batch > 1) {
    std::vector<int64_t> base = prompts[0];
    prompts.clear();
    for (long i = 0; i < g.batch; ++i)
      prompts.emplace_back(base.begin(),
                           base.begin() + std::max<long>(1, long(base.size()) - i));
  }
  return prompts;
}

std::string joined(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += cat(i ? "," : "", v[i]);
  return s;
}

// An integer flag value in [min, max], or false.
bool parse_int(const char* v, long min, long max, long* out) {
  char* end = nullptr;
  long n = std::strtol(v, &end, 10);
  if (!*v || *end || n < min || n > max) return false;
  *out = n;
  return true;
}

const char* const kGenerateFlags[] = {"--generate", "--prompt-ids", "--batch", "--prompt-len",
                                      "--temperature", "--top-k", "--top-p", "--stop-id",
                                      "--ignore-eos"};

}  // namespace

bool is_generate_flag(const std::string& flag) {
  return std::find(std::begin(kGenerateFlags), std::end(kGenerateFlags), flag) !=
         std::end(kGenerateFlags);
}

std::string parse_generate_flag(const std::string& s, const std::function<const char*()>& value,
                                GenerateArgs& g) {
  if (s == "--ignore-eos") {
    g.flags.push_back(s);
    g.ignore_eos = true;
    return "";
  }
  const char* v = value();
  if (s != "--generate") g.flags.push_back(s);
  if (s == "--prompt-ids") {
    g.prompts.emplace_back();
    return parse_id_list(v, &g.prompts.back());
  }
  if (s == "--temperature" || s == "--top-p") {
    char* end = nullptr;
    double x = std::strtod(v, &end);
    if (!*v || *end || !std::isfinite(x)) return cat(s, " needs a number, got '", v, "'");
    (s == "--temperature" ? g.temperature : g.top_p) = float(x);
    return "";
  }
  long n = 0;
  const bool positive = s != "--stop-id" && s != "--top-k";
  if (!parse_int(v, positive ? 1 : 0, 1 << 30, &n))
    return cat(s, positive ? " needs a positive integer" : " needs an integer >= 0", ", got '",
               v, "'");
  if (s == "--generate") g.new_tokens = n;
  else if (s == "--batch") g.batch = n;
  else if (s == "--prompt-len") g.prompt_len = n;
  else if (s == "--top-k") g.top_k = n;
  else g.stop_ids.push_back(n);
  return "";
}

std::string parse_id_list(const char* text, std::vector<int64_t>* out) {
  out->clear();
  const char* p = text;
  while (true) {
    char* end = nullptr;
    long long v = std::strtoll(p, &end, 10);
    if (end == p || v < 0 || (*end && *end != ','))
      return cat("--prompt-ids needs token ids >= 0 separated by commas (e.g. 1,15043,3186), "
                 "got '", text, "'");
    out->push_back(int64_t(v));
    if (!*end) return "";
    p = end + 1;
  }
}

std::string check_generate_args(const GenerateArgs& g) {
  if (g.new_tokens == 0) {
    if (!g.flags.empty()) return g.flags.front() + " is only used with --generate N";
    return "";
  }
  if (!g.prompts.empty() && g.prompt_len)
    return "--prompt-len makes a random prompt: do not give --prompt-ids with it";
  if (g.prompts.empty() && !g.prompt_len)
    return "--generate needs a prompt: --prompt-ids 1,2,3 (repeat it for a batch) or "
           "--prompt-len L (random ids)";
  if (g.batch && g.prompts.size() > 1)
    return "--batch K makes K sequences from one prompt: give a single --prompt-ids with it";
  if (!(g.temperature >= 0) || !(g.top_p > 0 && g.top_p <= 1))
    return "--temperature needs a number >= 0 and --top-p a number in (0, 1]";
  return "";
}

void run_generate(const std::string& bundle, const std::string& weights, int device, int verify,
                  bool graph, uint64_t seed, const GenerateArgs& g, bool teardown) {
  ModelHandle h;
  aotpack_model_options mo{};
  mo.struct_size = sizeof(mo);
  mo.weights_path = weights.empty() ? nullptr : weights.c_str();
  mo.device_ordinal = device;
  mo.verify = verify;
  check_status(aotpack_model_load(bundle.c_str(), &mo, &h.m));
  aotpack::trace_point("model loaded");
  aotpack_generation_info info;
  check_status(aotpack_model_generation_info(h.m, &info));
  aotpack_session_options so{};
  so.struct_size = sizeof(so);
  so.cuda_graphs = graph ? AOTPACK_CUDA_GRAPHS_ON : AOTPACK_CUDA_GRAPHS_OFF;
  check_status(aotpack_session_create(h.m, &so, &h.s));
  aotpack::trace_point("session created");

  const std::vector<std::vector<int64_t>> prompts = make_prompts(g, info.vocab_size, seed);
  std::vector<const int64_t*> ptrs;
  std::vector<size_t> lens;
  for (const auto& p : prompts) {
    ptrs.push_back(p.data());
    lens.push_back(p.size());
  }
  aotpack_generate_options o{};
  o.struct_size = sizeof(o);
  o.temperature = g.temperature;
  o.top_k = int32_t(g.top_k);
  o.top_p = g.top_p;
  o.seed = seed;
  o.stop_ids = g.stop_ids.empty() ? nullptr : g.stop_ids.data();
  o.num_stop_ids = g.stop_ids.size();
  o.ignore_eos = g.ignore_eos ? 1 : 0;
  const size_t n = size_t(g.new_tokens);
  std::vector<int64_t> tokens(prompts.size() * n);
  std::vector<size_t> counts(prompts.size());
  aotpack_generate_stats st{};
  st.struct_size = sizeof(st);
  check_status(aotpack_session_generate(h.s, ptrs.data(), lens.data(), prompts.size(), n, &o,
                                        tokens.data(), counts.data(), &st, nullptr));
  aotpack::trace_point("generated");

  std::vector<int64_t> plens, news;
  const double decode_s = st.decode_ms / 1000.0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    std::vector<int64_t> seq(tokens.begin() + long(i * n), tokens.begin() + long(i * n + counts[i]));
    std::printf("sequence %zu prompt=%s\n", i, joined(prompts[i]).c_str());
    std::printf("sequence %zu tokens=%s\n", i, joined(seq).c_str());
    double rate = decode_s > 0 ? double(counts[i] ? counts[i] - 1 : 0) / decode_s : 0.0;
    std::printf("sequence %zu new=%zu decode_tok_s=%.1f\n", i, counts[i], rate);
    plens.push_back(int64_t(lens[i]));
    news.push_back(int64_t(counts[i]));
  }
  std::printf("generate: batch=%zu prompt=%s new=%s ttft_ms=%.3f decode_ms=%.3f "
              "decode_steps=%lld decode_tok_s=%.1f temperature=%g graph=%d\n",
              prompts.size(), joined(plens).c_str(), joined(news).c_str(), st.ttft_ms,
              st.decode_ms, (long long)st.decode_steps, st.decode_tokens_per_s,
              double(g.temperature), graph ? 1 : 0);
  aotpack::trace_point("printed");
  end_run(teardown);  // c_api_util.hpp: unless `teardown`, the handles are not freed
}

}  // namespace aotpack_run
