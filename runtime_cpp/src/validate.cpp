// validate.cpp — structural checks of a parsed manifest (no files, no driver): every index
// in range, every region inside its buffer, tensor-map rules, launch shape limits.
// A wrong tensor-map box or an out-of-range pointer can hang or corrupt the GPU, so these
// run once at load and the hot path trusts them.
#include <set>

#include "dtype.hpp"
#include "error.hpp"
#include "manifest.hpp"

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
    if (list) {
      if (b.index >= list->size())
        bad(w, cat(kind_name(b.kind), " index ", b.index, " out of range (the model has ",
                   list->size(), " ", kind_name(b.kind), "s)"));
      b.nbytes = (*list)[b.index].nbytes;
      continue;
    }
    uint64_t end;
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

// Tensor-map rules of docs/manifest.md (and of cuTensorMapEncodeTiled itself, so a bundle
// that passes never fails to encode for a well-aligned pointer).
void validate_tensormap(const Manifest& m, const Slot& s, const std::string& w) {
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
  const bool is_float = t.dtype == AOTPACK_DTYPE_BF16 || t.dtype == AOTPACK_DTYPE_F16 ||
                        t.dtype == AOTPACK_DTYPE_F32 || t.dtype == AOTPACK_DTYPE_F64;
  if (t.oob == 1 && !is_float)
    bad(w, "tensormap oob \"nan\" needs a floating-point dtype (the driver refuses it otherwise)");
  if (t.strides[rank - 1] != 1) bad(w, "tensormap innermost stride must be 1");
  for (size_t k = 0; k + 1 < rank; ++k) {
    uint64_t bytes = t.strides[k] * es;
    if (t.strides[k] == 0 || bytes % 16 != 0 || bytes >= (uint64_t(1) << 40))
      bad(w, cat("tensormap stride[", k, "] = ", t.strides[k], " elements (", bytes,
                 " bytes) must be a positive multiple of 16 bytes below 2^40"));
  }
  if (s.offset % 16 != 0)
    bad(w, cat("tensormap offset ", s.offset, " is not 16-byte aligned"));
  const BufferSpec& b = m.buffers[s.buffer];
  if (b.kind == BufferKind::Arena && b.offset % 16 != 0)
    bad(w, cat("tensormap arena region offset ", b.offset, " is not 16-byte aligned"));
  uint64_t ext = tensormap_extent_bytes(t);
  uint64_t end;
  if (ext == 0 || __builtin_add_overflow(s.offset, ext, &end) || end > b.nbytes)
    bad(w, cat("tensormap covers bytes [", s.offset, ", ", s.offset + ext, ") but buffer ",
               s.buffer, " (", kind_name(b.kind), ") has ", b.nbytes, " bytes"));
}

void validate_steps(const Manifest& m) {
  for (size_t i = 0; i < m.steps.size(); ++i) {
    const StepSpec& st = m.steps[i];
    std::string w = cat("steps[", i, "]");
    if (st.kernel >= m.kernels.size())
      bad(w, cat("kernel index ", st.kernel, " out of range (", m.kernels.size(), " kernels)"));
    const KernelSpec& k = m.kernels[st.kernel];
    w += cat(" (kernel '", k.name, "')");
    if (st.grid[1] > 65535 || st.grid[2] > 65535)
      bad(w, "grid y and z must be <= 65535");
    for (int d = 0; d < 3; ++d)
      if (st.grid[d] % k.cluster[d] != 0)
        bad(w, cat("grid[", d, "] = ", st.grid[d], " is not a multiple of cluster[", d,
                   "] = ", k.cluster[d]));
    for (size_t a = 0; a < st.args.size(); ++a) {
      const Slot& s = st.args[a];
      std::string sw = cat(w, " args[", a, "]");
      if (s.kind != SlotKind::Ptr && s.kind != SlotKind::TensorMap) continue;
      if (s.buffer >= m.buffers.size())
        bad(sw, cat("buffer index ", s.buffer, " out of range (", m.buffers.size(),
                    " buffers)"));
      if (s.kind == SlotKind::TensorMap) {
        validate_tensormap(m, s, sw);
      } else if (s.offset > m.buffers[s.buffer].nbytes) {
        bad(sw, cat("ptr offset ", s.offset, " is past the end of buffer ", s.buffer, " (",
                    kind_name(m.buffers[s.buffer].kind), ", ", m.buffers[s.buffer].nbytes,
                    " bytes)"));
      }
    }
  }
}

void validate_names(const std::vector<TensorSpec>& list, const char* what) {
  std::set<std::string> names;
  for (const auto& t : list)
    if (!names.insert(t.name).second)
      bad(what, cat("duplicate name '", t.name, "'"));
}

}  // namespace

uint64_t tensormap_extent_bytes(const TensorMapSpec& t) {
  // Offset of the last element + 1, in elements; saturates on overflow (then refused).
  uint64_t last = 0;
  for (size_t k = 0; k < t.dims.size() && k < t.strides.size(); ++k) {
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

void validate_manifest(Manifest& m) {
  validate_names(m.inputs, "inputs");
  validate_names(m.outputs, "outputs");
  validate_names(m.weights, "weights");
  validate_buffers(m);
  validate_kernels(m);
  validate_steps(m);
}

}  // namespace aotpack
