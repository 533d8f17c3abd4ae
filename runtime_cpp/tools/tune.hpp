// tune.hpp — `aotpack-run --tune JOB -o results.json`: measures a tuning job (docs/tuning.md)
// on this machine's GPU with the shipped runtime.
//
// The calling process never initializes CUDA. It forks one child per problem (tune_child.hpp)
// and watches it over a pipe: a candidate that runs past candidate_timeout_s gets its child
// SIGKILLed (`timeout`), a child that dies or hits a CUDA error is replaced by a new one that
// continues with the next candidate. The reference candidate runs first; its outputs are saved
// to a temporary file next to the results (removed at the end) so that a restarted child can
// compare against them without re-running the reference.
#pragma once

#include <cstdint>
#include <string>

namespace aotpack_run {

struct TuneOptions {
  std::string job_dir;
  std::string results_path;
  double budget_s = -1;             // < 0: no budget
  int64_t reps = -1;                // < 0: the job's settings
  int64_t warmup = -1;              // < 0: the job's settings
  double candidate_timeout_s = -1;  // <= 0: the job's settings
  int device = 0;
};

// Returns the process exit code: 0 when the results were written (whatever the candidates
// did), 1 on a bad job, an unusable device or an unwritable results file (message on stderr).
int run_tune(const TuneOptions& options);

}  // namespace aotpack_run
