// laggard._core.Recorder: sampled stage timing on its own, without the live engine (tests,
// tools, bench/cold_calls.py). The Analyzer's recorder is the engine's (engine.cc).
#include "bindings.hpp"

#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

namespace laggard::py_bindings {

using namespace pybind11::literals;

namespace {

/// A laggard::Recorder with its backend choice, and why a device backend was not used (empty
/// when it was, or when none was asked for).
class PyRecorder final : public HotTarget {
 public:
  PyRecorder(int interval, int rank, int world_size, int local_rank, std::string host,
             std::string cohort, int max_pending_steps, const std::string& backend, int device,
             std::uint32_t capacity) {
    RecorderOptions options;
    options.interval = interval;
    options.rank.rank = rank;
    options.rank.world_size = world_size;
    options.rank.local_rank = local_rank;
    options.rank.host = std::move(host);
    options.rank.cohort = std::move(cohort);
    options.max_pending_steps = max_pending_steps;
    std::unique_ptr<TimingBackend> timing;
    if (backend == "cuda") {
      CudaBackendResult made;
      {
        py::gil_scoped_release nogil;  // first use opens libcuda and calls cuInit
        made = make_cuda_backend(capacity, device);
      }
      if (made.backend)
        timing = std::move(made.backend);
      else
        reason_ = made.reason.empty() ? std::string("CUDA backend unavailable") : made.reason;
    } else if (backend != "host") {
      throw std::invalid_argument("Recorder: backend must be 'host' or 'cuda', got '" + backend +
                                  "'");
    }
    recorder_ = std::make_unique<Recorder>(std::move(options), std::move(timing));
  }

  Recorder& rec() override { return *recorder_; }
  const std::string& reason() const { return reason_; }

  void on_sample(py::object fn) {
    if (fn.is_none()) {
      recorder_->on_sample(nullptr);
      fn_ = py::none();
      return;
    }
    fn_ = std::move(fn);
    recorder_->on_sample([this](const StepSample& s) {
      // The training thread holds the GIL here (begin_step/end_step are Python calls).
      try {
        fn_(s);
      } catch (py::error_already_set& e) {
        e.discard_as_unraisable("laggard Recorder.on_sample");
      }
    });
  }

  bool begin_step(std::int64_t step) override {
    // The log format has no negative steps (the reader refuses such a line): refused here, so
    // that the Analyzer counts it instead of logging a line that analysis would drop.
    if (step < 0)
      throw std::invalid_argument("begin_step(" + std::to_string(step) +
                                  "): the step must be >= 0; this step is not sampled");
    recorder_->begin_step(step);  // a step never ended is closed here
    return recorder_->sampled();
  }
  void end_step_at(std::chrono::steady_clock::time_point now,
                   const Recorder::SlotReadings& readings) override {
    if (recorder_->sampled()) recorder_->end_step(now, readings);
  }
  void end_step() override {
    if (recorder_->sampled()) recorder_->end_step();
  }

 private:
  std::unique_ptr<Recorder> recorder_;
  std::string reason_;
  py::object fn_ = py::none();
};

}  // namespace

void bind_recorder(py::module_& m) {
  auto r_class = py::class_<PyRecorder>(
      m, "Recorder",
      "Sampled stage timing for one training thread (not thread-safe). backend='cuda' asks for "
      "CUDA events; if that is not possible the host clock is used and backend_reason says why.")
      .def(py::init<int, int, int, int, std::string, std::string, int, const std::string&, int,
                    std::uint32_t>(),
           "interval"_a = 10, "rank"_a = 0, "world_size"_a = 1, "local_rank"_a = 0,
           "host"_a = "", "cohort"_a = "", "max_pending_steps"_a = 4, "backend"_a = "host",
           "device"_a = -1, "capacity"_a = 4096)
      .def(
          "stage",
          [](PyRecorder& r, const std::string& name, py::object kind) {
            return kind.is_none() ? r.rec().stage(name) : r.rec().stage(name, kind_from(kind));
          },
          "Registers (or finds) a stage; returns its id, -1 when all slots are taken.", "name"_a,
          "kind"_a = py::none())
      .def("begin_step", &PyRecorder::begin_step,
           "Starts a step; returns whether it is sampled.", "step"_a)
      .def("end_step", &PyRecorder::end_step)
      .def("begin", [](PyRecorder& r, int id) { r.rec().begin(id); }, "id"_a)
      .def("end", [](PyRecorder& r, int id) { r.rec().end(id); }, "id"_a)
      .def("cancel", [](PyRecorder& r, int id) { r.rec().cancel(id); },
           "Drops stage `id`'s open entry (begun by begin) without counting it.", "id"_a)
      .def(
          "add",
          [](PyRecorder& r, int id, double ms, std::uint32_t calls) { r.rec().add(id, ms, calls); },
          "id"_a, "ms"_a, "calls"_a = 1)
      .def("record", [](PyRecorder& r, std::string_view name, double value) {
             r.rec().record(name, value);
           }, "Attaches a value to this sampled step's `values`.", "name"_a, "value"_a)
      .def("record_resource", [](PyRecorder& r, std::string_view name, double value) {
             r.rec().record_resource(name, value);
           }, "Attaches a reading to this sampled step's `resources`.", "name"_a, "value"_a)
      .def("poll", [](PyRecorder& r) { r.rec().poll(); })
      .def("sampled", [](PyRecorder& r) { return r.rec().sampled(); })
      .def_property_readonly("step", [](PyRecorder& r) { return r.rec().step(); })
      .def_property_readonly("enabled", [](PyRecorder& r) { return r.rec().enabled(); })
      .def_property_readonly("counters", [](PyRecorder& r) { return counters_dict(r.rec().counters()); })
      .def_property_readonly("backend_name",
                             [](PyRecorder& r) { return std::string(r.rec().backend_name()); })
      .def_property_readonly("backend_reason", &PyRecorder::reason)
      .def(
          "set_stream",
          [](PyRecorder& r, std::uintptr_t handle) {
            if (TimingBackend* b = r.rec().backend()) b->set_stream(reinterpret_cast<void*>(handle));
          },
          "Device backends: records later marks on this stream (a CUstream as an int; 0 = the "
          "default stream). No-op on the host clock.",
          "handle"_a)
      .def(
          "section",
          [](py::object self, int id) {
            return section_scope(self, self.cast<PyRecorder&>(), id);
          },
          "A reusable context manager timing stage `id` (begin on enter, end on exit); keeps "
          "the recorder alive.",
          "id"_a)
      .def(
          "marks",
          [](py::object self, int id) { return stage_marks(self, self.cast<PyRecorder&>(), id); },
          "(begin, end): builtins that begin and end stage `id`, ignoring any arguments, so "
          "they can be hooks themselves. The training-thread form of begin(id)/end(id).",
          "id"_a)
      .def(
          "cancel_mark",
          [](py::object self, int id) { return cancel_mark(self, self.cast<PyRecorder&>(), id); },
          "A builtin that drops stage `id`'s open entry without counting it (the training-"
          "thread form of cancel(id)), ignoring any arguments.",
          "id"_a)
      .def(
          "step_calls",
          [](py::object self) { return step_calls(self, self.cast<PyRecorder&>()); },
          "(begin_step, end_step, set_stream): builtins, the training-thread form of the "
          "methods.")
      .def(
          "record_resources_call",
          [](py::object self) { return record_resources_call(self, self.cast<PyRecorder&>()); },
          "A builtin record_resources(pairs): each (name, value) of a tuple into the sampled "
          "step's resources, in one call (laggard.resources).")
      .def("on_sample", &PyRecorder::on_sample,
           "Calls fn(StepSample) with each finished sample, on the training thread (None: "
           "samples go nowhere). For tests and tools; the Analyzer uses _core.Engine.",
           "fn"_a);
  def_deferred(r_class);


}

}  // namespace laggard::py_bindings
