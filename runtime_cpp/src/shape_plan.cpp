// shape_plan.cpp — evaluate a manifest at one shape (docs/manifest.md "Binding a shape"),
// bind a run's symbols from its input shapes, and the load-time orchestration
// (validate_manifest: static checks, then the all-min and all-max shapes).
#include "shape_plan.hpp"

#include "dtype.hpp"
#include "error.hpp"

namespace aotpack {

namespace {

constexpr int64_t kMaxI64 = INT64_MAX;

// Evaluates the manifest's integer fields at one shape; errors name the field and the shape.
struct Evaluator {
  const Manifest& m;
  const int64_t* syms;
  const std::string& at;  // "at shape B=2 S=17: " or ""

  // The value of `e`, which must lie in [lo, hi]; `where()` names the field (built only on
  // error). Constants were range-checked when parsed.
  template <typename Where>
  int64_t operator()(const IntExpr& e, int64_t lo, int64_t hi, Where&& where) const {
    if (e.is_const()) return e.value;
    const Expr& x = m.exprs[size_t(e.expr)];
    int64_t v = 0;
    if (const char* why = x.eval(syms, &v))
      fail(AOTPACK_CORRUPT_BUNDLE, "manifest: ", at, where(), ": expression '", x.text(), "' ",
           why);
    if (v < lo || v > hi)
      fail(AOTPACK_CORRUPT_BUNDLE, "manifest: ", at, where(), ": expression '", x.text(),
           "' = ", v, " is outside [", lo, ", ", hi, "]");
    return v;
  }
};

void eval_tensors(const Evaluator& ev, const std::vector<TensorSpec>& list, const char* what,
                  std::vector<std::vector<int64_t>>& dims, std::vector<uint64_t>& nbytes) {
  for (size_t i = 0; i < list.size(); ++i) {
    const TensorSpec& t = list[i];
    std::vector<int64_t> d;
    uint64_t n = dtype_size(t.dtype);
    for (size_t k = 0; k < t.dims.size(); ++k) {
      d.push_back(ev(t.dims[k], 0, kMaxI64, [&] { return cat(what, "[", i, "].shape[", k, "]"); }));
      if (__builtin_mul_overflow(n, uint64_t(d.back()), &n))
        fail(AOTPACK_CORRUPT_BUNDLE, "manifest: ", ev.at, what, "[", i, "] '", t.name,
             "': size overflows");
    }
    dims.push_back(std::move(d));
    nbytes.push_back(n);
  }
}

bool selected(const Evaluator& ev, const StepSpec& st, size_t i) {
  for (size_t c = 0; c < st.when.size(); ++c) {
    const Condition& cond = st.when[c];
    int64_t v = ev(cond.expr, INT64_MIN, kMaxI64, [&] { return cat("steps[", i, "].when[", c, "]"); });
    if (v < cond.min || v > cond.max) return false;
  }
  return true;
}

TensorMap eval_tensormap(const Evaluator& ev, const TensorMapSpec& t, const std::string& w) {
  TensorMap out;
  out.dtype = t.dtype;
  out.rank = uint32_t(t.dims.size());  // 1..5, equal lengths: validate_static
  for (size_t k = 0; k < t.dims.size(); ++k) {
    out.dims[k] = uint64_t(ev(t.dims[k], 1, int64_t(1) << 32, [&] { return cat(w, ".dims[", k, "]"); }));
    out.strides[k] = uint64_t(ev(t.strides[k], 0, kMaxI64, [&] { return cat(w, ".strides[", k, "]"); }));
    out.box[k] = t.box[k];
  }
  out.swizzle = t.swizzle;
  out.l2 = t.l2;
  out.oob = t.oob;
  return out;
}

Slot eval_slot(const Evaluator& ev, const SlotSpec& s, size_t step, size_t arg) {
  auto where = [&] { return cat("steps[", step, "].args[", arg, "]"); };
  Slot out;
  out.kind = s.kind;
  out.buffer = s.buffer;
  switch (s.kind) {
    case SlotKind::Ptr:
    case SlotKind::TensorMap:
      out.offset = uint64_t(ev(s.offset, 0, kMaxI64, [&] { return where() + ".offset"; }));
      if (s.kind == SlotKind::TensorMap) out.tmap = eval_tensormap(ev, s.tmap, where());
      break;
    case SlotKind::Null: break;
    case SlotKind::F32: out.bits = s.f32_bits; break;
    default: {
      int64_t lo, hi;
      slot_value_range(s.kind, &lo, &hi);
      int64_t v = ev(s.value, lo, hi, [&] { return where() + ".value"; });
      if (s.kind == SlotKind::FastDivmod) fastdivmod_fields(uint32_t(v), out.fdm);
      else if (s.kind == SlotKind::I32) out.bits = uint32_t(int32_t(v));
      else out.bits = uint64_t(v);
    }
  }
  return out;
}

// Each parameter at its natural alignment, tensor maps at 128 (the driver needs >= 64).
size_t slot_align(SlotKind k) {
  if (k == SlotKind::FastDivmod) return 4;
  return k == SlotKind::TensorMap ? 128 : slot_size(k);
}

void eval_steps(const Evaluator& ev, ShapePlan& p) {
  const Manifest& m = ev.m;
  size_t off = 0;
  for (size_t i = 0; i < m.steps.size(); ++i) {
    const StepSpec& st = m.steps[i];
    if (!selected(ev, st, i)) continue;
    Step out;
    out.index = uint32_t(i);
    out.kernel = st.kernel;
    for (int k = 0; k < 3; ++k)
      out.grid[k] = uint32_t(ev(st.grid[k], 0, 0x7FFFFFFF, [&] { return cat("steps[", i, "].grid[", k, "]"); }));
    if (out.grid[0] == 0 || out.grid[1] == 0 || out.grid[2] == 0) continue;  // nothing to do
    for (size_t a = 0; a < st.args.size(); ++a) {
      out.args.push_back(eval_slot(ev, st.args[a], i, a));
      size_t al = slot_align(st.args[a].kind);
      off = (off + al - 1) / al * al;
      out.offsets.push_back(off);
      off += slot_size(st.args[a].kind);
    }
    p.steps.push_back(std::move(out));
  }
  p.storage_bytes = off;
}

std::string source_of(const Manifest& m, size_t s, const int64_t* syms) {
  const auto& b = m.binders[s];
  return cat(m.symbols[s].name, " = ", syms[s], " from input '", m.inputs[b.input].name,
             "' dim ", b.dim);
}

[[noreturn]] void dim_mismatch(const Manifest& m, const ShapePlan& p, size_t i, size_t k,
                               int64_t got) {
  const TensorSpec& t = m.inputs[i];
  const IntExpr& e = t.dims[k];
  const int64_t want = p.inputs[i][k];
  std::string head = cat("input '", t.name, "' dim ", k, " is ", got);
  if (e.is_const()) fail(AOTPACK_INVALID_ARGUMENT, head, ", expected ", want);
  const Expr& x = m.exprs[size_t(e.expr)];
  if (int s = x.single_symbol(); s >= 0) {
    const auto& b = m.binders[size_t(s)];
    fail(AOTPACK_INVALID_ARGUMENT, head, " but must equal ", m.symbols[size_t(s)].name, " = ",
         want, " (as input '", m.inputs[b.input].name, "' dim ", b.dim, " says)");
  }
  std::string why;
  for (int s : x.symbols_used()) why += cat(why.empty() ? "" : ", ", source_of(m, size_t(s), p.symbols.data()));
  fail(AOTPACK_INVALID_ARGUMENT, head, " but must equal ", x.text(), " = ", want, " (", why, ")");
}

std::string dims_text(const Manifest& m, const TensorSpec& t) {
  std::string s = "[";
  for (size_t k = 0; k < t.dims.size(); ++k)
    s += cat(k ? ", " : "", t.dims[k].is_const() ? std::to_string(t.dims[k].value)
                                                 : m.exprs[size_t(t.dims[k].expr)].text());
  return s + "]";
}

}  // namespace

size_t slot_size(SlotKind k) {
  switch (k) {
    case SlotKind::I32: case SlotKind::U32: case SlotKind::F32: return 4;
    case SlotKind::FastDivmod: return 12;  // 3 x u32 words (CuTe's fast_divmod_divisor<32>)
    case SlotKind::TensorMap: return 128;  // CUtensorMap
    default: return 8;
  }
}

std::string symbol_names(const Manifest& m) {
  std::string s;
  for (const SymbolSpec& sym : m.symbols) s += cat(s.empty() ? "" : ", ", sym.name);
  return s;
}

std::string shape_label(const Manifest& m, const int64_t* syms) {
  std::string s;
  for (size_t i = 0; i < m.symbols.size(); ++i)
    s += cat(i ? " " : "", m.symbols[i].name, "=", syms[i]);
  return s;
}

namespace {

std::shared_ptr<const ShapePlan> build(const Manifest& m, const int64_t* syms,
                                       const aotpack_shape* check, const std::string& at,
                                       bool with_steps = true) {
  Evaluator ev{m, syms, at};
  auto p = std::make_shared<ShapePlan>();
  p->symbols.assign(syms, syms + m.symbols.size());
  eval_tensors(ev, m.inputs, "inputs", p->inputs, p->input_nbytes);
  if (check) check_input_dims(m, *p, check);  // the caller's mistake before the bundle's
  eval_tensors(ev, m.outputs, "outputs", p->outputs, p->output_nbytes);
  if (!with_steps) return p;
  for (const BufferSpec& b : m.buffers)
    p->buffer_nbytes.push_back(b.kind == BufferKind::Input    ? p->input_nbytes[b.index]
                               : b.kind == BufferKind::Output ? p->output_nbytes[b.index]
                                                              : b.nbytes);
  eval_steps(ev, *p);
  validate_shape(m, *p, at);
  return p;
}

}  // namespace

std::shared_ptr<const ShapePlan> build_io_shapes(const Manifest& m, const int64_t* syms,
                                                 const aotpack_shape* check) {
  return build(m, syms, check, cat("at shape ", shape_label(m, syms), ": "), false);
}

std::shared_ptr<const ShapePlan> build_shape_plan(const Manifest& m, const int64_t* syms,
                                                  const aotpack_shape* check) {
  if (m.symbols.empty()) return build(m, syms, check, "");  // v1 messages, unchanged
  try {
    return build(m, syms, check, cat("at shape ", shape_label(m, syms), ": "));
  } catch (const Error& e) {
    if (e.code() != AOTPACK_CORRUPT_BUNDLE) throw;
    fail(AOTPACK_CORRUPT_BUNDLE, e.what(), " (the bundle is malformed at this shape, which is "
         "inside its symbols' ranges: rebuild it, and report it as a compiler bug if it "
         "persists)");
  }
}

// " (the sizes 32, 48, ... 128" of a derived dim scale*S + offset: the first two and the last
// (each evaluated at load, so no overflow; one size when the range is one value).
static std::string sizes_of(const Manifest::Binder& b, const SymbolSpec& s) {
  auto at = [&](int64_t v) { return b.scale * v + b.offset; };
  if (s.min == s.max) return cat(" (the size ", at(s.min));
  if (s.max - s.min == 1) return cat(" (the sizes ", at(s.min), ", ", at(s.max));
  return cat(" (the sizes ", at(s.min), ", ", at(s.min + 1), ", ... ", at(s.max));
}

void bind_symbols(const Manifest& m, const aotpack_shape* shapes, int64_t* syms) {
  for (size_t i = 0; i < m.inputs.size(); ++i)
    if (shapes[i].rank != int32_t(m.inputs[i].dims.size()))
      fail(AOTPACK_INVALID_ARGUMENT, "input '", m.inputs[i].name, "' has rank ", shapes[i].rank,
           ", expected ", m.inputs[i].dims.size(), " (shape ", dims_text(m, m.inputs[i]), ")");
  for (size_t s = 0; s < m.symbols.size(); ++s) {
    const auto& b = m.binders[s];
    const SymbolSpec& sym = m.symbols[s];
    const int64_t dim = shapes[b.input].dims[b.dim];
    const std::string& input = m.inputs[b.input].name;
    if (b.scale == 1 && b.offset == 0) {
      if (dim < sym.min || dim > sym.max)
        fail(AOTPACK_INVALID_ARGUMENT, "input '", input, "' dim ", b.dim, " is ", dim,
             ", outside the range ", sym.min, "..", sym.max, " of symbol ", sym.name,
             " (the bundle was built for that range)");
      syms[s] = dim;
      continue;
    }
    // a derived dim scale*S + offset: S = (dim - offset) / scale, which must be whole
    int64_t rest = 0;
    if (__builtin_sub_overflow(dim, b.offset, &rest) || floor_mod(rest, b.scale) != 0 ||
        floor_div(rest, b.scale) < sym.min || floor_div(rest, b.scale) > sym.max)
      fail(AOTPACK_INVALID_ARGUMENT, "input '", input, "' dim ", b.dim, " is ", dim,
           ", which is not ", m.exprs[size_t(m.inputs[b.input].dims[b.dim].expr)].text(),
           " for a whole ", sym.name, " in ", sym.min, "..", sym.max, sizes_of(b, sym),
           "; the bundle was built for them)");
    syms[s] = floor_div(rest, b.scale);
  }
}

void check_input_dims(const Manifest& m, const ShapePlan& p, const aotpack_shape* shapes) {
  for (size_t i = 0; i < p.inputs.size(); ++i)
    for (size_t k = 0; k < p.inputs[i].size(); ++k)
      if (shapes[i].dims[k] != p.inputs[i][k]) dim_mismatch(m, p, i, k, shapes[i].dims[k]);
}

void validate_manifest(Manifest& m) {
  validate_static(m);
  if (m.symbols.empty()) {
    m.min_plan = m.max_plan = build_shape_plan(m, nullptr);
    return;
  }
  std::vector<int64_t> lo, hi;
  for (const SymbolSpec& s : m.symbols) {
    lo.push_back(s.min);
    hi.push_back(s.max);
  }
  m.min_plan = build_shape_plan(m, lo.data());
  m.max_plan = build_shape_plan(m, hi.data());
  // What the C API reports for a dynamic tensor: its size at the maxima (docs "Memory").
  for (size_t i = 0; i < m.inputs.size(); ++i) m.inputs[i].nbytes = m.max_plan->input_nbytes[i];
  for (size_t i = 0; i < m.outputs.size(); ++i) m.outputs[i].nbytes = m.max_plan->output_nbytes[i];
  for (BufferSpec& b : m.buffers)
    if (b.kind == BufferKind::Input || b.kind == BufferKind::Output)
      b.nbytes = (b.kind == BufferKind::Input ? m.inputs : m.outputs)[b.index].nbytes;
}

}  // namespace aotpack
