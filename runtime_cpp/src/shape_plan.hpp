// shape_plan.hpp — a manifest evaluated for one shape: every expression replaced by its value,
// the steps `when` selects (minus those with an empty grid), and the parameter layout, checked
// by the same rules as a static bundle (validate_shape). A v1 bundle has exactly one
// ShapePlan, built at load; a v2 session builds one per shape it meets and caches it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "aotpack/aotpack.h"
#include "manifest.hpp"

namespace aotpack {

// A tensor map's encoding parameters for one shape (outermost first, like TensorMapSpec).
struct TensorMap {
  aotpack_dtype dtype = AOTPACK_DTYPE_BF16;
  uint32_t rank = 0;  // 1..5 (validate_static)
  uint64_t dims[5] = {};
  uint64_t strides[5] = {};  // elements
  uint32_t box[5] = {};
  int swizzle = 0, l2 = 0, oob = 0;
};

// One kernel parameter for one shape.
struct Slot {
  SlotKind kind = SlotKind::Null;
  uint32_t buffer = 0;   // ptr / tensormap
  uint64_t offset = 0;   // ptr / tensormap: bytes from the buffer start
  uint64_t bits = 0;     // integer / f32 value, already in the parameter's bit pattern
  uint32_t fdm[3] = {};  // fastdivmod: the 12 parameter bytes as 3 little-endian words
  TensorMap tmap;        // tensormap only
};

// One launch for one shape.
struct Step {
  uint32_t index = 0;  // in Manifest::steps (for messages)
  uint32_t kernel = 0;
  uint32_t grid[3] = {1, 1, 1};
  std::vector<Slot> args;
  std::vector<size_t> offsets;  // byte offset of each parameter in the packed storage
};

struct ShapePlan {
  std::vector<int64_t> symbols;  // the shape: one value per manifest symbol
  std::vector<std::vector<int64_t>> inputs, outputs;  // concrete dims
  std::vector<uint64_t> input_nbytes, output_nbytes;
  std::vector<uint64_t> buffer_nbytes;  // per manifest buffer
  std::vector<Step> steps;              // what a run launches, in order
  size_t storage_bytes = 0;             // parameter bytes of all steps (see Step::offsets)
};

// Bytes of a kernel parameter of this kind (tensor maps: 128, fastdivmod: 12).
size_t slot_size(SlotKind k);

// "B, S" for messages.
std::string symbol_names(const Manifest& m);

// "B=2 S=17" for messages ("" without symbols).
std::string shape_label(const Manifest& m, const int64_t* syms);

// Evaluates and validates the manifest at symbol values `syms` (nullptr when it has none).
// When `check` is set (the caller's input shapes), they are compared with the evaluated input
// dims before anything else is evaluated (check_input_dims). Throws Error(CORRUPT_BUNDLE)
// naming the field, step, slot and shape when the bundle is malformed at this shape.
std::shared_ptr<const ShapePlan> build_shape_plan(const Manifest& m, const int64_t* syms,
                                                  const aotpack_shape* check = nullptr);

// Only the input and output shapes at `syms` (inputs checked against `check` when given): what
// aotpack_model_output_shapes needs, without evaluating a single step (callers ask per run).
std::shared_ptr<const ShapePlan> build_io_shapes(const Manifest& m, const int64_t* syms,
                                                 const aotpack_shape* check);

// Binding, step 1 of docs/manifest.md "Binding a shape": checks every input's rank, reads each
// symbol from its binding input dim into syms[s] and checks its range. Throws
// Error(INVALID_ARGUMENT) naming the input, dim, value and allowed range. No allocation
// unless it fails.
void bind_symbols(const Manifest& m, const aotpack_shape* shapes, int64_t* syms);

// Binding, step 2: every input dim of `shapes` equals the plan's. Throws
// Error(INVALID_ARGUMENT) naming the input, dim, value and the expected value (and which
// input dim set the symbols it depends on). No allocation unless it fails.
void check_input_dims(const Manifest& m, const ShapePlan& p, const aotpack_shape* shapes);

// The checks of validate.cpp that depend on the shape, on the evaluated plan: launch limits,
// pointer offsets and tensor maps inside their buffers. `at` prefixes each message
// ("at shape B=2 S=17: ", or "" for a bundle without symbols).
void validate_shape(const Manifest& m, const ShapePlan& p, const std::string& at);

// Byte size of the global memory a tensor map can touch: (sum (dims-1)×strides + 1) × esize.
// 0 when a dim is 0; UINT64_MAX when it overflows.
uint64_t tensormap_extent_bytes(const TensorMap& t);

}  // namespace aotpack
