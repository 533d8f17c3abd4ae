// test_integrity.cpp — bundles that were modified, made by hand or are not files at all
// (issue 19): the manifest checksum, unknown keys, slots against the cubin's parameter table,
// indices that must not size anything, FIFOs, weight paths leaving the bundle's folder, a
// manifest that contradicts itself. Through aotpack_model_check_file (no driver).
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <string>

#include "aotpack/aotpack.h"
#include "bundle_builder.hpp"
#include "cubin_params.hpp"
#include "sha256.hpp"
#include "test_main.hpp"

using namespace aotpack_test;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), std::streamsize(bytes.size()));
}

aotpack_code check_code(const std::string& path) {
  aotpack_status* s = aotpack_model_check_file(path.c_str(), nullptr);
  aotpack_code c = aotpack_status_code(s);
  aotpack_status_free(s);
  return c;
}

// The test bundle's kernel (add_kernel) takes ptr x, ptr w, ptr y, tensormap, ptr arena,
// i32 n, f32 alpha, null, null.
const std::vector<uint32_t> kAddParams = {8, 8, 8, 128, 8, 4, 4, 8, 8};

void set_cubin(TestBundle& b, const std::vector<uint8_t>& bytes) {
  b.cubin = bytes;
  at(at(at(b.manifest, "kernels"), 0), "cubin_sha256") =
      jstr(aotpack::sha256_hex(bytes.data(), bytes.size()));
}

std::string write(const TestBundle& b, const char* tag) { return b.write(make_temp_dir(tag)); }

Value& kernel0(TestBundle& b) { return at(at(b.manifest, "kernels"), 0); }
Value& arg(TestBundle& b, size_t i) { return at(at(at(at(b.manifest, "steps"), 0), "args"), i); }

}  // namespace

TEST(manifest_digest_missing_means_rebuild) {
  std::string p = write(TestBundle(), "nodigest");
  std::string bytes = read_file(p);
  size_t k = bytes.find("aotpack.manifest_sha256");
  EXPECT(k != std::string::npos);
  bytes.replace(k, 23, "aotpack.manifest_sha2XX");  // same length: the header stays valid
  write_file(p, bytes);
  expect_check_file(p, AOTPACK_UNSUPPORTED_VERSION, {"no manifest checksum", "rebuild"});
}

TEST(manifest_edit_is_a_checksum_mismatch) {
  std::string p = write(TestBundle(), "mandigest");
  std::string bytes = read_file(p);
  const std::string slot = "{\\\"kind\\\":\\\"i32\\\",\\\"value\\\":256}";
  size_t k = bytes.find(slot);  // the i32 slot n in the (escaped) manifest
  EXPECT(k != std::string::npos);
  bytes[k + slot.size() - 2] = '7';  // 256 -> 257: valid JSON, a different launch
  write_file(p, bytes);
  expect_check_file(p, AOTPACK_CHECKSUM_MISMATCH, {"manifest", "modified or corrupted"});
}

// Every single-bit flip (4 bit positions) of every header byte (manifest, its digest, tensor
// entries) is refused: none changes what would be launched unnoticed.
TEST(header_single_byte_flips_all_refused) {
  std::string p = write(TestBundle(), "flips");
  const std::string good = read_file(p);
  uint64_t header = 0;
  for (int i = 7; i >= 0; --i) header = (header << 8) | uint8_t(good[size_t(i)]);
  size_t tried = 0, accepted = 0;
  for (size_t i = 8; i < 8 + header; ++i)
    for (uint8_t mask : {0x01, 0x04, 0x20, 0x80}) {
      std::string bad = good;
      bad[i] = char(uint8_t(bad[i]) ^ mask);
      write_file(p, bad);
      ++tried;
      if (check_code(p) == AOTPACK_OK) {
        ++accepted;
        std::printf("  accepted: byte %zu ^ 0x%02x ('%c' -> '%c')\n", i, mask, good[i], bad[i]);
      }
    }
  std::printf("  %zu single-byte flips of a %llu-byte header, %zu accepted\n", tried,
              (unsigned long long)header, accepted);
  EXPECT(tried > 1000 && accepted == 0);
}

TEST(manifest_unknown_keys_refused) {
  {
    TestBundle b;
    at(kernel0(b), "smme") = jint(0);
    expect_check_file(write(b, "key1"), AOTPACK_CORRUPT_BUNDLE,
                      {"kernels[0]", "unknown field 'smme'", "did you mean 'smem'?"});
  }
  {
    TestBundle b;
    at(arg(b, 0), "offest") = jint(0);
    expect_check_file(write(b, "key2"), AOTPACK_CORRUPT_BUNDLE,
                      {"steps[0].args[0]", "unknown field 'offest'", "did you mean 'offset'?"});
  }
  {
    TestBundle b;
    at(b.manifest, "arena") = jint(1);
    expect_check_file(write(b, "key3"), AOTPACK_CORRUPT_BUNDLE, {"unknown field 'arena'"});
  }
  {
    TestBundle b;
    at(arg(b, 5), "offset") = jint(0);  // an i32 slot has no offset
    expect_check_file(write(b, "key4"), AOTPACK_CORRUPT_BUNDLE,
                      {"steps[0].args[5]", "unknown field 'offset'"});
  }
  {
    TestBundle b;
    at(at(b.manifest, "provenance"), "anything") = jint(1);  // free-form: allowed
    expect_check_file(write(b, "key5"), AOTPACK_OK, {});
  }
}

TEST(cubin_parameter_table_matches_slots) {
  TestBundle b;
  set_cubin(b, cubin_with_params("add_kernel", kAddParams));
  expect_check_file(write(b, "kpok"), AOTPACK_OK, {});
  std::vector<uint32_t> sizes;
  EXPECT(aotpack::cubin_param_sizes(b.cubin.data(), b.cubin.size(), "add_kernel", &sizes));
  EXPECT(sizes == kAddParams);
  EXPECT(!aotpack::cubin_param_sizes(b.cubin.data(), b.cubin.size(), "add_kerne", &sizes));
}

TEST(cubin_parameter_table_refuses_other_slots) {
  std::vector<uint32_t> wide = kAddParams;
  wide[5] = 8;  // the cubin takes an 8-byte n, the manifest passes i32
  TestBundle b;
  set_cubin(b, cubin_with_params("add_kernel", wide));
  expect_check_file(write(b, "kpsize"), AOTPACK_CORRUPT_BUNDLE,
                    {"steps[0]", "args[5] is i32 (4 bytes)", "declares parameter 5 as 8 bytes"});
  std::vector<uint32_t> fewer(kAddParams.begin(), kAddParams.end() - 1);
  TestBundle c;
  set_cubin(c, cubin_with_params("add_kernel", fewer));
  expect_check_file(write(c, "kpcount"), AOTPACK_CORRUPT_BUNDLE,
                    {"9 parameter slots", "takes 8 parameters"});
}

// Every truncation and single-byte change of the ELF image is read without reading out of
// bounds (ASan builds check that) and gives a table or none, never a crash.
TEST(cubin_parameter_reader_bounds) {
  const std::vector<uint8_t> good = cubin_with_params("add_kernel", kAddParams);
  std::vector<uint32_t> sizes;
  for (size_t n = 0; n <= good.size(); ++n) {
    std::vector<uint8_t> cut(good.begin(), good.begin() + long(n));
    aotpack::cubin_param_sizes(cut.data(), cut.size(), "add_kernel", &sizes);
  }
  for (size_t i = 0; i < good.size(); ++i)
    for (uint8_t mask : {0x01, 0x80, 0xff}) {
      std::vector<uint8_t> bad = good;
      bad[i] ^= mask;
      aotpack::cubin_param_sizes(bad.data(), bad.size(), "add_kernel", &sizes);
    }
}

TEST(huge_cubin_index_is_cheap) {
  TestBundle b;
  at(kernel0(b), "cubin") = jint(4000000000ll);  // no such tensor in the file
  auto t0 = std::chrono::steady_clock::now();
  expect_check_file(write(b, "bigidx"), AOTPACK_CORRUPT_BUNDLE,
                    {"cubin 4000000000", "missing from the bundle"});
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT(s < 1.0);
}

TEST(fifo_is_not_a_bundle) {
  std::string p = make_temp_dir("fifo") + "/model.aotpack";
  EXPECT(mkfifo(p.c_str(), 0600) == 0);
  expect_check_file(p, AOTPACK_IO, {"not a regular file"});  // returns: no writer awaited
  expect_check_file("/dev/zero", AOTPACK_IO, {"not a regular file"});
}

TEST(external_weights_path_stays_in_the_bundle_folder) {
  for (const char* f : {"/etc/passwd", "../weights.safetensors", "sub/../../w.safetensors", ""}) {
    TestBundle b(true);
    at(at(b.manifest, "external_weights"), "file") = jstr(f);
    expect_check_file(write(b, "extpath"), AOTPACK_CORRUPT_BUNDLE,
                      {"external_weights.file", "inside the bundle's folder"});
  }
  TestBundle b(true);  // the caller may point anywhere
  std::string dir = make_temp_dir("extcaller");
  std::string p = b.write(dir);
  expect_check_file(p, AOTPACK_OK, {}, (dir + "/../" + dir.substr(dir.rfind('/') + 1) +
                                        "/weights.safetensors").c_str());
}

TEST(target_arch_contradicting_cc) {
  TestBundle b;
  at(at(b.manifest, "target"), "arch") = jstr("sm_80");
  expect_check_file(write(b, "archcc"), AOTPACK_CORRUPT_BUNDLE,
                    {"arch 'sm_80' means compute capability 8.0 but cc says 9.0"});
  TestBundle c;
  at(at(c.manifest, "target"), "arch") = jstr("hopper");
  expect_check_file(write(c, "archbad"), AOTPACK_CORRUPT_BUNDLE,
                    {"'hopper' is not a GPU architecture"});
}
