// test_core.cpp — unit tests of the JSON parser, SHA-256, the safetensors writer/reader and
// the fastdivmod parameter fields.
#include <cstring>
#include <string>

#include "bundle_builder.hpp"
#include "checksum.hpp"
#include "error.hpp"
#include "json.hpp"
#include "manifest.hpp"
#include "safetensors.hpp"
#include "sha256.hpp"
#include "test_main.hpp"

using aotpack::json::parse;
using aotpack::json::Type;
using aotpack::json::Value;

namespace {

Value parse_str(const std::string& s) { return parse(s.data(), s.size(), "test"); }

// True when parsing `s` throws an aotpack::Error with CORRUPT_BUNDLE.
bool rejects(const std::string& s) {
  try {
    parse_str(s);
  } catch (const aotpack::Error& e) {
    return e.code() == AOTPACK_CORRUPT_BUNDLE;
  }
  return false;
}

}  // namespace

TEST(json_scalars) {
  Value v = parse_str(R"({"a": [1, -2, 3.5, 1e3, true, false, null], "b": {"c": "d"},
                          "big": 9223372036854775807, "over": 9223372036854775808})");
  const Value& a = *v.find("a");
  EXPECT(a.items.size() == 7);
  EXPECT(a.items[0].type == Type::Int && a.items[0].i == 1);
  EXPECT(a.items[1].type == Type::Int && a.items[1].i == -2);
  EXPECT(a.items[2].type == Type::Double && a.items[2].d == 3.5);
  EXPECT(a.items[3].type == Type::Double && a.items[3].d == 1000.0);
  EXPECT(a.items[4].type == Type::Bool && a.items[4].b);
  EXPECT(a.items[6].is_null());
  EXPECT(v.find("b")->find("c")->s == "d");
  EXPECT(v.find("big")->type == Type::Int && v.find("big")->i == INT64_MAX);
  EXPECT(v.find("over")->type == Type::Double);  // does not fit int64
}

TEST(json_string_escapes) {
  Value v = parse_str(R"(["a\"b\\c\/d\n\t", "\u00e9\u20ac", "\ud83d\ude00"])");
  EXPECT(v.items[0].s == "a\"b\\c/d\n\t");
  EXPECT(v.items[1].s == "\xc3\xa9\xe2\x82\xac");
  EXPECT(v.items[2].s == "\xf0\x9f\x98\x80");
  EXPECT(aotpack::json::quote("a\"\n") == "\"a\\\"\\u000a\"");
}

TEST(json_rejects_malformed) {
  EXPECT(rejects(""));
  EXPECT(rejects("{"));
  EXPECT(rejects("[1,]"));
  EXPECT(rejects("{\"a\" 1}"));
  EXPECT(rejects("{\"a\": 1, \"a\": 2}"));
  std::string big = "{";
  for (int i = 0; i < 40; ++i) big += "\"k" + std::to_string(i) + "\": 1, ";
  EXPECT(!rejects(big + "\"last\": 2}"));
  EXPECT(rejects(big + "\"k3\": 2}"));   // duplicate found through the hash set
  EXPECT(rejects(big + "\"k39\": 2}"));
  EXPECT(rejects("\"unterminated"));
  EXPECT(rejects("\"\\ud800\""));
  EXPECT(rejects("\"\\x\""));
  EXPECT(rejects("01"));
  EXPECT(rejects("1."));
  EXPECT(rejects("-"));
  EXPECT(rejects("1e999"));
  EXPECT(rejects("tru"));
  EXPECT(rejects("[1] 2"));
  EXPECT(rejects(std::string("\"a\x01\"")));
  EXPECT(rejects(std::string(100, '[') + std::string(100, ']')));  // depth limit
  EXPECT(!rejects(std::string(60, '[') + std::string(60, ']')));
}

TEST(sha256_vectors) {
  using aotpack::sha256_hex;
  EXPECT(sha256_hex("", 0) ==
         "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT(sha256_hex("abc", 3) ==
         "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const char* two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  EXPECT(sha256_hex(two, std::strlen(two)) ==
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  std::string million(1000000, 'a');
  aotpack::Sha256 h;  // incremental, odd chunk sizes
  for (size_t i = 0; i < million.size(); i += 997)
    h.update(million.data() + i, std::min<size_t>(997, million.size() - i));
  EXPECT(h.hex_digest() == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  // in one call: many blocks at once (the SHA-NI path where the CPU has it)
  EXPECT(sha256_hex(million.data(), million.size()) ==
         "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  std::printf("  sha256 on %s\n", aotpack::sha256_uses_cpu_instructions() ? "SHA-NI"
                                                                            : "portable C++");
}

TEST(sha256_parallel) {
  // > 64 MiB in total so that several threads are used.
  std::vector<std::string> blobs = {std::string(40u << 20, 'x'), std::string(30u << 20, 'y'),
                                    std::string(), std::string(1000, 'z')};
  std::vector<std::pair<const void*, size_t>> ranges;
  for (const auto& b : blobs) ranges.emplace_back(b.data(), b.size());
  std::vector<std::string> got = aotpack::sha256_hex_parallel(ranges);
  EXPECT(got.size() == blobs.size());
  for (size_t i = 0; i < blobs.size(); ++i)
    EXPECT(got[i] == aotpack::sha256_hex(blobs[i].data(), blobs[i].size()));
}

// The fast checksum: the same values as aotpack/bundle/checksum.py (tests/test_checksum.py
// asserts these too), and a split over threads and pieces that changes nothing.
TEST(checksum64_vectors_and_pieces) {
  using aotpack::checksum64_hex;
  EXPECT(checksum64_hex("", 0) == "0000000000000000");
  EXPECT(checksum64_hex("abc", 3) == "a4e1ccf9ffc61570");
  std::string pattern;
  for (int k = 0; k < 100; ++k)
    for (int i = 0; i < 256; ++i) pattern.push_back(char(i));
  EXPECT(checksum64_hex(pattern.data(), pattern.size()) == "d1d6ad5ecb67b064");
  // 80 MiB + 5 bytes: several 16 MiB pieces on several threads, a ragged last word
  std::vector<uint8_t> big((80u << 20) + 5);
  for (size_t i = 0; i < big.size(); ++i) big[i] = uint8_t(i * 2654435761u >> 13);
  std::vector<std::string> got =
      aotpack::checksum64_hex_parallel({{big.data(), big.size()}, {pattern.data(), 3}});
  EXPECT(got[0] == checksum64_hex(big.data(), big.size()));
  EXPECT(got[1] == checksum64_hex(pattern.data(), 3));
  big[(40u << 20) + 3] ^= 1;  // one flipped bit anywhere changes it
  EXPECT(aotpack::checksum64_hex_parallel({{big.data(), big.size()}})[0] != got[0]);
}

TEST(safetensors_roundtrip) {
  std::string path = aotpack_test::make_temp_dir("st") + "/t.safetensors";
  float a[3] = {1.0f, 2.0f, 3.0f};
  uint8_t b[5] = {1, 2, 3, 4, 5};
  aotpack::write_safetensors(path, {{"a", "F32", {3}, a, 12}, {"b.x", "U8", {1, 5}, b, 5}},
                             {{"k", "v\"q"}}, 256);
  aotpack::SafetensorsFile f(path, "test file");
  EXPECT(f.tensors().size() == 2);
  const aotpack::TensorEntry* ta = f.find("a");
  const aotpack::TensorEntry* tb = f.find("b.x");
  EXPECT(ta && tb && ta->offset % 256 == 0 && tb->offset % 256 == 0);
  EXPECT(std::memcmp(f.tensor_data(*ta), a, 12) == 0);
  EXPECT(std::memcmp(f.tensor_data(*tb), b, 5) == 0);
  EXPECT(tb->shape.size() == 2 && tb->shape[1] == 5);
  EXPECT(f.metadata().find("k")->s == "v\"q");
}

// The 12 bytes CuTe's host code passes for fast_divmod_divisor<32> (values measured from
// CuTeDSL 4.8.1, the same ones tests/test_cutedsl_gemm.py checks on the Python side), and
// the division the kernel does with them is exact.
TEST(fastdivmod_fields_match_cute) {
  struct Want { uint32_t d, mul, s1, s2; };
  for (Want w : {Want{1, 1, 0, 0}, Want{2, 1, 1, 0}, Want{8, 1, 1, 2},
                 Want{12, 0x55555556u, 1, 3}}) {
    uint32_t f[3];
    aotpack::fastdivmod_fields(w.d, f);
    EXPECT(f[0] == w.d && f[1] == w.mul && f[2] == (w.s1 | (w.s2 << 8)));
  }
  for (uint32_t d : {1u, 2u, 3u, 7u, 12u, 33u, 132u, 1000u, 65537u, 0x7FFFFFFFu}) {
    uint32_t f[3];
    aotpack::fastdivmod_fields(d, f);
    for (uint64_t n : {uint64_t(0), uint64_t(1), uint64_t(d) - 1, uint64_t(d), uint64_t(d) + 1,
                       uint64_t(5) * d + 3, uint64_t(1 << 20) + 7, uint64_t(0x7FFFFFFF)}) {
      if (n > 0x7FFFFFFF) continue;  // the scheduler divides non-negative i32 values
      uint32_t hi = uint32_t((n * f[1]) >> 32);
      uint32_t q = (hi + ((uint32_t(n) - hi) >> (f[2] & 0xFF))) >> (f[2] >> 8);
      EXPECT(q == n / d);
    }
  }
}
