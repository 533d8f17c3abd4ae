// bundle_builder.hpp — builds small test bundles (safetensors bytes + manifest JSON) in a
// temp dir, so tests need no Python and no GPU. A test starts from a valid bundle, edits the
// manifest JSON tree or the bytes, writes it, and checks the status code + message.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "json.hpp"

namespace aotpack_test {

using aotpack::json::Type;
using aotpack::json::Value;

// Serializes a JSON tree (compact).
using aotpack::json::dump;
// Value constructors.
Value jint(int64_t i);
Value jbool(bool b);
Value jstr(const std::string& s);
// Member `key` of an object (created as null when absent).
Value& at(Value& obj, const std::string& key);
// Element `i` of an array.
Value& at(Value& arr, size_t i);

// A fresh directory under $TMPDIR (or /tmp) for one test.
std::string make_temp_dir(const std::string& tag);

// Fixture of the `aotpack-run --tune` tests: writes job folders under `dir` (see
// tune_fixture.cpp for what each one holds).
void write_tune_jobs(const std::string& dir);

// A valid model: input x f32[4,64], output y f32[4,64], weight w f32[64] (embedded or
// external), one kernel with ptr/tensormap/i32/f32/null slots, arena of 4096 bytes.
struct TestBundle {
  Value manifest;                  // edit freely before write()
  std::vector<uint8_t> cubin;      // bytes of __aotpack__.cubin.0
  std::vector<float> weight;       // data of weight "w"
  bool external = false;           // write "w" into weights.safetensors instead
  std::vector<float> file_weight;  // what gets written as "w" (defaults to weight)
  std::vector<int64_t> file_weight_shape = {64};
  // More weights (u8 [n], after "w" in the file), the kernel does not read them; edit the
  // bytes after add_weight to write other bytes than the manifest's digests describe.
  std::vector<std::pair<std::string, std::vector<uint8_t>>> extra_weights;
  void add_weight(const std::string& name, const std::vector<uint8_t>& bytes);

  explicit TestBundle(bool external_weights = false);
  // A v2 bundle (dims that vary at run time) for the fake driver's dyn_add kernels:
  //   symbols B in 1..64 (example 4); inputs x f32[B, 64], aux f32[B, 2*B] (unused);
  //   output y f32[B, 64] = x + 1.5 * w; step 0 kernel dyn_small (entry dyn_add_small)
  //   when B in 1..8, grid [B, 1, 1]; step 1 kernel dyn_big (dyn_add_big) when B in 9..64,
  //   grid [(B + 7)/8, 1, 1]; both: ptr x, ptr w, ptr y, tensormap x [B, 64], i32 64*B,
  //   f32 1.5.
  static TestBundle dynamic();
  // A generation bundle (docs/generation.md) for the fake driver's gen_step kernel: symbols
  // B in 1..4, S in 1..16; inputs input_ids, positions i64 [B, S], last_index i64 [B];
  // outputs next_ids i64 [B], logits f32 [B, 32]; state cache.k.0 i64 [4, 16]; generation
  // max_batch 4, max_seq_len 16, vocab_size 32, eos_ids [].
  static TestBundle generation();
  // Writes <dir>/<file> (and <dir>/weights.safetensors when external); returns the bundle
  // path.
  std::string write(const std::string& dir, const std::string& file = "model.aotpack") const;
};

// The tokens the fake gen_step generates greedily after `prompt` (n of them, vocabulary
// `vocab`): each is a hash of the whole sequence so far.
std::vector<int64_t> fake_gen_expected(const std::vector<int64_t>& prompt, size_t n,
                                       int64_t vocab);

// A minimal ELF64 image with a ".nv.info.<entry>" section declaring parameters of `sizes`
// bytes (records in reverse order, as ptxas writes them, between two other records): a cubin
// whose parameter table the loader checks (see cubin_params.hpp).
std::vector<uint8_t> cubin_with_params(const std::string& entry,
                                       const std::vector<uint32_t>& sizes);

// Validates the bundle at `path` through aotpack_model_check_file (with `weights_path` when
// given) and fails the test unless the status is `code` and its message contains every needle.
void expect_check_file(const std::string& path, int code,
                       std::initializer_list<std::string> needles,
                       const char* weights_path = nullptr, int verify = 0);

}  // namespace aotpack_test
