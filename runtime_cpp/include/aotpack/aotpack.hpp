// aotpack.hpp — header-only C++17 RAII wrapper of the C API (aotpack.h).
//
// Errors become aotpack::Exception on the C++ side (the C API itself never throws).
//
//   aotpack::Model model("model.aotpack");             // load + verify on device 0
//   aotpack::Session session(model);                    // workspace + CUDA graphs
//   session.run({x_ptr}, {y_ptr}, stream);              // async on `stream`
//
// A model whose dims vary at run time (bundle v2, model.symbols() not empty) runs with the
// input shapes; output_shapes() says how large the outputs are:
//   auto outs = model.output_shapes({{2, 128}});
//   session.run({ids_ptr}, {{2, 128}}, {logits_ptr}, stream);
//
// A text-generation bundle (docs/generation.md) runs its whole token loop in one call:
//   aotpack::GenerateResult r = session.generate({{1, 15043, 3186}}, 256);
//   // r.tokens[0]: the new ids; r.stats.ttft_ms, r.stats.decode_tokens_per_s
#ifndef AOTPACK_AOTPACK_HPP_
#define AOTPACK_AOTPACK_HPP_

#include <cstdint>
#include <exception>
#include <functional>
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

// Version of the loaded runtime library ("0.2.0"); AOTPACK_VERSION_STRING is the header's.
inline std::string version() { return aotpack_version(); }

// The dims of one tensor, outermost first.
using Shape = std::vector<int64_t>;

// One dim of an input or output: its expression over the symbols ("2*S"; empty when static)
// and its value with every symbol at its min / at its max.
struct DimInfo {
  std::string expr;
  int64_t min = 0, max = 0;
  bool is_static() const { return expr.empty(); }
};

// Description of an input or output (copied out of the model).
struct TensorInfo {
  std::string name;
  aotpack_dtype dtype;
  std::string dtype_name;
  Shape shape;                // -1 for a dim that varies at run time
  uint64_t nbytes;            // at every symbol's max for a tensor with such dims
  std::vector<DimInfo> dims;  // per dim: expression and range
};

// A symbol of a model with dims that vary at run time: in [min, max]; example -1 if none.
struct SymbolInfo {
  std::string name;
  int64_t min, max, example;
};

// What a generation bundle accepts (aotpack_generation_info, copied).
struct GenerationInfo {
  int64_t max_batch = 0, max_seq_len = 0, vocab_size = 0;
  std::vector<int64_t> eos_ids;
};

// Options of Session::generate (aotpack_generate_options; the defaults are greedy).
struct GenerateOptions {
  float temperature = 0.0f;  // 0: greedy
  int top_k = 0;             // 0: all tokens
  float top_p = 1.0f;        // (0, 1]
  uint64_t seed = 0;
  std::vector<int64_t> stop_ids;  // besides the model's eos ids
  bool ignore_eos = false;
  // Called per new token (sequence, token, step); return false to stop generating.
  std::function<bool(size_t, int64_t, size_t)> on_token;
};

// Session::generate's result: tokens[i] = sequence i's new ids; stats as the C API fills them.
struct GenerateResult {
  std::vector<std::vector<int64_t>> tokens;
  aotpack_generate_stats stats;
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

  // The state buffers (e.g. the KV cache) each session allocates, and their device bytes.
  std::vector<TensorInfo> states() const {
    std::vector<TensorInfo> out;
    for (size_t i = 0; i < aotpack_model_num_states(handle_); ++i) {
      aotpack_tensor_info t;
      check(aotpack_model_state_info(handle_, i, &t));
      out.push_back({t.name, t.dtype, t.dtype_name, Shape(t.dims, t.dims + t.rank), t.nbytes,
                     {}});
      for (int32_t k = 0; k < t.rank; ++k) out.back().dims.push_back({"", t.dims[k], t.dims[k]});
    }
    return out;
  }
  uint64_t state_bytes() const { return aotpack_model_state_bytes(handle_); }

  // A generation bundle's limits; throws Exception (INVALID_ARGUMENT) for any other bundle.
  GenerationInfo generation_info() const {
    aotpack_generation_info g;
    check(aotpack_model_generation_info(handle_, &g));
    return {g.max_batch, g.max_seq_len, g.vocab_size,
            std::vector<int64_t>(g.eos_ids, g.eos_ids + g.num_eos_ids)};
  }

  // The symbols (empty for a model whose shapes are all static).
  std::vector<SymbolInfo> symbols() const {
    std::vector<SymbolInfo> out;
    for (size_t i = 0; i < aotpack_model_num_symbols(handle_); ++i) {
      aotpack_symbol_info s;
      check(aotpack_model_symbol_info(handle_, i, &s));
      out.push_back({s.name, s.min, s.max, s.example});
    }
    return out;
  }

  // The output shapes for these input shapes (checked as a run checks them).
  std::vector<Shape> output_shapes(const std::vector<Shape>& inputs) const {
    std::vector<aotpack_shape> in = c_shapes(inputs);
    std::vector<aotpack_shape> out(aotpack_model_num_outputs(handle_));
    check(aotpack_model_output_shapes(handle_, in.data(), in.size(), out.data(), out.size()));
    std::vector<Shape> result;
    for (const aotpack_shape& s : out) result.emplace_back(s.dims, s.dims + s.rank);
    return result;
  }

  // C shapes of `shapes`; INVALID_ARGUMENT for a rank above AOTPACK_MAX_RANK.
  static std::vector<aotpack_shape> c_shapes(const std::vector<Shape>& shapes) {
    std::vector<aotpack_shape> out(shapes.size());
    for (size_t i = 0; i < shapes.size(); ++i) {
      if (shapes[i].size() > AOTPACK_MAX_RANK)
        throw Exception(AOTPACK_INVALID_ARGUMENT, "shape " + std::to_string(i) + " has rank " +
                        std::to_string(shapes[i].size()) + ", more than AOTPACK_MAX_RANK");
      out[i] = aotpack_shape{};
      out[i].rank = int32_t(shapes[i].size());
      for (size_t k = 0; k < shapes[i].size(); ++k) out[i].dims[k] = shapes[i][k];
    }
    return out;
  }

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
      TensorInfo info{t.name, t.dtype, t.dtype_name, Shape(t.dims, t.dims + t.rank), t.nbytes,
                      {}};
      for (int32_t k = 0; k < t.rank; ++k) {
        const char* expr = nullptr;
        DimInfo d;
        check(input ? aotpack_model_input_dim(handle_, i, k, &expr, &d.min, &d.max)
                    : aotpack_model_output_dim(handle_, i, k, &expr, &d.min, &d.max));
        d.expr = expr ? expr : "";
        info.dims.push_back(d);
      }
      out.push_back(std::move(info));
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
  int max_cached_plans = 0;         // 0: the default (8)
  bool check_pointers = true;       // see aotpack_session_options.skip_pointer_checks
};

// Per-thread execution state (move-only). Keeps the model alive.
class Session {
 public:
  explicit Session(const Model& model, const SessionOptions& opts = SessionOptions()) {
    aotpack_session_options o{};
    o.struct_size = sizeof(o);
    o.workspace = opts.workspace;
    o.workspace_bytes = opts.workspace_bytes;
    o.cuda_graphs = opts.use_cuda_graph ? AOTPACK_CUDA_GRAPHS_ON : AOTPACK_CUDA_GRAPHS_OFF;
    o.disable_programmatic_launch = opts.programmatic_launch ? 0 : 1;
    o.max_cached_plans = opts.max_cached_plans;
    o.skip_pointer_checks = opts.check_pointers ? 0 : 1;
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
    check(aotpack_session_execute(handle_, inputs.data(), inputs.size(), nullptr,
                                  outputs.data(), outputs.size(), nullptr, stream));
  }
  // The same with the shape of every input (needed when the model has symbols).
  void run(const std::vector<uint64_t>& inputs, const std::vector<Shape>& input_shapes,
           const std::vector<uint64_t>& outputs, void* stream = nullptr) {
    if (input_shapes.size() != inputs.size())
      throw Exception(AOTPACK_INVALID_ARGUMENT, "got " + std::to_string(inputs.size()) +
                      " input pointers but " + std::to_string(input_shapes.size()) + " shapes");
    std::vector<aotpack_shape> shapes = Model::c_shapes(input_shapes);
    check(aotpack_session_execute(handle_, inputs.data(), inputs.size(), shapes.data(),
                                  outputs.data(), outputs.size(), nullptr, stream));
  }
  // Generates up to max_new_tokens tokens per prompt (aotpack_session_generate) and waits.
  GenerateResult generate(const std::vector<std::vector<int64_t>>& prompts,
                          size_t max_new_tokens, const GenerateOptions& opts = GenerateOptions(),
                          void* stream = nullptr) {
    std::vector<const int64_t*> ptrs;
    std::vector<size_t> lens;
    for (const auto& p : prompts) {
      ptrs.push_back(p.data());
      lens.push_back(p.size());
    }
    aotpack_generate_options o{};
    o.struct_size = sizeof(o);
    o.temperature = opts.temperature;
    o.top_k = opts.top_k;
    o.top_p = opts.top_p;
    o.seed = opts.seed;
    o.stop_ids = opts.stop_ids.empty() ? nullptr : opts.stop_ids.data();
    o.num_stop_ids = opts.stop_ids.size();
    o.ignore_eos = opts.ignore_eos ? 1 : 0;
    Streaming streaming{&opts.on_token, nullptr};
    if (opts.on_token) {
      o.on_token = &Streaming::call;
      o.user_data = &streaming;
    }
    std::vector<int64_t> tokens(prompts.size() * max_new_tokens);
    std::vector<size_t> counts(prompts.size());
    GenerateResult r;
    r.stats = aotpack_generate_stats{};
    r.stats.struct_size = sizeof(r.stats);
    aotpack_status* st = aotpack_session_generate(handle_, ptrs.data(), lens.data(),
                                                  prompts.size(), max_new_tokens, &o,
                                                  tokens.data(), counts.data(), &r.stats, stream);
    if (streaming.error) {
      aotpack_status_free(st);
      std::rethrow_exception(streaming.error);  // the callback's own exception
    }
    check(st);
    for (size_t i = 0; i < prompts.size(); ++i)
      r.tokens.emplace_back(tokens.begin() + long(i * max_new_tokens),
                            tokens.begin() + long(i * max_new_tokens + counts[i]));
    return r;
  }

  // Zeroes the state buffers (e.g. the KV cache) on `stream`.
  void reset_state(void* stream = nullptr) {
    check(aotpack_session_reset_state(handle_, stream));
  }

  aotpack_session* get() const { return handle_; }

 private:
  // Carries GenerateOptions::on_token through the C callback; an exception it throws stops
  // the generation and is rethrown by generate().
  struct Streaming {
    const std::function<bool(size_t, int64_t, size_t)>* fn;
    std::exception_ptr error;
    static int call(void* self, size_t seq, int64_t token, size_t step) {
      Streaming* s = static_cast<Streaming*>(self);
      try {
        return (*s->fn)(seq, token, step) ? 0 : 1;
      } catch (...) {
        s->error = std::current_exception();
        return 1;
      }
    }
  };
  aotpack_session* handle_ = nullptr;
};

}  // namespace aotpack

#endif  // AOTPACK_AOTPACK_HPP_
