// laggard._core: the sample model, the JSON Lines parser and the run reader.
#include "bindings.hpp"

#include <string>
#include <utility>
#include <vector>

namespace laggard::py_bindings {

using namespace pybind11::literals;

namespace {

// StepSample.values / .resources as a dict {name: float} (insertion order = sample order).
template <std::vector<NamedValue> StepSample::*Field>
py::dict named_dict(const StepSample& s) {
  py::dict out;
  for (const NamedValue& v : s.*Field) out[py::str(v.name)] = v.value;
  return out;
}
template <std::vector<NamedValue> StepSample::*Field>
void set_named(StepSample& s, const py::dict& values) {
  std::vector<NamedValue> list;
  for (auto [name, value] : values)
    list.push_back({py::cast<std::string>(name), py::cast<double>(value)});
  s.*Field = std::move(list);
}

}  // namespace

void bind_model(py::module_& m) {
  py::enum_<StageKind>(m, "StageKind", "What a stage's time means (compute, communication, ...).")
      .value("compute", StageKind::compute)
      .value("communication", StageKind::communication)
      .value("data", StageKind::data)
      .value("other", StageKind::other);
  m.def("default_stage_kind", [](const std::string& name) { return default_stage_kind(name); },
        "The kind laggard assumes for a stage name.", "name"_a);

  py::class_<StageTime>(m, "StageTime", "One stage of one rank in one step.")
      .def(py::init([](std::string name, py::object kind, double ms, std::uint32_t calls) {
             StageTime t;
             t.kind = kind.is_none() ? default_stage_kind(name) : kind_from(kind);
             t.name = std::move(name);
             t.ms = ms;
             t.calls = calls;
             return t;
           }),
           "name"_a, "kind"_a = py::none(), "ms"_a = 0.0, "calls"_a = 1)
      .def_readwrite("name", &StageTime::name)
      .def_readwrite("kind", &StageTime::kind)
      .def_readwrite("ms", &StageTime::ms)
      .def_readwrite("calls", &StageTime::calls)
      .def("__repr__", [](const StageTime& t) {
        return "StageTime(" + t.name + ", " + to_string(t.kind) + ", " + std::to_string(t.ms) +
               " ms, " + std::to_string(t.calls) + " calls)";
      });

  py::class_<StepSample>(m, "StepSample", "One rank's figures for one sampled step.")
      .def(py::init<>())
      .def_readwrite("rank", &StepSample::rank)
      .def_readwrite("world_size", &StepSample::world_size)
      .def_readwrite("step", &StepSample::step)
      .def_readwrite("host", &StepSample::host)
      .def_readwrite("cohort", &StepSample::cohort)
      .def_readwrite("step_ms", &StepSample::step_ms)
      .def_readwrite("work", &StepSample::work)
      .def_readwrite("stages", &StepSample::stages, "Stages in pipeline order (a copy on read).")
      .def_property("values", &named_dict<&StepSample::values>, &set_named<&StepSample::values>,
                    "Recorded values {name: float}, in recording order (a copy on read).")
      .def_property("resources", &named_dict<&StepSample::resources>,
                    &set_named<&StepSample::resources>,
                    "Resource readings {name: float} (docs/reference/formats.md; a copy on read).")
      .def("find",
           [](const StepSample& s, const std::string& name) -> std::optional<StageTime> {
             const StageTime* t = s.find(name);
             if (!t) return std::nullopt;
             return *t;
           })
      .def(
          "to_json",
          [](const StepSample& s) {
            std::string out;
            append_sample_json(s, out);
            if (!out.empty() && out.back() == '\n') out.pop_back();
            return out;
          },
          "The sample as one laggard.sample/1 JSON line, without the trailing newline.")
      .def_static(
          "from_json",
          [](const std::string& line) {
            SampleParser parser;
            return parse_line(parser, line);
          },
          "Parses one laggard.sample/1 line; ValueError says what was wrong.", "line"_a)
      .def("__repr__", [](const StepSample& s) {
        return "StepSample(rank=" + std::to_string(s.rank) + ", step=" + std::to_string(s.step) +
               ", stages=" + std::to_string(s.stages.size()) + ")";
      });

  py::class_<SampleParser>(m, "SampleParser", "Reusable laggard.sample/1 line parser.")
      .def(py::init<>())
      .def("parse", [](SampleParser& p, const std::string& line) { return parse_line(p, line); },
           "line"_a);

  m.def(
      "read_run",
      [](const std::string& run_dir) {
        std::vector<Window> windows;
        RunStats stats;
        {
          py::gil_scoped_release nogil;
          RunReader reader(run_dir);
          Window w;
          while (reader.next(w)) windows.push_back(w);
          stats = reader.stats();
        }
        py::list out;
        for (Window& w : windows) out.append(py::make_tuple(w.step, std::move(w.samples)));
        py::list errors;
        for (const LineError& e : stats.errors) errors.append(e.message());
        py::dict s("files"_a = stats.files, "samples"_a = stats.samples,
                   "malformed"_a = stats.malformed, "duplicates"_a = stats.duplicates,
                   "out_of_order"_a = stats.out_of_order, "windows"_a = stats.windows,
                   "errors"_a = errors);
        return py::make_tuple(out, s);
      },
      "Reads RUN_DIR/rank-*.jsonl as the CLI does: ([(step, [StepSample])], stats).",
      "run_dir"_a);

  m.def(
      "should_log_cuda_fallback",
      [](const std::string& reason) { return should_log_cuda_fallback(reason); },
      "True the first time this reason is seen in the process.", "reason"_a);
}

}  // namespace laggard::py_bindings
