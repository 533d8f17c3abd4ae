// tune.cpp — the supervising side of `aotpack-run --tune` (see tune.hpp).
#include "tune.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>

#include "c_api_util.hpp"
#include "error.hpp"
#include "json.hpp"
#include "tune_child.hpp"
#include "tune_job.hpp"

namespace aotpack_run {

using aotpack::cat;

namespace {

// Seconds a child may take to initialize the driver and create its context.
constexpr double kStartupTimeout = 60;

// Buffered lines from a child's pipe, with a deadline.
class LineReader {
 public:
  enum Got { kLine, kEof, kTimeout };
  explicit LineReader(int fd) : fd_(fd) {}
  Got next(double deadline, std::string* line) {
    for (;;) {
      size_t nl = buf_.find('\n');
      if (nl != std::string::npos) {
        line->assign(buf_, 0, nl);
        buf_.erase(0, nl + 1);
        return kLine;
      }
      if (eof_) return kEof;
      double left = deadline - monotonic_s();
      if (left <= 0) return kTimeout;
      pollfd p{fd_, POLLIN, 0};
      int r = poll(&p, 1, int(std::min(left * 1000.0 + 1.0, double(INT_MAX))));
      if (r < 0 && errno != EINTR) eof_ = true;
      if (r <= 0) continue;
      char tmp[4096];
      ssize_t n = read(fd_, tmp, sizeof(tmp));
      if (n > 0) buf_.append(tmp, size_t(n));
      else if (n == 0 || (errno != EINTR && errno != EAGAIN)) eof_ = true;
    }
  }

 private:
  int fd_;
  std::string buf_;
  bool eof_ = false;
};

// A forked child with the read end of its report pipe. `body` runs in the child and must
// not return (it calls _exit).
struct Child {
  pid_t pid = -1;
  int fd = -1;
};

Child spawn(const std::function<void(int)>& body) {
  int fds[2];
  if (pipe(fds) != 0) aotpack::fail(AOTPACK_IO, "pipe() failed: ", std::strerror(errno));
  std::fflush(stdout);  // or the child's copy of unflushed output could be written twice
  std::fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) aotpack::fail(AOTPACK_IO, "fork() failed: ", std::strerror(errno));
  if (pid == 0) {
    close(fds[0]);
#ifdef __linux__
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // an interrupted tuner must not leave GPU work behind
#endif
    body(fds[1]);
    _exit(5);
  }
  close(fds[1]);
  fcntl(fds[0], F_SETFD, FD_CLOEXEC);
  return Child{pid, fds[0]};
}

// Waits for the child (after killing it if asked); returns how it ended, for messages.
std::string reap(Child& c, bool kill_first) {
  if (kill_first) kill(c.pid, SIGKILL);
  int status = 0;
  while (waitpid(c.pid, &status, 0) < 0 && errno == EINTR) {
  }
  close(c.fd);
  if (WIFSIGNALED(status))
    return cat("was killed by signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)), ")");
  if (WIFEXITED(status) && WEXITSTATUS(status) != 0)
    return cat("exited with code ", WEXITSTATUS(status));
  return "";
}

// Splits "word rest" into the first word and the rest.
std::string first_word(const std::string& line, std::string* rest) {
  size_t sp = line.find(' ');
  *rest = sp == std::string::npos ? "" : line.substr(sp + 1);
  return line.substr(0, sp);
}

aotpack::json::Value parse_line_json(const std::string& text) {
  return aotpack::json::parse(text.data(), text.size(), "measuring process report");
}

// The text of a "fail <json string>" line (the raw text if it does not parse).
std::string unquote(const std::string& text) {
  try {
    aotpack::json::Value v = parse_line_json(text);
    if (v.type == aotpack::json::Type::String) return v.s;
  } catch (const std::exception&) {
  }
  return text;
}

// A child's result record; a garbled one (it should not happen) is the candidate's error
// rather than an exception that would leave the child unsupervised.
CandidateResult parse_result(const std::string& text) {
  try {
    return result_from_json(parse_line_json(text));
  } catch (const std::exception& e) {
    CandidateResult r;
    r.status = Status::error;
    r.message = cat("unreadable report from the measuring process: ", e.what());
    return r;
  }
}

struct Tuner {
  const TuneOptions& opt;
  TuneJob job;
  TuneSettings settings;
  DeviceInfo device;
  double budget_deadline = INFINITY;
  std::vector<std::vector<CandidateResult>> results;

  void progress(size_t p, size_t c) const {
    const TuneProblem& prob = job.problems[p];
    const CandidateResult& r = results[p][c];
    std::string line = cat("aotpack-run: [", p + 1, "/", job.problems.size(), "] ",
                           prob.desc.empty() ? prob.key : prob.desc, " | ",
                           prob.candidates[c].name, " | ", status_name(r.status));
    if (std::isfinite(r.median_us)) line += cat(" median_us=", r.median_us);
    if (std::isfinite(r.rel_err) && r.status != Status::ok) line += cat(" rel_err=", r.rel_err);
    if (!r.message.empty()) line += " | " + r.message;
    std::fprintf(stderr, "%s\n", line.c_str());
  }

  void record(size_t p, size_t c, CandidateResult r) {
    results[p][c] = std::move(r);
    progress(p, c);
  }

  void record_failure(size_t p, size_t c, Status s, const std::string& message) {
    CandidateResult r;
    r.status = s;
    r.message = message;
    record(p, c, r);
  }

  // Runs one child from order[pos]; returns the position to continue from.
  size_t run_child(ChildPlan plan) {
    const size_t p = plan.problem;
    const std::vector<size_t>& order = plan.order;
    std::vector<size_t> pos_of(order.size());
    for (size_t k = 0; k < order.size(); ++k) pos_of[order[k]] = k;
    Child child = spawn([&](int fd) {
      plan.fd = fd;
      child_measure(plan);
    });
    LineReader reader(child.fd);
    const double timeout = settings.candidate_timeout_s;
    size_t pos = plan.pos, current = SIZE_MAX;  // current: started, no result yet
    bool budget_stop = false;
    std::string failure;  // a "fail" line: why the child could not measure at all
    double deadline = monotonic_s() + std::max(kStartupTimeout, timeout);
    for (;;) {
      std::string line, rest;
      LineReader::Got got = reader.next(deadline, &line);
      if (got == LineReader::kTimeout) {
        reap(child, true);
        // Hung while exiting (after its last candidate or a budget stop): nothing to charge.
        if (current == SIZE_MAX && (pos >= order.size() || budget_stop)) return pos;
        size_t c = current != SIZE_MAX ? current : order[pos];
        record_failure(p, c, Status::timeout,
                       current != SIZE_MAX
                           ? cat("did not finish within candidate_timeout_s = ", timeout,
                                 " s; the measuring process was killed")
                           : "the measuring process hung before starting this candidate "
                             "(initializing the GPU?) and was killed");
        return pos_of[c] + 1;
      }
      if (got == LineReader::kEof) {
        std::string how = reap(child, false);
        if (current != SIZE_MAX) {
          record_failure(p, current, Status::error,
                         cat("the measuring process ", how.empty() ? "exited" : how,
                             " before reporting a result"));
          return pos_of[current] + 1;
        }
        if (pos == plan.pos && !budget_stop && pos < order.size()) {
          // Ended before starting anything: charge the next candidate, or we would loop.
          record_failure(p, order[pos], Status::error,
                         failure.empty() ? cat("the measuring process ", how.empty() ? "exited" : how,
                                               " before starting this candidate")
                                         : "could not measure: " + failure);
          return pos + 1;
        }
        return pos;
      }
      std::string word = first_word(line, &rest);
      if (word == "start") {
        current = std::strtoull(rest.c_str(), nullptr, 10);
        if (current >= order.size()) current = SIZE_MAX;
        deadline = monotonic_s() + timeout;
      } else if (word == "result") {
        std::string json;
        size_t c = std::strtoull(first_word(rest, &json).c_str(), nullptr, 10);
        if (c >= order.size()) continue;
        record(p, c, parse_result(json));
        current = SIZE_MAX;
        pos = pos_of[c] + 1;
        deadline = monotonic_s() + timeout;  // also bounds the gap before the next "start"
      } else if (word == "stop") {
        budget_stop = true;
      } else if (word == "fail") {
        failure = unquote(rest);
      }
    }
  }

  // The reference first, then the others in job order.
  static std::vector<size_t> run_order(const TuneProblem& prob) {
    std::vector<size_t> order{prob.reference};
    for (size_t c = 0; c < prob.candidates.size(); ++c)
      if (c != prob.reference) order.push_back(c);
    return order;
  }

  void run_problem(size_t p, const std::string& reference_path) {
    const TuneProblem& prob = job.problems[p];
    ChildPlan plan;
    plan.job = &job;
    plan.problem = p;
    plan.order = run_order(prob);
    plan.settings = settings;
    plan.device = opt.device;
    plan.budget_deadline = budget_deadline;
    plan.reference_path = reference_path;
    size_t pos = 0;
    std::string why;
    while (pos < plan.order.size()) {
      if (monotonic_s() >= budget_deadline) {
        why = cat("not measured: the --budget of ", opt.budget_s, " s ran out");
        break;
      }
      const CandidateResult& ref = results[p][prob.reference];
      if (pos > 0 && ref.status != Status::ok) {
        why = cat("not measured: the reference candidate '", prob.candidates[prob.reference].name,
                  "' failed (", status_name(ref.status), "), so there is nothing to check against");
        break;
      }
      plan.pos = pos;
      pos = run_child(plan);
    }
    for (size_t k = pos; k < plan.order.size(); ++k)
      record_failure(p, plan.order[k], Status::skipped, why);
  }

  // The device is described by a child too: this process must not initialize CUDA.
  bool probe_device() {
    int dev = opt.device;
    Child child = spawn([dev](int fd) { child_probe(dev, fd); });
    LineReader reader(child.fd);
    std::string line, rest;
    std::string error = "the probe process gave no answer (it crashed or hung initializing the driver)";
    double deadline = monotonic_s() + std::max(kStartupTimeout, settings.candidate_timeout_s);
    bool ok = false, answered = false;
    while (!answered && reader.next(deadline, &line) == LineReader::kLine) {
      std::string word = first_word(line, &rest);
      if (word == "device") device = device_from_json(parse_line_json(rest)), ok = true;
      if (word == "fail") error = unquote(rest);
      answered = word == "device" || word == "fail";
    }
    // Killed either way: once it has answered, its driver teardown is of no interest.
    reap(child, true);
    if (!ok)
      std::fprintf(stderr, "aotpack-run: error: cannot use CUDA device %d: %s\n", dev,
                   error.c_str());
    return ok;
  }

  void warn_target_mismatch() const {
    if (job.target_cc_major >= 0 &&
        (job.target_cc_major != device.cc_major || job.target_cc_minor != device.cc_minor))
      std::fprintf(stderr, "aotpack-run: warning: the job targets compute capability %d.%d but "
                   "%s is %d.%d: its candidates will fail to load\n", job.target_cc_major,
                   job.target_cc_minor, device.name.c_str(), device.cc_major, device.cc_minor);
    if (job.target_sm_count > 0 && job.target_sm_count != device.sm_count)
      std::fprintf(stderr, "aotpack-run: warning: the job was made for %d SMs but %s has %d: "
                   "the results will be keyed for another GPU\n", job.target_sm_count,
                   device.name.c_str(), device.sm_count);
  }
};

std::string reference_path_for(const std::string& results, size_t problem) {
  size_t slash = results.rfind('/');
  std::string dir = slash == std::string::npos ? "." : results.substr(0, slash);
  std::string base = slash == std::string::npos ? results : results.substr(slash + 1);
  return cat(dir.empty() ? "/" : dir, "/.", base, ".ref", long(getpid()), ".p", problem,
             ".safetensors");
}

// Removes the reference outputs however the problem ends.
struct TempFile {
  std::string path;
  ~TempFile() { std::remove(path.c_str()); }
};

TuneSettings effective_settings(const TuneOptions& opt, TuneSettings s) {
  if (opt.reps >= 0) s.reps = opt.reps;
  if (opt.warmup >= 0) s.warmup = opt.warmup;
  if (opt.candidate_timeout_s > 0) s.candidate_timeout_s = opt.candidate_timeout_s;
  return s;
}

void print_summary(const Tuner& t) {
  size_t counts[5] = {0, 0, 0, 0, 0};
  for (const auto& prob : t.results)
    for (const auto& r : prob) ++counts[int(r.status)];
  std::fprintf(stderr, "aotpack-run: wrote %s: %zu ok, %zu wrong, %zu error, %zu timeout, "
               "%zu skipped\n", t.opt.results_path.c_str(), counts[0], counts[1], counts[2],
               counts[3], counts[4]);
}

}  // namespace

int run_tune(const TuneOptions& opt) {
  Tuner t{opt, {}, {}, {}, INFINITY, {}};
  return exit_code_of([&]() -> int {
    t.job = load_tune_job(opt.job_dir);
    t.settings = effective_settings(opt, t.job.settings);
    if (!t.probe_device()) return 1;
    t.warn_target_mismatch();
    for (const TuneProblem& prob : t.job.problems) {
      CandidateResult pending;
      pending.message = "not measured: aotpack-run stopped before this candidate";
      t.results.emplace_back(prob.candidates.size(), pending);
    }
    // Written now (all pending) so that an unwritable path fails before hours of work, and
    // rewritten after every problem so an interrupted run still leaves what it measured.
    write_results(opt.results_path, t.job, t.settings, t.device, t.results);
    if (opt.budget_s >= 0) t.budget_deadline = monotonic_s() + opt.budget_s;
    for (size_t p = 0; p < t.job.problems.size(); ++p) {
      TempFile ref{reference_path_for(opt.results_path, p)};
      t.run_problem(p, ref.path);
      write_results(opt.results_path, t.job, t.settings, t.device, t.results);
    }
    print_summary(t);
    return 0;
  });
}

}  // namespace aotpack_run
