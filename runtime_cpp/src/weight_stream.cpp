// weight_stream.cpp — the weights read in chunks, checksummed and handed to a sink
// (weight_stream.hpp).
#include "weight_stream.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <numeric>

#include "checksum.hpp"
#include "error.hpp"
#include "parallel.hpp"

namespace aotpack {

namespace {
// Bytes between two weights that are read along rather than starting a new chunk: the
// writer's alignment padding (up to 255 bytes), not cubins or tensors the model does not use.
constexpr uint64_t kMaxGap = 64ull << 10;

// An environment value in [lo, hi], or `fallback` when unset or not such a number.
uint64_t env_in(const char* name, uint64_t lo, uint64_t hi, uint64_t fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  unsigned long long x = std::strtoull(v, &end, 10);
  return *end == '\0' && x >= lo && x <= hi ? uint64_t(x) : fallback;
}

// More than a tenth of the chunks' bytes would come from the disk, not the page cache.
bool uncached(const SafetensorsFile& file, const std::vector<Chunk>& chunks) {
  if (chunks.empty()) return false;
  const uint64_t begin = chunks.front().offset, end = chunks.back().offset + chunks.back().size;
  return file.cached_fraction(begin, end - begin) < 0.9;
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

std::vector<Chunk> plan_chunks(const WeightSource& src, uint64_t chunk_bytes) {
  std::vector<uint32_t> order(src.offset.size());
  std::iota(order.begin(), order.end(), 0u);
  // (not stable_sort: its temporary buffer trips ASan's alloc-dealloc check across the
  // library's boundary; the index breaks ties the same way)
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return src.offset[a] != src.offset[b] ? src.offset[a] < src.offset[b] : a < b;
  });
  std::vector<Chunk> chunks;
  Chunk cur;
  bool open = false;
  auto close = [&] {
    if (open) chunks.push_back(std::move(cur));
    cur = Chunk();
    open = false;
  };
  for (uint32_t w : order) {
    uint64_t pos = src.offset[w], left = src.size[w], in_weight = 0;
    if (left == 0) continue;
    // a weight before the chunk's end (the same tensor twice) or far after it starts anew
    if (open && (pos < cur.offset + cur.size || pos - (cur.offset + cur.size) > kMaxGap)) close();
    while (left) {
      if (!open) {
        cur.offset = pos;
        open = true;
      }
      uint64_t room = cur.offset + chunk_bytes > pos ? cur.offset + chunk_bytes - pos : 0;
      uint64_t take = std::min(left, room);
      if (take < left) take -= take % 8;  // the rest starts on one of the weight's words
      if (take == 0) {
        close();
        continue;
      }
      cur.fragments.push_back(Fragment{w, in_weight, pos - cur.offset, take});
      cur.size = pos + take - cur.offset;
      pos += take;
      in_weight += take;
      left -= take;
    }
  }
  close();
  return chunks;
}

StreamOptions StreamOptions::from_env() {
  StreamOptions o;
  o.threads = unsigned(env_in("AOTPACK_LOAD_THREADS", 1, 64, o.threads));
  o.chunk_bytes = env_in("AOTPACK_LOAD_CHUNK_KIB", 4, 1u << 20, o.chunk_bytes >> 10) << 10;
  if (const char* v = std::getenv("AOTPACK_LOAD_EARLY_MIB"))
    o.early_when_cached = *v != '\0';  // a budget given: used whatever the cache holds
  o.early_bytes = env_in("AOTPACK_LOAD_EARLY_MIB", 0, 1u << 20, o.early_bytes >> 20) << 20;
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) o.early_bytes = std::min(o.early_bytes, uint64_t(pages) * page / 8);
  return o;
}

StreamPlan plan_stream(const WeightSource& src, const StreamOptions& options) {
  StreamPlan p;
  p.file = src.file;
  p.sizes = src.size;
  p.chunks = plan_chunks(src, options.chunk_bytes);
  uint64_t largest = 0;
  for (const Chunk& c : p.chunks) largest = std::max(largest, c.size);
  const uint64_t page = uint64_t(::sysconf(_SC_PAGESIZE));
  p.slot_bytes = (largest + page - 1) / page * page;
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  p.workers = unsigned(std::min<size_t>({options.threads, hw, p.chunks.size()}));
  // reading ahead copies the file's bytes once more: only worth it from the file itself, and
  // (StreamOptions) only from a disk
  if (p.slot_bytes && !src.file->in_memory() && options.early_bytes &&
      (options.early_when_cached || uncached(*src.file, p.chunks)))
    p.early_bytes = std::min<uint64_t>(options.early_bytes / p.slot_bytes, p.chunks.size()) *
                    p.slot_bytes;
  return p;
}

WeightStream::WeightStream(const StreamPlan& plan, bool checksum, ChunkSink* sink)
    : plan_(plan),
      checksum_(checksum),
      sink_(sink),
      ring_(uint64_t(plan.workers) * StreamPlan::kSlots * plan.slot_bytes),
      early_(sink && plan.early_bytes ? HostPages(plan.early_bytes) : HostPages()),
      sums_(new std::atomic<uint64_t>[plan.sizes.size() + 1]()) {
  if (!ring_.data())
    fail(AOTPACK_OUT_OF_MEMORY, "cannot allocate ", ring_.size(), " bytes of host memory to "
         "stage the weights");
}

WeightStream::~WeightStream() {
  if (!pump_.joinable()) return;
  stop_ = true;
  if (sink_) sink_->cancel();
  pump_.join();
}

void WeightStream::start() {
  started_ = true;
  if (plan_.chunks.empty()) return;
  try {
    pump_ = std::thread([this] {
      try {
        run_workers();
      } catch (...) {
        error_ = std::current_exception();
      }
    });
  } catch (...) {
    // no thread could be started: finish() reads everything on the caller's thread
  }
}

void WeightStream::finish() {
  if (!started_) start();
  if (pump_.joinable()) pump_.join();
  else if (!plan_.chunks.empty() && !finished_) run_workers();
  finished_ = true;
  if (error_) std::rethrow_exception(error_);
  if (plan_.file && !plan_.chunks.empty()) plan_.file->check_unchanged();
}

void WeightStream::run_workers() {
  parallel_for(plan_.workers, plan_.workers, [this](size_t w) { work(unsigned(w)); });
  // Every chunk read ahead is in its slot by now: unmapped here, on the stream's thread, while
  // the load may still be loading cubins (up to 2 GiB: not free).
  early_ = HostPages();
}

void WeightStream::work(unsigned w) {
  std::vector<Early> early;  // read ahead while the sink was not ready, in file order
  try {
    unsigned n = 0;  // chunks this worker has put into its slots
    for (size_t i = next_++; i < plan_.chunks.size() && !stop_; i = next_++) {
      const Chunk& c = plan_.chunks[i];
      if (sink_ && n >= StreamPlan::kSlots && !sink_->ready())
        if (uint8_t* e = take_early()) {
          read_chunk(c, e);
          early.push_back(Early{&c, e});
          continue;
        }
      for (const Early& e : early) put(w, n, *e.chunk, e.data);  // they go first
      early.clear();
      put(w, n, c, nullptr);
    }
    if (!stop_)
      for (const Early& e : early) put(w, n, *e.chunk, e.data);
  } catch (...) {
    stop_ = true;
    if (sink_) sink_->abandon(w);
    throw;
  }
  if (!sink_) return;
  if (stop_) {
    sink_->abandon(w);  // another worker failed: the load fails anyway
    return;
  }
  try {
    sink_->finish(w);  // (it abandons its own slots when it throws)
  } catch (...) {
    stop_ = true;  // the other workers stop reading
    throw;
  }
}

uint8_t* WeightStream::slot(unsigned w, unsigned n) const {
  return ring_.data() + (uint64_t(w) * StreamPlan::kSlots + n % StreamPlan::kSlots) *
                            plan_.slot_bytes;
}

uint8_t* WeightStream::take_early() {
  if (!early_.data() || early_used_ >= early_.size()) return nullptr;
  uint64_t at = early_used_.fetch_add(plan_.slot_bytes);
  if (at + plan_.slot_bytes > early_.size()) return nullptr;
  ++early_chunks_;
  return early_.data() + at;
}

// Chunk c into worker w's next slot (read from the file, or copied from where it was read
// ahead), then to the sink.
void WeightStream::put(unsigned w, unsigned& n, const Chunk& c, const uint8_t* early) {
  const unsigned s = n % StreamPlan::kSlots;
  uint8_t* dst = slot(w, n);
  if (sink_ && n >= StreamPlan::kSlots) sink_->reuse(w, s);
  if (early) std::memcpy(dst, early, size_t(c.size));
  else read_chunk(c, dst);
  ++n;
  if (sink_) sink_->upload(w, s, dst, c);
}

void WeightStream::read_chunk(const Chunk& c, uint8_t* dst) {
  plan_.file->read(c.offset, c.size, dst);
  int64_t t = now_ns(), seen = last_read_ns_.load();
  while (t > seen && !last_read_ns_.compare_exchange_weak(seen, t)) {
  }
  // Checksummed right after the read, while the chunk is still in this core's cache.
  if (checksum_)
    for (const Fragment& f : c.fragments)
      sums_[f.weight].fetch_add(
          checksum64_partial(dst + f.in_chunk, size_t(f.size), f.in_weight / 8),
          std::memory_order_relaxed);
}

std::string WeightStream::checksum(size_t i) const {
  return checksum64_finish_hex(sums_[i].load(), plan_.sizes[i]);
}

std::chrono::steady_clock::time_point WeightStream::last_read() const {
  using clock = std::chrono::steady_clock;
  return clock::time_point(
      std::chrono::duration_cast<clock::duration>(std::chrono::nanoseconds(last_read_ns_.load())));
}

}  // namespace aotpack
