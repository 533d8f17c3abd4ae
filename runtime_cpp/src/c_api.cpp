// c_api.cpp — the C API boundary: converts C++ exceptions into aotpack_status objects and
// opaque handles into internal objects. Nothing thrown inside may escape from here.
#include <cstring>
#include <new>
#include <string>

#include "aotpack/aotpack.h"
#include "bundle.hpp"
#include "dtype.hpp"
#include "error.hpp"
#include "model.hpp"
#include "session.hpp"

struct aotpack_status {
  aotpack_code code;
  std::string message;
};

// Handles hold a shared reference so sessions can outlive the caller's model handle.
struct aotpack_model {
  std::shared_ptr<const aotpack::Model> impl;
};

struct aotpack_session {
  std::unique_ptr<aotpack::Session> impl;
};

namespace {

// Returned when allocating a status itself fails; never freed.
aotpack_status g_oom_status{AOTPACK_OUT_OF_MEMORY, "out of host memory"};

aotpack_status* make_status(aotpack_code code, const char* message) {
  try {
    return new aotpack_status{code, message};
  } catch (...) {
    return &g_oom_status;
  }
}

// Runs `fn`, mapping every exception to a status (NULL on success).
template <typename Fn>
aotpack_status* guard(Fn&& fn) {
  try {
    fn();
    return nullptr;
  } catch (const aotpack::Error& e) {
    return make_status(e.code(), e.what());
  } catch (const std::bad_alloc&) {
    return make_status(AOTPACK_OUT_OF_MEMORY, "out of host memory");
  } catch (const std::exception& e) {
    return make_status(AOTPACK_INTERNAL, (std::string("internal error: ") + e.what()).c_str());
  } catch (...) {
    return make_status(AOTPACK_INTERNAL, "internal error: unknown exception");
  }
}

// Reads a versioned options struct: fields beyond the caller's struct_size keep defaults.
aotpack_model_options model_options(const aotpack_model_options* in) {
  aotpack_model_options o;
  std::memset(&o, 0, sizeof(o));
  o.struct_size = sizeof(o);
  if (in) {
    if (in->struct_size < sizeof(size_t))
      aotpack::fail(AOTPACK_INVALID_ARGUMENT, "aotpack_model_options.struct_size is not set");
    std::memcpy(&o, in, in->struct_size < sizeof(o) ? in->struct_size : sizeof(o));
  }
  return o;
}

void fill_info(const aotpack::TensorSpec& t, aotpack_tensor_info* info) {
  std::memset(info, 0, sizeof(*info));
  info->name = t.name.c_str();
  info->dtype = t.dtype;
  info->dtype_name = aotpack::dtype_manifest_name(t.dtype);
  info->rank = int32_t(t.shape.size());
  for (size_t i = 0; i < t.shape.size() && i < AOTPACK_MAX_RANK; ++i) info->dims[i] = t.shape[i];
  info->nbytes = t.nbytes;
}

aotpack_status* tensor_info(const aotpack_model* model, size_t index, aotpack_tensor_info* info,
                            bool input) {
  return guard([&] {
    if (!model || !info) aotpack::fail(AOTPACK_INVALID_ARGUMENT, "model and info must be set");
    const auto& list = input ? model->impl->manifest().inputs : model->impl->manifest().outputs;
    if (index >= list.size())
      aotpack::fail(AOTPACK_INVALID_ARGUMENT, input ? "input" : "output", " index ", index,
                    " out of range (", list.size(), ")");
    fill_info(list[index], info);
  });
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

const char* aotpack_version(void) { return "0.1.0"; }

aotpack_status* aotpack_model_load(const char* path, const aotpack_model_options* options,
                                   aotpack_model** out) {
  if (out) *out = nullptr;
  return guard([&] {
    if (!path || !out) aotpack::fail(AOTPACK_INVALID_ARGUMENT, "path and out must not be NULL");
    aotpack_model_options o = model_options(options);
    std::unique_ptr<aotpack_model> h(new aotpack_model);
    h->impl = aotpack::Model::load(path, o.weights_path ? o.weights_path : "", o.device_ordinal);
    *out = h.release();
  });
}

aotpack_status* aotpack_model_check_file(const char* path, const aotpack_model_options* options) {
  return guard([&] {
    if (!path) aotpack::fail(AOTPACK_INVALID_ARGUMENT, "path must not be NULL");
    aotpack_model_options o = model_options(options);
    aotpack::open_bundle(path, o.weights_path ? o.weights_path : "");
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

aotpack_status* aotpack_session_create(aotpack_model* model,
                                       const aotpack_session_options* options,
                                       aotpack_session** out) {
  if (out) *out = nullptr;
  return guard([&] {
    if (!model || !out) aotpack::fail(AOTPACK_INVALID_ARGUMENT, "model and out must be set");
    aotpack_session_options o;
    std::memset(&o, 0, sizeof(o));
    o.use_cuda_graph = 1;
    if (options) {
      if (options->struct_size < sizeof(size_t))
        aotpack::fail(AOTPACK_INVALID_ARGUMENT, "aotpack_session_options.struct_size is not set");
      std::memcpy(&o, options, options->struct_size < sizeof(o) ? options->struct_size : sizeof(o));
    }
    aotpack::Session::Options so;
    so.workspace = o.workspace;
    so.workspace_bytes = o.workspace_bytes;
    so.use_cuda_graph = o.use_cuda_graph != 0;
    so.programmatic_launch = o.disable_programmatic_launch == 0;
    std::unique_ptr<aotpack_session> h(new aotpack_session);
    h->impl.reset(new aotpack::Session(model->impl, so));
    *out = h.release();
  });
}

aotpack_status* aotpack_session_run(aotpack_session* session, const uint64_t* input_ptrs,
                                    const uint64_t* output_ptrs, void* stream) {
  return guard([&] {
    if (!session) aotpack::fail(AOTPACK_INVALID_ARGUMENT, "session must not be NULL");
    session->impl->run(input_ptrs, output_ptrs, static_cast<aotpack::cu::CUstream>(stream));
  });
}

void aotpack_session_free(aotpack_session* session) {
  try {
    delete session;
  } catch (...) {
  }
}

}  // extern "C"
