// dtype.hpp — the element types of bundle format v1 and their spellings.
#pragma once

#include <cstddef>
#include <string>

#include "aotpack/aotpack.h"

namespace aotpack {

// Parses a manifest dtype ("bf16"); returns false when unknown.
bool dtype_from_manifest(const std::string& s, aotpack_dtype* out);
// Manifest spelling ("bf16") of a dtype.
const char* dtype_manifest_name(aotpack_dtype d);
// Safetensors spelling ("BF16") of a dtype.
const char* dtype_safetensors_name(aotpack_dtype d);
// Element size in bytes.
size_t dtype_size(aotpack_dtype d);
// Element size of a safetensors dtype string (also types aotpack does not compute with,
// e.g. F8_E4M3, U32), or 0 when unknown.
size_t safetensors_dtype_size(const std::string& s);

}  // namespace aotpack
