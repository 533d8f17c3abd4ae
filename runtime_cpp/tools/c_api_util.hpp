// c_api_util.hpp — aotpack-run's glue to the public C API (shared by the launcher and the
// tuning child): a status becomes an aotpack::Error, model and session are freed at scope exit.
#pragma once

#include "aotpack/aotpack.h"
#include "error.hpp"

namespace aotpack_run {

// Throws the status as aotpack::Error (code + message) and frees it; NULL is success.
inline void check_status(aotpack_status* s) {
  if (!s) return;
  aotpack::Error e(aotpack_status_code(s), aotpack_status_message(s));
  aotpack_status_free(s);
  throw e;
}

struct ModelHandle {
  aotpack_model* m = nullptr;
  aotpack_session* s = nullptr;
  ModelHandle() = default;
  ModelHandle(const ModelHandle&) = delete;
  ModelHandle& operator=(const ModelHandle&) = delete;
  ~ModelHandle() {
    aotpack_session_free(s);
    aotpack_model_free(m);
  }
};

}  // namespace aotpack_run
