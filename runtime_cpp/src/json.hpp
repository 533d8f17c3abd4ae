// json.hpp — a small, strict JSON parser (RFC 8259) for the safetensors header and manifest.
//
// Why our own: the runtime must build with only a C++17 compiler and parse untrusted bytes
// with bounded recursion. Numbers that are integers (no '.', 'e') and fit in int64 are kept
// exactly as int64; other numbers become double. Objects keep key order (first key wins on
// lookup; duplicates are rejected). Depth is limited to kMaxDepth.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace aotpack {
namespace json {

constexpr int kMaxDepth = 64;

enum class Type { Null, Bool, Int, Double, String, Array, Object };

// One JSON value (a tree). Accessors throw Error(CORRUPT_BUNDLE) on a type mismatch only
// through the manifest helpers; the raw accessors here assume the type was checked.
struct Value {
  Type type = Type::Null;
  bool b = false;
  int64_t i = 0;
  double d = 0.0;
  std::string s;
  std::vector<Value> items;                          // Array
  std::vector<std::pair<std::string, Value>> fields;  // Object, in document order

  bool is_null() const { return type == Type::Null; }
  bool is_number() const { return type == Type::Int || type == Type::Double; }
  // Member `key` of an object, or nullptr when absent (or when this is not an object).
  const Value* find(const std::string& key) const;
  // Human-readable type name for error messages ("string", "integer", ...).
  static const char* type_name(Type t);
};

// Parses `text` (exactly one value, whitespace around allowed). Throws Error(CORRUPT_BUNDLE)
// with `what` and the byte position in the message on any syntax error.
Value parse(const char* text, size_t size, const std::string& what);

// Serializes a string as a JSON string literal (quotes + escapes); used by writers.
std::string quote(const std::string& s);

// Serializes a value as compact JSON, object keys in document order. Doubles get 17
// significant digits so they read back bit-exactly (parse() never yields NaN/Inf).
std::string dump(const Value& v);

}  // namespace json
}  // namespace aotpack
