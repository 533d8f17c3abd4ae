// model.cpp — load a verified bundle onto a device (docs/manifest.md, device checks + load).
#include "model.hpp"

#include <algorithm>
#include <cstdint>
#include <exception>
#include <map>
#include <thread>

#include "bundle.hpp"
#include "error.hpp"
#include "load_trace.hpp"
#include "weight_stream.hpp"
#include "weight_upload.hpp"

namespace aotpack {

namespace {
constexpr uint64_t kWeightAlign = 256;

// "12.8 (12080)": a driver version as cuDriverGetVersion reports it.
std::string cuda_version(int64_t v) { return cat(v / 1000, ".", v % 1000 / 10, " (", v, ")"); }

// sm_90a (arch-specific features) runs only on 9.0; sm_90 / sm_100f run on the same major
// with a minor at least theirs (the cubin's SASS is forward compatible within a family).
bool exact_arch(const Manifest& m) { return m.arch.empty() || m.arch.back() == 'a'; }

bool cc_fits(const Manifest& m, int major, int minor) {
  if (exact_arch(m)) return major == m.cc_major && minor == m.cc_minor;
  return major == m.cc_major && minor >= m.cc_minor;
}

std::string cc_rule(const Manifest& m) {
  return cat("a GPU of compute capability ", m.cc_major, ".", m.cc_minor,
             exact_arch(m) ? " exactly" : cat(" to ", m.cc_major, ".9"), " (", m.arch, ")");
}
// Above this much dynamic shared memory a kernel must opt in (cuFuncSetAttribute).
constexpr uint32_t kDefaultSmemLimit = 48 * 1024;

// f's error, or null.
template <class F>
std::exception_ptr error_of(const F& f) {
  try {
    f();
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;
}

// Joins a thread when the scope ends, however it ends: a joinable std::thread destroyed ends
// the process.
struct JoinAtEnd {
  std::thread& thread;
  ~JoinAtEnd() {
    if (thread.joinable()) thread.join();
  }
};
}  // namespace

std::shared_ptr<const Model> Model::load(const std::string& path,
                                         const std::string& weights_path, int device,
                                         Verify verify) {
  LoadTrace trace("load (ms since it began)");
  std::shared_ptr<Model> m(new Model);
  m->ordinal_ = device;
  m->load_bundle(path, weights_path, verify, trace);
  trace.mark("host memory freed");
  return m;
}

void Model::load_bundle(const std::string& path, const std::string& weights_path, Verify verify,
                        LoadTrace& trace) {
  // Starting the driver (cuInit, the primary context: ~0.3 s) needs nothing from the bundle,
  // so it runs while the bundle is checked and its first weights are read.
  std::exception_ptr driver_error;
  std::thread driver_thread;
  try {
    driver_thread = std::thread([&] { driver_error = error_of([&] { open_device(); }); });
  } catch (...) {
    // no thread could be started: the driver starts after the bundle instead
  }
  JoinAtEnd join_driver{driver_thread};
  std::unique_ptr<Bundle> b = open_bundle(path, weights_path, verify);
  trace.mark("bundle checked");
  manifest_ = b->manifest;
  // Read -> checksum -> copy to the device, chunk by chunk on several threads: the workers
  // fill their ring slots now and wait for the device; the copy of the last chunk ends soon
  // after its read (weight_stream.hpp, weight_upload.hpp).
  const StreamPlan plan = plan_stream(b->weights, StreamOptions::from_env());
  DeviceUpload upload(plan, manifest_.weights);
  WeightStream stream(plan, b->stream_checksums, &upload);  // stopped first on an error
  stream.start();
  if (driver_thread.joinable()) driver_thread.join();
  else driver_error = error_of([&] { open_device(); });
  trace.mark("driver ready");
  std::exception_ptr device_error =
      driver_error ? driver_error : error_of([&] { start_device(*b, upload, trace); });
  // A bundle error wins over a driver or device error: it is the one to fix first (and the
  // only one on a machine without a GPU), so the weights are read and checked either way.
  if (device_error) upload.detach();
  stream.finish();
  trace.mark("last byte read", stream.last_read());
  trace.mark("weights uploaded");
  check_streamed_weights(*b, stream);  // verified before anything can be launched
  if (device_error) std::rethrow_exception(device_error);
  trace.note(cat(plan.sizes.size(), " weights in ", plan.chunks.size(), " chunks, ",
                 plan.workers, " threads x ", StreamPlan::kSlots, " slots of ",
                 plan.slot_bytes >> 10, " KiB, ", upload.pinned_slots(), " slots pinned, ",
                 upload.unpinned_slots(), " not, ", stream.early_chunks(),
                 " chunks read ahead"));
}  // the bundle's host memory (cubins, the ring) is released here

void Model::start_device(const Bundle& b, DeviceUpload& upload, LoadTrace& trace) {
  check_device();
  make_current();
  allocate_weights(b.weights);
  upload.open(ctx_, weights_base_, weight_offsets_);
  trace.mark("device ready");
  load_modules(b.kernel_cubins);  // while the weights stream in
  trace.mark("cubins loaded");
}

void Model::open_device() {
  const cu::Driver& d = cu::driver();
  dev_ = cu::device(ordinal_);
  cu::check(d.cuDevicePrimaryCtxRetain(&ctx_, dev_), "cuDevicePrimaryCtxRetain", "");
}

void Model::check_device() {
  const cu::Driver& d = cu::driver();
  const Manifest& m = manifest_;
  int version = 0;
  cu::check(d.cuDriverGetVersion(&version), "cuDriverGetVersion", "");
  const std::string needs = cat("the bundle needs ", cc_rule(m), " and a driver for CUDA ",
                                cuda_version(m.min_driver), " or newer");
  if (version < m.min_driver)
    fail(AOTPACK_DRIVER_TOO_OLD, needs, "; this machine's NVIDIA driver supports CUDA ",
         cuda_version(version), ": upgrade the NVIDIA driver");
  char name[256] = {0};
  d.cuDeviceGetName(name, sizeof(name) - 1, dev_);
  int major = cu::attribute(dev_, cu::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, "device check");
  int minor = cu::attribute(dev_, cu::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, "device check");
  if (!cc_fits(m, major, minor))
    fail(AOTPACK_DEVICE_MISMATCH, needs, "; device ", ordinal_, " (", name,
         ") has compute capability ", major, ".", minor, " (driver for CUDA ",
         cuda_version(version), "): rebuild the bundle for this GPU (aotpack build --arch sm",
         major, minor, major >= 9 ? "a" : "", ")");
  int optin = cu::attribute(dev_, cu::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                            "device check");
  for (const KernelSpec& k : m.kernels)
    if (int64_t(k.smem) > optin)
      fail(AOTPACK_DEVICE_MISMATCH, "kernel '", k.name, "' needs ", k.smem,
           " bytes of dynamic shared memory but device ", ordinal_, " (", name, ") allows ",
           optin, " per block: rebuild/retune the bundle for this GPU");
}

void Model::make_current() const {
  const cu::Driver& d = cu::driver();
  cu::CUcontext cur = nullptr;
  // Cheap when already current (the common case on the hot path).
  if (d.cuCtxGetCurrent(&cur) == cu::CUDA_SUCCESS && cur == ctx_) return;
  cu::check(d.cuCtxSetCurrent(ctx_), "cuCtxSetCurrent", "");
}

void Model::load_modules(const std::vector<ByteRange>& kernel_cubins) {
  const cu::Driver& d = cu::driver();
  std::map<uint32_t, cu::CUmodule> by_cubin;  // kernels sharing a cubin share its module
  for (size_t ki = 0; ki < manifest_.kernels.size(); ++ki) {
    const KernelSpec& k = manifest_.kernels[ki];
    std::string what = cat("kernel '", k.name, "' (cubin ", k.cubin, ")");
    cu::CUmodule& mod = by_cubin[k.cubin];
    if (!mod) {
      cu::CUresult r = d.cuModuleLoadData(&mod, kernel_cubins[ki].data);
      if (r == cu::CUDA_SUCCESS) modules_.push_back(mod);
      if (r == cu::CUDA_ERROR_NO_BINARY_FOR_GPU || r == cu::CUDA_ERROR_UNSUPPORTED_PTX_VERSION)
        fail(AOTPACK_DEVICE_MISMATCH, what, ": cuModuleLoadData failed: ", cu::describe(r),
             ": the cubin does not match this GPU/driver; rebuild for this GPU or upgrade "
             "the driver");
      cu::check(r, "cuModuleLoadData", what);
    }
    cu::CUfunction fn = nullptr;
    cu::CUresult r = d.cuModuleGetFunction(&fn, mod, k.entry.c_str());
    if (r == cu::CUDA_ERROR_NOT_FOUND)
      fail(AOTPACK_CORRUPT_BUNDLE, what, ": entry symbol '", k.entry, "' is not in the cubin");
    cu::check(r, "cuModuleGetFunction", what);
    if (k.smem > kDefaultSmemLimit)
      cu::check(d.cuFuncSetAttribute(fn, cu::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                     int(k.smem)),
                "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)", what);
    if (uint64_t(k.cluster[0]) * k.cluster[1] * k.cluster[2] > 8)
      cu::check(d.cuFuncSetAttribute(fn, cu::CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED,
                                     1),
                "cuFuncSetAttribute(NON_PORTABLE_CLUSTER_SIZE_ALLOWED)", what);
    functions_.push_back(fn);
  }
}

void Model::allocate_weights(const WeightSource& weights) {
  uint64_t total = 0;
  for (uint64_t size : weights.size) {
    weight_offsets_.push_back(total);
    total += (size + kWeightAlign - 1) / kWeightAlign * kWeightAlign;
  }
  if (total == 0) return;
  // One allocation for all weights: fewer driver calls, and cuMemAlloc returns 256-aligned
  // memory so every weight starts 256-aligned (TMA needs 16).
  cu::check(cu::driver().cuMemAlloc(&weights_base_, size_t(total)), "cuMemAlloc",
            cat("allocating ", total, " bytes for the weights"));
}

Model::~Model() {
  if (!ctx_) return;  // never got a context: nothing on the device
  LoadTrace trace("free (ms)");
  const cu::Driver& d = cu::driver();
  // Destructors cannot report errors; teardown failures are ignored on purpose. The caller's
  // current context is put back: a load that failed (the context is retained before the
  // bundle is checked) or a model freed on a thread working on another device leaves the
  // thread as it found it.
  cu::CUcontext previous = nullptr;
  d.cuCtxGetCurrent(&previous);
  if (!modules_.empty() || weights_base_) {
    d.cuCtxSetCurrent(ctx_);
    for (cu::CUmodule mod : modules_)
      if (mod) d.cuModuleUnload(mod);
    if (weights_base_) d.cuMemFree(weights_base_);
    d.cuCtxSetCurrent(previous);
  }
  d.cuDevicePrimaryCtxRelease(dev_);
  trace.mark("done");
}

}  // namespace aotpack
