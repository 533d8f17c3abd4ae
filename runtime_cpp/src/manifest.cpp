// manifest.cpp — JSON → typed Manifest, with type/range checks and messages that name the
// offending field by its JSON path (e.g. "steps[3].args[2].box[1]").
#include "manifest.hpp"

#include <cstring>
#include <limits>

#include "dtype.hpp"
#include "error.hpp"

namespace aotpack {

namespace {

using json::Type;
using json::Value;

[[noreturn]] void bad(const std::string& where, const std::string& msg) {
  fail(AOTPACK_CORRUPT_BUNDLE, "manifest: ", where, ": ", msg);
}

const Value& req(const Value& obj, const char* key, const std::string& where) {
  if (obj.type != Type::Object) bad(where, "expected an object");
  const Value* v = obj.find(key);
  if (!v) bad(where, cat("missing field '", key, "'"));
  return *v;
}

// An integer in [lo, hi]. A string here is a symbolic dimension: not supported in v1.
int64_t as_int(const Value& v, const std::string& where, int64_t lo, int64_t hi) {
  if (v.type == Type::String)
    fail(AOTPACK_UNSUPPORTED_VERSION, "manifest: ", where, " is the symbol '", v.s,
         "': symbolic (dynamic) shapes and expressions are not supported by this runtime "
         "(bundle format v1 needs integers); rebuild the bundle with static shapes");
  if (v.type != Type::Int) bad(where, cat("expected an integer, got ", Value::type_name(v.type)));
  if (v.i < lo || v.i > hi) bad(where, cat("value ", v.i, " is outside [", lo, ", ", hi, "]"));
  return v.i;
}

int64_t get_int(const Value& obj, const char* key, const std::string& where, int64_t lo,
                int64_t hi) {
  return as_int(req(obj, key, where), where + "." + key, lo, hi);
}

std::string get_str(const Value& obj, const char* key, const std::string& where) {
  const Value& v = req(obj, key, where);
  if (v.type != Type::String) bad(where + "." + key, "expected a string");
  return v.s;
}

const Value& get_array(const Value& obj, const char* key, const std::string& where) {
  const Value& v = req(obj, key, where);
  if (v.type != Type::Array) bad(where + "." + key, "expected an array");
  return v;
}

aotpack_dtype get_dtype(const Value& obj, const std::string& where) {
  std::string s = get_str(obj, "dtype", where);
  aotpack_dtype d;
  if (!dtype_from_manifest(s, &d))
    bad(where + ".dtype", cat("unknown dtype '", s, "' (v1 knows bf16 f16 f32 f64 i8 i16 i32 "
                              "i64 u8 bool)"));
  return d;
}

constexpr int64_t kMaxI64 = std::numeric_limits<int64_t>::max();
constexpr int64_t kMaxU32 = 0xFFFFFFFFll;

// [x, y, z] of positive integers ≤ hi.
void get_dim3(const Value& obj, const char* key, const std::string& where, uint32_t out[3],
              int64_t hi) {
  const Value& a = get_array(obj, key, where);
  std::string w = where + "." + key;
  if (a.items.size() != 3) bad(w, "expected [x, y, z]");
  for (int k = 0; k < 3; ++k) out[k] = uint32_t(as_int(a.items[k], cat(w, "[", k, "]"), 1, hi));
}

TensorSpec parse_tensor(const Value& v, const std::string& where, bool is_weight) {
  TensorSpec t;
  t.name = get_str(v, "name", where);
  t.dtype = get_dtype(v, where);
  const Value& shape = get_array(v, "shape", where);
  if (shape.items.size() > AOTPACK_MAX_RANK)
    bad(where + ".shape", cat("rank ", shape.items.size(), " exceeds ", AOTPACK_MAX_RANK));
  uint64_t n = dtype_size(t.dtype);
  for (size_t k = 0; k < shape.items.size(); ++k) {
    int64_t d = as_int(shape.items[k], cat(where, ".shape[", k, "]"), 0, kMaxI64);
    t.shape.push_back(d);
    if (__builtin_mul_overflow(n, uint64_t(d), &n)) bad(where + ".shape", "size overflows");
  }
  t.nbytes = n;
  if (is_weight) {
    int64_t nb = get_int(v, "nbytes", where, 0, kMaxI64);
    if (uint64_t(nb) != t.nbytes)
      bad(where, cat("weight '", t.name, "': nbytes ", nb, " but dtype and shape give ",
                     t.nbytes));
    t.sha256 = get_str(v, "sha256", where);
    bool hex = t.sha256.size() == 64;
    for (char c : t.sha256) hex = hex && ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
    if (!hex) bad(where + ".sha256", cat("weight '", t.name, "': not 64 lower-case hex digits"));
  }
  return t;
}

std::vector<TensorSpec> parse_tensors(const Value& m, const char* key, bool is_weight) {
  std::vector<TensorSpec> out;
  const Value& a = get_array(m, key, "manifest");
  for (size_t i = 0; i < a.items.size(); ++i)
    out.push_back(parse_tensor(a.items[i], cat(key, "[", i, "]"), is_weight));
  return out;
}

BufferSpec parse_buffer(const Value& v, const std::string& where) {
  BufferSpec b;
  std::string kind = get_str(v, "kind", where);
  if (kind == "arena") {
    b.kind = BufferKind::Arena;
    b.offset = uint64_t(get_int(v, "offset", where, 0, kMaxI64));
    b.nbytes = uint64_t(get_int(v, "nbytes", where, 0, kMaxI64));
    return b;
  }
  if (kind == "input") b.kind = BufferKind::Input;
  else if (kind == "output") b.kind = BufferKind::Output;
  else if (kind == "weight") b.kind = BufferKind::Weight;
  else bad(where + ".kind", cat("unknown buffer kind '", kind, "' (input|output|weight|arena)"));
  b.index = uint32_t(get_int(v, "index", where, 0, kMaxU32));
  return b;
}

KernelSpec parse_kernel(const Value& v, const std::string& where) {
  KernelSpec k;
  k.name = get_str(v, "name", where);
  k.entry = get_str(v, "entry", where);
  k.cubin = uint32_t(get_int(v, "cubin", where, 0, kMaxU32));
  k.cubin_sha256 = get_str(v, "cubin_sha256", where);
  get_dim3(v, "block", where, k.block, 1024);
  const Value* cl = v.find("cluster");
  if (cl && !cl->is_null()) get_dim3(v, "cluster", where, k.cluster, 1024);
  const Value* smem = v.find("smem");
  if (smem) k.smem = uint32_t(as_int(*smem, where + ".smem", 0, kMaxU32));
  const Value* be = v.find("backend");
  if (be && be->type == Type::String) k.backend = be->s;
  const Value* pdl = v.find("pdl");
  if (pdl && !pdl->is_null()) {
    if (pdl->type != Type::Bool) bad(where + ".pdl", "must be true or false");
    k.pdl = pdl->b;
  }
  return k;
}

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

std::vector<uint64_t> uint_list(const Value& v, const char* key, const std::string& where,
                                int64_t lo, int64_t hi) {
  std::vector<uint64_t> out;
  const Value& a = get_array(v, key, where);
  for (size_t i = 0; i < a.items.size(); ++i)
    out.push_back(uint64_t(as_int(a.items[i], cat(where, ".", key, "[", i, "]"), lo, hi)));
  return out;
}

TensorMapSpec parse_tensormap(const Value& v, const std::string& where) {
  TensorMapSpec t;
  t.dtype = get_dtype(v, where);
  t.dims = uint_list(v, "dims", where, 1, int64_t(1) << 32);
  t.strides = uint_list(v, "strides", where, 0, kMaxI64);
  // Box range is validated with a precise message in validate_manifest.
  for (uint64_t b : uint_list(v, "box", where, 0, kMaxU32)) t.box.push_back(uint32_t(b));
  t.swizzle = enum_field(v, "swizzle", where, {"none", "32B", "64B", "128B"}, 0);
  t.l2 = enum_field(v, "l2", where, {"none", "64B", "128B", "256B"}, 0);
  t.oob = enum_field(v, "oob", where, {"zero", "nan"}, 0);
  return t;
}

}  // namespace

void fastdivmod_fields(uint32_t divisor, uint32_t words[3]) {
  uint32_t l = 0;
  while ((uint64_t(1) << l) < divisor) ++l;  // ceil(log2(divisor))
  uint64_t mult = ((uint64_t(1) << 32) * ((uint64_t(1) << l) - divisor)) / divisor + 1;
  uint32_t shift1 = l < 1 ? l : 1, shift2 = l > 1 ? l - 1 : 0;
  words[0] = divisor;
  words[1] = uint32_t(mult);  // < 2^32 for every divisor < 2^31 (1 for divisor 1)
  words[2] = shift1 | (shift2 << 8);
}

namespace {

Slot parse_slot(const Value& v, const std::string& where) {
  Slot s;
  std::string kind = get_str(v, "kind", where);
  const Value* off = v.find("offset");
  auto offset = [&] { return off ? uint64_t(as_int(*off, where + ".offset", 0, kMaxI64)) : 0; };
  if (kind == "ptr" || kind == "tensormap") {
    s.kind = kind == "ptr" ? SlotKind::Ptr : SlotKind::TensorMap;
    s.buffer = uint32_t(get_int(v, "buffer", where, 0, kMaxU32));
    s.offset = offset();
    if (s.kind == SlotKind::TensorMap) s.tmap = parse_tensormap(v, where);
  } else if (kind == "null") {
    s.kind = SlotKind::Null;
  } else if (kind == "i32") {
    s.kind = SlotKind::I32;
    s.bits = uint32_t(int32_t(get_int(v, "value", where, INT32_MIN, INT32_MAX)));
  } else if (kind == "u32") {
    s.kind = SlotKind::U32;
    s.bits = uint64_t(get_int(v, "value", where, 0, kMaxU32));
  } else if (kind == "i64") {
    s.kind = SlotKind::I64;
    s.bits = uint64_t(get_int(v, "value", where, std::numeric_limits<int64_t>::min(), kMaxI64));
  } else if (kind == "u64") {
    s.kind = SlotKind::U64;  // JSON integers are kept as int64: u64 values ≥ 2^63 not expressible
    s.bits = uint64_t(get_int(v, "value", where, 0, kMaxI64));
  } else if (kind == "fastdivmod") {
    s.kind = SlotKind::FastDivmod;
    fastdivmod_fields(uint32_t(get_int(v, "value", where, 1, INT32_MAX)), s.fdm);
  } else if (kind == "f32") {
    s.kind = SlotKind::F32;
    const Value& val = req(v, "value", where);
    if (!val.is_number()) bad(where + ".value", "expected a number");
    float f = float(val.type == Type::Int ? double(val.i) : val.d);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    s.bits = u;
  } else {
    fail(AOTPACK_UNSUPPORTED_VERSION, "manifest: ", where, ": parameter slot kind '", kind,
         "' is not supported by this runtime (v1: ptr null i32 i64 u32 u64 f32 fastdivmod "
         "tensormap)");
  }
  return s;
}

StepSpec parse_step(const Value& v, const std::string& where) {
  StepSpec st;
  st.kernel = uint32_t(get_int(v, "kernel", where, 0, kMaxU32));
  get_dim3(v, "grid", where, st.grid, 0x7FFFFFFF);
  const Value& args = get_array(v, "args", where);
  for (size_t i = 0; i < args.items.size(); ++i)
    st.args.push_back(parse_slot(args.items[i], cat(where, ".args[", i, "]")));
  return st;
}

void parse_target(const Value& root, Manifest& m) {
  const Value& t = req(root, "target", "manifest");
  m.arch = get_str(t, "arch", "target");
  const Value& cc = get_array(t, "cc", "target");
  if (cc.items.size() != 2) bad("target.cc", "expected [major, minor]");
  m.cc_major = int(as_int(cc.items[0], "target.cc[0]", 0, 1000));
  m.cc_minor = int(as_int(cc.items[1], "target.cc[1]", 0, 1000));
  m.min_driver = get_int(t, "min_driver", "target", 0, kMaxI64);
  const Value* sm = t.find("sm_count");
  if (sm && sm->type == Type::Int) m.sm_count = sm->i;
}

}  // namespace

Manifest parse_manifest(const std::string& text) {
  Value root = json::parse(text.data(), text.size(), "manifest");
  if (root.type != Type::Object) bad("manifest", "expected a JSON object");
  Manifest m;
  // Format and version first: a future bundle may have any other shape.
  const Value* fmt = root.find("format");
  if (!fmt || fmt->type != Type::String || fmt->s != "aotpack")
    fail(AOTPACK_CORRUPT_BUNDLE, "manifest: \"format\" must be \"aotpack\"",
         fmt && fmt->type == Type::String ? cat(" (got \"", fmt->s, "\")") : std::string(),
         ": this file is not an aotpack bundle");
  const Value* ver = root.find("version");
  if (!ver || ver->type != Type::Int) bad("version", "missing or not an integer");
  m.version = ver->i;
  if (m.version != AOTPACK_BUNDLE_FORMAT_VERSION)
    fail(AOTPACK_UNSUPPORTED_VERSION, "bundle format version ", m.version,
         " is not supported by this runtime (it reads version ", AOTPACK_BUNDLE_FORMAT_VERSION,
         "); use an aotpack runtime that matches the compiler that built the bundle");
  parse_target(root, m);
  m.inputs = parse_tensors(root, "inputs", false);
  m.outputs = parse_tensors(root, "outputs", false);
  m.weights = parse_tensors(root, "weights", true);
  const Value* ext = root.find("external_weights");
  if (ext && !ext->is_null()) {
    m.external_weights = true;
    m.external_weights_file = get_str(*ext, "file", "external_weights");
  }
  m.arena_bytes = uint64_t(get_int(root, "arena_bytes", "manifest", 0, kMaxI64));
  const Value& bufs = get_array(root, "buffers", "manifest");
  for (size_t i = 0; i < bufs.items.size(); ++i)
    m.buffers.push_back(parse_buffer(bufs.items[i], cat("buffers[", i, "]")));
  const Value& ks = get_array(root, "kernels", "manifest");
  for (size_t i = 0; i < ks.items.size(); ++i)
    m.kernels.push_back(parse_kernel(ks.items[i], cat("kernels[", i, "]")));
  const Value& steps = get_array(root, "steps", "manifest");
  for (size_t i = 0; i < steps.items.size(); ++i)
    m.steps.push_back(parse_step(steps.items[i], cat("steps[", i, "]")));
  return m;
}

}  // namespace aotpack
