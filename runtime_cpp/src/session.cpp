// session.cpp — run a model: resolve buffers, encode tensor maps, pack kernel parameters
// (cached per pointer set), launch with cuLaunchKernelEx or replay a captured CUDA graph.
#include "session.hpp"

#include <algorithm>
#include <cstring>

#include "dtype.hpp"
#include "error.hpp"

namespace aotpack {

namespace {

// Pointer sets kept per session; each holds an instantiated graph. Callers normally reuse
// a few buffers, so a small LRU is enough and bounds device memory held by graphs.
constexpr size_t kMaxCachedPlans = 8;

size_t slot_size(SlotKind k) {
  switch (k) {
    case SlotKind::I32: case SlotKind::U32: case SlotKind::F32: return 4;
    case SlotKind::FastDivmod: return 12;  // 3 x u32 words (CuTe's fast_divmod_divisor<32>)
    case SlotKind::TensorMap: return sizeof(cu::CUtensorMap);
    default: return 8;
  }
}

// Each slot is stored at its natural alignment; tensor maps at 128 (driver needs >= 64).
size_t slot_align(SlotKind k) {
  if (k == SlotKind::FastDivmod) return 4;
  return k == SlotKind::TensorMap ? alignof(cu::CUtensorMap) : slot_size(k);
}

cu::CUtensorMapDataType tma_dtype(aotpack_dtype d) {
  switch (d) {
    case AOTPACK_DTYPE_BF16: return cu::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    case AOTPACK_DTYPE_F16: return cu::CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    case AOTPACK_DTYPE_F32: return cu::CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
    case AOTPACK_DTYPE_F64: return cu::CU_TENSOR_MAP_DATA_TYPE_FLOAT64;
    case AOTPACK_DTYPE_I32: return cu::CU_TENSOR_MAP_DATA_TYPE_INT32;
    case AOTPACK_DTYPE_I64: return cu::CU_TENSOR_MAP_DATA_TYPE_INT64;
    case AOTPACK_DTYPE_I16: return cu::CU_TENSOR_MAP_DATA_TYPE_UINT16;  // TMA copies bits
    default: return cu::CU_TENSOR_MAP_DATA_TYPE_UINT8;                  // i8, u8
  }
}

// Encodes one tensor map. The manifest lists dims outermost first; the driver wants them
// innermost first, with rank-1 byte strides (the innermost stride is implicitly 1 element).
void encode_tensormap(cu::CUtensorMap* out, const TensorMapSpec& t, uint64_t address,
                      const std::string& where) {
  const size_t r = t.dims.size();
  const uint64_t es = dtype_size(t.dtype);
  cu::cuuint64_t dims[5], strides[5] = {0};
  cu::cuuint32_t box[5], estr[5];
  for (size_t i = 0; i < r; ++i) {
    dims[i] = t.dims[r - 1 - i];
    box[i] = t.box[r - 1 - i];
    estr[i] = 1;
  }
  for (size_t i = 0; i + 1 < r; ++i) strides[i] = t.strides[r - 2 - i] * es;
  if (address % 16 != 0)
    fail(AOTPACK_INVALID_ARGUMENT, where, ": tensor map global address ", reinterpret_cast<const void*>(address),
         " is not 16-byte aligned (TMA requires it): pass 16-aligned input/output tensors");
  cu::check(cu::driver().cuTensorMapEncodeTiled(
                out, tma_dtype(t.dtype), cu::cuuint32_t(r), reinterpret_cast<void*>(address),
                dims, strides, box, estr, cu::CU_TENSOR_MAP_INTERLEAVE_NONE,
                cu::CUtensorMapSwizzle(t.swizzle), cu::CUtensorMapL2promotion(t.l2),
                cu::CUtensorMapFloatOOBfill(t.oob)),
            "cuTensorMapEncodeTiled", where);
}

std::string step_name(const Manifest& m, size_t s) {
  return cat("step ", s, " (kernel '", m.kernels[m.steps[s].kernel].name, "')");
}

}  // namespace

Session::Session(std::shared_ptr<const Model> model, const Options& opts)
    : model_(std::move(model)), use_graph_(opts.use_cuda_graph), pdl_(opts.programmatic_launch) {
  const cu::Driver& d = cu::driver();
  const uint64_t need = model_->manifest().arena_bytes;
  model_->make_current();
  if (opts.workspace) {
    if (opts.workspace % 256 != 0)
      fail(AOTPACK_INVALID_ARGUMENT, "workspace ", reinterpret_cast<const void*>(opts.workspace),
           " is not 256-byte aligned");
    if (opts.workspace_bytes < need)
      fail(AOTPACK_INVALID_ARGUMENT, "workspace has ", opts.workspace_bytes,
           " bytes but the model needs arena_bytes = ", need);
    workspace_ = opts.workspace;
  } else if (need > 0) {
    cu::check(d.cuMemAlloc(&workspace_, size_t(need)), "cuMemAlloc",
              cat("allocating the ", need, "-byte workspace"));
    owns_workspace_ = true;
  }
  if (use_graph_) {
    // Capture happens on a session-owned stream: the caller's stream may be the legacy
    // default stream, which cannot be captured. The graph is then launched on the caller's.
    cu::CUresult r = d.cuStreamCreate(&capture_stream_, cu::CU_STREAM_NON_BLOCKING);
    if (r != cu::CUDA_SUCCESS && owns_workspace_) d.cuMemFree(workspace_);
    cu::check(r, "cuStreamCreate", "creating the capture stream");
  }
  compute_layout();
}

Session::~Session() {
  const cu::Driver& d = cu::driver();
  d.cuCtxSetCurrent(model_->context());
  for (auto& p : cache_)
    if (p->exec) d.cuGraphExecDestroy(p->exec);  // freed asynchronously if still running
  if (capture_stream_) d.cuStreamDestroy(capture_stream_);
  if (owns_workspace_) d.cuMemFree(workspace_);  // cuMemFree waits for pending work
}

void Session::compute_layout() {
  size_t off = 0;
  for (const StepSpec& st : model_->manifest().steps) {
    std::vector<size_t> offs;
    for (const Slot& s : st.args) {
      size_t a = slot_align(s.kind);
      off = (off + a - 1) / a * a;
      offs.push_back(off);
      off += slot_size(s.kind);
    }
    slot_offsets_.push_back(std::move(offs));
  }
  storage_bytes_ = off;
}

uint64_t Session::buffer_address(uint32_t buffer, const uint64_t* inputs,
                                 const uint64_t* outputs) const {
  const BufferSpec& b = model_->manifest().buffers[buffer];
  switch (b.kind) {
    case BufferKind::Input: return inputs[b.index];
    case BufferKind::Output: return outputs[b.index];
    case BufferKind::Weight: return model_->weight_address(b.index);
    case BufferKind::Arena: return workspace_ + b.offset;
  }
  return 0;
}

void Session::build_plan(Plan& p, const uint64_t* inputs, const uint64_t* outputs) {
  const Manifest& m = model_->manifest();
  p.storage.assign((storage_bytes_ + sizeof(cu::CUtensorMap) - 1) / sizeof(cu::CUtensorMap) + 1,
                   cu::CUtensorMap{});
  uint8_t* base = reinterpret_cast<uint8_t*>(p.storage.data());
  p.params.assign(m.steps.size(), {});
  for (size_t s = 0; s < m.steps.size(); ++s) {
    const StepSpec& st = m.steps[s];
    for (size_t a = 0; a < st.args.size(); ++a) {
      const Slot& slot = st.args[a];
      uint8_t* dst = base + slot_offsets_[s][a];
      p.params[s].push_back(dst);
      if (slot.kind == SlotKind::Ptr) {
        uint64_t addr = buffer_address(slot.buffer, inputs, outputs) + slot.offset;
        std::memcpy(dst, &addr, 8);
      } else if (slot.kind == SlotKind::TensorMap) {
        uint64_t addr = buffer_address(slot.buffer, inputs, outputs) + slot.offset;
        encode_tensormap(reinterpret_cast<cu::CUtensorMap*>(dst), slot.tmap, addr,
                         cat(step_name(m, s), " args[", a, "]"));
      } else if (slot.kind == SlotKind::FastDivmod) {
        std::memcpy(dst, slot.fdm, 12);  // fields computed from the divisor at load time
      } else if (slot_size(slot.kind) == 4) {
        uint32_t v = uint32_t(slot.bits);
        std::memcpy(dst, &v, 4);
      } else {
        std::memcpy(dst, &slot.bits, 8);  // i64/u64 value; null is 0
      }
    }
  }
}

Session::Plan& Session::plan_for(const uint64_t* inputs, const uint64_t* outputs) {
  const Manifest& m = model_->manifest();
  const size_t n_in = m.inputs.size(), n_out = m.outputs.size();
  ++clock_;
  // Compared in place: the hot path (same pointers every run) allocates nothing.
  for (auto& p : cache_)
    if (std::equal(inputs, inputs + n_in, p->key.begin()) &&
        std::equal(outputs, outputs + n_out, p->key.begin() + long(n_in))) {
      p->last_used = clock_;
      return *p;
    }
  std::unique_ptr<Plan> p(new Plan);
  p->key.assign(inputs, inputs + n_in);
  p->key.insert(p->key.end(), outputs, outputs + n_out);
  p->last_used = clock_;
  build_plan(*p, inputs, outputs);  // may throw: nothing cached yet
  if (cache_.size() >= kMaxCachedPlans) {
    size_t lru = 0;
    for (size_t i = 1; i < cache_.size(); ++i)
      if (cache_[i]->last_used < cache_[lru]->last_used) lru = i;
    if (cache_[lru]->exec) cu::driver().cuGraphExecDestroy(cache_[lru]->exec);
    cache_.erase(cache_.begin() + long(lru));
  }
  cache_.push_back(std::move(p));
  return *cache_.back();
}

void Session::launch_steps(const Plan& p, cu::CUstream stream) const {
  const Manifest& m = model_->manifest();
  const cu::Driver& d = cu::driver();
  for (size_t s = 0; s < m.steps.size(); ++s) {
    const StepSpec& st = m.steps[s];
    const KernelSpec& k = m.kernels[st.kernel];
    cu::CUlaunchAttribute attrs[2];
    std::memset(attrs, 0, sizeof(attrs));
    cu::CUlaunchConfig cfg;
    std::memset(&cfg, 0, sizeof(cfg));
    cfg.gridDimX = st.grid[0]; cfg.gridDimY = st.grid[1]; cfg.gridDimZ = st.grid[2];
    cfg.blockDimX = k.block[0]; cfg.blockDimY = k.block[1]; cfg.blockDimZ = k.block[2];
    cfg.sharedMemBytes = k.smem;
    cfg.hStream = stream;
    cfg.attrs = attrs;
    if (k.cluster[0] * k.cluster[1] * k.cluster[2] != 1) {
      cu::CUlaunchAttribute& a = attrs[cfg.numAttrs++];
      a.id = cu::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
      a.value.clusterDim.x = k.cluster[0];
      a.value.clusterDim.y = k.cluster[1];
      a.value.clusterDim.z = k.cluster[2];
    }
    // Programmatic dependent launch: the kernel may start (prologue, weight prefetch into L2)
    // while the previous grid finishes; it waits with griddepcontrol.wait before it reads
    // what that grid wrote. Graph capture keeps the programmatic edge.
    if (pdl_ && k.pdl) {
      cu::CUlaunchAttribute& a = attrs[cfg.numAttrs++];
      a.id = cu::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
      a.value.programmaticStreamSerializationAllowed = 1;
    }
    void** params = const_cast<void**>(p.params[s].data());
    cu::check(d.cuLaunchKernelEx(&cfg, model_->function(st.kernel), params, nullptr),
              "cuLaunchKernelEx", step_name(m, s));
  }
}

void Session::capture(Plan& p) {
  const cu::Driver& d = cu::driver();
  // THREAD_LOCAL: other threads (e.g. other sessions) may keep making unsafe calls while we
  // capture; only this thread is restricted, and it only launches kernels.
  cu::check(d.cuStreamBeginCapture(capture_stream_, cu::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
            "cuStreamBeginCapture", "capturing the CUDA graph");
  cu::CUgraph graph = nullptr;
  try {
    launch_steps(p, capture_stream_);
  } catch (...) {
    d.cuStreamEndCapture(capture_stream_, &graph);  // always leave capture mode
    if (graph) d.cuGraphDestroy(graph);
    throw;
  }
  cu::check(d.cuStreamEndCapture(capture_stream_, &graph), "cuStreamEndCapture",
            "capturing the CUDA graph");
  cu::CUresult r = d.cuGraphInstantiateWithFlags(&p.exec, graph, 0);
  d.cuGraphDestroy(graph);  // the executable graph is independent of the template
  if (r != cu::CUDA_SUCCESS) p.exec = nullptr;
  cu::check(r, "cuGraphInstantiateWithFlags", "instantiating the CUDA graph");
}

void Session::run(const uint64_t* inputs, const uint64_t* outputs, cu::CUstream stream) {
  const Manifest& m = model_->manifest();
  if ((!inputs && !m.inputs.empty()) || (!outputs && !m.outputs.empty()))
    fail(AOTPACK_INVALID_ARGUMENT, "input_ptrs/output_ptrs must not be NULL");
  for (size_t i = 0; i < m.inputs.size(); ++i)
    if (!inputs[i] && m.inputs[i].nbytes)
      fail(AOTPACK_INVALID_ARGUMENT, "input ", i, " ('", m.inputs[i].name, "') is a null pointer");
  for (size_t i = 0; i < m.outputs.size(); ++i)
    if (!outputs[i] && m.outputs[i].nbytes)
      fail(AOTPACK_INVALID_ARGUMENT, "output ", i, " ('", m.outputs[i].name,
           "') is a null pointer");
  model_->make_current();
  Plan& p = plan_for(inputs, outputs);
  if (!use_graph_) return launch_steps(p, stream);
  // If the caller is itself capturing this stream (e.g. a torch CUDA graph), launch the
  // kernels directly so they become part of the caller's graph.
  cu::CUstreamCaptureStatus cs = cu::CU_STREAM_CAPTURE_STATUS_NONE;
  cu::check(cu::driver().cuStreamIsCapturing(stream, &cs), "cuStreamIsCapturing", "run");
  if (cs != cu::CU_STREAM_CAPTURE_STATUS_NONE) return launch_steps(p, stream);
  if (!p.exec) capture(p);
  cu::check(cu::driver().cuGraphLaunch(p.exec, stream), "cuGraphLaunch", "run");
}

}  // namespace aotpack
