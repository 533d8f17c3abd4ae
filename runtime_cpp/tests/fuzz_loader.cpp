// fuzz_loader.cpp — a deterministic, time-bounded mutation fuzzer for the bundle loader (no
// clang/libFuzzer needed; with clang, LLVMFuzzerTestOneInput below is a libFuzzer target).
//
//   aotpack_fuzz_loader SEED_DIR [--seconds S] [--seed N] [--slow S]
//                                        fuzz, print a summary; exit 1 if an input took > S s
//   aotpack_fuzz_loader --write-seeds DIR                   (re)write the committed seeds
//
// Each input is a mutated seed bundle: bit flips, interesting bytes, truncations and inserted
// bytes anywhere in the file; and "structure-aware" mutations of the manifest text whose
// checksum is then recomputed, so the schema and bounds checks behind the checksum are
// exercised too. Every input goes through aotpack_model_check_file, and those it accepts are
// loaded on the driver AOTPACK_LIBCUDA names (the fake one in ctest) and get a session. Any
// crash, sanitizer report or hang fails the ctest; a status of any code is fine.
#include <dirent.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "aotpack/aotpack.h"
#include "bundle_builder.hpp"
#include "json.hpp"
#include "sha256.hpp"

using namespace aotpack_test;
using Bytes = std::string;

namespace {

std::string g_path;  // the file every input is written to

Bytes read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

void write_file(const std::string& path, const Bytes& b) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(b.data(), std::streamsize(b.size()));
}

uint64_t le64(const Bytes& b) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(b[size_t(i)]);
  return n;
}

// The input through the loader: check, then (if valid) load and open a session.
aotpack_code run_one(const Bytes& input, bool load) {
  write_file(g_path, input);
  aotpack_status* s = aotpack_model_check_file(g_path.c_str(), nullptr);
  aotpack_code c = aotpack_status_code(s);
  aotpack_status_free(s);
  if (c != AOTPACK_OK || !load) return c;
  aotpack_model* m = nullptr;
  s = aotpack_model_load(g_path.c_str(), nullptr, &m);
  c = aotpack_status_code(s);
  aotpack_status_free(s);
  if (c == AOTPACK_OK) {
    aotpack_session* ses = nullptr;
    aotpack_status_free(aotpack_session_create(m, nullptr, &ses));
    aotpack_session_free(ses);
  }
  aotpack_model_free(m);
  return c;
}

// The manifest text of a bundle and the rest of its header, or false if it has none.
bool split(const Bytes& file, aotpack::json::Value* header, std::string* manifest) {
  if (file.size() < 8 || le64(file) > file.size() - 8) return false;
  try {
    *header = aotpack::json::parse(file.data() + 8, le64(file), "seed");
  } catch (...) {
    return false;
  }
  aotpack::json::Value* meta = nullptr;
  for (auto& kv : header->fields)
    if (kv.first == "__metadata__") meta = &kv.second;
  const aotpack::json::Value* m = meta ? meta->find("aotpack.manifest") : nullptr;
  if (!m) return false;
  *manifest = m->s;
  return true;
}

// The bundle with another manifest text and its recomputed checksum (data section kept).
Bytes with_manifest(const Bytes& file, aotpack::json::Value header, const std::string& text) {
  for (auto& kv : header.fields)
    if (kv.first == "__metadata__")
      for (auto& m : kv.second.fields) {
        if (m.first == "aotpack.manifest") m.second.s = text;
        if (m.first == "aotpack.manifest_sha256")
          m.second.s = aotpack::sha256_hex(text.data(), text.size());
      }
  std::string h = aotpack::json::dump(header);
  h.append((256 - (8 + h.size()) % 256) % 256, ' ');
  Bytes out(8, '\0');
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char(uint64_t(h.size()) >> (8 * i));
  return out + h + file.substr(8 + le64(file));
}

const char* const kInteresting[] = {"0", "-1", "1", "255", "256", "65536", "4294967295",
                                    "4294967296", "2147483648", "9223372036854775807",
                                    "-9223372036854775808", "1e308", "\"x\"", "null", "[]",
                                    "{}", "true", "\"B*B\"", "\"B/0\"", "0.5"};

// One random edit of `s` (any text): a bit flip, a digit, a deletion, a duplicated span, or
// a number replaced by an interesting value.
void mutate_text(std::string& s, std::mt19937_64& rng) {
  if (s.empty()) return;
  size_t i = rng() % s.size();
  switch (rng() % 5) {
    case 0: s[i] = char(s[i] ^ (1 << (rng() % 8))); break;
    case 1: s[i] = char('0' + rng() % 10); break;
    case 2: s.erase(i, 1 + rng() % 8); break;
    case 3: s.insert(i, s.substr(rng() % s.size(), 1 + rng() % 32)); break;
    default: {
      size_t j = i;
      while (j < s.size() && (s[j] < '0' || s[j] > '9')) ++j;
      size_t k = j;
      while (k < s.size() && ((s[k] >= '0' && s[k] <= '9') || s[k] == '-')) ++k;
      const size_t n = sizeof(kInteresting) / sizeof(kInteresting[0]);
      if (j < s.size()) s.replace(j, k - j, kInteresting[rng() % n]);
    }
  }
}

Bytes mutate(const Bytes& seed, std::mt19937_64& rng) {
  Bytes b = seed;
  switch (rng() % 6) {
    case 0:
    case 1:  // structure-aware: past the checksum into the schema and bounds checks
    case 2: {
      aotpack::json::Value header;
      std::string text;
      if (!split(seed, &header, &text)) break;
      for (int n = 1 + int(rng() % 3); n > 0; --n) mutate_text(text, rng);
      return with_manifest(seed, header, text);
    }
    case 3: {  // bit flips anywhere (mostly refused by a checksum)
      for (int n = 1 + int(rng() % 4); n > 0; --n) {
        size_t i = rng() % b.size();
        b[i] = char(b[i] ^ (1 << (rng() % 8)));
      }
      return b;
    }
    case 4: return b.substr(0, rng() % b.size());  // truncated
    default: {  // the header text edited as text (offsets, dtypes, names)
      std::string h = b.substr(8, le64(b));
      mutate_text(h, rng);
      Bytes out(8, '\0');
      for (int i = 0; i < 8; ++i) out[size_t(i)] = char(uint64_t(h.size()) >> (8 * i));
      return out + h + b.substr(8 + le64(b));
    }
  }
  return b;
}

void write_seeds(const std::string& dir) {
  TestBundle v1;
  v1.cubin = cubin_with_params("add_kernel", {8, 8, 8, 128, 8, 4, 4, 8, 8});
  at(at(at(v1.manifest, "kernels"), 0), "cubin_sha256") =
      jstr(aotpack::sha256_hex(v1.cubin.data(), v1.cubin.size()));
  std::string tmp = make_temp_dir("seeds");
  write_file(dir + "/static.aotpack", read_file(v1.write(tmp, "a.aotpack")));
  write_file(dir + "/dynamic.aotpack", read_file(TestBundle::dynamic().write(tmp, "b.aotpack")));
  // State buffers and the generation section (docs/generation.md).
  TestBundle gen = TestBundle::generation();
  gen.cubin = cubin_with_params("gen_step", std::vector<uint32_t>(10, 8));
  at(at(at(gen.manifest, "kernels"), 0), "cubin_sha256") =
      jstr(aotpack::sha256_hex(gen.cubin.data(), gen.cubin.size()));
  write_file(dir + "/generation.aotpack", read_file(gen.write(tmp, "c.aotpack")));
  std::printf("wrote %s/static.aotpack, %s/dynamic.aotpack, %s/generation.aotpack\n",
              dir.c_str(), dir.c_str(), dir.c_str());
}

int fuzz(const std::string& seed_dir, double seconds, uint64_t seed, double slow_limit) {
  std::vector<Bytes> seeds;
  if (DIR* d = opendir(seed_dir.c_str())) {
    while (dirent* e = readdir(d))
      if (std::strstr(e->d_name, ".aotpack"))
        seeds.push_back(read_file(seed_dir + "/" + e->d_name));
    closedir(d);
  }
  if (seeds.empty()) {
    std::fprintf(stderr, "no *.aotpack seeds in %s\n", seed_dir.c_str());
    return 2;
  }
  // In memory where there is a tmpfs: a disk write per input would be most of the time.
  if (access("/dev/shm", W_OK) == 0) g_path = "/dev/shm/aotpack_fuzz_" + std::to_string(getpid());
  else g_path = make_temp_dir("fuzz") + "/input.aotpack";
  for (const Bytes& s : seeds)
    if (run_one(s, true) != AOTPACK_OK) {
      std::fprintf(stderr, "a seed is not a valid bundle (format changed? rewrite them with "
                           "--write-seeds)\n");
      return 1;
    }
  std::mt19937_64 rng(seed);
  std::map<int, long> codes;
  long execs = 0;
  double slowest = 0;
  const std::string slow_path = g_path + ".slowest";
  auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < seconds) {
    for (int k = 0; k < 64; ++k, ++execs) {
      Bytes input = mutate(seeds[rng() % seeds.size()], rng);
      auto t1 = std::chrono::steady_clock::now();
      ++codes[run_one(input, true)];
      double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
      if (took > slowest) {  // a small file that takes long is a finding too: keep it
        slowest = took;
        write_file(slow_path, input);
      }
    }
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("aotpack_fuzz_loader: %ld execs in %.1f s (%.0f/s), %zu seeds, seed %llu, 0 crashes; "
              "slowest input %.1f ms (%s)\n", execs, s, double(execs) / s, seeds.size(),
              (unsigned long long)seed, slowest * 1e3, slow_path.c_str());
  for (const auto& kv : codes)
    std::printf("  %-20s %ld\n", aotpack_status_code_name(kv.first), kv.second);
  if (g_path.compare(0, 9, "/dev/shm/") == 0) unlink(g_path.c_str());
  if (slowest > slow_limit) {
    std::printf("an input took %.1f s (kept in %s): unbounded work from a small file\n",
                slowest, slow_path.c_str());
    return 1;
  }
  if (slow_path.compare(0, 9, "/dev/shm/") == 0) unlink(slow_path.c_str());
  return 0;
}

}  // namespace

#ifdef AOTPACK_LIBFUZZER
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (g_path.empty()) g_path = make_temp_dir("libfuzzer") + "/input.aotpack";
  run_one(Bytes(reinterpret_cast<const char*>(data), size), false);
  return 0;
}
#else
int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--write-seeds") == 0) {
    write_seeds(argv[2]);
    return 0;
  }
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s SEED_DIR [--seconds S] [--seed N] [--slow S] | "
                         "--write-seeds DIR\n",
                 argv[0]);
    return 2;
  }
  double seconds = 10, slow = 1.0;
  uint64_t seed = 19;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--seconds") == 0) seconds = std::atof(argv[i + 1]);
    if (std::strcmp(argv[i], "--seed") == 0) seed = std::strtoull(argv[i + 1], nullptr, 10);
    if (std::strcmp(argv[i], "--slow") == 0) slow = std::atof(argv[i + 1]);
  }
  return fuzz(argv[1], seconds, seed, slow);
}
#endif
