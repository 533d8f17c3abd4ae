// manifest_parse.hpp — helpers shared by the manifest parser's files (manifest.cpp: top level,
// tensors, buffers, kernels, symbols; manifest_steps.cpp: steps, slots, tensor maps).
// Every error names the field by its JSON path ("steps[3].args[2].box[1]").
#pragma once

#include <initializer_list>
#include <limits>
#include <string>
#include <unordered_map>
#include <vector>

#include "error.hpp"
#include "json.hpp"
#include "manifest.hpp"

namespace aotpack {
namespace manifest_parse {

using json::Type;
using json::Value;

constexpr int64_t kMaxI64 = std::numeric_limits<int64_t>::max();
constexpr int64_t kMinI64 = std::numeric_limits<int64_t>::min();
constexpr int64_t kMaxU32 = 0xFFFFFFFFll;

// What the parser knows while it reads: the manifest so far (version, symbols, expressions).
struct Ctx {
  Manifest& m;
  std::vector<std::string> symbol_names;
  // Expressions already compiled, by their text: a generation manifest writes "B*S" and its
  // like thousands of times; each is compiled (and evaluated per shape) once.
  std::unordered_map<std::string, IntExpr> exprs_by_text;
};

[[noreturn]] void bad(const std::string& where, const std::string& msg);

// Refuses any member of object `obj` not in `allowed` (a misspelled key would otherwise be
// ignored and its default used): "unknown field 'smme' (did you mean 'smem'?; allowed: ...)".
void check_keys(const Value& obj, const std::string& where,
                std::initializer_list<const char*> allowed);

// Member `key` of object `obj`, required.
const Value& req(const Value& obj, const char* key, const std::string& where);

// An integer in [lo, hi]. A string here is refused: in v1 as a symbol (UNSUPPORTED_VERSION, the
// v1 runtime's message), in v2 as an expression where the format allows none (CORRUPT_BUNDLE).
int64_t as_int(const Ctx& c, const Value& v, const std::string& where, int64_t lo, int64_t hi);
int64_t get_int(const Ctx& c, const Value& obj, const char* key, const std::string& where,
                int64_t lo, int64_t hi);

// An integer field that v2 allows to be an expression. A constant (or an expression without
// symbols, folded here) must lie in [lo, hi] now; an expression is range-checked at each
// shape with the same bounds (shape_plan.cpp).
IntExpr as_expr(Ctx& c, const Value& v, const std::string& where, int64_t lo, int64_t hi);

std::string get_str(const Value& obj, const char* key, const std::string& where);
const Value& get_array(const Value& obj, const char* key, const std::string& where);
aotpack_dtype get_dtype(const Value& obj, const std::string& where);

// "sm_90a" -> 9, 0 (sm_, two or three digits, an optional a or f); false if not that form.
bool parse_arch(const std::string& arch, int* major, int* minor);

// steps[] entry (manifest_steps.cpp).
StepSpec parse_step(Ctx& c, const Value& v, const std::string& where);

}  // namespace manifest_parse
}  // namespace aotpack
