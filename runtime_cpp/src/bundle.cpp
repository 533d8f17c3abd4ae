// bundle.cpp — open + verify a bundle on the host (docs/manifest.md, "Load-time validation").
#include "bundle.hpp"

#include <map>

#include "cubin_params.hpp"
#include "dtype.hpp"
#include "error.hpp"
#include "sha256.hpp"
#include "shape_plan.hpp"

namespace aotpack {

void check_manifest_digest(const json::Value& metadata, const std::string& manifest,
                           const std::string& path) {
  const json::Value* d = metadata.find(kManifestDigestKey);
  if (!d)
    fail(AOTPACK_UNSUPPORTED_VERSION, "'", path, "' has no manifest checksum (__metadata__[\"",
         kManifestDigestKey, "\"]): it was written by an aotpack older than 0.2 (or the "
         "checksum was removed); rebuild the bundle with this aotpack");
  std::string got = sha256_hex(manifest.data(), manifest.size());
  if (d->type != json::Type::String || d->s != got)
    fail(AOTPACK_CHECKSUM_MISMATCH, "the manifest of '", path, "' has sha256 ", got,
         " but the bundle records ", d->type == json::Type::String ? d->s : "a non-string",
         ": the manifest was modified or corrupted; rebuild or re-copy the bundle");
}

namespace {

std::string manifest_text(const SafetensorsFile& f) {
  const json::Value* m = f.metadata().find("aotpack.manifest");
  if (!m)
    fail(AOTPACK_CORRUPT_BUNDLE, "'", f.path(), "' is a safetensors file without an aotpack "
         "manifest (__metadata__[\"aotpack.manifest\"]): not an aotpack bundle");
  if (m->type != json::Type::String)
    fail(AOTPACK_CORRUPT_BUNDLE, "__metadata__[\"aotpack.manifest\"] must be a JSON string");
  check_manifest_digest(f.metadata(), m->s, f.path());
  return m->s;
}

std::string dir_of(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

const char* slot_kind_name(SlotKind k) {
  switch (k) {
    case SlotKind::Ptr: return "ptr";
    case SlotKind::Null: return "null";
    case SlotKind::I32: return "i32";
    case SlotKind::I64: return "i64";
    case SlotKind::U32: return "u32";
    case SlotKind::U64: return "u64";
    case SlotKind::F32: return "f32";
    case SlotKind::FastDivmod: return "fastdivmod";
    case SlotKind::TensorMap: return "tensormap";
  }
  return "?";
}

// Every step of kernel `k` passes exactly the parameters its cubin declares (`sizes`, in
// bytes): the driver reads each parameter with the declared size from what we point it at.
void check_params(const Manifest& m, uint32_t k, const std::vector<uint32_t>& sizes) {
  const KernelSpec& ks = m.kernels[k];
  std::string declared;
  for (uint32_t s : sizes) declared += cat(declared.empty() ? "" : " ", s);
  for (size_t i = 0; i < m.steps.size(); ++i) {
    const StepSpec& st = m.steps[i];
    if (st.kernel != k) continue;
    std::string w = cat("manifest: steps[", i, "] (kernel '", ks.name, "')");
    if (st.args.size() != sizes.size())
      fail(AOTPACK_CORRUPT_BUNDLE, w, ": ", st.args.size(), " parameter slots but the cubin's "
           "entry '", ks.entry, "' takes ", sizes.size(), " parameters (bytes: ", declared, ")");
    for (size_t a = 0; a < sizes.size(); ++a)
      if (slot_size(st.args[a].kind) != sizes[a])
        fail(AOTPACK_CORRUPT_BUNDLE, w, ": args[", a, "] is ", slot_kind_name(st.args[a].kind),
             " (", slot_size(st.args[a].kind), " bytes) but the cubin's entry '", ks.entry,
             "' declares parameter ", a, " as ", sizes[a], " bytes");
  }
}

// The cubin tensor of kernel `k`, checked for dtype and shape.
const TensorEntry& cubin_entry(const Bundle& b, const KernelSpec& k) {
  std::string name = cubin_tensor_name(k.cubin);
  const TensorEntry* t = b.file->find(name);
  if (!t)
    fail(AOTPACK_CORRUPT_BUNDLE, "kernel '", k.name, "': cubin ", k.cubin, " (tensor '", name,
         "') is missing from the bundle");
  if (t->dtype != "U8" || t->shape.size() != 1)
    fail(AOTPACK_CORRUPT_BUNDLE, "kernel '", k.name, "': tensor '", name,
         "' must be U8 with shape [nbytes]");
  return *t;
}

void load_cubins(Bundle& b) {
  const Manifest& m = b.manifest;
  std::map<uint32_t, std::pair<size_t, std::string>> read;  // cubin -> (b.cubins index, sha256)
  for (uint32_t ki = 0; ki < m.kernels.size(); ++ki) {
    const KernelSpec& k = m.kernels[ki];
    const TensorEntry& t = cubin_entry(b, k);
    auto it = read.find(k.cubin);
    if (it == read.end()) {  // read and hashed once however many kernels share it
      b.cubins.push_back(b.file->read_tensor(t));
      const std::vector<uint8_t>& bytes = b.cubins.back();
      it = read.emplace(k.cubin, std::make_pair(b.cubins.size() - 1,
                                                sha256_hex(bytes.data(), bytes.size()))).first;
    }
    const std::string& got = it->second.second;
    if (got != k.cubin_sha256)
      fail(AOTPACK_CHECKSUM_MISMATCH, "kernel '", k.name, "': cubin ", k.cubin,
           " sha256 is ", got, " but the manifest says ", k.cubin_sha256,
           ": the bundle is corrupt or was modified; rebuild or re-copy it");
    const std::vector<uint8_t>& bytes = b.cubins[it->second.first];
    ByteRange r{bytes.data(), bytes.size()};
    b.kernel_cubins.push_back(r);
    std::vector<uint32_t> sizes;
    if (cubin_param_sizes(r.data, r.size, k.entry, &sizes)) check_params(m, ki, sizes);
  }
}

void weight_mismatch(const Bundle& b, size_t i, bool fast, const std::string& got) {
  const TensorSpec& w = b.manifest.weights[i];
  const std::string& want = fast ? w.checksum : w.sha256;
  fail(AOTPACK_WEIGHTS_MISMATCH, "weight '", w.name, "' in ", b.weights_what, " has ",
       fast ? "checksum " : "sha256 ", got, " but the bundle expects ", want,
       ": the weights differ from those the bundle was built with");
}

// The weights' bytes by sha256 (Full, or Fast for a bundle that records no checksums): they
// cannot be hashed in pieces, so the whole file is read into memory first and hashed in
// parallel, one thread per weight; the load then streams them from memory.
void check_weight_sha256(Bundle& b, SafetensorsFile& src) {
  src.load_contents();
  std::vector<std::pair<const void*, size_t>> ranges;
  for (size_t i = 0; i < b.weights.offset.size(); ++i) {
    const TensorEntry& t = *src.find(b.manifest.weights[i].name);
    ranges.emplace_back(src.tensor_data(t), size_t(t.nbytes));
  }
  std::vector<std::string> got = sha256_hex_parallel(ranges);
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != b.manifest.weights[i].sha256) weight_mismatch(b, i, false, got[i]);
}

void load_weights(Bundle& b, const std::string& weights_path, Verify verify) {
  const Manifest& m = b.manifest;
  SafetensorsFile* src = b.file.get();
  b.weights_what = "the bundle";
  if (m.external_weights) {
    std::string p = weights_path;
    if (p.empty()) {
      p = m.external_weights_file;
      if (p.empty() || p[0] != '/') p = dir_of(b.path) + "/" + p;
    }
    try {
      b.external.reset(
          new SafetensorsFile(p, "external weights file", SafetensorsFile::HeaderOnly));
    } catch (const Error& e) {
      if (e.code() != AOTPACK_IO) throw;
      fail(AOTPACK_IO, e.what(), " (the bundle was built with external weights; "
           "put the file next to the bundle or pass its path as weights_path / --weights)");
    }
    b.external->check_contiguous("external weights file");
    src = b.external.get();
    b.weights_what = cat("external weights file '", p, "'");
  }
  // Names, dtypes and shapes first (cheap); the bytes are read later, by the stream.
  b.weights.file = src;
  for (const TensorSpec& w : m.weights) {
    const TensorEntry* t = src->find(w.name);
    if (!t)
      fail(AOTPACK_WEIGHTS_MISMATCH, "weight '", w.name, "' is missing from ", b.weights_what);
    if (t->dtype != dtype_safetensors_name(w.dtype) || t->shape != w.shape) {
      std::string shape;
      for (size_t i = 0; i < t->shape.size(); ++i) shape += cat(i ? ", " : "", t->shape[i]);
      std::string want;
      for (size_t i = 0; i < w.shape.size(); ++i) want += cat(i ? ", " : "", w.shape[i]);
      fail(AOTPACK_WEIGHTS_MISMATCH, "weight '", w.name, "' in ", b.weights_what, " is ",
           t->dtype, " [", shape, "] but the bundle expects ", dtype_safetensors_name(w.dtype),
           " [", want, "]: these weights belong to another model or build");
    }
    b.weights.offset.push_back(t->offset);
    b.weights.size.push_back(t->nbytes);
  }
  if (verify == Verify::None || m.weights.empty()) return;
  bool fast = verify == Verify::Fast;
  for (const TensorSpec& w : m.weights) fast = fast && !w.checksum.empty();
  if (fast) b.stream_checksums = true;
  else check_weight_sha256(b, *src);
}

}  // namespace

std::string cubin_tensor_name(uint32_t i) { return cat("__aotpack__.cubin.", i); }

Verify verify_mode(int value, Verify fallback) {
  switch (value) {
    case AOTPACK_VERIFY_DEFAULT: return fallback;
    case AOTPACK_VERIFY_FULL: return Verify::Full;
    case AOTPACK_VERIFY_FAST: return Verify::Fast;
    case AOTPACK_VERIFY_NONE: return Verify::None;
  }
  fail(AOTPACK_INVALID_ARGUMENT, "aotpack_model_options.verify is ", value, ": use an "
       "aotpack_verify value (0 default, 1 full, 2 fast, 3 none)");
}

std::unique_ptr<Bundle> open_bundle(const std::string& path, const std::string& weights_path,
                                    Verify verify) {
  std::unique_ptr<Bundle> b(new Bundle);
  b->path = path;
  b->file.reset(new SafetensorsFile(path, "bundle", SafetensorsFile::HeaderOnly));
  b->file->check_contiguous("bundle");
  b->manifest = parse_manifest(manifest_text(*b->file));
  validate_manifest(b->manifest);
  load_cubins(*b);
  load_weights(*b, weights_path, verify);
  return b;
}

void check_streamed_weights(const Bundle& b, const WeightStream& stream) {
  if (!b.stream_checksums) return;
  for (size_t i = 0; i < b.manifest.weights.size(); ++i) {
    std::string got = stream.checksum(i);
    if (got != b.manifest.weights[i].checksum) weight_mismatch(b, i, true, got);
  }
}

std::unique_ptr<Bundle> check_bundle(const std::string& path, const std::string& weights_path,
                                     Verify verify) {
  std::unique_ptr<Bundle> b = open_bundle(path, weights_path, verify);
  if (!b->stream_checksums) return b;
  StreamPlan plan = plan_stream(b->weights, StreamOptions::from_env());
  WeightStream stream(plan, true, nullptr);
  stream.finish();
  check_streamed_weights(*b, stream);
  return b;
}

}  // namespace aotpack
