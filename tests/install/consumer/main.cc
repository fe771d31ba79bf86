// Uses an installed laggard through its umbrella header: the live Analyzer with a sink, the
// JSONL writer and parser, and the offline analysis. Exit status 0 when everything works.
#include <laggard/laggard.hpp>

#include <cstdio>
#include <string>

namespace {

int failures = 0;

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "consumer: FAILED: %s\n", what);
    ++failures;
  }
}

}  // namespace

int main() {
  std::printf("laggard %s, transports:", laggard::kVersion);
  for (const auto& name : laggard::transport_names()) std::printf(" %s", name.c_str());
  std::printf("\n");

  // Live: one rank, every step sampled, durations added as a trainer's hooks would.
  int reports = 0;
  laggard::AnalyzerOptions opt;
  opt.enabled = true;
  opt.interval = 1;
  opt.rank = {0, 1, 0, "consumer-host", ""};
  opt.sinks.push_back([&reports](std::int64_t, const laggard::Metrics&) { ++reports; });
  {
    laggard::Analyzer an(opt);
    const auto fwd = an.stage("forward");
    for (std::int64_t step = 0; step < 5; ++step) {
      an.begin_step(step);
      { laggard::Analyzer::Section s(an, "dataloader"); }
      an.add(fwd, 12.5);
      an.end_step();
    }
    an.close();
    const auto m = an.latest_metrics();
    const auto it = m.find("straggler/forward/local_ms");
    check(it != m.end() && std::get<double>(it->second) == 12.5, "live metrics");
  }
  check(reports == 5, "the sink got every report");

  // Offline: a sample through the JSONL writer and parser, then the detector.
  laggard::StepSample sample;
  sample.rank = 1;
  sample.world_size = 2;
  sample.step = 10;
  sample.stages.push_back({"forward", laggard::StageKind::compute, 30.0, 1});
  std::string line;
  laggard::append_sample_json(sample, line);
  laggard::SampleParser parser;
  laggard::StepSample back;
  std::string error;
  check(parser.parse(line, back, error) && back.find("forward")->ms == 30.0, "JSONL round trip");
  laggard::Window window{10, {back, back}};
  window.samples[0].rank = 0;
  window.samples[0].stages[0].ms = 10.0;
  laggard::RunAnalysis analysis;
  const auto& report = analysis.add(window);
  check(!report.stragglers.empty() && report.stragglers[0].rank == 1, "offline verdict");

  if (failures == 0) std::printf("consumer ok: %d live reports, offline verdict rank 1\n", reports);
  return failures == 0 ? 0 : 1;
}
