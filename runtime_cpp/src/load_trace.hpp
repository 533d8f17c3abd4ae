// load_trace.hpp — where a model load's (and free's) time goes, one line on stderr when
// AOTPACK_LOAD_TRACE=1: cold starts are measured on a GPU host without a profiler
// (benchmarks/coldstart.sh), and a phase that grows shows in the line, not only in the total.
// (aotpack-run frees nothing after a run that succeeded unless --teardown: no free line then.)
#pragma once

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace aotpack {

class LoadTrace {
 public:
  using Clock = std::chrono::steady_clock;
  explicit LoadTrace(const char* what) : on_(enabled()), t0_(Clock::now()), line_(what) {}
  ~LoadTrace() {
    if (on_) std::fprintf(stderr, "aotpack-trace %s\n", line_.c_str());
  }
  LoadTrace(const LoadTrace&) = delete;
  LoadTrace& operator=(const LoadTrace&) = delete;

  bool on() const { return on_; }
  // "| <what> <ms since the trace began>"
  void mark(const char* what, Clock::time_point t = Clock::now()) {
    if (!on_) return;
    char ms[32];
    std::snprintf(ms, sizeof ms, " %.1f",
                  std::chrono::duration<double, std::milli>(t - t0_).count());
    line_ += std::string(" | ") + what + ms;
  }
  // "| <text>": sizes, counts
  void note(const std::string& text) {
    if (on_) line_ += " | " + text;
  }

 private:
  static bool enabled() {
    const char* v = std::getenv("AOTPACK_LOAD_TRACE");
    return v && *v && *v != '0';
  }
  bool on_;
  Clock::time_point t0_;
  std::string line_;
};

}  // namespace aotpack
