// test_fake_driver.cpp — the device half of the runtime against fake_libcuda.so (CTest sets
// AOTPACK_LIBCUDA to it). "Device" pointers are host memory, so results are checked here.
#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "aotpack/aotpack.hpp"
#include "bundle_builder.hpp"
#include "test_main.hpp"

using namespace aotpack_test;

namespace {

// Counters of the fake driver: launches, graph launches, captures, encodes, cluster x,
// launches with programmatic stream serialization (PDL).
std::vector<int> stats() {
  void* h = dlopen(std::getenv("AOTPACK_LIBCUDA"), RTLD_NOW | RTLD_NOLOAD);
  EXPECT(h != nullptr);
  auto fn = reinterpret_cast<void (*)(int*)>(dlsym(h, "fake_cuda_stats"));
  EXPECT(fn != nullptr);
  std::vector<int> s(6);
  fn(s.data());
  dlclose(h);
  return s;
}

// Host buffers standing in for device tensors (256-aligned like cudaMalloc).
struct Tensors {
  float* x;
  float* y;
  Tensors() {
    x = static_cast<float*>(std::aligned_alloc(256, 1024));
    y = static_cast<float*>(std::aligned_alloc(256, 1024));
    for (int i = 0; i < 256; ++i) x[i] = float(i % 7) - 2.0f;
    std::memset(y, 0, 1024);
  }
  ~Tensors() {
    std::free(x);
    std::free(y);
  }
  uint64_t xp() const { return reinterpret_cast<uint64_t>(x); }
  uint64_t yp() const { return reinterpret_cast<uint64_t>(y); }
  // y must equal x + 1.5 * w (the fake add_kernel) for the test bundle's weight.
  bool correct(const TestBundle& b) const {
    for (int i = 0; i < 256; ++i)
      if (y[i] != x[i] + 1.5f * b.weight[size_t(i % 64)]) return false;
    return true;
  }
};

aotpack_code load_code(const TestBundle& b, const char* tag, std::string* msg = nullptr) {
  std::string p = b.write(make_temp_dir(tag));
  aotpack_model* m = nullptr;
  aotpack_status* s = aotpack_model_load(p.c_str(), nullptr, &m);
  aotpack_code c = aotpack_status_code(s);
  std::printf("  -> %s: %s\n", aotpack_status_code_name(c), aotpack_status_message(s));
  if (msg) *msg = aotpack_status_message(s);
  aotpack_status_free(s);
  aotpack_model_free(m);
  return c;
}

}  // namespace

TEST(fake_run_graph) {
  TestBundle b;
  aotpack::Model model(b.write(make_temp_dir("fakerun")));
  EXPECT(model.inputs().size() == 1 && model.inputs()[0].name == "x");
  EXPECT(model.inputs()[0].shape == std::vector<int64_t>({4, 64}));
  EXPECT(model.outputs()[0].nbytes == 1024 && model.outputs()[0].dtype_name == "f32");
  EXPECT(model.arena_bytes() == 4096 && model.num_kernels() == 1 && model.num_steps() == 1);
  aotpack::Session session(model);
  Tensors t;
  session.run({t.xp()}, {t.yp()}, nullptr);  // legacy default stream: captured elsewhere
  EXPECT(t.correct(b));
  std::vector<int> s = stats();
  EXPECT(s[1] == 1 && s[2] == 1 && s[3] == 1);  // one graph launch, one capture, one encode
  std::memset(t.y, 0, 1024);
  session.run({t.xp()}, {t.yp()}, nullptr);  // same pointers: replay, no re-encode
  EXPECT(t.correct(b));
  s = stats();
  EXPECT(s[1] == 2 && s[2] == 1 && s[3] == 1);
  Tensors t2;  // new pointers: new plan, new capture
  session.run({t2.xp()}, {t2.yp()}, nullptr);
  EXPECT(t2.correct(b));
  s = stats();
  EXPECT(s[1] == 3 && s[2] == 2 && s[3] == 2);
}

TEST(fake_run_no_graph) {
  TestBundle b;
  aotpack::Model model(b.write(make_temp_dir("fakenog")));
  aotpack::SessionOptions so;
  so.use_cuda_graph = false;
  aotpack::Session session(model, so);
  Tensors t;
  for (int i = 0; i < 3; ++i) session.run({t.xp()}, {t.yp()});
  EXPECT(t.correct(b));
  std::vector<int> s = stats();
  EXPECT(s[0] == 3 && s[1] == 0 && s[2] == 0 && s[3] == 1);
}

TEST(fake_plan_cache_eviction) {
  TestBundle b;
  aotpack::Model model(b.write(make_temp_dir("fakelru")));
  aotpack::Session session(model);
  std::vector<Tensors> ts(12);  // more pointer sets than the cache holds
  for (int round = 0; round < 2; ++round)
    for (auto& t : ts) {
      std::memset(t.y, 0, 1024);
      session.run({t.xp()}, {t.yp()});
      EXPECT(t.correct(b));
    }
}

TEST(fake_caller_workspace) {
  TestBundle b;
  aotpack::Model model(b.write(make_temp_dir("fakews")));
  void* ws = std::aligned_alloc(256, 4096);
  aotpack::SessionOptions so;
  so.workspace = reinterpret_cast<uint64_t>(ws) + 16;
  so.workspace_bytes = 4000;
  bool thrown = false;
  try {
    aotpack::Session s(model, so);
  } catch (const aotpack::Exception& e) {
    thrown = e.code() == AOTPACK_INVALID_ARGUMENT;
  }
  EXPECT(thrown);
  so.workspace = reinterpret_cast<uint64_t>(ws);
  thrown = false;
  try {
    aotpack::Session s(model, so);
  } catch (const aotpack::Exception& e) {
    thrown = std::string(e.what()).find("arena_bytes = 4096") != std::string::npos;
  }
  EXPECT(thrown);
  so.workspace_bytes = 4096;
  {
    aotpack::Session s(model, so);
    Tensors t;
    s.run({t.xp()}, {t.yp()});
    EXPECT(t.correct(b));
  }
  std::free(ws);
}

TEST(fake_unaligned_tensormap_address) {
  TestBundle b;
  aotpack::Model model(b.write(make_temp_dir("fakeual")));
  aotpack::Session session(model);
  Tensors t;
  bool thrown = false;
  try {
    session.run({t.xp() + 4}, {t.yp()});
  } catch (const aotpack::Exception& e) {
    std::printf("  -> %s\n", e.what());
    thrown = e.code() == AOTPACK_INVALID_ARGUMENT &&
             std::string(e.what()).find("kernel 'add_0'") != std::string::npos;
  }
  EXPECT(thrown);
  session.run({t.xp()}, {t.yp()});  // the session is still usable
  EXPECT(t.correct(b));
}

TEST(fake_null_input) {
  TestBundle b;
  aotpack::Model model(b.write(make_temp_dir("fakenull")));
  aotpack::Session session(model);
  Tensors t;
  bool thrown = false;
  try {
    session.run({0}, {t.yp()});
  } catch (const aotpack::Exception& e) {
    thrown = e.code() == AOTPACK_INVALID_ARGUMENT;
  }
  EXPECT(thrown);
}

TEST(fake_cc_mismatch) {
  setenv("FAKE_CUDA_CC", "80", 1);
  std::string msg;
  EXPECT(load_code(TestBundle(), "fakecc", &msg) == AOTPACK_DEVICE_MISMATCH);
  EXPECT(msg.find("sm_90a") != std::string::npos && msg.find("8.0") != std::string::npos);
}

TEST(fake_driver_too_old) {
  setenv("FAKE_CUDA_DRIVER_VERSION", "12040", 1);
  std::string msg;
  EXPECT(load_code(TestBundle(), "fakeold", &msg) == AOTPACK_DRIVER_TOO_OLD);
  EXPECT(msg.find("upgrade") != std::string::npos);
}

TEST(fake_smem_too_big) {
  TestBundle b;
  at(at(at(b.manifest, "kernels"), 0), "smem") = jint(300000);
  EXPECT(load_code(b, "fakesmem") == AOTPACK_DEVICE_MISMATCH);
}

TEST(fake_entry_missing) {
  TestBundle b;
  at(at(at(b.manifest, "kernels"), 0), "entry") = jstr("no_such_kernel");
  std::string msg;
  EXPECT(load_code(b, "fakeentry", &msg) == AOTPACK_CORRUPT_BUNDLE);
  EXPECT(msg.find("no_such_kernel") != std::string::npos);
}

TEST(fake_bad_device_ordinal) {
  std::string p = TestBundle().write(make_temp_dir("fakedev"));
  bool thrown = false;
  try {
    aotpack::ModelOptions o;
    o.device = 3;
    aotpack::Model m(p, o);
  } catch (const aotpack::Exception& e) {
    thrown = e.code() == AOTPACK_INVALID_ARGUMENT;
  }
  EXPECT(thrown);
}

TEST(fake_cluster_launch) {
  TestBundle b;
  at(at(at(at(b.manifest, "kernels"), 0), "cluster"), 0) = jint(2);
  at(at(at(b.manifest, "kernels"), 0), "smem") = jint(100000);  // > 48 KiB: opt-in path
  aotpack::Model model(b.write(make_temp_dir("fakeclu")));
  aotpack::Session session(model);
  Tensors t;
  session.run({t.xp()}, {t.yp()});
  EXPECT(t.correct(b));
  EXPECT(stats()[4] == 2);
}

// Launches with the PDL attribute during one run of `model` with `so` (checked for a right y).
static int pdl_launches_in_run(const aotpack::Model& model, const TestBundle& b,
                               const aotpack::SessionOptions& so) {
  aotpack::Session session(model, so);
  Tensors t;
  int before = stats()[5];
  session.run({t.xp()}, {t.yp()});
  EXPECT(t.correct(b));
  return stats()[5] - before;
}

// A kernel the manifest marks "pdl" is launched with the programmatic-serialization attribute
// (next to its cluster attribute), also while capturing; SessionOptions::programmatic_launch =
// false (C: disable_programmatic_launch = 1) turns it off.
TEST(fake_pdl_launch) {
  TestBundle b;
  at(at(at(b.manifest, "kernels"), 0), "pdl") = jbool(true);
  at(at(at(at(b.manifest, "kernels"), 0), "cluster"), 0) = jint(2);
  aotpack::Model model(b.write(make_temp_dir("fakepdl")));
  for (bool graph : {false, true}) {
    aotpack::SessionOptions so;
    so.use_cuda_graph = graph;
    EXPECT(pdl_launches_in_run(model, b, so) == 1);
    EXPECT(stats()[4] == 2);
  }
  aotpack::SessionOptions off;
  off.programmatic_launch = false;
  EXPECT(pdl_launches_in_run(model, b, off) == 0);
}

// Through the C API with zeroed options (all a caller of an earlier release sets: the new
// field sits in what was padding): PDL stays on.
TEST(fake_pdl_default_with_zeroed_c_options) {
  TestBundle b;
  at(at(at(b.manifest, "kernels"), 0), "pdl") = jbool(true);
  std::string p = b.write(make_temp_dir("fakepdlc"));
  aotpack_model* m = nullptr;
  EXPECT(aotpack_model_load(p.c_str(), nullptr, &m) == nullptr);
  aotpack_session_options o;
  std::memset(&o, 0, sizeof(o));
  o.struct_size = sizeof(o);
  aotpack_session* s = nullptr;
  EXPECT(aotpack_session_create(m, &o, &s) == nullptr);
  Tensors t;
  uint64_t in = t.xp(), out = t.yp();
  int before = stats()[5];
  EXPECT(aotpack_session_run(s, &in, &out, nullptr) == nullptr);
  EXPECT(t.correct(b));
  EXPECT(stats()[5] == before + 1);
  aotpack_session_free(s);
  aotpack_model_free(m);
}

// "pdl" must be a boolean: anything else is refused at load, naming the field.
TEST(fake_pdl_not_bool) {
  TestBundle b;
  at(at(at(b.manifest, "kernels"), 0), "pdl") = jint(1);
  bool thrown = false;
  try {
    aotpack::Model model(b.write(make_temp_dir("fakepdlbad")));
  } catch (const aotpack::Exception& e) {
    thrown = std::string(e.what()).find("pdl") != std::string::npos;
  }
  EXPECT(thrown);
}

TEST(fake_external_weights) {
  TestBundle b(true);
  aotpack::Model model(b.write(make_temp_dir("fakeext")));
  aotpack::Session session(model);
  Tensors t;
  session.run({t.xp()}, {t.yp()});
  EXPECT(t.correct(b));
}

TEST(fake_session_outlives_model_handle) {
  TestBundle b;
  aotpack_model* m = nullptr;
  std::string p = b.write(make_temp_dir("fakeown"));
  EXPECT(aotpack_model_load(p.c_str(), nullptr, &m) == nullptr);
  aotpack_session* s = nullptr;
  EXPECT(aotpack_session_create(m, nullptr, &s) == nullptr);
  aotpack_model_free(m);  // the session keeps the model alive
  Tensors t;
  uint64_t in = t.xp(), out = t.yp();
  EXPECT(aotpack_session_run(s, &in, &out, nullptr) == nullptr);
  EXPECT(t.correct(b));
  aotpack_session_free(s);
}

TEST(fake_threads_share_model) {
  TestBundle b;
  aotpack::Model model(b.write(make_temp_dir("fakethr")));
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&, k] {
      aotpack::Session session(model);  // one session per thread, shared model
      Tensors t;
      bool good = true;
      for (int i = 0; i < 20; ++i) {
        std::memset(t.y, 0, 1024);
        session.run({t.xp()}, {t.yp()});
        good = good && t.correct(b);
      }
      ok[size_t(k)] = good;
    });
  for (auto& th : threads) th.join();
  for (int v : ok) EXPECT(v == 1);
}
