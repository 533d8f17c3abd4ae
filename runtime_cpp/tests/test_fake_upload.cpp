// test_fake_upload.cpp — the weights streamed to the fake device in small chunks
// (AOTPACK_LOAD_CHUNK_KIB=4): every byte lands where the kernels read it, whether verified
// fast, full or not at all, embedded or external, pinned or not; the fake's copies from pinned
// memory run late (fake_host_copies.cpp), so a slot reused or unpinned too early, or a load
// returning before its copies ran, shows as wrong bytes or a counted misuse. A load that fails
// frees what it allocated and pinned.
#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "aotpack/aotpack.h"
#include "bundle_builder.hpp"
#include "test_main.hpp"

using namespace aotpack_test;

namespace {

// A test hook of the fake driver (the library the runtime loads too: the same path).
template <class F>
F* fake_fn(const char* name) {
  void* h = dlopen(std::getenv("AOTPACK_LIBCUDA"), RTLD_NOW | RTLD_LOCAL);
  EXPECT(h != nullptr);
  void* f = dlsym(h, name);
  EXPECT(f != nullptr);
  return reinterpret_cast<F*>(f);  // kept loaded: the runtime holds it anyway
}

struct HostStats {
  uint64_t registered_now, registrations, deferred, misuse;
};
HostStats host_stats() {
  uint64_t s[4];
  fake_fn<void(uint64_t*)>("fake_cuda_host_stats")(s);
  return HostStats{s[0], s[1], s[2], s[3]};
}
int live_allocs() { return fake_fn<int()>("fake_cuda_live_allocs")(); }

// Sets the stream's chunk size and threads for one test.
struct StreamEnv {
  StreamEnv() {
    setenv("AOTPACK_LOAD_CHUNK_KIB", "4", 1);
    setenv("AOTPACK_LOAD_THREADS", "3", 1);
  }
  ~StreamEnv() {
    unsetenv("AOTPACK_LOAD_CHUNK_KIB");
    unsetenv("AOTPACK_LOAD_THREADS");
  }
};

std::vector<uint8_t> pattern(size_t n, unsigned seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = uint8_t(i * (seed * 2 + 1) + i / 509 + seed);
  return v;
}

// w (the kernel's) and three more of odd sizes: ~90 chunks of 4 KiB.
TestBundle chunky(bool external) {
  TestBundle b(external);
  b.add_weight("a", pattern(300001, 1));
  b.add_weight("b", pattern(7, 2));
  b.add_weight("c", pattern(65539, 3));
  return b;
}

uint64_t round256(uint64_t x) { return (x + 255) / 256 * 256; }

// Each weight at the next 256-aligned offset of one allocation (Model::allocate_weights).
void expect_device_weights(const TestBundle& b) {
  uint64_t total = 256;
  for (const auto& e : b.extra_weights) total += round256(e.second.size());
  auto find = fake_fn<uint64_t(uint64_t)>("fake_cuda_find_alloc");
  const uint8_t* d = reinterpret_cast<const uint8_t*>(find(total));
  EXPECT(d != nullptr);
  EXPECT(std::memcmp(d, b.weight.data(), 256) == 0);
  uint64_t off = 256;
  for (const auto& e : b.extra_weights) {
    EXPECT(std::memcmp(d + off, e.second.data(), e.second.size()) == 0);
    off += round256(e.second.size());
  }
}

aotpack_code load(const std::string& path, int verify, aotpack_model** m,
                  std::string* msg = nullptr) {
  aotpack_model_options o;
  std::memset(&o, 0, sizeof(o));
  o.struct_size = sizeof(o);
  o.verify = verify;
  aotpack_status* s = aotpack_model_load(path.c_str(), &o, m);
  aotpack_code c = aotpack_status_code(s);
  std::printf("  -> %s: %s\n", aotpack_status_code_name(c), aotpack_status_message(s));
  if (msg) *msg = aotpack_status_message(s);
  aotpack_status_free(s);
  return c;
}

// y = x + 1.5 * w on the fake add_kernel: the weight the kernel reads is the uploaded one.
bool runs_correctly(aotpack_model* m, const TestBundle& b) {
  std::vector<float> x(256), y(256, 0.0f);
  for (int i = 0; i < 256; ++i) x[size_t(i)] = float(i % 7) - 2.0f;
  aotpack_session* s = nullptr;
  EXPECT(aotpack_session_create(m, nullptr, &s) == nullptr);
  uint64_t in = reinterpret_cast<uint64_t>(x.data()), out = reinterpret_cast<uint64_t>(y.data());
  EXPECT(aotpack_session_run(s, &in, &out, nullptr) == nullptr);
  aotpack_session_free(s);
  for (int i = 0; i < 256; ++i)
    if (y[size_t(i)] != x[size_t(i)] + 1.5f * b.weight[size_t(i % 64)]) return false;
  return true;
}

}  // namespace

TEST(fake_upload_in_chunks) {
  StreamEnv env;
  for (bool external : {false, true})
    for (int verify : {AOTPACK_VERIFY_FAST, AOTPACK_VERIFY_FULL, AOTPACK_VERIFY_NONE}) {
      TestBundle b = chunky(external);
      std::string p = b.write(make_temp_dir("upchunks"));
      HostStats before = host_stats();
      aotpack_model* m = nullptr;
      EXPECT(load(p, verify, &m) == AOTPACK_OK);
      expect_device_weights(b);
      EXPECT(runs_correctly(m, b));
      HostStats after = host_stats();
      EXPECT(after.registered_now == 0);  // the ring is unpinned once the upload is over
      EXPECT(after.registrations > before.registrations && after.deferred > before.deferred);
      EXPECT(after.misuse == 0);
      aotpack_model_free(m);
    }
}

TEST(fake_upload_without_pinning) {
  StreamEnv env;
  setenv("FAKE_CUDA_HOST_REGISTER", "refuse", 1);
  TestBundle b = chunky(true);
  HostStats before = host_stats();
  aotpack_model* m = nullptr;
  EXPECT(load(b.write(make_temp_dir("upunpinned")), AOTPACK_VERIFY_FAST, &m) == AOTPACK_OK);
  expect_device_weights(b);  // copied synchronously from pageable slots instead
  EXPECT(runs_correctly(m, b));
  EXPECT(host_stats().deferred == before.deferred);
  aotpack_model_free(m);
  unsetenv("FAKE_CUDA_HOST_REGISTER");
}

// A bundle whose weights have no fast checksum (aotpack 0.2.0): fast means sha256, read into
// memory first, then streamed from there.
TEST(fake_upload_old_bundle_without_checksums) {
  StreamEnv env;
  TestBundle b = chunky(true);
  for (Value& w : at(b.manifest, "weights").items)
    for (size_t i = 0; i < w.fields.size(); ++i)
      if (w.fields[i].first == "checksum") w.fields.erase(w.fields.begin() + long(i));
  std::string p = b.write(make_temp_dir("upold"));
  aotpack_model* m = nullptr;
  EXPECT(load(p, AOTPACK_VERIFY_FAST, &m) == AOTPACK_OK);
  expect_device_weights(b);
  aotpack_model_free(m);
  b.extra_weights[2].second[70] ^= 1;
  std::string msg;
  EXPECT(load(b.write(make_temp_dir("upoldbad")), AOTPACK_VERIFY_FAST, &m, &msg) ==
         AOTPACK_WEIGHTS_MISMATCH);
  EXPECT(m == nullptr && has(msg, "weight 'c'") && has(msg, "sha256"));
}

// Verify, then launch: a weight whose last chunk is wrong was partly uploaded already; the
// load still fails with a status and leaves nothing allocated or pinned.
TEST(fake_upload_checksum_mismatch_frees_everything) {
  StreamEnv env;
  for (bool external : {false, true}) {
    TestBundle b = chunky(external);
    b.extra_weights[0].second[299999] ^= 0x40;
    std::string p = b.write(make_temp_dir("upbad"));
    const int allocs = live_allocs();
    aotpack_model* m = nullptr;
    std::string msg;
    EXPECT(load(p, AOTPACK_VERIFY_FAST, &m, &msg) == AOTPACK_WEIGHTS_MISMATCH);
    EXPECT(m == nullptr && has(msg, "weight 'a'") && has(msg, "checksum"));
    EXPECT(live_allocs() == allocs);
    HostStats h = host_stats();
    EXPECT(h.registered_now == 0 && h.misuse == 0);
  }
}

// The driver and the device are checked while the weights stream; a bundle error still wins
// over a device error, and a device error alone frees what the load allocated.
TEST(fake_upload_bundle_error_wins_over_device_error) {
  StreamEnv env;
  setenv("FAKE_CUDA_CC", "80", 1);
  TestBundle b = chunky(true);
  const int allocs = live_allocs();
  aotpack_model* m = nullptr;
  EXPECT(load(b.write(make_temp_dir("updev")), AOTPACK_VERIFY_FAST, &m) ==
         AOTPACK_DEVICE_MISMATCH);
  b.extra_weights[1].second[3] ^= 1;
  EXPECT(load(b.write(make_temp_dir("updevbad")), AOTPACK_VERIFY_FAST, &m) ==
         AOTPACK_WEIGHTS_MISMATCH);
  EXPECT(m == nullptr && live_allocs() == allocs && host_stats().registered_now == 0);
  unsetenv("FAKE_CUDA_CC");
}

// A driver slow to start (the process's first load only: cuInit runs once, so one test per
// setting): by default the workers fill their slots and wait; with a read-ahead budget they
// read on into memory of their own and pass it through the slots once the driver is up. Right
// bytes either way, and a flipped byte in the first chunks (read early, given a budget) caught.
void loads_while_the_driver_starts(const char* early_mib) {
  StreamEnv env;
  setenv("FAKE_CUDA_INIT_MS", "200", 1);
  setenv("AOTPACK_LOAD_EARLY_MIB", early_mib, 1);
  {
    TestBundle b = chunky(true);
    aotpack_model* m = nullptr;
    EXPECT(load(b.write(make_temp_dir("upearly")), AOTPACK_VERIFY_FAST, &m) == AOTPACK_OK);
    expect_device_weights(b);
    EXPECT(runs_correctly(m, b));
    HostStats h = host_stats();
    EXPECT(h.registered_now == 0 && h.misuse == 0);
    aotpack_model_free(m);
    b.extra_weights[0].second[5] ^= 1;
    EXPECT(load(b.write(make_temp_dir("upearlybad")), AOTPACK_VERIFY_FAST, &m) ==
           AOTPACK_WEIGHTS_MISMATCH);
  }
  unsetenv("AOTPACK_LOAD_EARLY_MIB");
  unsetenv("FAKE_CUDA_INIT_MS");
}

TEST(fake_upload_waits_for_the_driver) { loads_while_the_driver_starts("0"); }

TEST(fake_upload_reads_ahead_while_the_driver_starts) { loads_while_the_driver_starts("64"); }

// Loads on several threads at once: each its own ring, streams and pinned slots.
TEST(fake_upload_concurrent_loads) {
  StreamEnv env;
  TestBundle b = chunky(true);
  std::string p = b.write(make_temp_dir("upthreads"));
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (size_t t = 0; t < ok.size(); ++t)
    threads.emplace_back([&, t] {
      for (int r = 0; r < 3; ++r) {
        aotpack_model* m = nullptr;
        if (load(p, AOTPACK_VERIFY_FAST, &m) == AOTPACK_OK && runs_correctly(m, b)) ++ok[t];
        aotpack_model_free(m);
      }
    });
  for (std::thread& t : threads) t.join();
  for (int n : ok) EXPECT(n == 3);
  HostStats h = host_stats();
  EXPECT(h.registered_now == 0 && h.misuse == 0);
}
