// run_report.hpp — aotpack-run --json: one JSON document on stdout with what the text lines
// say (load time, each shape's outputs and timing), for scripts and dashboards.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "aotpack/aotpack.h"

namespace aotpack_run {

struct OutputSummary {
  std::string name, dtype;
  std::vector<long long> shape;
  double mean_abs = 0;
  size_t nonfinite = 0;
};

struct BenchSummary {
  double median_ms = 0, p10_ms = 0, p90_ms = 0, min_ms = 0;
  int runs = 0, warmup = 0;
  bool graph = true, pdl = true;
};

struct ShapeReport {
  std::string shape;  // "x=4x128,..." for bundles whose dims vary; "" otherwise
  std::vector<OutputSummary> outputs;
  bool benched = false;
  BenchSummary bench;
};

struct RunReport {
  std::string bundle, verify, runtime_version;
  int device = 0;
  double load_ms = 0;  // aotpack_model_load + aotpack_session_create
  std::vector<ShapeReport> shapes;
};

// Each output's mean |value| and count of non-finite values (host copies of the outputs).
std::vector<OutputSummary> summarize_outputs(const std::vector<aotpack_tensor_info>& outs,
                                             const std::vector<std::vector<uint8_t>>& host);

// The text lines: "output NAME DTYPE [dims] mean_abs=.. nonfinite=..".
void print_outputs(const std::vector<OutputSummary>& summary);

// The report as a JSON object (names escaped; non-finite numbers as null).
std::string to_json(const RunReport& r);

// {"error": {"code": "...", "message": "..."}}: what --json prints when the run fails.
std::string error_json(const std::string& code, const std::string& message);

}  // namespace aotpack_run
