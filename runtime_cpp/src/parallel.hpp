// parallel.hpp — independent load-time tasks (reading, hashing) spread over the host's cores.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace aotpack {

// Calls task(i) for every i in [0, n) on up to `max_threads` threads (the calling thread is one
// of them) and returns once all have finished. The first exception a task throws is rethrown
// here after every thread has stopped (tasks not yet started are skipped). If no thread can be
// started (resource limits), the calling thread runs every task.
template <class Task>
void parallel_for(size_t n, unsigned max_threads, const Task& task) {
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  const size_t threads = std::min<size_t>({size_t(hw), size_t(std::max(1u, max_threads)), n});
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto worker = [&] {
    for (size_t i = next++; i < n && !failed; i = next++) {
      try {
        task(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
        failed = true;
      }
    }
  };
  std::vector<std::thread> pool;
  try {
    for (size_t t = 1; t < threads; ++t) pool.emplace_back(worker);
  } catch (...) {
    // the threads started so far and this one still run every task
  }
  worker();
  for (std::thread& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace aotpack
