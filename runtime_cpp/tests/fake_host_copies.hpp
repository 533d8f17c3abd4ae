// fake_host_copies.hpp — pinned host memory and asynchronous copies of the fake driver
// (fake_host_copies.cpp), called from fake_libcuda.cpp's entry points.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda_driver.hpp"

namespace fake_copies {
using aotpack::cu::CUevent;
using aotpack::cu::CUresult;
using aotpack::cu::CUstream;

CUresult host_register(void* p, size_t n, unsigned flags);
CUresult host_unregister(void* p);
// Queues the copy when `src` is registered memory (true); else the caller copies now.
bool copy_async(uint64_t dst, const void* src, size_t n, CUstream s);
void stream_synchronize(CUstream s);  // runs every copy queued on s
void stream_destroyed(CUstream s);    // runs them too (a real stream finishes its work)
void event_recorded(CUevent e, CUstream s);
void event_synchronize(CUevent e);    // runs s's copies queued before the record
void event_destroyed(CUevent e);
void device_freed(uint64_t p, uint64_t n);  // copies into [p, p + n) still queued: misuse
}  // namespace fake_copies
