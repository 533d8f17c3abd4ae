// c_api_util.hpp — aotpack-run's glue to the public C API (shared by the launcher and the
// tuning child): a status becomes an aotpack::Error, model and session are freed at scope exit.
#pragma once

#include <cstdio>
#include <exception>

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

// Runs `body` (returns an exit code); an error escaping it becomes the launcher's one-line
// message ("aotpack-run: error: CODE: what") and exit code 1.
template <typename F>
int exit_code_of(F&& body) {
  try {
    return body();
  } catch (const aotpack::Error& e) {
    std::fprintf(stderr, "aotpack-run: error: %s: %s\n", aotpack_status_code_name(e.code()),
                 e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "aotpack-run: error: %s\n", e.what());
  }
  return 1;
}

}  // namespace aotpack_run
