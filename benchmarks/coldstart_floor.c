/* coldstart_floor.c — the floor of issue 19's cold-start target, measured the way aotpack-run
 * is (scripts/coldstart times whole processes):
 *
 *   coldstart_floor            cuInit + cuDevicePrimaryCtxRetain + one cuMemAlloc, then exit:
 *                              what any program using the GPU pays before its first upload
 *                              (with AOTPACK_LOAD_TRACE=1 it says when the memory was there,
 *                              as "aotpack-trace at ready <unix ms>" on stderr: the floor of
 *                              a first output, beside the process's exit)
 *   coldstart_floor --h2d MIB  also the pinned host-to-device bandwidth (GB/s, printed): a
 *                              MIB-sized copy from cuMemHostAlloc'd memory, timed by events,
 *                              the best of 5 (the upload time in the target is bytes / this)
 *
 * libcuda.so.1 (or $AOTPACK_LIBCUDA) is opened with dlopen like the runtime does; no CUDA
 * toolkit is needed:  cc -O2 -o coldstart_floor benchmarks/coldstart_floor.c -ldl
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void* lib;

static void* sym(const char* name) {
  void* f = dlsym(lib, name);
  if (!f) {
    fprintf(stderr, "coldstart_floor: libcuda has no %s\n", name);
    exit(2);
  }
  return f;
}

/* The entry points used, with cuda.h's signatures (handles as void*). */
#define API(ret, name, args) typedef ret(*name##_t) args;
API(int, cuInit, (unsigned))
API(int, cuDeviceGet, (int*, int))
API(int, cuDevicePrimaryCtxRetain, (void**, int))
API(int, cuCtxSetCurrent, (void*))
API(int, cuMemAlloc, (unsigned long long*, size_t))
API(int, cuMemHostAlloc, (void**, size_t, unsigned))
API(int, cuEventCreate, (void**, unsigned))
API(int, cuEventRecord, (void*, void*))
API(int, cuEventSynchronize, (void*))
API(int, cuEventElapsedTime, (float*, void*, void*))
API(int, cuMemcpyHtoDAsync, (unsigned long long, const void*, size_t, void*))
#define CALL(name, versioned) ((name##_t)sym(versioned))

#define CHECK(call)                                                   \
  do {                                                                \
    int r_ = (call);                                                  \
    if (r_) {                                                         \
      fprintf(stderr, "coldstart_floor: %s failed: %d\n", #call, r_); \
      return 1;                                                       \
    }                                                                 \
  } while (0)

/* Pinned host -> device GB/s over `bytes`, the best of 5 copies. */
static int h2d(unsigned long long dptr, size_t bytes) {
  void* host = NULL;
  void *start = NULL, *stop = NULL;
  float ms = 0, best = 1e30f;
  CHECK(CALL(cuMemHostAlloc, "cuMemHostAlloc")(&host, bytes, 0));
  memset(host, 1, bytes);
  CHECK(CALL(cuEventCreate, "cuEventCreate")(&start, 0));
  CHECK(CALL(cuEventCreate, "cuEventCreate")(&stop, 0));
  cuEventElapsedTime_t elapsed = (cuEventElapsedTime_t)dlsym(lib, "cuEventElapsedTime_v2");
  if (!elapsed) elapsed = CALL(cuEventElapsedTime, "cuEventElapsedTime");
  for (int i = 0; i < 5; ++i) {
    CHECK(CALL(cuEventRecord, "cuEventRecord")(start, NULL));
    CHECK(CALL(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2")(dptr, host, bytes, NULL));
    CHECK(CALL(cuEventRecord, "cuEventRecord")(stop, NULL));
    CHECK(CALL(cuEventSynchronize, "cuEventSynchronize")(stop));
    CHECK(elapsed(&ms, start, stop));
    if (ms < best) best = ms;
  }
  printf("h2d_pinned_GBps %.1f\n", (double)bytes / (best * 1e-3) / 1e9);
  return 0;
}

int main(int argc, char** argv) {
  size_t bytes = 1 << 20;
  int bandwidth = argc == 3 && strcmp(argv[1], "--h2d") == 0;
  if (bandwidth) bytes = (size_t)strtoull(argv[2], NULL, 10) << 20;
  const char* path = getenv("AOTPACK_LIBCUDA"); /* as the runtime: the fake driver in tests */
  lib = dlopen(path && *path ? path : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "coldstart_floor: %s\n", dlerror());
    return 2;
  }
  int dev = 0;
  void* ctx = NULL;
  unsigned long long dptr = 0;
  CHECK(CALL(cuInit, "cuInit")(0));
  CHECK(CALL(cuDeviceGet, "cuDeviceGet")(&dev, 0));
  CHECK(CALL(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain")(&ctx, dev));
  CHECK(CALL(cuCtxSetCurrent, "cuCtxSetCurrent")(ctx));
  CHECK(CALL(cuMemAlloc, "cuMemAlloc_v2")(&dptr, bytes));
  const char* trace = getenv("AOTPACK_LOAD_TRACE");
  if (trace && *trace && *trace != '0') {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    fprintf(stderr, "aotpack-trace at ready %.3f\n", now.tv_sec * 1e3 + now.tv_nsec / 1e6);
  }
  return bandwidth ? h2d(dptr, bytes) : 0;
}
