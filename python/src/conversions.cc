// Conversions between the C++ core's results and Python objects.
#include "bindings.hpp"

#include <stdexcept>
#include <utility>

namespace laggard::py_bindings {

using namespace pybind11::literals;


StageKind kind_from(const py::handle& h) {
  if (py::isinstance<StageKind>(h)) return h.cast<StageKind>();
  if (py::isinstance<py::str>(h)) {
    const auto text = h.cast<std::string>();
    if (auto k = parse_stage_kind(text)) return *k;
    throw std::invalid_argument("unknown stage kind '" + text +
                                "' (expected compute, communication, data or other)");
  }
  throw std::invalid_argument("stage kind must be a StageKind or a string");
}

py::object metric_value(const MetricValue& v) {
  if (const double* d = std::get_if<double>(&v)) return py::float_(*d);
  return py::str(std::get<std::string>(v));
}

py::dict metrics_dict(const Metrics& metrics) {
  py::dict out;
  for (const auto& [name, value] : metrics) out[py::str(name)] = metric_value(value);
  return out;
}

py::dict finding_dict(const RankFinding& f) {
  return py::dict("rank"_a = f.rank, "host"_a = f.host, "cohort"_a = f.cohort,
                  "stage"_a = f.stage, "kind"_a = to_string(f.kind),
                  "role"_a = f.role == RankFinding::Role::straggler ? "straggler" : "waiting",
                  "ms"_a = f.ms, "ref_ms"_a = f.ref_ms, "slowdown"_a = f.slowdown,
                  "cost_ms"_a = f.cost_ms, "cost_share"_a = f.cost_share,
                  "windows_flagged"_a = f.windows_flagged, "confirmed"_a = f.confirmed,
                  "evidence"_a = f.evidence);
}

py::dict report_dict(const Report& r, int local_rank) {
  py::list stages;
  for (const StageFigures& f : r.stages) {
    py::dict ranks_ms;
    for (std::size_t i = 0; i < f.rank_ids.size() && i < f.rank_ms.size(); ++i)
      ranks_ms[py::int_(f.rank_ids[i])] = f.rank_ms[i];
    stages.append(py::dict(
        "cohort"_a = f.cohort, "stage"_a = f.stage, "kind"_a = to_string(f.kind),
        "ranks"_a = f.ranks, "ref_ms"_a = f.ref_ms, "step_ms"_a = f.step_ms, "mean_ms"_a = f.mean_ms,
        "median_ms"_a = f.median_ms, "min_ms"_a = f.min_ms, "max_ms"_a = f.max_ms,
        "slowdown_ratio"_a = f.slowdown_ratio, "relative_score"_a = f.relative_score,
        "top_rank"_a = f.top_rank, "num_stragglers"_a = f.num_stragglers,
        "flagged_ranks"_a = f.flagged_ranks, "rank_ms"_a = ranks_ms));
  }
  py::list stragglers, waiting, hosts;
  for (const RankFinding& f : r.stragglers) stragglers.append(finding_dict(f));
  for (const RankFinding& f : r.waiting) waiting.append(finding_dict(f));
  for (const HostFinding& h : r.slow_hosts)
    hosts.append(py::dict("host"_a = h.host, "cohort"_a = h.cohort, "stage"_a = h.stage,
                          "ranks"_a = h.ranks, "slowdown"_a = h.slowdown));
  return py::dict("step"_a = r.step, "ranks_seen"_a = r.ranks_seen,
                  "world_size"_a = r.world_size, "stages"_a = stages,
                  "stragglers"_a = stragglers, "waiting"_a = waiting, "slow_hosts"_a = hosts,
                  "likely_bottleneck"_a = r.likely_bottleneck,
                  "whatif_step_saving_ms"_a = r.whatif_step_saving_ms, "hints"_a = r.hints,
                  "metrics"_a = metrics_dict(r.metrics(local_rank)));
}

py::dict counters_dict(const RecorderCounters& c) {
  return py::dict("sampled_steps"_a = c.sampled_steps, "samples_emitted"_a = c.samples_emitted,
                  "dropped_stages"_a = c.dropped_stages,
                  "dropped_intervals"_a = c.dropped_intervals,
                  "dropped_steps"_a = c.dropped_steps, "unbalanced"_a = c.unbalanced,
                  "dropped_values"_a = c.dropped_values,
                  "deferred_dropped"_a = c.deferred_dropped);
}

StepSample parse_line(SampleParser& parser, const std::string& line) {
  StepSample s;
  std::string error;
  if (!parser.parse(line, s, error)) throw std::invalid_argument("bad sample line: " + error);
  return s;
}

/// A window's step: the given one, else the first sample's.
Window make_window(std::vector<StepSample> samples, std::optional<std::int64_t> step) {
  Window w;
  w.step = step ? *step : (samples.empty() ? 0 : samples.front().step);
  w.samples = std::move(samples);
  return w;
}

}  // namespace laggard::py_bindings
