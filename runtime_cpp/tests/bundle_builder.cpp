// bundle_builder.cpp — see bundle_builder.hpp.
#include "bundle_builder.hpp"

#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "aotpack/aotpack.h"
#include "safetensors.hpp"
#include "test_main.hpp"
#include "checksum.hpp"
#include "sha256.hpp"

namespace aotpack_test {

Value jint(int64_t i) {
  Value v;
  v.type = Type::Int;
  v.i = i;
  return v;
}

Value jbool(bool b) {
  Value v;
  v.type = Type::Bool;
  v.b = b;
  return v;
}

Value jstr(const std::string& s) {
  Value v;
  v.type = Type::String;
  v.s = s;
  return v;
}

Value& at(Value& obj, const std::string& key) {
  for (auto& kv : obj.fields)
    if (kv.first == key) return kv.second;
  obj.type = Type::Object;
  obj.fields.emplace_back(key, Value());
  return obj.fields.back().second;
}

Value& at(Value& arr, size_t i) { return arr.items.at(i); }

namespace {
std::vector<std::string>& temp_dirs() {
  static std::vector<std::string> dirs;
  return dirs;
}
int remove_entry(const char* path, const struct stat*, int, struct FTW*) {
  return std::remove(path);
}
// Deletes the test's temp dirs at exit (set AOTPACK_KEEP_TEST_FILES=1 to keep them).
void remove_temp_dirs() {
  if (std::getenv("AOTPACK_KEEP_TEST_FILES")) return;
  for (const auto& d : temp_dirs()) nftw(d.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}
}  // namespace

std::string make_temp_dir(const std::string& tag) {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/aotpack_" + tag + "_XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (!mkdtemp(buf.data())) {
    std::perror("mkdtemp");
    std::exit(2);
  }
  if (temp_dirs().empty()) std::atexit(remove_temp_dirs);
  temp_dirs().push_back(buf.data());
  return buf.data();
}

namespace {

const char* kManifestTemplate = R"JSON({
  "format": "aotpack", "version": 1,
  "target": {"arch": "sm_90a", "cc": [9, 0], "min_driver": 12080, "sm_count": 132},
  "inputs": [{"name": "x", "dtype": "f32", "shape": [4, 64]}],
  "outputs": [{"name": "y", "dtype": "f32", "shape": [4, 64]}],
  "weights": [{"name": "w", "dtype": "f32", "shape": [64], "nbytes": 256, "sha256": ""}],
  "external_weights": null,
  "arena_bytes": 4096,
  "buffers": [{"kind": "input", "index": 0}, {"kind": "output", "index": 0},
              {"kind": "weight", "index": 0}, {"kind": "arena", "offset": 0, "nbytes": 1024}],
  "kernels": [{"name": "add_0", "entry": "add_kernel", "cubin": 0, "cubin_sha256": "",
               "block": [128, 1, 1], "cluster": [1, 1, 1], "smem": 0, "backend": "triton",
               "fused_ops": ["add"], "config": {"BLOCK": 256, "num_warps": 4}}],
  "steps": [{"kernel": 0, "grid": [2, 1, 1], "args": [
    {"kind": "ptr", "buffer": 0},
    {"kind": "ptr", "buffer": 2, "offset": 0},
    {"kind": "ptr", "buffer": 1},
    {"kind": "tensormap", "buffer": 0, "offset": 0, "dtype": "f32", "dims": [4, 64],
     "strides": [64, 1], "box": [4, 32], "swizzle": "128B", "l2": "128B", "oob": "zero"},
    {"kind": "ptr", "buffer": 3, "offset": 512},
    {"kind": "i32", "value": 256},
    {"kind": "f32", "value": 1.5},
    {"kind": "null"}, {"kind": "null"}]}],
  "provenance": {"aotpack": "0.1.0", "created_by": "runtime_cpp tests"}
})JSON";

const char* kDynamicTemplate = R"JSON({
  "format": "aotpack", "version": 2,
  "symbols": [{"name": "B", "min": 1, "max": 64, "example": 4}],
  "target": {"arch": "sm_90a", "cc": [9, 0], "min_driver": 12080, "sm_count": 132},
  "inputs": [{"name": "x", "dtype": "f32", "shape": ["B", 64]},
             {"name": "aux", "dtype": "f32", "shape": ["B", "2*B"]}],
  "outputs": [{"name": "y", "dtype": "f32", "shape": ["B", 64]}],
  "weights": [{"name": "w", "dtype": "f32", "shape": [64], "nbytes": 256, "sha256": ""}],
  "external_weights": null,
  "arena_bytes": 0,
  "buffers": [{"kind": "input", "index": 0}, {"kind": "output", "index": 0},
              {"kind": "weight", "index": 0}],
  "kernels": [{"name": "dyn_small", "entry": "dyn_add_small", "cubin": 0, "cubin_sha256": "",
               "block": [128, 1, 1]},
              {"name": "dyn_big", "entry": "dyn_add_big", "cubin": 0, "cubin_sha256": "",
               "block": [128, 1, 1]}],
  "steps": [
    {"kernel": 0, "grid": ["B", 1, 1], "when": [{"expr": "B", "min": 1, "max": 8}], "args": [
      {"kind": "ptr", "buffer": 0}, {"kind": "ptr", "buffer": 2}, {"kind": "ptr", "buffer": 1},
      {"kind": "tensormap", "buffer": 0, "offset": 0, "dtype": "f32", "dims": ["B", 64],
       "strides": [64, 1], "box": [1, 32], "swizzle": "128B"},
      {"kind": "i32", "value": "64*B"}, {"kind": "f32", "value": 1.5}]},
    {"kernel": 1, "grid": ["(B + 7)/8", 1, 1],
     "when": [{"expr": "B", "min": 9, "max": 64}], "args": [
      {"kind": "ptr", "buffer": 0}, {"kind": "ptr", "buffer": 2}, {"kind": "ptr", "buffer": 1},
      {"kind": "tensormap", "buffer": 0, "offset": 0, "dtype": "f32", "dims": ["B", 64],
       "strides": [64, 1], "box": [1, 32], "swizzle": "128B"},
      {"kind": "i32", "value": "64*B"}, {"kind": "f32", "value": 1.5}]}],
  "provenance": {"aotpack": "0.1.0", "created_by": "runtime_cpp tests"}
})JSON";

const char* kGenerationTemplate = R"JSON({
  "format": "aotpack", "version": 2,
  "symbols": [{"name": "B", "min": 1, "max": 4, "example": 1},
              {"name": "S", "min": 1, "max": 16, "example": 8}],
  "target": {"arch": "sm_90a", "cc": [9, 0], "min_driver": 12080, "sm_count": 132},
  "inputs": [{"name": "input_ids", "dtype": "i64", "shape": ["B", "S"]},
             {"name": "positions", "dtype": "i64", "shape": ["B", "S"]},
             {"name": "last_index", "dtype": "i64", "shape": ["B"]}],
  "outputs": [{"name": "next_ids", "dtype": "i64", "shape": ["B"]},
              {"name": "logits", "dtype": "f32", "shape": ["B", 32]}],
  "weights": [{"name": "w", "dtype": "f32", "shape": [64], "nbytes": 256, "sha256": ""}],
  "external_weights": null,
  "arena_bytes": 0,
  "buffers": [{"kind": "input", "index": 0}, {"kind": "input", "index": 1},
              {"kind": "input", "index": 2}, {"kind": "output", "index": 0},
              {"kind": "output", "index": 1}, {"kind": "state", "index": 0}],
  "kernels": [{"name": "gen_step", "entry": "gen_step", "cubin": 0, "cubin_sha256": "",
               "block": [128, 1, 1], "cluster": [1, 1, 1], "smem": 0, "backend": "test"}],
  "steps": [{"kernel": 0, "grid": ["B", 1, 1], "args": [
    {"kind": "ptr", "buffer": 0}, {"kind": "ptr", "buffer": 1}, {"kind": "ptr", "buffer": 2},
    {"kind": "ptr", "buffer": 3}, {"kind": "ptr", "buffer": 4}, {"kind": "ptr", "buffer": 5},
    {"kind": "i64", "value": "B"}, {"kind": "i64", "value": "S"}, {"kind": "i64", "value": 32},
    {"kind": "i64", "value": 16}]}],
  "state": [{"name": "cache.k.0", "dtype": "i64", "shape": [4, 16]}],
  "generation": {"max_batch": 4, "max_seq_len": 16, "vocab_size": 32, "input_ids": 0,
                 "positions": 1, "last_index": 2, "next_ids": 0, "logits": 1, "eos_ids": []},
  "provenance": {"aotpack": "0.1.0", "created_by": "runtime_cpp tests"}
})JSON";

std::string sha_of(const void* p, size_t n) { return aotpack::sha256_hex(p, n); }

// The weight's digests as the writer records them (sha256 and the fast checksum).
void set_weight_digests(Value& manifest, const std::vector<float>& weight) {
  Value& w = at(at(manifest, "weights"), 0);
  at(w, "sha256") = jstr(sha_of(weight.data(), weight.size() * 4));
  at(w, "checksum") = jstr(aotpack::checksum64_hex(weight.data(), weight.size() * 4));
}

void put(std::vector<uint8_t>& b, size_t at, uint64_t v, int n) {
  if (b.size() < at + size_t(n)) b.resize(at + size_t(n));
  for (int i = 0; i < n; ++i) b[at + size_t(i)] = uint8_t(v >> (8 * i));
}

}  // namespace

std::vector<uint8_t> cubin_with_params(const std::string& entry,
                                       const std::vector<uint32_t>& sizes) {
  std::string strtab = std::string("\0.shstrtab\0", 11) + ".nv.info." + entry + '\0';
  std::vector<uint8_t> info = {4, 0x37, 4, 0, 0x82, 0, 0, 0};  // a sized record of another kind
  for (size_t i = sizes.size(); i-- > 0;) {
    std::vector<uint8_t> r;
    put(r, 0, 4, 1);
    put(r, 1, 0x17, 1);
    put(r, 2, 12, 2);
    put(r, 4, 0, 4);
    put(r, 8, i, 2);
    put(r, 10, 8 * i, 2);
    put(r, 12, 0x1f000u | (uint64_t(sizes[i]) << 18), 4);
    info.insert(info.end(), r.begin(), r.end());
  }
  info.insert(info.end(), {3, 0x1b, 0xff, 0});  // a half-word record
  std::vector<uint8_t> b = {0x7f, 'E', 'L', 'F', 2, 1, 1};  // ELF64, little-endian
  b.resize(64, 0);
  const size_t str_off = 64, info_off = str_off + strtab.size();
  b.insert(b.end(), strtab.begin(), strtab.end());
  b.insert(b.end(), info.begin(), info.end());
  while (b.size() % 8) b.push_back(0);
  const size_t sh_off = b.size();
  b.resize(sh_off + 3 * 64, 0);
  put(b, 0x28, sh_off, 8);
  put(b, 0x3a, 64, 2);
  put(b, 0x3c, 3, 2);
  put(b, 0x3e, 1, 2);
  auto section = [&](size_t i, uint32_t name, uint64_t off, uint64_t size) {
    put(b, sh_off + i * 64, name, 4);
    put(b, sh_off + i * 64 + 0x18, off, 8);
    put(b, sh_off + i * 64 + 0x20, size, 8);
  };
  section(1, 1, str_off, strtab.size());
  section(2, 11, info_off, info.size());
  return b;
}



TestBundle::TestBundle(bool external_weights) : external(external_weights) {
  manifest = aotpack::json::parse(kManifestTemplate, std::strlen(kManifestTemplate), "template");
  const char* text = "\x7f" "ELF fake cubin bytes for tests";
  cubin.assign(text, text + std::strlen(text));
  for (int i = 0; i < 64; ++i) weight.push_back(0.25f * float(i) - 3.0f);
  file_weight = weight;
  set_weight_digests(manifest, weight);
  at(at(at(manifest, "kernels"), 0), "cubin_sha256") = jstr(sha_of(cubin.data(), cubin.size()));
  if (external) {
    Value ext;
    at(ext, "file") = jstr("weights.safetensors");
    at(manifest, "external_weights") = ext;
  }
}

TestBundle TestBundle::dynamic() {
  TestBundle b;
  b.manifest = aotpack::json::parse(kDynamicTemplate, std::strlen(kDynamicTemplate), "template");
  set_weight_digests(b.manifest, b.weight);
  for (size_t k = 0; k < 2; ++k)
    at(at(at(b.manifest, "kernels"), k), "cubin_sha256") =
        jstr(sha_of(b.cubin.data(), b.cubin.size()));
  return b;
}

TestBundle TestBundle::generation() {
  TestBundle b;
  b.manifest =
      aotpack::json::parse(kGenerationTemplate, std::strlen(kGenerationTemplate), "template");
  set_weight_digests(b.manifest, b.weight);
  at(at(at(b.manifest, "kernels"), 0), "cubin_sha256") =
      jstr(sha_of(b.cubin.data(), b.cubin.size()));
  return b;
}

std::vector<int64_t> fake_gen_expected(const std::vector<int64_t>& prompt, size_t n,
                                       int64_t vocab) {
  std::vector<int64_t> seq = prompt, out;
  for (size_t k = 0; k < n; ++k) {
    uint64_t h = 0;
    for (int64_t t : seq) h = h * 1000003 + uint64_t(t) + 1;
    h ^= h >> 29;
    out.push_back(int64_t(h % uint64_t(vocab)));
    seq.push_back(out.back());
  }
  return out;
}

void TestBundle::add_weight(const std::string& name, const std::vector<uint8_t>& bytes) {
  Value w;
  at(w, "name") = jstr(name);
  at(w, "dtype") = jstr("u8");
  Value shape;
  shape.type = Type::Array;
  shape.items.push_back(jint(int64_t(bytes.size())));
  at(w, "shape") = shape;
  at(w, "nbytes") = jint(int64_t(bytes.size()));
  at(w, "sha256") = jstr(sha_of(bytes.data(), bytes.size()));
  at(w, "checksum") = jstr(aotpack::checksum64_hex(bytes.data(), bytes.size()));
  at(manifest, "weights").items.push_back(w);
  extra_weights.emplace_back(name, bytes);
}

std::string TestBundle::write(const std::string& dir, const std::string& file) const {
  using aotpack::TensorToWrite;
  std::vector<TensorToWrite> weights, tensors;
  weights.push_back(
      {"w", "F32", file_weight_shape, file_weight.data(), file_weight.size() * 4});
  for (const auto& e : extra_weights)
    weights.push_back({e.first, "U8", {int64_t(e.second.size())}, e.second.data(),
                       e.second.size()});
  if (!external) tensors = weights;
  tensors.push_back({"__aotpack__.cubin.0", "U8", {int64_t(cubin.size())}, cubin.data(),
                     cubin.size()});
  std::string path = dir + "/" + file;
  std::string text = dump(manifest);
  aotpack::write_safetensors(path, tensors,
                             {{"aotpack.manifest", text},
                              {"aotpack.manifest_sha256", sha_of(text.data(), text.size())}},
                             256, true);
  if (external) aotpack::write_safetensors(dir + "/weights.safetensors", weights, {}, 256, true);
  return path;
}

void expect_check_file(const std::string& path, int code,
                       std::initializer_list<std::string> needles, const char* weights_path,
                       int verify) {
  aotpack_model_options o;
  std::memset(&o, 0, sizeof(o));
  o.struct_size = sizeof(o);
  o.weights_path = weights_path;
  o.verify = verify;
  aotpack_status* s = aotpack_model_check_file(path.c_str(), &o);
  std::string msg = aotpack_status_message(s);
  aotpack_code got = aotpack_status_code(s);
  aotpack_status_free(s);
  std::printf("  -> %s: %s\n", aotpack_status_code_name(got), msg.c_str());
  if (got != code)
    test_failed(__FILE__, __LINE__,
                std::string("expected ") + aotpack_status_code_name(aotpack_code(code)) +
                    " got " + aotpack_status_code_name(got) + ": " + msg);
  for (const std::string& n : needles)
    if (msg.find(n) == std::string::npos)
      test_failed(__FILE__, __LINE__, "message lacks '" + n + "': " + msg);
}

}  // namespace aotpack_test
