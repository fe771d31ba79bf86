// laggard — the CUDA-event timing backend, loaded at run time.
//
// The CUDA driver (libcuda.so.1) is opened with dlopen the first time a backend is asked for; the
// library never links against CUDA and this header does not include cuda.h, so programs without
// CUDA compile against it and simply get no backend (the Recorder then uses the host clock).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "laggard/export.hpp"
#include "laggard/recorder.hpp"

namespace laggard {

/// What make_cuda_backend gives: a backend, or nullptr and why not.
struct CudaBackendResult {
  /// A "cuda-event" backend, or nullptr when CUDA cannot be used here.
  std::unique_ptr<TimingBackend> backend;
  /// Empty on success; otherwise one line for a human, e.g.
  /// "libcuda.so.1 could not be loaded: ...", "no CUDA device", "no current CUDA context ...".
  std::string reason;
};

/// Creates a CUDA-event timing backend with `capacity` mark slots (events), for a Recorder.
///
/// Context: with `device == -1` the backend uses the calling thread's current CUDA context (the
/// one PyTorch or the CUDA runtime made current) and fails with "no current CUDA context" if
/// there is none. With `device >= 0`: if the thread has no current context, the device's primary
/// context (the one the CUDA runtime and PyTorch share) is retained for the rest of the process
/// and made current on the calling thread; if the thread's current context is on another device,
/// creation fails (nothing is changed).
///
/// Cost: the first call in a process opens libcuda.so.1 and calls cuInit (milliseconds; the
/// outcome, success or not, is cached for the process). Each call then creates `capacity` events
/// up front (a few microseconds each; 4096 events take a few milliseconds and little memory);
/// nothing is allocated or created afterwards. On the backend, `record` is one cuEventRecord on
/// the stream given to `set_stream` (nullptr = the legacy default stream) and never blocks;
/// `elapsed_ms` is two cuEventQuery calls and, once both marks have completed, one
/// cuEventElapsedTime. No call of the backend ever synchronizes the device, a stream or an event.
///
/// Thread-safety: make_cuda_backend may be called from any thread, concurrently. A backend is
/// not thread-safe; use it from one thread (the Recorder's training thread), on which its
/// context is current. It may be destroyed on any thread; destruction releases the events and
/// ignores errors (at process exit the driver may already be gone).
///
/// `capacity` must be in [2, 1048576]; a Recorder needs at least 2 * (max_pending_steps + 1).
/// Never throws: every failure is returned as a reason.
LAGGARD_API CudaBackendResult make_cuda_backend(std::uint32_t capacity = 4096, int device = -1);

/// Log-once helper for fallbacks: true the first time a given `reason` is passed in this
/// process, false for every later call with the same reason (and for any reason after 16
/// distinct ones). Thread-safe. Lets every caller that got no backend log why exactly once:
///   auto r = laggard::make_cuda_backend();
///   if (!r.backend && laggard::should_log_cuda_fallback(r.reason)) log(r.reason);
LAGGARD_API bool should_log_cuda_fallback(std::string_view reason);

}  // namespace laggard
