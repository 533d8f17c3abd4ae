// cuda_driver.cpp — dlopen libcuda.so.1 and resolve the entry points aotpack uses.
#include "cuda_driver.hpp"

#include <dlfcn.h>

#include <cstdlib>

#include "error.hpp"

namespace aotpack {
namespace cu {

namespace {

// Resolves `name` into `fn`; required symbols throw DRIVER_NOT_FOUND (or DRIVER_TOO_OLD: the
// library is there but predates the API, e.g. cuLaunchKernelEx needs CUDA 12.0).
template <typename F>
void resolve(Driver& d, F*& fn, const char* name, const char* fallback = nullptr) {
  void* p = dlsym(d.handle, name);
  if (!p && fallback) p = dlsym(d.handle, fallback);
  if (!p)
    fail(AOTPACK_DRIVER_TOO_OLD, "the NVIDIA driver library '", d.path, "' has no symbol ", name,
         ": the driver is too old for aotpack (needs CUDA 12.0 or newer); upgrade the driver");
  fn = reinterpret_cast<F*>(p);
}

Driver load() {
  Driver d;
  const char* env = std::getenv("AOTPACK_LIBCUDA");
  d.path = env && *env ? env : "libcuda.so.1";
  d.handle = dlopen(d.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!d.handle) {
    const char* err = dlerror();
    fail(AOTPACK_DRIVER_NOT_FOUND, "cannot load the NVIDIA driver library '", d.path, "' (",
         err ? err : "unknown error", "): aotpack needs the NVIDIA GPU driver (libcuda.so.1) "
         "installed; no CUDA toolkit is required. Set AOTPACK_LIBCUDA to its full path if it "
         "is installed in an unusual place.");
  }
  resolve(d, d.cuInit, "cuInit");
  resolve(d, d.cuDriverGetVersion, "cuDriverGetVersion");
  resolve(d, d.cuGetErrorString, "cuGetErrorString");
  resolve(d, d.cuGetErrorName, "cuGetErrorName");
  resolve(d, d.cuDeviceGetCount, "cuDeviceGetCount");
  resolve(d, d.cuDeviceGet, "cuDeviceGet");
  resolve(d, d.cuDeviceGetName, "cuDeviceGetName");
  resolve(d, d.cuDeviceGetAttribute, "cuDeviceGetAttribute");
  resolve(d, d.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  resolve(d, d.cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
  resolve(d, d.cuCtxSetCurrent, "cuCtxSetCurrent");
  resolve(d, d.cuCtxGetCurrent, "cuCtxGetCurrent");
  resolve(d, d.cuModuleLoadData, "cuModuleLoadData");
  resolve(d, d.cuModuleUnload, "cuModuleUnload");
  resolve(d, d.cuModuleGetFunction, "cuModuleGetFunction");
  resolve(d, d.cuFuncSetAttribute, "cuFuncSetAttribute");
  resolve(d, d.cuMemAlloc, "cuMemAlloc_v2");
  resolve(d, d.cuMemFree, "cuMemFree_v2");
  resolve(d, d.cuMemcpyHtoD, "cuMemcpyHtoD_v2");
  resolve(d, d.cuMemcpyDtoH, "cuMemcpyDtoH_v2");
  resolve(d, d.cuPointerGetAttribute, "cuPointerGetAttribute");
  resolve(d, d.cuMemsetD32Async, "cuMemsetD32Async");
  resolve(d, d.cuMemsetD8, "cuMemsetD8_v2");
  resolve(d, d.cuMemsetD8Async, "cuMemsetD8Async");
  resolve(d, d.cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2");
  resolve(d, d.cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2");
  resolve(d, d.cuLaunchKernelEx, "cuLaunchKernelEx");
  resolve(d, d.cuTensorMapEncodeTiled, "cuTensorMapEncodeTiled");
  resolve(d, d.cuStreamCreate, "cuStreamCreate");
  resolve(d, d.cuStreamDestroy, "cuStreamDestroy_v2");
  resolve(d, d.cuStreamSynchronize, "cuStreamSynchronize");
  resolve(d, d.cuStreamIsCapturing, "cuStreamIsCapturing");
  resolve(d, d.cuStreamBeginCapture, "cuStreamBeginCapture_v2");
  resolve(d, d.cuStreamEndCapture, "cuStreamEndCapture");
  resolve(d, d.cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags");
  resolve(d, d.cuGraphLaunch, "cuGraphLaunch");
  resolve(d, d.cuGraphExecDestroy, "cuGraphExecDestroy");
  resolve(d, d.cuGraphDestroy, "cuGraphDestroy");
  resolve(d, d.cuEventCreate, "cuEventCreate");
  resolve(d, d.cuEventDestroy, "cuEventDestroy_v2");
  resolve(d, d.cuEventRecord, "cuEventRecord");
  resolve(d, d.cuEventSynchronize, "cuEventSynchronize");
  // cuEventElapsedTime_v2 appeared in CUDA 12.8; older drivers only have the original.
  resolve(d, d.cuEventElapsedTime, "cuEventElapsedTime_v2", "cuEventElapsedTime");
  d.cuMemHostRegister = reinterpret_cast<decltype(d.cuMemHostRegister)>(
      dlsym(d.handle, "cuMemHostRegister_v2"));
  d.cuMemHostUnregister = reinterpret_cast<decltype(d.cuMemHostUnregister)>(
      dlsym(d.handle, "cuMemHostUnregister"));
  CUresult r = d.cuInit(0);
  if (r != CUDA_SUCCESS) {
    const char* name = nullptr;
    d.cuGetErrorName(r, &name);
    fail(r == CUDA_ERROR_NO_DEVICE ? AOTPACK_DEVICE_MISMATCH : AOTPACK_CUDA_ERROR,
         "cuInit failed: ", name ? name : "unknown error", " (", int(r),
         "): no usable NVIDIA GPU (check nvidia-smi and CUDA_VISIBLE_DEVICES)");
  }
  return d;
}

}  // namespace

const Driver& driver() {
  // A function-local static is initialized once and thread-safely; if load() throws, the
  // next call tries again (so a later, fixed environment can still succeed).
  static const Driver d = load();
  return d;
}

std::string describe(CUresult r) {
  const Driver& d = driver();
  const char* name = nullptr;
  const char* text = nullptr;
  if (d.cuGetErrorName(r, &name) != CUDA_SUCCESS || !name) name = "CUDA_ERROR_UNKNOWN";
  if (d.cuGetErrorString(r, &text) != CUDA_SUCCESS || !text) text = "no description";
  return cat(name, " (", int(r), ": ", text, ")");
}

void check(CUresult r, const char* call, const std::string& context) {
  if (r == CUDA_SUCCESS) return;
  aotpack_code code = r == CUDA_ERROR_OUT_OF_MEMORY ? AOTPACK_OUT_OF_MEMORY : AOTPACK_CUDA_ERROR;
  fail(code, context, context.empty() ? "" : ": ", call, " failed: ", describe(r));
}

CUdevice device(int ordinal) {
  const Driver& d = driver();
  int count = 0;
  check(d.cuDeviceGetCount(&count), "cuDeviceGetCount", "");
  if (ordinal < 0 || ordinal >= count)
    fail(AOTPACK_INVALID_ARGUMENT, "device ", ordinal, " does not exist (", count,
         " CUDA device(s) visible; check CUDA_VISIBLE_DEVICES)");
  CUdevice dev = 0;
  check(d.cuDeviceGet(&dev, ordinal), "cuDeviceGet", "");
  return dev;
}

int attribute(CUdevice dev, CUdevice_attribute a, const std::string& context) {
  int v = 0;
  check(driver().cuDeviceGetAttribute(&v, a, dev), "cuDeviceGetAttribute", context);
  return v;
}

}  // namespace cu
}  // namespace aotpack
