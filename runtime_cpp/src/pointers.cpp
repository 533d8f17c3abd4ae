// pointers.cpp — device-memory checks of caller pointers (see pointers.hpp).
#include "pointers.hpp"

#include "cuda_driver.hpp"
#include "error.hpp"

namespace aotpack {

namespace {

const void* as_ptr(uint64_t a) { return reinterpret_cast<const void*>(a); }

// What the driver says about one address.
struct Memory {
  bool managed = false;
  unsigned type = 0;  // CUmemorytype (unmanaged memory)
  int device = -1;    // unmanaged memory
  uint64_t start = 0, size = 0;  // the allocation (or mapping) holding the address
};

// false when the driver does not know the address (CUDA_ERROR_INVALID_VALUE).
bool describe(uint64_t address, Memory* m, const std::string& what) {
  using namespace cu;
  const Driver& d = driver();
  auto get = [&](void* out, CUpointer_attribute a, const char* name) {
    CUresult r = d.cuPointerGetAttribute(out, a, address);
    if (r == CUDA_ERROR_INVALID_VALUE) return false;
    check(r, name, cat("checking ", what));
    return true;
  };
  unsigned managed = 0;
  if (!get(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, "cuPointerGetAttribute(IS_MANAGED)"))
    return false;
  m->managed = managed != 0;
  if (!m->managed) {  // managed memory migrates to whichever device touches it: always fine
    if (!get(&m->type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, "cuPointerGetAttribute(MEMORY_TYPE)"))
      return false;
    if (m->type == CU_MEMORYTYPE_DEVICE &&
        !get(&m->device, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
             "cuPointerGetAttribute(DEVICE_ORDINAL)"))
      return false;
  }
  CUdeviceptr start = 0;
  size_t size = 0;
  if (!get(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
           "cuPointerGetAttribute(RANGE_START_ADDR)") ||
      !get(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, "cuPointerGetAttribute(RANGE_SIZE)"))
    return false;
  m->start = start;
  m->size = size;
  return true;
}

bool usable(const Memory& m, int ordinal) {
  return m.managed || (m.type == cu::CU_MEMORYTYPE_DEVICE && m.device == ordinal);
}

}  // namespace

void check_device_range(uint64_t address, uint64_t nbytes, int ordinal, const std::string& what) {
  Memory m;
  if (!describe(address, &m, what))
    fail(AOTPACK_INVALID_ARGUMENT, what, " at ", as_ptr(address),
         " is not memory the CUDA driver knows (host memory from malloc/new, a CPU tensor's "
         "data, or memory already freed): pass device memory (cuMemAlloc, a CUDA tensor)");
  if (!m.managed && m.type != cu::CU_MEMORYTYPE_DEVICE)
    fail(AOTPACK_INVALID_ARGUMENT, what, " at ", as_ptr(address), " is ",
         m.type == cu::CU_MEMORYTYPE_HOST ? "host memory (page-locked or mapped)"
                                          : "not device memory",
         " (CUmemorytype ", m.type, "), which the model's kernels (TMA) cannot use: pass "
         "device memory (cuMemAlloc, a CUDA tensor)");
  if (!usable(m, ordinal))
    fail(AOTPACK_INVALID_ARGUMENT, what, " at ", as_ptr(address), " is memory of device ",
         m.device, " but the model was loaded on device ", ordinal,
         ": pass memory of that device (or load the model on device ", m.device, ")");
  // The tensor may run on into the next mapping of the same virtual range (allocators that
  // map physical chunks back to back, like PyTorch's expandable segments): follow them.
  uint64_t end = m.start + m.size, need = 0;
  const bool wraps = __builtin_add_overflow(address, nbytes, &need);
  if (address < m.start || end < address) end = address;  // a driver answer we cannot use
  for (int hops = 0; !wraps && end < need && hops < 4096; ++hops) {
    Memory next;
    if (!describe(end, &next, what) || !usable(next, ordinal) || next.start != end ||
        next.size == 0)
      break;
    end = next.start + next.size;
  }
  if (wraps || end < need)
    fail(AOTPACK_INVALID_ARGUMENT, what, " needs ", nbytes, " bytes at ", as_ptr(address),
         " but its allocation (", m.size, " bytes from ", as_ptr(m.start), ") has only ",
         end > address ? end - address : 0, " bytes from there: pass a buffer of at least ",
         nbytes, " bytes");
}

}  // namespace aotpack
