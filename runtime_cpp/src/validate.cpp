// validate.cpp — structural checks of a manifest (no files, no driver): every index in range,
// every region inside its buffer, tensor-map rules, launch shape limits.
// A wrong tensor-map box or an out-of-range pointer can hang or corrupt the GPU, so these
// run before any launch and the hot path trusts them.
//
// Two halves, one set of rules: validate_static checks what holds for every shape (once, at
// load); validate_shape checks the values of one evaluated shape (ShapePlan). A v1 bundle has
// one shape, checked at load; a v2 bundle is checked at its all-min and all-max shapes at
// load and at every other shape the first time a session meets it.
#include <set>

#include "dtype.hpp"
#include "error.hpp"
#include "manifest.hpp"
#include "shape_plan.hpp"

namespace aotpack {

namespace {

[[noreturn]] void bad(const std::string& where, const std::string& msg) {
  fail(AOTPACK_CORRUPT_BUNDLE, "manifest: ", where, ": ", msg);
}

const char* kind_name(BufferKind k) {
  switch (k) {
    case BufferKind::Input: return "input";
    case BufferKind::Output: return "output";
    case BufferKind::Weight: return "weight";
    case BufferKind::Arena: return "arena";
    case BufferKind::State: return "state";
    case BufferKind::Counters: return "counters";
  }
  return "?";
}

void validate_buffers(Manifest& m) {
  for (size_t i = 0; i < m.buffers.size(); ++i) {
    BufferSpec& b = m.buffers[i];
    std::string w = cat("buffers[", i, "]");
    const std::vector<TensorSpec>* list = nullptr;
    if (b.kind == BufferKind::Input) list = &m.inputs;
    if (b.kind == BufferKind::Output) list = &m.outputs;
    if (b.kind == BufferKind::Weight) list = &m.weights;
    if (b.kind == BufferKind::State) list = &m.state;
    if (list) {
      if (b.index >= list->size())
        bad(w, cat(kind_name(b.kind), " index ", b.index, " out of range (the model has ",
                   list->size(), " ", kind_name(b.kind), "s)"));
      b.nbytes = (*list)[b.index].nbytes;  // inputs/outputs: per shape in ShapePlan
      continue;
    }
    uint64_t end;
    if (b.kind == BufferKind::Counters) {
      if (__builtin_add_overflow(b.offset, b.nbytes, &end) || end > m.counters_bytes)
        bad(w, cat("counters region [", b.offset, ", ", b.offset + b.nbytes,
                   ") is outside counters_bytes = ", m.counters_bytes));
      continue;
    }
    if (__builtin_add_overflow(b.offset, b.nbytes, &end) || end > m.arena_bytes)
      bad(w, cat("arena region [", b.offset, ", ", b.offset + b.nbytes,
                 ") is outside arena_bytes = ", m.arena_bytes));
  }
}

void validate_kernels(const Manifest& m) {
  std::set<std::string> names;
  for (size_t i = 0; i < m.kernels.size(); ++i) {
    const KernelSpec& k = m.kernels[i];
    std::string w = cat("kernels[", i, "] '", k.name, "'");
    if (!names.insert(k.name).second) bad(w, "duplicate kernel name");
    if (k.entry.empty()) bad(w, "empty entry symbol");
    uint64_t threads = uint64_t(k.block[0]) * k.block[1] * k.block[2];
    if (threads > 1024 || k.block[2] > 64)
      bad(w, cat("block ", k.block[0], "x", k.block[1], "x", k.block[2],
                 " exceeds the CUDA limit (at most 1024 threads, z <= 64)"));
    uint64_t cluster = uint64_t(k.cluster[0]) * k.cluster[1] * k.cluster[2];
    if (cluster > 16) bad(w, cat("cluster of ", cluster, " CTAs exceeds the limit of 16"));
  }
}

bool is_float(aotpack_dtype d) {
  return d == AOTPACK_DTYPE_BF16 || d == AOTPACK_DTYPE_F16 || d == AOTPACK_DTYPE_F32 ||
         d == AOTPACK_DTYPE_F64;
}

// The tensor-map rules of docs/manifest.md (and of cuTensorMapEncodeTiled itself) that do not
// depend on dims, strides or offset: rank, box, dtype, swizzle span, OOB fill.
void validate_tensormap_static(const Manifest& m, const SlotSpec& s, const std::string& w) {
  const TensorMapSpec& t = s.tmap;
  const size_t rank = t.dims.size();
  const uint64_t es = dtype_size(t.dtype);
  if (rank < 1 || rank > 5) bad(w, cat("tensormap rank ", rank, " must be 1..5"));
  if (t.strides.size() != rank || t.box.size() != rank)
    bad(w, cat("tensormap dims, strides and box must all have ", rank, " entries"));
  if (t.dtype == AOTPACK_DTYPE_BOOL)
    bad(w, "tensormap dtype bool has no TMA element type; use u8");
  for (size_t k = 0; k < rank; ++k)
    if (t.box[k] < 1 || t.box[k] > 256)
      bad(w, cat("tensormap box[", k, "] = ", t.box[k], " must be in 1..256"));
  if ((uint64_t(t.box[rank - 1]) * es) % 16 != 0)
    bad(w, cat("tensormap innermost box ", t.box[rank - 1], " x ", es,
               " bytes is not a multiple of 16 bytes"));
  static const uint64_t kSwizzleSpan[4] = {0, 32, 64, 128};
  if (t.swizzle != 0 && uint64_t(t.box[rank - 1]) * es > kSwizzleSpan[t.swizzle])
    bad(w, cat("tensormap innermost box ", t.box[rank - 1] * es, " bytes exceeds the ",
               kSwizzleSpan[t.swizzle], "-byte swizzle span"));
  if (t.oob == 1 && !is_float(t.dtype))
    bad(w, "tensormap oob \"nan\" needs a floating-point dtype (the driver refuses it otherwise)");
  const BufferSpec& b = m.buffers[s.buffer];
  if (b.kind == BufferKind::Arena && b.offset % 16 != 0)
    bad(w, cat("tensormap arena region offset ", b.offset, " is not 16-byte aligned"));
}

std::string step_where(const Manifest& m, size_t i, uint32_t kernel) {
  return cat("steps[", i, "] (kernel '", m.kernels[kernel].name, "')");
}

void validate_steps_static(const Manifest& m) {
  for (size_t i = 0; i < m.steps.size(); ++i) {
    const StepSpec& st = m.steps[i];
    if (st.kernel >= m.kernels.size())
      bad(cat("steps[", i, "]"), cat("kernel index ", st.kernel, " out of range (",
                                     m.kernels.size(), " kernels)"));
    std::string w = step_where(m, i, st.kernel);
    for (size_t a = 0; a < st.args.size(); ++a) {
      const SlotSpec& s = st.args[a];
      if (s.kind != SlotKind::Ptr && s.kind != SlotKind::TensorMap) continue;
      std::string sw = cat(w, " args[", a, "]");
      if (s.buffer >= m.buffers.size())
        bad(sw, cat("buffer index ", s.buffer, " out of range (", m.buffers.size(),
                    " buffers)"));
      if (s.kind == SlotKind::TensorMap) validate_tensormap_static(m, s, sw);
    }
  }
}

void validate_names(const std::vector<TensorSpec>& list, const char* what) {
  std::set<std::string> names;
  for (const auto& t : list)
    if (!names.insert(t.name).second)
      bad(what, cat("duplicate name '", t.name, "'"));
}

// v2: each symbol is read at run time from the first input dim that is exactly its name, or,
// when none is, from the first input dim that is k*S + c (a derived dim: 16*h).
void find_binders(Manifest& m) {
  m.binders.assign(m.symbols.size(), Manifest::Binder{});
  for (bool exact : {true, false})
    for (size_t i = 0; i < m.inputs.size(); ++i)
      for (size_t k = 0; k < m.inputs[i].dims.size(); ++k) {
        const IntExpr& d = m.inputs[i].dims[k];
        if (d.is_const()) continue;
        int64_t scale = 1, offset = 0;
        const Expr& e = m.exprs[size_t(d.expr)];
        int s = exact ? e.single_symbol() : e.affine_symbol(&scale, &offset);
        if (s >= 0 && m.binders[size_t(s)].input == UINT32_MAX)
          m.binders[size_t(s)] = {uint32_t(i), uint32_t(k), scale, offset};
      }
  for (size_t s = 0; s < m.symbols.size(); ++s)
    if (m.binders[s].input == UINT32_MAX)
      bad(cat("symbols[", s, "]"),
          cat("symbol '", m.symbols[s].name, "' is not the whole of any input dim, so a run "
              "cannot tell its value (some input's shape must list \"", m.symbols[s].name,
              "\" itself, or k*", m.symbols[s].name, " + c, as a dim); the bundle is "
              "malformed: rebuild it"));
}

// Tensor-map rules on the evaluated strides, offset and extent.
void validate_tensormap_values(const Slot& s, uint64_t buffer_nbytes, const std::string& kind,
                               const std::string& w) {
  const TensorMap& t = s.tmap;
  const uint64_t es = dtype_size(t.dtype);
  if (t.strides[t.rank - 1] != 1) bad(w, "tensormap innermost stride must be 1");
  for (size_t k = 0; k + 1 < t.rank; ++k) {
    uint64_t bytes = t.strides[k] * es;
    if (t.strides[k] == 0 || bytes % 16 != 0 || bytes >= (uint64_t(1) << 40) ||
        t.strides[k] >= (uint64_t(1) << 40))
      bad(w, cat("tensormap stride[", k, "] = ", t.strides[k], " elements (", bytes,
                 " bytes) must be a positive multiple of 16 bytes below 2^40"));
  }
  if (s.offset % 16 != 0)
    bad(w, cat("tensormap offset ", s.offset, " is not 16-byte aligned"));
  uint64_t ext = tensormap_extent_bytes(t);
  uint64_t end;
  if (ext == 0 || __builtin_add_overflow(s.offset, ext, &end) || end > buffer_nbytes)
    bad(w, cat("tensormap covers bytes [", s.offset, ", ", s.offset + ext, ") but buffer ",
               s.buffer, " (", kind, ") has ", buffer_nbytes, " bytes"));
}

}  // namespace

uint64_t tensormap_extent_bytes(const TensorMap& t) {
  // Offset of the last element + 1, in elements; saturates on overflow (then refused).
  uint64_t last = 0;
  for (size_t k = 0; k < t.rank; ++k) {
    if (t.dims[k] == 0) return 0;
    uint64_t term;
    if (__builtin_mul_overflow(t.dims[k] - 1, t.strides[k], &term) ||
        __builtin_add_overflow(last, term, &last))
      return UINT64_MAX;
  }
  uint64_t bytes;
  if (__builtin_mul_overflow(last + 1, uint64_t(dtype_size(t.dtype)), &bytes)) return UINT64_MAX;
  return bytes;
}

void validate_static(Manifest& m) {
  validate_names(m.inputs, "inputs");
  validate_names(m.outputs, "outputs");
  validate_names(m.weights, "weights");
  validate_state(m);
  validate_buffers(m);
  validate_kernels(m);
  validate_steps_static(m);
  find_binders(m);
  validate_generation(m);
}

void validate_shape(const Manifest& m, const ShapePlan& p, const std::string& at) {
  for (const Step& st : p.steps) {
    const KernelSpec& k = m.kernels[st.kernel];
    std::string w = at + step_where(m, st.index, st.kernel);
    if (st.grid[1] > 65535 || st.grid[2] > 65535)
      bad(w, cat("grid y and z must be <= 65535 (grid ", st.grid[0], "x", st.grid[1], "x",
                 st.grid[2], ")"));
    for (int d = 0; d < 3; ++d)
      if (st.grid[d] % k.cluster[d] != 0)
        bad(w, cat("grid[", d, "] = ", st.grid[d], " is not a multiple of cluster[", d,
                   "] = ", k.cluster[d]));
    for (size_t a = 0; a < st.args.size(); ++a) {
      const Slot& s = st.args[a];
      if (s.kind != SlotKind::Ptr && s.kind != SlotKind::TensorMap) continue;
      const uint64_t nbytes = p.buffer_nbytes[s.buffer];
      const char* kind = kind_name(m.buffers[s.buffer].kind);
      std::string sw = cat(w, " args[", a, "]");
      if (s.kind == SlotKind::TensorMap)
        validate_tensormap_values(s, nbytes, kind, sw);
      else if (s.offset > nbytes)
        bad(sw, cat("ptr offset ", s.offset, " is past the end of buffer ", s.buffer, " (",
                    kind, ", ", nbytes, " bytes)"));
    }
  }
}

}  // namespace aotpack
