// dtype.cpp — dtype tables (docs/manifest.md: "dtype strings").
#include "dtype.hpp"

namespace aotpack {

namespace {
struct DTypeRow {
  aotpack_dtype dtype;
  const char* manifest;
  const char* safetensors;
  size_t size;
};
const DTypeRow kRows[] = {
    {AOTPACK_DTYPE_BF16, "bf16", "BF16", 2}, {AOTPACK_DTYPE_F16, "f16", "F16", 2},
    {AOTPACK_DTYPE_F32, "f32", "F32", 4},    {AOTPACK_DTYPE_F64, "f64", "F64", 8},
    {AOTPACK_DTYPE_I8, "i8", "I8", 1},       {AOTPACK_DTYPE_I16, "i16", "I16", 2},
    {AOTPACK_DTYPE_I32, "i32", "I32", 4},    {AOTPACK_DTYPE_I64, "i64", "I64", 8},
    {AOTPACK_DTYPE_U8, "u8", "U8", 1},       {AOTPACK_DTYPE_BOOL, "bool", "BOOL", 1},
    {AOTPACK_DTYPE_F8E4M3, "f8e4m3", "F8_E4M3", 1},
};
const DTypeRow* row(aotpack_dtype d) {
  for (const auto& r : kRows)
    if (r.dtype == d) return &r;
  return &kRows[0];  // unreachable for valid enums
}
}  // namespace

bool dtype_from_manifest(const std::string& s, aotpack_dtype* out) {
  for (const auto& r : kRows)
    if (s == r.manifest) { *out = r.dtype; return true; }
  return false;
}

const char* dtype_manifest_name(aotpack_dtype d) { return row(d)->manifest; }
const char* dtype_safetensors_name(aotpack_dtype d) { return row(d)->safetensors; }
size_t dtype_size(aotpack_dtype d) { return row(d)->size; }

size_t safetensors_dtype_size(const std::string& s) {
  for (const auto& r : kRows)
    if (s == r.safetensors) return r.size;
  if (s == "U16") return 2;
  if (s == "U32") return 4;
  if (s == "U64") return 8;
  if (s == "F8_E4M3" || s == "F8_E5M2") return 1;
  return 0;
}

}  // namespace aotpack
