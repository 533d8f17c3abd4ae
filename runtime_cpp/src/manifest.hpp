// manifest.hpp — typed model of the bundle manifest, v1 and v2 (docs/manifest.md).
//
// parse_manifest() turns JSON into these structs, checking types and value ranges and
// compiling v2 expressions; validate_manifest() checks cross references and bounds (indices,
// extents, tensor-map rules) at every shape the load checks. Neither touches files or the
// driver. The values a run uses for one shape live in a ShapePlan (shape_plan.hpp).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "aotpack/aotpack.h"
#include "expr.hpp"
#include "json.hpp"

namespace aotpack {

// A run-time integer of a v2 bundle (docs/manifest.md, "Symbols").
struct SymbolSpec {
  std::string name;
  int64_t min = 0, max = 0;
  int64_t example = -1;  // -1: absent
};

// An input, output or weight: dtype + shape (outermost first).
struct TensorSpec {
  std::string name;
  aotpack_dtype dtype = AOTPACK_DTYPE_F32;
  std::vector<IntExpr> dims;   // v2 inputs/outputs may hold expressions; weights never do
  std::vector<int64_t> shape;  // the constant dims; -1 where dims[k] is an expression
  // prod(shape) × dtype size (checked against "nbytes" for weights); for a tensor with
  // expressions, its size with every symbol at its max (filled by validate_manifest).
  uint64_t nbytes = 0;
  std::string sha256;    // weights only: lower-case hex
  std::string checksum;  // weights only, optional: 16 lower-case hex digits (checksum.hpp)
  bool is_static() const {
    for (const IntExpr& d : dims)
      if (!d.is_const()) return false;
    return true;
  }
};

// Counters: the session's zeroed int32 counters (split fix-up in the last CTA); every
// launch that uses them leaves them zero (docs/manifest.md, "counters").
enum class BufferKind { Input, Output, Weight, Arena, State, Counters };

// A region kernels can point into (docs: "buffers").
struct BufferSpec {
  BufferKind kind = BufferKind::Arena;
  uint32_t index = 0;   // input/output/weight/state index
  uint64_t offset = 0;  // arena / counters only: offset in the workspace / the counters
  // Size of the region: arena and weights; inputs/outputs at every symbol's max (filled by
  // validate_manifest). Per-shape sizes live in ShapePlan::buffer_nbytes.
  uint64_t nbytes = 0;
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
  std::vector<IntExpr> dims;     // elements, 1 .. 2^32
  std::vector<IntExpr> strides;  // elements
  std::vector<uint32_t> box;
  int swizzle = 0;  // CUtensorMapSwizzle: 0 none, 1 32B, 2 64B, 3 128B
  int l2 = 0;       // CUtensorMapL2promotion: 0 none, 1 64B, 2 128B, 3 256B
  int oob = 0;      // CUtensorMapFloatOOBfill: 0 zero, 1 nan
};

// One kernel parameter as the manifest states it (ShapePlan holds the evaluated Slot).
struct SlotSpec {
  SlotKind kind = SlotKind::Null;
  uint32_t buffer = 0;    // ptr / tensormap
  IntExpr offset;         // ptr / tensormap: bytes from the buffer start
  IntExpr value;          // integer kinds; fastdivmod: the divisor
  uint32_t f32_bits = 0;  // f32
  TensorMapSpec tmap;     // tensormap only
};

// steps[].when[]: the step runs only where `expr` lies in [min, max].
struct Condition {
  IntExpr expr;
  int64_t min = 0, max = 0;
};

struct StepSpec {
  uint32_t kernel = 0;
  IntExpr grid[3];
  std::vector<SlotSpec> args;
  std::vector<Condition> when;
};

// The manifest's "generation" section (docs/generation.md): which inputs/outputs of the step
// are the token ids, positions, last indices, next ids and logits.
struct GenerationSpec {
  bool present = false;
  int64_t max_batch = 0, max_seq_len = 0, vocab_size = 0;
  uint32_t input_ids = 0, positions = 0, last_index = 0;  // indices into inputs
  uint32_t next_ids = 0, logits = 0;                      // indices into outputs
  std::vector<int64_t> eos_ids;                           // each in [0, vocab_size)
};

// Most bytes of state a bundle may ask a session to allocate (1 TiB): a larger total is a
// corrupt manifest, not a model.
constexpr uint64_t kMaxStateBytes = uint64_t(1) << 40;
// Most bytes of counters (64 MiB: 16M tiles; a larger request is a corrupt manifest).
constexpr uint64_t kMaxCountersBytes = uint64_t(1) << 26;

struct ShapePlan;  // shape_plan.hpp

struct Manifest {
  int64_t version = 0;
  std::string arch;
  int cc_major = 0, cc_minor = 0;
  int64_t min_driver = 0;
  int64_t sm_count = 0;
  std::vector<SymbolSpec> symbols;  // v2; empty in v1
  std::vector<Expr> exprs;          // compiled expressions, indexed by IntExpr::expr
  std::vector<TensorSpec> inputs, outputs, weights;
  bool external_weights = false;
  std::string external_weights_file;
  uint64_t arena_bytes = 0;
  uint64_t counters_bytes = 0;  // the session's zeroed counters (0: the bundle uses none)
  std::vector<BufferSpec> buffers;
  std::vector<KernelSpec> kernels;
  std::vector<StepSpec> steps;
  // Session-owned device buffers kept across runs (static shapes; docs/generation.md).
  std::vector<TensorSpec> state;
  GenerationSpec generation;

  // Filled by validate_manifest.
  // Offset of each state buffer in the session's one state allocation (256-aligned), and
  // that allocation's size.
  std::vector<uint64_t> state_offsets;
  uint64_t state_bytes = 0;
  // Where symbol s is read from at run time: dim `dim` of input `input`, whose size is
  // scale*s + offset (scale 1, offset 0 when the dim is the symbol itself).
  struct Binder {
    uint32_t input = UINT32_MAX, dim = 0;
    int64_t scale = 1, offset = 0;
  };
  std::vector<Binder> binders;
  // The validated plans with every symbol at its min / at its max (one and the same plan
  // when the manifest has no symbols: then it is the plan of every run).
  std::shared_ptr<const ShapePlan> min_plan, max_plan;
};

// Allowed values of an integer slot kind's "value" (i32: int32 range; fastdivmod: 1 .. 2^31-1;
// u64: < 2^63 as JSON integers are int64). Applied to constants at parse time and to
// expressions at every shape.
void slot_value_range(SlotKind kind, int64_t* lo, int64_t* hi);

// CuTe's fast_divmod_divisor<32> for `divisor` (1 .. 2^31-1), as the kernel reads it:
// words[0] = divisor, words[1] = multiplier, words[2] = shift1 | shift2 << 8 (upper bytes 0).
// l = ceil(log2 d), multiplier = floor(2^32 (2^l - d) / d) + 1, shift1 = min(l, 1),
// shift2 = max(l - 1, 0). Computed here, not read from the bundle: one source of truth.
void fastdivmod_fields(uint32_t divisor, uint32_t words[3]);

// Parses the manifest JSON text (version 1 or 2). Throws Error: CORRUPT_BUNDLE (bad
// JSON/types/values/expressions), UNSUPPORTED_VERSION (unknown version, a string where v1
// needs an integer, unknown slot kinds).
Manifest parse_manifest(const std::string& text);

// The load-time checks of docs/manifest.md: cross references and bounds that hold for every
// shape (validate_static, validate.cpp), every symbol bindable from an input dim, then every
// per-shape check at the all-min and all-max shapes (shape_plan.cpp). Fills the fields marked
// "filled by validate_manifest". Throws Error(CORRUPT_BUNDLE) naming the item.
void validate_manifest(Manifest& m);

// The shape-independent half of validate_manifest: names, indices, arena regions, launch
// shape limits of kernels, tensor-map rules that do not depend on dims or strides.
void validate_static(Manifest& m);

// "state" and "generation" (manifest_generation.cpp). parse_* read the JSON (called by
// parse_manifest); validate_state / validate_generation are part of validate_static (the
// latter after the symbols' binders are known).
namespace manifest_parse {
struct Ctx;
void parse_state(Ctx& c, const json::Value& root);
void parse_generation(Ctx& c, const json::Value& root);
}  // namespace manifest_parse
void validate_state(Manifest& m);
void validate_generation(const Manifest& m);

}  // namespace aotpack
