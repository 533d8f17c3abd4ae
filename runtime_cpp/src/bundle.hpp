// bundle.hpp — a bundle file opened and fully verified on the host (no driver):
// safetensors structure, manifest, cubin checksums, weights (embedded or external).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "manifest.hpp"
#include "safetensors.hpp"
#include "weight_stream.hpp"

namespace aotpack {

// Bytes of one cubin in memory.
struct ByteRange {
  const uint8_t* data = nullptr;
  uint64_t size = 0;
};

// A bundle whose manifest, cubins and weights' names, dtypes and shapes are checked; the
// weights' bytes are read later, by a WeightStream (only the header of a big file is read
// here), unless sha256 verification needed them all in memory first.
struct Bundle {
  std::string path;
  Manifest manifest;
  std::unique_ptr<SafetensorsFile> file;      // the bundle itself
  std::unique_ptr<SafetensorsFile> external;  // external weights file, if any
  std::vector<std::vector<uint8_t>> cubins;   // the bytes of each cubin used
  // By kernel index: the bytes of each kernel's cubin (kernels sharing a cubin share the
  // range). Never indexed by a cubin number: those come from the manifest, unbounded.
  std::vector<ByteRange> kernel_cubins;
  WeightSource weights;                       // by weight index (manifest order)
  std::string weights_what;                   // "the bundle" or "external weights file '...'"
  // The weights' bytes are to be checked by their 64-bit checksums as they are streamed
  // (Verify::Fast); false when they were checked by sha256 here or are not checked.
  bool stream_checksums = false;
};

// How the weights' bytes are checked (aotpack_verify; the manifest and cubins always by sha256).
enum class Verify { Full, Fast, None };

// Verify from an aotpack_model_options.verify value; `fallback` for AOTPACK_VERIFY_DEFAULT.
// INVALID_ARGUMENT for a value outside the enum.
Verify verify_mode(int value, Verify fallback);

// Opens `path` and verifies everything docs/manifest.md lists except the device checks and,
// when b->stream_checksums, the weights' checksums (check_streamed_weights does, once a
// WeightStream has read them). `weights_path` overrides manifest external_weights.file (may
// be empty). Throws Error with the matching aotpack_code.
std::unique_ptr<Bundle> open_bundle(const std::string& path, const std::string& weights_path,
                                    Verify verify);

// WEIGHTS_MISMATCH naming the first weight whose streamed checksum differs from the manifest's
// (nothing to do unless b.stream_checksums).
void check_streamed_weights(const Bundle& b, const WeightStream& stream);

// open_bundle, then the weights read and checked on the host (no driver): everything a load
// verifies but the device. For aotpack_model_check_file and aotpack-run --info.
std::unique_ptr<Bundle> check_bundle(const std::string& path, const std::string& weights_path,
                                     Verify verify);

// __metadata__ key of the manifest's sha256 (lower-case hex of the manifest string's bytes).
constexpr const char* kManifestDigestKey = "aotpack.manifest_sha256";

// Verifies `manifest` (the "aotpack.manifest" string) against its recorded sha256: a bundle
// without one is UNSUPPORTED_VERSION (written before checksummed manifests: rebuild), another
// digest is CHECKSUM_MISMATCH. Runs before the manifest is parsed.
void check_manifest_digest(const json::Value& metadata, const std::string& manifest,
                           const std::string& path);

// Name of the safetensors tensor that holds cubin `i`.
std::string cubin_tensor_name(uint32_t i);

}  // namespace aotpack
