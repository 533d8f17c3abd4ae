// manifest.hpp — typed model of the bundle manifest v1 (docs/manifest.md).
//
// parse_manifest() turns JSON into these structs, checking types and value ranges;
// validate_manifest() checks cross references and bounds (indices, extents, tensor-map rules).
// Neither touches files or the driver.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "aotpack/aotpack.h"
#include "json.hpp"

namespace aotpack {

// An input, output or weight: dtype + static shape (outermost first).
struct TensorSpec {
  std::string name;
  aotpack_dtype dtype = AOTPACK_DTYPE_F32;
  std::vector<int64_t> shape;
  uint64_t nbytes = 0;  // prod(shape) × dtype size (checked against "nbytes" for weights)
  std::string sha256;   // weights only: lower-case hex
};

enum class BufferKind { Input, Output, Weight, Arena };

// A region kernels can point into (docs: "buffers").
struct BufferSpec {
  BufferKind kind = BufferKind::Arena;
  uint32_t index = 0;   // input/output/weight index
  uint64_t offset = 0;  // arena only: offset in the workspace
  uint64_t nbytes = 0;  // size of the region (filled for every kind by validate_manifest)
};

struct KernelSpec {
  std::string name;
  std::string entry;
  uint32_t cubin = 0;
  std::string cubin_sha256;
  uint32_t block[3] = {1, 1, 1};
  uint32_t cluster[3] = {1, 1, 1};
  uint32_t smem = 0;
  std::string backend;
  // The kernel waits (griddepcontrol.wait) for the grid before it on the stream before it
  // touches memory another kernel wrote, on every path: it may be launched with programmatic
  // dependent launch, i.e. start while that grid is still finishing.
  bool pdl = false;
};

enum class SlotKind { Ptr, Null, I32, I64, U32, U64, F32, FastDivmod, TensorMap };

// CUtensorMapEncodeTiled parameters, as the manifest states them (outermost first).
struct TensorMapSpec {
  aotpack_dtype dtype = AOTPACK_DTYPE_BF16;
  std::vector<uint64_t> dims;
  std::vector<uint64_t> strides;  // elements
  std::vector<uint32_t> box;
  int swizzle = 0;  // CUtensorMapSwizzle: 0 none, 1 32B, 2 64B, 3 128B
  int l2 = 0;       // CUtensorMapL2promotion: 0 none, 1 64B, 2 128B, 3 256B
  int oob = 0;      // CUtensorMapFloatOOBfill: 0 zero, 1 nan
};

// One kernel parameter.
struct Slot {
  SlotKind kind = SlotKind::Null;
  uint32_t buffer = 0;  // ptr / tensormap
  uint64_t offset = 0;  // ptr / tensormap: bytes from the buffer start
  uint64_t bits = 0;    // integer / f32 value, already in the parameter's bit pattern
  uint32_t fdm[3] = {};  // fastdivmod: the 12 parameter bytes as 3 little-endian words
  TensorMapSpec tmap;   // tensormap only
};

struct StepSpec {
  uint32_t kernel = 0;
  uint32_t grid[3] = {1, 1, 1};
  std::vector<Slot> args;
};

struct Manifest {
  int64_t version = 0;
  std::string arch;
  int cc_major = 0, cc_minor = 0;
  int64_t min_driver = 0;
  int64_t sm_count = 0;
  std::vector<TensorSpec> inputs, outputs, weights;
  bool external_weights = false;
  std::string external_weights_file;
  uint64_t arena_bytes = 0;
  std::vector<BufferSpec> buffers;
  std::vector<KernelSpec> kernels;
  std::vector<StepSpec> steps;
};

// CuTe's fast_divmod_divisor<32> for `divisor` (1 .. 2^31-1), as the kernel reads it:
// words[0] = divisor, words[1] = multiplier, words[2] = shift1 | shift2 << 8 (upper bytes 0).
// l = ceil(log2 d), multiplier = floor(2^32 (2^l - d) / d) + 1, shift1 = min(l, 1),
// shift2 = max(l - 1, 0). Computed here, not read from the bundle: one source of truth.
void fastdivmod_fields(uint32_t divisor, uint32_t words[3]);

// Parses the manifest JSON text. Throws Error: CORRUPT_BUNDLE (bad JSON/types/values),
// UNSUPPORTED_VERSION (unknown version, symbolic shapes, unknown slot kinds).
Manifest parse_manifest(const std::string& text);

// Cross-reference and bounds checks (see docs/manifest.md "Load-time validation", the
// structural part). Fills BufferSpec::nbytes. Throws Error(CORRUPT_BUNDLE) naming the item.
void validate_manifest(Manifest& m);

// Byte size of the global memory a tensor map can touch: (sum (dims-1)×strides + 1) × esize.
uint64_t tensormap_extent_bytes(const TensorMapSpec& t);

}  // namespace aotpack
