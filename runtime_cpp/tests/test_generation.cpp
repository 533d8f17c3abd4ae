// test_generation.cpp — no GPU: the manifest's "state" and "generation" sections through
// aotpack_model_check_file (each rule of docs/generation.md refused with its message), and
// the host sampler of aotpack_session_generate (sampler.hpp) unit by unit.
#include <cmath>
#include <limits>
#include <cstring>
#include <string>
#include <vector>

#include "aotpack/aotpack.h"
#include "bundle_builder.hpp"
#include "sampler.hpp"
#include "test_main.hpp"

using namespace aotpack_test;

namespace {

void expect_check(const TestBundle& b, aotpack_code code,
                  std::initializer_list<std::string> needles) {
  expect_check_file(b.write(make_temp_dir("gen")), code, needles);
}

Value& gen(TestBundle& b) { return at(b.manifest, "generation"); }
Value& state(TestBundle& b, size_t i = 0) { return at(at(b.manifest, "state"), i); }
Value& tensor(TestBundle& b, const char* list, size_t i) { return at(at(b.manifest, list), i); }
Value& dim(TestBundle& b, const char* list, size_t i, size_t k) {
  return at(at(tensor(b, list, i), "shape"), k);
}

Value array(std::initializer_list<Value> items) {
  Value v;
  v.type = Type::Array;
  v.items = items;
  return v;
}

Value state_entry(const std::string& name, const char* dtype, int64_t n) {
  Value st;
  at(st, "name") = jstr(name);
  at(st, "dtype") = jstr(dtype);
  at(st, "shape") = array({jint(n)});
  return st;
}

// A generation bundle with generation[key] = value, checked against `needles`.
void expect_gen_field(const char* key, Value value, std::initializer_list<std::string> needles) {
  TestBundle b = TestBundle::generation();
  at(gen(b), key) = value;
  expect_check(b, AOTPACK_CORRUPT_BUNDLE, needles);
}

}  // namespace

TEST(gen_valid_bundle) {
  expect_check(TestBundle::generation(), AOTPACK_OK, {"OK"});
  // The state list and buffer kind are not tied to generation, nor to format v2.
  TestBundle v1;
  at(v1.manifest, "state") = array({state_entry("counter", "i32", 3)});
  Value buf;
  at(buf, "kind") = jstr("state");
  at(buf, "index") = jint(0);
  at(v1.manifest, "buffers").items.push_back(buf);
  expect_check(v1, AOTPACK_OK, {"OK"});
}

TEST(gen_bad_state) {
  TestBundle sym = TestBundle::generation();
  at(at(state(sym), "shape"), 1) = jstr("S");
  expect_check(sym, AOTPACK_CORRUPT_BUNDLE, {"state[0].shape[1]", "'S'", "static"});
  TestBundle zero = TestBundle::generation();
  at(at(state(zero), "shape"), 0) = jint(0);
  expect_check(zero, AOTPACK_CORRUPT_BUNDLE, {"state[0].shape[0]", "outside [1,"});
  TestBundle dtype = TestBundle::generation();
  at(state(dtype), "dtype") = jstr("f8");
  expect_check(dtype, AOTPACK_CORRUPT_BUNDLE, {"state[0].dtype", "unknown dtype 'f8'"});
  TestBundle key = TestBundle::generation();
  at(state(key), "shpe") = jint(1);
  expect_check(key, AOTPACK_CORRUPT_BUNDLE, {"state[0]", "unknown field 'shpe'", "'shape'"});
  TestBundle huge = TestBundle::generation();
  at(state(huge), "shape") = array({jint(1 << 20), jint(1 << 20), jint(1 << 10)});
  expect_check(huge, AOTPACK_CORRUPT_BUNDLE, {"state[0] 'cache.k.0'", "1024 GiB"});
  TestBundle dup = TestBundle::generation();
  at(dup.manifest, "state").items.push_back(state_entry("cache.k.0", "i64", 4));
  expect_check(dup, AOTPACK_CORRUPT_BUNDLE, {"state", "duplicate name 'cache.k.0'"});
  TestBundle index = TestBundle::generation();
  at(tensor(index, "buffers", 5), "index") = jint(3);
  expect_check(index, AOTPACK_CORRUPT_BUNDLE,
               {"buffers[5]", "state index 3 out of range (the model has 1 states)"});
  TestBundle list = TestBundle::generation();
  at(list.manifest, "state") = jint(3);
  expect_check(list, AOTPACK_CORRUPT_BUNDLE, {"state", "expected an array"});
}

// The session's counters (docs/manifest.md, "Counters"): a "counters" buffer inside
// counters_bytes, with the same key rules as an arena region.
TEST(counters_buffers) {
  auto with_counters = [](int64_t total, int64_t offset, int64_t nbytes) {
    TestBundle b;
    at(b.manifest, "counters_bytes") = jint(total);
    Value buf;
    at(buf, "kind") = jstr("counters");
    at(buf, "offset") = jint(offset);
    at(buf, "nbytes") = jint(nbytes);
    at(b.manifest, "buffers").items.push_back(buf);
    return b;
  };
  expect_check(with_counters(512, 0, 512), AOTPACK_OK, {"OK"});
  expect_check(with_counters(512, 256, 512), AOTPACK_CORRUPT_BUNDLE,
               {"counters region [256, 768) is outside counters_bytes = 512"});
  expect_check(with_counters(int64_t(1) << 30, 0, 4), AOTPACK_CORRUPT_BUNDLE,
               {"counters_bytes"});
  TestBundle key = with_counters(512, 0, 4);
  at(at(key.manifest, "buffers").items.back(), "index") = jint(0);
  expect_check(key, AOTPACK_CORRUPT_BUNDLE, {"unknown field 'index'"});
}

TEST(gen_bad_generation_fields) {
  TestBundle missing = TestBundle::generation();
  auto& f = gen(missing).fields;
  for (size_t i = 0; i < f.size(); ++i)
    if (f[i].first == "vocab_size") f.erase(f.begin() + long(i));
  expect_check(missing, AOTPACK_CORRUPT_BUNDLE, {"generation", "missing field 'vocab_size'"});
  expect_gen_field("max_batches", jint(4), {"unknown field 'max_batches'", "'max_batch'"});
  expect_gen_field("input_ids", jint(5),
                   {"input_ids = 5 is out of range (the model has 3 inputs)"});
  expect_gen_field("logits", jint(2), {"logits = 2 is out of range (the model has 2 outputs)"});
  expect_gen_field("positions", jint(0), {"three different inputs"});
  expect_gen_field("next_ids", jint(1), {"two different outputs"});
  expect_gen_field("max_batch", jint(8),
                   {"max_batch is 8 but symbol 'B'", "ranges 1..4", "1..max_batch"});
  expect_gen_field("max_seq_len", jint(32), {"max_seq_len is 32 but symbol 'S'", "1..16"});
  expect_gen_field("max_batch", jint(0), {"generation.max_batch", "outside [1,"});
  expect_gen_field("vocab_size", jint(64),
                   {"logits 'logits' dim 1 is '32' but must be vocab_size = 64"});
  expect_gen_field("eos_ids", array({jint(2), jint(32)}),
                   {"generation.eos_ids[1]", "outside [0, 31]"});
  expect_gen_field("eos_ids", jint(2), {"generation.eos_ids", "expected an array"});
}

TEST(gen_bad_generation_tensors) {
  TestBundle logits = TestBundle::generation();
  at(tensor(logits, "outputs", 1), "dtype") = jstr("bf16");
  expect_check(logits, AOTPACK_CORRUPT_BUNDLE,
               {"logits is 'logits' (bf16, rank 2) but must be f32 [B, vocab_size]"});
  TestBundle ids = TestBundle::generation();
  at(tensor(ids, "inputs", 0), "dtype") = jstr("i32");
  expect_check(ids, AOTPACK_CORRUPT_BUNDLE, {"input_ids is 'input_ids' (i32, rank 2)", "i64"});
  TestBundle rank = TestBundle::generation();
  at(tensor(rank, "inputs", 2), "shape") = array({jstr("B"), jint(1)});
  expect_check(rank, AOTPACK_CORRUPT_BUNDLE, {"last_index", "rank 2", "i64 [B]"});
  TestBundle pos = TestBundle::generation();
  dim(pos, "inputs", 1, 1) = jstr("B");
  expect_check(pos, AOTPACK_CORRUPT_BUNDLE,
               {"positions 'positions' dim 1 is 'B' but must be the symbol 'S'"});
  TestBundle next = TestBundle::generation();
  dim(next, "outputs", 0, 0) = jint(4);
  expect_check(next, AOTPACK_CORRUPT_BUNDLE, {"next_ids 'next_ids' dim 0 is '4'", "'B'"});
  // input_ids' length a constant (S still bound, by positions): decode could not run.
  TestBundle fixed = TestBundle::generation();
  dim(fixed, "inputs", 0, 1) = jint(16);
  expect_check(fixed, AOTPACK_CORRUPT_BUNDLE,
               {"input_ids 'input_ids' dim 1 (the sequence length) is '16'", "must be a symbol"});
  TestBundle min = TestBundle::generation();
  at(at(at(min.manifest, "symbols"), 1), "min") = jint(2);
  expect_check(min, AOTPACK_CORRUPT_BUNDLE, {"symbol 'S'", "ranges 2..16", "1..max_seq_len"});
  TestBundle extra = TestBundle::generation();
  Value x;
  at(x, "name") = jstr("extra");
  at(x, "dtype") = jstr("f32");
  at(x, "shape") = array({jstr("B")});
  at(extra.manifest, "inputs").items.push_back(x);
  expect_check(extra, AOTPACK_CORRUPT_BUNDLE, {"the step has 4 inputs", "exactly input_ids"});
}

// ---- the host sampler ----------------------------------------------------------------------

TEST(sampler_uniform_is_a_counter) {
  using aotpack::uniform01;
  EXPECT(uniform01(7, 1, 2) == uniform01(7, 1, 2));
  EXPECT(uniform01(7, 1, 2) != uniform01(7, 2, 1));
  EXPECT(uniform01(7, 1, 2) != uniform01(8, 1, 2));
  double sum = 0;
  for (uint64_t i = 0; i < 10000; ++i) {
    double u = uniform01(42, i % 3, i);
    EXPECT(u >= 0 && u < 1);
    sum += u;
  }
  EXPECT(std::fabs(sum / 10000 - 0.5) < 0.02);
}

TEST(sampler_top_k_1_is_argmax) {
  aotpack::Sampler s;
  aotpack::SamplerParams p;
  p.top_k = 1;
  p.temperature = 0.7f;
  std::vector<float> logits(100);
  for (int trial = 0; trial < 20; ++trial) {
    size_t best = 0;
    for (size_t v = 0; v < logits.size(); ++v) {
      logits[v] = float(aotpack::uniform01(trial, v, 0) * 10 - 5);
      if (logits[v] > logits[best]) best = v;
    }
    for (double u : {0.0, 0.5, 0.999})
      EXPECT(s.sample(logits.data(), logits.size(), p, u) == int64_t(best));
  }
  std::vector<float> ties = {1, 3, std::nanf(""), 3, 2};  // equal maxima: the lower id
  EXPECT(s.sample(ties.data(), ties.size(), p, 0.9) == 1);
}

TEST(sampler_temperature_scales_logits) {
  aotpack::Sampler s;
  aotpack::SamplerParams p;
  std::vector<float> logits = {1.0f, 2.0f, 0.5f, -1.0f};
  for (float t : {0.5f, 1.0f, 2.0f}) {
    p.temperature = t;
    auto d = s.distribution(logits.data(), logits.size(), p);
    EXPECT(d.size() == 4);
    double z = 0;
    for (float x : logits) z += std::exp(double(x) / t);
    for (const auto& e : d)
      EXPECT(std::fabs(e.second - std::exp(double(logits[size_t(e.first)]) / t) / z) < 1e-9);
  }
  p.temperature = 0.5f;  // colder: the likeliest token gains
  double cold = s.distribution(logits.data(), 4, p)[1].second;
  p.temperature = 2.0f;
  EXPECT(cold > s.distribution(logits.data(), 4, p)[1].second);
}

TEST(sampler_infinite_logits) {
  aotpack::Sampler s;
  aotpack::SamplerParams p;
  p.temperature = 1.0f;
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> up = {1.0f, inf, 0.5f, inf};  // +inf (a 16-bit overflow) takes the mass
  for (const auto& e : s.distribution(up.data(), up.size(), p))
    EXPECT(std::fabs(e.second - (e.first == 1 || e.first == 3 ? 0.5 : 0.0)) < 1e-12);
  std::vector<float> down = {-inf, -inf, -inf};  // nothing preferred: equally likely
  for (const auto& e : s.distribution(down.data(), down.size(), p))
    EXPECT(std::fabs(e.second - 1.0 / 3) < 1e-12);
}

TEST(sampler_top_p_keeps_smallest_set) {
  aotpack::Sampler s;
  aotpack::SamplerParams p;
  std::vector<float> logits;
  for (double q : {0.05, 0.5, 0.15, 0.3}) logits.push_back(float(std::log(q)));
  struct Case {
    float top_p;
    std::vector<int64_t> kept;
  };
  for (const Case& c : {Case{0.4f, {1}}, Case{0.75f, {1, 3}}, Case{0.85f, {1, 3, 2}},
                        Case{0.99f, {1, 3, 2, 0}}, Case{1.0f, {0, 1, 2, 3}}}) {
    p.top_p = c.top_p;
    auto d = s.distribution(logits.data(), logits.size(), p);
    EXPECT(d.size() == c.kept.size());
    double mass = 0;
    for (size_t i = 0; i < d.size(); ++i) {
      EXPECT(d[i].first == c.kept[i]);
      mass += d[i].second;
    }
    EXPECT(std::fabs(mass - 1.0) < 1e-9);  // renormalized
  }
  p.top_p = 0.75f;  // 0.5 and 0.3 renormalized over 0.8
  auto d = s.distribution(logits.data(), logits.size(), p);
  EXPECT(std::fabs(d[0].second - 0.625) < 1e-6 && std::fabs(d[1].second - 0.375) < 1e-6);
  p.top_k = 1;  // top_k first, then top_p
  EXPECT(s.distribution(logits.data(), logits.size(), p).size() == 1);
}

TEST(sampler_draws_follow_the_distribution) {
  aotpack::Sampler s;
  aotpack::SamplerParams p;
  std::vector<float> logits;
  for (double q : {0.1, 0.6, 0.3}) logits.push_back(float(std::log(q)));
  int counts[3] = {0, 0, 0};
  const int n = 20000;
  for (int i = 0; i < n; ++i) ++counts[s.sample(logits.data(), 3, p, aotpack::uniform01(5, 0, uint64_t(i)))];
  EXPECT(std::abs(counts[0] - n / 10) < n / 50);
  EXPECT(std::abs(counts[1] - 6 * n / 10) < n / 50);
  EXPECT(std::abs(counts[2] - 3 * n / 10) < n / 50);
  std::vector<float> nan = {std::nanf(""), std::nanf("")};
  EXPECT(s.sample(nan.data(), 2, p, 0.3) == 0);
}
