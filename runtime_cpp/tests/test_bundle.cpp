// test_bundle.cpp — bundle parsing and load-time validation through the C API
// (aotpack_model_check_file), no GPU and no libcuda needed. Each case builds its own bundle.
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <string>

#include "aotpack/aotpack.h"
#include "bundle_builder.hpp"
#include "sha256.hpp"
#include "test_main.hpp"

using namespace aotpack_test;

namespace {

// Checks that validating `path` gives `code` and a message containing `needle`.
void expect_status(const std::string& path, aotpack_code code, const std::string& needle,
                   const char* weights_path = nullptr) {
  expect_check_file(path, code, {needle}, weights_path);
}

std::string write(const TestBundle& b, const char* tag) { return b.write(make_temp_dir(tag)); }

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), std::streamsize(bytes.size()));
}

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[size_t(i)] = char(n >> (8 * i));
  return s;
}

Value& step_arg(TestBundle& b, size_t i) { return at(at(at(at(b.manifest, "steps"), 0), "args"), i); }
Value& tensormap(TestBundle& b) { return step_arg(b, 3); }

}  // namespace

TEST(valid_bundle) { expect_status(write(TestBundle(), "valid"), AOTPACK_OK, "OK"); }

TEST(valid_external_weights) {
  expect_status(write(TestBundle(true), "ext"), AOTPACK_OK, "OK");
}

TEST(external_weights_path_override) {
  TestBundle b(true);
  std::string dir = make_temp_dir("extov");
  std::string path = b.write(dir);
  std::string moved = dir + "/elsewhere.safetensors";
  EXPECT(std::rename((dir + "/weights.safetensors").c_str(), moved.c_str()) == 0);
  expect_status(path, AOTPACK_IO, "weights.safetensors");
  expect_status(path, AOTPACK_OK, "OK", moved.c_str());
}

TEST(missing_file) { expect_status("/nonexistent/model.aotpack", AOTPACK_IO, "cannot open"); }

TEST(empty_file) {
  std::string p = make_temp_dir("empty") + "/model.aotpack";
  write_bytes(p, "");
  expect_status(p, AOTPACK_CORRUPT_BUNDLE, "truncated");
}

TEST(truncated_file) {
  std::string p = write(TestBundle(), "trunc");
  std::string bytes = read_bytes(p);
  write_bytes(p, bytes.substr(0, bytes.size() - 20));
  expect_status(p, AOTPACK_CORRUPT_BUNDLE, "outside the data section");
}

TEST(header_length_past_eof) {
  std::string p = make_temp_dir("hdr") + "/model.aotpack";
  write_bytes(p, le64(1000000) + "{}");
  expect_status(p, AOTPACK_CORRUPT_BUNDLE, "header length 1000000");
}

TEST(bad_json) {
  std::string p = make_temp_dir("badjson") + "/model.aotpack";
  std::string hdr = "{\"a\": [1, 2,, 3]}";
  write_bytes(p, le64(hdr.size()) + hdr);
  expect_status(p, AOTPACK_CORRUPT_BUNDLE, "invalid JSON");
}

TEST(bad_manifest_json) {
  std::string p = make_temp_dir("badmjson") + "/model.aotpack";
  std::string digest = aotpack::sha256_hex("{\"format\": ", 11);  // the string's bytes
  std::string hdr = "{\"__metadata__\": {\"aotpack.manifest\": \"{\\\"format\\\": \", "
                    "\"aotpack.manifest_sha256\": \"" + digest + "\"}}";
  write_bytes(p, le64(hdr.size()) + hdr);
  expect_status(p, AOTPACK_CORRUPT_BUNDLE, "manifest: invalid JSON");
}

TEST(no_manifest) {
  std::string p = make_temp_dir("nomani") + "/model.aotpack";
  std::string hdr = "{\"t\": {\"dtype\": \"U8\", \"shape\": [2], \"data_offsets\": [0, 2]}}";
  write_bytes(p, le64(hdr.size()) + hdr + "ab");
  expect_status(p, AOTPACK_CORRUPT_BUNDLE, "not an aotpack bundle");
}

TEST(wrong_format_name) {
  TestBundle b;
  at(b.manifest, "format") = jstr("onnx");
  expect_status(write(b, "fmt"), AOTPACK_CORRUPT_BUNDLE, "\"format\" must be \"aotpack\"");
}

TEST(unknown_version) {
  TestBundle b;
  at(b.manifest, "version") = jint(3);
  expect_status(write(b, "ver"), AOTPACK_UNSUPPORTED_VERSION, "version 3");
  at(b.manifest, "version") = jint(0);
  expect_status(write(b, "ver0"), AOTPACK_UNSUPPORTED_VERSION, "version 0");
}

TEST(cubin_checksum_mismatch) {
  TestBundle b;
  b.cubin[5] ^= 0x40;
  expect_status(write(b, "cubinsha"), AOTPACK_CHECKSUM_MISMATCH, "kernel 'add_0'");
}

TEST(cubin_missing) {
  TestBundle b;
  at(at(at(b.manifest, "kernels"), 0), "cubin") = jint(1);
  expect_status(write(b, "cubinmiss"), AOTPACK_CORRUPT_BUNDLE, "__aotpack__.cubin.1");
}

TEST(weight_sha_mismatch) {
  TestBundle b;
  b.file_weight[3] += 1.0f;
  expect_status(write(b, "wsha"), AOTPACK_WEIGHTS_MISMATCH, "weight 'w'");
}

// A changed weight byte: FAST (the load's default) names the checksum, FULL (check_file's
// default) the sha256, NONE lets it through (names, dtypes and shapes still checked).
TEST(weight_verify_modes) {
  TestBundle b;
  b.file_weight[7] = -b.file_weight[7];
  std::string p = write(b, "wverify");
  expect_check_file(p, AOTPACK_WEIGHTS_MISMATCH, {"weight 'w'", "checksum"}, nullptr,
                    AOTPACK_VERIFY_FAST);
  expect_check_file(p, AOTPACK_WEIGHTS_MISMATCH, {"weight 'w'", "sha256"}, nullptr,
                    AOTPACK_VERIFY_FULL);
  expect_check_file(p, AOTPACK_WEIGHTS_MISMATCH, {"sha256"});
  expect_check_file(p, AOTPACK_OK, {"OK"}, nullptr, AOTPACK_VERIFY_NONE);
  expect_check_file(write(TestBundle(), "wverifyok"), AOTPACK_OK, {"OK"}, nullptr,
                    AOTPACK_VERIFY_FAST);
  expect_check_file(p, AOTPACK_INVALID_ARGUMENT, {"verify is 7"}, nullptr, 7);
  // a caller built before `verify` existed (struct_size 24): whatever lies in the padding
  // where `verify` is now is not read, so the default (FULL for check_file) applies
  aotpack_model_options old;
  std::memset(&old, 0xAB, sizeof(old));
  old.struct_size = 24;
  old.weights_path = nullptr;
  old.device_ordinal = 0;
  aotpack_status* s = aotpack_model_check_file(p.c_str(), &old);
  EXPECT(aotpack_status_code(s) == AOTPACK_WEIGHTS_MISMATCH);
  EXPECT(std::string(aotpack_status_message(s)).find("sha256") != std::string::npos);
  aotpack_status_free(s);
}

// A bundle written before checksums existed: FAST falls back to sha256, never to nothing.
TEST(weight_fast_without_checksum_uses_sha256) {
  TestBundle b;
  at(at(b.manifest, "weights"), 0).fields.erase(
      std::remove_if(at(at(b.manifest, "weights"), 0).fields.begin(),
                     at(at(b.manifest, "weights"), 0).fields.end(),
                     [](const auto& kv) { return kv.first == "checksum"; }),
      at(at(b.manifest, "weights"), 0).fields.end());
  expect_check_file(write(b, "wnocs"), AOTPACK_OK, {"OK"}, nullptr, AOTPACK_VERIFY_FAST);
  b.file_weight[0] += 1.0f;
  expect_check_file(write(b, "wnocsbad"), AOTPACK_WEIGHTS_MISMATCH, {"sha256"}, nullptr,
                    AOTPACK_VERIFY_FAST);
}

TEST(weight_checksum_malformed) {
  TestBundle b;
  at(at(at(b.manifest, "weights"), 0), "checksum") = jstr("0123456789ABCDEF");
  expect_status(write(b, "wcsbad"), AOTPACK_CORRUPT_BUNDLE, "16 lower-case hex digits");
}

TEST(weight_nbytes_mismatch) {
  TestBundle b;
  at(at(at(b.manifest, "weights"), 0), "nbytes") = jint(128);
  expect_status(write(b, "wnb"), AOTPACK_CORRUPT_BUNDLE, "weight 'w': nbytes 128");
}

TEST(external_weights_missing) {
  TestBundle b(true);
  std::string dir = make_temp_dir("extmiss");
  std::string p = b.write(dir);
  std::remove((dir + "/weights.safetensors").c_str());
  expect_status(p, AOTPACK_IO, "external weights");
}

TEST(external_weights_wrong_shape) {
  TestBundle b(true);
  b.file_weight_shape = {8, 8};
  expect_status(write(b, "extshape"), AOTPACK_WEIGHTS_MISMATCH, "weight 'w'");
}

TEST(external_weights_wrong_sha) {
  TestBundle b(true);
  b.file_weight[0] = 42.0f;
  expect_status(write(b, "extsha"), AOTPACK_WEIGHTS_MISMATCH, "sha256");
}

TEST(buffer_index_out_of_range) {
  TestBundle b;
  at(step_arg(b, 0), "buffer") = jint(9);
  expect_status(write(b, "bufidx"), AOTPACK_CORRUPT_BUNDLE, "buffer index 9 out of range");
}

TEST(weight_index_out_of_range) {
  TestBundle b;
  at(at(at(b.manifest, "buffers"), 2), "index") = jint(1);
  expect_status(write(b, "widx"), AOTPACK_CORRUPT_BUNDLE, "weight index 1 out of range");
}

TEST(kernel_index_out_of_range) {
  TestBundle b;
  at(at(at(b.manifest, "steps"), 0), "kernel") = jint(3);
  expect_status(write(b, "kidx"), AOTPACK_CORRUPT_BUNDLE, "kernel index 3 out of range");
}

TEST(ptr_offset_past_buffer_end) {
  TestBundle b;
  at(step_arg(b, 4), "offset") = jint(2048);  // arena region has 1024 bytes
  expect_status(write(b, "ptroff"), AOTPACK_CORRUPT_BUNDLE, "past the end of buffer 3");
}

TEST(arena_region_outside_arena) {
  TestBundle b;
  at(at(at(b.manifest, "buffers"), 3), "offset") = jint(3584);
  expect_status(write(b, "arena"), AOTPACK_CORRUPT_BUNDLE, "outside arena_bytes");
}

TEST(tensormap_box_zero) {
  TestBundle b;
  at(at(tensormap(b), "box"), 0) = jint(0);
  expect_status(write(b, "box0"), AOTPACK_CORRUPT_BUNDLE, "box[0] = 0 must be in 1..256");
}

TEST(tensormap_box_too_big) {
  TestBundle b;
  at(at(tensormap(b), "box"), 0) = jint(257);
  expect_status(write(b, "box257"), AOTPACK_CORRUPT_BUNDLE, "box[0] = 257");
}

TEST(tensormap_inner_box_not_16_bytes) {
  TestBundle b;
  at(at(tensormap(b), "box"), 1) = jint(6);  // 24 bytes
  expect_status(write(b, "boxinner"), AOTPACK_CORRUPT_BUNDLE, "not a multiple of 16");
}

TEST(tensormap_unaligned_stride) {
  TestBundle b;
  at(at(tensormap(b), "strides"), 0) = jint(62);  // 248 bytes
  at(at(tensormap(b), "dims"), 0) = jint(2);
  expect_status(write(b, "stride"), AOTPACK_CORRUPT_BUNDLE, "multiple of 16 bytes");
}

TEST(tensormap_inner_stride_not_one) {
  TestBundle b;
  at(at(tensormap(b), "strides"), 1) = jint(2);
  expect_status(write(b, "stride1"), AOTPACK_CORRUPT_BUNDLE, "innermost stride must be 1");
}

TEST(tensormap_extent_past_buffer) {
  TestBundle b;
  at(at(tensormap(b), "dims"), 0) = jint(5);  // 5 rows of 64 f32 > 1024-byte input
  expect_status(write(b, "tmext"), AOTPACK_CORRUPT_BUNDLE, "has 1024 bytes");
}

TEST(tensormap_swizzle_span) {
  TestBundle b;
  at(tensormap(b), "swizzle") = jstr("64B");  // inner box 128 B > 64 B span
  expect_status(write(b, "swz"), AOTPACK_CORRUPT_BUNDLE, "swizzle span");
}

TEST(tensormap_nan_fill_needs_float) {
  TestBundle b;
  at(tensormap(b), "oob") = jstr("nan");
  at(tensormap(b), "dtype") = jstr("i32");
  expect_status(write(b, "oobnan"), AOTPACK_CORRUPT_BUNDLE, "floating-point");
}

TEST(tensormap_rank_too_big) {
  TestBundle b;
  Value& t = tensormap(b);
  for (const char* key : {"dims", "strides", "box"}) at(t, key).items.clear();
  for (int i = 0; i < 6; ++i) {
    at(t, "dims").items.push_back(jint(1));
    at(t, "strides").items.push_back(jint(i == 5 ? 1 : 4));
    at(t, "box").items.push_back(jint(i == 5 ? 4 : 1));
  }
  expect_status(write(b, "rank6"), AOTPACK_CORRUPT_BUNDLE, "rank 6 must be 1..5");
}

TEST(symbolic_shape) {
  TestBundle b;
  at(at(at(at(b.manifest, "inputs"), 0), "shape"), 0) = jstr("batch");
  expect_status(write(b, "sym"), AOTPACK_UNSUPPORTED_VERSION, "symbolic");
}

TEST(block_too_large) {
  TestBundle b;
  at(at(at(at(b.manifest, "kernels"), 0), "block"), 1) = jint(16);  // 128 x 16 = 2048
  expect_status(write(b, "block"), AOTPACK_CORRUPT_BUNDLE, "1024 threads");
}

TEST(unknown_slot_kind) {
  TestBundle b;
  at(step_arg(b, 7), "kind") = jstr("bytes");
  expect_status(write(b, "slot"), AOTPACK_UNSUPPORTED_VERSION, "bytes");
}

TEST(fastdivmod_slot_accepted) {
  TestBundle b;
  at(step_arg(b, 7), "kind") = jstr("fastdivmod");
  at(step_arg(b, 7), "value") = jint(12);
  expect_status(write(b, "fdm"), AOTPACK_OK, "OK");
}

TEST(fastdivmod_divisor_out_of_range) {
  for (int64_t bad : {int64_t(0), int64_t(-3), int64_t(1) << 31}) {
    TestBundle b;
    at(step_arg(b, 7), "kind") = jstr("fastdivmod");
    at(step_arg(b, 7), "value") = jint(bad);
    expect_status(write(b, "fdmbad"), AOTPACK_CORRUPT_BUNDLE, "args[7].value");
  }
  TestBundle b;  // the divisor is required: the runtime derives every other field from it
  at(step_arg(b, 7), "kind") = jstr("fastdivmod");
  expect_status(write(b, "fdmnone"), AOTPACK_CORRUPT_BUNDLE, "args[7]");
}

TEST(i32_value_out_of_range) {
  TestBundle b;
  at(step_arg(b, 5), "value") = jint(int64_t(1) << 40);
  expect_status(write(b, "i32"), AOTPACK_CORRUPT_BUNDLE, "args[5].value");
}

TEST(grid_not_multiple_of_cluster) {
  TestBundle b;
  at(at(at(at(b.manifest, "kernels"), 0), "cluster"), 0) = jint(4);  // grid x = 2
  expect_status(write(b, "cluster"), AOTPACK_CORRUPT_BUNDLE, "multiple of cluster");
}

TEST(missing_field) {
  TestBundle b;
  auto& fields = b.manifest.fields;
  for (size_t i = 0; i < fields.size(); ++i)
    if (fields[i].first == "arena_bytes") fields.erase(fields.begin() + long(i));
  expect_status(write(b, "nofield"), AOTPACK_CORRUPT_BUNDLE, "missing field 'arena_bytes'");
}

TEST(null_arguments) {
  aotpack_status* s = aotpack_model_check_file(nullptr, nullptr);
  EXPECT(aotpack_status_code(s) == AOTPACK_INVALID_ARGUMENT);
  aotpack_status_free(s);
  aotpack_model* m = reinterpret_cast<aotpack_model*>(1);
  s = aotpack_model_load(nullptr, nullptr, &m);
  EXPECT(aotpack_status_code(s) == AOTPACK_INVALID_ARGUMENT && m == nullptr);
  aotpack_status_free(s);
  EXPECT(aotpack_status_code(nullptr) == AOTPACK_OK);
  EXPECT(std::strcmp(aotpack_status_message(nullptr), "OK") == 0);
  EXPECT(aotpack_model_num_inputs(nullptr) == 0);
  s = aotpack_session_run(nullptr, nullptr, nullptr, nullptr);
  EXPECT(aotpack_status_code(s) == AOTPACK_INVALID_ARGUMENT);
  aotpack_status_free(s);
}

// Run with AOTPACK_LIBCUDA=/nonexistent (set by CMake): loading a valid bundle must say the
// driver is missing, after the bundle itself was verified.
TEST(missing_driver) {
  std::string p = write(TestBundle(), "nodrv");
  aotpack_model* m = nullptr;
  aotpack_status* s = aotpack_model_load(p.c_str(), nullptr, &m);
  std::string msg = aotpack_status_message(s);
  std::printf("  -> %s: %s\n", aotpack_status_code_name(aotpack_status_code(s)), msg.c_str());
  EXPECT(aotpack_status_code(s) == AOTPACK_DRIVER_NOT_FOUND);
  EXPECT(msg.find("NVIDIA") != std::string::npos && msg.find("driver") != std::string::npos);
  EXPECT(m == nullptr);
  aotpack_status_free(s);
}

// Bytes flipped all over a valid bundle: every result must be a status, never a crash
// (run under AOTPACK_SANITIZE to catch out-of-bounds reads).
TEST(mutation_fuzz) {
  std::string dir = make_temp_dir("fuzz");
  std::string p = TestBundle().write(dir);
  const std::string orig = read_bytes(p);
  uint64_t rng = 0x9E3779B97F4A7C15ull;
  auto next = [&] { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return rng; };
  int ok = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string bytes = orig;
    int flips = 1 + int(next() % 4);
    for (int k = 0; k < flips; ++k) {
      size_t pos = size_t(next() % (iter % 2 ? bytes.size() : 400));  // bias to the header
      bytes[pos] = char(next() & 0xFF);
    }
    if (iter % 7 == 0) bytes.resize(size_t(next() % bytes.size()));
    write_bytes(p, bytes);
    aotpack_status* s = aotpack_model_check_file(p.c_str(), nullptr);
    if (!s) ++ok;
    EXPECT(s == nullptr || std::strlen(aotpack_status_message(s)) > 0);
    aotpack_status_free(s);
  }
  std::printf("  %d of 3000 mutated bundles still valid\n", ok);
}
