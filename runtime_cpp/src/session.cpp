// session.cpp — run a model: bind the shape (v2), resolve buffers, encode tensor maps, pack
// kernel parameters (cached per shape and pointer set), launch with cuLaunchKernelEx or replay
// a captured CUDA graph.
#include "session.hpp"

#include <algorithm>
#include <cstring>

#include "dtype.hpp"
#include "error.hpp"
#include "generate.hpp"
#include "pointers.hpp"

namespace aotpack {

namespace {

// ShapePlan lays parameters out with 128-byte tensor maps at 128-byte alignment (slot_size).
static_assert(sizeof(cu::CUtensorMap) == 128 && alignof(cu::CUtensorMap) == 128,
              "the parameter layout of shape_plan.cpp assumes 128-byte tensor maps");

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
void encode_tensormap(cu::CUtensorMap* out, const TensorMap& t, uint64_t address,
                      const std::string& where) {
  const size_t r = t.rank;
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

// Zeroes `nbytes` at `ptr` before returning: cuMemsetD8 is ordered on the legacy default
// stream, and runs may come on any stream.
void zero_now(uint64_t ptr, uint64_t nbytes, const std::string& what) {
  const cu::Driver& d = cu::driver();
  cu::check(d.cuMemsetD8(ptr, 0, size_t(nbytes)), "cuMemsetD8", what);
  cu::check(d.cuStreamSynchronize(nullptr), "cuStreamSynchronize", what);
}

std::string step_name(const Manifest& m, const Step& st) {
  return cat("step ", st.index, " (kernel '", m.kernels[st.kernel].name, "')");
}

}  // namespace

Session::Session(std::shared_ptr<const Model> model, const Options& opts)
    : model_(std::move(model)),
      use_graph_(opts.use_cuda_graph),
      pdl_(opts.programmatic_launch),
      check_ptrs_(opts.check_pointers),
      max_plans_(opts.max_cached_plans ? opts.max_cached_plans : 8),
      syms_(model_->manifest().symbols.size()) {
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
    if (check_ptrs_ && need > 0)
      check_device_range(opts.workspace, need, model_->device_ordinal(), "the workspace");
    workspace_ = opts.workspace;
  } else if (need > 0) {
    cu::check(d.cuMemAlloc(&workspace_, size_t(need)), "cuMemAlloc",
              cat("allocating the ", need, "-byte workspace"));
    owns_workspace_ = true;
  }
  try {
    allocate_state(opts);
    if (use_graph_) {
      // Capture happens on a session-owned stream: the caller's stream may be the legacy
      // default stream, which cannot be captured. The graph is then launched on the caller's.
      cu::check(d.cuStreamCreate(&capture_stream_, cu::CU_STREAM_NON_BLOCKING),
                "cuStreamCreate", "creating the capture stream");
    }
  } catch (...) {
    if (counters_) d.cuMemFree(counters_);
    if (state_) d.cuMemFree(state_);
    if (owns_workspace_) d.cuMemFree(workspace_);
    throw;
  }
}

// One allocation for every state buffer, zeroed before any run can read it (docs/generation.md:
// a state is zero at session create). Its address never changes, so the tensor maps and CUDA
// graphs that bind it stay valid for the session's life.
void Session::allocate_state(const Options& opts) {
  const Manifest& m = model_->manifest();
  const cu::Driver& d = cu::driver();
  if (m.counters_bytes) {  // session-owned even when the caller gives the rest of the memory
    cu::check(d.cuMemAlloc(&counters_, size_t(m.counters_bytes)), "cuMemAlloc",
              cat("allocating the ", m.counters_bytes, " bytes of counters"));
    zero_now(counters_, m.counters_bytes, "zeroing the counters");
  }
  if (m.state_bytes == 0) {
    if (opts.state)
      fail(AOTPACK_INVALID_ARGUMENT, "session options give state memory, but the model has "
           "no state");
    return;
  }
  if (opts.state) {  // the caller's memory: checked as the workspace is
    if (opts.state % 256 != 0)
      fail(AOTPACK_INVALID_ARGUMENT, "state memory ", reinterpret_cast<const void*>(opts.state),
           " is not 256-byte aligned");
    if (opts.state_bytes < m.state_bytes)
      fail(AOTPACK_INVALID_ARGUMENT, "state memory has ", opts.state_bytes,
           " bytes but the model's state needs ", m.state_bytes,
           " (aotpack_model_state_bytes)");
    if (check_ptrs_)
      check_device_range(opts.state, m.state_bytes, model_->device_ordinal(), "the state memory");
    caller_state_ = opts.state;
  } else {
    cu::check(d.cuMemAlloc(&state_, size_t(m.state_bytes)), "cuMemAlloc",
              cat("allocating the ", m.state_bytes, " bytes of state buffers"));
  }
  zero_now(state_address(), m.state_bytes,
           cat("zeroing the ", m.state_bytes, " bytes of state buffers"));
}

void Session::reset_state(cu::CUstream stream) {
  const Manifest& m = model_->manifest();
  model_->make_current();
  if (m.counters_bytes)  // zero at rest already; zeroed with the state as at session create
    cu::check(cu::driver().cuMemsetD8Async(counters_, 0, size_t(m.counters_bytes), stream),
              "cuMemsetD8Async", "zeroing the counters");
  if (m.state_bytes == 0) return;
  cu::check(cu::driver().cuMemsetD8Async(state_address(), 0, size_t(m.state_bytes), stream),
            "cuMemsetD8Async", "zeroing the state buffers");
}

Session::~Session() {
  const cu::Driver& d = cu::driver();
  d.cuCtxSetCurrent(model_->context());
  generator_.reset();  // its device buffers, before the context may go
  for (auto& p : cache_)
    if (p->exec) d.cuGraphExecDestroy(p->exec);  // freed asynchronously if still running
  if (capture_stream_) d.cuStreamDestroy(capture_stream_);
  if (owns_workspace_) d.cuMemFree(workspace_);  // cuMemFree waits for pending work
  if (state_) d.cuMemFree(state_);
  if (counters_) d.cuMemFree(counters_);
}

uint64_t Session::buffer_address(uint32_t buffer, const uint64_t* inputs,
                                 const uint64_t* outputs) const {
  const BufferSpec& b = model_->manifest().buffers[buffer];
  switch (b.kind) {
    case BufferKind::Input: return inputs[b.index];
    case BufferKind::Output: return outputs[b.index];
    case BufferKind::Weight: return model_->weight_address(b.index);
    case BufferKind::Arena: return workspace_ + b.offset;
    case BufferKind::State: return state_address() + model_->manifest().state_offsets[b.index];
    case BufferKind::Counters: return counters_ + b.offset;
  }
  return 0;
}

void Session::build_params(Plan& p, const uint64_t* inputs, const uint64_t* outputs) {
  const Manifest& m = model_->manifest();
  const ShapePlan& sp = *p.shape;
  p.storage.assign((sp.storage_bytes + sizeof(cu::CUtensorMap) - 1) / sizeof(cu::CUtensorMap) + 1,
                   cu::CUtensorMap{});
  uint8_t* base = reinterpret_cast<uint8_t*>(p.storage.data());
  p.params.assign(sp.steps.size(), {});
  for (size_t s = 0; s < sp.steps.size(); ++s) {
    const Step& st = sp.steps[s];
    for (size_t a = 0; a < st.args.size(); ++a) {
      const Slot& slot = st.args[a];
      uint8_t* dst = base + st.offsets[a];
      p.params[s].push_back(dst);
      if (slot.kind == SlotKind::Ptr) {
        uint64_t addr = buffer_address(slot.buffer, inputs, outputs) + slot.offset;
        std::memcpy(dst, &addr, 8);
      } else if (slot.kind == SlotKind::TensorMap) {
        uint64_t addr = buffer_address(slot.buffer, inputs, outputs) + slot.offset;
        encode_tensormap(reinterpret_cast<cu::CUtensorMap*>(dst), slot.tmap, addr,
                         cat(step_name(m, st), " args[", a, "]"));
      } else if (slot.kind == SlotKind::FastDivmod) {
        std::memcpy(dst, slot.fdm, 12);  // fields computed from the divisor with the plan
      } else if (slot_size(slot.kind) == 4) {
        uint32_t v = uint32_t(slot.bits);
        std::memcpy(dst, &v, 4);
      } else {
        std::memcpy(dst, &slot.bits, 8);  // i64/u64 value; null is 0
      }
    }
  }
}

Session::Plan* Session::find_plan(const uint64_t* inputs, const uint64_t* outputs) {
  const Manifest& m = model_->manifest();
  const size_t n_sym = syms_.size(), n_in = m.inputs.size(), n_out = m.outputs.size();
  // Compared in place: the hot path (same shape and pointers every run) allocates nothing.
  for (auto& p : cache_) {
    auto k = p->key.begin();
    if (std::equal(syms_.begin(), syms_.end(), k,
                   [](int64_t a, uint64_t b) { return uint64_t(a) == b; }) &&
        std::equal(inputs, inputs + n_in, k + long(n_sym)) &&
        std::equal(outputs, outputs + n_out, k + long(n_sym + n_in)))
      return p.get();
  }
  return nullptr;
}

// The evaluated, validated manifest for this run's shape: shared with any cached plan of the
// same shape, else built (once per shape while cached). A model without symbols has one.
std::shared_ptr<const ShapePlan> Session::shape_plan(const aotpack_shape* shapes) {
  const Manifest& m = model_->manifest();
  std::shared_ptr<const ShapePlan> sp;
  if (syms_.empty()) sp = m.max_plan;
  for (size_t i = 0; !sp && i < cache_.size(); ++i)
    if (cache_[i]->shape->symbols == syms_) sp = cache_[i]->shape;
  if (!sp) return build_shape_plan(m, syms_.data(), shapes);  // checks `shapes` itself
  if (shapes) check_input_dims(m, *sp, shapes);
  return sp;
}

// Run once per new (shape, pointer set), before anything is encoded or launched: a null
// pointer, or one the GPU cannot use (host memory, another device's, an allocation smaller
// than the tensor at this shape), is INVALID_ARGUMENT naming the tensor.
void Session::check_pointers(const ShapePlan& sp, const uint64_t* inputs,
                             const uint64_t* outputs) const {
  const Manifest& m = model_->manifest();
  auto check = [&](const char* kind, size_t i, const TensorSpec& t, uint64_t ptr, uint64_t n) {
    if (n == 0) return;  // an empty tensor: nothing reads or writes it
    std::string what = cat(kind, " ", i, " ('", t.name, "')");
    if (!ptr) fail(AOTPACK_INVALID_ARGUMENT, what, " is a null pointer");
    if (check_ptrs_) check_device_range(ptr, n, model_->device_ordinal(), what);
  };
  for (size_t i = 0; i < m.inputs.size(); ++i)
    check("input", i, m.inputs[i], inputs[i], sp.input_nbytes[i]);
  for (size_t i = 0; i < m.outputs.size(); ++i)
    check("output", i, m.outputs[i], outputs[i], sp.output_nbytes[i]);
}

// The least recently used plan without a captured graph goes first: a generation session
// runs prefill at a new length per prompt (no graph) and decode at one shape per batch size
// (a captured graph, replayed every token); prefill plans must not push the decode graphs out.
void Session::evict_lru() {
  size_t lru = cache_.size();
  for (int pass = 0; pass < 2 && lru == cache_.size(); ++pass)
    for (size_t i = 0; i < cache_.size(); ++i)
      if ((pass == 1 || !cache_[i]->exec) &&
          (lru == cache_.size() || cache_[i]->last_used < cache_[lru]->last_used))
        lru = i;
  if (cache_[lru]->exec) cu::driver().cuGraphExecDestroy(cache_[lru]->exec);
  cache_.erase(cache_.begin() + long(lru));
}

Session::Plan& Session::plan_for(const uint64_t* inputs, const aotpack_shape* shapes,
                                 const uint64_t* outputs) {
  const Manifest& m = model_->manifest();
  ++clock_;
  if (Plan* hit = find_plan(inputs, outputs)) {
    if (shapes) check_input_dims(m, *hit->shape, shapes);  // compares; evaluates nothing
    hit->last_used = clock_;
    return *hit;
  }
  std::unique_ptr<Plan> p(new Plan);
  p->shape = shape_plan(shapes);
  check_pointers(*p->shape, inputs, outputs);
  for (int64_t v : syms_) p->key.push_back(uint64_t(v));
  p->key.insert(p->key.end(), inputs, inputs + m.inputs.size());
  p->key.insert(p->key.end(), outputs, outputs + m.outputs.size());
  p->last_used = clock_;
  build_params(*p, inputs, outputs);  // may throw: nothing cached yet
  if (cache_.size() >= max_plans_) evict_lru();
  cache_.push_back(std::move(p));
  return *cache_.back();
}

void Session::launch_steps(const Plan& p, cu::CUstream stream) const {
  const Manifest& m = model_->manifest();
  const cu::Driver& d = cu::driver();
  for (size_t s = 0; s < p.shape->steps.size(); ++s) {
    const Step& st = p.shape->steps[s];
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
              "cuLaunchKernelEx", step_name(m, st));
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

const ShapePlan& Session::run(const uint64_t* inputs, const aotpack_shape* shapes,
                              const uint64_t* outputs, cu::CUstream stream, bool graph) {
  const Manifest& m = model_->manifest();
  if ((!inputs && !m.inputs.empty()) || (!outputs && !m.outputs.empty()))
    fail(AOTPACK_INVALID_ARGUMENT, "input_ptrs/output_ptrs must not be NULL");
  if (!shapes && !m.symbols.empty())
    fail(AOTPACK_INVALID_ARGUMENT, "the model has dims that vary at run time (symbols ",
         symbol_names(m), "): pass the input shapes (aotpack_session_execute or "
         "aotpack_session_run_shaped)");
  if (shapes) bind_symbols(m, shapes, syms_.data());
  model_->make_current();
  Plan& p = plan_for(inputs, shapes, outputs);
  launch(p, stream, graph);
  return *p.shape;
}

void Session::launch(Plan& p, cu::CUstream stream, bool graph) {
  if (p.shape->steps.empty()) return;  // every step skipped at this shape: nothing to launch
  if (!use_graph_ || !graph) return launch_steps(p, stream);
  // If the caller is itself capturing this stream (e.g. a torch CUDA graph), launch the
  // kernels directly so they become part of the caller's graph.
  cu::CUstreamCaptureStatus cs = cu::CU_STREAM_CAPTURE_STATUS_NONE;
  cu::check(cu::driver().cuStreamIsCapturing(stream, &cs), "cuStreamIsCapturing", "run");
  if (cs != cu::CU_STREAM_CAPTURE_STATUS_NONE) return launch_steps(p, stream);
  if (!p.exec) capture(p);
  cu::check(cu::driver().cuGraphLaunch(p.exec, stream), "cuGraphLaunch", "run");
}

}  // namespace aotpack
