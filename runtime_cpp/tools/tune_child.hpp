// tune_child.hpp — the measuring side of `aotpack-run --tune`: code that runs in a forked
// child process, the only place where CUDA is initialized (a sticky CUDA error or a hung
// kernel then costs one child, never the whole job).
//
// Protocol: the child writes text lines to `fd`:
//   ready                      the CUDA context is up (startup has its own, longer timeout)
//   start <c>                  before touching candidate c (the parent arms its timeout)
//   result <c> <json>          one per candidate, json = result_to_json(...)
//   stop budget                the --budget ran out before the next candidate
//   device <json>              (probe only) device_to_json(...)
//   fail <json string>         why the device cannot be used (then the child exits)
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "tune_job.hpp"

namespace aotpack_run {

// Seconds on CLOCK_MONOTONIC (shared by parent and children, so deadlines can be passed).
double monotonic_s();

struct ChildPlan {
  const TuneJob* job = nullptr;
  size_t problem = 0;
  std::vector<size_t> order;  // candidate indices, the reference first
  size_t pos = 0;             // start at order[pos]
  TuneSettings settings;
  int device = 0;
  double budget_deadline = 0;  // monotonic_s() after which no candidate is started
  // Reference outputs + signature, written by the child that ran the reference and read by
  // the children that continue after a restart (they never re-run the reference).
  std::string reference_path;
  int fd = -1;  // write end of the report pipe
};

// Measures order[pos..] of one problem, reporting on plan.fd; never returns. It stops (exit
// 0) early after a failed reference (nothing to compare with), after a CUDA error (the
// context may be poisoned: the parent restarts a child from the next candidate) and when
// the budget runs out.
[[noreturn]] void child_measure(const ChildPlan& plan);

// Reports the device's name, compute capability, SM count and driver version; never returns.
[[noreturn]] void child_probe(int device, int fd);

}  // namespace aotpack_run
