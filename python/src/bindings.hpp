// laggard._core's parts, one file each (python/src): what they share. Private to the module.
//
// GIL rules: the training-thread calls (a stage's begin and end, begin_step, end_step, add) keep
// the GIL, because releasing and re-taking it costs more than the call and may hand the
// interpreter to another thread mid-step. Everything that can take long (closing the engine,
// analysing a window, reading a run directory) runs with the GIL released, and laggard's own
// threads take it only to call Python: a sink, a transport written in Python, the log.
#pragma once

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "laggard/laggard.hpp"

namespace laggard::py_bindings {

namespace py = pybind11;

// conversions.cc: C++ results as Python objects, and back.
StageKind kind_from(const py::handle& h);
py::object metric_value(const MetricValue& v);
py::dict metrics_dict(const Metrics& metrics);
py::dict finding_dict(const RankFinding& f);
py::dict report_dict(const Report& r, int local_rank);
py::dict counters_dict(const RecorderCounters& c);
StepSample parse_line(SampleParser& parser, const std::string& line);
Window make_window(std::vector<StepSample> samples, std::optional<std::int64_t> step);

/// What the training-thread builtins (hot_calls.cc) act on: the standalone Recorder or the
/// engine's. begin_step/end_step go through the owner, which keeps its own step state.
class HotTarget {
 public:
  virtual ~HotTarget() = default;
  virtual Recorder& rec() = 0;
  virtual bool begin_step(std::int64_t step) = 0;
  virtual void end_step() = 0;
  /// end_step() with the step's end read by the caller (steady_clock) and resource readings by
  /// slot recorded last (Recorder::end_step(now, readings)).
  virtual void end_step_at(std::chrono::steady_clock::time_point now,
                           const Recorder::SlotReadings& readings) = 0;
  /// The engine's Analyzer, alive as long as this object (nullptr: a standalone Recorder):
  /// begin_step/end_step on it do what those above do, one virtual call and a cache line fewer.
  virtual Analyzer* analyzer() noexcept { return nullptr; }
};

// hot_calls.cc: the CPython builtins and context manager of the training thread.
void init_hot_types(py::module_& m);
/// A context manager timing stage `id` of `target` (kept alive through `owner`).
py::object section_scope(const py::object& owner, HotTarget& target, int id);
/// (begin, end) builtins of stage `id`, ignoring their arguments.
py::tuple stage_marks(const py::object& owner, HotTarget& target, int id);
py::object cancel_mark(const py::object& owner, HotTarget& target, int id);
/// (begin_step, end_step, set_stream) builtins.
py::tuple step_calls(const py::object& owner, HotTarget& target);
/// record_resources(pairs): a builtin recording each (name, value) as a resource reading.
py::object record_resources_call(const py::object& owner, HotTarget& target);
/// (defer, resolve) builtins: Recorder::defer(name) -> token, Recorder::resolve(token, value).
py::tuple deferred_calls(const py::object& owner, HotTarget& target);

/// flush, defer, resolve and deferred_calls on a class whose objects are a HotTarget (the
/// standalone Recorder and the engine): values that reach a sampled step after it ended.
template <typename Target, typename... Options>
void def_deferred(py::class_<Target, Options...>& cls) {
  using namespace pybind11::literals;
  cls.def("flush", [](Target& t) { t.rec().flush(); },
          "Device backends: emits every step whose marks have completed, without the deferred "
          "values not resolved yet (counted, deferred_dropped).")
      .def("defer", [](Target& t, std::string_view name) { return t.rec().defer(name); },
           "Device backends, sampled steps: promises a value of `name` to this step; returns its "
           "token for resolve (0: nothing deferred, record the value instead).", "name"_a)
      .def("resolve",
           [](Target& t, std::uint64_t token, double value) {
             return t.rec().resolve(token, value);
           },
           "Gives a deferred value; False when its step is gone (emitted without it, or dropped).",
           "token"_a, "value"_a)
      .def(
          "deferred_calls",
          [](py::object self) { return deferred_calls(self, self.cast<Target&>()); },
          "(defer, resolve) builtins: the training-thread form of defer and resolve.");
}

// The module's parts.
void bind_model(py::module_& m);     // model.cc: stage kinds, samples, the JSONL parser, read_run
void bind_analysis(py::module_& m);  // analysis.cc: detector options, Detector, first_regression
void bind_recorder(py::module_& m);  // recorder.cc: the standalone Recorder
void bind_hook_types(py::module_& m);  // hook_switch.cc: HookSwitch, MethodWrapper
void bind_engine(py::module_& m);    // engine.cc: the live engine, its sinks and transports

}  // namespace laggard::py_bindings
