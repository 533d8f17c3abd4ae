// test_tune.cpp — host-side parts of `aotpack-run --tune`: job.json parsing and the results
// JSON (escaping, nulls, atomic write). The measuring itself is tested end to end on the fake
// driver by the cli.tune_* tests (check_tune.cmake).
#include <dirent.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "bundle_builder.hpp"
#include "error.hpp"
#include "safetensors.hpp"
#include "test_main.hpp"
#include "host_tensor.hpp"
#include "tune_job.hpp"

using namespace aotpack_test;
using aotpack_run::CandidateResult;
using aotpack_run::Status;

namespace {

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Loads a job and returns the error's code and message (OK, "" when it loads).
aotpack_code load_error(const std::string& dir, std::string* msg) {
  try {
    aotpack_run::load_tune_job(dir);
  } catch (const aotpack::Error& e) {
    *msg = e.what();
    std::printf("  -> %s: %s\n", aotpack_status_code_name(e.code()), e.what());
    return e.code();
  }
  *msg = "";
  return AOTPACK_OK;
}

std::string read_all(const std::string& path) {
  std::string text;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  EXPECT(f != nullptr);
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) text.append(buf, n);
  std::fclose(f);
  return text;
}

}  // namespace

TEST(tune_job_valid) {
  std::string dir = make_temp_dir("tunejob");
  write_tune_jobs(dir);
  aotpack_run::TuneJob job = aotpack_run::load_tune_job(dir + "/job.aotune");
  EXPECT(job.job_id == "job-1234" && job.problems.size() == 4);
  EXPECT(job.settings.reps == 5 && job.settings.warmup == 2 && job.settings.l2_flush_bytes == 4096);
  EXPECT(job.target_cc_major == 9 && job.target_sm_count == 132);
  const auto& p0 = job.problems[0];
  EXPECT(p0.key == "k-all-ok" && p0.reference == 1 && p0.seed == 1234 && p0.rtol == 0.02);
  EXPECT(p0.candidates.size() == 3 && p0.candidates[1].name == "triton \"128x64\" \\ w4 \xe2\x9c\x93");
  EXPECT(p0.candidates[0].bundle == "c/p000-c000.aotpack");
  EXPECT(aotpack::json::dump(p0.candidates[0].config) ==
         "{\"backend\":\"triton\",\"BLOCK\":64,\"scale\":0.125,\"tags\":[\"a\",null,true]}");
  EXPECT(job.problems[3].candidates.size() == 8);
}

TEST(tune_job_errors) {
  std::string dir = make_temp_dir("tunebad");
  write_tune_jobs(dir);
  std::string msg;
  EXPECT(load_error(dir + "/nonexistent.aotune", &msg) == AOTPACK_IO);
  EXPECT(contains(msg, "job.json") && contains(msg, "aotpack tune"));
  EXPECT(load_error(dir + "/bad_json.aotune", &msg) == AOTPACK_CORRUPT_BUNDLE);
  EXPECT(contains(msg, "invalid JSON"));
  EXPECT(load_error(dir + "/dup_json_key.aotune", &msg) == AOTPACK_CORRUPT_BUNDLE);
  EXPECT(contains(msg, "duplicate key"));
  EXPECT(load_error(dir + "/bad_format.aotune", &msg) == AOTPACK_CORRUPT_BUNDLE);
  EXPECT(contains(msg, "not an aotpack tuning job"));
  EXPECT(load_error(dir + "/bad_version.aotune", &msg) == AOTPACK_UNSUPPORTED_VERSION);
  EXPECT(contains(msg, "version 2"));
  EXPECT(load_error(dir + "/dup_problem_key.aotune", &msg) == AOTPACK_CORRUPT_BUNDLE);
  EXPECT(contains(msg, "problems[1].key") && contains(msg, "duplicate problem key 'k'"));
  EXPECT(load_error(dir + "/no_reference_index.aotune", &msg) == AOTPACK_CORRUPT_BUNDLE);
  EXPECT(contains(msg, "problems[0].reference") && contains(msg, "out of range"));
}

TEST(tune_result_record_roundtrip) {
  CandidateResult r;
  r.status = Status::wrong;
  r.median_us = 12.5;
  r.p10_us = 12;
  r.p90_us = 13.25;
  r.rel_err = 0.5;
  r.message = "line one\nline \"two\" \\ \x01";
  std::string line = aotpack_run::result_to_json(r);
  EXPECT(line.find('\n') == std::string::npos);  // one line on the pipe
  CandidateResult back =
      aotpack_run::result_from_json(aotpack::json::parse(line.data(), line.size(), "test"));
  EXPECT(back.status == Status::wrong && back.median_us == 12.5 && back.p90_us == 13.25);
  EXPECT(back.rel_err == 0.5 && back.message == r.message);
  CandidateResult skipped;  // NaN fields travel as null
  line = aotpack_run::result_to_json(skipped);
  EXPECT(contains(line, "\"median_us\": null") && contains(line, "\"status\": \"skipped\""));
  back = aotpack_run::result_from_json(aotpack::json::parse(line.data(), line.size(), "test"));
  EXPECT(std::isnan(back.median_us) && std::isnan(back.rel_err));
}

TEST(tune_results_file) {
  std::string dir = make_temp_dir("tuneres");
  write_tune_jobs(dir);
  aotpack_run::TuneJob job = aotpack_run::load_tune_job(dir + "/job.aotune");
  std::vector<std::vector<CandidateResult>> results;
  for (const auto& p : job.problems) results.emplace_back(p.candidates.size());
  results[0][0].status = Status::ok;
  results[0][0].median_us = 250;
  results[0][0].rel_err = 0;
  results[0][1].status = Status::error;
  results[0][1].message = "bad byte \xff here";  // not UTF-8: must not break the file
  aotpack_run::DeviceInfo dev{"Fake \"GPU\"", 9, 0, 132, 13000};
  std::string path = dir + "/results.json";
  aotpack_run::write_results(path, job, job.settings, dev, results);
  std::string text = read_all(path);
  aotpack::json::Value v = aotpack::json::parse(text.data(), text.size(), path);
  EXPECT(v.find("format")->s == "aotpack-tuning-results" && v.find("version")->i == 1);
  EXPECT(v.find("job_id")->s == "job-1234" && v.find("device")->find("name")->s == dev.name);
  EXPECT(v.find("device")->find("sm_count")->i == 132);
  EXPECT(v.find("settings")->find("reps")->i == 5);
  const aotpack::json::Value& prob0 = v.find("problems")->items[0];
  EXPECT(prob0.find("key")->s == "k-all-ok" && prob0.find("kind")->s == "add");
  EXPECT(prob0.find("desc")->s == job.problems[0].desc);
  EXPECT(prob0.find("info")->find("shape_key")->s == "s0");
  const auto& cands = prob0.find("candidates")->items;
  EXPECT(cands.size() == 3 && cands[1].find("name")->s == job.problems[0].candidates[1].name);
  EXPECT(cands[0].find("status")->s == "ok" && cands[0].find("median_us")->d == 250.0);
  EXPECT(cands[1].find("message")->s == "bad byte ? here" && cands[1].find("median_us")->is_null());
  EXPECT(cands[2].find("status")->s == "skipped");
  EXPECT(aotpack::json::dump(*cands[0].find("config")) ==
         aotpack::json::dump(job.problems[0].candidates[0].config));
  // Atomic: the temp file was renamed away, nothing else is left in the folder.
  DIR* d = opendir(dir.c_str());
  EXPECT(d != nullptr);
  while (dirent* e = readdir(d)) EXPECT(!contains(e->d_name, ".tmp."));
  closedir(d);
}

// The tuner compares candidates' outputs through element(): FP8 outputs (an RMSNorm writing
// its GEMMs' e4m3 input) must read as their values, not their bytes.
TEST(tune_reads_e4m3_outputs_as_values) {
  using aotpack_run::element;
  const uint8_t bytes[] = {0x00, 0x80, 0x38, 0xB8, 0x7E, 0xFE, 0x01, 0x08, 0x7F, 0x3C};
  const double want[] = {0.0, -0.0, 1.0, -1.0, 448.0, -448.0, 0.001953125, 0.015625, NAN, 1.5};
  for (size_t i = 0; i < sizeof(bytes); ++i) {
    double got = element(AOTPACK_DTYPE_F8E4M3, bytes, i);
    if (std::isnan(want[i])) EXPECT(std::isnan(got));
    else EXPECT(got == want[i]);
  }
}
