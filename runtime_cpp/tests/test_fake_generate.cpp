// test_fake_generate.cpp — state buffers and aotpack_session_generate against the fake driver
// (CTest sets AOTPACK_LIBCUDA to it), on TestBundle::generation(), whose gen_step kernel
// writes a KV-cache-like state in place and hashes each sequence's history into its next id
// (fake_gen_expected computes the same on the host).
#include <dlfcn.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "aotpack/aotpack.hpp"
#include "bundle_builder.hpp"
#include "test_main.hpp"

using namespace aotpack_test;

namespace {

template <typename Fn>
Fn fake_symbol(const char* name) {
  void* h = dlopen(std::getenv("AOTPACK_LIBCUDA"), RTLD_NOW | RTLD_NOLOAD);
  EXPECT(h != nullptr);
  void* fn = dlsym(h, name);
  EXPECT(fn != nullptr);
  dlclose(h);
  return reinterpret_cast<Fn>(fn);
}

// Kernel launches so far (direct + inside graph launches), graph launches, captures.
std::vector<int> stats() {
  std::vector<int> s(6);
  fake_symbol<void (*)(int*)>("fake_cuda_stats")(s.data());
  return s;
}

// cuMemsetD8(Async) calls so far; last = the last one's address, value and bytes.
uint64_t memsets(uint64_t last[3]) {
  return fake_symbol<uint64_t (*)(uint64_t*)>("fake_cuda_memsets")(last);
}

std::string gen_bundle(const char* tag) { return TestBundle::generation().write(make_temp_dir(tag)); }

// aotpack_session_generate through the C API: the status code and message.
aotpack_code generate_code(aotpack_session* s, const std::vector<std::vector<int64_t>>& prompts,
                           size_t max_new, const aotpack_generate_options* o, std::string* msg) {
  std::vector<const int64_t*> ptrs;
  std::vector<size_t> lens;
  for (const auto& p : prompts) {
    ptrs.push_back(p.data());
    lens.push_back(p.size());
  }
  std::vector<int64_t> tokens(prompts.size() * max_new + 1);
  std::vector<size_t> counts(prompts.size() + 1);
  aotpack_status* st = aotpack_session_generate(s, ptrs.data(), lens.data(), prompts.size(),
                                                max_new, o, tokens.data(), counts.data(),
                                                nullptr, nullptr);
  aotpack_code c = aotpack_status_code(st);
  *msg = aotpack_status_message(st);
  std::printf("  -> %s: %s\n", aotpack_status_code_name(c), msg->c_str());
  aotpack_status_free(st);
  return c;
}

aotpack_code code_of(aotpack_status* st, std::string* msg) {
  if (!st) return AOTPACK_OK;
  aotpack_code c = aotpack_status_code(st);
  *msg = aotpack_status_message(st);
  aotpack_status_free(st);
  return c;
}

}  // namespace

TEST(fake_gen_info_and_state) {
  aotpack::Model model(gen_bundle("geninfo"));
  aotpack::GenerationInfo g = model.generation_info();
  EXPECT(g.max_batch == 4 && g.max_seq_len == 16 && g.vocab_size == 32 && g.eos_ids.empty());
  std::vector<aotpack::TensorInfo> st = model.states();
  EXPECT(st.size() == 1 && st[0].name == "cache.k.0" && st[0].dtype_name == "i64");
  EXPECT(st[0].shape == std::vector<int64_t>({4, 16}) && st[0].nbytes == 512);
  EXPECT(model.state_bytes() == 512);
  uint64_t last[3], before = memsets(last);
  {
    aotpack::Session session(model);  // allocates and zeroes its state
    EXPECT(memsets(last) == before + 1 && last[1] == 0 && last[2] == 512);
    const int64_t* cache = reinterpret_cast<const int64_t*>(last[0]);
    for (int i = 0; i < 64; ++i) EXPECT(cache[i] == 0);
    aotpack::Session other(model);  // each session its own state
    uint64_t other_last[3];
    memsets(other_last);
    EXPECT(other_last[0] != last[0] && other_last[2] == 512);
    session.generate({{3, 1, 4}}, 4);
    EXPECT(cache[0] == 3 && cache[1] == 1 && cache[2] == 4);  // written in place
    session.reset_state();
    EXPECT(memsets(last) == before + 3 && last[2] == 512);
    for (int i = 0; i < 64; ++i) EXPECT(cache[i] == 0);
  }
  // The caller's state memory: used (and zeroed) instead of the session's own, refused when
  // too small or misaligned.
  {
    std::vector<int64_t> mine(64 + 32, 7);
    uint64_t addr = (reinterpret_cast<uint64_t>(mine.data()) + 255) & ~uint64_t(255);
    aotpack_session_options o;
    std::memset(&o, 0, sizeof(o));
    o.struct_size = sizeof(o);
    o.state = addr;
    o.state_bytes = 256;
    o.skip_pointer_checks = 1;  // host memory stands in for device memory on the fake driver
    aotpack_session* s = nullptr;
    std::string msg;
    EXPECT(code_of(aotpack_session_create(model.get(), &o, &s), &msg) ==
               AOTPACK_INVALID_ARGUMENT && msg.find("needs 512") != std::string::npos);
    o.state_bytes = 512;
    o.state = addr + 8;
    EXPECT(code_of(aotpack_session_create(model.get(), &o, &s), &msg) ==
               AOTPACK_INVALID_ARGUMENT && msg.find("256-byte aligned") != std::string::npos);
    o.state = addr;
    EXPECT(aotpack_session_create(model.get(), &o, &s) == nullptr);
    const int64_t* cache = reinterpret_cast<const int64_t*>(addr);
    EXPECT(cache[0] == 0 && cache[63] == 0);  // zeroed at create
    EXPECT(memsets(last) == before + 4 && last[0] == addr);
    aotpack_session_free(s);
    before += 1;
  }
  // A bundle without state allocates nothing of the sort, and is not a generation bundle.
  TestBundle plain;
  aotpack::Model m2(plain.write(make_temp_dir("genplain")));
  EXPECT(m2.state_bytes() == 0 && m2.states().empty());
  aotpack::Session s2(m2);
  s2.reset_state();
  EXPECT(memsets(last) == before + 3);
  try {
    m2.generation_info();
    EXPECT(false);
  } catch (const aotpack::Exception& e) {
    EXPECT(e.code() == AOTPACK_INVALID_ARGUMENT && has(e.message(), "not a text-generation"));
  }
  std::string msg;
  EXPECT(generate_code(s2.get(), {{1}}, 2, nullptr, &msg) == AOTPACK_INVALID_ARGUMENT);
  EXPECT(has(msg, "not a text-generation bundle"));
}

TEST(fake_gen_greedy_batch_matches_alone) {
  aotpack::Model model(gen_bundle("gengreedy"));
  aotpack::Session session(model);
  std::vector<std::vector<int64_t>> prompts = {{5, 9, 2, 7, 1}, {3}, {8, 8, 30}};
  const size_t n = 6;
  aotpack::GenerateResult batch = session.generate(prompts, n);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT(batch.tokens[i] == fake_gen_expected(prompts[i], n, 32));
    EXPECT(session.generate({prompts[i]}, n).tokens[0] == batch.tokens[i]);
  }
  EXPECT(batch.stats.decode_steps == int64_t(n - 1));
  EXPECT(batch.stats.prompt_tokens == 9 && batch.stats.generated_tokens == 18);
  EXPECT(batch.stats.ttft_ms >= 0 && batch.stats.decode_ms >= 0);
  EXPECT(batch.stats.stopped_by_callback == 0);
  // The longest allowed request: prompt + max_new - 1 = max_seq_len.
  std::vector<int64_t> long_prompt(11, 4);
  EXPECT(session.generate({long_prompt}, 6).tokens[0] == fake_gen_expected(long_prompt, 6, 32));
}

TEST(fake_gen_decode_graph_captured_once_per_batch) {
  aotpack::Model model(gen_bundle("gengraph"));
  aotpack::Session session(model);
  std::vector<int> s0 = stats();
  session.generate({{1, 2}, {3}}, 5);  // prefill direct, decode captured once (B = 2)
  std::vector<int> s1 = stats();
  EXPECT(s1[2] - s0[2] == 1 && s1[1] - s0[1] == 4);
  session.generate({{4, 5, 6}, {7}}, 3);  // another prompt length, same batch: no capture
  std::vector<int> s2 = stats();
  EXPECT(s2[2] - s1[2] == 0 && s2[1] - s1[1] == 2);
  session.generate({{4}}, 3);  // batch 1: its own decode graph
  std::vector<int> s3 = stats();
  EXPECT(s3[2] - s2[2] == 1);
  // more prompt lengths than the session caches plans (8): the prefill plans (no graph) are
  // evicted first, the two decode graphs stay
  for (int64_t n = 1; n <= 12; ++n) session.generate({std::vector<int64_t>(size_t(n), 3)}, 2);
  session.generate({{1, 2}, {3}}, 3);
  EXPECT(stats()[2] - s3[2] == 0);
}

TEST(fake_gen_sampling) {
  aotpack::Model model(gen_bundle("gensample"));
  aotpack::Session session(model);
  std::vector<std::vector<int64_t>> prompts = {{2, 3}, {9}};
  aotpack::GenerateOptions o;
  o.temperature = 0.8f;
  o.top_k = 1;  // the fake's logits peak at its next id: top-k 1 is greedy
  aotpack::GenerateResult r = session.generate(prompts, 5, o);
  for (size_t i = 0; i < prompts.size(); ++i)
    EXPECT(r.tokens[i] == fake_gen_expected(prompts[i], 5, 32));
  o.top_k = 0;
  o.temperature = 3.0f;
  o.seed = 11;
  aotpack::GenerateResult a = session.generate(prompts, 8, o), b = session.generate(prompts, 8, o);
  EXPECT(a.tokens == b.tokens);  // reproducible for a seed
  bool differs = false;
  for (uint64_t seed = 12; seed < 20 && !differs; ++seed) {
    o.seed = seed;
    differs = session.generate(prompts, 8, o).tokens != a.tokens;
  }
  EXPECT(differs);
  for (const auto& seq : a.tokens)
    for (int64_t t : seq) EXPECT(t >= 0 && t < 32);
}

TEST(fake_gen_stop_ids_and_callback) {
  aotpack::Model model(gen_bundle("genstop"));
  aotpack::Session session(model);
  std::vector<int64_t> prompt = {6, 1};
  std::vector<int64_t> full = fake_gen_expected(prompt, 8, 32);
  aotpack::GenerateOptions o;
  o.stop_ids = {full[2]};
  std::vector<int64_t> got = session.generate({prompt, {4}}, 8, o).tokens[0];
  size_t stop_at = 0;
  while (full[stop_at] != full[2]) ++stop_at;  // the first occurrence ends the sequence
  EXPECT(got == std::vector<int64_t>(full.begin(), full.begin() + long(stop_at) + 1));
  // Streaming: every token in order; returning false stops cleanly.
  std::vector<std::pair<size_t, int64_t>> seen;
  aotpack::GenerateOptions cb;
  cb.on_token = [&](size_t seq, int64_t token, size_t step) {
    EXPECT(step == seen.size() / 2);
    seen.emplace_back(seq, token);
    return seen.size() < 5;
  };
  aotpack::GenerateResult r = session.generate({prompt, prompt}, 8, cb);
  EXPECT(seen.size() == 5 && r.stats.stopped_by_callback == 1);
  EXPECT(r.tokens[0].size() == 3 && r.tokens[1].size() == 2);
  EXPECT(seen[4].first == 0 && seen[4].second == full[2]);
  // A callback that throws: generation stops and generate() rethrows.
  cb.on_token = [](size_t, int64_t, size_t) -> bool { throw std::runtime_error("from callback"); };
  try {
    session.generate({prompt}, 4, cb);
    EXPECT(false);
  } catch (const std::runtime_error& e) {
    EXPECT(has(e.what(), "from callback"));
  }
  EXPECT(session.generate({prompt}, 8).tokens[0] == full);  // still usable
}

TEST(fake_gen_eos_ids) {
  TestBundle b = TestBundle::generation();
  std::vector<int64_t> prompt = {2, 2, 2};
  std::vector<int64_t> full = fake_gen_expected(prompt, 6, 32);
  Value eos;
  eos.type = Type::Array;
  eos.items.push_back(jint(full[1]));
  at(at(b.manifest, "generation"), "eos_ids") = eos;
  aotpack::Model model(b.write(make_temp_dir("geneos")));
  EXPECT(model.generation_info().eos_ids == std::vector<int64_t>({full[1]}));
  aotpack::Session session(model);
  std::vector<int64_t> got = session.generate({prompt}, 6).tokens[0];
  EXPECT(got.size() <= 2 && got.back() == full[1]);
  aotpack::GenerateOptions o;
  o.ignore_eos = true;
  EXPECT(session.generate({prompt}, 6, o).tokens[0] == full);
}

TEST(fake_gen_argument_errors) {
  aotpack::Model model(gen_bundle("genargs"));
  aotpack::Session session(model);
  aotpack_session* s = session.get();
  const int before = stats()[0] + stats()[1];
  std::string msg;
  struct Case {
    std::vector<std::vector<int64_t>> prompts;
    size_t max_new;
    std::vector<std::string> needles;
  };
  const std::vector<Case> cases = {
      {{}, 4, {"batch is 0", "1 to 4 sequences"}},
      {{{1}, {1}, {1}, {1}, {1}}, 4, {"batch is 5", "max_batch"}},
      {{{1}, {}}, 4, {"sequence 1 has an empty prompt"}},
      {{{1, 2, 32}}, 4, {"sequence 0 token 2 is id 32", "[0, 32)"}},
      {{{1}, {-1}}, 4, {"sequence 1 token 0 is id -1"}},
      {{{1}, std::vector<int64_t>(12, 1)}, 6,
       {"sequence 1: prompt length 12 + max_new_tokens 6 - 1 = 17 exceeds max_seq_len = 16"}},
      {{{1}}, 0, {"max_new_tokens is 0"}},
      {{{1}}, 17, {"max_new_tokens 17 exceeds max_seq_len = 16"}},
  };
  for (const Case& c : cases) {
    EXPECT(generate_code(s, c.prompts, c.max_new, nullptr, &msg) == AOTPACK_INVALID_ARGUMENT);
    for (const std::string& n : c.needles) EXPECT(has(msg, n));
  }
  aotpack_generate_options o;
  auto bad_option = [&](const char* needle) {
    EXPECT(generate_code(s, {{1}}, 2, &o, &msg) == AOTPACK_INVALID_ARGUMENT && has(msg, needle));
    std::memset(&o, 0, sizeof(o));
    o.struct_size = sizeof(o);
  };
  std::memset(&o, 0, sizeof(o));
  bad_option("struct_size is not set");
  o.temperature = -1;
  bad_option("temperature is -1");
  o.temperature = std::nanf("");
  bad_option("temperature is nan");
  o.top_k = -3;
  bad_option("top_k is -3");
  o.top_p = 1.5f;
  bad_option("top_p is 1.5");
  o.num_stop_ids = 2;
  bad_option("stop_ids is NULL but num_stop_ids is 2");
  int64_t stop = 40;
  o.stop_ids = &stop;
  o.num_stop_ids = 1;
  bad_option("stop_ids[0] is 40");
  o.reserved[3] = 1;
  bad_option("reserved must be zero");
  aotpack_generate_stats stats_bad{};
  int64_t tok[2];
  size_t count;
  const int64_t one = 1, *prompt = &one;
  size_t len = 1;
  aotpack_status* st = aotpack_session_generate(s, &prompt, &len, 1, 2, nullptr, tok, &count,
                                                &stats_bad, nullptr);
  EXPECT(aotpack_status_code(st) == AOTPACK_INVALID_ARGUMENT &&
         has(aotpack_status_message(st), "aotpack_generate_stats.struct_size"));
  aotpack_status_free(st);
  st = aotpack_session_generate(s, &prompt, &len, 1, 2, nullptr, nullptr, &count, nullptr,
                                nullptr);
  EXPECT(aotpack_status_code(st) == AOTPACK_INVALID_ARGUMENT);
  aotpack_status_free(st);
  EXPECT(stats()[0] + stats()[1] == before);  // nothing launched
  EXPECT(session.generate({{1}}, 2).tokens[0] == fake_gen_expected({1}, 2, 32));  // usable
}
