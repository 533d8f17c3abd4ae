// tune_child.cpp — measuring tuning candidates in a child process (see tune_child.hpp).
#include "tune_child.hpp"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <memory>

#include "aotpack/aotpack.h"
#include "c_api_util.hpp"
#include "cuda_driver.hpp"
#include "dtype.hpp"
#include "error.hpp"
#include "host_tensor.hpp"
#include "safetensors.hpp"

namespace aotpack_run {

namespace cu = aotpack::cu;
using aotpack::cat;
using aotpack::fail;

double monotonic_s() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

namespace {

constexpr const char* kSignatureKey = "aotpack.tune.signature";

// One line to the parent; a short write is retried (the pipe may be nearly full).
void report(int fd, const std::string& text) {
  std::string line = text + "\n";
  for (size_t done = 0; done < line.size();) {
    ssize_t n = write(fd, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) _exit(4);  // the parent is gone: nobody to measure for
    done += size_t(n);
  }
}

struct Signature {
  std::vector<aotpack_tensor_info> ins, outs;
  std::string text;  // "inputs: x f32 [4, 64]; outputs: y f32 [4, 64]" — compared as a whole
};

Signature signature(aotpack_model* m) {
  Signature sig;
  auto describe = [](const aotpack_tensor_info& t) {
    std::string s = cat(t.name, " ", t.dtype_name, " [");
    for (int32_t i = 0; i < t.rank; ++i) s += cat(i ? ", " : "", t.dims[i]);
    return s + "]";
  };
  sig.ins = tensor_infos(m, true);
  sig.outs = tensor_infos(m, false);
  sig.text = "inputs:";
  for (size_t i = 0; i < sig.ins.size(); ++i)
    sig.text += cat(i ? ", " : " ", describe(sig.ins[i]));
  sig.text += "; outputs:";
  for (size_t i = 0; i < sig.outs.size(); ++i)
    sig.text += cat(i ? ", " : " ", describe(sig.outs[i]));
  return sig;
}

uint64_t alloc_bytes(uint64_t nbytes) { return std::max<uint64_t>(256, (nbytes + 255) / 256 * 256); }

// Device resources of one child. They live on the primary context, which the child retains
// for its whole life: models retain/release it too, and without our reference the context
// (and every buffer in it) would be destroyed when a candidate's model is freed.
struct ChildState {
  const ChildPlan& plan;
  const TuneProblem& problem;
  cu::CUstream stream = nullptr;
  cu::CUdeviceptr scratch = 0;  // L2 flush target
  std::vector<cu::CUevent> events;
  std::vector<std::vector<uint8_t>> host_in;  // the random inputs, same for every candidate
  std::vector<cu::CUdeviceptr> d_in, d_out;
  std::string ref_sig;                        // set once ref_out is there
  std::vector<std::vector<uint8_t>> ref_out;  // reference outputs, in signature order

  explicit ChildState(const ChildPlan& p) : plan(p), problem(p.job->problems[p.problem]) {}
};

// Called once, before the first candidate; the context is kept until the process exits.
void open_context(ChildState& st) {
  const cu::Driver& d = cu::driver();
  cu::CUdevice dev = 0;
  cu::check(d.cuDeviceGet(&dev, st.plan.device), "cuDeviceGet", "tuning");
  cu::CUcontext ctx = nullptr;
  cu::check(d.cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain", "tuning");
  cu::check(d.cuCtxSetCurrent(ctx), "cuCtxSetCurrent", "tuning");
  cu::check(d.cuStreamCreate(&st.stream, cu::CU_STREAM_NON_BLOCKING), "cuStreamCreate", "tuning");
  uint64_t flush = st.plan.settings.l2_flush_bytes / 4 * 4;
  if (flush) cu::check(d.cuMemAlloc(&st.scratch, size_t(flush)), "cuMemAlloc", "L2 flush buffer");
  st.events.resize(2 * size_t(st.plan.settings.reps));
  for (auto& e : st.events) cu::check(d.cuEventCreate(&e, cu::CU_EVENT_DEFAULT), "cuEventCreate", "");
}

// Inputs and outputs are allocated once (all candidates share the signature); the random
// inputs come from one generator seeded with the problem's seed, filled in signature order.
void ensure_buffers(ChildState& st, const Signature& sig) {
  if (!st.d_in.empty() || !st.d_out.empty()) return;
  const cu::Driver& d = cu::driver();
  Rng rng(st.problem.seed);
  for (const auto& t : sig.ins) {
    st.host_in.emplace_back(size_t(t.nbytes));
    fill_random(t.dtype, st.host_in.back(), rng);
    st.d_in.push_back(0);
    cu::check(d.cuMemAlloc(&st.d_in.back(), size_t(alloc_bytes(t.nbytes))), "cuMemAlloc",
              cat("input '", t.name, "'"));
  }
  for (const auto& t : sig.outs) {
    st.d_out.push_back(0);
    cu::check(d.cuMemAlloc(&st.d_out.back(), size_t(alloc_bytes(t.nbytes))), "cuMemAlloc",
              cat("output '", t.name, "'"));
  }
}

// A child that starts after the reference (a restart) reads what the reference's child saved.
// Returns the reference's signature; its outputs are loaded only when `sig` matches it (they
// are looked up by the candidate's output names).
std::string load_reference(ChildState& st, const Signature& sig) {
  aotpack::SafetensorsFile f(st.plan.reference_path, "reference outputs");
  const aotpack::json::Value* s = f.metadata().find(kSignatureKey);
  if (!s || s->type != aotpack::json::Type::String)
    fail(AOTPACK_INTERNAL, st.plan.reference_path, " has no reference signature");
  if (s->s != sig.text) return s->s;  // the caller reports the mismatch
  for (const auto& t : sig.outs) {
    const aotpack::TensorEntry* e = f.find(t.name);
    if (!e || e->nbytes != t.nbytes)
      fail(AOTPACK_INTERNAL, st.plan.reference_path, " lacks output '", t.name, "'");
    const uint8_t* p = f.tensor_data(*e);
    st.ref_out.emplace_back(p, p + e->nbytes);
  }
  st.ref_sig = s->s;
  return st.ref_sig;
}

void save_reference(const ChildState& st, const Signature& sig) {
  std::vector<aotpack::TensorToWrite> ts;
  for (size_t i = 0; i < sig.outs.size(); ++i) {
    const auto& t = sig.outs[i];
    ts.push_back({t.name, aotpack::dtype_safetensors_name(t.dtype),
                  std::vector<int64_t>(t.dims, t.dims + t.rank), st.ref_out[i].data(), t.nbytes});
  }
  aotpack::write_safetensors(st.plan.reference_path, ts, {{kSignatureKey, sig.text}}, 256);
}

// Uploads the inputs, poisons the outputs (0xFF bytes: NaN for floats, -1 for integers, so
// a candidate that skips part of an output cannot inherit the previous one's answer), runs
// once and copies the outputs back.
std::vector<std::vector<uint8_t>> run_for_outputs(ChildState& st, const Signature& sig,
                                                  aotpack_session* session) {
  const cu::Driver& d = cu::driver();
  for (size_t i = 0; i < sig.ins.size(); ++i)
    if (sig.ins[i].nbytes)
      cu::check(d.cuMemcpyHtoD(st.d_in[i], st.host_in[i].data(), st.host_in[i].size()),
                "cuMemcpyHtoD", cat("input '", sig.ins[i].name, "'"));
  // A pageable cuMemcpyHtoD may return before its DMA (on the legacy stream) is done, and
  // our non-blocking stream does not wait for the legacy one: wait here.
  cu::check(d.cuStreamSynchronize(nullptr), "cuStreamSynchronize", "input upload");
  for (size_t i = 0; i < sig.outs.size(); ++i)
    cu::check(d.cuMemsetD32Async(st.d_out[i], 0xFFFFFFFFu, size_t(alloc_bytes(sig.outs[i].nbytes) / 4),
                                 st.stream),
              "cuMemsetD32Async", cat("output '", sig.outs[i].name, "'"));
  check_status(aotpack_session_execute(session, st.d_in.data(), st.d_in.size(), nullptr,
                                       st.d_out.data(), st.d_out.size(), nullptr, st.stream));
  cu::check(d.cuStreamSynchronize(st.stream), "cuStreamSynchronize", "first run");
  return outputs_to_host(sig.outs, st.d_out.data());
}

// rel_err = ||out - ref||_2 / ||ref||_2 over the elements where the reference is finite
// (||out - ref||_2 itself when the reference is all zeros); returns the worst output's and
// sets *why when the candidate is wrong.
double compare(const ChildState& st, const Signature& sig,
               const std::vector<std::vector<uint8_t>>& out, std::string* why) {
  double worst = 0;
  for (size_t o = 0; o < sig.outs.size(); ++o) {
    const auto& t = sig.outs[o];
    size_t n = size_t(t.nbytes / aotpack::dtype_size(t.dtype)), nonfinite = 0;
    double diff2 = 0, ref2 = 0;
    for (size_t k = 0; k < n; ++k) {
      double r = element(t.dtype, st.ref_out[o].data(), k);
      double x = element(t.dtype, out[o].data(), k);
      if (!std::isfinite(r)) continue;
      if (!std::isfinite(x)) { ++nonfinite; continue; }
      diff2 += (x - r) * (x - r);
      ref2 += r * r;
    }
    double err = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
    worst = std::max(worst, err);
    if (nonfinite && why->empty())
      *why = cat("output '", t.name, "' has ", nonfinite, " NaN/Inf values where the reference "
                 "is finite");
    if (err > st.problem.rtol && why->empty())
      *why = cat("output '", t.name, "': rel_err ", err, " > rtol ", st.problem.rtol);
  }
  return worst;
}

// Linear interpolation between the closest ranks (numpy's default).
double percentile(const std::vector<double>& sorted, double q) {
  double x = q * double(sorted.size() - 1);
  size_t i = size_t(x);
  if (i + 1 >= sorted.size()) return sorted.back();
  return sorted[i] + (x - double(i)) * (sorted[i + 1] - sorted[i]);
}

// Warm-up, then `reps` runs, each after an L2 flush and between two events, so only the
// run is timed and it starts with a cold L2 (as in a model, where other kernels ran before).
void time_candidate(ChildState& st, aotpack_session* session, CandidateResult* r) {
  const cu::Driver& d = cu::driver();
  auto run = [&] {
    check_status(aotpack_session_execute(session, st.d_in.data(), st.d_in.size(), nullptr,
                                         st.d_out.data(), st.d_out.size(), nullptr, st.stream));
  };
  for (int64_t i = 0; i < st.plan.settings.warmup; ++i) run();
  size_t words = size_t(st.plan.settings.l2_flush_bytes / 4);
  for (size_t i = 0; i < st.events.size(); i += 2) {
    if (words)
      cu::check(d.cuMemsetD32Async(st.scratch, unsigned(i), words, st.stream), "cuMemsetD32Async",
                "L2 flush");
    cu::check(d.cuEventRecord(st.events[i], st.stream), "cuEventRecord", "timing");
    run();
    cu::check(d.cuEventRecord(st.events[i + 1], st.stream), "cuEventRecord", "timing");
  }
  cu::check(d.cuEventSynchronize(st.events.back()), "cuEventSynchronize", "timing");
  std::vector<double> us;
  for (size_t i = 0; i < st.events.size(); i += 2) {
    float ms = 0;
    cu::check(d.cuEventElapsedTime(&ms, st.events[i], st.events[i + 1]), "cuEventElapsedTime",
              "timing");
    us.push_back(1000.0 * double(ms));
  }
  std::sort(us.begin(), us.end());
  r->median_us = percentile(us, 0.5);
  r->p10_us = percentile(us, 0.1);
  r->p90_us = percentile(us, 0.9);
}

CandidateResult measure(ChildState& st, size_t c) {
  CandidateResult r;
  ModelHandle h;
  aotpack_model_options mo{};
  mo.struct_size = sizeof(mo);
  mo.device_ordinal = st.plan.device;
  std::string path = st.plan.job->dir + "/" + st.problem.candidates[c].bundle;
  check_status(aotpack_model_load(path.c_str(), &mo, &h.m));
  aotpack_session_options so{};
  so.struct_size = sizeof(so);
  so.cuda_graphs = AOTPACK_CUDA_GRAPHS_ON;  // how the runtime runs in production
  check_status(aotpack_session_create(h.m, &so, &h.s));
  Signature sig = signature(h.m);
  bool is_ref = c == st.problem.reference;
  if (is_ref) st.ref_sig = sig.text;  // if the reference fails, the child stops
  std::string ref_sig = st.ref_sig.empty() ? load_reference(st, sig) : st.ref_sig;
  if (sig.text != ref_sig) {
    r.status = Status::error;
    r.message = cat("signature differs from the reference candidate's: ", sig.text,
                    " (reference: ", ref_sig, ")");
    return r;
  }
  ensure_buffers(st, sig);
  std::vector<std::vector<uint8_t>> out = run_for_outputs(st, sig, h.s);
  if (is_ref) {
    st.ref_out = std::move(out);
    save_reference(st, sig);
    r.rel_err = 0;
  } else {
    r.rel_err = compare(st, sig, out, &r.message);
  }
  r.status = r.message.empty() ? Status::ok : Status::wrong;
  time_candidate(st, h.s, &r);  // a wrong candidate is timed too (docs/tuning.md)
  return r;
}

}  // namespace

void child_measure(const ChildPlan& plan) {
  try {
    ChildState st(plan);
    // The context first, outside any candidate's timeout: after a killed hang the driver
    // may take a while to hand the GPU to a new process, which is no candidate's fault.
    open_context(st);
    report(plan.fd, "ready");
    for (size_t k = plan.pos; k < plan.order.size(); ++k) {
      size_t c = plan.order[k];
      if (monotonic_s() >= plan.budget_deadline) {
        report(plan.fd, "stop budget");
        break;
      }
      report(plan.fd, cat("start ", c));
      CandidateResult r;
      bool poisoned = false;
      try {
        r = measure(st, c);
      } catch (const aotpack::Error& e) {
        r = CandidateResult();
        r.status = Status::error;
        r.message = cat(aotpack_status_code_name(e.code()), ": ", e.what());
        poisoned = e.code() == AOTPACK_CUDA_ERROR;
      } catch (const std::exception& e) {  // e.g. bad_alloc for huge host copies
        r = CandidateResult();
        r.status = Status::error;
        r.message = cat("INTERNAL: ", e.what());
      }
      report(plan.fd, cat("result ", c, " ", result_to_json(r)));
      if (poisoned || (c == st.problem.reference && r.status != Status::ok)) break;
    }
  } catch (const aotpack::Error& e) {
    report(plan.fd, "fail " + aotpack::json::quote(cat(aotpack_status_code_name(e.code()), ": ",
                                                       e.what())));
    _exit(3);
  } catch (const std::exception& e) {
    report(plan.fd, "fail " + aotpack::json::quote(e.what()));
    _exit(3);
  }
  _exit(0);  // not exit(): the parent's atexit handlers and stdio buffers are not ours
}

void child_probe(int device, int fd) {
  try {
    const cu::Driver& d = cu::driver();
    cu::CUdevice dev = cu::device(device);
    DeviceInfo info;
    char name[256] = {0};
    cu::check(d.cuDeviceGetName(name, sizeof(name) - 1, dev), "cuDeviceGetName", "");
    info.name = name;
    info.cc_major = cu::attribute(dev, cu::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, "");
    info.cc_minor = cu::attribute(dev, cu::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, "");
    info.sm_count = cu::attribute(dev, cu::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "");
    cu::check(d.cuDriverGetVersion(&info.driver), "cuDriverGetVersion", "");
    report(fd, "device " + device_to_json(info));
  } catch (const aotpack::Error& e) {
    report(fd, "fail " + aotpack::json::quote(cat(aotpack_status_code_name(e.code()), ": ", e.what())));
    _exit(1);
  } catch (const std::exception& e) {
    report(fd, "fail " + aotpack::json::quote(e.what()));
    _exit(1);
  }
  _exit(0);
}

}  // namespace aotpack_run
