// test_weight_stream.cpp — the weight stream on the host (no driver): chunk plans, checksums
// added piece by piece on several threads, the order in which a sink sees its slots, errors.
#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "aotpack/aotpack.h"
#include "bundle_builder.hpp"
#include "checksum.hpp"
#include "error.hpp"
#include "safetensors.hpp"
#include "test_main.hpp"
#include "weight_stream.hpp"

using namespace aotpack_test;
using aotpack::Chunk;
using aotpack::StreamPlan;
using aotpack::WeightSource;
using aotpack::WeightStream;

namespace {

// Weights of awkward sizes at offsets that are not multiples of 8 (alignment 4), with
// deterministic bytes.
struct WeightsFile {
  std::string path;
  std::vector<std::string> names;
  std::vector<std::vector<uint8_t>> data;
};

WeightsFile write_weights(const std::string& tag, const std::vector<size_t>& sizes) {
  WeightsFile f;
  f.path = make_temp_dir(tag) + "/weights.safetensors";
  uint64_t x = 88172645463325252ull;
  for (size_t i = 0; i < sizes.size(); ++i) {
    f.names.push_back("w" + std::to_string(i));
    f.data.emplace_back(sizes[i]);
    for (uint8_t& b : f.data.back()) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      b = uint8_t(x);
    }
  }
  std::vector<aotpack::TensorToWrite> t;
  for (size_t i = 0; i < sizes.size(); ++i)
    t.push_back({f.names[i], "U8", {int64_t(sizes[i])}, f.data[i].data(), sizes[i]});
  aotpack::write_safetensors(f.path, t, {}, 4, true);
  return f;
}

WeightSource source_of(const aotpack::SafetensorsFile& file, const WeightsFile& f) {
  WeightSource src;
  src.file = &file;
  for (const std::string& n : f.names) {
    src.offset.push_back(file.find(n)->offset);
    src.size.push_back(file.find(n)->nbytes);
  }
  return src;
}

StreamPlan plan(const WeightSource& src, unsigned threads, uint64_t chunk_bytes) {
  aotpack::StreamOptions o;
  o.threads = threads;
  o.chunk_bytes = chunk_bytes;
  o.early_bytes = 64u << 20;
  o.early_when_cached = true;  // (by default only from disk) so that plans show what gets one
  return aotpack::plan_stream(src, o);
}

const std::vector<size_t> kSizes = {1, 7, 8, 9, 4095, 4096, 4097, 100003, 300000, 0, 77};

// Fragments cover each weight exactly once, split on its own 8-byte words, within chunks.
void expect_plan_covers(const WeightSource& src, const std::vector<Chunk>& chunks,
                        uint64_t chunk_bytes) {
  std::vector<uint64_t> next(src.size.size(), 0);  // in_weight expected next
  for (const Chunk& c : chunks) {
    EXPECT(c.size <= chunk_bytes && !c.fragments.empty());
    for (const aotpack::Fragment& f : c.fragments) {
      EXPECT(f.in_weight == next[f.weight] && f.in_weight % 8 == 0 && f.size > 0);
      EXPECT(f.in_chunk + f.size <= c.size);
      EXPECT(c.offset + f.in_chunk == src.offset[f.weight] + f.in_weight);
      next[f.weight] += f.size;
    }
  }
  for (size_t w = 0; w < next.size(); ++w) EXPECT(next[w] == src.size[w]);
}

}  // namespace

TEST(weight_chunks_split_on_words) {
  WeightSource src;
  // odd offsets, a tensor listed twice (20), an empty one, one far away (its own chunk)
  src.offset = {3, 20, 20, 5000, 1u << 20};
  src.size = {17, 1000, 1000, 0, 300};
  for (uint64_t chunk : {8u, 16u, 64u, 4096u}) {
    std::vector<Chunk> chunks = aotpack::plan_chunks(src, chunk);
    expect_plan_covers(src, chunks, chunk);
    bool own_chunk = false;  // the far weight starts a chunk: the 1 MiB gap is not read
    for (const Chunk& c : chunks) own_chunk = own_chunk || c.offset == (1u << 20);
    EXPECT(own_chunk);
  }
  // few chunks when they are big: the padding between neighbours is read along
  EXPECT(aotpack::plan_chunks(src, 4096).size() == 3);
}

TEST(weight_stream_checksums_any_split) {
  WeightsFile f = write_weights("wsplit", kSizes);
  for (bool in_memory : {false, true}) {
    aotpack::SafetensorsFile file(f.path, "weights",
                                  in_memory ? aotpack::SafetensorsFile::Whole
                                            : aotpack::SafetensorsFile::HeaderOnly);
    WeightSource src = source_of(file, f);
    for (unsigned threads : {1u, 3u})
      for (uint64_t chunk : {4096u, 8192u, 65536u, 4u << 20}) {
        StreamPlan p = plan(src, threads, chunk);
        expect_plan_covers(src, p.chunks, chunk);
        EXPECT((p.early_bytes == 0) == in_memory);  // no reading ahead of bytes in memory
        WeightStream stream(p, true, nullptr);
        stream.start();
        stream.finish();
        for (size_t i = 0; i < f.data.size(); ++i)
          EXPECT(stream.checksum(i) == aotpack::checksum64_hex(f.data[i].data(), f.data[i].size()));
      }
  }
}

namespace {
// A sink that "copies" a slot only when the stream says it may reuse it (or at finish), as a
// DMA that runs late would: a stream overwriting a slot too early uploads wrong bytes.
class LateCopySink : public aotpack::ChunkSink {
 public:
  LateCopySink(const StreamPlan& p, const WeightSource& src) : src_(src), slots_(p.workers) {
    for (uint64_t size : src.size) device.emplace_back(size, 0);
  }
  bool ready() override { return true; }
  void reuse(unsigned w, unsigned s) override { copy(w, s); }
  void upload(unsigned w, unsigned s, const uint8_t* data, const Chunk& c) override {
    Slot& slot = slots_[w][s];
    EXPECT(slot.chunk == nullptr);  // the last chunk in it was copied first
    EXPECT(slot.data == nullptr || slot.data == data);
    slot = Slot{data, &c};
    if (fail_at && ++uploads == fail_at)
      aotpack::fail(AOTPACK_CUDA_ERROR, "cuMemcpyHtoDAsync failed: a test");
  }
  void finish(unsigned w) override {
    if (fail_finish) aotpack::fail(AOTPACK_CUDA_ERROR, "cuStreamCreate failed: a test");
    for (unsigned s = 0; s < StreamPlan::kSlots; ++s) copy(w, s);
    ++finished;
  }
  void abandon(unsigned) noexcept override { ++abandoned; }
  void cancel() noexcept override {}

  std::vector<std::vector<uint8_t>> device;
  std::atomic<int> finished{0}, abandoned{0}, uploads{0};
  int fail_at = 0;
  bool fail_finish = false;  // every worker's last flush fails (a small model's only one)

 private:
  struct Slot {
    const uint8_t* data = nullptr;
    const Chunk* chunk = nullptr;
  };
  void copy(unsigned w, unsigned s) {
    Slot& slot = slots_[w][s];
    if (!slot.chunk) return;
    for (const aotpack::Fragment& f : slot.chunk->fragments)
      std::memcpy(device[f.weight].data() + f.in_weight, slot.data + f.in_chunk, f.size);
    slot.chunk = nullptr;
  }
  const WeightSource& src_;
  std::vector<std::array<Slot, StreamPlan::kSlots>> slots_;
};
}  // namespace

TEST(weight_stream_hands_every_chunk_to_the_sink) {
  WeightsFile f = write_weights("wsink", kSizes);
  aotpack::SafetensorsFile file(f.path, "weights", aotpack::SafetensorsFile::HeaderOnly);
  WeightSource src = source_of(file, f);
  StreamPlan p = plan(src, 3, 4096);
  LateCopySink sink(p, src);
  WeightStream stream(p, false, &sink);
  stream.start();
  stream.finish();
  EXPECT(sink.device == f.data);
  EXPECT(sink.finished == int(p.workers) && sink.abandoned == 0);
}

namespace {
// A late-copying sink whose "device" is ready only once the test opens it (a driver starting).
class GatedSink : public LateCopySink {
 public:
  using LateCopySink::LateCopySink;
  bool ready() override {
    std::lock_guard<std::mutex> lock(mu_);
    return open_;
  }
  void reuse(unsigned w, unsigned s) override {
    wait();
    LateCopySink::reuse(w, s);
  }
  void finish(unsigned w) override {
    wait();
    LateCopySink::finish(w);
  }
  void open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  void wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return open_; });
  }
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};
}  // namespace

// While the device is not ready, workers read ahead into memory of their own (all of it, or as
// much as early_bytes allows) and copy it through their slots once it is.
TEST(weight_stream_reads_ahead_while_the_device_starts) {
  WeightsFile f = write_weights("wearly", kSizes);
  aotpack::SafetensorsFile file(f.path, "weights", aotpack::SafetensorsFile::HeaderOnly);
  WeightSource src = source_of(file, f);
  for (uint64_t early_chunks : {1000u, 5u, 0u}) {
    StreamPlan p = plan(src, 3, 4096);
    p.early_bytes = std::min<uint64_t>(early_chunks, p.chunks.size()) * p.slot_bytes;
    GatedSink sink(p, src);
    WeightStream stream(p, true, &sink);
    stream.start();
    usleep(50000);  // the driver starting
    sink.open();
    stream.finish();
    EXPECT(sink.device == f.data);
    for (size_t i = 0; i < f.data.size(); ++i)
      EXPECT(stream.checksum(i) == aotpack::checksum64_hex(f.data[i].data(), f.data[i].size()));
    std::printf("  early budget %llu chunks: %zu read ahead of %zu\n",
                (unsigned long long)early_chunks, stream.early_chunks(), p.chunks.size());
    // all but the slots' chunks of the workers that started (a late one may find none)
    size_t lo = std::min<size_t>(early_chunks, p.chunks.size() - p.workers * 2);
    size_t hi = std::min<size_t>(early_chunks, p.chunks.size() - 2);
    EXPECT(stream.early_chunks() >= lo && stream.early_chunks() <= hi);
  }
}

// By default the stream reads ahead only what the page cache does not hold (a file just
// written is cached; one whose pages were dropped is not, where the file system drops them).
TEST(weight_stream_reads_ahead_only_from_disk) {
  WeightsFile f = write_weights("wcached", std::vector<size_t>(8, 1u << 20));
  aotpack::SafetensorsFile file(f.path, "weights", aotpack::SafetensorsFile::HeaderOnly);
  WeightSource src = source_of(file, f);
  aotpack::StreamOptions o;
  o.chunk_bytes = 1u << 20;
  EXPECT(file.cached_fraction(0, 8u << 20) > 0.9);
  EXPECT(aotpack::plan_stream(src, o).early_bytes == 0);
  o.early_when_cached = true;
  EXPECT(aotpack::plan_stream(src, o).early_bytes > 0);
  o.early_when_cached = false;
  int fd = ::open(f.path.c_str(), O_RDONLY);
  EXPECT(fd >= 0 && ::fsync(fd) == 0);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
  if (file.cached_fraction(0, 8u << 20) > 0.9) {
    std::printf("  (this file system keeps the pages: the uncached case is not checked)\n");
    return;
  }
  EXPECT(aotpack::plan_stream(src, o).early_bytes > 0);
}

TEST(weight_stream_sink_error_stops_it) {
  WeightsFile f = write_weights("wsinkerr", kSizes);
  aotpack::SafetensorsFile file(f.path, "weights", aotpack::SafetensorsFile::HeaderOnly);
  WeightSource src = source_of(file, f);
  StreamPlan p = plan(src, 3, 4096);
  LateCopySink sink(p, src);
  sink.fail_at = 5;
  WeightStream stream(p, true, &sink);
  stream.start();
  try {
    stream.finish();
    EXPECT(false);
  } catch (const aotpack::Error& e) {
    EXPECT(e.code() == AOTPACK_CUDA_ERROR && has(e.what(), "a test"));
  }
  // every worker that started stops without finishing (one not started yet never does)
  EXPECT(sink.abandoned >= 1 && sink.abandoned <= int(p.workers) && sink.finished == 0);
  EXPECT(sink.uploads < int(p.chunks.size()));  // the others stopped early
}

TEST(weight_stream_sink_failing_at_finish_fails_the_load) {
  WeightsFile f = write_weights("wsinkfin", kSizes);
  aotpack::SafetensorsFile file(f.path, "weights", aotpack::SafetensorsFile::HeaderOnly);
  WeightSource src = source_of(file, f);
  StreamPlan p = plan(src, 3, 4096);
  LateCopySink sink(p, src);
  sink.fail_finish = true;
  WeightStream stream(p, true, &sink);
  stream.start();
  try {
    stream.finish();
    EXPECT(false);
  } catch (const aotpack::Error& e) {
    EXPECT(e.code() == AOTPACK_CUDA_ERROR && has(e.what(), "a test"));
  }
  EXPECT(sink.finished == 0);
}

TEST(weight_stream_file_shrinks) {
  WeightsFile f = write_weights("wshrink", kSizes);
  aotpack::SafetensorsFile file(f.path, "weights", aotpack::SafetensorsFile::HeaderOnly);
  WeightSource src = source_of(file, f);
  EXPECT(::truncate(f.path.c_str(), off_t(src.offset[7] + 10)) == 0);  // rewritten meanwhile
  StreamPlan p = plan(src, 2, 4096);
  WeightStream stream(p, true, nullptr);
  stream.start();
  try {
    stream.finish();
    EXPECT(false);
  } catch (const aotpack::Error& e) {
    EXPECT(e.code() == AOTPACK_IO && has(e.what(), "shrank"));
  }
}

namespace {
// A sink whose uploads wait for a device that never comes, until cancelled.
class NeverReadySink : public aotpack::ChunkSink {
 public:
  bool ready() override { return false; }
  void reuse(unsigned, unsigned) override { wait(); }
  void upload(unsigned, unsigned, const uint8_t*, const Chunk&) override { wait(); }
  void finish(unsigned) override { wait(); }
  void abandon(unsigned) noexcept override {}
  void cancel() noexcept override {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
    cv_.notify_all();
  }

 private:
  void wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return cancelled_; });
    aotpack::fail(AOTPACK_INTERNAL, "cancelled");
  }
  std::mutex mu_;
  std::condition_variable cv_;
  bool cancelled_ = false;
};
}  // namespace

TEST(weight_stream_dropped_unfinished_stops_its_workers) {
  WeightsFile f = write_weights("wcancel", kSizes);
  aotpack::SafetensorsFile file(f.path, "weights", aotpack::SafetensorsFile::HeaderOnly);
  WeightSource src = source_of(file, f);
  StreamPlan p = plan(src, 3, 4096);
  NeverReadySink sink;
  {
    WeightStream stream(p, true, &sink);
    stream.start();
    usleep(20000);
  }  // a load that failed elsewhere: the destructor must not hang
  EXPECT(true);
}

// aotpack_model_check_file streams the weights in chunks too (no driver): a changed byte deep
// inside a weight of many chunks is found by fast and full verification, not by none.
TEST(check_file_finds_a_changed_byte_in_a_chunked_weight) {
  setenv("AOTPACK_LOAD_CHUNK_KIB", "4", 1);
  setenv("AOTPACK_LOAD_THREADS", "3", 1);
  for (bool external : {false, true}) {
    TestBundle b(external);
    std::vector<uint8_t> big(300001);
    for (size_t i = 0; i < big.size(); ++i) big[i] = uint8_t(i * 7 + i / 251);
    b.add_weight("big", big);
    b.add_weight("small", {1, 2, 3});
    std::string good = b.write(make_temp_dir("chkchunk"));
    expect_check_file(good, AOTPACK_OK, {}, nullptr, AOTPACK_VERIFY_FAST);
    b.extra_weights[0].second[150000] ^= 0x10;
    std::string bad = b.write(make_temp_dir("chkchunkbad"));
    expect_check_file(bad, AOTPACK_WEIGHTS_MISMATCH, {"weight 'big'", "checksum"}, nullptr,
                      AOTPACK_VERIFY_FAST);
    expect_check_file(bad, AOTPACK_WEIGHTS_MISMATCH, {"weight 'big'", "sha256"}, nullptr,
                      AOTPACK_VERIFY_FULL);
    expect_check_file(bad, AOTPACK_OK, {}, nullptr, AOTPACK_VERIFY_NONE);
  }
  unsetenv("AOTPACK_LOAD_CHUNK_KIB");
  unsetenv("AOTPACK_LOAD_THREADS");
}
