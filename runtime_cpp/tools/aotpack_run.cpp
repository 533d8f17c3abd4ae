// aotpack-run — run, benchmark or inspect an aotpack bundle with only the NVIDIA driver.
//
//   aotpack-run BUNDLE [--weights FILE] [--device N] [--inputs in.safetensors]
//               [--outputs out.safetensors] [--shape NAME=AxB[,...]]... [--bench N]
//               [--warmup N] [--no-graph] [--no-pdl] [--info] [--check]
//               [--verify full|fast|none]
//   aotpack-run BUNDLE --generate N (--prompt-ids 1,2,3 ... | --prompt-len L) [--batch K]
//               [--temperature T] [--top-k K] [--top-p P] [--seed N] [--stop-id ID]...
//               [--ignore-eos]                     (text generation: tools/run_generate.cpp)
//   aotpack-run --tune JOB_DIR -o results.json [--budget S] [--reps N] [--warmup N]
//               [--candidate-timeout S] [--device N]          (tuner: tools/tune.cpp)
//
// Exit codes: 0 success, 1 runtime error (status printed), 2 bad usage.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "aotpack/aotpack.h"
#include "c_api_util.hpp"
#include "bundle.hpp"
#include "cuda_driver.hpp"
#include "dtype.hpp"
#include "error.hpp"
#include "host_tensor.hpp"
#include "load_trace.hpp"
#include "run_generate.hpp"
#include "run_info.hpp"
#include "run_report.hpp"
#include "run_shapes.hpp"
#include "safetensors.hpp"
#include "tune.hpp"

namespace {

namespace cu = aotpack::cu;
using aotpack::cat;
using aotpack::fail;
using aotpack_run::check_status;
using aotpack_run::Dims;
using aotpack_run::ModelHandle;
using aotpack_run::outputs_to_host;
using aotpack_run::ShapeArg;
using aotpack_run::tensor_infos;

const char* kUsage =
    "usage: aotpack-run BUNDLE [options]\n"
    "       aotpack-run --tune JOB_DIR -o RESULTS [tuning options]\n"
    "  Runs an aotpack bundle (model.aotpack) on the GPU with only the NVIDIA driver.\n"
    "options:\n"
    "  --weights FILE     external weights file (default: the bundle's external_weights.file)\n"
    "  --device N         CUDA device ordinal (default 0)\n"
    "  --inputs FILE      read inputs by name from a safetensors file (default: random); a\n"
    "                     bundle whose dims vary runs at the shapes of the file's tensors\n"
    "  --outputs FILE     write the outputs (with their shapes) to a safetensors file\n"
    "  --shape NAME=AxB[,NAME2=CxD...]\n"
    "                     input shapes of a bundle whose dims vary at run time (format v2);\n"
    "                     repeat it to run (and bench) several shapes in turn. Inputs not\n"
    "                     named get their dims from the symbols the named ones set, else\n"
    "                     from the symbols' example (else max) values, which is also the\n"
    "                     shape used without --shape\n"
    "  --bench N          time N runs (after --warmup runs); prints median/p10/p90 ms, one\n"
    "                     line per --shape, ending in shape=NAME=AxB,... for such bundles\n"
    "  --warmup N         warm-up runs before timing (default 10)\n"
    "  --no-graph         launch kernels one by one instead of replaying a CUDA graph\n"
    "  --no-pdl           no programmatic dependent launch: each kernel starts only after the\n"
    "                     previous one ends (for A/B timing)\n"
    "  --seed N           seed of the random inputs (default 0)\n"
    "  --info             print signature (with symbols and their ranges), kernels, arena and\n"
    "                     state sizes, the generation section (no GPU needed), then exit\n"
    "  --check            verify the bundle (checksums, weights, bounds; no GPU needed)\n"
    "  --json             print one JSON document instead of the text lines: load_ms, and per\n"
    "                     shape the outputs' summaries and the --bench timing\n"
    "  --verify MODE      how the weights are checked when loading: fast (default: a 64-bit\n"
    "                     checksum of every byte), full (sha256 of every byte: also refuses a\n"
    "                     weights file forged to pass fast; the default of --check), none\n"
    "                     (names, dtypes, shapes only). The manifest and cubins: always sha256\n"
    "  --teardown         free the model, session and context before exiting (for leak\n"
    "                     checkers); by default a run that succeeds exits right after its last\n"
    "                     output and leaves that to the driver and the OS (~70 ms sooner for a\n"
    "                     2.4 GB model)\n"
    "  -h, --help         this text\n"
    "  --version          the runtime version (aotpack_version()), then exit\n"
    "text generation (docs/generation.md; a bundle built with --task text-generation):\n"
    "  --generate N       generate up to N tokens per sequence (aotpack_session_generate);\n"
    "                     prints each sequence's prompt and new ids, its count and decode\n"
    "                     tokens/s, then one line 'generate: batch=B prompt=L1,L2 new=N1,N2\n"
    "                     ttft_ms=.. decode_ms=.. decode_steps=.. decode_tok_s=.. ...'\n"
    "                     (ttft: prefill run + first tokens on the host; decode_tok_s: every\n"
    "                     sequence's decode tokens / decode time)\n"
    "  --prompt-ids IDS   a prompt as comma-separated token ids (1,15043,3186); repeat it for\n"
    "                     a batch of several sequences (one per flag)\n"
    "  --prompt-len L     instead: a prompt of L random in-vocabulary ids (from --seed)\n"
    "  --batch K          K sequences from the one prompt: sequence i is its first\n"
    "                     max(1, L - i) tokens (different lengths)\n"
    "  --temperature T    0 (default): greedy (the model's argmax); > 0: sample on the host\n"
    "  --top-k K          sample among the K most likely tokens (default 0: all)\n"
    "  --top-p P          sample among the smallest set reaching probability P (default 1)\n"
    "  --seed N           also the sampling seed (the same seed gives the same tokens)\n"
    "  --stop-id ID       a token id that ends a sequence (repeatable), besides the model's\n"
    "                     eos ids\n"
    "  --ignore-eos       the model's eos ids do not end a sequence\n"
    "tuning (docs/tuning.md): measure every candidate of a job made by `aotpack tune`\n"
    "  --tune JOB_DIR     the job folder (job.json + one bundle per candidate)\n"
    "  -o, --results FILE where to write results.json (required with --tune)\n"
    "  --budget SECONDS   start no new candidate after this much wall time; the rest are\n"
    "                     recorded as skipped (default: no limit)\n"
    "  --reps N           timed runs per candidate (default: the job's settings.reps)\n"
    "  --warmup N         untimed runs per candidate (default: the job's settings.warmup)\n"
    "  --candidate-timeout S  seconds one candidate may take before its process is killed\n"
    "                     (default: the job's settings.candidate_timeout_s)\n"
    "  --device N         CUDA device ordinal (default 0)\n"
    "  Each problem runs in a child process (a crash, hang or CUDA error costs only that\n"
    "  candidate); progress goes to stderr. Exit code 0 once the results are written\n"
    "  (whatever the candidates did), 1 for a bad job or an unusable GPU, 2 for bad usage.\n";

struct Args {
  std::string bundle, weights, inputs, outputs;
  int device = 0, bench = 0, warmup = 10;
  int verify = AOTPACK_VERIFY_DEFAULT;  // --verify
  uint64_t seed = 0;
  bool graph = true, pdl = true, info = false, check = false, json = false, teardown = false;
  // --tune
  std::string tune, results;
  double budget = -1, candidate_timeout = -1;
  int reps = -1;
  bool warmup_set = false;
  std::vector<std::string> run_only;  // flags given that --tune does not take
  std::vector<ShapeArg> shapes;       // one per --shape
  aotpack_run::GenerateArgs gen;      // --generate and its flags
};

// Timed runs per candidate: each needs two CUDA events, all alive until the last one.
constexpr long kMaxReps = 100000;

struct UsageError {
  std::string message;
};

int parse_verify(const std::string& v) {
  if (v == "full") return AOTPACK_VERIFY_FULL;
  if (v == "fast") return AOTPACK_VERIFY_FAST;
  if (v == "none") return AOTPACK_VERIFY_NONE;
  throw UsageError{"--verify takes full, fast or none, got '" + v + "'"};
}

long parse_count(const char* flag, const char* v, long min, long max = 100000000) {
  char* end = nullptr;
  long n = std::strtol(v, &end, 10);
  if (!*v || *end || n < min || n > max)
    throw UsageError{cat(flag, min > 0 ? " needs a positive integer" : " needs an integer >= 0",
                         max < 100000000 ? cat(" (at most ", max, ")") : "", ", got '", v, "'")};
  return n;
}

// --generate takes none of the tensor-run options, and its flags need it.
void check_generate_mode(const Args& a) {
  std::string err = aotpack_run::check_generate_args(a.gen);
  if (!err.empty()) throw UsageError{err};
  if (!a.gen.new_tokens) return;
  for (const std::string& f : a.run_only)
    if (f == "--inputs" || f == "--outputs" || f == "--bench" || f == "--shape" || f == "--json")
      throw UsageError{f + " cannot be used with --generate"};
}

// --json reports runs: --info and --check print their own text.
void check_json_mode(const Args& a) {
  if (a.json && (a.info || a.check))
    throw UsageError{std::string("--json cannot be used with ") + (a.info ? "--info" : "--check")};
}

double parse_seconds(const char* flag, const char* v, bool allow_zero) {
  char* end = nullptr;
  double x = std::strtod(v, &end);
  if (!*v || *end || !std::isfinite(x) || x < 0 || (!allow_zero && x == 0))
    throw UsageError{cat(flag, allow_zero ? " needs a number of seconds >= 0" :
                         " needs a number of seconds > 0", ", got '", v, "'")};
  return x;
}

// --tune takes none of the single-bundle options (and no BUNDLE).
void check_tune_args(const Args& a) {
  if (a.tune.empty()) {
    if (!a.results.empty()) throw UsageError{"-o/--results is only used with --tune JOB_DIR"};
    if (a.budget >= 0 || a.reps >= 0 || a.candidate_timeout >= 0)
      throw UsageError{"--budget, --reps and --candidate-timeout are only used with --tune"};
    return;
  }
  if (a.results.empty()) throw UsageError{"--tune needs -o/--results FILE (where to write results.json)"};
  if (!a.bundle.empty()) throw UsageError{"--tune takes a job folder, not a BUNDLE ('" + a.bundle + "')"};
  if (!a.run_only.empty()) throw UsageError{a.run_only.front() + " cannot be used with --tune"};
}

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) throw UsageError{s + " needs a value"};
      return argv[++i];
    };
    static const char* const kRunOnly[] = {"--weights", "--inputs", "--outputs", "--bench",
                                           "--seed", "--no-graph", "--no-pdl", "--info",
                                           "--check", "--shape", "--verify", "--json",
                                           "--teardown"};
    for (const char* f : kRunOnly)
      if (s == f) a.run_only.push_back(s);
    if (s == "--weights") a.weights = value();
    else if (s == "--inputs") a.inputs = value();
    else if (s == "--outputs") a.outputs = value();
    else if (s == "--shape") {
      ShapeArg arg;
      std::string err = aotpack_run::parse_shape_arg(value(), &arg);
      if (!err.empty()) throw UsageError{err};
      a.shapes.push_back(arg);
    }
    else if (s == "--verify") a.verify = parse_verify(value());
    else if (s == "--device") a.device = int(parse_count("--device", value(), 0));
    else if (s == "--bench") a.bench = int(parse_count("--bench", value(), 1));
    else if (s == "--warmup") a.warmup = int(parse_count("--warmup", value(), 0)), a.warmup_set = true;
    else if (s == "--seed") a.seed = uint64_t(parse_count("--seed", value(), 0));
    else if (aotpack_run::is_generate_flag(s)) {
      std::string err = aotpack_run::parse_generate_flag(s, value, a.gen);
      if (!err.empty()) throw UsageError{err};
      a.run_only.push_back(s);
    }
    else if (s == "--no-graph") a.graph = false;
    else if (s == "--no-pdl") a.pdl = false;
    else if (s == "--info") a.info = true;
    else if (s == "--check") a.check = true;
    else if (s == "--json") a.json = true;
    else if (s == "--teardown") a.teardown = true;
    else if (s == "--tune") a.tune = value();
    else if (s == "-o" || s == "--results") a.results = value();
    else if (s == "--budget") a.budget = parse_seconds("--budget", value(), true);
    else if (s == "--reps") a.reps = int(parse_count("--reps", value(), 1, kMaxReps));
    else if (s == "--candidate-timeout")
      a.candidate_timeout = parse_seconds("--candidate-timeout", value(), false);
    else if (s.size() > 1 && s[0] == '-') throw UsageError{"unknown option '" + s + "'"};
    else if (a.bundle.empty()) a.bundle = s;
    else throw UsageError{"expected one bundle path, got '" + a.bundle + "' and '" + s + "'"};
  }
  check_tune_args(a);
  check_generate_mode(a);
  check_json_mode(a);
  if (a.bundle.empty() && a.tune.empty()) throw UsageError{"missing BUNDLE"};
  if (!a.inputs.empty() && !a.shapes.empty())
    throw UsageError{"--shape cannot be used with --inputs (the file's tensors give the shapes)"};
  if (!a.outputs.empty() && a.shapes.size() > 1)
    throw UsageError{"--outputs takes one shape: give a single --shape"};
  return a;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += cat(i ? ", " : "", shape[i]);
  return s + "]";
}

// Device buffers of one tensor each, freed at scope exit.
struct DeviceBuffers {
  std::vector<cu::CUdeviceptr> ptrs;
  ~DeviceBuffers() {
    for (auto p : ptrs)
      if (p) cu::driver().cuMemFree(p);
  }
  cu::CUdeviceptr alloc(uint64_t nbytes, const std::string& what) {
    cu::CUdeviceptr p = 0;
    if (nbytes) cu::check(cu::driver().cuMemAlloc(&p, size_t(nbytes)), "cuMemAlloc", what);
    ptrs.push_back(p);
    return p;
  }
};

// The input shapes the --inputs file gives (dtype, and every static dim, checked).
std::vector<Dims> file_shapes(const Args& a, const aotpack::SafetensorsFile& f,
                              const std::vector<aotpack_tensor_info>& ins) {
  std::vector<Dims> out;
  for (const auto& t : ins) {
    const aotpack::TensorEntry* e = f.find(t.name);
    if (!e) fail(AOTPACK_INVALID_ARGUMENT, "input '", t.name, "' is not in ", a.inputs);
    std::vector<int64_t> shape(t.dims, t.dims + t.rank);
    bool fits = e->shape.size() == shape.size();
    for (size_t k = 0; fits && k < shape.size(); ++k)
      fits = shape[k] < 0 || shape[k] == e->shape[k];  // -1: the dim varies (bundle v2)
    if (e->dtype != aotpack::dtype_safetensors_name(t.dtype) || !fits)
      fail(AOTPACK_INVALID_ARGUMENT, "input '", t.name, "' in ", a.inputs, " is ", e->dtype,
           " ", shape_str(e->shape), " but the model expects ",
           aotpack::dtype_safetensors_name(t.dtype), " ", shape_str(shape));
    out.push_back(e->shape);
  }
  return out;
}

// Host bytes of every input (of the concrete shapes in `ins`): from the --inputs file or random.
std::vector<std::vector<uint8_t>> host_inputs(const Args& a, const aotpack::SafetensorsFile* f,
                                              const std::vector<aotpack_tensor_info>& ins) {
  std::vector<std::vector<uint8_t>> out;
  aotpack_run::Rng rng(a.seed * 7919 + 1);
  for (const auto& t : ins) {
    std::vector<uint8_t> bytes(size_t(t.nbytes));
    if (f) std::memcpy(bytes.data(), f->tensor_data(*f->find(t.name)), bytes.size());
    else aotpack_run::fill_random(t.dtype, bytes, rng);
    out.push_back(std::move(bytes));
  }
  return out;
}

double percentile(const std::vector<float>& sorted, double q) {
  size_t i = size_t(q * double(sorted.size() - 1) + 0.5);
  return sorted[std::min(i, sorted.size() - 1)];
}

// Times `runs` calls of `run_once` with CUDA events on `stream`.
template <typename F>
std::vector<float> time_runs(int runs, cu::CUstream stream, F run_once) {
  const cu::Driver& d = cu::driver();
  std::vector<cu::CUevent> ev(size_t(runs) + 1);
  for (auto& e : ev) cu::check(d.cuEventCreate(&e, cu::CU_EVENT_DEFAULT), "cuEventCreate", "bench");
  // Back-to-back runs with an event between each: measures each run on the GPU timeline.
  cu::check(d.cuEventRecord(ev[0], stream), "cuEventRecord", "bench");
  for (int i = 0; i < runs; ++i) {
    run_once();
    cu::check(d.cuEventRecord(ev[size_t(i) + 1], stream), "cuEventRecord", "bench");
  }
  cu::check(d.cuEventSynchronize(ev.back()), "cuEventSynchronize", "bench");
  std::vector<float> ms;
  for (int i = 0; i < runs; ++i) {
    float t = 0;
    cu::check(d.cuEventElapsedTime(&t, ev[size_t(i)], ev[size_t(i) + 1]), "cuEventElapsedTime",
              "bench");
    ms.push_back(t);
  }
  for (auto& e : ev) d.cuEventDestroy(e);
  return ms;
}

void write_outputs(const std::string& path, const std::vector<aotpack_tensor_info>& outs,
                   const std::vector<std::vector<uint8_t>>& host, bool quiet) {
  std::vector<aotpack::TensorToWrite> ts;
  for (size_t i = 0; i < outs.size(); ++i)
    ts.push_back({outs[i].name, aotpack::dtype_safetensors_name(outs[i].dtype),
                  std::vector<int64_t>(outs[i].dims, outs[i].dims + outs[i].rank),
                  host[i].data(), outs[i].nbytes});
  aotpack::write_safetensors(path, ts, {{"producer", "aotpack-run"}}, 64);
  if (!quiet) std::printf("wrote %s\n", path.c_str());
}

// Everything a run needs that does not depend on the shape.
struct Runner {
  const Args& a;
  ModelHandle h;
  cu::CUstream stream = nullptr;
  std::vector<aotpack_tensor_info> ins, outs;  // dims -1 where they vary
  bool dynamic = false;                         // the model has symbols
  std::unique_ptr<aotpack::SafetensorsFile> file;  // --inputs
  aotpack_run::RunReport report;                   // --json

  explicit Runner(const Args& args) : a(args) {}
  ~Runner() {
    if (stream) cu::driver().cuStreamDestroy(stream);
  }
  void open();
  void run_shape(const std::vector<Dims>& in_shapes, bool announce);
};

void Runner::open() {
  aotpack_model_options mo{};
  mo.struct_size = sizeof(mo);
  mo.weights_path = a.weights.empty() ? nullptr : a.weights.c_str();
  mo.device_ordinal = a.device;
  mo.verify = a.verify;
  const auto t0 = std::chrono::steady_clock::now();
  check_status(aotpack_model_load(a.bundle.c_str(), &mo, &h.m));
  aotpack_session_options so{};
  so.struct_size = sizeof(so);
  so.cuda_graphs = a.graph ? AOTPACK_CUDA_GRAPHS_ON : AOTPACK_CUDA_GRAPHS_OFF;
  so.disable_programmatic_launch = a.pdl ? 0 : 1;
  aotpack::trace_point("model loaded");
  check_status(aotpack_session_create(h.m, &so, &h.s));
  aotpack::trace_point("session created");
  report.load_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  static const char* const kVerify[] = {"fast", "full", "fast", "none"};
  report.bundle = a.bundle;
  report.runtime_version = aotpack_version();
  report.device = a.device;
  report.verify = kVerify[a.verify];
  // The driver is already loaded by the model; the model's context is current.
  cu::check(cu::driver().cuStreamCreate(&stream, cu::CU_STREAM_NON_BLOCKING), "cuStreamCreate",
            "");
  ins = tensor_infos(h.m, true);
  outs = tensor_infos(h.m, false);
  dynamic = aotpack_model_num_symbols(h.m) > 0;
  if (!a.inputs.empty()) file.reset(new aotpack::SafetensorsFile(a.inputs, "inputs file"));
}

// A generation bundle's random inputs made a valid step (a prefill of S tokens per sequence,
// or a decode step at S = 1): positions 0..S-1 and last_index[b] = b * S + S - 1, so that
// --bench times real work instead of rows outside the batch.
void step_inputs(const aotpack_model* m, const std::vector<Dims>& shapes,
                 std::vector<std::vector<uint8_t>>& host) {
  aotpack_generation_info g;
  aotpack_status* st = aotpack_model_generation_info(m, &g);
  if (st) {  // not a generation bundle: its inputs are what they are
    aotpack_status_free(st);
    return;
  }
  // the compiler's step: input_ids [B, S], positions [B, S], last_index [B] (int64)
  if (host.size() != 3 || shapes.size() != 3 || shapes[0].size() != 2) return;
  const int64_t B = shapes[0][0], S = shapes[0][1];
  std::vector<int64_t> pos(size_t(B * S)), last(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < S; ++t) pos[size_t(b * S + t)] = t;
    last[size_t(b)] = b * S + S - 1;
  }
  std::memcpy(host[1].data(), pos.data(), std::min(host[1].size(), pos.size() * 8));
  std::memcpy(host[2].data(), last.data(), std::min(host[2].size(), last.size() * 8));
}

// Runs (and with --bench times) the model at one set of input shapes.
void Runner::run_shape(const std::vector<Dims>& in_shapes, bool announce) {
  const cu::Driver& d = cu::driver();
  std::vector<aotpack_shape> c_in = aotpack_run::c_shapes(in_shapes);
  std::vector<aotpack_shape> c_out(outs.size());
  check_status(aotpack_model_output_shapes(h.m, c_in.data(), c_in.size(), c_out.data(),
                                           c_out.size()));
  std::vector<Dims> out_shapes;
  for (const auto& s : c_out) out_shapes.emplace_back(s.dims, s.dims + s.rank);
  auto in_t = aotpack_run::with_shapes(ins, in_shapes);
  auto out_t = aotpack_run::with_shapes(outs, out_shapes);
  const std::string label = aotpack_run::shape_label(ins, in_shapes);
  if (announce && !a.json) std::printf("shape %s\n", label.c_str());
  report.shapes.push_back({label, {}, false, {}});
  aotpack_run::ShapeReport& rep = report.shapes.back();

  auto host_in = host_inputs(a, file.get(), in_t);
  if (!file) step_inputs(h.m, in_shapes, host_in);
  DeviceBuffers bufs;
  std::vector<uint64_t> in_ptrs, out_ptrs;
  for (size_t i = 0; i < in_t.size(); ++i) {
    in_ptrs.push_back(bufs.alloc(in_t[i].nbytes, cat("input '", in_t[i].name, "'")));
    if (in_t[i].nbytes)
      cu::check(d.cuMemcpyHtoD(in_ptrs.back(), host_in[i].data(), host_in[i].size()),
                "cuMemcpyHtoD", cat("input '", in_t[i].name, "'"));
  }
  for (const auto& t : out_t) out_ptrs.push_back(bufs.alloc(t.nbytes, cat("output '", t.name, "'")));
  // A model without symbols passes no shapes (the path every static caller takes).
  auto run_once = [&] {
    check_status(aotpack_session_execute(h.s, in_ptrs.data(), in_ptrs.size(),
                                         dynamic ? c_in.data() : nullptr, out_ptrs.data(),
                                         out_ptrs.size(), nullptr, stream));
  };

  run_once();
  cu::check(d.cuStreamSynchronize(stream), "cuStreamSynchronize", "first run");
  std::vector<std::vector<uint8_t>> host_out = outputs_to_host(out_t, out_ptrs.data());
  rep.outputs = aotpack_run::summarize_outputs(out_t, host_out);
  if (!a.json) aotpack_run::print_outputs(rep.outputs);
  if (!a.outputs.empty()) write_outputs(a.outputs, out_t, host_out, a.json);
  if (a.bench <= 0) return;

  for (int i = 0; i < a.warmup; ++i) run_once();
  cu::check(d.cuStreamSynchronize(stream), "cuStreamSynchronize", "warm-up");
  std::vector<float> ms = time_runs(a.bench, stream, run_once);
  std::sort(ms.begin(), ms.end());
  rep.benched = true;
  rep.bench = {percentile(ms, 0.5), percentile(ms, 0.1), percentile(ms, 0.9), ms.front(),
               a.bench, a.warmup, a.graph, a.pdl};
  if (a.json) return;
  std::printf("aotpack-run: median_ms=%.4f p10_ms=%.4f p90_ms=%.4f min_ms=%.4f runs=%d "
              "warmup=%d graph=%d pdl=%d%s\n",
              rep.bench.median_ms, rep.bench.p10_ms, rep.bench.p90_ms, rep.bench.min_ms,
              a.bench, a.warmup, a.graph ? 1 : 0, a.pdl ? 1 : 0,
              label.empty() ? "" : cat(" shape=", label).c_str());
}

void run(const Args& a) {
  Runner r(a);
  r.open();
  if (r.file)
    r.run_shape(file_shapes(a, *r.file, r.ins), false);
  else if (a.shapes.empty())  // static shapes, or the example shape
    r.run_shape(aotpack_run::resolve_input_shapes(r.h.m, r.ins, {}), false);
  else
    for (const ShapeArg& arg : a.shapes)
      r.run_shape(aotpack_run::resolve_input_shapes(r.h.m, r.ins, arg), a.shapes.size() > 1);
  if (a.json) std::fputs(aotpack_run::to_json(r.report).c_str(), stdout);
  aotpack::trace_point("printed");
  aotpack_run::end_run(a.teardown);
}

}  // namespace

int main(int argc, char** argv) {
  aotpack::trace_point("main");
  for (int i = 1; i < argc; ++i)
    if (!std::strcmp(argv[i], "-h") || !std::strcmp(argv[i], "--help")) {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (!std::strcmp(argv[i], "--version")) {
      std::printf("aotpack-run %s\n", aotpack_version());
      return 0;
    }
  Args a;
  try {
    a = parse_args(argc, argv);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "aotpack-run: %s\n%s", e.message.c_str(), kUsage);
    return 2;
  }
  if (!a.tune.empty()) {
    aotpack_run::TuneOptions t;
    t.job_dir = a.tune;
    t.results_path = a.results;
    t.budget_s = a.budget;
    t.reps = a.reps;
    t.warmup = a.warmup_set ? a.warmup : -1;
    t.candidate_timeout_s = a.candidate_timeout;
    t.device = a.device;
    return aotpack_run::run_tune(t);
  }
  return aotpack_run::exit_code_of([&]() -> int {
    if (a.check) {
      aotpack_model_options mo{};
      mo.struct_size = sizeof(mo);
      mo.weights_path = a.weights.empty() ? nullptr : a.weights.c_str();
      mo.verify = a.verify;
      check_status(aotpack_model_check_file(a.bundle.c_str(), &mo));
      std::printf("aotpack-run: bundle is valid: %s%s\n", a.bundle.c_str(),
                  a.verify == AOTPACK_VERIFY_NONE ? " (the weights' bytes were not checked: "
                                                    "--verify none)" : "");
      return 0;
    }
    if (a.info) {
      aotpack_run::print_info(a.bundle, a.weights, a.verify);
      return 0;
    }
    if (a.gen.new_tokens) {
      aotpack_run::run_generate(a.bundle, a.weights, a.device, a.verify, a.graph, a.seed, a.gen,
                                a.teardown);
      return 0;
    }
    if (!a.json) {
      run(a);
      return 0;
    }
    try {  // --json: a failure is a JSON document too (and the usual line on stderr)
      run(a);
    } catch (const aotpack::Error& e) {
      std::fputs(aotpack_run::error_json(aotpack_status_code_name(e.code()), e.what()).c_str(),
                 stdout);
      throw;
    }
    return 0;
  });
}
