// cuda_driver.hpp — the slice of the CUDA driver API aotpack uses, declared here so the
// runtime builds without the CUDA toolkit, plus a table of entry points resolved with
// dlopen/dlsym from libcuda.so.1 at run time.
//
// Every type, enum value and struct layout below must match cuda.h exactly (ABI). The test
// runtime_cpp/tests/test_cuda_abi.cpp static_asserts this against a real cuda.h when one is
// installed. Versioned symbols (cuMemAlloc_v2, ...) are the ones cuda.h maps the plain names to.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace aotpack {
namespace cu {

// ---- scalar / handle types -------------------------------------------------------------
typedef int CUresult;  // enum cudaError_enum; 0 = CUDA_SUCCESS
typedef int CUdevice;
typedef uint64_t CUdeviceptr;  // CUdeviceptr_v2: unsigned long long
typedef struct CUctx_st* CUcontext;
typedef struct CUmod_st* CUmodule;
typedef struct CUfunc_st* CUfunction;
typedef struct CUstream_st* CUstream;
typedef struct CUevent_st* CUevent;
typedef struct CUgraph_st* CUgraph;
typedef struct CUgraphExec_st* CUgraphExec;
typedef uint32_t cuuint32_t;
typedef uint64_t cuuint64_t;

constexpr CUresult CUDA_SUCCESS = 0;
constexpr CUresult CUDA_ERROR_OUT_OF_MEMORY = 2;
constexpr CUresult CUDA_ERROR_NO_DEVICE = 100;
constexpr CUresult CUDA_ERROR_INVALID_DEVICE = 101;
constexpr CUresult CUDA_ERROR_NO_BINARY_FOR_GPU = 209;
constexpr CUresult CUDA_ERROR_UNSUPPORTED_PTX_VERSION = 222;
constexpr CUresult CUDA_ERROR_NOT_FOUND = 500;

// ---- enums (values as in cuda.h) --------------------------------------------------------
enum CUdevice_attribute {
  CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
  CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,
};
enum CUfunction_attribute {
  CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
  CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14,
};
enum CUtensorMapDataType {
  CU_TENSOR_MAP_DATA_TYPE_UINT8 = 0,
  CU_TENSOR_MAP_DATA_TYPE_UINT16 = 1,
  CU_TENSOR_MAP_DATA_TYPE_UINT32 = 2,
  CU_TENSOR_MAP_DATA_TYPE_INT32 = 3,
  CU_TENSOR_MAP_DATA_TYPE_UINT64 = 4,
  CU_TENSOR_MAP_DATA_TYPE_INT64 = 5,
  CU_TENSOR_MAP_DATA_TYPE_FLOAT16 = 6,
  CU_TENSOR_MAP_DATA_TYPE_FLOAT32 = 7,
  CU_TENSOR_MAP_DATA_TYPE_FLOAT64 = 8,
  CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 = 9,
};
enum CUtensorMapInterleave { CU_TENSOR_MAP_INTERLEAVE_NONE = 0 };
enum CUtensorMapSwizzle {
  CU_TENSOR_MAP_SWIZZLE_NONE = 0,
  CU_TENSOR_MAP_SWIZZLE_32B = 1,
  CU_TENSOR_MAP_SWIZZLE_64B = 2,
  CU_TENSOR_MAP_SWIZZLE_128B = 3,
};
enum CUtensorMapL2promotion {
  CU_TENSOR_MAP_L2_PROMOTION_NONE = 0,
  CU_TENSOR_MAP_L2_PROMOTION_L2_64B = 1,
  CU_TENSOR_MAP_L2_PROMOTION_L2_128B = 2,
  CU_TENSOR_MAP_L2_PROMOTION_L2_256B = 3,
};
enum CUtensorMapFloatOOBfill {
  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE = 0,
  CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA = 1,
};
enum CUlaunchAttributeID {
  CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4,
  CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6,
};
enum CUstreamCaptureMode {
  CU_STREAM_CAPTURE_MODE_GLOBAL = 0,
  CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1,
  CU_STREAM_CAPTURE_MODE_RELAXED = 2,
};
enum CUstreamCaptureStatus {
  CU_STREAM_CAPTURE_STATUS_NONE = 0,
  CU_STREAM_CAPTURE_STATUS_ACTIVE = 1,
  CU_STREAM_CAPTURE_STATUS_INVALIDATED = 2,
};
enum CUpointer_attribute {
  CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2,     // unsigned int: a CUmemorytype
  CU_POINTER_ATTRIBUTE_IS_MANAGED = 8,      // unsigned int (bool)
  CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9,  // int
  CU_POINTER_ATTRIBUTE_RANGE_START_ADDR = 11,  // CUdeviceptr
  CU_POINTER_ATTRIBUTE_RANGE_SIZE = 12,     // size_t
};
enum CUmemorytype {
  CU_MEMORYTYPE_HOST = 1,
  CU_MEMORYTYPE_DEVICE = 2,
  CU_MEMORYTYPE_ARRAY = 3,
  CU_MEMORYTYPE_UNIFIED = 4,
};
constexpr CUresult CUDA_ERROR_INVALID_VALUE = 1;
constexpr unsigned CU_STREAM_NON_BLOCKING = 0x1;
constexpr unsigned CU_EVENT_DEFAULT = 0x0;
constexpr unsigned CU_EVENT_DISABLE_TIMING = 0x2;

// ---- structs ------------------------------------------------------------------------------
// Opaque 128-byte tensor map. cuda.h 12.x aligns it to 64, 13.x to 128: we use 128, which
// satisfies both (the driver requires >= 64 for cuTensorMapEncodeTiled's output).
struct alignas(128) CUtensorMap {
  cuuint64_t opaque[16];
};

// Value union of a launch attribute: 64 bytes, 8-aligned (cuda.h's union has pointer and
// 64-bit members); we use clusterDim and programmaticStreamSerializationAllowed.
union CUlaunchAttributeValue {
  char pad[64];
  uint64_t align8;
  struct {
    unsigned int x, y, z;
  } clusterDim;
  int programmaticStreamSerializationAllowed;
};

struct CUlaunchAttribute {
  CUlaunchAttributeID id;
  char pad[8 - sizeof(CUlaunchAttributeID)];
  CUlaunchAttributeValue value;
};

struct CUlaunchConfig {
  unsigned int gridDimX, gridDimY, gridDimZ;
  unsigned int blockDimX, blockDimY, blockDimZ;
  unsigned int sharedMemBytes;
  CUstream hStream;
  CUlaunchAttribute* attrs;
  unsigned int numAttrs;
};

// ---- entry points ---------------------------------------------------------------------------
// Function-pointer table. Members are named after the API (no version suffix); load_driver()
// fills them from the versioned symbols.
struct Driver {
  void* handle = nullptr;
  std::string path;
  CUresult (*cuInit)(unsigned int);
  CUresult (*cuDriverGetVersion)(int*);
  CUresult (*cuGetErrorString)(CUresult, const char**);
  CUresult (*cuGetErrorName)(CUresult, const char**);
  CUresult (*cuDeviceGetCount)(int*);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDeviceGetName)(char*, int, CUdevice);
  CUresult (*cuDeviceGetAttribute)(int*, CUdevice_attribute, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);                 // _v2
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuCtxGetCurrent)(CUcontext*);
  CUresult (*cuModuleLoadData)(CUmodule*, const void*);
  CUresult (*cuModuleUnload)(CUmodule);
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*cuFuncSetAttribute)(CUfunction, CUfunction_attribute, int);
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t);                     // _v2
  CUresult (*cuMemFree)(CUdeviceptr);                               // _v2
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void*, size_t);       // _v2
  CUresult (*cuMemcpyDtoH)(void*, CUdeviceptr, size_t);             // _v2
  CUresult (*cuPointerGetAttribute)(void*, CUpointer_attribute, CUdeviceptr);
  CUresult (*cuMemsetD32Async)(CUdeviceptr, unsigned int, size_t, CUstream);
  CUresult (*cuMemsetD8)(CUdeviceptr, unsigned char, size_t);                    // _v2
  CUresult (*cuMemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void*, size_t, CUstream);     // _v2
  CUresult (*cuMemcpyDtoHAsync)(void*, CUdeviceptr, size_t, CUstream);           // _v2
  CUresult (*cuLaunchKernelEx)(const CUlaunchConfig*, CUfunction, void**, void**);
  CUresult (*cuTensorMapEncodeTiled)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                     const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                     const cuuint32_t*, CUtensorMapInterleave,
                                     CUtensorMapSwizzle, CUtensorMapL2promotion,
                                     CUtensorMapFloatOOBfill);
  CUresult (*cuStreamCreate)(CUstream*, unsigned int);
  CUresult (*cuStreamDestroy)(CUstream);                            // _v2
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuStreamIsCapturing)(CUstream, CUstreamCaptureStatus*);
  CUresult (*cuStreamBeginCapture)(CUstream, CUstreamCaptureMode);  // _v2
  CUresult (*cuStreamEndCapture)(CUstream, CUgraph*);
  CUresult (*cuGraphInstantiateWithFlags)(CUgraphExec*, CUgraph, unsigned long long);
  CUresult (*cuGraphLaunch)(CUgraphExec, CUstream);
  CUresult (*cuGraphExecDestroy)(CUgraphExec);
  CUresult (*cuGraphDestroy)(CUgraph);
  CUresult (*cuEventCreate)(CUevent*, unsigned int);
  CUresult (*cuEventDestroy)(CUevent);                              // _v2
  CUresult (*cuEventRecord)(CUevent, CUstream);
  CUresult (*cuEventSynchronize)(CUevent);
  CUresult (*cuEventElapsedTime)(float*, CUevent, CUevent);         // _v2 when available
  // Optional (nullptr when the library lacks them): the weights upload pins its host pages.
  CUresult (*cuMemHostRegister)(void*, size_t, unsigned int) = nullptr;  // _v2
  CUresult (*cuMemHostUnregister)(void*) = nullptr;
};

// Loads the driver once per process (thread-safe) and calls cuInit(0). The path is
// $AOTPACK_LIBCUDA if set, else "libcuda.so.1". Throws Error(DRIVER_NOT_FOUND) when the
// library or a required symbol is missing, Error(CUDA_ERROR) when cuInit fails.
const Driver& driver();

// "cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY (out of memory)" style text for `r`.
std::string describe(CUresult r);

// Throws Error(CUDA_ERROR, or OUT_OF_MEMORY for CUDA_ERROR_OUT_OF_MEMORY) when r != 0:
// "<context>: <call> failed: <NAME> (<description>)".
void check(CUresult r, const char* call, const std::string& context);

// The device of `ordinal`. Throws Error(INVALID_ARGUMENT) naming the number of visible
// devices when there is no such device, Error(CUDA_ERROR) when the driver fails.
CUdevice device(int ordinal);

// cuDeviceGetAttribute, checked (`context` as in check()).
int attribute(CUdevice dev, CUdevice_attribute a, const std::string& context);

}  // namespace cu
}  // namespace aotpack
