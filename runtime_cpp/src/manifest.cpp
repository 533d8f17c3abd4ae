// manifest.cpp — JSON → typed Manifest, with type/range checks and messages that name the
// offending field by its JSON path (e.g. "steps[3].args[2].box[1]"). Top level, symbols,
// tensors, buffers and kernels here; steps and their slots in manifest_steps.cpp.
#include "manifest.hpp"

#include <algorithm>
#include <set>

#include "dtype.hpp"
#include "error.hpp"
#include "manifest_parse.hpp"

namespace aotpack {
namespace manifest_parse {

void bad(const std::string& where, const std::string& msg) {
  fail(AOTPACK_CORRUPT_BUNDLE, "manifest: ", where, ": ", msg);
}

namespace {

// Edits (insert, delete, replace, swap two neighbours) from key a to key b: "smme" is one
// swap from "smem". Keys are short; a key is capped at 64 characters (longer: no suggestion).
size_t edit_distance(const std::string& a, const std::string& b) {
  if (a.size() > 64 || b.size() > 64) return SIZE_MAX;
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1,
                          d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

}  // namespace

void check_keys(const Value& obj, const std::string& where,
                std::initializer_list<const char*> allowed) {
  if (obj.type != Type::Object) bad(where, "expected an object");
  for (const auto& kv : obj.fields) {
    // the common case first: a known key costs a few compares (a generation bundle's
    // manifest has ~10^5 keys: the suggestion below, for every key, was most of its parse)
    bool known = false;
    for (const char* a : allowed) known = known || kv.first == a;
    if (known) continue;
    const char* close = nullptr;
    size_t best = 3;  // suggest a key within 2 edits, the closest one
    std::string list;
    for (const char* a : allowed) {
      known = known || kv.first == a;
      size_t d = edit_distance(kv.first, a);
      if (d < best) best = d, close = a;
      list += cat(list.empty() ? "" : " ", a);
    }
    // a key no allowed one resembles may be a newer aotpack's: say which runtime this is
    if (!known)
      bad(where, cat("unknown field '", kv.first, "' (", close ? cat("did you mean '", close, "'? ")
                                                              : std::string(),
                     "allowed: ", list, ")",
                     close ? "" : "; if a newer aotpack wrote the bundle, run it with the "
                                  "runtime in the bundle's folder (this one is "
                                  AOTPACK_VERSION_STRING ")"));
  }
}

const Value& req(const Value& obj, const char* key, const std::string& where) {
  if (obj.type != Type::Object) bad(where, "expected an object");
  const Value* v = obj.find(key);
  if (!v) bad(where, cat("missing field '", key, "'"));
  return *v;
}

namespace {

// JSON paths of top-level fields. Named strings, not literals: a reference returned by
// req/get_array next to a temporary std::string trips GCC 13's -Wdangling-reference.
const std::string kTop = "manifest", kTarget = "target";

[[noreturn]] void refuse_string(const Ctx& c, const Value& v, const std::string& where) {
  if (c.m.version < 2)
    fail(AOTPACK_UNSUPPORTED_VERSION, "manifest: ", where, " is the symbol '", v.s,
         "': symbolic (dynamic) shapes and expressions need bundle format v2 (this bundle "
         "says \"version\": 1 and v1 needs integers); rebuild the bundle");
  bad(where, cat("expected an integer, got the string '", v.s, "' (expressions are allowed "
                 "only in input/output shapes, grids, integer slot values and the offsets, "
                 "dims and strides of ptr/tensormap slots)"));
}

void check_range(int64_t v, const std::string& where, int64_t lo, int64_t hi) {
  if (v < lo || v > hi) bad(where, cat("value ", v, " is outside [", lo, ", ", hi, "]"));
}

}  // namespace

int64_t as_int(const Ctx& c, const Value& v, const std::string& where, int64_t lo, int64_t hi) {
  if (v.type == Type::String) refuse_string(c, v, where);
  if (v.type != Type::Int) bad(where, cat("expected an integer, got ", Value::type_name(v.type)));
  check_range(v.i, where, lo, hi);
  return v.i;
}

int64_t get_int(const Ctx& c, const Value& obj, const char* key, const std::string& where,
                int64_t lo, int64_t hi) {
  return as_int(c, req(obj, key, where), where + "." + key, lo, hi);
}

IntExpr as_expr(Ctx& c, const Value& v, const std::string& where, int64_t lo, int64_t hi) {
  if (v.type != Type::String || c.m.version < 2)
    return IntExpr::constant(as_int(c, v, where, lo, hi));
  auto known = c.exprs_by_text.find(v.s);
  if (known == c.exprs_by_text.end()) {
    Expr e = Expr::compile(v.s, c.symbol_names, where);
    IntExpr out;
    if (e.symbols_used().empty()) {  // "2*64": a constant written as an expression
      if (const char* why = e.eval(nullptr, &out.value))
        bad(where, cat("expression '", v.s, "' ", why));
    } else {
      out.expr = int32_t(c.m.exprs.size());
      c.m.exprs.push_back(std::move(e));
    }
    known = c.exprs_by_text.emplace(v.s, out).first;
  }
  if (known->second.is_const())  // each use has its own range
    check_range(known->second.value, cat(where, " ('", v.s, "')"), lo, hi);
  return known->second;
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
    bad(where + ".dtype", cat("unknown dtype '", s, "' (known: bf16 f16 f32 f64 i8 i16 i32 "
                              "i64 u8 bool f8e4m3)"));
  return d;
}

namespace {

// [x, y, z] of positive integers ≤ hi (block, cluster: never expressions).
void get_dim3(const Ctx& c, const Value& obj, const char* key, const std::string& where,
              uint32_t out[3], int64_t hi) {
  const Value& a = get_array(obj, key, where);
  std::string w = where + "." + key;
  if (a.items.size() != 3) bad(w, "expected [x, y, z]");
  for (int k = 0; k < 3; ++k)
    out[k] = uint32_t(as_int(c, a.items[k], cat(w, "[", k, "]"), 1, hi));
}

void check_hex(const std::string& hex, size_t digits, const std::string& where,
               const std::string& what) {
  bool ok = hex.size() == digits;
  for (char ch : hex) ok = ok && ((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f'));
  if (!ok) bad(where, cat(what, ": not ", digits, " lower-case hex digits"));
}

TensorSpec parse_tensor(Ctx& c, const Value& v, const std::string& where, bool is_weight) {
  TensorSpec t;
  if (is_weight) check_keys(v, where, {"name", "dtype", "shape", "nbytes", "sha256", "checksum"});
  else check_keys(v, where, {"name", "dtype", "shape"});
  t.name = get_str(v, "name", where);
  t.dtype = get_dtype(v, where);
  const Value& shape = get_array(v, "shape", where);
  if (shape.items.size() > AOTPACK_MAX_RANK)
    bad(where + ".shape", cat("rank ", shape.items.size(), " exceeds ", AOTPACK_MAX_RANK));
  uint64_t n = dtype_size(t.dtype);
  for (size_t k = 0; k < shape.items.size(); ++k) {
    std::string w = cat(where, ".shape[", k, "]");
    IntExpr d = is_weight ? IntExpr::constant(as_int(c, shape.items[k], w, 0, kMaxI64))
                          : as_expr(c, shape.items[k], w, 0, kMaxI64);
    t.dims.push_back(d);
    t.shape.push_back(d.is_const() ? d.value : -1);
    if (d.is_const() && __builtin_mul_overflow(n, uint64_t(d.value), &n))
      bad(where + ".shape", "size overflows");
  }
  t.nbytes = t.is_static() ? n : 0;  // dynamic: filled by validate_manifest (at the maxima)
  if (is_weight) {
    int64_t nb = get_int(c, v, "nbytes", where, 0, kMaxI64);
    if (uint64_t(nb) != t.nbytes)
      bad(where, cat("weight '", t.name, "': nbytes ", nb, " but dtype and shape give ",
                     t.nbytes));
    t.sha256 = get_str(v, "sha256", where);
    check_hex(t.sha256, 64, where + ".sha256", cat("weight '", t.name, "'"));
    if (v.find("checksum")) {  // optional: bundles of aotpack 0.2.0 and before have none
      t.checksum = get_str(v, "checksum", where);
      check_hex(t.checksum, 16, where + ".checksum", cat("weight '", t.name, "'"));
    }
  }
  return t;
}

std::vector<TensorSpec> parse_tensors(Ctx& c, const Value& root, const char* key,
                                      bool is_weight) {
  std::vector<TensorSpec> out;
  const Value& a = get_array(root, key, kTop);
  for (size_t i = 0; i < a.items.size(); ++i)
    out.push_back(parse_tensor(c, a.items[i], cat(key, "[", i, "]"), is_weight));
  return out;
}

BufferSpec parse_buffer(const Ctx& c, const Value& v, const std::string& where) {
  BufferSpec b;
  std::string kind = get_str(v, "kind", where);
  if (kind == "arena" || kind == "counters") {
    check_keys(v, where, {"kind", "offset", "nbytes"});
    b.kind = kind == "arena" ? BufferKind::Arena : BufferKind::Counters;
    b.offset = uint64_t(get_int(c, v, "offset", where, 0, kMaxI64));
    b.nbytes = uint64_t(get_int(c, v, "nbytes", where, 0, kMaxI64));
    return b;
  }
  if (kind == "input") b.kind = BufferKind::Input;
  else if (kind == "output") b.kind = BufferKind::Output;
  else if (kind == "weight") b.kind = BufferKind::Weight;
  else if (kind == "state") b.kind = BufferKind::State;
  else bad(where + ".kind", cat("unknown buffer kind '", kind,
                                "' (input|output|weight|arena|state|counters)"));
  check_keys(v, where, {"kind", "index"});
  b.index = uint32_t(get_int(c, v, "index", where, 0, kMaxU32));
  return b;
}

KernelSpec parse_kernel(const Ctx& c, const Value& v, const std::string& where) {
  KernelSpec k;
  // fused_ops and config describe the kernel for people (inspect); the runtime ignores them.
  check_keys(v, where, {"name", "entry", "cubin", "cubin_sha256", "block", "cluster", "smem",
                        "backend", "fused_ops", "config", "pdl"});
  k.name = get_str(v, "name", where);
  k.entry = get_str(v, "entry", where);
  k.cubin = uint32_t(get_int(c, v, "cubin", where, 0, kMaxU32));
  k.cubin_sha256 = get_str(v, "cubin_sha256", where);
  get_dim3(c, v, "block", where, k.block, 1024);
  const Value* cl = v.find("cluster");
  if (cl && !cl->is_null()) get_dim3(c, v, "cluster", where, k.cluster, 1024);
  const Value* smem = v.find("smem");
  if (smem) k.smem = uint32_t(as_int(c, *smem, where + ".smem", 0, kMaxU32));
  const Value* be = v.find("backend");
  if (be && be->type == Type::String) k.backend = be->s;
  const Value* pdl = v.find("pdl");
  if (pdl && !pdl->is_null()) {
    if (pdl->type != Type::Bool) bad(where + ".pdl", "must be true or false");
    k.pdl = pdl->b;
  }
  return k;
}

void parse_target(const Ctx& c, const Value& root, Manifest& m) {
  const Value& t = req(root, "target", kTop);
  check_keys(t, kTarget, {"arch", "cc", "min_driver", "sm_count"});
  m.arch = get_str(t, "arch", kTarget);
  const Value& cc = get_array(t, "cc", kTarget);
  if (cc.items.size() != 2) bad("target.cc", "expected [major, minor]");
  m.cc_major = int(as_int(c, cc.items[0], "target.cc[0]", 0, 1000));
  m.cc_minor = int(as_int(c, cc.items[1], "target.cc[1]", 0, 1000));
  m.min_driver = get_int(c, t, "min_driver", kTarget, 0, kMaxI64);
  const Value* sm = t.find("sm_count");
  if (sm && !sm->is_null()) m.sm_count = as_int(c, *sm, "target.sm_count", 0, 1 << 20);
  int major = 0, minor = 0;
  if (!parse_arch(m.arch, &major, &minor))
    bad("target.arch", cat("'", m.arch, "' is not a GPU architecture like sm_90a (sm_, the "
                           "compute capability's digits, an optional a or f)"));
  if (major != m.cc_major || minor != m.cc_minor)
    bad("target", cat("arch '", m.arch, "' means compute capability ", major, ".", minor,
                      " but cc says ", m.cc_major, ".", m.cc_minor,
                      ": the manifest contradicts itself; rebuild the bundle"));
}

// external_weights.file: a path relative to the bundle's folder that stays inside it. Another
// place is the caller's to choose (weights_path / --weights), never the bundle's.
void check_weights_file(const std::string& f) {
  bool up = false;
  for (size_t i = 0; i <= f.size();) {
    size_t j = f.find('/', i);
    if (j == std::string::npos) j = f.size();
    up = up || f.compare(i, j - i, "..") == 0;
    i = j + 1;
  }
  if (f.empty() || f[0] == '/' || up || f.find('\0') != std::string::npos)
    bad("external_weights.file", cat("'", f, "' must be a relative path inside the bundle's "
                                     "folder (no leading '/', no '..'); to load weights from "
                                     "elsewhere, pass their path (weights_path / --weights)"));
}

}  // namespace

bool parse_arch(const std::string& arch, int* major, int* minor) {
  if (arch.size() < 5 || arch.compare(0, 3, "sm_") != 0) return false;
  size_t end = arch.size();
  if (arch[end - 1] == 'a' || arch[end - 1] == 'f') --end;
  if (end - 3 < 2 || end - 3 > 3) return false;
  int v = 0;
  for (size_t i = 3; i < end; ++i) {
    if (arch[i] < '0' || arch[i] > '9') return false;
    v = v * 10 + (arch[i] - '0');
  }
  *major = v / 10;
  *minor = v % 10;
  return true;
}

namespace {

bool is_identifier(const std::string& s) {
  if (s.empty() || (s[0] >= '0' && s[0] <= '9')) return false;
  for (char ch : s)
    if (!(ch == '_' || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
          (ch >= '0' && ch <= '9')))
      return false;
  return true;
}

// v2 "symbols": [{"name", "min", "max", "example"?}]; 0 <= min <= max <= 2^31-1.
void parse_symbols(Ctx& c, const Value& root) {
  const Value& a = get_array(root, "symbols", kTop);
  std::set<std::string> seen;
  for (size_t i = 0; i < a.items.size(); ++i) {
    const Value& v = a.items[i];
    std::string w = cat("symbols[", i, "]");
    check_keys(v, w, {"name", "min", "max", "example"});
    SymbolSpec s;
    s.name = get_str(v, "name", w);
    if (!is_identifier(s.name) || s.name == "min" || s.name == "max")
      bad(w + ".name", cat("'", s.name, "' is not a valid symbol name (an identifier "
                           "[A-Za-z_][A-Za-z0-9_]*, not min or max)"));
    if (!seen.insert(s.name).second) bad(w + ".name", cat("duplicate symbol '", s.name, "'"));
    s.min = get_int(c, v, "min", w, 0, 0x7FFFFFFF);
    s.max = get_int(c, v, "max", w, s.min, 0x7FFFFFFF);
    const Value* ex = v.find("example");
    if (ex && !ex->is_null()) s.example = as_int(c, *ex, w + ".example", s.min, s.max);
    c.m.symbols.push_back(s);
    c.symbol_names.push_back(s.name);
  }
}

void parse_version(const Value& root, Manifest& m) {
  // Format and version first: a future bundle may have any other shape.
  const Value* fmt = root.find("format");
  if (!fmt || fmt->type != Type::String || fmt->s != "aotpack")
    fail(AOTPACK_CORRUPT_BUNDLE, "manifest: \"format\" must be \"aotpack\"",
         fmt && fmt->type == Type::String ? cat(" (got \"", fmt->s, "\")") : std::string(),
         ": this file is not an aotpack bundle");
  const Value* ver = root.find("version");
  if (!ver || ver->type != Type::Int) bad("version", "missing or not an integer");
  m.version = ver->i;
  if (m.version < 1 || m.version > AOTPACK_BUNDLE_FORMAT_VERSION)
    fail(AOTPACK_UNSUPPORTED_VERSION, "bundle format version ", m.version,
         " is not supported by this runtime (it reads versions 1 to ",
         AOTPACK_BUNDLE_FORMAT_VERSION, "); use an aotpack runtime that matches the compiler "
         "that built the bundle");
}

}  // namespace
}  // namespace manifest_parse

void slot_value_range(SlotKind kind, int64_t* lo, int64_t* hi) {
  using namespace manifest_parse;
  switch (kind) {
    case SlotKind::I32: *lo = INT32_MIN; *hi = INT32_MAX; return;
    case SlotKind::U32: *lo = 0; *hi = kMaxU32; return;
    case SlotKind::U64: *lo = 0; *hi = kMaxI64; return;  // JSON integers are int64
    case SlotKind::FastDivmod: *lo = 1; *hi = INT32_MAX; return;
    default: *lo = kMinI64; *hi = kMaxI64; return;
  }
}

Manifest parse_manifest(const std::string& text) {
  using namespace manifest_parse;
  Value root = json::parse(text.data(), text.size(), "manifest");
  if (root.type != Type::Object) bad("manifest", "expected a JSON object");
  Manifest m;
  Ctx c{m, {}};
  parse_version(root, m);
  // provenance: free-form build facts, never read by the runtime (covered by the digest).
  if (m.version >= 2)
    check_keys(root, kTop, {"format", "version", "target", "symbols", "inputs", "outputs",
                            "weights", "external_weights", "arena_bytes", "buffers", "kernels",
                            "steps", "state", "generation", "provenance", "counters_bytes"});
  else if (root.find("symbols"))
    fail(AOTPACK_UNSUPPORTED_VERSION, "manifest: \"symbols\" (symbolic, dynamic dims) need "
         "bundle format v2 but this bundle says \"version\": 1; rebuild the bundle");
  else
    check_keys(root, kTop, {"format", "version", "target", "inputs", "outputs", "weights",
                            "external_weights", "arena_bytes", "buffers", "kernels", "steps",
                            "state", "generation", "provenance", "counters_bytes"});
  if (m.version >= 2) parse_symbols(c, root);  // before anything that may hold expressions
  parse_target(c, root, m);
  m.inputs = parse_tensors(c, root, "inputs", false);
  m.outputs = parse_tensors(c, root, "outputs", false);
  m.weights = parse_tensors(c, root, "weights", true);
  const Value* ext = root.find("external_weights");
  if (ext && !ext->is_null()) {
    m.external_weights = true;
    check_keys(*ext, "external_weights", {"file"});
    m.external_weights_file = get_str(*ext, "file", "external_weights");
    check_weights_file(m.external_weights_file);
  }
  m.arena_bytes = uint64_t(get_int(c, root, "arena_bytes", kTop, 0, kMaxI64));
  if (root.find("counters_bytes"))
    m.counters_bytes = uint64_t(get_int(c, root, "counters_bytes", kTop, 0,
                                        int64_t(kMaxCountersBytes)));
  parse_state(c, root);
  parse_generation(c, root);
  const Value& bufs = get_array(root, "buffers", kTop);
  for (size_t i = 0; i < bufs.items.size(); ++i)
    m.buffers.push_back(parse_buffer(c, bufs.items[i], cat("buffers[", i, "]")));
  const Value& ks = get_array(root, "kernels", kTop);
  for (size_t i = 0; i < ks.items.size(); ++i)
    m.kernels.push_back(parse_kernel(c, ks.items[i], cat("kernels[", i, "]")));
  const Value& steps = get_array(root, "steps", kTop);
  for (size_t i = 0; i < steps.items.size(); ++i)
    m.steps.push_back(parse_step(c, steps.items[i], cat("steps[", i, "]")));
  return m;
}

}  // namespace aotpack
