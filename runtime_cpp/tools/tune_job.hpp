// tune_job.hpp — the tuning job and results of `aotpack-run --tune` (docs/tuning.md):
// parsing job.json into typed structs, and the results JSON (also the one-line records a
// measuring child sends to its parent).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "json.hpp"

namespace aotpack_run {

struct TuneSettings {
  int64_t warmup = 5;                    // untimed runs per candidate
  int64_t reps = 30;                     // timed runs per candidate
  uint64_t l2_flush_bytes = 268435456;   // written before every timed run (rounded down to 4)
  double candidate_timeout_s = 20;       // wall time one candidate may take
};

struct TuneCandidate {
  std::string name;
  std::string bundle;          // relative to the job folder, as written in job.json
  aotpack::json::Value config;  // opaque, echoed into the results
};

struct TuneProblem {
  std::string key, kind, desc;  // kind, desc: informational, echoed into the results
  aotpack::json::Value info;     // optional, opaque (e.g. the builder's shape_key), echoed
  size_t reference = 0;  // index into candidates
  double rtol = 0;
  uint64_t seed = 0;
  std::vector<TuneCandidate> candidates;
};

struct TuneJob {
  std::string dir;  // the job folder
  std::string job_id;
  TuneSettings settings;
  std::vector<TuneProblem> problems;
  // target (informational): cc and SM count the job was made for; -1 when absent.
  int target_cc_major = -1, target_cc_minor = -1, target_sm_count = -1;
};

// Reads and validates <dir>/job.json. Throws aotpack::Error (IO when unreadable,
// CORRUPT_BUNDLE when malformed, UNSUPPORTED_VERSION for another format version) with a
// message that names the file and the offending field.
TuneJob load_tune_job(const std::string& dir);

// ---- results -------------------------------------------------------------------------------

enum class Status { ok, wrong, error, timeout, skipped };
const char* status_name(Status s);

// What was measured for one candidate. NaN stands for JSON null (not measured/compared).
struct CandidateResult {
  Status status = Status::skipped;
  double median_us = NAN, p10_us = NAN, p90_us = NAN, rel_err = NAN;
  std::string message;
};

// The measured fields as one line of JSON (no newline inside: strings are escaped), and
// back. from_json throws aotpack::Error on a malformed record.
std::string result_to_json(const CandidateResult& r);
CandidateResult result_from_json(const aotpack::json::Value& v);

struct DeviceInfo {
  std::string name;
  int cc_major = 0, cc_minor = 0, sm_count = 0, driver = 0;
};
std::string device_to_json(const DeviceInfo& d);
DeviceInfo device_from_json(const aotpack::json::Value& v);

// Writes results.json atomically (a temp file in the same folder, then rename), so a reader
// never sees half a file. results[p][c] belongs to job.problems[p].candidates[c].
// Throws aotpack::Error(IO).
void write_results(const std::string& path, const TuneJob& job, const TuneSettings& settings,
                   const DeviceInfo& device,
                   const std::vector<std::vector<CandidateResult>>& results);

}  // namespace aotpack_run
