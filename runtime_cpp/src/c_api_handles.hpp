// c_api_handles.hpp — what the C API's translation units share: the opaque handles' contents
// and `guard`, which turns every C++ exception into an aotpack_status (nothing may escape).
#pragma once

#include <exception>
#include <memory>
#include <new>
#include <string>

#include "aotpack/aotpack.h"
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

namespace aotpack {
namespace capi {

// Returned when allocating a status itself fails; never freed.
inline aotpack_status g_oom_status{AOTPACK_OUT_OF_MEMORY, "out of host memory"};

inline aotpack_status* make_status(aotpack_code code, const char* message) {
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

}  // namespace capi
}  // namespace aotpack
