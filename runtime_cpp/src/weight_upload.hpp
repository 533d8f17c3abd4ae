// weight_upload.hpp — the weight stream's sink on the device: each worker copies the chunks it
// read from its own pinned ring slots into the weights' allocation, on a stream of its own,
// while it reads the next chunk into its other slot.
//
// Why a small pinned staging ring (workers × 2 slots of a chunk, 32 MiB by default) rather
// than pinning the host copy of the weights in pieces (H200 host, benchmarks/results/
// 2026-12-02-h200-cold-start.json):
// - pinning costs time per page: cuMemHostRegister ~17 GB/s (140 ms for 2.4 GB) inside the
//   driver, which serializes it, and only once the driver is up; the ring is pinned once, a
//   few ms, and then every byte costs one read from the page cache into pages already faulted
//   and pinned (~3 GB/s per thread, in parallel: 23.6 GB/s on 8 threads), not a page fault,
//   a zero-fill and a pin (fresh pages read at 7.7 GB/s);
// - cuMemHostAlloc pins fresh pages at ~1.6 GB/s (2.5 GiB: 1.5 s), so the ring is anonymous
//   memory pinned with cuMemHostRegister instead;
// - a copy from pinned memory is a DMA at ~55 GB/s that runs while the worker reads on; from
//   pageable memory it goes through the driver's own staging at ~7 GB/s;
// - host memory is the ring (and what is read ahead while the driver starts, weight_stream.hpp),
//   not the weights' size, and nothing big is unpinned after the upload (the whole 2.4 GB host
//   copy used to be unpinned and unmapped inside the load).
// Where pinning is refused (or the driver lacks cuMemHostRegister), a slot's chunks are copied
// synchronously from pageable memory: slower, same result.
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <vector>

#include "cuda_driver.hpp"
#include "manifest.hpp"
#include "weight_stream.hpp"

namespace aotpack {

class DeviceUpload final : public ChunkSink {
 public:
  // `weights` (the manifest's) name weights in errors; both must outlive the upload.
  DeviceUpload(const StreamPlan& plan, const std::vector<TensorSpec>& weights);
  // The device side is ready: weight i goes to base + offsets[i] in `ctx`. Releases workers
  // waiting to upload.
  void open(cu::CUcontext ctx, cu::CUdeviceptr base, const std::vector<uint64_t>& offsets);
  // The load will fail (the driver or the device did): workers drop their chunks but still
  // read and checksum them, so a bundle error is the one reported.
  void detach();
  // Slots pinned so far, and slots that could not be (for the load trace).
  unsigned pinned_slots() const { return pinned_; }
  unsigned unpinned_slots() const { return unpinned_; }

  bool ready() override { return gate() != Gate::Closed; }
  void reuse(unsigned w, unsigned s) override;
  void upload(unsigned w, unsigned s, const uint8_t* data, const Chunk& c) override;
  void finish(unsigned w) override;
  void abandon(unsigned w) noexcept override;
  void cancel() noexcept override;

 private:
  static constexpr unsigned kSlots = StreamPlan::kSlots;
  enum class Gate { Closed, Open, Detached, Cancelled };
  enum class Pin { Untried, Pinned, Refused };
  struct Pending {
    unsigned slot;
    const uint8_t* data;
    const Chunk* chunk;
  };
  // One worker's device state; only that worker's thread touches it.
  struct Worker {
    bool started = false;
    cu::CUstream stream = nullptr;
    cu::CUevent events[kSlots] = {};
    const uint8_t* slot_data[kSlots] = {};
    Pin pin[kSlots] = {};
    bool busy[kSlots] = {};   // an async copy from the slot may still be running
    std::vector<Pending> pending;  // read before the device was ready
  };

  Gate gate();
  Gate wait_gate();  // blocks while Closed; throws when Cancelled
  void flush(Worker& k);
  void begin(Worker& k);
  void issue(Worker& k, const Pending& p);
  void end(Worker& k, bool check);

  const StreamPlan& plan_;
  const std::vector<TensorSpec>& weights_;
  std::vector<Worker> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  Gate gate_ = Gate::Closed;
  cu::CUcontext ctx_ = nullptr;  // written before the gate opens, read after
  cu::CUdeviceptr base_ = 0;
  const std::vector<uint64_t>* offsets_ = nullptr;
  std::atomic<unsigned> pinned_{0}, unpinned_{0};
};

}  // namespace aotpack
