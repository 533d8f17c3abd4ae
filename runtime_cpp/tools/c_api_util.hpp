// c_api_util.hpp — aotpack-run's glue to the public C API (shared by the launcher and the
// tuning child): a status becomes an aotpack::Error, model and session are freed at scope exit,
// a model's signature as tensor infos, outputs copied back to the host.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <vector>

#include "aotpack/aotpack.h"
#include "cuda_driver.hpp"
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

// The model's inputs (input = true) or outputs, in signature order.
inline std::vector<aotpack_tensor_info> tensor_infos(aotpack_model* m, bool input) {
  size_t n = input ? aotpack_model_num_inputs(m) : aotpack_model_num_outputs(m);
  std::vector<aotpack_tensor_info> out(n);
  for (size_t i = 0; i < n; ++i)
    check_status(input ? aotpack_model_input_info(m, i, &out[i])
                       : aotpack_model_output_info(m, i, &out[i]));
  return out;
}

// Copies each output (device pointer ptrs[i]) to a host buffer of its size (synchronous).
inline std::vector<std::vector<uint8_t>> outputs_to_host(
    const std::vector<aotpack_tensor_info>& outs, const uint64_t* ptrs) {
  const aotpack::cu::Driver& d = aotpack::cu::driver();
  std::vector<std::vector<uint8_t>> host;
  for (size_t i = 0; i < outs.size(); ++i) {
    host.emplace_back(size_t(outs[i].nbytes));
    if (outs[i].nbytes)
      aotpack::cu::check(d.cuMemcpyDtoH(host.back().data(), ptrs[i], host.back().size()),
                         "cuMemcpyDtoH", aotpack::cat("output '", outs[i].name, "'"));
  }
  return host;
}

// After a run that succeeded: unless `teardown`, ends the process now without freeing the
// model, its sessions or the CUDA context: the driver and the OS reclaim them at exit anyway,
// and for a 2.4 GB model the teardown (device memory, unpinning the staging pages, the
// context) was 65-80 ms of the launcher's wall time after its last output. --teardown (and a
// sanitizer build, whose leak check runs at a normal exit) returns, and the caller frees all.
inline void end_run(bool teardown) {
#ifndef AOTPACK_SANITIZED
  if (teardown) return;
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(0);
#else
  (void)teardown;
#endif
}

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
