// The CUDA-event timing backend: the CUDA driver API loaded at run time with dlopen, so the
// library builds and runs without CUDA. No CUDA header is needed: the few types and constants
// used are declared here (CUresult and CUdevice are int; contexts, events and streams are
// opaque pointers), with the values and symbol versions of cuda.h.
//
// What it must never do (DESIGN.md, "The live path"): block the training thread. There is no
// synchronizing entry point in the driver table at all; marks are read with cuEventQuery and
// only measured once both have completed.
#include "laggard/cuda.hpp"
#include "laggard/detail/cuda_driver.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <initializer_list>
#include <mutex>
#include <new>
#include <string>
#include <utility>
#include <vector>

namespace laggard {
namespace {

// Values from cuda.h (CUresult, CUevent_flags).
constexpr int kSuccess = 0;             // CUDA_SUCCESS
constexpr int kErrorDeinitialized = 4;  // CUDA_ERROR_DEINITIALIZED
constexpr int kErrorStubLibrary = 34;   // CUDA_ERROR_STUB_LIBRARY
constexpr int kErrorNoDevice = 100;     // CUDA_ERROR_NO_DEVICE
constexpr int kErrorNotReady = 600;     // CUDA_ERROR_NOT_READY
constexpr unsigned kEventDefault = 0;   // CU_EVENT_DEFAULT: timing enabled
constexpr std::uint32_t kMaxCapacity = 1u << 20;
constexpr const char* kLibrary = "libcuda.so.1";

using detail::CudaDriverApi;

std::string describe(const CudaDriverApi& api, int rc) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (api.get_error_name == nullptr || api.get_error_name(rc, &name) != kSuccess) name = nullptr;
  if (api.get_error_string == nullptr || api.get_error_string(rc, &text) != kSuccess)
    text = nullptr;
  std::string out = name ? std::string(name) : "CUDA error " + std::to_string(rc);
  if (text) out.append(" (").append(text).append(")");
  return out;
}

bool complete(const CudaDriverApi& api) {
  return api.init && api.device_get_count && api.device_get && api.ctx_get_current &&
         api.ctx_set_current && api.ctx_get_device && api.primary_ctx_retain && api.event_create &&
         api.event_record && api.event_query && api.event_elapsed_time && api.event_destroy &&
         api.get_error_string;
}

// A fixed pool of timing events; mark id = pool slot.
class CudaEventBackend final : public TimingBackend {
 public:
  CudaEventBackend(const CudaDriverApi& api, std::vector<void*> events)
      : api_(api), events_(std::move(events)) {}

  ~CudaEventBackend() override {
    for (void* event : events_) {
      // Errors are ignored: the context (or, at process exit, the whole driver) may be gone.
      if (event != nullptr && api_.event_destroy(event) == kErrorDeinitialized) break;
    }
  }

  const char* name() const noexcept override { return "cuda-event"; }

  std::uint32_t capacity() const noexcept override {
    return static_cast<std::uint32_t>(events_.size());
  }

  bool record(std::uint32_t id) noexcept override {
    if (id >= events_.size()) return false;
    return api_.event_record(events_[id], stream_) == kSuccess;  // enqueues; never waits
  }

  int elapsed_ms(std::uint32_t start_id, std::uint32_t end_id, double& ms) noexcept override {
    if (start_id >= events_.size() || end_id >= events_.size()) return -1;
    // The end mark first: it is the one most likely still ahead of the device.
    for (void* event : {events_[end_id], events_[start_id]}) {
      const int rc = api_.event_query(event);
      if (rc == kErrorNotReady) return 0;
      if (rc != kSuccess) return -1;
    }
    float elapsed = 0.0f;
    const int rc = api_.event_elapsed_time(&elapsed, events_[start_id], events_[end_id]);
    if (rc == kErrorNotReady) return 0;
    if (rc != kSuccess) return -1;
    // Negative only if the marks went to different streams out of order: not a duration.
    if (!(elapsed >= 0.0f) || !std::isfinite(elapsed)) return -1;
    ms = static_cast<double>(elapsed);
    return 1;
  }

  void set_stream(void* stream) noexcept override { stream_ = stream; }

 private:
  CudaDriverApi api_;
  std::vector<void*> events_;
  void* stream_ = nullptr;  // CUstream; nullptr = the legacy default stream
};

CudaBackendResult fail(std::string reason) {
  CudaBackendResult r;
  r.reason = std::move(reason);
  return r;
}

CudaBackendResult make_with(const CudaDriverApi& api, std::uint32_t capacity, int device) {
  if (!complete(api)) return fail("the CUDA driver table is incomplete");
  if (capacity < 2 || capacity > kMaxCapacity)
    return fail("CUDA backend capacity must be in [2, " + std::to_string(kMaxCapacity) +
                "], got " + std::to_string(capacity));
  if (device < -1)
    return fail("CUDA device must be -1 (the current context's) or an ordinal, got " +
                std::to_string(device));

  int rc = api.init(0);
  if (rc == kErrorNoDevice) return fail("no CUDA device");
  if (rc == kErrorStubLibrary)
    return fail("no CUDA driver: libcuda.so.1 is the CUDA toolkit's stub library");
  if (rc != kSuccess) return fail("cuInit failed: " + describe(api, rc));
  int count = 0;
  rc = api.device_get_count(&count);
  if (rc != kSuccess) return fail("cuDeviceGetCount failed: " + describe(api, rc));
  if (count <= 0) return fail("no CUDA device");
  if (device >= count)
    return fail("CUDA device " + std::to_string(device) + " does not exist (" +
                std::to_string(count) + " device" + (count == 1 ? "" : "s") + ")");

  void* ctx = nullptr;
  rc = api.ctx_get_current(&ctx);
  if (rc != kSuccess) return fail("cuCtxGetCurrent failed: " + describe(api, rc));
  if (ctx != nullptr) {
    if (device >= 0) {  // the thread's context must be on the device asked for
      int wanted = 0;
      int current = 0;
      rc = api.device_get(&wanted, device);
      if (rc != kSuccess) return fail("cuDeviceGet failed: " + describe(api, rc));
      rc = api.ctx_get_device(&current);
      if (rc != kSuccess) return fail("cuCtxGetDevice failed: " + describe(api, rc));
      if (current != wanted)
        return fail("the current CUDA context is on another device than device " +
                    std::to_string(device));
    }
  } else {
    if (device < 0)
      return fail(
          "no current CUDA context on this thread (initialize CUDA first, e.g. "
          "torch.cuda.init() or cudaFree(0), or pass a device)");
    int dev = 0;
    rc = api.device_get(&dev, device);
    if (rc != kSuccess) return fail("cuDeviceGet failed: " + describe(api, rc));
    // The primary context is shared with the CUDA runtime (and PyTorch); it stays retained for
    // the rest of the process, as the runtime keeps it, so it is never torn down under anyone.
    rc = api.primary_ctx_retain(&ctx, dev);
    if (rc != kSuccess) return fail("cuDevicePrimaryCtxRetain failed: " + describe(api, rc));
    rc = api.ctx_set_current(ctx);
    if (rc != kSuccess) return fail("cuCtxSetCurrent failed: " + describe(api, rc));
  }

  std::vector<void*> events(capacity, nullptr);
  for (std::uint32_t i = 0; i < capacity; ++i) {
    rc = api.event_create(&events[i], kEventDefault);
    if (rc != kSuccess) {
      events[i] = nullptr;
      for (std::uint32_t j = 0; j < i; ++j) api.event_destroy(events[j]);
      return fail("cuEventCreate failed after " + std::to_string(i) + " of " +
                  std::to_string(capacity) + " events: " + describe(api, rc));
    }
  }
  CudaBackendResult r;
  r.backend = std::make_unique<CudaEventBackend>(api, std::move(events));
  return r;
}

// libcuda.so.1, opened once per process and never closed (function pointers stay valid until
// exit, even in destructors of static objects).
struct Driver {
  CudaDriverApi api;
  std::string error;  // empty = loaded
};

template <typename F>
bool resolve(void* lib, F& fn, std::initializer_list<const char*> names, std::string& error) {
  for (const char* n : names) {
    if (void* sym = dlsym(lib, n)) {
      fn = reinterpret_cast<F>(sym);
      return true;
    }
  }
  error = std::string(kLibrary) + " lacks " + *names.begin();
  return false;
}

void load(Driver& d) {
  dlerror();
  void* lib = dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    d.error = std::string(kLibrary) + " could not be loaded: " + (why ? why : "unknown error");
    return;
  }
  CudaDriverApi& a = d.api;
  std::string& e = d.error;
  // Versioned names as cuda.h maps them (cuEventDestroy -> cuEventDestroy_v2, and since CUDA
  // 12.8 cuEventElapsedTime -> cuEventElapsedTime_v2), falling back for older drivers.
  const bool ok = resolve(lib, a.init, {"cuInit"}, e) &&
                  resolve(lib, a.device_get_count, {"cuDeviceGetCount"}, e) &&
                  resolve(lib, a.device_get, {"cuDeviceGet"}, e) &&
                  resolve(lib, a.ctx_get_current, {"cuCtxGetCurrent"}, e) &&
                  resolve(lib, a.ctx_set_current, {"cuCtxSetCurrent"}, e) &&
                  resolve(lib, a.ctx_get_device, {"cuCtxGetDevice"}, e) &&
                  resolve(lib, a.primary_ctx_retain, {"cuDevicePrimaryCtxRetain"}, e) &&
                  resolve(lib, a.event_create, {"cuEventCreate"}, e) &&
                  resolve(lib, a.event_record, {"cuEventRecord"}, e) &&
                  resolve(lib, a.event_query, {"cuEventQuery"}, e) &&
                  resolve(lib, a.event_elapsed_time,
                          {"cuEventElapsedTime_v2", "cuEventElapsedTime"}, e) &&
                  resolve(lib, a.event_destroy, {"cuEventDestroy_v2", "cuEventDestroy"}, e) &&
                  resolve(lib, a.get_error_string, {"cuGetErrorString"}, e);
  if (!ok) {
    a = CudaDriverApi{};
    return;
  }
  std::string ignored;
  if (!resolve(lib, a.get_error_name, {"cuGetErrorName"}, ignored)) a.get_error_name = nullptr;
}

const Driver& driver() {
  static Driver d;
  static std::once_flag once;
  std::call_once(once, [] {
    try {
      load(d);
    } catch (...) {  // out of memory while building the message
      d.api = CudaDriverApi{};
      d.error = "libcuda.so.1 could not be loaded";
    }
  });
  return d;
}

}  // namespace

CudaBackendResult make_cuda_backend(std::uint32_t capacity, int device) {
  try {
    const Driver& d = driver();
    if (!d.error.empty()) return fail(d.error);
    return make_with(d.api, capacity, device);
  } catch (const std::exception& e) {
    return fail(std::string("CUDA backend could not be created: ") + e.what());
  } catch (...) {
    return fail("CUDA backend could not be created");
  }
}

bool should_log_cuda_fallback(std::string_view reason) {
  static std::mutex mu;
  static std::vector<std::string> seen;
  constexpr std::size_t kMaxReasons = 16;
  try {
    std::lock_guard<std::mutex> lock(mu);
    if (std::find(seen.begin(), seen.end(), reason) != seen.end()) return false;
    if (seen.size() >= kMaxReasons) return false;
    seen.emplace_back(reason);
    return true;
  } catch (...) {
    return false;
  }
}

namespace detail {
CudaBackendResult make_cuda_backend_with(const CudaDriverApi& api, std::uint32_t capacity,
                                         int device) {
  try {
    return make_with(api, capacity, device);
  } catch (const std::exception& e) {
    return fail(std::string("CUDA backend could not be created: ") + e.what());
  } catch (...) {
    return fail("CUDA backend could not be created");
  }
}
}  // namespace detail

}  // namespace laggard
