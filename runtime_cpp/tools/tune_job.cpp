// tune_job.cpp — job.json parsing and results.json writing (see tune_job.hpp, docs/tuning.md).
#include "tune_job.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>

#include "aotpack/aotpack.h"
#include "error.hpp"

namespace aotpack_run {

using aotpack::cat;
using aotpack::fail;
using aotpack::json::quote;
using aotpack::json::Type;
using aotpack::json::Value;

namespace {

// ---- reading job.json ----------------------------------------------------------------------

std::string read_text(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f)
    fail(AOTPACK_IO, "cannot open the tuning job file '", path, "': ", std::strerror(errno),
         " (expected a job folder made by `aotpack tune`, holding job.json)");
  std::string text;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) text.append(buf, n);
  bool bad = std::ferror(f) != 0;
  std::fclose(f);
  if (bad) fail(AOTPACK_IO, "cannot read '", path, "'");
  return text;
}

// Typed access to job.json fields; every failure names the file and the field's path.
struct Reader {
  std::string file;

  [[noreturn]] void bad(const std::string& where, const std::string& why) const {
    fail(AOTPACK_CORRUPT_BUNDLE, file, ": ", where, ": ", why);
  }
  const Value& need(const Value& obj, const char* key, const std::string& where) const {
    const Value* v = obj.find(key);
    if (!v) bad(where, cat("missing field '", key, "'"));
    return *v;
  }
  void expect(const Value& v, Type t, const std::string& where) const {
    if (v.type != t)
      bad(where, cat("expected ", Value::type_name(t), ", got ", Value::type_name(v.type)));
  }
  std::string str(const Value& obj, const char* key, const std::string& where,
                  bool required = true) const {
    const Value* v = obj.find(key);
    if (!v && !required) return "";
    const Value& s = need(obj, key, where);
    expect(s, Type::String, cat(where, ".", key));
    return s.s;
  }
  int64_t integer(const Value& obj, const char* key, const std::string& where, int64_t min) const {
    const Value& v = need(obj, key, where);
    expect(v, Type::Int, cat(where, ".", key));
    if (v.i < min) bad(cat(where, ".", key), cat("must be >= ", min, ", got ", v.i));
    return v.i;
  }
  double number(const Value& obj, const char* key, const std::string& where) const {
    const Value& v = need(obj, key, where);
    if (!v.is_number()) bad(cat(where, ".", key), cat("expected a number, got ", Value::type_name(v.type)));
    return v.type == Type::Int ? double(v.i) : v.d;
  }
};

void read_settings(const Reader& r, const Value& root, TuneSettings* s) {
  const Value* v = root.find("settings");
  if (!v) return;  // all defaults
  r.expect(*v, Type::Object, "settings");
  if (v->find("warmup")) s->warmup = r.integer(*v, "warmup", "settings", 0);
  if (v->find("reps")) s->reps = r.integer(*v, "reps", "settings", 1);
  if (s->reps > 100000) r.bad("settings.reps", cat("at most 100000 timed runs, got ", s->reps));
  if (v->find("l2_flush_bytes"))
    s->l2_flush_bytes = uint64_t(r.integer(*v, "l2_flush_bytes", "settings", 0));
  if (v->find("candidate_timeout_s")) {
    s->candidate_timeout_s = r.number(*v, "candidate_timeout_s", "settings");
    if (!(s->candidate_timeout_s > 0)) r.bad("settings.candidate_timeout_s", "must be > 0");
  }
}

void read_target(const Reader& r, const Value& root, TuneJob* job) {
  const Value* t = root.find("target");
  if (!t) return;
  r.expect(*t, Type::Object, "target");
  if (const Value* cc = t->find("cc")) {
    r.expect(*cc, Type::Array, "target.cc");
    if (cc->items.size() != 2 || cc->items[0].type != Type::Int || cc->items[1].type != Type::Int)
      r.bad("target.cc", "expected [major, minor]");
    job->target_cc_major = int(cc->items[0].i);
    job->target_cc_minor = int(cc->items[1].i);
  }
  if (t->find("sm_count")) job->target_sm_count = int(r.integer(*t, "sm_count", "target", 1));
}

TuneCandidate read_candidate(const Reader& r, const Value& v, const std::string& where) {
  r.expect(v, Type::Object, where);
  TuneCandidate c;
  c.name = r.str(v, "name", where);
  if (c.name.empty()) r.bad(where + ".name", "must not be empty");
  c.bundle = r.str(v, "bundle", where);
  if (c.bundle.empty() || c.bundle[0] == '/')
    r.bad(where + ".bundle", "must be a path relative to the job folder");
  if (const Value* cfg = v.find("config")) c.config = *cfg;
  return c;
}

TuneProblem read_problem(const Reader& r, const Value& v, const std::string& where) {
  r.expect(v, Type::Object, where);
  TuneProblem p;
  p.key = r.str(v, "key", where);
  if (p.key.empty()) r.bad(where + ".key", "must not be empty");
  p.kind = r.str(v, "kind", where, false);
  p.desc = r.str(v, "desc", where, false);
  if (const Value* info = v.find("info")) p.info = *info;
  p.rtol = r.number(v, "rtol", where);
  if (!(p.rtol >= 0)) r.bad(where + ".rtol", "must be >= 0");
  p.seed = uint64_t(r.integer(v, "seed", where, 0));
  const Value& cands = r.need(v, "candidates", where);
  r.expect(cands, Type::Array, where + ".candidates");
  if (cands.items.empty()) r.bad(where + ".candidates", "a problem needs at least one candidate");
  std::set<std::string> names;
  for (size_t i = 0; i < cands.items.size(); ++i) {
    std::string w = cat(where, ".candidates[", i, "]");
    p.candidates.push_back(read_candidate(r, cands.items[i], w));
    if (!names.insert(p.candidates.back().name).second)
      r.bad(w + ".name", cat("duplicate candidate name '", p.candidates.back().name, "'"));
  }
  int64_t ref = r.integer(v, "reference", where, 0);
  if (uint64_t(ref) >= p.candidates.size())
    r.bad(where + ".reference", cat("index ", ref, " is out of range (", p.candidates.size(),
                                    " candidates)"));
  p.reference = size_t(ref);
  return p;
}

// ---- writing results -----------------------------------------------------------------------

// Strings we did not parse ourselves (driver messages, paths) may hold bytes that are not
// UTF-8; JSON readers reject those, so they become '?'.
std::string utf8_clean(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    bool ok = len > 0 && i + len <= s.size();
    for (size_t k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(s[i + k]) >> 6) == 2;
    if (ok) out.append(s, i, len);
    else out += '?';
    i += ok ? len : 1;
  }
  return out;
}

std::string qstr(const std::string& s) { return quote(utf8_clean(s)); }

std::string num(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  return buf;
}

std::string result_fields(const CandidateResult& r) {
  return cat("\"status\": ", quote(status_name(r.status)), ", \"median_us\": ", num(r.median_us),
             ", \"p10_us\": ", num(r.p10_us), ", \"p90_us\": ", num(r.p90_us),
             ", \"rel_err\": ", num(r.rel_err), ", \"message\": ", qstr(r.message));
}

std::string settings_json(const TuneSettings& s) {
  return cat("{\"warmup\": ", s.warmup, ", \"reps\": ", s.reps, ", \"l2_flush_bytes\": ",
             s.l2_flush_bytes, ", \"candidate_timeout_s\": ", num(s.candidate_timeout_s), "}");
}

double opt_number(const Value& v, const char* key) {
  const Value* x = v.find(key);
  if (!x || x->is_null()) return NAN;
  if (!x->is_number()) fail(AOTPACK_INTERNAL, "bad result record: ", key, " is not a number");
  return x->type == Type::Int ? double(x->i) : x->d;
}

}  // namespace

TuneJob load_tune_job(const std::string& dir) {
  Reader r{dir + "/job.json"};
  std::string text = read_text(r.file);
  Value root = aotpack::json::parse(text.data(), text.size(), r.file);
  r.expect(root, Type::Object, "top level");
  const Value* format = root.find("format");
  if (!format || format->type != Type::String || format->s != "aotpack-tuning-job")
    r.bad("format", cat("not an aotpack tuning job (expected \"format\": \"aotpack-tuning-job\", "
                        "got ", format ? aotpack::json::dump(*format) : "nothing", ")"));
  const Value& version = r.need(root, "version", "top level");
  if (version.type != Type::Int || version.i != 1)
    fail(AOTPACK_UNSUPPORTED_VERSION, r.file, ": tuning job version ", aotpack::json::dump(version),
         " is not supported: this aotpack-run reads version 1 (use the aotpack-run of the "
         "aotpack that wrote the job)");
  TuneJob job;
  job.dir = dir;
  job.job_id = r.str(root, "job_id", "top level");
  read_target(r, root, &job);
  read_settings(r, root, &job.settings);
  const Value& problems = r.need(root, "problems", "top level");
  r.expect(problems, Type::Array, "problems");
  std::set<std::string> keys;
  for (size_t i = 0; i < problems.items.size(); ++i) {
    std::string where = cat("problems[", i, "]");
    job.problems.push_back(read_problem(r, problems.items[i], where));
    if (!keys.insert(job.problems.back().key).second)
      r.bad(where + ".key", cat("duplicate problem key '", job.problems.back().key,
                                "' (keys must be unique in a job)"));
  }
  return job;
}

const char* status_name(Status s) {
  switch (s) {
    case Status::ok: return "ok";
    case Status::wrong: return "wrong";
    case Status::error: return "error";
    case Status::timeout: return "timeout";
    case Status::skipped: return "skipped";
  }
  return "error";
}

std::string result_to_json(const CandidateResult& r) { return "{" + result_fields(r) + "}"; }

CandidateResult result_from_json(const Value& v) {
  CandidateResult r;
  const Value* st = v.find("status");
  const Value* msg = v.find("message");
  if (!st || st->type != Type::String || !msg || msg->type != Type::String)
    fail(AOTPACK_INTERNAL, "bad result record from the measuring process");
  bool known = false;
  for (Status s : {Status::ok, Status::wrong, Status::error, Status::timeout, Status::skipped})
    if (st->s == status_name(s)) r.status = s, known = true;
  if (!known) fail(AOTPACK_INTERNAL, "bad result status '", st->s, "'");
  r.median_us = opt_number(v, "median_us");
  r.p10_us = opt_number(v, "p10_us");
  r.p90_us = opt_number(v, "p90_us");
  r.rel_err = opt_number(v, "rel_err");
  r.message = msg->s;
  return r;
}

std::string device_to_json(const DeviceInfo& d) {
  return cat("{\"name\": ", qstr(d.name), ", \"cc\": [", d.cc_major, ", ", d.cc_minor,
             "], \"sm_count\": ", d.sm_count, ", \"driver\": ", d.driver, "}");
}

DeviceInfo device_from_json(const Value& v) {
  DeviceInfo d;
  const Value* name = v.find("name");
  const Value* cc = v.find("cc");
  if (!name || name->type != Type::String || !cc || cc->items.size() != 2)
    fail(AOTPACK_INTERNAL, "bad device record from the measuring process");
  d.name = name->s;
  d.cc_major = int(cc->items[0].i);
  d.cc_minor = int(cc->items[1].i);
  d.sm_count = int(opt_number(v, "sm_count"));
  d.driver = int(opt_number(v, "driver"));
  return d;
}

void write_results(const std::string& path, const TuneJob& job, const TuneSettings& settings,
                   const DeviceInfo& device,
                   const std::vector<std::vector<CandidateResult>>& results) {
  std::string out = cat("{\n  \"format\": \"aotpack-tuning-results\",\n  \"version\": 1,\n",
                        "  \"job_id\": ", qstr(job.job_id), ",\n  \"device\": ",
                        device_to_json(device), ",\n  \"runtime\": ", qstr(aotpack_version()),
                        ",\n  \"settings\": ", settings_json(settings), ",\n  \"problems\": [");
  for (size_t p = 0; p < job.problems.size(); ++p) {
    const TuneProblem& prob = job.problems[p];
    // key as the doc says; kind, desc and info are echoed too, so that an importer needs
    // nothing but the results file.
    out += cat(p ? "," : "", "\n    {\"key\": ", qstr(prob.key), ", \"kind\": ", qstr(prob.kind),
               ", \"desc\": ", qstr(prob.desc),
               prob.info.is_null() ? "" : ", \"info\": " + aotpack::json::dump(prob.info),
               ",\n     \"candidates\": [");
    for (size_t c = 0; c < prob.candidates.size(); ++c)
      out += cat(c ? "," : "", "\n       {\"name\": ", qstr(prob.candidates[c].name),
                 ", \"config\": ", aotpack::json::dump(prob.candidates[c].config), ", ",
                 result_fields(results[p][c]), "}");
    out += "]}";
  }
  out += "\n  ]\n}\n";
  // Same folder as the target, so rename() is atomic (never across file systems).
  std::string tmp = cat(path, ".tmp.", long(getpid()));
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) fail(AOTPACK_IO, "cannot create '", tmp, "': ", std::strerror(errno));
  bool ok = std::fwrite(out.data(), 1, out.size(), f) == out.size() && std::fflush(f) == 0 &&
            fsync(fileno(f)) == 0;
  ok = std::fclose(f) == 0 && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    std::remove(tmp.c_str());
    fail(AOTPACK_IO, "cannot write the results file '", path, "': ", std::strerror(err));
  }
}

}  // namespace aotpack_run
