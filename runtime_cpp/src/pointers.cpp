// pointers.cpp — device-memory checks of caller pointers (see pointers.hpp).
#include "pointers.hpp"

#include "cuda_driver.hpp"
#include "error.hpp"

namespace aotpack {

namespace {

const void* as_ptr(uint64_t a) { return reinterpret_cast<const void*>(a); }

template <typename T>
T query(uint64_t address, cu::CUpointer_attribute attr, const char* name,
        const std::string& what) {
  T value{};
  cu::CUresult r = cu::driver().cuPointerGetAttribute(&value, attr, address);
  if (r == cu::CUDA_ERROR_INVALID_VALUE)
    fail(AOTPACK_INVALID_ARGUMENT, what, " at ", as_ptr(address),
         " is not memory the CUDA driver knows (host memory from malloc/new, a CPU tensor's "
         "data, or memory already freed): pass device memory (cuMemAlloc, a CUDA tensor)");
  cu::check(r, name, cat("checking ", what));
  return value;
}

}  // namespace

void check_device_range(uint64_t address, uint64_t nbytes, int ordinal, const std::string& what) {
  using namespace cu;
  auto managed = query<unsigned int>(address, CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                     "cuPointerGetAttribute(IS_MANAGED)", what);
  if (!managed) {  // managed memory migrates to whichever device touches it: always fine
    auto type = query<unsigned int>(address, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                    "cuPointerGetAttribute(MEMORY_TYPE)", what);
    if (type != CU_MEMORYTYPE_DEVICE)
      fail(AOTPACK_INVALID_ARGUMENT, what, " at ", as_ptr(address), " is ",
           type == CU_MEMORYTYPE_HOST ? "page-locked host memory" : "not device memory",
           " (CUmemorytype ", type, "), which the model's kernels (TMA) cannot use: pass "
           "device memory (cuMemAlloc, a CUDA tensor)");
    auto dev = query<int>(address, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                          "cuPointerGetAttribute(DEVICE_ORDINAL)", what);
    if (dev != ordinal)
      fail(AOTPACK_INVALID_ARGUMENT, what, " at ", as_ptr(address), " is memory of device ",
           dev, " but the model was loaded on device ", ordinal,
           ": pass memory of that device (or load the model on device ", dev, ")");
  }
  auto start = query<CUdeviceptr>(address, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                  "cuPointerGetAttribute(RANGE_START_ADDR)", what);
  auto size = query<size_t>(address, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                            "cuPointerGetAttribute(RANGE_SIZE)", what);
  uint64_t room = address >= start && address - start <= size ? start + size - address : 0;
  if (room < nbytes)
    fail(AOTPACK_INVALID_ARGUMENT, what, " needs ", nbytes, " bytes at ", as_ptr(address),
         " but its allocation (", size, " bytes from ", as_ptr(start), ") has only ", room,
         " bytes from there: pass a buffer of at least ", nbytes, " bytes");
}

}  // namespace aotpack
