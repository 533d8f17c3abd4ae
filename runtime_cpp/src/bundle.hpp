// bundle.hpp — a bundle file opened and fully verified on the host (no driver):
// safetensors structure, manifest, cubin checksums, weights (embedded or external).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "manifest.hpp"
#include "safetensors.hpp"

namespace aotpack {

// Bytes of one cubin or weight inside a mapped file.
struct ByteRange {
  const uint8_t* data = nullptr;
  uint64_t size = 0;
};

struct Bundle {
  std::string path;
  Manifest manifest;
  std::unique_ptr<SafetensorsFile> file;      // the bundle itself
  std::unique_ptr<SafetensorsFile> external;  // external weights file, if any
  // By kernel index: the bytes of each kernel's cubin (kernels sharing a cubin share the
  // range). Never indexed by a cubin number: those come from the manifest, unbounded.
  std::vector<ByteRange> kernel_cubins;
  std::vector<ByteRange> weights;             // by weight index (manifest order)
};

// How the weights' bytes are checked (aotpack_verify; the manifest and cubins always by sha256).
enum class Verify { Full, Fast, None };

// Verify from an aotpack_model_options.verify value; `fallback` for AOTPACK_VERIFY_DEFAULT.
// INVALID_ARGUMENT for a value outside the enum.
Verify verify_mode(int value, Verify fallback);

// Opens `path` and verifies everything docs/manifest.md lists except the device checks, the
// weights as `verify` says. `weights_path` overrides manifest external_weights.file (may be
// empty). Throws Error with the matching aotpack_code.
std::unique_ptr<Bundle> open_bundle(const std::string& path, const std::string& weights_path,
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
