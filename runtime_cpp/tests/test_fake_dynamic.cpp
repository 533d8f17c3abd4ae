// test_fake_dynamic.cpp — bundles whose dims vary at run time (format v2) on the fake driver:
// the symbol/dim queries, output shapes, binding errors, `when` step selection (seen in the
// fake driver's launch log), the plan cache keyed by shape, and a hot path that allocates
// nothing. The bundle is TestBundle::dynamic() (bundle_builder.hpp).
#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "aotpack/aotpack.hpp"
#include "bundle_builder.hpp"
#include "test_main.hpp"

// Counts every allocation of the process (this binary, and libaotpack.so where it uses the
// shared libstdc++): the hot-path test below expects none during repeated runs.
static std::atomic<long> g_allocs{0};
// GCC pairs the replaced operator new with free() across inlining and warns
// (-Wmismatched-new-delete) although both halves here are malloc/free.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpragmas"
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(size_t n) {
  ++g_allocs;
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n) { return operator new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

using namespace aotpack_test;

namespace {

constexpr int kVariantSmall = 5, kVariantBig = 6;  // fake_libcuda.cpp's dyn_add_* variants

void* fake_driver() {
  void* h = dlopen(std::getenv("AOTPACK_LIBCUDA"), RTLD_NOW | RTLD_NOLOAD);
  EXPECT(h != nullptr);
  return h;
}

// Counters: launches, graph launches, captures, encodes, cluster x, PDL launches.
std::vector<int> stats() {
  auto fn = reinterpret_cast<void (*)(int*)>(dlsym(fake_driver(), "fake_cuda_stats"));
  std::vector<int> s(6);
  fn(s.data());
  return s;
}

// Executed dyn_add launches since the last call: {variant, grid x, n} triples.
std::vector<int> launch_log() {
  auto fn = reinterpret_cast<int (*)(int*, int)>(dlsym(fake_driver(), "fake_cuda_launch_log"));
  std::vector<int> out(300);
  int n = fn(out.data(), int(out.size()));
  out.resize(size_t(n < 300 ? n : 300));
  return out;
}

// Host buffers for the largest shape (B = 64), 256-aligned like cudaMalloc.
struct Buffers {
  float *x, *aux, *y;
  Buffers() {
    x = alloc(64 * 64);
    aux = alloc(64 * 128);
    y = alloc(64 * 64);
    for (int i = 0; i < 64 * 64; ++i) x[i] = float(i % 13) - 6.0f;
  }
  ~Buffers() {
    std::free(x);
    std::free(aux);
    std::free(y);
  }
  static float* alloc(size_t n) {
    auto* p = static_cast<float*>(std::aligned_alloc(256, n * 4));
    std::memset(p, 0, n * 4);
    return p;
  }
  std::vector<uint64_t> ins() const {
    return {reinterpret_cast<uint64_t>(x), reinterpret_cast<uint64_t>(aux)};
  }
  std::vector<uint64_t> outs() const { return {reinterpret_cast<uint64_t>(y)}; }
  // y = x + 1.5 w on the first B rows, untouched (0) after them.
  bool correct(const TestBundle& b, int rows) const {
    for (int i = 0; i < 64 * 64; ++i) {
      float want = i < 64 * rows ? x[i] + 1.5f * b.weight[size_t(i % 64)] : 0.0f;
      if (y[i] != want) return false;
    }
    return true;
  }
};

std::vector<aotpack::Shape> shapes_for(int64_t B) { return {{B, 64}, {B, 2 * B}}; }

// The message of the INVALID_ARGUMENT `fn` throws ("" if it throws nothing).
template <typename F>
std::string invalid_argument(F&& fn) {
  try {
    fn();
  } catch (const aotpack::Exception& e) {
    std::printf("  -> %s\n", e.what());
    EXPECT(e.code() == AOTPACK_INVALID_ARGUMENT);
    return e.message();
  }
  return "";
}

}  // namespace

TEST(fake_dyn_queries) {
  aotpack::Model model(TestBundle::dynamic().write(make_temp_dir("dynq")));
  auto syms = model.symbols();
  EXPECT(syms.size() == 1 && syms[0].name == "B" && syms[0].min == 1 && syms[0].max == 64 &&
         syms[0].example == 4);
  auto ins = model.inputs();
  EXPECT(ins[0].shape == aotpack::Shape({-1, 64}) && ins[0].nbytes == 64 * 64 * 4);
  EXPECT(ins[1].shape == aotpack::Shape({-1, -1}) && ins[1].nbytes == 64 * 128 * 4);
  EXPECT(ins[1].dims[1].expr == "2*B" && ins[1].dims[1].min == 2 && ins[1].dims[1].max == 128);
  EXPECT(ins[0].dims[1].is_static() && ins[0].dims[1].min == 64 && ins[0].dims[1].max == 64);
  EXPECT(model.outputs()[0].dims[0].expr == "B");
  const char* expr = "unset";
  int64_t lo = 0, hi = 0;
  aotpack_status* s = aotpack_model_input_dim(model.get(), 0, 0, &expr, &lo, &hi);
  EXPECT(!s && std::string(expr) == "B" && lo == 1 && hi == 64);
  s = aotpack_model_output_dim(model.get(), 0, 1, &expr, nullptr, nullptr);
  EXPECT(!s && expr == nullptr);
  for (aotpack_status* bad : {aotpack_model_input_dim(model.get(), 0, 2, &expr, &lo, &hi),
                              aotpack_model_input_dim(model.get(), 2, 0, &expr, &lo, &hi),
                              aotpack_model_output_dim(model.get(), 0, -1, &expr, &lo, &hi)}) {
    EXPECT(aotpack_status_code(bad) == AOTPACK_INVALID_ARGUMENT);
    aotpack_status_free(bad);
  }
  aotpack_symbol_info si;
  s = aotpack_model_symbol_info(model.get(), 1, &si);
  EXPECT(aotpack_status_code(s) == AOTPACK_INVALID_ARGUMENT);
  aotpack_status_free(s);
  EXPECT(aotpack_model_num_symbols(nullptr) == 0);
  aotpack::Model v1(TestBundle().write(make_temp_dir("dynq1")));  // v1: no symbols, static
  EXPECT(v1.symbols().empty() && v1.inputs()[0].dims[0].is_static() &&
         v1.inputs()[0].dims[0].max == 4);
}

TEST(fake_dyn_output_shapes) {
  aotpack::Model model(TestBundle::dynamic().write(make_temp_dir("dynos")));
  EXPECT(model.output_shapes(shapes_for(3)) == std::vector<aotpack::Shape>({{3, 64}}));
  EXPECT(model.output_shapes(shapes_for(64))[0] == aotpack::Shape({64, 64}));
  EXPECT(has(invalid_argument([&] { model.output_shapes({{3, 64, 1}, {3, 6}}); }),
             "input 'x' has rank 3, expected 2 (shape [B, 64])"));
  EXPECT(has(invalid_argument([&] { model.output_shapes(shapes_for(65)); }),
             "input 'x' dim 0 is 65, outside the range 1..64 of symbol B"));
  EXPECT(has(invalid_argument([&] { model.output_shapes(shapes_for(0)); }),
             "input 'x' dim 0 is 0, outside the range 1..64 of symbol B"));
  EXPECT(has(invalid_argument([&] { model.output_shapes({{3, 64}, {2, 6}}); }),
             "input 'aux' dim 0 is 2 but must equal B = 3 (as input 'x' dim 0 says)"));
  EXPECT(has(invalid_argument([&] { model.output_shapes({{3, 64}, {3, 5}}); }),
             "input 'aux' dim 1 is 5 but must equal 2*B = 6 (B = 3 from input 'x' dim 0)"));
  EXPECT(has(invalid_argument([&] { model.output_shapes({{3, 63}, {3, 6}}); }),
             "input 'x' dim 1 is 63, expected 64"));
  aotpack_shape in[2] = {}, out[1] = {};
  aotpack_status* s = aotpack_model_output_shapes(model.get(), in, 1, out, 1);  // wrong count
  EXPECT(aotpack_status_code(s) == AOTPACK_INVALID_ARGUMENT);
  aotpack_status_free(s);
  s = aotpack_model_output_shapes(model.get(), nullptr, 2, out, 1);  // needs shapes
  EXPECT(aotpack_status_code(s) == AOTPACK_INVALID_ARGUMENT);
  aotpack_status_free(s);
  aotpack::Model v1(TestBundle().write(make_temp_dir("dynos1")));  // v1: NULL inputs allowed
  s = aotpack_model_output_shapes(v1.get(), nullptr, 1, out, 1);
  EXPECT(!s && out[0].rank == 2 && out[0].dims[0] == 4 && out[0].dims[1] == 64);
  EXPECT(v1.output_shapes({{4, 64}})[0] == aotpack::Shape({4, 64}));
  EXPECT(has(invalid_argument([&] { v1.output_shapes({{5, 64}}); }),
             "input 'x' dim 0 is 5, expected 4"));
}

// A symbol no input dim is by itself is read from a dim k*S + c (a torch.export derived Dim,
// a U-Net's image side 16*h): S = (dim - c) / k, refused where that is not whole or in range.
TEST(fake_dyn_derived_dim_binds_its_symbol) {
  TestBundle b = TestBundle::dynamic();
  const char* h = R"({"name": "H", "min": 2, "max": 8, "example": 3})";
  at(b.manifest, "symbols").items.push_back(aotpack::json::parse(h, std::strlen(h), "h"));
  at(at(at(at(b.manifest, "inputs"), 1), "shape"), 1) = jstr("16*H + 1");
  aotpack::Model model(b.write(make_temp_dir("dynderived")));
  EXPECT(model.output_shapes({{3, 64}, {3, 33}})[0] == aotpack::Shape({3, 64}));
  EXPECT(model.output_shapes({{3, 64}, {3, 129}})[0] == aotpack::Shape({3, 64}));
  const char* want = "input 'aux' dim 1 is {}, which is not 16*H + 1 for a whole H in 2..8 "
                     "(the sizes 33, 49, ... 129; the bundle was built for them)";
  for (int64_t bad : {34, 17, 145, 0, -15}) {
    std::string text = want;
    text.replace(text.find("{}"), 2, std::to_string(bad));
    EXPECT(has(invalid_argument([&] { model.output_shapes({{3, 64}, {3, bad}}); }), text));
  }
  Buffers t;
  aotpack::Session session(model);
  session.run(t.ins(), {{5, 64}, {5, 81}}, t.outs());
  EXPECT(t.correct(b, 5));
}

// Each shape runs the step group its `when` selects (B <= 8: dyn_small, grid B; above:
// dyn_big, grid (B + 7)/8), with the evaluated n and tensor map, with and without graphs.
TEST(fake_dyn_when_selects_steps) {
  TestBundle b = TestBundle::dynamic();
  aotpack::Model model(b.write(make_temp_dir("dynwhen")));
  for (bool graph : {true, false}) {
    aotpack::SessionOptions so;
    so.use_cuda_graph = graph;
    aotpack::Session session(model, so);
    launch_log();
    struct Case { int64_t B; int variant, grid; };
    for (Case c : {Case{3, kVariantSmall, 3}, Case{8, kVariantSmall, 8}, Case{9, kVariantBig, 2},
                   Case{64, kVariantBig, 8}, Case{1, kVariantSmall, 1}}) {
      Buffers t;
      session.run(t.ins(), shapes_for(c.B), t.outs());
      EXPECT(t.correct(b, int(c.B)));
      EXPECT(launch_log() == std::vector<int>({c.variant, c.grid, int(64 * c.B)}));
    }
  }
}

TEST(fake_dyn_binding_errors_keep_session_usable) {
  TestBundle b = TestBundle::dynamic();
  aotpack::Model model(b.write(make_temp_dir("dynbind")));
  aotpack::Session session(model);
  Buffers t;
  launch_log();
  EXPECT(has(invalid_argument([&] { session.run(t.ins(), shapes_for(5000), t.outs()); }),
             "input 'x' dim 0 is 5000, outside the range 1..64 of symbol B"));
  EXPECT(has(invalid_argument([&] { session.run(t.ins(), {{2, 64}, {3, 4}}, t.outs()); }),
             "input 'aux' dim 0 is 3 but must equal B = 2 (as input 'x' dim 0 says)"));
  EXPECT(has(invalid_argument([&] { session.run(t.ins(), {{2, 64, 1}, {2, 4}}, t.outs()); }),
             "input 'x' has rank 3, expected 2"));
  EXPECT(launch_log().empty());
  session.run(t.ins(), shapes_for(2), t.outs());  // still usable
  EXPECT(t.correct(b, 2));
  // The cached plan of B = 2 still checks every dim of a later run with the same pointers.
  EXPECT(has(invalid_argument([&] { session.run(t.ins(), {{2, 64}, {2, 5}}, t.outs()); }),
             "input 'aux' dim 1 is 5 but must equal 2*B = 4"));
  EXPECT(launch_log().size() == 3);  // only the good run launched
  // The plain run refuses a model with symbols, naming them and the call to use.
  uint64_t in[2] = {t.ins()[0], t.ins()[1]}, out = t.outs()[0];
  aotpack_status* s = aotpack_session_run(session.get(), in, &out, nullptr);
  std::string msg = aotpack_status_message(s);
  EXPECT(aotpack_status_code(s) == AOTPACK_INVALID_ARGUMENT &&
         has(msg, "aotpack_session_run_shaped") && has(msg, "symbols B"));
  aotpack_status_free(s);
  s = aotpack_session_run_shaped(session.get(), in, nullptr, &out, nullptr);
  EXPECT(aotpack_status_code(s) == AOTPACK_INVALID_ARGUMENT);
  aotpack_status_free(s);
  s = aotpack_session_run_shaped(nullptr, in, nullptr, &out, nullptr);
  EXPECT(aotpack_status_code(s) == AOTPACK_INVALID_ARGUMENT);
  aotpack_status_free(s);
}

// Two shapes with the same pointers are two plans (two captures); coming back to the first
// replays its graph. With max_cached_plans = 1, each change of shape evicts the other plan.
TEST(fake_dyn_plan_cache_keyed_by_shape) {
  TestBundle b = TestBundle::dynamic();
  aotpack::Model model(b.write(make_temp_dir("dyncache")));
  Buffers t;
  for (int max_plans : {0, 1}) {
    aotpack::SessionOptions so;
    so.max_cached_plans = max_plans;
    aotpack::Session session(model, so);
    std::vector<int> before = stats();
    for (int64_t B : {3, 5, 3, 5}) {
      std::memset(t.y, 0, 64 * 64 * 4);
      session.run(t.ins(), shapes_for(B), t.outs());
      EXPECT(t.correct(b, int(B)));
    }
    std::vector<int> after = stats();
    int captures = after[2] - before[2], encodes = after[3] - before[3];
    std::printf("  max_cached_plans=%d: %d captures, %d encodes\n", max_plans, captures, encodes);
    EXPECT(after[1] - before[1] == 4);  // every run replays a graph
    EXPECT(captures == (max_plans == 1 ? 4 : 2) && encodes == captures);
  }
  aotpack::SessionOptions bad;
  bad.max_cached_plans = -1;
  EXPECT(has(invalid_argument([&] { aotpack::Session s(model, bad); }), "max_cached_plans"));
}

// A repeated (shape, pointers) run allocates nothing (the key is compared in place, the dims
// against the cached plan's): counted through the replaced operator new.
TEST(fake_dyn_hot_path_allocates_nothing) {
  TestBundle b = TestBundle::dynamic();
  aotpack::Model model(b.write(make_temp_dir("dynhot")));
  aotpack::Session session(model);
  Buffers t;
  std::vector<uint64_t> ins = t.ins(), outs = t.outs();
  aotpack_shape shapes[2] = {{2, {7, 64}}, {2, {7, 14}}};
  for (int i = 0; i < 3; ++i)  // warm up: the plan, the graph, the fake driver's log
    EXPECT(!aotpack_session_run_shaped(session.get(), ins.data(), shapes, outs.data(), nullptr));
  launch_log();
  long before = g_allocs.load();
  for (int i = 0; i < 100; ++i)
    EXPECT(!aotpack_session_run_shaped(session.get(), ins.data(), shapes, outs.data(), nullptr));
  long allocs = g_allocs.load() - before;
  std::printf("  %ld allocations in 100 runs\n", allocs);
  EXPECT(allocs == 0);
  EXPECT(t.correct(b, 7));
  // A new shape does allocate (a plan): shows the counter sees the library's allocations,
  // unless libstdc++ is linked into libaotpack.so statically (then the check above is moot).
  shapes[0].dims[0] = shapes[1].dims[0] = 6;
  shapes[1].dims[1] = 12;
  before = g_allocs.load();
  EXPECT(!aotpack_session_run_shaped(session.get(), ins.data(), shapes, outs.data(), nullptr));
  if (g_allocs.load() == before)
    std::printf("  note: libaotpack.so's allocations are not visible here (static libstdc++)\n");
}

// A v1 bundle through the shaped call: NULL shapes run as before; given shapes are checked.
TEST(fake_static_run_shaped) {
  TestBundle b;
  aotpack::Model model(b.write(make_temp_dir("dynv1")));
  aotpack::Session session(model);
  Buffers t;
  std::vector<uint64_t> in = {t.ins()[0]};
  EXPECT(!aotpack_session_run_shaped(session.get(), in.data(), nullptr, t.outs().data(), nullptr));
  session.run(in, {{4, 64}}, t.outs());
  EXPECT(has(invalid_argument([&] { session.run(in, {{4, 32}}, t.outs()); }),
             "input 'x' dim 1 is 32, expected 64"));
  EXPECT(has(invalid_argument([&] { session.run(in, {{256}}, t.outs()); }),
             "input 'x' has rank 1, expected 2 (shape [4, 64])"));
  session.run(in, t.outs());
  for (int i = 0; i < 256; ++i) EXPECT(t.y[i] == t.x[i] + 1.5f * b.weight[size_t(i % 64)]);
}
