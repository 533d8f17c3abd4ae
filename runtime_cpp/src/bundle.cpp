// bundle.cpp — open + verify a bundle on the host (docs/manifest.md, "Load-time validation").
#include "bundle.hpp"

#include "dtype.hpp"
#include "error.hpp"
#include "sha256.hpp"

namespace aotpack {

namespace {

std::string manifest_text(const SafetensorsFile& f) {
  const json::Value* m = f.metadata().find("aotpack.manifest");
  if (!m)
    fail(AOTPACK_CORRUPT_BUNDLE, "'", f.path(), "' is a safetensors file without an aotpack "
         "manifest (__metadata__[\"aotpack.manifest\"]): not an aotpack bundle");
  if (m->type != json::Type::String)
    fail(AOTPACK_CORRUPT_BUNDLE, "__metadata__[\"aotpack.manifest\"] must be a JSON string");
  return m->s;
}

std::string dir_of(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

void load_cubins(Bundle& b) {
  const Manifest& m = b.manifest;
  for (const KernelSpec& k : m.kernels) {
    if (b.cubins.size() <= k.cubin) b.cubins.resize(size_t(k.cubin) + 1);
    std::string name = cubin_tensor_name(k.cubin);
    const TensorEntry* t = b.file->find(name);
    if (!t)
      fail(AOTPACK_CORRUPT_BUNDLE, "kernel '", k.name, "': cubin ", k.cubin, " (tensor '", name,
           "') is missing from the bundle");
    if (t->dtype != "U8" || t->shape.size() != 1)
      fail(AOTPACK_CORRUPT_BUNDLE, "kernel '", k.name, "': tensor '", name,
           "' must be U8 with shape [nbytes]");
    ByteRange r{b.file->tensor_data(*t), t->nbytes};
    std::string got = sha256_hex(r.data, size_t(r.size));
    if (got != k.cubin_sha256)
      fail(AOTPACK_CHECKSUM_MISMATCH, "kernel '", k.name, "': cubin ", k.cubin,
           " sha256 is ", got, " but the manifest says ", k.cubin_sha256,
           ": the bundle is corrupt or was modified; rebuild or re-copy it");
    b.cubins[k.cubin] = r;
  }
}

void load_weights(Bundle& b, const std::string& weights_path) {
  const Manifest& m = b.manifest;
  const SafetensorsFile* src = b.file.get();
  std::string what = "the bundle";
  if (m.external_weights) {
    std::string p = weights_path;
    if (p.empty()) {
      p = m.external_weights_file;
      if (p.empty() || p[0] != '/') p = dir_of(b.path) + "/" + p;
    }
    try {
      b.external.reset(new SafetensorsFile(p, "external weights file"));
    } catch (const Error& e) {
      if (e.code() != AOTPACK_IO) throw;
      fail(AOTPACK_IO, e.what(), " (the bundle was built with external weights; "
           "put the file next to the bundle or pass its path as weights_path / --weights)");
    }
    src = b.external.get();
    what = cat("external weights file '", p, "'");
  }
  // Check names, dtypes and shapes first (cheap), then hash all weights in parallel.
  std::vector<std::pair<const void*, size_t>> ranges;
  for (const TensorSpec& w : m.weights) {
    const TensorEntry* t = src->find(w.name);
    if (!t) fail(AOTPACK_WEIGHTS_MISMATCH, "weight '", w.name, "' is missing from ", what);
    if (t->dtype != dtype_safetensors_name(w.dtype) || t->shape != w.shape) {
      std::string shape;
      for (size_t i = 0; i < t->shape.size(); ++i) shape += cat(i ? ", " : "", t->shape[i]);
      std::string want;
      for (size_t i = 0; i < w.shape.size(); ++i) want += cat(i ? ", " : "", w.shape[i]);
      fail(AOTPACK_WEIGHTS_MISMATCH, "weight '", w.name, "' in ", what, " is ", t->dtype, " [",
           shape, "] but the bundle expects ", dtype_safetensors_name(w.dtype), " [", want,
           "]: these weights belong to another model or build");
    }
    b.weights.push_back(ByteRange{src->tensor_data(*t), t->nbytes});
    ranges.emplace_back(b.weights.back().data, size_t(t->nbytes));
  }
  std::vector<std::string> digests = sha256_hex_parallel(ranges);
  for (size_t i = 0; i < m.weights.size(); ++i)
    if (digests[i] != m.weights[i].sha256)
      fail(AOTPACK_WEIGHTS_MISMATCH, "weight '", m.weights[i].name, "' in ", what,
           " has sha256 ", digests[i], " but the bundle expects ", m.weights[i].sha256,
           ": the weights differ from those the bundle was built with");
}

}  // namespace

std::string cubin_tensor_name(uint32_t i) { return cat("__aotpack__.cubin.", i); }

std::unique_ptr<Bundle> open_bundle(const std::string& path, const std::string& weights_path) {
  std::unique_ptr<Bundle> b(new Bundle);
  b->path = path;
  b->file.reset(new SafetensorsFile(path, "bundle"));
  b->manifest = parse_manifest(manifest_text(*b->file));
  validate_manifest(b->manifest);
  load_cubins(*b);
  load_weights(*b, weights_path);
  return b;
}

}  // namespace aotpack
