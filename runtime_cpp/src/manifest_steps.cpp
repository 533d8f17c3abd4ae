// manifest_steps.cpp — steps[] of the manifest: grid, parameter slots (ptr, scalars,
// fastdivmod, tensor maps) and v2 `when` conditions. Values v2 allows to be expressions are
// read with as_expr; their per-shape checks are in shape_plan.cpp.
#include <cstring>

#include "manifest.hpp"
#include "manifest_parse.hpp"

namespace aotpack {

void fastdivmod_fields(uint32_t divisor, uint32_t words[3]) {
  uint32_t l = 0;
  while ((uint64_t(1) << l) < divisor) ++l;  // ceil(log2(divisor))
  uint64_t mult = ((uint64_t(1) << 32) * ((uint64_t(1) << l) - divisor)) / divisor + 1;
  uint32_t shift1 = l < 1 ? l : 1, shift2 = l > 1 ? l - 1 : 0;
  words[0] = divisor;
  words[1] = uint32_t(mult);  // < 2^32 for every divisor < 2^31 (1 for divisor 1)
  words[2] = shift1 | (shift2 << 8);
}

namespace manifest_parse {
namespace {

int enum_field(const Value& v, const char* key, const std::string& where,
               const std::vector<const char*>& names, int dflt) {
  const Value* f = v.find(key);
  if (!f || f->is_null()) return dflt;
  if (f->type == Type::String)
    for (size_t i = 0; i < names.size(); ++i)
      if (f->s == names[i]) return int(i);
  std::string allowed;
  for (const char* n : names) allowed += cat(allowed.empty() ? "" : " | ", n);
  bad(where + "." + key, cat("expected one of ", allowed));
}

std::vector<IntExpr> expr_list(Ctx& c, const Value& v, const char* key, const std::string& where,
                               int64_t lo, int64_t hi) {
  std::vector<IntExpr> out;
  const Value& a = get_array(v, key, where);
  for (size_t i = 0; i < a.items.size(); ++i)
    out.push_back(as_expr(c, a.items[i], cat(where, ".", key, "[", i, "]"), lo, hi));
  return out;
}

TensorMapSpec parse_tensormap(Ctx& c, const Value& v, const std::string& where) {
  TensorMapSpec t;
  t.dtype = get_dtype(v, where);
  t.dims = expr_list(c, v, "dims", where, 1, int64_t(1) << 32);
  t.strides = expr_list(c, v, "strides", where, 0, kMaxI64);
  // Box range is validated with a precise message in validate_static.
  const Value& box = get_array(v, "box", where);
  for (size_t i = 0; i < box.items.size(); ++i)
    t.box.push_back(uint32_t(as_int(c, box.items[i], cat(where, ".box[", i, "]"), 0, kMaxU32)));
  t.swizzle = enum_field(v, "swizzle", where, {"none", "32B", "64B", "128B"}, 0);
  t.l2 = enum_field(v, "l2", where, {"none", "64B", "128B", "256B"}, 0);
  t.oob = enum_field(v, "oob", where, {"zero", "nan"}, 0);
  return t;
}

bool integer_kind(const std::string& kind, SlotKind* out) {
  static const std::pair<const char*, SlotKind> kKinds[] = {
      {"i32", SlotKind::I32}, {"u32", SlotKind::U32}, {"i64", SlotKind::I64},
      {"u64", SlotKind::U64}, {"fastdivmod", SlotKind::FastDivmod}};
  for (const auto& k : kKinds)
    if (kind == k.first) {
      *out = k.second;
      return true;
    }
  return false;
}

SlotSpec parse_slot(Ctx& c, const Value& v, const std::string& where) {
  SlotSpec s;
  std::string kind = get_str(v, "kind", where);
  if (kind == "ptr" || kind == "tensormap") {
    s.kind = kind == "ptr" ? SlotKind::Ptr : SlotKind::TensorMap;
    if (s.kind == SlotKind::Ptr) check_keys(v, where, {"kind", "buffer", "offset"});
    else
      check_keys(v, where, {"kind", "buffer", "offset", "dtype", "dims", "strides", "box",
                            "swizzle", "l2", "oob"});
    s.buffer = uint32_t(get_int(c, v, "buffer", where, 0, kMaxU32));
    const Value* off = v.find("offset");
    if (off) s.offset = as_expr(c, *off, where + ".offset", 0, kMaxI64);
    if (s.kind == SlotKind::TensorMap) s.tmap = parse_tensormap(c, v, where);
  } else if (kind == "null") {
    s.kind = SlotKind::Null;
    check_keys(v, where, {"kind"});
  } else if (integer_kind(kind, &s.kind)) {
    check_keys(v, where, {"kind", "value"});
    int64_t lo, hi;
    slot_value_range(s.kind, &lo, &hi);
    s.value = as_expr(c, req(v, "value", where), where + ".value", lo, hi);
  } else if (kind == "f32") {
    s.kind = SlotKind::F32;
    check_keys(v, where, {"kind", "value"});
    const Value& val = req(v, "value", where);
    if (!val.is_number()) bad(where + ".value", "expected a number");
    float f = float(val.type == Type::Int ? double(val.i) : val.d);
    std::memcpy(&s.f32_bits, &f, 4);
  } else {
    fail(AOTPACK_UNSUPPORTED_VERSION, "manifest: ", where, ": parameter slot kind '", kind,
         "' is not supported by this runtime (known: ptr null i32 i64 u32 u64 f32 fastdivmod "
         "tensormap)");
  }
  return s;
}

// v2 steps[].when: [{"expr", "min", "max"}], all required.
std::vector<Condition> parse_when(Ctx& c, const Value& v, const std::string& where) {
  std::vector<Condition> out;
  const Value* when = v.find("when");
  if (!when || when->is_null()) return out;
  if (c.m.version < 2)
    bad(where + ".when", "conditions need bundle format v2 (this bundle says \"version\": 1, "
                         "whose steps all run): rebuild the bundle");
  if (when->type != Type::Array) bad(where + ".when", "expected an array");
  for (size_t i = 0; i < when->items.size(); ++i) {
    const Value& w = when->items[i];
    std::string wi = cat(where, ".when[", i, "]");
    check_keys(w, wi, {"expr", "min", "max"});
    Condition cond;
    cond.expr = as_expr(c, req(w, "expr", wi), wi + ".expr", kMinI64, kMaxI64);
    cond.min = get_int(c, w, "min", wi, kMinI64, kMaxI64);
    cond.max = get_int(c, w, "max", wi, cond.min, kMaxI64);
    out.push_back(cond);
  }
  return out;
}

}  // namespace

StepSpec parse_step(Ctx& c, const Value& v, const std::string& where) {
  StepSpec st;
  check_keys(v, where, {"kernel", "grid", "args", "when"});
  st.kernel = uint32_t(get_int(c, v, "kernel", where, 0, kMaxU32));
  const Value& grid = get_array(v, "grid", where);
  if (grid.items.size() != 3) bad(where + ".grid", "expected [x, y, z]");
  // v2: a grid dim may be 0 (then the step is skipped: nothing to do at that shape).
  const int64_t lo = c.m.version >= 2 ? 0 : 1;
  for (int k = 0; k < 3; ++k)
    st.grid[k] = as_expr(c, grid.items[k], cat(where, ".grid[", k, "]"), lo, 0x7FFFFFFF);
  const Value& args = get_array(v, "args", where);
  st.args.reserve(args.items.size());
  for (size_t i = 0; i < args.items.size(); ++i)
    st.args.push_back(parse_slot(c, args.items[i], cat(where, ".args[", i, "]")));
  st.when = parse_when(c, v, where);
  return st;
}

}  // namespace manifest_parse
}  // namespace aotpack
