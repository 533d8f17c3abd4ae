// fake_host_copies.cpp — the fake driver's pinned host memory (cuMemHostRegister) and its
// asynchronous copies: a cuMemcpyHtoDAsync from registered memory is queued on its stream and
// runs only when the stream gets there (cuStreamSynchronize, cuEventSynchronize of an event
// recorded after it, the stream's destruction), as a DMA on a GPU does. So a loader that
// overwrites or unpins a staging buffer before its copy ran uploads wrong bytes here too, and
// one that returns before its copies ran launches kernels on stale weights. Copies from
// pageable memory still run at once (the real driver stages them before returning).
//
// Misuse (counted, see fake_cuda_host_stats): unpinning memory a queued copy reads, freeing
// device memory a queued copy writes (the copy is dropped).
// Knob: FAKE_CUDA_HOST_REGISTER=refuse makes cuMemHostRegister fail (the pageable fallback).
#include "fake_host_copies.hpp"

#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>

namespace fake_copies {
namespace {

constexpr CUresult kAlreadyRegistered = 712, kNotRegistered = 713, kNotPermitted = 800;

struct Copy {
  uint64_t dst;
  const uint8_t* src;
  size_t n;
};
struct Queue {
  std::deque<Copy> copies;
  uint64_t enqueued = 0, executed = 0;
};
struct Mark {  // an event: the position in its stream's queue it was recorded at
  CUstream stream;
  uint64_t upto;
};

std::mutex g_mu;
std::map<uintptr_t, size_t> g_registered;  // start -> bytes
std::map<CUstream, Queue> g_queues;
std::map<CUevent, Mark> g_marks;
uint64_t g_registrations = 0, g_deferred = 0, g_misuse = 0;

bool registered_locked(const void* p, size_t n) {
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = g_registered.upper_bound(a);
  if (it == g_registered.begin()) return false;
  --it;
  return a >= it->first && a + n <= it->first + it->second;
}

void run_locked(CUstream s, uint64_t upto) {
  auto it = g_queues.find(s);
  if (it == g_queues.end()) return;
  Queue& q = it->second;
  while (q.executed < upto && !q.copies.empty()) {
    const Copy& c = q.copies.front();
    std::memcpy(reinterpret_cast<void*>(c.dst), c.src, c.n);
    q.copies.pop_front();
    ++q.executed;
  }
}

}  // namespace

CUresult host_register(void* p, size_t n, unsigned) {
  const char* knob = std::getenv("FAKE_CUDA_HOST_REGISTER");
  if (knob && std::strcmp(knob, "refuse") == 0) return kNotPermitted;
  std::lock_guard<std::mutex> lock(g_mu);
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto next = g_registered.lower_bound(a);
  if (next != g_registered.end() && next->first < a + n) return kAlreadyRegistered;
  if (next != g_registered.begin() && std::prev(next)->first + std::prev(next)->second > a)
    return kAlreadyRegistered;
  g_registered[a] = n;
  ++g_registrations;
  return 0;
}

CUresult host_unregister(void* p) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_registered.find(reinterpret_cast<uintptr_t>(p));
  if (it == g_registered.end()) return kNotRegistered;
  const uint8_t* lo = static_cast<const uint8_t*>(p);
  for (const auto& q : g_queues)
    for (const Copy& c : q.second.copies)
      if (c.src >= lo && c.src < lo + it->second) ++g_misuse;
  g_registered.erase(it);
  return 0;
}

bool copy_async(uint64_t dst, const void* src, size_t n, CUstream s) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!registered_locked(src, n)) return false;
  Queue& q = g_queues[s];
  q.copies.push_back(Copy{dst, static_cast<const uint8_t*>(src), n});
  ++q.enqueued;
  ++g_deferred;
  return true;
}

void stream_synchronize(CUstream s) {
  std::lock_guard<std::mutex> lock(g_mu);
  run_locked(s, UINT64_MAX);
}

void stream_destroyed(CUstream s) {
  std::lock_guard<std::mutex> lock(g_mu);
  run_locked(s, UINT64_MAX);
  g_queues.erase(s);
  for (auto& m : g_marks)
    if (m.second.stream == s) m.second.upto = 0;  // nothing left to wait for
}

void event_recorded(CUevent e, CUstream s) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_queues.find(s);
  g_marks[e] = Mark{s, it == g_queues.end() ? 0 : it->second.enqueued};
}

void event_synchronize(CUevent e) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_marks.find(e);
  if (it != g_marks.end()) run_locked(it->second.stream, it->second.upto);
}

void event_destroyed(CUevent e) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_marks.erase(e);
}

void device_freed(uint64_t p, uint64_t n) {
  std::lock_guard<std::mutex> lock(g_mu);
  for (auto& q : g_queues)
    for (Copy& c : q.second.copies)
      if (c.n && c.dst >= p && c.dst < p + n) {
        ++g_misuse;
        c.n = 0;  // dropped: it must not write into freed memory
      }
}

}  // namespace fake_copies

// out4: ranges registered now, registrations so far, copies queued so far, misuses.
extern "C" __attribute__((visibility("default"))) void fake_cuda_host_stats(uint64_t* out4) {
  using namespace fake_copies;
  std::lock_guard<std::mutex> lock(g_mu);
  out4[0] = g_registered.size();
  out4[1] = g_registrations;
  out4[2] = g_deferred;
  out4[3] = g_misuse;
}
