#include "live/report_json.hpp"

#include "io/json_text.hpp"
#include "laggard/sink.hpp"

#include <algorithm>
#include <charconv>
#include <memory>
#include <cmath>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace laggard {
namespace {

using detail::append_json_int;
using detail::append_json_number;
using detail::append_json_string;

void append_findings(const char* key, const std::vector<RankFinding>& findings, std::string& out) {
  out += ",\"";
  out += key;
  out += "\":[";
  bool first = true;
  for (const RankFinding& f : findings) {
    if (!first) out += ',';
    first = false;
    out += "{\"rank\":";
    append_json_int(f.rank, out);
    out += ",\"stage\":";
    append_json_string(f.stage, out);
    out += ",\"kind\":";
    append_json_string(to_string(f.kind), out);
    out += ",\"ms\":";
    append_json_number(f.ms, out);
    out += ",\"ref_ms\":";
    append_json_number(f.ref_ms, out);
    out += ",\"slowdown\":";
    append_json_number(f.slowdown, out);
    out += ",\"cost_ms\":";
    append_json_number(f.cost_ms, out);
    out += ",\"cost_share\":";
    append_json_number(f.cost_share, out);
    out += ",\"windows_flagged\":";
    append_json_int(f.windows_flagged, out);
    out += ",\"confirmed\":";
    out += f.confirmed ? "true" : "false";
    out += '}';
  }
  out += ']';
}

}  // namespace

void append_report_json(std::int64_t step, const Metrics& metrics, const Report& report,
                        std::string& out) {
  out += "{\"step\":";
  append_json_int(step, out);
  for (const auto& [name, value] : metrics) {
    out += ',';
    append_json_string(name, out);
    out += ':';
    if (const double* d = std::get_if<double>(&value)) {
      append_json_number(*d, out);
    } else {
      append_json_string(std::get<std::string>(value), out);
    }
  }
  append_findings("stragglers", report.stragglers, out);
  append_findings("waiting", report.waiting, out);
  out += "}\n";
}

std::vector<const RankFinding*> confirmed_costliest_first(const Report& report) {
  std::vector<const RankFinding*> order;
  for (const RankFinding& f : report.stragglers)
    if (f.confirmed) order.push_back(&f);
  std::stable_sort(order.begin(), order.end(),
                   [](const RankFinding* a, const RankFinding* b) { return a->cost_ms > b->cost_ms; });
  return order;
}

void add_live_metrics(const Report& report, double report_errors, double dropped_samples,
                      double incomplete_windows, Metrics& metrics) {
  const std::vector<const RankFinding*> order = confirmed_costliest_first(report);
  std::string confirmed;
  for (const RankFinding* f : order) {
    if (!confirmed.empty()) confirmed += ',';
    confirmed += std::to_string(f->rank) + ":" + f->stage;
  }
  const int num_confirmed = static_cast<int>(order.size());
  metrics["straggler/num_confirmed"] = static_cast<double>(num_confirmed);
  metrics["straggler/confirmed"] = std::move(confirmed);
  metrics["straggler/report_errors"] = report_errors;
  metrics["straggler/dropped_samples"] = dropped_samples;
  metrics["straggler/incomplete_windows"] = incomplete_windows;
}

}  // namespace laggard

namespace laggard {

Sink::~Sink() = default;

namespace {

class CallbackSink final : public Sink {
 public:
  CallbackSink(MetricsSink fn, std::string name) : fn_(std::move(fn)), name_(std::move(name)) {}
  std::string name() const override { return name_; }
  void write(std::int64_t step, const Metrics& metrics, const Report&) override {
    fn_(step, metrics);
  }

 private:
  MetricsSink fn_;
  std::string name_;
};

}  // namespace

std::shared_ptr<Sink> callback_sink(MetricsSink fn, std::string name) {
  return std::make_shared<CallbackSink>(std::move(fn), std::move(name));
}

}  // namespace laggard
