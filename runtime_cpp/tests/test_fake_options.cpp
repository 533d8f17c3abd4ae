// test_fake_options.cpp — the C API without traps (issue 19), on the fake driver: zeroed
// session options mean the defaults (0.1-sized structs keep their meaning), the run call
// with counts, and load-time messages that say what the bundle needs and what the machine has.
#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "aotpack/aotpack.h"
#include "bundle_builder.hpp"
#include "test_main.hpp"

using namespace aotpack_test;

namespace {

// Captures so far (fake_cuda_stats[2]).
int captures() {
  void* h = dlopen(std::getenv("AOTPACK_LIBCUDA"), RTLD_NOW | RTLD_NOLOAD);
  EXPECT(h != nullptr);
  auto fn = reinterpret_cast<void (*)(int*)>(dlsym(h, "fake_cuda_stats"));
  int s[6];
  fn(s);
  return s[2];
}

struct Loaded {
  TestBundle bundle;
  aotpack_model* model = nullptr;
  float* x = static_cast<float*>(std::aligned_alloc(256, 1024));
  float* y = static_cast<float*>(std::aligned_alloc(256, 1024));
  uint64_t in[1], out[1];
  explicit Loaded(const char* tag) {
    std::memset(x, 0, 1024);
    std::string p = bundle.write(make_temp_dir(tag));
    EXPECT(aotpack_model_load(p.c_str(), nullptr, &model) == nullptr);
    in[0] = reinterpret_cast<uint64_t>(x);
    out[0] = reinterpret_cast<uint64_t>(y);
  }
  ~Loaded() {
    aotpack_model_free(model);
    std::free(x);
    std::free(y);
  }
  // Creates a session with `o`, runs once; returns whether the run captured a CUDA graph.
  bool runs_with_graph(const aotpack_session_options* o) {
    aotpack_session* s = nullptr;
    EXPECT(aotpack_session_create(model, o, &s) == nullptr);
    int before = captures();
    EXPECT(aotpack_session_execute(s, in, 1, nullptr, out, 1, nullptr, nullptr) == nullptr);
    aotpack_session_free(s);
    return captures() == before + 1;
  }
};

std::string status_text(aotpack_status* s, aotpack_code* code) {
  *code = aotpack_status_code(s);
  std::string m = aotpack_status_message(s);
  std::printf("  -> %s: %s\n", aotpack_status_code_name(*code), m.c_str());
  aotpack_status_free(s);
  return m;
}

}  // namespace

TEST(fake_zeroed_session_options_mean_defaults) {
  Loaded l("optzero");
  aotpack_session_options o;
  std::memset(&o, 0, sizeof(o));
  o.struct_size = sizeof(o);
  EXPECT(l.runs_with_graph(&o));  // 0 = the default: graphs on
  EXPECT(l.runs_with_graph(nullptr));
  o.cuda_graphs = AOTPACK_CUDA_GRAPHS_OFF;
  EXPECT(!l.runs_with_graph(&o));
  o.cuda_graphs = AOTPACK_CUDA_GRAPHS_ON;
  EXPECT(l.runs_with_graph(&o));
  // A program built against the 0.1 header: 40-byte struct, 0 there meant "graphs off".
  std::memset(&o, 0, sizeof(o));
  o.struct_size = AOTPACK_SESSION_OPTIONS_V1_SIZE;
  o.skip_pointer_checks = 0x5A5A;  // padding in that layout: ignored
  EXPECT(!l.runs_with_graph(&o));
  o.cuda_graphs = 1;
  EXPECT(l.runs_with_graph(&o));
}

TEST(fake_session_options_refused) {
  Loaded l("optbad");
  aotpack_session_options o;
  std::memset(&o, 0, sizeof(o));
  o.struct_size = sizeof(o);
  o.cuda_graphs = 7;
  aotpack_session* s = nullptr;
  aotpack_code c;
  std::string m = status_text(aotpack_session_create(l.model, &o, &s), &c);
  EXPECT(c == AOTPACK_INVALID_ARGUMENT && has(m, "cuda_graphs is 7"));
  o.cuda_graphs = 0;
  o.state = 4096;  // a model without state takes no state memory
  o.state_bytes = 4096;
  m = status_text(aotpack_session_create(l.model, &o, &s), &c);
  EXPECT(c == AOTPACK_INVALID_ARGUMENT && has(m, "the model has no state"));
}

TEST(fake_execute_checks_counts_and_gives_shapes) {
  Loaded l("execute");
  aotpack_session* s = nullptr;
  EXPECT(aotpack_session_create(l.model, nullptr, &s) == nullptr);
  aotpack_code c;
  uint64_t two[2] = {l.in[0], l.in[0]};
  std::string m = status_text(aotpack_session_execute(s, two, 2, nullptr, l.out, 1, nullptr,
                                                      nullptr), &c);
  EXPECT(c == AOTPACK_INVALID_ARGUMENT && has(m, "1 inputs and 1 outputs, got num_inputs = 2"));
  m = status_text(aotpack_session_execute(s, l.in, 1, nullptr, l.out, 0, nullptr, nullptr), &c);
  EXPECT(c == AOTPACK_INVALID_ARGUMENT && has(m, "num_outputs = 0"));
  aotpack_shape wrong = {2, {5, 64}};
  m = status_text(aotpack_session_execute(s, l.in, 1, &wrong, l.out, 1, nullptr, nullptr), &c);
  EXPECT(c == AOTPACK_INVALID_ARGUMENT && has(m, "input 'x' dim 0 is 5, expected 4"));
  aotpack_shape right = {2, {4, 64}}, got;
  std::memset(&got, 0xFF, sizeof(got));
  EXPECT(aotpack_session_execute(s, l.in, 1, &right, l.out, 1, &got, nullptr) == nullptr);
  EXPECT(got.rank == 2 && got.dims[0] == 4 && got.dims[1] == 64 && got.dims[2] == 0);
  aotpack_session_free(s);
}

TEST(fake_execute_dynamic_output_shapes) {
  TestBundle b = TestBundle::dynamic();
  std::string p = b.write(make_temp_dir("execdyn"));
  aotpack_model* model = nullptr;
  EXPECT(aotpack_model_load(p.c_str(), nullptr, &model) == nullptr);
  aotpack_session* s = nullptr;
  EXPECT(aotpack_session_create(model, nullptr, &s) == nullptr);
  float* x = static_cast<float*>(std::aligned_alloc(256, 64 * 64 * 4));
  float* aux = static_cast<float*>(std::aligned_alloc(256, 64 * 128 * 4));
  float* y = static_cast<float*>(std::aligned_alloc(256, 64 * 64 * 4));
  std::memset(x, 0, 64 * 64 * 4);
  uint64_t in[2] = {reinterpret_cast<uint64_t>(x), reinterpret_cast<uint64_t>(aux)};
  uint64_t out[1] = {reinterpret_cast<uint64_t>(y)};
  aotpack_shape shapes[2] = {{2, {3, 64}}, {2, {3, 6}}}, got;
  aotpack_code c;
  std::string m = status_text(aotpack_session_execute(s, in, 2, nullptr, out, 1, nullptr,
                                                      nullptr), &c);
  EXPECT(c == AOTPACK_INVALID_ARGUMENT && has(m, "input_shapes must not be NULL"));
  EXPECT(aotpack_session_execute(s, in, 2, shapes, out, 1, &got, nullptr) == nullptr);
  EXPECT(got.rank == 2 && got.dims[0] == 3 && got.dims[1] == 64);
  aotpack_session_free(s);
  aotpack_model_free(model);
  std::free(x);
  std::free(aux);
  std::free(y);
}

TEST(fake_device_check_says_need_and_have) {
  TestBundle b;  // sm_90a, min_driver 12080
  std::string p = b.write(make_temp_dir("devmsg"));
  aotpack_model* model = nullptr;
  aotpack_code c;
  setenv("FAKE_CUDA_CC", "80", 1);
  std::string m = status_text(aotpack_model_load(p.c_str(), nullptr, &model), &c);
  EXPECT(c == AOTPACK_DEVICE_MISMATCH);
  EXPECT(has(m, "the bundle needs a GPU of compute capability 9.0 exactly (sm_90a)"));
  EXPECT(has(m, "device 0 (Fake H200) has compute capability 8.0"));
  EXPECT(has(m, "aotpack build --arch sm80"));
  setenv("FAKE_CUDA_CC", "90", 1);
  setenv("FAKE_CUDA_DRIVER_VERSION", "12040", 1);
  m = status_text(aotpack_model_load(p.c_str(), nullptr, &model), &c);
  EXPECT(c == AOTPACK_DRIVER_TOO_OLD);
  EXPECT(has(m, "a driver for CUDA 12.8 (12080) or newer"));
  EXPECT(has(m, "this machine's NVIDIA driver supports CUDA 12.4 (12040)"));
  unsetenv("FAKE_CUDA_DRIVER_VERSION");
  setenv("FAKE_CUDA_CC", "91", 1);  // an sm_90 (not 90a) bundle runs on 9.x, x >= 0
  at(at(b.manifest, "target"), "arch") = jstr("sm_90");
  p = b.write(make_temp_dir("devfam"));
  EXPECT(aotpack_model_load(p.c_str(), nullptr, &model) == nullptr);
  aotpack_model_free(model);
  unsetenv("FAKE_CUDA_CC");
}
