// laggard_cuda_check: checks the CUDA-event backend on a real GPU. See README.md.
//
// Creates the backend, times known work (large cuMemsetD8Async fills, so no nvcc is needed)
// through a laggard::Recorder on a stream, polls without ever blocking until the samples arrive,
// and prints each stage's device ms beside the host ms its enqueueing took. Asserts:
//   - every stage's device ms > 0, and 8 fills take about 4x as long as 2 fills;
//   - marks are read only once complete: when a sample arrives, an independent event recorded
//     after that step's work has completed; end_step returned before the device finished;
//   - the Recorder's polls saw not-ready marks (the non-blocking path ran) and dropped nothing;
//   - without a current context make_cuda_backend(.., -1) falls back with a reason, and with a
//     device it makes the primary context current and works.
// Exit status: 0 success, 1 failure, 77 no GPU (libcuda.so.1 missing or no device).
//
// The driver API is loaded with dlopen, as the library does; no CUDA header is needed.
#include <dlfcn.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "laggard/cuda.hpp"
#include "laggard/recorder.hpp"

namespace {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = void*;
using CUstream = void*;
using CUevent = void*;
constexpr CUresult kSuccess = 0;
constexpr CUresult kStubLibrary = 34;
constexpr CUresult kNoDevice = 100;
constexpr CUresult kNotReady = 600;
constexpr unsigned kStreamNonBlocking = 0x1;  // CU_STREAM_NON_BLOCKING
constexpr unsigned kEventDisableTiming = 0x2;  // CU_EVENT_DISABLE_TIMING

struct Cu {
  CUresult (*Init)(unsigned);
  CUresult (*DriverGetVersion)(int*);
  CUresult (*DeviceGetCount)(int*);
  CUresult (*DeviceGet)(CUdevice*, int);
  CUresult (*DeviceGetName)(char*, int, CUdevice);
  CUresult (*DevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*CtxSetCurrent)(CUcontext);
  CUresult (*CtxGetCurrent)(CUcontext*);
  CUresult (*MemAlloc)(CUdeviceptr*, size_t);
  CUresult (*MemFree)(CUdeviceptr);
  CUresult (*MemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
  CUresult (*StreamCreate)(CUstream*, unsigned);
  CUresult (*StreamDestroy)(CUstream);
  CUresult (*EventCreate)(CUevent*, unsigned);
  CUresult (*EventRecord)(CUevent, CUstream);
  CUresult (*EventQuery)(CUevent);
  CUresult (*EventDestroy)(CUevent);
  CUresult (*GetErrorString)(CUresult, const char**);
} cu;

int failures = 0;

#define CHECK(cond, ...)                                          \
  do {                                                            \
    if (!(cond)) {                                                \
      ++failures;                                                 \
      std::printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      std::printf(__VA_ARGS__);                                   \
      std::printf("\n");                                          \
    }                                                             \
  } while (0)

std::string err(CUresult rc) {
  const char* s = nullptr;
  if (cu.GetErrorString && cu.GetErrorString(rc, &s) == kSuccess && s)
    return std::to_string(rc) + " " + s;
  return std::to_string(rc);
}

#define CU(call)                                                                           \
  do {                                                                                     \
    CUresult rc_ = (call);                                                                 \
    if (rc_ != kSuccess) {                                                                 \
      std::printf("FAIL %s:%d: %s returned %s\n", __FILE__, __LINE__, #call, err(rc_).c_str()); \
      return 1;                                                                            \
    }                                                                                      \
  } while (0)

template <typename F>
bool sym(void* lib, F& f, const char* name) {
  f = reinterpret_cast<F>(dlsym(lib, name));
  if (!f) std::printf("libcuda.so.1 lacks %s\n", name);
  return f != nullptr;
}

bool load(void* lib) {
  return sym(lib, cu.Init, "cuInit") && sym(lib, cu.DriverGetVersion, "cuDriverGetVersion") &&
         sym(lib, cu.DeviceGetCount, "cuDeviceGetCount") && sym(lib, cu.DeviceGet, "cuDeviceGet") &&
         sym(lib, cu.DeviceGetName, "cuDeviceGetName") &&
         sym(lib, cu.DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain") &&
         sym(lib, cu.CtxSetCurrent, "cuCtxSetCurrent") &&
         sym(lib, cu.CtxGetCurrent, "cuCtxGetCurrent") && sym(lib, cu.MemAlloc, "cuMemAlloc_v2") &&
         sym(lib, cu.MemFree, "cuMemFree_v2") && sym(lib, cu.MemsetD8Async, "cuMemsetD8Async") &&
         sym(lib, cu.StreamCreate, "cuStreamCreate") &&
         sym(lib, cu.StreamDestroy, "cuStreamDestroy_v2") &&
         sym(lib, cu.EventCreate, "cuEventCreate") && sym(lib, cu.EventRecord, "cuEventRecord") &&
         sym(lib, cu.EventQuery, "cuEventQuery") && sym(lib, cu.EventDestroy, "cuEventDestroy_v2") &&
         sym(lib, cu.GetErrorString, "cuGetErrorString");
}

// Forwards to the CUDA backend and counts what elapsed_ms answered.
class Counting final : public laggard::TimingBackend {
 public:
  explicit Counting(std::unique_ptr<laggard::TimingBackend> inner) : inner_(std::move(inner)) {}
  const char* name() const noexcept override { return inner_->name(); }
  std::uint32_t capacity() const noexcept override { return inner_->capacity(); }
  bool record(std::uint32_t id) noexcept override {
    ++records;
    return inner_->record(id);
  }
  int elapsed_ms(std::uint32_t a, std::uint32_t b, double& ms) noexcept override {
    const int r = inner_->elapsed_ms(a, b, ms);
    (r > 0 ? complete : r == 0 ? not_ready : errors)++;
    return r;
  }
  void set_stream(void* s) noexcept override { inner_->set_stream(s); }
  std::uint64_t records = 0, complete = 0, not_ready = 0, errors = 0;

 private:
  std::unique_ptr<laggard::TimingBackend> inner_;
};

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

struct StepInfo {
  double host_big_ms = 0, host_small_ms = 0;
  CUevent done = nullptr;  // recorded after the step's work
  bool received = false;
};

int run() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    std::printf("SKIP: libcuda.so.1 could not be loaded: %s\n", dlerror());
    return 77;
  }
  if (!load(lib)) return 1;
  CUresult rc = cu.Init(0);
  if (rc == kNoDevice) {
    std::printf("SKIP: no CUDA device\n");
    return 77;
  }
  if (rc == kStubLibrary) {
    std::printf("SKIP: no CUDA driver (libcuda.so.1 is the toolkit's stub library)\n");
    return 77;
  }
  CU(rc);
  int count = 0, version = 0;
  CU(cu.DeviceGetCount(&count));
  if (count == 0) {
    std::printf("SKIP: no CUDA device\n");
    return 77;
  }
  CU(cu.DriverGetVersion(&version));
  CUdevice dev = 0;
  CU(cu.DeviceGet(&dev, 0));
  char name[256] = {};
  CU(cu.DeviceGetName(name, sizeof name, dev));
  std::printf("device 0: %s, driver API %d, %d device(s)\n", name, version, count);

  // 1. Fallback and primary-context paths, each on a fresh thread (no context current there).
  {
    laggard::CudaBackendResult none, dev0;
    std::thread([&] { none = laggard::make_cuda_backend(64, -1); }).join();
    CHECK(none.backend == nullptr, "a thread without a context got a backend");
    CHECK(none.reason.rfind("no current CUDA context", 0) == 0, "reason: %s",
          none.reason.c_str());
    std::printf("no context, device -1: fallback \"%s\"\n", none.reason.c_str());
    std::thread([&] {
      dev0 = laggard::make_cuda_backend(64, 0);
      CUcontext c = nullptr;
      CHECK(cu.CtxGetCurrent(&c) == kSuccess && c != nullptr, "device 0 left no context current");
      if (dev0.backend) {
        CHECK(dev0.backend->record(0) && dev0.backend->record(1), "record on the default stream");
        double ms = 0;
        int r = 0;
        const auto t0 = std::chrono::steady_clock::now();
        while ((r = dev0.backend->elapsed_ms(0, 1, ms)) == 0 && ms_since(t0) < 5000)
          std::this_thread::sleep_for(std::chrono::microseconds(50));
        CHECK(r == 1 && ms >= 0.0, "empty interval: r=%d ms=%f", r, ms);
      }
      dev0.backend.reset();  // destroyed on the thread that made it
    }).join();
    CHECK(dev0.reason.empty(), "device 0 from a bare thread: %s", dev0.reason.c_str());
  }

  // 2. The training-like run on the main thread: primary context current, as PyTorch would.
  CUcontext ctx = nullptr;
  CU(cu.DevicePrimaryCtxRetain(&ctx, dev));
  CU(cu.CtxSetCurrent(ctx));
  laggard::CudaBackendResult made = laggard::make_cuda_backend(4096, -1);
  if (!made.backend) {
    std::printf("FAIL: make_cuda_backend with a current context: %s\n", made.reason.c_str());
    return 1;
  }
  auto counting = std::make_unique<Counting>(std::move(made.backend));
  Counting* backend = counting.get();

  const size_t bytes = size_t{1} << 30;  // 1 GiB
  CUdeviceptr buf = 0;
  CU(cu.MemAlloc(&buf, bytes));
  CUstream stream = nullptr;
  CU(cu.StreamCreate(&stream, kStreamNonBlocking));

  constexpr int kBig = 8, kSmall = 2;  // 1 GiB fills per stage
  constexpr int kStreamSteps = 8, kDefaultSteps = 2, kSteps = kStreamSteps + kDefaultSteps;
  constexpr int kInFlight = 3;  // sampled steps allowed to wait for the device
  std::vector<StepInfo> info(kSteps);
  std::vector<laggard::StepSample> samples;
  int violations = 0;      // a sample arrived before its step's work had completed
  int returned_early = 0;  // end_step returned while the device was still working

  laggard::Recorder rec({/*interval=*/1, {}, /*max_pending_steps=*/4}, std::move(counting));
  rec.on_sample([&](const laggard::StepSample& s) {
    StepInfo& si = info[static_cast<size_t>(s.step)];
    if (cu.EventQuery(si.done) != kSuccess) ++violations;
    si.received = true;
    samples.push_back(s);
  });
  const auto big = rec.stage("fill_8GiB", laggard::StageKind::compute);
  const auto small = rec.stage("fill_2GiB", laggard::StageKind::compute);

  std::uint64_t polls = 0, empty_polls = 0;
  const auto poll_until = [&](size_t want) {
    const auto t0 = std::chrono::steady_clock::now();
    while (samples.size() < want) {
      const size_t before = samples.size();
      rec.poll();
      ++polls;
      if (samples.size() == before) {
        ++empty_polls;
        if (ms_since(t0) > 10000) return false;
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
    return true;
  };

  for (int step = 0; step < kSteps; ++step) {
    CUstream s = step < kStreamSteps ? stream : nullptr;  // last steps: the legacy default stream
    // Let the own stream drain before using the default one (it does not wait for a
    // non-blocking stream), so the two streams' fills do not overlap and stretch each other.
    if (step == kStreamSteps && !poll_until(static_cast<size_t>(step))) {
      std::printf("FAIL: no sample within 10 s\n");
      return 1;
    }
    rec.backend()->set_stream(s);
    StepInfo& si = info[static_cast<size_t>(step)];
    CU(cu.EventCreate(&si.done, kEventDisableTiming));
    rec.begin_step(step);
    auto t0 = std::chrono::steady_clock::now();
    {
      laggard::Section sec(rec, big);
      for (int i = 0; i < kBig; ++i) CU(cu.MemsetD8Async(buf, static_cast<unsigned char>(i), bytes, s));
    }
    si.host_big_ms = ms_since(t0);
    t0 = std::chrono::steady_clock::now();
    {
      laggard::Section sec(rec, small);
      for (int i = 0; i < kSmall; ++i) CU(cu.MemsetD8Async(buf, static_cast<unsigned char>(i), bytes, s));
    }
    si.host_small_ms = ms_since(t0);
    rec.end_step();
    CU(cu.EventRecord(si.done, s));
    if (cu.EventQuery(si.done) == kNotReady) ++returned_early;
    if (step + 1 - static_cast<int>(samples.size()) > kInFlight &&
        !poll_until(static_cast<size_t>(step + 1 - kInFlight))) {
      std::printf("FAIL: no sample within 10 s\n");
      return 1;
    }
  }
  if (!poll_until(kSteps)) {
    std::printf("FAIL: samples missing after 10 s (%zu of %d)\n", samples.size(), kSteps);
    return 1;
  }

  std::printf("\n%-5s %-8s %-10s %12s %12s %6s %12s\n", "step", "stream", "stage", "device_ms",
              "host_ms", "calls", "step_host_ms");
  for (const auto& smp : samples) {
    const StepInfo& si = info[static_cast<size_t>(smp.step)];
    const char* where = smp.step < kStreamSteps ? "own" : "default";
    const laggard::StageTime* b = smp.find("fill_8GiB");
    const laggard::StageTime* m = smp.find("fill_2GiB");
    CHECK(b && m, "step %lld lacks a stage", static_cast<long long>(smp.step));
    if (!b || !m) continue;
    std::printf("%-5lld %-8s %-10s %12.3f %12.3f %6u %12.3f\n", static_cast<long long>(smp.step),
                where, b->name.c_str(), b->ms, si.host_big_ms, b->calls, smp.step_ms);
    std::printf("%-5lld %-8s %-10s %12.3f %12.3f %6u\n", static_cast<long long>(smp.step), where,
                m->name.c_str(), m->ms, si.host_small_ms, m->calls);
    CHECK(b->ms > 0.0 && m->ms > 0.0, "device ms must be > 0 (%f, %f)", b->ms, m->ms);
    CHECK(b->calls == 1 && m->calls == 1, "calls %u %u", b->calls, m->calls);
    const double ratio = m->ms > 0 ? b->ms / m->ms : 0.0;
    CHECK(ratio > 2.0 && ratio < 8.0, "step %lld: 8 fills / 2 fills = %.2f, expected about 4",
          static_cast<long long>(smp.step), ratio);
  }
  const auto& c = rec.counters();
  std::printf(
      "\nsamples %zu/%d; backend: %llu records, elapsed_ms answered complete %llu, not-ready %llu, "
      "error %llu; recorder polls %llu (%llu found nothing new); end_step returned before the "
      "device finished: %d of %d steps; read before completion: %d\n",
      samples.size(), kSteps, static_cast<unsigned long long>(backend->records),
      static_cast<unsigned long long>(backend->complete),
      static_cast<unsigned long long>(backend->not_ready),
      static_cast<unsigned long long>(backend->errors), static_cast<unsigned long long>(polls),
      static_cast<unsigned long long>(empty_polls), returned_early, kSteps, violations);
  CHECK(samples.size() == static_cast<size_t>(kSteps), "samples %zu", samples.size());
  CHECK(violations == 0, "%d samples were read before their marks completed", violations);
  CHECK(backend->not_ready > 0, "the not-ready path never ran");
  CHECK(backend->errors == 0, "%llu elapsed_ms errors", static_cast<unsigned long long>(backend->errors));
  CHECK(returned_early > 0, "end_step never returned before the device finished: does it block?");
  CHECK(c.dropped_steps == 0 && c.dropped_intervals == 0 && c.unbalanced == 0,
        "dropped steps %llu intervals %llu unbalanced %llu",
        static_cast<unsigned long long>(c.dropped_steps),
        static_cast<unsigned long long>(c.dropped_intervals),
        static_cast<unsigned long long>(c.unbalanced));

  for (auto& si : info)
    if (si.done) cu.EventDestroy(si.done);
  cu.StreamDestroy(stream);
  cu.MemFree(buf);  // all work has completed: every sample arrived
  if (failures) {
    std::printf("\n%d check(s) FAILED\n", failures);
    return 1;
  }
  std::printf("\nOK\n");
  return 0;
}

}  // namespace

int main() { return run(); }
