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
  explicit LoadTrace(const char* what) : on_(enabled()), t0_(Clock::now()), line_(what) {
    if (on_) line_ += " @" + unix_ms();  // where the phases sit in the process's life
  }
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
  // The wall clock in ms since 1970 (3 decimals): a trace line's origin, comparable with the
  // process's start and exit as a script timed them (scripts/coldstart).
  static std::string unix_ms() {
    double ms = std::chrono::duration<double, std::milli>(
                    std::chrono::system_clock::now().time_since_epoch()).count();
    char text[32];
    std::snprintf(text, sizeof text, "%.3f", ms);
    return text;
  }
  static bool enabled() {
    const char* v = std::getenv("AOTPACK_LOAD_TRACE");
    return v && *v && *v != '0';
  }
  bool on_;
  Clock::time_point t0_;
  friend void trace_point(const char* what);
  std::string line_;
};

// "aotpack-trace at <what> <unix ms>" on stderr now, when tracing: a launcher's points (main
// entered, model loaded, first output, exit) against the process's start and end.
inline void trace_point(const char* what) {
  if (LoadTrace::enabled()) std::fprintf(stderr, "aotpack-trace at %s %s\n", what,
                                         LoadTrace::unix_ms().c_str());
}

}  // namespace aotpack
