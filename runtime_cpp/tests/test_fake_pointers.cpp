// test_fake_pointers.cpp — caller pointers the GPU cannot use are refused before any launch
// (cuPointerGetAttribute, once per new pointer set), on the fake driver, whose
// fake_cuda_set_pointer declares what memory an address range is.
#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "aotpack/aotpack.h"
#include "bundle_builder.hpp"
#include "test_main.hpp"

using namespace aotpack_test;

namespace {

enum { kUnknown = 0, kPinnedHost = 1, kDevice = 2, kManaged = 3, kOtherDevice = 4 };

template <typename F>
F fake_fn(const char* name) {
  void* h = dlopen(std::getenv("AOTPACK_LIBCUDA"), RTLD_NOW | RTLD_NOLOAD);
  EXPECT(h != nullptr);
  F fn = reinterpret_cast<F>(dlsym(h, name));
  EXPECT(fn != nullptr);
  return fn;
}

void set_pointer(const void* p, uint64_t size, int kind) {
  fake_fn<void (*)(uint64_t, uint64_t, int)>("fake_cuda_set_pointer")(
      reinterpret_cast<uint64_t>(p), size, kind);
}

int pointer_queries() { return fake_fn<int (*)()>("fake_cuda_pointer_queries")(); }

// One model (the test bundle: x f32[4, 64] -> y f32[4, 64]) and a session on it.
struct Fixture {
  TestBundle bundle;
  aotpack_model* model = nullptr;
  aotpack_session* session = nullptr;
  float* x = static_cast<float*>(std::aligned_alloc(256, 1024));
  float* y = static_cast<float*>(std::aligned_alloc(256, 1024));
  explicit Fixture(const char* tag, const aotpack_session_options* so = nullptr) {
    std::memset(x, 0, 1024);
    std::string p = bundle.write(make_temp_dir(tag));
    EXPECT(aotpack_model_load(p.c_str(), nullptr, &model) == nullptr);
    EXPECT(aotpack_session_create(model, so, &session) == nullptr);
  }
  ~Fixture() {
    aotpack_session_free(session);
    aotpack_model_free(model);
    std::free(x);
    std::free(y);
  }
  // Runs with x, y; returns the status code and its message.
  aotpack_code run(std::string* msg) {
    uint64_t in[1] = {reinterpret_cast<uint64_t>(x)}, out[1] = {reinterpret_cast<uint64_t>(y)};
    aotpack_status* s = aotpack_session_run(session, in, out, nullptr);
    aotpack_code c = aotpack_status_code(s);
    *msg = aotpack_status_message(s);
    std::printf("  -> %s: %s\n", aotpack_status_code_name(c), msg->c_str());
    aotpack_status_free(s);
    return c;
  }
};

// `kind` memory (of `size` bytes) as input x is refused with a message holding `needle`,
// nothing is launched, and the session then runs fine on device memory.
void expect_input_refused(int kind, uint64_t size, const char* needle) {
  Fixture f("ptrbad");
  set_pointer(f.x, size, kind);
  // Whatever follows is not memory either (the fake calls unknown addresses device memory).
  set_pointer(reinterpret_cast<char*>(f.x) + size, 1, kUnknown);
  std::string msg;
  EXPECT(f.run(&msg) == AOTPACK_INVALID_ARGUMENT);
  EXPECT(has(msg, "input 0 ('x')") && has(msg, needle));
  set_pointer(f.x, 0, 0);
  set_pointer(f.x, 1024, kDevice);
  EXPECT(f.run(&msg) == AOTPACK_OK);
  set_pointer(f.x, 0, 0);
  set_pointer(reinterpret_cast<char*>(f.x) + size, 0, 0);
}

}  // namespace

TEST(fake_pointer_host_memory_refused) {
  expect_input_refused(kUnknown, 1024, "not memory the CUDA driver knows");
}

TEST(fake_pointer_pinned_host_refused) {
  expect_input_refused(kPinnedHost, 1024, "is host memory (page-locked or mapped)");
}

TEST(fake_pointer_other_device_refused) {
  expect_input_refused(kOtherDevice, 1024, "memory of device 1 but the model was loaded on device 0");
}

TEST(fake_pointer_allocation_too_small) {
  expect_input_refused(kDevice, 1000, "needs 1024 bytes");
}

TEST(fake_pointer_output_checked_too) {
  Fixture f("ptrout");
  set_pointer(f.y, 1024, kPinnedHost);
  std::string msg;
  EXPECT(f.run(&msg) == AOTPACK_INVALID_ARGUMENT && has(msg, "output 0 ('y')"));
  set_pointer(f.y, 0, 0);
}

TEST(fake_pointer_managed_and_interior_accepted) {
  Fixture f("ptrok");
  set_pointer(f.x, 1024, kManaged);
  std::string msg;
  EXPECT(f.run(&msg) == AOTPACK_OK);
  set_pointer(f.x, 0, 0);
  // x inside a larger device allocation (a caching allocator's block) is fine.
  char* block = static_cast<char*>(std::aligned_alloc(256, 8192));
  std::memset(block, 0, 8192);
  set_pointer(block, 4096, kDevice);
  set_pointer(block + 4096, 4096, kUnknown);  // the end of the allocation
  float* own = f.x;
  f.x = reinterpret_cast<float*>(block + 1024);
  EXPECT(f.run(&msg) == AOTPACK_OK);
  f.x = reinterpret_cast<float*>(block + 3328);  // 768 bytes left: too few
  EXPECT(f.run(&msg) == AOTPACK_INVALID_ARGUMENT && has(msg, "has only 768 bytes"));
  // Two mappings back to back (an allocator's chunks in one virtual range): followed.
  set_pointer(block + 3584, 512, kDevice);
  set_pointer(block, 3584, kDevice);
  set_pointer(block + 4096, 4096, kDevice);
  EXPECT(f.run(&msg) == AOTPACK_OK);  // x at 3328: 256 + 512 bytes, then the next chunk
  f.x = own;
  set_pointer(block + 4096, 4096, kPinnedHost);  // ... unless the next one is not device memory
  Fixture g("ptrchunk");  // a new session: the pointer set above is cached as checked
  float* g_own = g.x;
  g.x = reinterpret_cast<float*>(block + 3328);
  EXPECT(g.run(&msg) == AOTPACK_INVALID_ARGUMENT && has(msg, "has only 768 bytes"));
  g.x = g_own;
  for (size_t at : {size_t(0), size_t(3584), size_t(4096)}) set_pointer(block + at, 0, 0);
  std::free(block);
}

TEST(fake_pointer_checked_once_per_pointer_set) {
  Fixture f("ptronce");
  std::string msg;
  EXPECT(f.run(&msg) == AOTPACK_OK);
  int after_first = pointer_queries();
  for (int i = 0; i < 5; ++i) EXPECT(f.run(&msg) == AOTPACK_OK);
  EXPECT(pointer_queries() == after_first);  // the hot path asks the driver nothing
}

TEST(fake_pointer_workspace_checked) {
  TestBundle b;
  std::string p = b.write(make_temp_dir("ptrws"));
  aotpack_model* model = nullptr;
  EXPECT(aotpack_model_load(p.c_str(), nullptr, &model) == nullptr);  // loads the driver
  char* ws = static_cast<char*>(std::aligned_alloc(256, 4096));
  set_pointer(ws, 4096, kUnknown);
  aotpack_session_options so;
  std::memset(&so, 0, sizeof(so));
  so.struct_size = sizeof(so);
  so.workspace = reinterpret_cast<uint64_t>(ws);
  so.workspace_bytes = 4096;
  aotpack_session* s = nullptr;
  aotpack_status* st = aotpack_session_create(model, &so, &s);
  EXPECT(aotpack_status_code(st) == AOTPACK_INVALID_ARGUMENT);
  EXPECT(has(aotpack_status_message(st), "the workspace"));
  aotpack_status_free(st);
  so.skip_pointer_checks = 1;  // the caller vouches for its memory: no question asked
  EXPECT(aotpack_session_create(model, &so, &s) == nullptr);
  aotpack_session_free(s);
  aotpack_model_free(model);
  set_pointer(ws, 0, 0);
  std::free(ws);
}

namespace {

aotpack_code code_of(aotpack_status* s, const char* needle) {
  aotpack_code c = aotpack_status_code(s);
  std::string msg = aotpack_status_message(s);
  std::printf("  -> %s: %s\n", aotpack_status_code_name(c), msg.c_str());
  aotpack_status_free(s);
  if (needle && !has(msg, needle)) return AOTPACK_INTERNAL;  // the test then fails
  return c;
}

}  // namespace

// A run with nothing but the C API: memory, copies and the stream from aotpack_device_* /
// aotpack_stream_* (examples/embed.c), then what they refuse.
TEST(fake_device_helpers_run_a_model) {
  TestBundle b;
  std::string p = b.write(make_temp_dir("devhelp"));
  aotpack_model* m = nullptr;
  EXPECT(aotpack_model_load(p.c_str(), nullptr, &m) == nullptr);
  aotpack_session* s = nullptr;
  EXPECT(aotpack_session_create(m, nullptr, &s) == nullptr);
  uint64_t x = 0, y = 0;
  EXPECT(aotpack_device_alloc(m, 1024, &x) == nullptr && x != 0 && x % 256 == 0);
  EXPECT(aotpack_device_alloc(m, 1024, &y) == nullptr && y != 0);
  void* stream = nullptr;
  EXPECT(aotpack_stream_create(m, &stream) == nullptr && stream != nullptr);
  float host_x[256], host_y[256];
  for (int i = 0; i < 256; ++i) host_x[i] = 0.5f * float(i % 13) - 2.0f;
  EXPECT(aotpack_device_upload(m, x, host_x, sizeof host_x, nullptr) == nullptr);
  EXPECT(aotpack_session_execute(s, &x, 1, nullptr, &y, 1, nullptr, stream) == nullptr);
  EXPECT(aotpack_device_download(m, host_y, y, sizeof host_y, stream) == nullptr);
  EXPECT(aotpack_stream_synchronize(m, stream) == nullptr);
  for (int i = 0; i < 256; ++i) EXPECT(host_y[i] == host_x[i] + 1.5f * b.weight[size_t(i % 64)]);

  // refused: a copy past the allocation's end, host memory as the device side, NULL host
  // pointers, a NULL model, an empty allocation; each leaves everything usable
  set_pointer(reinterpret_cast<void*>(x + 1024), 1, kUnknown);  // (the fake: device otherwise)
  EXPECT(code_of(aotpack_device_upload(m, x + 512, host_x, 1024, nullptr), "upload") ==
         AOTPACK_INVALID_ARGUMENT);
  set_pointer(reinterpret_cast<void*>(x + 1024), 0, 0);
  set_pointer(host_y, sizeof host_y, kPinnedHost);
  EXPECT(code_of(aotpack_device_download(m, host_x, reinterpret_cast<uint64_t>(host_y), 16,
                                         nullptr), "host") == AOTPACK_INVALID_ARGUMENT);
  set_pointer(host_y, 0, 0);
  EXPECT(code_of(aotpack_device_upload(m, x, nullptr, 16, nullptr), "NULL") ==
         AOTPACK_INVALID_ARGUMENT);
  uint64_t none = 7;  // (a refused call zeroes its out pointer: never x, which is freed below)
  EXPECT(code_of(aotpack_device_alloc(nullptr, 16, &none), "model must not be NULL") ==
         AOTPACK_INVALID_ARGUMENT);
  EXPECT(code_of(aotpack_device_alloc(m, 0, &none), "nbytes is 0") == AOTPACK_INVALID_ARGUMENT);
  EXPECT(none == 0);
  EXPECT(code_of(aotpack_device_alloc(m, uint64_t(1) << 40, &none), "not") ==
         AOTPACK_OUT_OF_MEMORY);
  EXPECT(aotpack_device_upload(m, x, host_x, 0, nullptr) == nullptr);  // nothing to copy
  EXPECT(aotpack_device_download(m, host_y, y, sizeof host_y, nullptr) == nullptr);
  EXPECT(host_y[5] == host_x[5] + 1.5f * b.weight[5]);

  EXPECT(aotpack_stream_destroy(m, stream) == nullptr);
  EXPECT(aotpack_stream_destroy(m, nullptr) == nullptr);
  EXPECT(aotpack_device_free(m, x) == nullptr && aotpack_device_free(m, y) == nullptr);
  EXPECT(aotpack_device_free(m, 0) == nullptr);
  aotpack_session_free(s);
  aotpack_model_free(m);
}
