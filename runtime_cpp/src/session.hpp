// session.hpp — per-thread execution state of a model: workspace, packed kernel parameters
// (with encoded tensor maps) cached per (shape, pointer set), and CUDA graphs replaying the
// steps.
#pragma once

#include <memory>
#include <vector>

#include "model.hpp"
#include "shape_plan.hpp"

namespace aotpack {

class Generator;  // generate.hpp

class Session {
 public:
  struct Options {
    uint64_t workspace = 0;  // caller-owned (0: allocate arena_bytes)
    uint64_t workspace_bytes = 0;
    uint64_t state = 0;  // caller-owned state memory (0: the session allocates it)
    uint64_t state_bytes = 0;
    bool use_cuda_graph = true;
    bool programmatic_launch = true;  // launch kernels marked pdl with PDL (see KernelSpec)
    size_t max_cached_plans = 8;      // (shape, pointer set) plans kept, LRU evicted
    bool check_pointers = true;       // ask the driver whether new pointers are device memory
  };
  // Allocates the workspace (unless the caller passed one) and the state buffers, zeroed.
  Session(std::shared_ptr<const Model> model, const Options& opts);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Enqueues all steps on `stream` (see aotpack_session_run_shaped). `shapes` (one per input)
  // may be nullptr only when the model has no symbols. `graph` false launches the steps
  // directly even with graphs on (a run of a shape met once, e.g. a prefill: capturing it
  // would cost more than it saves).
  // Returns the shape plan of the run (its output shapes).
  const ShapePlan& run(const uint64_t* inputs, const aotpack_shape* shapes,
                       const uint64_t* outputs, cu::CUstream stream, bool graph = true);
  // Zeroes every state buffer, in order on `stream`.
  void reset_state(cu::CUstream stream);
  const Model& model() const { return *model_; }
  // The token loop's buffers and scratch (generate.cpp), made at the first generate call.
  std::unique_ptr<Generator>& generator() { return generator_; }

 private:
  // Kernel parameters for one (shape, inputs, outputs), ready to launch.
  struct Plan {
    std::vector<uint64_t> key;  // symbol values, then input pointers, then output pointers
    std::shared_ptr<const ShapePlan> shape;
    std::vector<cu::CUtensorMap> storage;    // 128-aligned backing bytes of all parameters
    std::vector<std::vector<void*>> params;  // per shape->steps[i]: kernelParams into storage
    cu::CUgraphExec exec = nullptr;
    uint64_t last_used = 0;
  };

  Plan& plan_for(const uint64_t* inputs, const aotpack_shape* shapes, const uint64_t* outputs);
  Plan* find_plan(const uint64_t* inputs, const uint64_t* outputs);
  std::shared_ptr<const ShapePlan> shape_plan(const aotpack_shape* shapes);
  void check_pointers(const ShapePlan& sp, const uint64_t* inputs, const uint64_t* outputs) const;
  void build_params(Plan& p, const uint64_t* inputs, const uint64_t* outputs);
  uint64_t buffer_address(uint32_t buffer, const uint64_t* inputs,
                          const uint64_t* outputs) const;
  void launch_steps(const Plan& p, cu::CUstream stream) const;
  void capture(Plan& p);
  void launch(Plan& p, cu::CUstream stream, bool graph);
  void allocate_state(const Options& opts);
  uint64_t state_address() const { return caller_state_ ? caller_state_ : state_; }
  void evict_lru();

  std::shared_ptr<const Model> model_;
  uint64_t workspace_ = 0;
  bool owns_workspace_ = false;
  uint64_t state_ = 0;  // one allocation holding every state buffer (Manifest::state_offsets)
  uint64_t caller_state_ = 0;  // or the caller's memory (aotpack_session_options.state)
  uint64_t counters_ = 0;  // Manifest::counters_bytes, zeroed; kernels leave them zero
  bool use_graph_ = true;
  bool pdl_ = true;
  bool check_ptrs_ = true;
  size_t max_plans_ = 8;
  cu::CUstream capture_stream_ = nullptr;
  std::vector<std::unique_ptr<Plan>> cache_;
  uint64_t clock_ = 0;
  std::vector<int64_t> syms_;  // symbol values of the current run (sized once: no allocation)
  std::unique_ptr<Generator> generator_;
};

}  // namespace aotpack
