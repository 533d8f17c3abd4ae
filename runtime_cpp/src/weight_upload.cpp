// weight_upload.cpp — chunks of the weight stream copied to the device (weight_upload.hpp).
#include "weight_upload.hpp"

#include "error.hpp"

namespace aotpack {

DeviceUpload::DeviceUpload(const StreamPlan& plan, const std::vector<TensorSpec>& weights)
    : plan_(plan), weights_(weights), workers_(plan.workers) {}

void DeviceUpload::open(cu::CUcontext ctx, cu::CUdeviceptr base,
                        const std::vector<uint64_t>& offsets) {
  std::lock_guard<std::mutex> lock(mu_);
  ctx_ = ctx;
  base_ = base;
  offsets_ = &offsets;
  if (gate_ == Gate::Closed) gate_ = Gate::Open;
  cv_.notify_all();
}

void DeviceUpload::detach() {
  std::lock_guard<std::mutex> lock(mu_);
  if (gate_ != Gate::Cancelled) gate_ = Gate::Detached;
  cv_.notify_all();
}

void DeviceUpload::cancel() noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  gate_ = Gate::Cancelled;
  cv_.notify_all();
}

DeviceUpload::Gate DeviceUpload::gate() {
  std::lock_guard<std::mutex> lock(mu_);
  return gate_;
}

DeviceUpload::Gate DeviceUpload::wait_gate() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return gate_ != Gate::Closed; });
  // Only a stream being torn down cancels: nobody sees this error.
  if (gate_ == Gate::Cancelled) fail(AOTPACK_INTERNAL, "the weights' upload was cancelled");
  return gate_;
}

void DeviceUpload::upload(unsigned w, unsigned s, const uint8_t* data, const Chunk& c) {
  Worker& k = workers_[w];
  k.slot_data[s] = data;
  // Before the driver is up, a worker reads its first kSlots chunks and waits in reuse().
  k.pending.push_back(Pending{s, data, &c});
  if (gate() != Gate::Closed) flush(k);
}

void DeviceUpload::reuse(unsigned w, unsigned s) {
  Worker& k = workers_[w];
  for (const Pending& p : k.pending)
    if (p.slot == s) {
      flush(k);  // the chunk in the slot has not been handed to the device yet
      break;
    }
  if (!k.busy[s]) return;
  k.busy[s] = false;
  cu::check(cu::driver().cuEventSynchronize(k.events[s]), "cuEventSynchronize",
            "uploading the weights");
}

void DeviceUpload::finish(unsigned w) {
  Worker& k = workers_[w];
  try {
    flush(k);  // may throw (a stream, event or copy the driver refuses)
  } catch (...) {
    abandon(w);  // its copies end and its slots are unpinned before the ring goes
    throw;
  }
  end(k, gate() == Gate::Open);
}

void DeviceUpload::abandon(unsigned w) noexcept {
  Worker& k = workers_[w];
  k.pending.clear();
  try {
    end(k, false);
  } catch (...) {
    // the load fails with the error that made this worker stop
  }
}

void DeviceUpload::flush(Worker& k) {
  if (k.pending.empty()) return;
  if (wait_gate() == Gate::Detached) {
    k.pending.clear();
    return;
  }
  if (!k.started) begin(k);
  for (const Pending& p : k.pending) issue(k, p);
  k.pending.clear();
}

void DeviceUpload::begin(Worker& k) {
  const cu::Driver& d = cu::driver();
  cu::check(d.cuCtxSetCurrent(ctx_), "cuCtxSetCurrent", "uploading the weights");
  cu::check(d.cuStreamCreate(&k.stream, cu::CU_STREAM_NON_BLOCKING), "cuStreamCreate",
            "uploading the weights");
  k.started = true;  // from here on, end() cleans up
  for (cu::CUevent& e : k.events)
    cu::check(d.cuEventCreate(&e, cu::CU_EVENT_DISABLE_TIMING), "cuEventCreate",
              "uploading the weights");
}

void DeviceUpload::issue(Worker& k, const Pending& p) {
  const cu::Driver& d = cu::driver();
  Pin& pin = k.pin[p.slot];
  if (pin == Pin::Untried) {
    bool ok = d.cuMemHostRegister &&
              d.cuMemHostRegister(const_cast<uint8_t*>(p.data), size_t(plan_.slot_bytes), 0) ==
                  cu::CUDA_SUCCESS;
    pin = ok ? Pin::Pinned : Pin::Refused;
    ++(ok ? pinned_ : unpinned_);
  }
  const bool async = pin == Pin::Pinned;
  for (const Fragment& f : p.chunk->fragments) {
    const cu::CUdeviceptr dst = base_ + (*offsets_)[f.weight] + f.in_weight;
    const uint8_t* src = p.data + f.in_chunk;
    cu::CUresult r = async ? d.cuMemcpyHtoDAsync(dst, src, size_t(f.size), k.stream)
                           : d.cuMemcpyHtoD(dst, src, size_t(f.size));
    cu::check(r, async ? "cuMemcpyHtoDAsync" : "cuMemcpyHtoD",
              cat("uploading weight '", weights_[f.weight].name, "'"));
  }
  if (!async) return;
  cu::check(d.cuEventRecord(k.events[p.slot], k.stream), "cuEventRecord",
            "uploading the weights");
  k.busy[p.slot] = true;
}

void DeviceUpload::end(Worker& k, bool check) {
  if (!k.started) return;
  const cu::Driver& d = cu::driver();
  // Every copy must be over before its slot is unpinned (and the ring freed) or the weights'
  // allocation freed by a failed load.
  cu::CUresult r = d.cuStreamSynchronize(k.stream);
  for (unsigned s = 0; s < kSlots; ++s) {
    if (k.events[s]) d.cuEventDestroy(k.events[s]);
    if (k.pin[s] == Pin::Pinned) d.cuMemHostUnregister(const_cast<uint8_t*>(k.slot_data[s]));
    k.events[s] = nullptr;
    k.pin[s] = Pin::Untried;
    k.busy[s] = false;
  }
  d.cuStreamDestroy(k.stream);
  k.stream = nullptr;
  k.started = false;
  if (check) cu::check(r, "cuStreamSynchronize", "uploading the weights");
}

}  // namespace aotpack
