// c_api.cpp — the C API boundary: converts C++ exceptions into aotpack_status objects and
// opaque handles into internal objects. Nothing thrown inside may escape from here.
#include <algorithm>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "aotpack/aotpack.h"
#include "bundle.hpp"
#include "c_api_handles.hpp"
#include "dtype.hpp"
#include "error.hpp"
#include "generate.hpp"
#include "model.hpp"
#include "session.hpp"
#include "shape_plan.hpp"

namespace {

using aotpack::capi::g_oom_status;
using aotpack::capi::guard;
using aotpack::capi::make_status;

// Reads a versioned options struct: fields beyond the caller's struct_size keep defaults.
aotpack_model_options model_options(const aotpack_model_options* in) {
  aotpack_model_options o;
  std::memset(&o, 0, sizeof(o));
  o.struct_size = sizeof(o);
  if (in) {
    if (in->struct_size < sizeof(size_t))
      aotpack::fail(AOTPACK_INVALID_ARGUMENT, "aotpack_model_options.struct_size is not set");
    std::memcpy(&o, in, in->struct_size < sizeof(o) ? in->struct_size : sizeof(o));
    // a structure from before `verify` may hold anything in the padding where it now lies
    if (in->struct_size < AOTPACK_MODEL_OPTIONS_V2_SIZE) o.verify = AOTPACK_VERIFY_DEFAULT;
  }
  return o;
}

static_assert(sizeof(void*) != 8 ||
                  sizeof(aotpack_model_options) == AOTPACK_MODEL_OPTIONS_V2_SIZE,
              "AOTPACK_MODEL_OPTIONS_V2_SIZE is sizeof(aotpack_model_options) on 64-bit hosts");

void fill_info(const aotpack::TensorSpec& t, aotpack_tensor_info* info) {
  std::memset(info, 0, sizeof(*info));
  info->name = t.name.c_str();
  info->dtype = t.dtype;
  info->dtype_name = aotpack::dtype_manifest_name(t.dtype);
  info->rank = int32_t(t.shape.size());
  for (size_t i = 0; i < t.shape.size() && i < AOTPACK_MAX_RANK; ++i) info->dims[i] = t.shape[i];
  info->nbytes = t.nbytes;
}

// Input or output `index` of the model; INVALID_ARGUMENT when out of range.
const aotpack::TensorSpec& tensor_spec(const aotpack_model* model, size_t index, bool input) {
  if (!model) aotpack::fail(AOTPACK_INVALID_ARGUMENT, "model must not be NULL");
  const auto& list = input ? model->impl->manifest().inputs : model->impl->manifest().outputs;
  if (index >= list.size())
    aotpack::fail(AOTPACK_INVALID_ARGUMENT, input ? "input" : "output", " index ", index,
                  " out of range (", list.size(), ")");
  return list[index];
}

aotpack_status* tensor_info(const aotpack_model* model, size_t index, aotpack_tensor_info* info,
                            bool input) {
  return guard([&] {
    if (!info) aotpack::fail(AOTPACK_INVALID_ARGUMENT, "info must not be NULL");
    fill_info(tensor_spec(model, index, input), info);
  });
}

aotpack_status* tensor_dim(const aotpack_model* model, size_t index, int32_t dim,
                           const char** expr, int64_t* min, int64_t* max, bool input) {
  return guard([&] {
    const aotpack::TensorSpec& t = tensor_spec(model, index, input);
    if (dim < 0 || size_t(dim) >= t.dims.size())
      aotpack::fail(AOTPACK_INVALID_ARGUMENT, input ? "input" : "output", " '", t.name,
                    "' has rank ", t.dims.size(), ": no dim ", dim);
    const aotpack::Manifest& m = model->impl->manifest();
    const aotpack::IntExpr& e = t.dims[size_t(dim)];
    if (expr) *expr = e.is_const() ? nullptr : m.exprs[size_t(e.expr)].text().c_str();
    const auto& lo = input ? m.min_plan->inputs : m.min_plan->outputs;
    const auto& hi = input ? m.max_plan->inputs : m.max_plan->outputs;
    if (min) *min = lo[index][size_t(dim)];
    if (max) *max = hi[index][size_t(dim)];
  });
}

void fill_shapes(const std::vector<std::vector<int64_t>>& dims, aotpack_shape* out) {
  for (size_t i = 0; i < dims.size(); ++i) {
    std::memset(&out[i], 0, sizeof(out[i]));
    out[i].rank = int32_t(dims[i].size());
    for (size_t k = 0; k < dims[i].size(); ++k) out[i].dims[k] = dims[i][k];
  }
}

// Session options from a caller's (possibly older, shorter) struct. Zero means the default
// in every field, except in structs of the 0.1 layout (AOTPACK_SESSION_OPTIONS_V1_SIZE),
// whose third field was use_cuda_graph with 0 = off.
aotpack::Session::Options session_options(const aotpack_session_options* in) {
  static_assert(sizeof(aotpack_session_options) > AOTPACK_SESSION_OPTIONS_V1_SIZE,
                "a new options layout must be told apart from the 0.1 one by its size");
  aotpack_session_options o;
  std::memset(&o, 0, sizeof(o));
  bool v1 = false;
  if (in) {
    if (in->struct_size < sizeof(size_t))
      aotpack::fail(AOTPACK_INVALID_ARGUMENT, "aotpack_session_options.struct_size is not set");
    std::memcpy(&o, in, in->struct_size < sizeof(o) ? in->struct_size : sizeof(o));
    v1 = in->struct_size <= AOTPACK_SESSION_OPTIONS_V1_SIZE;
    if (v1) o.skip_pointer_checks = 0;  // padding in that layout: whatever bytes were there
  }
  if (o.max_cached_plans < 0)
    aotpack::fail(AOTPACK_INVALID_ARGUMENT, "aotpack_session_options.max_cached_plans is ",
                  o.max_cached_plans, ": use 0 (the default, 8) or a positive count");
  if (!v1 && (o.cuda_graphs < 0 || o.cuda_graphs > AOTPACK_CUDA_GRAPHS_OFF))
    aotpack::fail(AOTPACK_INVALID_ARGUMENT, "aotpack_session_options.cuda_graphs is ",
                  o.cuda_graphs, ": use AOTPACK_CUDA_GRAPHS_DEFAULT (0), _ON (1) or _OFF (2)");
  if (v1) o.state = o.state_bytes = 0;  // not in that layout
  aotpack::Session::Options so;
  so.workspace = o.workspace;
  so.workspace_bytes = o.workspace_bytes;
  so.state = o.state;
  so.state_bytes = o.state_bytes;
  so.use_cuda_graph = v1 ? o.cuda_graphs != 0 : o.cuda_graphs != AOTPACK_CUDA_GRAPHS_OFF;
  so.programmatic_launch = o.disable_programmatic_launch == 0;
  so.max_cached_plans = size_t(o.max_cached_plans);
  so.check_pointers = o.skip_pointer_checks == 0;
  return so;
}

// Copies `st` into the caller's stats struct, as much of it as the caller's struct_size holds.
void write_stats(const aotpack::GenerateStats& st, aotpack_generate_stats* out) {
  aotpack_generate_stats s;
  std::memset(&s, 0, sizeof(s));
  s.struct_size = out->struct_size;
  s.ttft_ms = st.ttft_ms;
  s.decode_ms = st.decode_ms;
  s.decode_steps = st.decode_steps;
  s.prompt_tokens = st.prompt_tokens;
  s.generated_tokens = st.generated_tokens;
  s.decode_tokens_per_s = st.decode_ms > 0 ? double(st.decode_tokens) * 1000.0 / st.decode_ms : 0;
  s.stopped_by_callback = st.stopped_by_callback ? 1 : 0;
  std::memcpy(out, &s, std::min(out->struct_size, sizeof(s)));
}

}  // namespace

extern "C" {

aotpack_code aotpack_status_code(const aotpack_status* s) { return s ? s->code : AOTPACK_OK; }

const char* aotpack_status_message(const aotpack_status* s) {
  return s ? s->message.c_str() : "OK";
}

const char* aotpack_status_code_name(int code) {
  static const char* const names[] = {
      "OK", "INVALID_ARGUMENT", "IO", "CORRUPT_BUNDLE", "UNSUPPORTED_VERSION",
      "CHECKSUM_MISMATCH", "WEIGHTS_MISMATCH", "DRIVER_NOT_FOUND", "DRIVER_TOO_OLD",
      "DEVICE_MISMATCH", "CUDA_ERROR", "OUT_OF_MEMORY", "INTERNAL"};
  if (code < 0 || code >= int(sizeof(names) / sizeof(names[0]))) return "UNKNOWN";
  return names[code];
}

void aotpack_status_free(aotpack_status* s) {
  if (s && s != &g_oom_status) delete s;
}

const char* aotpack_version(void) { return AOTPACK_VERSION_STRING; }

aotpack_status* aotpack_model_load(const char* path, const aotpack_model_options* options,
                                   aotpack_model** out) {
  if (out) *out = nullptr;
  return guard([&] {
    if (!path || !out) aotpack::fail(AOTPACK_INVALID_ARGUMENT, "path and out must not be NULL");
    aotpack_model_options o = model_options(options);
    std::unique_ptr<aotpack_model> h(new aotpack_model);
    h->impl = aotpack::Model::load(path, o.weights_path ? o.weights_path : "", o.device_ordinal,
                                   aotpack::verify_mode(o.verify, aotpack::Verify::Fast));
    *out = h.release();
  });
}

aotpack_status* aotpack_model_check_file(const char* path, const aotpack_model_options* options) {
  return guard([&] {
    if (!path) aotpack::fail(AOTPACK_INVALID_ARGUMENT, "path must not be NULL");
    aotpack_model_options o = model_options(options);
    aotpack::check_bundle(path, o.weights_path ? o.weights_path : "",
                          aotpack::verify_mode(o.verify, aotpack::Verify::Full));
  });
}

void aotpack_model_free(aotpack_model* model) {
  try {
    delete model;
  } catch (...) {
  }
}

size_t aotpack_model_num_inputs(const aotpack_model* m) {
  return m ? m->impl->manifest().inputs.size() : 0;
}
size_t aotpack_model_num_outputs(const aotpack_model* m) {
  return m ? m->impl->manifest().outputs.size() : 0;
}
aotpack_status* aotpack_model_input_info(const aotpack_model* m, size_t i,
                                         aotpack_tensor_info* info) {
  return tensor_info(m, i, info, true);
}
aotpack_status* aotpack_model_output_info(const aotpack_model* m, size_t i,
                                          aotpack_tensor_info* info) {
  return tensor_info(m, i, info, false);
}
uint64_t aotpack_model_arena_bytes(const aotpack_model* m) {
  return m ? m->impl->manifest().arena_bytes : 0;
}
size_t aotpack_model_num_kernels(const aotpack_model* m) {
  return m ? m->impl->manifest().kernels.size() : 0;
}
size_t aotpack_model_num_steps(const aotpack_model* m) {
  return m ? m->impl->manifest().steps.size() : 0;
}
const char* aotpack_model_kernel_name(const aotpack_model* m, size_t i) {
  if (!m || i >= m->impl->manifest().kernels.size()) return nullptr;
  return m->impl->manifest().kernels[i].name.c_str();
}
const char* aotpack_model_kernel_entry(const aotpack_model* m, size_t i) {
  if (!m || i >= m->impl->manifest().kernels.size()) return nullptr;
  return m->impl->manifest().kernels[i].entry.c_str();
}
int aotpack_model_device(const aotpack_model* m) { return m ? m->impl->device_ordinal() : -1; }

size_t aotpack_model_num_symbols(const aotpack_model* m) {
  return m ? m->impl->manifest().symbols.size() : 0;
}

aotpack_status* aotpack_model_symbol_info(const aotpack_model* m, size_t i,
                                          aotpack_symbol_info* info) {
  return guard([&] {
    if (!m || !info) aotpack::fail(AOTPACK_INVALID_ARGUMENT, "model and info must be set");
    const auto& syms = m->impl->manifest().symbols;
    if (i >= syms.size())
      aotpack::fail(AOTPACK_INVALID_ARGUMENT, "symbol index ", i, " out of range (the model has ",
                    syms.size(), " symbols)");
    info->name = syms[i].name.c_str();
    info->min = syms[i].min;
    info->max = syms[i].max;
    info->example = syms[i].example;
  });
}

aotpack_status* aotpack_model_input_dim(const aotpack_model* m, size_t i, int32_t dim,
                                        const char** expr, int64_t* min, int64_t* max) {
  return tensor_dim(m, i, dim, expr, min, max, true);
}

aotpack_status* aotpack_model_output_dim(const aotpack_model* m, size_t i, int32_t dim,
                                         const char** expr, int64_t* min, int64_t* max) {
  return tensor_dim(m, i, dim, expr, min, max, false);
}

aotpack_status* aotpack_model_output_shapes(const aotpack_model* m,
                                            const aotpack_shape* input_shapes, size_t num_inputs,
                                            aotpack_shape* output_shapes, size_t num_outputs) {
  return guard([&] {
    if (!m) aotpack::fail(AOTPACK_INVALID_ARGUMENT, "model must not be NULL");
    const aotpack::Manifest& man = m->impl->manifest();
    if (num_inputs != man.inputs.size() || num_outputs != man.outputs.size())
      aotpack::fail(AOTPACK_INVALID_ARGUMENT, "the model has ", man.inputs.size(), " inputs and ",
                    man.outputs.size(), " outputs, got num_inputs = ", num_inputs,
                    " and num_outputs = ", num_outputs);
    if ((!input_shapes && !man.inputs.empty() && !man.symbols.empty()) ||
        (!output_shapes && num_outputs))
      aotpack::fail(AOTPACK_INVALID_ARGUMENT, "output_shapes must not be NULL, nor input_shapes "
                    "for a model with symbols");
    std::shared_ptr<const aotpack::ShapePlan> plan = man.max_plan;
    if (input_shapes) {
      std::vector<int64_t> syms(man.symbols.size());
      aotpack::bind_symbols(man, input_shapes, syms.data());
      if (syms.empty()) aotpack::check_input_dims(man, *plan, input_shapes);
      else plan = aotpack::build_io_shapes(man, syms.data(), input_shapes);
    }
    fill_shapes(plan->outputs, output_shapes);
  });
}

aotpack_status* aotpack_session_create(aotpack_model* model,
                                       const aotpack_session_options* options,
                                       aotpack_session** out) {
  if (out) *out = nullptr;
  return guard([&] {
    if (!model || !out) aotpack::fail(AOTPACK_INVALID_ARGUMENT, "model and out must be set");
    aotpack::Session::Options so = session_options(options);
    std::unique_ptr<aotpack_session> h(new aotpack_session);
    h->impl.reset(new aotpack::Session(model->impl, so));
    *out = h.release();
  });
}

aotpack_status* aotpack_session_run(aotpack_session* session, const uint64_t* input_ptrs,
                                    const uint64_t* output_ptrs, void* stream) {
  return guard([&] {
    if (!session) aotpack::fail(AOTPACK_INVALID_ARGUMENT, "session must not be NULL");
    session->impl->run(input_ptrs, nullptr, output_ptrs,
                       static_cast<aotpack::cu::CUstream>(stream));
  });
}

aotpack_status* aotpack_session_run_shaped(aotpack_session* session, const uint64_t* input_ptrs,
                                           const aotpack_shape* input_shapes,
                                           const uint64_t* output_ptrs, void* stream) {
  return guard([&] {
    if (!session) aotpack::fail(AOTPACK_INVALID_ARGUMENT, "session must not be NULL");
    const aotpack::Manifest& m = session->impl->model().manifest();
    if (!input_shapes && !m.symbols.empty())
      aotpack::fail(AOTPACK_INVALID_ARGUMENT, "input_shapes must not be NULL: the model has "
                    "dims that vary at run time (symbols ", aotpack::symbol_names(m), ")");
    session->impl->run(input_ptrs, input_shapes, output_ptrs,
                       static_cast<aotpack::cu::CUstream>(stream));
  });
}

aotpack_status* aotpack_session_execute(aotpack_session* session, const uint64_t* input_ptrs,
                                        size_t num_inputs, const aotpack_shape* input_shapes,
                                        const uint64_t* output_ptrs, size_t num_outputs,
                                        aotpack_shape* output_shapes, void* stream) {
  return guard([&] {
    if (!session) aotpack::fail(AOTPACK_INVALID_ARGUMENT, "session must not be NULL");
    const aotpack::Manifest& m = session->impl->model().manifest();
    if (num_inputs != m.inputs.size() || num_outputs != m.outputs.size())
      aotpack::fail(AOTPACK_INVALID_ARGUMENT, "the model has ", m.inputs.size(), " inputs and ",
                    m.outputs.size(), " outputs, got num_inputs = ", num_inputs,
                    " and num_outputs = ", num_outputs);
    if (!input_shapes && !m.symbols.empty())
      aotpack::fail(AOTPACK_INVALID_ARGUMENT, "input_shapes must not be NULL: the model has "
                    "dims that vary at run time (symbols ", aotpack::symbol_names(m), ")");
    const aotpack::ShapePlan& plan = session->impl->run(
        input_ptrs, input_shapes, output_ptrs, static_cast<aotpack::cu::CUstream>(stream));
    if (output_shapes) fill_shapes(plan.outputs, output_shapes);
  });
}

size_t aotpack_model_num_states(const aotpack_model* m) {
  return m ? m->impl->manifest().state.size() : 0;
}

aotpack_status* aotpack_model_state_info(const aotpack_model* m, size_t i,
                                         aotpack_tensor_info* info) {
  return guard([&] {
    if (!m || !info) aotpack::fail(AOTPACK_INVALID_ARGUMENT, "model and info must be set");
    const auto& state = m->impl->manifest().state;
    if (i >= state.size())
      aotpack::fail(AOTPACK_INVALID_ARGUMENT, "state index ", i, " out of range (the model has ",
                    state.size(), " state buffers)");
    fill_info(state[i], info);
  });
}

uint64_t aotpack_model_state_bytes(const aotpack_model* m) {
  return m ? m->impl->manifest().state_bytes : 0;
}

aotpack_status* aotpack_model_generation_info(const aotpack_model* m,
                                              aotpack_generation_info* info) {
  return guard([&] {
    if (!m || !info) aotpack::fail(AOTPACK_INVALID_ARGUMENT, "model and info must be set");
    const aotpack::GenerationSpec& g = m->impl->manifest().generation;
    if (!g.present)
      aotpack::fail(AOTPACK_INVALID_ARGUMENT, "this bundle is not a text-generation bundle (its "
                    "manifest has no \"generation\" section)");
    info->max_batch = g.max_batch;
    info->max_seq_len = g.max_seq_len;
    info->vocab_size = g.vocab_size;
    info->num_eos_ids = g.eos_ids.size();
    info->eos_ids = g.eos_ids.empty() ? nullptr : g.eos_ids.data();
  });
}

aotpack_status* aotpack_session_reset_state(aotpack_session* session, void* stream) {
  return guard([&] {
    if (!session) aotpack::fail(AOTPACK_INVALID_ARGUMENT, "session must not be NULL");
    session->impl->reset_state(static_cast<aotpack::cu::CUstream>(stream));
  });
}

aotpack_status* aotpack_session_generate(aotpack_session* session, const int64_t* const* prompts,
                                         const size_t* prompt_lens, size_t batch,
                                         size_t max_new_tokens,
                                         const aotpack_generate_options* options,
                                         int64_t* out_tokens, size_t* out_counts,
                                         aotpack_generate_stats* stats, void* stream) {
  return guard([&] {
    if (!session) aotpack::fail(AOTPACK_INVALID_ARGUMENT, "session must not be NULL");
    aotpack::Session& s = *session->impl;
    aotpack::GenerateRequest r = aotpack::make_generate_request(
        s.model().manifest(), prompts, prompt_lens, batch, max_new_tokens, options, out_tokens,
        out_counts);
    if (stats && stats->struct_size < sizeof(size_t))
      aotpack::fail(AOTPACK_INVALID_ARGUMENT, "aotpack_generate_stats.struct_size is not set");
    auto cu_stream = static_cast<aotpack::cu::CUstream>(stream);
    s.model().make_current();
    aotpack::cu::CUstreamCaptureStatus cs = aotpack::cu::CU_STREAM_CAPTURE_STATUS_NONE;
    aotpack::cu::check(aotpack::cu::driver().cuStreamIsCapturing(cu_stream, &cs),
                       "cuStreamIsCapturing", "generate");
    if (cs != aotpack::cu::CU_STREAM_CAPTURE_STATUS_NONE)
      aotpack::fail(AOTPACK_INVALID_ARGUMENT, "the stream is being captured: generate "
                    "synchronizes it once per token and cannot run inside a CUDA graph capture");
    if (!s.generator()) s.generator().reset(new aotpack::Generator(s));
    aotpack::GenerateStats st = s.generator()->generate(r, cu_stream);
    if (stats) write_stats(st, stats);
  });
}

void aotpack_session_free(aotpack_session* session) {
  try {
    delete session;
  } catch (...) {
  }
}

}  // extern "C"
