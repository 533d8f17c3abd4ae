// fake_libcuda.cpp — a stand-in for libcuda.so.1 so CI (no GPU) can exercise the device
// half of the runtime: model load, parameter packing, tensor-map encoding, graph capture and
// replay, aotpack-run --bench and --tune. "Device memory" is host memory; the one kernel it
// knows, `add_kernel` (the test bundle's), runs on the CPU: y[i] = x[i] + alpha * w[i % 64].
// It checks what a real driver would (alignment, tensor-map rules, launch shape) and what
// the test bundle promises (parameter values), and fails the call otherwise.
// Variants of the entry name simulate bad tuning candidates (same parameters):
//   add_kernel_wrong  computes y = x - alpha * w (a wrong answer)
//   add_kernel_hang   never returns (a GPU hang: the tuner must kill the process)
//   add_kernel_crash  kills the process with SIGSEGV
//   add_kernel_fault  fails with CUDA_ERROR_ILLEGAL_ADDRESS, which then sticks to every later
//                     launch/copy/sync call, like a poisoned context
//
// Kernels of the dynamic-shape (v2) test bundle, `dyn_add_small` / `dyn_add_big` (same code,
// two names so tests see which step group ran): parameters ptr x, ptr w, ptr y, tensor map
// over x, i32 n, f32 alpha; y[i] = x[i] + alpha * w[i % 64] for i < n.
//
// Kernel of the generation test bundle (TestBundle::generation()), `gen_step`: parameters
// ptr input_ids, ptr positions, ptr last_index, ptr next_ids, ptr logits, ptr cache (the
// state, i64 [max_batch, max_seq]), i64 B, i64 S, i64 V, i64 max_seq. It writes each token id
// into cache[b, positions[b, s]] (a KV cache written in place), then for each sequence hashes
// cache[b, 0 .. p] (p = the position of its last token) into the next id (fake_gen_next) and
// logits where that id is the unique maximum: a sequence's tokens depend on its whole history
// in the cache, and on nothing of the other sequences.
//
// Pointers (cuPointerGetAttribute): cuMemAlloc'd ranges are device memory of device 0; ranges
// a test declares with fake_cuda_set_pointer have the kind it says (unknown to the driver,
// pinned host, device, managed, device 1); any other address counts as device memory of
// device 0 reaching 1 TiB (tests pass host buffers as "device" memory).
//
// Pinned host memory and asynchronous copies from it: fake_host_copies.cpp.
//
// Knobs (env): FAKE_CUDA_CC (e.g. "80", default "90"), FAKE_CUDA_DRIVER_VERSION (13000),
// FAKE_CUDA_INIT_MS (cuInit takes that long, as a real driver's ~0.2 s).
// fake_cuda_stats() reports counters to tests; fake_cuda_launch_log() the executed launches.
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "cuda_driver.hpp"
#include "fake_host_copies.hpp"

using namespace aotpack::cu;

namespace {

constexpr CUresult kInvalidValue = 1, kNotFound = 500, kInvalidImage = 200,
                   kIllegalAddress = 700;

// Kernel variants, selected by entry name; a CUfunction points at one of these.
enum Variant { kAdd, kWrong, kHang, kCrash, kFault, kDynSmall, kDynBig, kGen, kNumVariants };
const char* const kVariantNames[kNumVariants] = {"add_kernel", "add_kernel_wrong",
                                                 "add_kernel_hang", "add_kernel_crash",
                                                 "add_kernel_fault", "dyn_add_small",
                                                 "dyn_add_big", "gen_step"};
int g_variant_ids[kNumVariants] = {kAdd, kWrong, kHang, kCrash, kFault, kDynSmall, kDynBig,
                                   kGen};
CUresult g_sticky = 0;  // a sticky error (set by add_kernel_fault)

struct Launch {
  int variant = kAdd;
  unsigned grid[3], block[3], smem, cluster[3];
  std::vector<std::vector<uint8_t>> params;  // copied at launch time, like the driver
};
struct FakeStream {
  bool capturing = false;
  std::vector<Launch> captured;
};
struct FakeGraph {
  std::vector<Launch> launches;
};

std::mutex g_mu;
struct Stats {
  int launches = 0, graph_launches = 0, captures = 0, encodes = 0, last_cluster_x = 0;
  int pdl_launches = 0;  // cuLaunchKernelEx calls with PROGRAMMATIC_STREAM_SERIALIZATION = 1
} g_stats;
const char* g_error = "no error";
FakeStream g_default_stream;

// The test kernel's parameter sizes (ptr x, ptr w, ptr y, tensormap, ptr arena, i32 n,
// f32 alpha, null, null), and the dynamic kernels' (ptr x, ptr w, ptr y, tensormap, i32 n,
// f32 alpha).
const std::vector<size_t> kAddParams = {8, 8, 8, 128, 8, 4, 4, 8, 8};
const std::vector<size_t> kDynParams = {8, 8, 8, 128, 4, 4};
const std::vector<size_t> kGenParams = {8, 8, 8, 8, 8, 8, 8, 8, 8, 8};

// cuMemsetD8 / cuMemsetD8Async calls: count, and the last one's address, value and bytes.
uint64_t g_memsets = 0, g_memset_last[3] = {0, 0, 0};

// Address ranges the driver "knows" (start -> size, kind), see fake_cuda_set_pointer.
enum PointerKind { kUnknown = 0, kPinnedHost = 1, kDevice = 2, kManaged = 3, kOtherDevice = 4 };
struct Range {
  uint64_t size;
  int kind;
};
std::mutex g_ptr_mu;
std::map<uint64_t, Range> g_ranges;
int g_pointer_queries = 0;

// Executed launches: variant, grid x, the i32 parameter n (see fake_cuda_launch_log).
std::vector<int> g_launch_log;

int env_int(const char* name, int dflt) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : dflt;
}

CUresult fail_with(const char* why) {
  g_error = why;
  return kInvalidValue;
}

template <typename T>
T param(const Launch& l, size_t i) {
  T v;
  std::memcpy(&v, l.params[i].data(), sizeof(T));
  return v;
}

// The "kernel" itself, in the flavour the entry name asked for.
CUresult run_variant(int variant, const float* x, const float* w, float* y, int32_t n,
                     float alpha) {
  if (variant == kHang)
    for (;;) sleep(1);
  if (variant == kCrash) {
    struct rlimit no_core = {0, 0};  // a deliberate crash must not leave core files behind
    setrlimit(RLIMIT_CORE, &no_core);
    std::signal(SIGSEGV, SIG_DFL);  // die by the signal even where ASan installed a handler
    std::raise(SIGSEGV);
  }
  if (variant == kFault) {
    g_sticky = kIllegalAddress;
    g_error = "an illegal memory access was encountered";
    return kIllegalAddress;
  }
  float sign = variant == kWrong ? -1.0f : 1.0f;
  for (int32_t i = 0; i < n; ++i) y[i] = x[i] + sign * alpha * w[i % 64];
  return 0;
}

// Executes dyn_add_small/big on the CPU: the tensor map must cover x as [rows, 64] with
// rows * 64 >= n (the bundle's tensor map dims are [B, 64]).
CUresult execute_dyn(const Launch& l) {
  float* x = param<float*>(l, 0);
  const float* w = param<const float*>(l, 1);
  float* y = param<float*>(l, 2);
  const uint64_t* tmap = reinterpret_cast<const uint64_t*>(l.params[3].data());
  int32_t n = param<int32_t>(l, 4);
  float alpha = param<float>(l, 5);
  // Reserved up front: the hot-path test counts allocations during runs, ours included.
  if (g_launch_log.capacity() == 0) g_launch_log.reserve(1 << 16);
  if (g_launch_log.size() + 3 <= g_launch_log.capacity())
    g_launch_log.insert(g_launch_log.end(), {l.variant, int(l.grid[0]), n});
  if (!x || !w || !y) return fail_with("null tensor pointer");
  if (tmap[0] != 0xA07A07 || tmap[1] != reinterpret_cast<uint64_t>(x))
    return fail_with("tensor map not encoded for input x");
  if (tmap[2] != 2 || tmap[3] != 64 || tmap[4] * 64 != uint64_t(n) || tmap[5] != 256)
    return fail_with("dynamic tensor map dims/strides do not match n");
  for (int32_t i = 0; i < n; ++i) y[i] = x[i] + alpha * w[i % 64];
  return 0;
}

// Executes gen_step on the CPU (see the file comment).
CUresult execute_gen(const Launch& l) {
  const int64_t* ids = param<const int64_t*>(l, 0);
  const int64_t* pos = param<const int64_t*>(l, 1);
  const int64_t* last = param<const int64_t*>(l, 2);
  int64_t* next = param<int64_t*>(l, 3);
  float* logits = param<float*>(l, 4);
  int64_t* cache = param<int64_t*>(l, 5);
  int64_t B = param<int64_t>(l, 6), S = param<int64_t>(l, 7), V = param<int64_t>(l, 8),
          max_seq = param<int64_t>(l, 9);
  if (!ids || !pos || !last || !next || !logits || !cache) return fail_with("null pointer");
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s) {
      int64_t p = pos[b * S + s];
      if (p < 0 || p >= max_seq) return fail_with("gen_step: position outside the cache");
      cache[b * max_seq + p] = ids[b * S + s];
    }
  for (int64_t b = 0; b < B; ++b) {
    // last_index: the sequence's last token as a row of [B * S] (docs/generation.md)
    if (last[b] < b * S || last[b] >= (b + 1) * S)
      return fail_with("gen_step: last_index outside its sequence's rows");
    int64_t p = pos[last[b]];
    uint64_t h = 0;
    for (int64_t t = 0; t <= p; ++t) h = h * 1000003 + uint64_t(cache[b * max_seq + t]) + 1;
    h ^= h >> 29;
    next[b] = int64_t(h % uint64_t(V));
    for (int64_t v = 0; v < V; ++v)
      logits[b * V + v] = v == next[b] ? 5.0f : float((h >> (v % 16)) & 3) * 0.5f;
  }
  return 0;
}

// Executes add_kernel on the CPU after checking every parameter the bundle defines.
CUresult execute(const Launch& l) {
  ++g_stats.launches;
  if (l.variant == kDynSmall || l.variant == kDynBig) return execute_dyn(l);
  if (l.variant == kGen) return execute_gen(l);
  float* x = param<float*>(l, 0);
  const float* w = param<const float*>(l, 1);
  float* y = param<float*>(l, 2);
  const uint64_t* tmap = reinterpret_cast<const uint64_t*>(l.params[3].data());
  uint64_t arena = param<uint64_t>(l, 4);
  int32_t n = param<int32_t>(l, 5);
  float alpha = param<float>(l, 6);
  if (!x || !w || !y) return fail_with("null tensor pointer");
  if (tmap[0] != 0xA07A07 || tmap[1] != reinterpret_cast<uint64_t>(x))
    return fail_with("tensor map not encoded for input x");
  if (tmap[2] != 2 || tmap[3] != 64 || tmap[4] != 4 || tmap[5] != 256 || tmap[6] != 32 ||
      tmap[7] != 4)
    return fail_with("tensor map dims/strides/box not reversed to innermost-first");
  if (arena == 0 || (arena - 512) % 256 != 0) return fail_with("arena pointer not ws + 512");
  if (param<uint64_t>(l, 7) != 0 || param<uint64_t>(l, 8) != 0) return fail_with("null slot");
  if (n != 256 || alpha != 1.5f) return fail_with("scalar parameters");
  if (l.block[0] != 128 || l.grid[0] % l.cluster[0] != 0) return fail_with("launch shape");
  return run_variant(l.variant, x, w, y, n, alpha);
}

FakeStream* stream_of(CUstream s) {
  return s ? reinterpret_cast<FakeStream*>(s) : &g_default_stream;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) const char* fake_cuda_last_error() { return g_error; }
__attribute__((visibility("default"))) void fake_cuda_stats(int* out6) {
  std::lock_guard<std::mutex> lock(g_mu);
  out6[0] = g_stats.launches;
  out6[1] = g_stats.graph_launches;
  out6[2] = g_stats.captures;
  out6[3] = g_stats.encodes;
  out6[4] = g_stats.last_cluster_x;
  out6[5] = g_stats.pdl_launches;
}
// Copies up to `max` ints of the launch log (triples: variant — 5 dyn_add_small, 6
// dyn_add_big —, grid x, parameter n) to `out`, clears the log, returns the ints it held.
__attribute__((visibility("default"))) int fake_cuda_launch_log(int* out, int max) {
  std::lock_guard<std::mutex> lock(g_mu);
  int n = int(g_launch_log.size());
  for (int i = 0; i < n && i < max; ++i) out[i] = g_launch_log[size_t(i)];
  g_launch_log.clear();
  return n;
}

// cuMemsetD8 / cuMemsetD8Async calls so far; out3 = the last one's address, value, bytes.
__attribute__((visibility("default"))) uint64_t fake_cuda_memsets(uint64_t* out3) {
  std::lock_guard<std::mutex> lock(g_mu);
  for (int i = 0; i < 3; ++i) out3[i] = g_memset_last[i];
  return g_memsets;
}

// Declares [start, start + size) as memory of `kind` (0 unknown to the driver, 1 pinned host,
// 2 device, 3 managed, 4 device 1); size 0 forgets the range starting at `start`.
__attribute__((visibility("default"))) void fake_cuda_set_pointer(uint64_t start, uint64_t size,
                                                                  int kind) {
  std::lock_guard<std::mutex> lock(g_ptr_mu);
  if (size == 0) g_ranges.erase(start);
  else g_ranges[start] = Range{size, kind};
}
// cuPointerGetAttribute calls so far (the hot path must make none).
__attribute__((visibility("default"))) int fake_cuda_pointer_queries() {
  std::lock_guard<std::mutex> lock(g_ptr_mu);
  return g_pointer_queries;
}

#define API extern "C" __attribute__((visibility("default"))) CUresult

API cuInit(unsigned) {
  usleep(useconds_t(env_int("FAKE_CUDA_INIT_MS", 0)) * 1000);  // a driver slow to start
  return 0;
}
API cuDriverGetVersion(int* v) { *v = env_int("FAKE_CUDA_DRIVER_VERSION", 13000); return 0; }
API cuGetErrorString(CUresult r, const char** s) { *s = r ? g_error : "no error"; return 0; }
API cuGetErrorName(CUresult r, const char** s) {
  *s = r == kInvalidValue     ? "CUDA_ERROR_INVALID_VALUE"
       : r == kIllegalAddress ? "CUDA_ERROR_ILLEGAL_ADDRESS"
       : r                    ? "CUDA_ERROR_FAKE"
                              : "CUDA_SUCCESS";
  return 0;
}
API cuDeviceGetCount(int* n) { *n = 1; return 0; }
API cuDeviceGet(CUdevice* d, int ordinal) { *d = ordinal; return ordinal == 0 ? 0 : 101; }
API cuDeviceGetName(char* name, int len, CUdevice) {
  std::strncpy(name, "Fake H200", size_t(len));
  return 0;
}
API cuDeviceGetAttribute(int* v, CUdevice_attribute a, CUdevice) {
  int cc = env_int("FAKE_CUDA_CC", 90);
  switch (a) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = cc / 10; return 0;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = cc % 10; return 0;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = 132; return 0;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *v = 232448; return 0;
  }
  return kInvalidValue;
}
static int g_ctx_storage;
static thread_local CUcontext t_current = nullptr;
API cuDevicePrimaryCtxRetain(CUcontext* c, CUdevice) {
  *c = reinterpret_cast<CUcontext>(&g_ctx_storage);
  return 0;
}
API cuDevicePrimaryCtxRelease_v2(CUdevice) { return 0; }
API cuCtxSetCurrent(CUcontext c) { t_current = c; return 0; }
API cuCtxGetCurrent(CUcontext* c) { *c = t_current; return 0; }

API cuModuleLoadData(CUmodule* m, const void* image) {
  if (!t_current) return fail_with("no current context");
  if (std::memcmp(image, "\x7f" "ELF", 4) != 0) return kInvalidImage;
  *m = reinterpret_cast<CUmodule>(new int(1));
  return 0;
}
API cuModuleUnload(CUmodule m) { delete reinterpret_cast<int*>(m); return 0; }
API cuModuleGetFunction(CUfunction* f, CUmodule, const char* name) {
  for (int v = 0; v < kNumVariants; ++v)
    if (std::strcmp(name, kVariantNames[v]) == 0) {
      *f = reinterpret_cast<CUfunction>(&g_variant_ids[v]);
      return 0;
    }
  return kNotFound;
}
API cuFuncSetAttribute(CUfunction, CUfunction_attribute a, int v) {
  if (a == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES && v > 232448)
    return fail_with("smem over the opt-in limit");
  return 0;
}

// cuMemAlloc'd allocations not freed yet (a failed load must free what it allocated).
static std::atomic<int> g_live_allocs{0};
__attribute__((visibility("default"))) int fake_cuda_live_allocs() { return g_live_allocs; }
// The address of a live allocation of exactly `size` bytes (the highest one), or 0.
__attribute__((visibility("default"))) uint64_t fake_cuda_find_alloc(uint64_t size) {
  std::lock_guard<std::mutex> lock(g_ptr_mu);
  for (auto it = g_ranges.rbegin(); it != g_ranges.rend(); ++it)
    if (it->second.kind == kDevice && it->second.size == size) return it->first;
  return 0;
}

API cuMemAlloc_v2(CUdeviceptr* p, size_t n) {
  if (n > (size_t(64) << 30)) return 2;  // CUDA_ERROR_OUT_OF_MEMORY: a 64 GiB "device"
  void* mem = std::aligned_alloc(256, (n + 255) / 256 * 256);
  if (!mem) return 2;
  ++g_live_allocs;
  // Garbage, like fresh device memory; only the first MiB: a big arena (a fuzzed bundle may
  // ask for GBs, legitimately) must not cost seconds of memset.
  std::memset(mem, 0xCD, n < (1u << 20) ? n : (1u << 20));
  *p = reinterpret_cast<CUdeviceptr>(mem);
  fake_cuda_set_pointer(*p, n ? n : 1, kDevice);
  return 0;
}
API cuMemFree_v2(CUdeviceptr p) {
  uint64_t size = 0;
  {
    std::lock_guard<std::mutex> lock(g_ptr_mu);
    auto it = g_ranges.find(p);
    if (it != g_ranges.end()) size = it->second.size;
  }
  fake_copies::device_freed(p, size);
  fake_cuda_set_pointer(p, 0, 0);
  std::free(reinterpret_cast<void*>(p));
  --g_live_allocs;
  return 0;
}
API cuMemHostRegister_v2(void* p, size_t n, unsigned flags) {
  return fake_copies::host_register(p, n, flags);
}
API cuMemHostUnregister(void* p) { return fake_copies::host_unregister(p); }
API cuPointerGetAttribute(void* data, CUpointer_attribute attr, CUdeviceptr p) {
  std::lock_guard<std::mutex> lock(g_ptr_mu);
  ++g_pointer_queries;
  if (g_sticky) return g_sticky;
  uint64_t start = p, size = uint64_t(1) << 40;
  int kind = kDevice;
  auto it = g_ranges.upper_bound(p);
  if (it != g_ranges.begin() && p - (--it)->first < it->second.size) {
    start = it->first;
    size = it->second.size;
    kind = it->second.kind;
  }
  if (kind == kUnknown) return fail_with("pointer unknown to the driver");
  switch (attr) {
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: *static_cast<unsigned*>(data) = kind == kManaged; break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      *static_cast<unsigned*>(data) = kind == kPinnedHost ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
      break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
      *static_cast<int*>(data) = kind == kOtherDevice ? 1 : 0;
      break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *static_cast<CUdeviceptr*>(data) = start; break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *static_cast<size_t*>(data) = size_t(size); break;
    default: return fail_with("cuPointerGetAttribute: attribute the fake does not know");
  }
  return 0;
}
API cuMemcpyHtoD_v2(CUdeviceptr d, const void* s, size_t n) {
  if (g_sticky) return g_sticky;
  std::memcpy(reinterpret_cast<void*>(d), s, n);
  return 0;
}
API cuMemcpyDtoH_v2(void* d, CUdeviceptr s, size_t n) {
  if (g_sticky) return g_sticky;
  std::memcpy(d, reinterpret_cast<const void*>(s), n);
  return 0;
}
API cuMemsetD32Async(CUdeviceptr d, unsigned int value, size_t n, CUstream) {
  if (g_sticky) return g_sticky;
  if (d % 4 != 0) return fail_with("cuMemsetD32Async: destination not 4-byte aligned");
  uint32_t* p = reinterpret_cast<uint32_t*>(d);
  for (size_t i = 0; i < n; ++i) p[i] = value;
  return 0;
}

static CUresult memset8(CUdeviceptr d, unsigned char value, size_t n) {
  if (g_sticky) return g_sticky;
  // Only the first MiB, as cuMemAlloc fills only that much: a fuzzed bundle may ask for GBs
  // of state (legitimately), which must not cost seconds (or the machine's memory) here.
  std::memset(reinterpret_cast<void*>(d), value, n < (1u << 20) ? n : (1u << 20));
  std::lock_guard<std::mutex> lock(g_mu);
  ++g_memsets;
  g_memset_last[0] = d;
  g_memset_last[1] = value;
  g_memset_last[2] = n;
  return 0;
}
API cuMemsetD8_v2(CUdeviceptr d, unsigned char value, size_t n) { return memset8(d, value, n); }
API cuMemsetD8Async(CUdeviceptr d, unsigned char value, size_t n, CUstream) {
  return memset8(d, value, n);
}
// The fake's streams run kernels at once; a copy from pinned memory waits for its stream to
// be synchronized (fake_host_copies.cpp), one from pageable memory runs now.
API cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void* s, size_t n, CUstream stream) {
  if (g_sticky) return g_sticky;
  if (!fake_copies::copy_async(d, s, n, stream)) std::memcpy(reinterpret_cast<void*>(d), s, n);
  return 0;
}
API cuMemcpyDtoHAsync_v2(void* d, CUdeviceptr s, size_t n, CUstream) {
  if (g_sticky) return g_sticky;
  std::memcpy(d, reinterpret_cast<const void*>(s), n);
  return 0;
}

API cuTensorMapEncodeTiled(CUtensorMap* m, CUtensorMapDataType, cuuint32_t rank, void* addr,
                           const cuuint64_t* dims, const cuuint64_t* strides,
                           const cuuint32_t* box, const cuuint32_t* estr,
                           CUtensorMapInterleave il, CUtensorMapSwizzle, CUtensorMapL2promotion,
                           CUtensorMapFloatOOBfill) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (reinterpret_cast<uintptr_t>(m) % 64 != 0) return fail_with("tensor map not 64-aligned");
  if (reinterpret_cast<uintptr_t>(addr) % 16 != 0) return fail_with("global address alignment");
  if (rank < 1 || rank > 5 || il != CU_TENSOR_MAP_INTERLEAVE_NONE) return fail_with("rank");
  for (cuuint32_t i = 0; i + 1 < rank; ++i)
    if (strides[i] % 16 != 0) return fail_with("stride not a multiple of 16");
  for (cuuint32_t i = 0; i < rank; ++i)
    if (box[i] < 1 || box[i] > 256 || estr[i] != 1) return fail_with("box/element strides");
  ++g_stats.encodes;
  std::memset(m, 0, sizeof(*m));
  m->opaque[0] = 0xA07A07;
  m->opaque[1] = reinterpret_cast<uint64_t>(addr);
  m->opaque[2] = rank;
  m->opaque[3] = dims[0];
  m->opaque[4] = rank > 1 ? dims[1] : 0;
  m->opaque[5] = rank > 1 ? strides[0] : 0;
  m->opaque[6] = box[0];
  m->opaque[7] = rank > 1 ? box[1] : 0;
  return 0;
}

API cuLaunchKernelEx(const CUlaunchConfig* c, CUfunction f, void** params, void** extra) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_sticky) return g_sticky;
  if (extra) return fail_with("extra must be NULL");
  Launch l;
  l.variant = *reinterpret_cast<const int*>(f);
  unsigned g[3] = {c->gridDimX, c->gridDimY, c->gridDimZ};
  unsigned b[3] = {c->blockDimX, c->blockDimY, c->blockDimZ};
  std::memcpy(l.grid, g, sizeof(g));
  std::memcpy(l.block, b, sizeof(b));
  l.smem = c->sharedMemBytes;
  l.cluster[0] = l.cluster[1] = l.cluster[2] = 1;
  for (unsigned i = 0; i < c->numAttrs; ++i) {
    if (c->attrs[i].id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION) {
      if (c->attrs[i].value.programmaticStreamSerializationAllowed != 1)
        return fail_with("programmatic serialization attribute not 1");
      ++g_stats.pdl_launches;
      continue;
    }
    if (c->attrs[i].id != CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) return fail_with("attribute");
    l.cluster[0] = c->attrs[i].value.clusterDim.x;
    l.cluster[1] = c->attrs[i].value.clusterDim.y;
    l.cluster[2] = c->attrs[i].value.clusterDim.z;
  }
  g_stats.last_cluster_x = int(l.cluster[0]);
  const std::vector<size_t>& sizes = l.variant == kGen                             ? kGenParams
                                     : l.variant == kDynSmall || l.variant == kDynBig ? kDynParams
                                                                                      : kAddParams;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const uint8_t* p = static_cast<const uint8_t*>(params[i]);
    if (sizes[i] == 128 && reinterpret_cast<uintptr_t>(p) % 64 != 0)
      return fail_with("tensor map parameter not 64-aligned");
    l.params.emplace_back(p, p + sizes[i]);
  }
  FakeStream* s = stream_of(c->hStream);
  if (s->capturing) {
    s->captured.push_back(std::move(l));
    return 0;
  }
  return execute(l);
}

API cuStreamCreate(CUstream* s, unsigned) {
  *s = reinterpret_cast<CUstream>(new FakeStream);
  return 0;
}
API cuStreamDestroy_v2(CUstream s) {
  fake_copies::stream_destroyed(s);
  delete reinterpret_cast<FakeStream*>(s);
  return 0;
}
API cuStreamSynchronize(CUstream s) {
  fake_copies::stream_synchronize(s);
  return g_sticky;
}
API cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus* st) {
  *st = stream_of(s)->capturing ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
  return 0;
}
API cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode) {
  if (!s) return fail_with("the legacy default stream cannot be captured");
  std::lock_guard<std::mutex> lock(g_mu);
  stream_of(s)->capturing = true;
  stream_of(s)->captured.clear();
  ++g_stats.captures;
  return 0;
}
API cuStreamEndCapture(CUstream s, CUgraph* g) {
  std::lock_guard<std::mutex> lock(g_mu);
  FakeStream* fs = stream_of(s);
  if (!fs->capturing) return fail_with("not capturing");
  fs->capturing = false;
  *g = reinterpret_cast<CUgraph>(new FakeGraph{std::move(fs->captured)});
  return 0;
}
API cuGraphInstantiateWithFlags(CUgraphExec* e, CUgraph g, unsigned long long) {
  *e = reinterpret_cast<CUgraphExec>(new FakeGraph(*reinterpret_cast<FakeGraph*>(g)));
  return 0;
}
API cuGraphLaunch(CUgraphExec e, CUstream) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_sticky) return g_sticky;
  ++g_stats.graph_launches;
  for (const Launch& l : reinterpret_cast<FakeGraph*>(e)->launches)
    if (CUresult r = execute(l)) return r;
  return 0;
}
API cuGraphExecDestroy(CUgraphExec e) { delete reinterpret_cast<FakeGraph*>(e); return 0; }
API cuGraphDestroy(CUgraph g) { delete reinterpret_cast<FakeGraph*>(g); return 0; }

static std::atomic<int> g_event_clock{0};  // events are recorded from many threads
API cuEventCreate(CUevent* e, unsigned) {
  *e = reinterpret_cast<CUevent>(new int(0));
  return 0;
}
API cuEventDestroy_v2(CUevent e) {
  fake_copies::event_destroyed(e);
  delete reinterpret_cast<int*>(e);
  return 0;
}
API cuEventRecord(CUevent e, CUstream s) {
  *reinterpret_cast<int*>(e) = ++g_event_clock;
  fake_copies::event_recorded(e, s);
  return 0;
}
API cuEventSynchronize(CUevent e) {
  fake_copies::event_synchronize(e);
  return g_sticky;
}
API cuEventElapsedTime_v2(float* ms, CUevent a, CUevent b) {
  // 0.25 ms per event tick: deterministic "timings" for the bench output.
  *ms = 0.25f * float(*reinterpret_cast<int*>(b) - *reinterpret_cast<int*>(a));
  return 0;
}

}  // extern "C"
