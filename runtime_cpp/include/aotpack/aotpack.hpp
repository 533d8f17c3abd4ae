// aotpack.hpp — header-only C++17 RAII wrapper of the C API (aotpack.h).
//
// Errors become aotpack::Exception on the C++ side (the C API itself never throws).
//
//   aotpack::Model model("model.aotpack");             // load + verify on device 0
//   aotpack::Session session(model);                    // workspace + CUDA graphs
//   session.run({x_ptr}, {y_ptr}, stream);              // async on `stream`
#ifndef AOTPACK_AOTPACK_HPP_
#define AOTPACK_AOTPACK_HPP_

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "aotpack/aotpack.h"

namespace aotpack {

// A failed C API call: code() is the aotpack_code, what() the message.
class Exception : public std::runtime_error {
 public:
  Exception(aotpack_code code, const std::string& message)
      : std::runtime_error(std::string(aotpack_status_code_name(code)) + ": " + message),
        code_(code), message_(message) {}
  aotpack_code code() const noexcept { return code_; }
  // The message without the code prefix.
  const std::string& message() const noexcept { return message_; }

 private:
  aotpack_code code_;
  std::string message_;
};

// Throws Exception if `status` is an error; always frees it.
inline void check(aotpack_status* status) {
  if (!status) return;
  aotpack_code code = aotpack_status_code(status);
  std::string message = aotpack_status_message(status);
  aotpack_status_free(status);
  throw Exception(code, message);
}

// Description of an input or output (copied out of the model).
struct TensorInfo {
  std::string name;
  aotpack_dtype dtype;
  std::string dtype_name;
  std::vector<int64_t> shape;
  uint64_t nbytes;
};

// Options of Model::Model / Model::check_file.
struct ModelOptions {
  std::string weights_path;  // empty: bundle's external_weights.file (if any)
  int device = 0;
};

// A loaded model (move-only). Immutable; share one Model between threads' Sessions.
class Model {
 public:
  explicit Model(const std::string& path, const ModelOptions& opts = ModelOptions()) {
    aotpack_model_options o = c_options(opts);
    check(aotpack_model_load(path.c_str(), &o, &handle_));
  }
  ~Model() { aotpack_model_free(handle_); }
  Model(Model&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  Model& operator=(Model&& other) noexcept {
    std::swap(handle_, other.handle_);
    return *this;
  }
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  // Verifies a bundle without a GPU or driver; throws Exception when invalid.
  static void check_file(const std::string& path, const ModelOptions& opts = ModelOptions()) {
    aotpack_model_options o = c_options(opts);
    check(aotpack_model_check_file(path.c_str(), &o));
  }

  std::vector<TensorInfo> inputs() const { return infos(true); }
  std::vector<TensorInfo> outputs() const { return infos(false); }
  uint64_t arena_bytes() const { return aotpack_model_arena_bytes(handle_); }
  size_t num_kernels() const { return aotpack_model_num_kernels(handle_); }
  size_t num_steps() const { return aotpack_model_num_steps(handle_); }
  aotpack_model* get() const { return handle_; }

 private:
  static aotpack_model_options c_options(const ModelOptions& opts) {
    aotpack_model_options o{};
    o.struct_size = sizeof(o);
    o.weights_path = opts.weights_path.empty() ? nullptr : opts.weights_path.c_str();
    o.device_ordinal = opts.device;
    return o;
  }
  std::vector<TensorInfo> infos(bool input) const {
    size_t n = input ? aotpack_model_num_inputs(handle_) : aotpack_model_num_outputs(handle_);
    std::vector<TensorInfo> out;
    for (size_t i = 0; i < n; ++i) {
      aotpack_tensor_info t;
      check(input ? aotpack_model_input_info(handle_, i, &t)
                  : aotpack_model_output_info(handle_, i, &t));
      out.push_back({t.name, t.dtype, t.dtype_name,
                     std::vector<int64_t>(t.dims, t.dims + t.rank), t.nbytes});
    }
    return out;
  }
  aotpack_model* handle_ = nullptr;
};

// Options of Session::Session.
struct SessionOptions {
  uint64_t workspace = 0;  // caller-owned device memory, 0: session allocates
  size_t workspace_bytes = 0;
  bool use_cuda_graph = true;
  bool programmatic_launch = true;  // see aotpack_session_options
};

// Per-thread execution state (move-only). Keeps the model alive.
class Session {
 public:
  explicit Session(const Model& model, const SessionOptions& opts = SessionOptions()) {
    aotpack_session_options o{};
    o.struct_size = sizeof(o);
    o.workspace = opts.workspace;
    o.workspace_bytes = opts.workspace_bytes;
    o.use_cuda_graph = opts.use_cuda_graph ? 1 : 0;
    o.disable_programmatic_launch = opts.programmatic_launch ? 0 : 1;
    check(aotpack_session_create(model.get(), &o, &handle_));
  }
  ~Session() { aotpack_session_free(handle_); }
  Session(Session&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  Session& operator=(Session&& other) noexcept {
    std::swap(handle_, other.handle_);
    return *this;
  }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Enqueues one inference on `stream` (CUstream, nullptr = legacy default stream).
  void run(const std::vector<uint64_t>& inputs, const std::vector<uint64_t>& outputs,
           void* stream = nullptr) {
    check(aotpack_session_run(handle_, inputs.data(), outputs.data(), stream));
  }
  aotpack_session* get() const { return handle_; }

 private:
  aotpack_session* handle_ = nullptr;
};

}  // namespace aotpack

#endif  // AOTPACK_AOTPACK_HPP_
