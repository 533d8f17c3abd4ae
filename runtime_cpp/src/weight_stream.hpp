// weight_stream.hpp — the weights read in chunks by several threads, each chunk checksummed
// while it is still in the cache and handed to a sink (the device upload) while the next ones
// are read: a load's read, verification and upload overlap piece by piece instead of running
// one after the other over the whole file (docs/manifest.md "Verification").
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "host_pages.hpp"
#include "safetensors.hpp"

namespace aotpack {

// Where the weights' bytes are: a file (read by ranges, or copied from memory once its
// contents are loaded) and each weight's absolute offset and size, by weight index.
struct WeightSource {
  const SafetensorsFile* file = nullptr;
  std::vector<uint64_t> offset, size;
};

// A piece of one weight inside a chunk. `in_weight` is a multiple of 8, so a piece's checksum
// words are the weight's own (checksum64_partial).
struct Fragment {
  uint32_t weight = 0;
  uint64_t in_weight = 0, in_chunk = 0, size = 0;
};

// A contiguous range of the file, read at once, holding pieces of one or more weights (the
// few padding bytes between neighbours are read along).
struct Chunk {
  uint64_t offset = 0, size = 0;
  std::vector<Fragment> fragments;
};

// Cuts the weights into chunks of at most `chunk_bytes` (>= 8) in file order; a weight split
// between chunks is split at a multiple of 8 bytes from its start.
std::vector<Chunk> plan_chunks(const WeightSource& src, uint64_t chunk_bytes);

// How many threads read, how big a chunk is, and how much may be read ahead while the driver
// starts (see WeightStream): the defaults, or AOTPACK_LOAD_THREADS (1-64),
// AOTPACK_LOAD_CHUNK_KIB (4 KiB - 1 GiB) and AOTPACK_LOAD_EARLY_MIB (0 - 1 TiB, 0: none) from
// the environment, so a host can be measured with other values without a rebuild (values
// outside those ranges are ignored).
struct StreamOptions {
  // (at most one per hardware thread and one per chunk.) Measured on the H200 host (16 cores,
  // 2.4 GB from a warm page cache, benchmarks/results/2026-12-04-h200-coldstart-stream.json):
  // 16 threads read it in ~60 ms once the driver is up, 8 in ~90 ms, 4 in ~180 ms.
  unsigned threads = 16;
  uint64_t chunk_bytes = 2ull << 20;
  // At most 2 GiB and an eighth of the machine's memory, and only when most of the weights are
  // not in the page cache (a read from disk, ~1.6 GB/s on the H200 host: reading ahead while
  // the driver starts saved ~0.3 s of 1.8 s there). From the page cache it is not worth it:
  // 2 GiB of fresh pages filled while the driver started delayed the driver by 50-100 ms
  // (first output 273 ms without, 339 with), more than the reads it saved.
  uint64_t early_bytes = 2ull << 30;
  bool early_when_cached = false;  // AOTPACK_LOAD_EARLY_MIB given: read ahead anyway
  static StreamOptions from_env();
};

// The chunks and the staging ring's shape: `workers` threads, each with kSlots slots of
// `slot_bytes` (a multiple of the page size: the sink may pin each slot).
struct StreamPlan {
  static constexpr unsigned kSlots = 2;
  const SafetensorsFile* file = nullptr;
  std::vector<uint64_t> sizes;  // by weight
  std::vector<Chunk> chunks;
  unsigned workers = 0;
  uint64_t slot_bytes = 0;
  uint64_t early_bytes = 0;  // a multiple of slot_bytes, at most one per chunk
};
StreamPlan plan_stream(const WeightSource& src, const StreamOptions& options);

// Where the workers' chunks go. Worker w's calls come from one thread, in this order: for each
// chunk, reuse (from its kSlots-th chunk on) then upload; then finish, or abandon on an error.
class ChunkSink {
 public:
  virtual ~ChunkSink() = default;
  // True once upload() passes chunks on at once (the device is ready). While false, the
  // stream may read chunks ahead into memory of its own and hand them over later.
  virtual bool ready() = 0;
  // Worker w is about to overwrite slot s: returns once the slot's last upload has read it.
  virtual void reuse(unsigned w, unsigned s) = 0;
  // Slot s (at `data`, slot_bytes long, the same address every time) holds chunk c, read and
  // checksummed: upload it, now or once the device is ready.
  virtual void upload(unsigned w, unsigned s, const uint8_t* data, const Chunk& c) = 0;
  // Worker w read its last chunk: returns once all it handed over has been uploaded.
  virtual void finish(unsigned w) = 0;
  // Worker w stops early: returns once nothing it handed over is still being copied.
  virtual void abandon(unsigned w) noexcept = 0;
  // The load failed elsewhere: workers waiting in reuse/upload/finish throw instead.
  virtual void cancel() noexcept = 0;
};

// Reads the plan's chunks into the ring on plan.workers threads, adds each weight's checksum
// as its pieces arrive (when asked to), hands every chunk to the sink (when there is one).
//
// While the sink is not ready (the driver starts, ~0.2 s), each worker fills its slots and
// waits, or, with a read-ahead budget (plan.early_bytes: when the weights are mostly on disk,
// StreamOptions), reads its next chunks into memory of its own instead, and once the sink is
// ready copies them into its slots before reading on.
class WeightStream {
 public:
  // `sink` (may be null: read and checksum only) must outlive the stream.
  WeightStream(const StreamPlan& plan, bool checksum, ChunkSink* sink);
  ~WeightStream();  // a stream never finished: stops and waits for its workers
  WeightStream(const WeightStream&) = delete;
  WeightStream& operator=(const WeightStream&) = delete;
  // Starts the workers on their own threads (inline in finish() if none can be started).
  void start();
  // Waits for the workers; rethrows the first error (a read, a copy); checks that the file
  // did not change size meanwhile (Error(IO)).
  void finish();
  // The checksum of weight i (checksum64 hex): after finish(), when asked to checksum.
  std::string checksum(size_t i) const;
  // When the last byte was read (after finish()).
  std::chrono::steady_clock::time_point last_read() const;
  // Chunks read ahead while the sink was not ready.
  size_t early_chunks() const { return early_chunks_; }

 private:
  struct Early {
    const Chunk* chunk;
    uint8_t* data;
  };
  void run_workers();
  void work(unsigned w);
  uint8_t* slot(unsigned w, unsigned n) const;  // worker w's slot for its n-th chunk
  uint8_t* take_early();                         // a slot_bytes piece, or null
  void put(unsigned w, unsigned& n, const Chunk& c, const uint8_t* early);
  void read_chunk(const Chunk& c, uint8_t* dst);

  const StreamPlan& plan_;
  const bool checksum_;
  ChunkSink* const sink_;
  HostPages ring_;
  HostPages early_;                                // touched only as far as it is used
  std::atomic<uint64_t> early_used_{0};
  std::atomic<size_t> early_chunks_{0};
  std::unique_ptr<std::atomic<uint64_t>[]> sums_;  // by weight, mod 2^64
  std::atomic<size_t> next_{0};                    // the next chunk to read
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> last_read_ns_{0};
  std::thread pump_;
  bool started_ = false, finished_ = false;
  std::exception_ptr error_;
};

}  // namespace aotpack
