// tune_fixture.cpp — job folders for the `aotpack-run --tune` tests (run on the fake driver,
// whose kernel variants give wrong answers, hang, crash or poison the context; see
// fake_libcuda.cpp). Written by `aotpack_tests --write-tune-jobs DIR`:
//
//   DIR/job.aotune        four problems (expected statuses in tests/CMakeLists.txt):
//     p0 all candidates fine, reference = 1            ok ok ok
//     p1 corrupt bundle, other signature, wrong answer ok error error wrong ok
//     p2 the reference bundle is missing               error skipped skipped
//     p3 crash, CUDA fault, hang between good ones     ok error error ok error ok timeout ok
//        (after the crash a new child reads the saved reference outputs)
//   DIR/<name>.aotune/job.json   broken jobs: bad_json, dup_json_key, bad_format,
//                                bad_version, dup_problem_key, no_reference_index
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bundle_builder.hpp"
#include "error.hpp"

namespace aotpack_test {

namespace {

using aotpack::cat;
using aotpack::json::quote;

void write_text(const std::string& path, const std::string& text) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || std::fwrite(text.data(), 1, text.size(), f) != text.size()) {
    std::perror(path.c_str());
    std::exit(2);
  }
  std::fclose(f);
}

// What a candidate's bundle is: a variant of the test bundle, garbage, or nothing at all.
enum class Kind { ok, wrong, hang, crash, fault, other_signature, corrupt, missing };

struct Cand {
  std::string name;
  Kind kind;
};

// Writes the candidate's bundle into <job>/c/ and returns its job-relative path.
std::string write_candidate(const std::string& job, size_t p, size_t c, Kind kind) {
  char file[64];
  std::snprintf(file, sizeof(file), "p%03zu-c%03zu.aotpack", p, c);
  if (kind == Kind::missing) return cat("c/missing-", file);
  if (kind == Kind::corrupt) {
    write_text(cat(job, "/c/", file), "this is not a safetensors file");
    return cat("c/", file);
  }
  TestBundle b;
  Value& entry = at(at(at(b.manifest, "kernels"), 0), "entry");
  if (kind == Kind::wrong) entry = jstr("add_kernel_wrong");
  if (kind == Kind::hang) entry = jstr("add_kernel_hang");
  if (kind == Kind::crash) entry = jstr("add_kernel_crash");
  if (kind == Kind::fault) entry = jstr("add_kernel_fault");
  if (kind == Kind::other_signature) at(at(at(b.manifest, "outputs"), 0), "name") = jstr("z");
  b.write(job + "/c", file);
  return cat("c/", file);
}

std::string problem_json(const std::string& job, size_t p, const std::string& key,
                         size_t reference, const std::vector<Cand>& cands) {
  std::string s = cat("{\"key\": ", quote(key), ", \"kind\": \"add\", \"desc\": ",
                      quote(cat("add problem ", p, " (", key, ")")), ", \"reference\": ",
                      reference, ", \"rtol\": 0.02, \"seed\": ", 1234 + p,
                      ", \"info\": {\"shape_key\": \"s", p, "\"}, \"candidates\": [");
  for (size_t c = 0; c < cands.size(); ++c)
    s += cat(c ? ", " : "", "{\"name\": ", quote(cands[c].name), ", \"bundle\": ",
             quote(write_candidate(job, p, c, cands[c].kind)),
             ", \"config\": {\"backend\": \"triton\", \"BLOCK\": ", 64 << c,
             ", \"scale\": 0.125, \"tags\": [\"a\", null, true]}}");
  return s + "]}";
}

void write_main_job(const std::string& job) {
  mkdir(job.c_str(), 0755);
  mkdir((job + "/c").c_str(), 0755);
  using K = Kind;
  std::string problems = cat(
      problem_json(job, 0, "k-all-ok", 1,
                   {{"first", K::ok}, {"triton \"128x64\" \\ w4 \xe2\x9c\x93", K::ok},
                    {"third\tone", K::ok}}),
      ",\n  ",
      problem_json(job, 1, "k-failures", 0,
                   {{"reference", K::ok}, {"corrupt bundle", K::corrupt},
                    {"renamed output", K::other_signature}, {"wrong answer", K::wrong},
                    {"fine", K::ok}}),
      ",\n  ",
      problem_json(job, 2, "k-no-reference", 0,
                   {{"missing reference", K::missing}, {"a", K::ok}, {"b", K::ok}}),
      ",\n  ",
      problem_json(job, 3, "k-isolation", 0,
                   {{"reference", K::ok}, {"crash", K::crash},
                    {"renamed after crash", K::other_signature}, {"after crash", K::ok},
                    {"fault", K::fault}, {"after fault", K::ok}, {"hang", K::hang},
                    {"after hang", K::ok}}));
  write_text(job + "/job.json",
             cat("{\"format\": \"aotpack-tuning-job\", \"version\": 1, \"job_id\": \"job-1234\",\n",
                 " \"target\": {\"arch\": \"sm_90a\", \"cc\": [9, 0], \"sm_count\": 132},\n",
                 " \"settings\": {\"warmup\": 2, \"reps\": 5, \"l2_flush_bytes\": 4096, ",
                 "\"candidate_timeout_s\": 20},\n \"problems\": [\n  ", problems, "]}\n"));
}

// A job.json that `aotpack-run --tune` must refuse (exit 1) with a clear message.
void write_bad_job(const std::string& dir, const std::string& name, const std::string& text) {
  std::string job = dir + "/" + name + ".aotune";
  mkdir(job.c_str(), 0755);
  write_text(job + "/job.json", text);
}

}  // namespace

void write_tune_jobs(const std::string& dir) {
  mkdir(dir.c_str(), 0755);
  write_main_job(dir + "/job.aotune");
  const std::string head = "{\"format\": \"aotpack-tuning-job\", \"version\": 1, \"job_id\": \"x\"";
  const std::string cand = "{\"name\": \"a\", \"bundle\": \"c/a.aotpack\"}";
  auto problem = [&](const std::string& key, int ref) {
    return cat("{\"key\": \"", key, "\", \"reference\": ", ref,
               ", \"rtol\": 0.02, \"seed\": 1, \"candidates\": [", cand, "]}");
  };
  write_bad_job(dir, "bad_json", head + ", \"problems\": [");
  write_bad_job(dir, "dup_json_key", head + ", \"job_id\": \"y\", \"problems\": []}");
  write_bad_job(dir, "bad_format", "{\"format\": \"aotpack\", \"version\": 1}");
  write_bad_job(dir, "bad_version",
                "{\"format\": \"aotpack-tuning-job\", \"version\": 2, \"problems\": []}");
  write_bad_job(dir, "dup_problem_key",
                head + ", \"problems\": [" + problem("k", 0) + ", " + problem("k", 0) + "]}");
  write_bad_job(dir, "no_reference_index", head + ", \"problems\": [" + problem("k", 3) + "]}");
}

}  // namespace aotpack_test
