// laggard._core: detector settings, the Detector over windows, the offline outputs of a run
// (analyze_run), first_regression.
#include "bindings.hpp"
#include "laggard/run_output.hpp"

#include <string>
#include <utility>
#include <vector>

namespace laggard::py_bindings {

using namespace pybind11::literals;

void bind_analysis(py::module_& m) {
  py::enum_<Reference>(m, "Reference")
      .value("mean", Reference::mean)
      .value("median", Reference::median)
      .value("robust", Reference::robust);

  py::enum_<Method>(m, "Method")
      .value("threshold", Method::threshold)
      .value("sequential", Method::sequential);

  py::class_<DetectorOptions>(m, "DetectorOptions",
                              "Detector settings; every argument left None takes the default "
                              "(docs/detection.md). DetectorOptions.preset('rfc', n) is the "
                              "RFC's rule.")
      .def(py::init([](py::object method, py::object ref, py::object rel, py::object abs_ms,
                       py::object mad_z, py::object k, py::object n, py::object budget,
                       py::object spread, py::object min_cost_share) {
             DetectorOptions o;
             if (!method.is_none()) {
               if (py::isinstance<py::str>(method))
                 o.method = parse_method(method.cast<std::string>());
               else
                 o.method = method.cast<Method>();
             }
             if (!ref.is_none()) {
               if (py::isinstance<py::str>(ref))
                 o.ref = parse_reference(ref.cast<std::string>());
               else
                 o.ref = ref.cast<Reference>();
             }
             if (!rel.is_none()) o.relative_threshold = rel.cast<double>();
             if (!abs_ms.is_none()) o.absolute_ms_threshold = abs_ms.cast<double>();
             if (!mad_z.is_none()) o.mad_z = mad_z.cast<double>();
             if (!k.is_none()) o.confirm_k = k.cast<int>();
             if (!n.is_none()) o.confirm_n = n.cast<int>();
             if (!budget.is_none()) o.false_alarm_budget = budget.cast<double>();
             if (!spread.is_none()) o.healthy_spread = spread.cast<double>();
             if (!min_cost_share.is_none()) o.min_cost_share = min_cost_share.cast<double>();
             o.validate();
             return o;
           }),
           "method"_a = py::none(), "ref"_a = py::none(), "relative_threshold"_a = py::none(),
           "absolute_ms_threshold"_a = py::none(), "mad_z"_a = py::none(),
           "confirm_k"_a = py::none(), "confirm_n"_a = py::none(),
           "false_alarm_budget"_a = py::none(), "healthy_spread"_a = py::none(),
           "min_cost_share"_a = py::none())
      .def_static("preset", &DetectorOptions::preset, "name"_a, "world_size"_a,
                  "'default' (= 'recommended') or 'rfc' (the RFC's rule exactly)")
      .def_readwrite("method", &DetectorOptions::method)
      .def_readwrite("ref", &DetectorOptions::ref)
      .def_readwrite("relative_threshold", &DetectorOptions::relative_threshold)
      .def_readwrite("absolute_ms_threshold", &DetectorOptions::absolute_ms_threshold)
      .def_readwrite("mad_z", &DetectorOptions::mad_z)
      .def_readwrite("confirm_k", &DetectorOptions::confirm_k)
      .def_readwrite("confirm_n", &DetectorOptions::confirm_n)
      .def_readwrite("healthy_spread", &DetectorOptions::healthy_spread)
      .def_readwrite("min_cost_share", &DetectorOptions::min_cost_share)
      .def_readwrite("pause_rate", &DetectorOptions::pause_rate)
      .def_readwrite("false_alarm_budget", &DetectorOptions::false_alarm_budget)
      .def_readwrite("budget_windows", &DetectorOptions::budget_windows)
      .def("describe", &describe_rule, "One line describing the rule, as reports print it")
      .def("validate", &DetectorOptions::validate);

  py::class_<Detector>(m, "Detector",
                       "Straggler analysis over a run's windows with persistence. Not "
                       "thread-safe; the analysis itself runs with the GIL released.")
      .def(py::init<DetectorOptions>(), "options"_a = DetectorOptions{})
      .def(
          "observe",
          [](Detector& d, std::vector<StepSample> samples, std::optional<std::int64_t> step,
             int local_rank) {
            Window w = make_window(std::move(samples), step);
            Report r;
            {
              py::gil_scoped_release nogil;
              r = d.observe(w);
            }
            return report_dict(r, local_rank);
          },
          "Analyses one window (every rank's sample of one step); returns the report as a dict "
          "with 'metrics' (straggler/*) for local_rank.",
          "samples"_a, "step"_a = py::none(), "local_rank"_a = 0)
      .def(
          "observe_lines",
          [](Detector& d, std::vector<std::string> lines, std::optional<std::int64_t> step,
             int local_rank) {
            Report r;
            std::vector<std::string> errors;
            {
              py::gil_scoped_release nogil;
              SampleParser parser;
              std::vector<StepSample> samples;
              samples.reserve(lines.size());
              std::string error;
              for (const std::string& line : lines) {
                StepSample s;
                if (parser.parse(line, s, error))
                  samples.push_back(std::move(s));
                else
                  errors.push_back(error);
              }
              Window w = make_window(std::move(samples), step);
              r = d.observe(w);
            }
            py::dict out = report_dict(r, local_rank);
            out["parse_errors"] = errors;
            return out;
          },
          "observe() over laggard.sample/1 JSON lines; malformed lines are left out and listed "
          "in 'parse_errors'.",
          "lines"_a, "step"_a = py::none(), "local_rank"_a = 0)
      .def(
          "confirmed",
          [](const Detector& d) {
            py::list out;
            for (const auto& c : d.confirmed()) {
              py::dict f = finding_dict(c.finding);
              f["first_confirmed_step"] = c.first_confirmed_step;
              f["first_flagged_step"] = c.first_flagged_step;
              f["windows_seen"] = c.windows_seen;
              out.append(f);
            }
            return out;
          },
          "Findings confirmed so far (latest figures of each rank and stage).")
      .def_property_readonly("windows", &Detector::windows)
      .def_property_readonly("options", &Detector::options);

  m.def(
      "evaluate_window",
      [](std::vector<StepSample> samples, const DetectorOptions& options,
         std::optional<std::int64_t> step, int local_rank) {
        Window w = make_window(std::move(samples), step);
        Report r;
        {
          py::gil_scoped_release nogil;
          r = evaluate_window(w, options);
        }
        return report_dict(r, local_rank);
      },
      "The RFC rule for one window, without persistence.", "samples"_a,
      "options"_a = DetectorOptions{}, "step"_a = py::none(), "local_rank"_a = 0);

  m.def(
      "analyze_run",
      [](const std::string& run_dir, const DetectorOptions& options,
         const std::string& baseline_dir, const std::vector<std::string>& outputs) {
        // The offline outputs (laggard/run_output.hpp), rendered as the program renders them.
        std::vector<RunOutput> wanted;
        for (const std::string& name : outputs) {
          if (name == "text") wanted.push_back(RunOutput::text);
          else if (name == "json") wanted.push_back(RunOutput::json);
          else if (name == "diagnosis_text") wanted.push_back(RunOutput::diagnosis_text);
          else if (name == "diagnosis_json") wanted.push_back(RunOutput::diagnosis_json);
          else if (name == "html") wanted.push_back(RunOutput::html);
          else
            throw std::invalid_argument("analyze_run: unknown output '" + name +
                                        "' (text, json, diagnosis_text, diagnosis_json, html)");
        }
        std::vector<std::string> rendered(wanted.size());
        std::int64_t windows = 0;
        {
          py::gil_scoped_release nogil;
          AnalyzeRunOptions how;
          how.detector = [&options](std::size_t) { return options; };
          how.baseline_dir = baseline_dir;
          how.report_data = false;
          for (RunOutput w : wanted) how.report_data |= w == RunOutput::html;
          const RunResult run = analyze_run(run_dir, how);
          windows = run.summary.windows;
          // As `laggard analyze` (exit 2): a run without one well-formed sample is an error,
          // not an analysis of 0 ranks.
          if (windows == 0) {
            const RunStats& st = run.input.stats;
            std::string why = "no well-formed samples in " + run_dir + " (" +
                              std::to_string(st.files) + " files, " +
                              std::to_string(st.malformed) + " malformed lines)";
            if (!st.errors.empty()) why += "; first: " + st.errors.front().message();
            throw InputError(why);
          }
          for (std::size_t i = 0; i < wanted.size(); ++i) rendered[i] = render(run, wanted[i]);
        }
        py::dict out;
        out["windows"] = windows;
        for (std::size_t i = 0; i < wanted.size(); ++i) out[py::str(outputs[i])] = rendered[i];
        return out;
      },
      "Reads and analyses a run (rank logs or profiler traces) as `laggard analyze`, `diagnose` "
      "and `report` do; returns {'windows': N, output: text} for each output asked for.",
      "run_dir"_a, "options"_a = DetectorOptions{}, "baseline_dir"_a = "",
      "outputs"_a = std::vector<std::string>{"text", "json"});

  m.def(
      "first_regression",
      [](const std::vector<double>& baseline, const std::vector<double>& current,
         double relative_threshold) -> py::object {
        auto r = first_regression(baseline, current, relative_threshold);
        if (!r) return py::none();
        return py::make_tuple(r->index, r->delta);
      },
      "The first stage (pipeline order) slower than baseline by the threshold: (index, delta) "
      "or None. ValueError on unequal lengths.",
      "baseline"_a, "current"_a, "relative_threshold"_a = 0.05);

}

}  // namespace laggard::py_bindings
