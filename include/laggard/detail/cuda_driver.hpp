// laggard — test seam: the CUDA backend over a driver table of one's own (tests pass a fake
// driver; laggard/cuda.hpp's make_cuda_backend loads the real one). Not part of the stable API.
#pragma once

#include <cstdint>

#include "laggard/cuda.hpp"
#include "laggard/export.hpp"

namespace laggard::detail {

/// The CUDA driver entry points the backend uses, as plain function pointers over opaque
/// handles (CUresult is int, CUdevice is int, CUcontext/CUevent/CUstream are pointers).
/// make_cuda_backend fills one from libcuda.so.1; tests pass a fake driver to
/// make_cuda_backend_with. There is deliberately no synchronizing entry point here.
struct CudaDriverApi {
  int (*init)(unsigned flags) = nullptr;                        ///< cuInit
  int (*device_get_count)(int* count) = nullptr;                ///< cuDeviceGetCount
  int (*device_get)(int* device, int ordinal) = nullptr;        ///< cuDeviceGet
  int (*ctx_get_current)(void** ctx) = nullptr;                 ///< cuCtxGetCurrent
  int (*ctx_set_current)(void* ctx) = nullptr;                  ///< cuCtxSetCurrent
  int (*ctx_get_device)(int* device) = nullptr;                 ///< cuCtxGetDevice
  int (*primary_ctx_retain)(void** ctx, int device) = nullptr;  ///< cuDevicePrimaryCtxRetain
  int (*event_create)(void** event, unsigned flags) = nullptr;  ///< cuEventCreate
  int (*event_record)(void* event, void* stream) = nullptr;     ///< cuEventRecord
  int (*event_query)(void* event) = nullptr;                    ///< cuEventQuery
  int (*event_elapsed_time)(float* ms, void* start, void* end) = nullptr;  ///< ..._v2 if present
  int (*event_destroy)(void* event) = nullptr;                             ///< cuEventDestroy_v2
  int (*get_error_string)(int error, const char** text) = nullptr;         ///< cuGetErrorString
  int (*get_error_name)(int error, const char** text) = nullptr;  ///< cuGetErrorName (optional)
};

/// make_cuda_backend over a given driver table (which must outlive nothing: it is copied).
/// Calls api.init(0) first. Every entry but get_error_name must be set.
LAGGARD_API CudaBackendResult make_cuda_backend_with(const CudaDriverApi& api,
                                                     std::uint32_t capacity, int device);

}  // namespace laggard::detail
