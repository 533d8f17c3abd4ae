// manifest_generation.cpp — the manifest's "state" list (session-owned buffers kept across
// runs) and "generation" section (which inputs/outputs the token loop feeds and reads), as
// docs/generation.md defines them: parsed with the parser's helpers, then cross-checked
// against the inputs, outputs and symbols once validate_static knows the binders.
#include <set>

#include "dtype.hpp"
#include "manifest.hpp"
#include "manifest_parse.hpp"

namespace aotpack {
namespace manifest_parse {

namespace {
const std::string kGen = "generation";
constexpr int64_t kMaxI32 = 0x7FFFFFFF;
}  // namespace

// "state": [{"name", "dtype", "shape"}]: static shapes, every dim >= 1 (a state buffer is
// allocated at session create, before any shape is known).
void parse_state(Ctx& c, const Value& root) {
  const Value* list = root.find("state");
  if (!list || list->is_null()) return;
  if (list->type != Type::Array) bad("state", "expected an array");
  for (size_t i = 0; i < list->items.size(); ++i) {
    const Value& v = list->items[i];
    std::string w = cat("state[", i, "]");
    check_keys(v, w, {"name", "dtype", "shape"});
    TensorSpec t;
    t.name = get_str(v, "name", w);
    if (t.name.empty()) bad(w + ".name", "empty name");
    t.dtype = get_dtype(v, w);
    const Value& shape = get_array(v, "shape", w);
    if (shape.items.size() > AOTPACK_MAX_RANK)
      bad(w + ".shape", cat("rank ", shape.items.size(), " exceeds ", AOTPACK_MAX_RANK));
    uint64_t n = dtype_size(t.dtype);
    for (size_t k = 0; k < shape.items.size(); ++k) {
      const Value& d = shape.items[k];
      std::string wk = cat(w, ".shape[", k, "]");
      if (d.type == Type::String)
        bad(wk, cat("'", d.s, "': a state buffer's shape is static (it is allocated once per "
                              "session, at its full size): integers >= 1 only"));
      int64_t dim = as_int(c, d, wk, 1, kMaxI64);
      t.dims.push_back(IntExpr::constant(dim));
      t.shape.push_back(dim);
      if (__builtin_mul_overflow(n, uint64_t(dim), &n)) bad(w + ".shape", "size overflows");
    }
    t.nbytes = n;
    c.m.state.push_back(std::move(t));
  }
}

// "generation": {max_batch, max_seq_len, vocab_size, input_ids, positions, last_index,
// next_ids, logits, eos_ids?}. Cross references are checked by validate_generation.
void parse_generation(Ctx& c, const Value& root) {
  const Value* v = root.find("generation");
  if (!v || v->is_null()) return;
  check_keys(*v, kGen, {"max_batch", "max_seq_len", "vocab_size", "input_ids", "positions",
                        "last_index", "next_ids", "logits", "eos_ids"});
  GenerationSpec& g = c.m.generation;
  g.present = true;
  g.max_batch = get_int(c, *v, "max_batch", kGen, 1, kMaxI32);
  g.max_seq_len = get_int(c, *v, "max_seq_len", kGen, 1, kMaxI32);
  g.vocab_size = get_int(c, *v, "vocab_size", kGen, 1, kMaxI32);
  g.input_ids = uint32_t(get_int(c, *v, "input_ids", kGen, 0, kMaxU32));
  g.positions = uint32_t(get_int(c, *v, "positions", kGen, 0, kMaxU32));
  g.last_index = uint32_t(get_int(c, *v, "last_index", kGen, 0, kMaxU32));
  g.next_ids = uint32_t(get_int(c, *v, "next_ids", kGen, 0, kMaxU32));
  g.logits = uint32_t(get_int(c, *v, "logits", kGen, 0, kMaxU32));
  const Value* eos = v->find("eos_ids");
  if (!eos || eos->is_null()) return;
  if (eos->type != Type::Array) bad("generation.eos_ids", "expected an array");
  for (size_t i = 0; i < eos->items.size(); ++i)
    g.eos_ids.push_back(as_int(c, eos->items[i], cat("generation.eos_ids[", i, "]"), 0,
                               g.vocab_size - 1));
}

}  // namespace manifest_parse

namespace {

[[noreturn]] void bad_gen(const std::string& msg) {
  fail(AOTPACK_CORRUPT_BUNDLE, "manifest: generation: ", msg);
}

// The symbol that dim `k` of `t` is exactly (its expression is that symbol's name), or -1.
int dim_symbol(const Manifest& m, const TensorSpec& t, size_t k) {
  const IntExpr& d = t.dims[k];
  return d.is_const() ? -1 : m.exprs[size_t(d.expr)].single_symbol();
}

std::string dim_text(const Manifest& m, const TensorSpec& t, size_t k) {
  const IntExpr& d = t.dims[k];
  return d.is_const() ? std::to_string(d.value) : m.exprs[size_t(d.expr)].text();
}

// `t` (input or output `what`) has dtype `dtype` and rank `rank`.
void expect_tensor(const TensorSpec& t, const char* what, aotpack_dtype dtype, size_t rank,
                   const char* shape) {
  if (t.dtype != dtype || t.dims.size() != rank)
    bad_gen(cat(what, " is '", t.name, "' (", dtype_manifest_name(t.dtype), ", rank ",
                t.dims.size(), ") but must be ", dtype_manifest_name(dtype), " ", shape));
}

// Dim `k` of `t` must be exactly symbol `sym` (named `role`: B or S).
void expect_symbol_dim(const Manifest& m, const TensorSpec& t, size_t k, int sym,
                       const char* what) {
  if (dim_symbol(m, t, k) != sym)
    bad_gen(cat(what, " '", t.name, "' dim ", k, " is '", dim_text(m, t, k), "' but must be "
                "the symbol '", m.symbols[size_t(sym)].name, "' (as input_ids' dim says)"));
}

const TensorSpec& indexed(const std::vector<TensorSpec>& list, uint32_t i, const char* field,
                          const char* kind) {
  if (i >= list.size())
    bad_gen(cat(field, " = ", i, " is out of range (the model has ", list.size(), " ", kind,
                "s)"));
  return list[i];
}

// input_ids' dim k must be a symbol whose range is 1..`max` (`field` names the maximum).
int seq_symbol(const Manifest& m, const TensorSpec& ids, size_t k, int64_t max,
               const char* field, const char* role) {
  int s = dim_symbol(m, ids, k);
  if (s < 0)
    bad_gen(cat("input_ids '", ids.name, "' dim ", k, " (the ", role, ") is '",
                dim_text(m, ids, k), "' but must be a symbol: prefill and decode run it at "
                "different sizes (bundle format v2)"));
  const SymbolSpec& sym = m.symbols[size_t(s)];
  if (sym.min != 1 || sym.max != max)
    bad_gen(cat(field, " is ", max, " but symbol '", sym.name, "' (input_ids dim ", k,
                ", the ", role, ") ranges ", sym.min, "..", sym.max, ": it must range 1..",
                field));
  return s;
}

}  // namespace

void validate_state(Manifest& m) {
  std::set<std::string> names;
  uint64_t total = 0;
  m.state_offsets.clear();
  for (size_t i = 0; i < m.state.size(); ++i) {
    const TensorSpec& t = m.state[i];
    if (!names.insert(t.name).second)
      fail(AOTPACK_CORRUPT_BUNDLE, "manifest: state: duplicate name '", t.name, "'");
    m.state_offsets.push_back(total);
    uint64_t padded = (t.nbytes + 255) / 256 * 256;  // each buffer 256-aligned
    if (t.nbytes > kMaxStateBytes || (total += padded) > kMaxStateBytes)
      fail(AOTPACK_CORRUPT_BUNDLE, "manifest: state[", i, "] '", t.name, "': the state "
           "buffers need more than ", kMaxStateBytes >> 30, " GiB in all: the manifest is "
           "corrupt; rebuild the bundle");
  }
  m.state_bytes = total;
}

void validate_generation(const Manifest& m) {
  const GenerationSpec& g = m.generation;
  if (!g.present) return;
  const TensorSpec& ids = indexed(m.inputs, g.input_ids, "input_ids", "input");
  const TensorSpec& pos = indexed(m.inputs, g.positions, "positions", "input");
  const TensorSpec& last = indexed(m.inputs, g.last_index, "last_index", "input");
  const TensorSpec& next = indexed(m.outputs, g.next_ids, "next_ids", "output");
  const TensorSpec& logits = indexed(m.outputs, g.logits, "logits", "output");
  if (g.input_ids == g.positions || g.input_ids == g.last_index || g.positions == g.last_index)
    bad_gen("input_ids, positions and last_index must name three different inputs");
  if (g.next_ids == g.logits) bad_gen("next_ids and logits must name two different outputs");
  if (m.inputs.size() != 3)
    bad_gen(cat("the step has ", m.inputs.size(), " inputs; a generation step takes exactly "
                "input_ids, positions and last_index (the token loop feeds nothing else)"));
  expect_tensor(ids, "input_ids", AOTPACK_DTYPE_I64, 2, "[B, S]");
  expect_tensor(pos, "positions", AOTPACK_DTYPE_I64, 2, "[B, S]");
  expect_tensor(last, "last_index", AOTPACK_DTYPE_I64, 1, "[B]");
  expect_tensor(next, "next_ids", AOTPACK_DTYPE_I64, 1, "[B]");
  expect_tensor(logits, "logits", AOTPACK_DTYPE_F32, 2, "[B, vocab_size]");
  int b = seq_symbol(m, ids, 0, g.max_batch, "max_batch", "batch");
  int s = seq_symbol(m, ids, 1, g.max_seq_len, "max_seq_len", "sequence length");
  if (b == s) bad_gen("input_ids' two dims are the same symbol: batch and length must differ");
  expect_symbol_dim(m, pos, 0, b, "positions");
  expect_symbol_dim(m, pos, 1, s, "positions");
  expect_symbol_dim(m, last, 0, b, "last_index");
  expect_symbol_dim(m, next, 0, b, "next_ids");
  expect_symbol_dim(m, logits, 0, b, "logits");
  if (!logits.dims[1].is_const() || logits.dims[1].value != g.vocab_size)
    bad_gen(cat("logits '", logits.name, "' dim 1 is '", dim_text(m, logits, 1),
                "' but must be vocab_size = ", g.vocab_size));
}

}  // namespace aotpack
