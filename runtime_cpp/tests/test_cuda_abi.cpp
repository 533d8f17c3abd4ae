// test_cuda_abi.cpp — compile-time proof that cuda_driver.hpp matches the real cuda.h
// (values, sizes, layouts). Built only when a CUDA toolkit header is found; the runtime
// itself never includes cuda.h. Our header must come first: cuda.h #defines plain API
// names (cuMemAlloc → cuMemAlloc_v2) that would rename our table's members.
#include "cuda_driver.hpp"

// Every entry point of the driver table. Their types are captured as aliases BEFORE cuda.h
// is included (afterwards `Driver::cuMemAlloc` would read `Driver::cuMemAlloc_v2`), then
// compared with cuda.h's declarations of the same names (which the macros map to the
// versioned symbols we resolve).
#define AOTPACK_DRIVER_ENTRY_POINTS(X)                                                      \
  X(cuInit) X(cuDriverGetVersion) X(cuGetErrorString) X(cuGetErrorName) X(cuDeviceGetCount) \
  X(cuDeviceGet) X(cuDeviceGetName) X(cuDeviceGetAttribute) X(cuDevicePrimaryCtxRetain)    \
  X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent) X(cuCtxGetCurrent) X(cuModuleLoadData)   \
  X(cuModuleUnload) X(cuModuleGetFunction) X(cuFuncSetAttribute) X(cuMemAlloc)             \
  X(cuMemFree) X(cuMemcpyHtoD) X(cuMemcpyDtoH) X(cuPointerGetAttribute) X(cuMemsetD32Async) \
  X(cuMemsetD8) X(cuMemsetD8Async) X(cuMemcpyHtoDAsync) X(cuMemcpyDtoHAsync)               \
  X(cuLaunchKernelEx)                                                                       \
  X(cuTensorMapEncodeTiled) X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamSynchronize)    \
  X(cuStreamIsCapturing) X(cuStreamBeginCapture) X(cuStreamEndCapture)                     \
  X(cuGraphInstantiateWithFlags) X(cuGraphLaunch) X(cuGraphExecDestroy) X(cuGraphDestroy)  \
  X(cuEventCreate) X(cuEventDestroy) X(cuEventRecord) X(cuEventSynchronize)                \
  X(cuEventElapsedTime)
#define AOTPACK_OUR_TYPE(name) using our_##name = decltype(aotpack::cu::Driver::name);
AOTPACK_DRIVER_ENTRY_POINTS(AOTPACK_OUR_TYPE)

// clang-format off
#include <cuda.h>
// clang-format on

#include <cstddef>
#include <cstdio>
#include <type_traits>

namespace c = aotpack::cu;

#define SAME_VALUE(ours, theirs) static_assert(int(c::ours) == int(theirs), #ours)
#define SAME_LAYOUT(T, U)                                                      \
  static_assert(sizeof(c::T) == sizeof(U), "sizeof " #T);                      \
  static_assert(alignof(c::T) >= alignof(U), "alignof " #T)
#define SAME_OFFSET(T, U, field) \
  static_assert(offsetof(c::T, field) == offsetof(U, field), #T "." #field)

static_assert(CUDA_VERSION >= 12000, "the ABI test needs cuda.h from CUDA 12 or newer");
static_assert(sizeof(c::CUdeviceptr) == sizeof(CUdeviceptr), "CUdeviceptr");
static_assert(sizeof(c::CUresult) == sizeof(CUresult), "CUresult");
static_assert(sizeof(c::CUdevice) == sizeof(CUdevice), "CUdevice");
SAME_VALUE(CUDA_ERROR_OUT_OF_MEMORY, CUDA_ERROR_OUT_OF_MEMORY);
SAME_VALUE(CUDA_ERROR_NO_DEVICE, CUDA_ERROR_NO_DEVICE);
SAME_VALUE(CUDA_ERROR_NO_BINARY_FOR_GPU, CUDA_ERROR_NO_BINARY_FOR_GPU);
SAME_VALUE(CUDA_ERROR_UNSUPPORTED_PTX_VERSION, CUDA_ERROR_UNSUPPORTED_PTX_VERSION);
SAME_VALUE(CUDA_ERROR_NOT_FOUND, CUDA_ERROR_NOT_FOUND);
SAME_VALUE(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
SAME_VALUE(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
           CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
SAME_VALUE(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
           CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
SAME_VALUE(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
           CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
SAME_VALUE(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
           CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES);
SAME_VALUE(CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED,
           CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED);
SAME_VALUE(CU_TENSOR_MAP_DATA_TYPE_UINT8, CU_TENSOR_MAP_DATA_TYPE_UINT8);
SAME_VALUE(CU_TENSOR_MAP_DATA_TYPE_UINT16, CU_TENSOR_MAP_DATA_TYPE_UINT16);
SAME_VALUE(CU_TENSOR_MAP_DATA_TYPE_UINT32, CU_TENSOR_MAP_DATA_TYPE_UINT32);
SAME_VALUE(CU_TENSOR_MAP_DATA_TYPE_INT32, CU_TENSOR_MAP_DATA_TYPE_INT32);
SAME_VALUE(CU_TENSOR_MAP_DATA_TYPE_UINT64, CU_TENSOR_MAP_DATA_TYPE_UINT64);
SAME_VALUE(CU_TENSOR_MAP_DATA_TYPE_INT64, CU_TENSOR_MAP_DATA_TYPE_INT64);
SAME_VALUE(CU_TENSOR_MAP_DATA_TYPE_FLOAT16, CU_TENSOR_MAP_DATA_TYPE_FLOAT16);
SAME_VALUE(CU_TENSOR_MAP_DATA_TYPE_FLOAT32, CU_TENSOR_MAP_DATA_TYPE_FLOAT32);
SAME_VALUE(CU_TENSOR_MAP_DATA_TYPE_FLOAT64, CU_TENSOR_MAP_DATA_TYPE_FLOAT64);
SAME_VALUE(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16);
SAME_VALUE(CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_INTERLEAVE_NONE);
SAME_VALUE(CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE);
SAME_VALUE(CU_TENSOR_MAP_SWIZZLE_32B, CU_TENSOR_MAP_SWIZZLE_32B);
SAME_VALUE(CU_TENSOR_MAP_SWIZZLE_64B, CU_TENSOR_MAP_SWIZZLE_64B);
SAME_VALUE(CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_SWIZZLE_128B);
SAME_VALUE(CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_L2_PROMOTION_NONE);
SAME_VALUE(CU_TENSOR_MAP_L2_PROMOTION_L2_64B, CU_TENSOR_MAP_L2_PROMOTION_L2_64B);
SAME_VALUE(CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B);
SAME_VALUE(CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
SAME_VALUE(CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
SAME_VALUE(CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA,
           CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA);
SAME_VALUE(CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION);
SAME_VALUE(CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
           CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION);
SAME_VALUE(CU_STREAM_CAPTURE_MODE_GLOBAL, CU_STREAM_CAPTURE_MODE_GLOBAL);
SAME_VALUE(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
SAME_VALUE(CU_STREAM_CAPTURE_MODE_RELAXED, CU_STREAM_CAPTURE_MODE_RELAXED);
SAME_VALUE(CU_STREAM_CAPTURE_STATUS_NONE, CU_STREAM_CAPTURE_STATUS_NONE);
SAME_VALUE(CU_STREAM_CAPTURE_STATUS_ACTIVE, CU_STREAM_CAPTURE_STATUS_ACTIVE);
SAME_VALUE(CU_STREAM_CAPTURE_STATUS_INVALIDATED, CU_STREAM_CAPTURE_STATUS_INVALIDATED);
SAME_VALUE(CU_STREAM_NON_BLOCKING, CU_STREAM_NON_BLOCKING);
SAME_VALUE(CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_MEMORY_TYPE);
SAME_VALUE(CU_POINTER_ATTRIBUTE_IS_MANAGED, CU_POINTER_ATTRIBUTE_IS_MANAGED);
SAME_VALUE(CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL);
SAME_VALUE(CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR);
SAME_VALUE(CU_POINTER_ATTRIBUTE_RANGE_SIZE, CU_POINTER_ATTRIBUTE_RANGE_SIZE);
SAME_VALUE(CU_MEMORYTYPE_HOST, CU_MEMORYTYPE_HOST);
SAME_VALUE(CU_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_DEVICE);
SAME_VALUE(CU_MEMORYTYPE_UNIFIED, CU_MEMORYTYPE_UNIFIED);
SAME_VALUE(CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_INVALID_VALUE);
SAME_VALUE(CU_EVENT_DEFAULT, CU_EVENT_DEFAULT);
SAME_VALUE(CU_EVENT_DISABLE_TIMING, CU_EVENT_DISABLE_TIMING);

SAME_LAYOUT(CUtensorMap, CUtensorMap);
static_assert(sizeof(c::CUtensorMap) == 128, "CUtensorMap is 128 bytes");
SAME_LAYOUT(CUlaunchAttributeValue, CUlaunchAttributeValue);
static_assert(sizeof(c::CUlaunchAttributeValue) == 64, "launch attribute value is 64 bytes");
SAME_OFFSET(CUlaunchAttributeValue, CUlaunchAttributeValue, clusterDim);
SAME_OFFSET(CUlaunchAttributeValue, CUlaunchAttributeValue, programmaticStreamSerializationAllowed);
SAME_LAYOUT(CUlaunchAttribute, CUlaunchAttribute);
SAME_OFFSET(CUlaunchAttribute, CUlaunchAttribute, id);
SAME_OFFSET(CUlaunchAttribute, CUlaunchAttribute, value);
SAME_LAYOUT(CUlaunchConfig, CUlaunchConfig);
SAME_OFFSET(CUlaunchConfig, CUlaunchConfig, gridDimX);
SAME_OFFSET(CUlaunchConfig, CUlaunchConfig, blockDimZ);
SAME_OFFSET(CUlaunchConfig, CUlaunchConfig, sharedMemBytes);
SAME_OFFSET(CUlaunchConfig, CUlaunchConfig, hStream);
SAME_OFFSET(CUlaunchConfig, CUlaunchConfig, attrs);
SAME_OFFSET(CUlaunchConfig, CUlaunchConfig, numAttrs);

// Function-pointer types: our table's parameter types must convert 1:1. Compare the shape
// of the signature (arity and parameter sizes) for the calls whose structs we declare.
static_assert(std::is_same<decltype(&::cuLaunchKernelEx),
                           CUresult (*)(const CUlaunchConfig*, CUfunction, void**, void**)>::value,
              "cuLaunchKernelEx signature");

// Our declarations use our own types (uint64_t for CUdeviceptr, our enums), so the types
// are not identical; what the ABI needs is the same arity and the same size of the return
// value and of every parameter.
template <typename R1, typename... A1, typename R2, typename... A2>
constexpr bool same_shape(R1 (*)(A1...), R2 (*)(A2...)) {
  if constexpr (sizeof...(A1) != sizeof...(A2))
    return false;
  else
    return sizeof(R1) == sizeof(R2) && (true && ... && (sizeof(A1) == sizeof(A2)));
}
#define AOTPACK_SAME_SIGNATURE(name)                                                        \
  static_assert(same_shape(static_cast<our_##name>(nullptr), &::name),                      \
                "signature of " #name " differs from cuda.h");
AOTPACK_DRIVER_ENTRY_POINTS(AOTPACK_SAME_SIGNATURE)

int main() {
  std::printf("cuda_driver.hpp matches cuda.h (CUDA_VERSION %d)\n", CUDA_VERSION);
  return 0;
}
