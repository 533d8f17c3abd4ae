// session.hpp — per-thread execution state of a model: workspace, packed kernel parameters
// (with encoded tensor maps) cached per pointer set, and CUDA graphs replaying the steps.
#pragma once

#include <memory>
#include <vector>

#include "model.hpp"

namespace aotpack {

class Session {
 public:
  struct Options {
    uint64_t workspace = 0;  // caller-owned (0: allocate arena_bytes)
    uint64_t workspace_bytes = 0;
    bool use_cuda_graph = true;
    bool programmatic_launch = true;  // launch kernels marked pdl with PDL (see KernelSpec)
  };
  Session(std::shared_ptr<const Model> model, const Options& opts);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Enqueues all steps on `stream` (see aotpack_session_run).
  void run(const uint64_t* inputs, const uint64_t* outputs, cu::CUstream stream);
  const Model& model() const { return *model_; }

 private:
  // Kernel parameters for one (inputs, outputs) pointer set, ready to launch.
  struct Plan {
    std::vector<uint64_t> key;           // input pointers then output pointers
    std::vector<cu::CUtensorMap> storage;  // 128-aligned backing bytes of all parameters
    std::vector<std::vector<void*>> params;  // per step: kernelParams array into storage
    cu::CUgraphExec exec = nullptr;
    uint64_t last_used = 0;
  };

  Plan& plan_for(const uint64_t* inputs, const uint64_t* outputs);
  void build_plan(Plan& p, const uint64_t* inputs, const uint64_t* outputs);
  uint64_t buffer_address(uint32_t buffer, const uint64_t* inputs,
                          const uint64_t* outputs) const;
  void launch_steps(const Plan& p, cu::CUstream stream) const;
  void capture(Plan& p);
  void compute_layout();

  std::shared_ptr<const Model> model_;
  uint64_t workspace_ = 0;
  bool owns_workspace_ = false;
  bool use_graph_ = true;
  bool pdl_ = true;
  cu::CUstream capture_stream_ = nullptr;
  std::vector<std::unique_ptr<Plan>> cache_;
  uint64_t clock_ = 0;
  // Byte offset of every parameter slot inside Plan::storage, per step.
  std::vector<std::vector<size_t>> slot_offsets_;
  size_t storage_bytes_ = 0;
};

}  // namespace aotpack
