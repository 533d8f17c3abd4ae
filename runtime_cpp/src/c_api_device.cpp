// c_api_device.cpp — device memory and streams through the C API (aotpack.h, "Device memory
// and streams without the CUDA toolkit"): thin, checked wrappers over the driver calls a C
// program would otherwise need cuda.h and -lcuda for.
#include "aotpack/aotpack.h"
#include "c_api_handles.hpp"
#include "cuda_driver.hpp"
#include "error.hpp"
#include "pointers.hpp"

namespace {

using aotpack::capi::guard;
using aotpack::fail;
namespace cu = aotpack::cu;

// The model, its context made current on this thread.
const aotpack::Model& current(const aotpack_model* model, const char* call) {
  if (!model || !model->impl) fail(AOTPACK_INVALID_ARGUMENT, call, ": model must not be NULL");
  model->impl->make_current();
  return *model->impl;
}

cu::CUstream as_stream(void* s) { return static_cast<cu::CUstream>(s); }

// A copy between host `host` and device range [device, device + nbytes), checked first.
void copy(const aotpack_model* model, uint64_t device, const void* host, uint64_t nbytes,
          void* stream, bool upload) {
  const char* call = upload ? "aotpack_device_upload" : "aotpack_device_download";
  const aotpack::Model& m = current(model, call);
  if (nbytes == 0) return;
  if (!host) fail(AOTPACK_INVALID_ARGUMENT, call, ": the host pointer is NULL");
  aotpack::check_device_range(device, nbytes, m.device_ordinal(),
                              upload ? "the upload's destination" : "the download's source");
  const cu::Driver& d = cu::driver();
  void* h = const_cast<void*>(host);
  cu::CUresult r;
  if (upload)
    r = stream ? d.cuMemcpyHtoDAsync(device, host, size_t(nbytes), as_stream(stream))
               : d.cuMemcpyHtoD(device, host, size_t(nbytes));
  else
    r = stream ? d.cuMemcpyDtoHAsync(h, device, size_t(nbytes), as_stream(stream))
               : d.cuMemcpyDtoH(h, device, size_t(nbytes));
  cu::check(r, upload ? "cuMemcpyHtoD" : "cuMemcpyDtoH", aotpack::cat(nbytes, " bytes"));
}

}  // namespace

aotpack_status* aotpack_device_alloc(const aotpack_model* model, uint64_t nbytes,
                                     uint64_t* out_ptr) {
  if (out_ptr) *out_ptr = 0;
  return guard([&] {
    current(model, "aotpack_device_alloc");
    if (!out_ptr) fail(AOTPACK_INVALID_ARGUMENT, "aotpack_device_alloc: out_ptr is NULL");
    if (nbytes == 0) fail(AOTPACK_INVALID_ARGUMENT, "aotpack_device_alloc: nbytes is 0");
    cu::CUdeviceptr p = 0;
    cu::CUresult r = cu::driver().cuMemAlloc(&p, size_t(nbytes));
    if (r == cu::CUDA_ERROR_OUT_OF_MEMORY)
      fail(AOTPACK_OUT_OF_MEMORY, "aotpack_device_alloc: the device has not ", nbytes,
           " bytes free");
    cu::check(r, "cuMemAlloc", aotpack::cat(nbytes, " bytes"));
    *out_ptr = p;
  });
}

aotpack_status* aotpack_device_free(const aotpack_model* model, uint64_t ptr) {
  return guard([&] {
    current(model, "aotpack_device_free");
    if (ptr) cu::check(cu::driver().cuMemFree(ptr), "cuMemFree", "aotpack_device_free");
  });
}

aotpack_status* aotpack_device_upload(const aotpack_model* model, uint64_t dst, const void* src,
                                      uint64_t nbytes, void* stream) {
  return guard([&] { copy(model, dst, src, nbytes, stream, true); });
}

aotpack_status* aotpack_device_download(const aotpack_model* model, void* dst, uint64_t src,
                                        uint64_t nbytes, void* stream) {
  return guard([&] { copy(model, src, dst, nbytes, stream, false); });
}

aotpack_status* aotpack_stream_create(const aotpack_model* model, void** out_stream) {
  if (out_stream) *out_stream = nullptr;
  return guard([&] {
    current(model, "aotpack_stream_create");
    if (!out_stream) fail(AOTPACK_INVALID_ARGUMENT, "aotpack_stream_create: out_stream is NULL");
    cu::CUstream s = nullptr;
    cu::check(cu::driver().cuStreamCreate(&s, cu::CU_STREAM_NON_BLOCKING), "cuStreamCreate",
              "aotpack_stream_create");
    *out_stream = s;
  });
}

aotpack_status* aotpack_stream_synchronize(const aotpack_model* model, void* stream) {
  return guard([&] {
    current(model, "aotpack_stream_synchronize");
    cu::check(cu::driver().cuStreamSynchronize(as_stream(stream)), "cuStreamSynchronize",
              "the work enqueued on the stream failed");
  });
}

aotpack_status* aotpack_stream_destroy(const aotpack_model* model, void* stream) {
  return guard([&] {
    current(model, "aotpack_stream_destroy");
    if (stream)
      cu::check(cu::driver().cuStreamDestroy(as_stream(stream)), "cuStreamDestroy",
                "aotpack_stream_destroy");
  });
}
