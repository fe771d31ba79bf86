// One interface over the run readers: laggard's sample logs and profiler-trace directories.
#include <filesystem>
#include <memory>
#include <string>
#include <utility>

#include "laggard/source.hpp"

namespace laggard {
namespace {

namespace fs = std::filesystem;

// Any rank-<digits>.jsonl in `dir` (RunReader then reads them and reports what is wrong).
bool has_sample_logs(const std::string& dir) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= 11 || name.compare(0, 5, "rank-") != 0 ||
        name.compare(name.size() - 6, 6, ".jsonl") != 0)
      continue;
    bool digits = true;
    for (std::size_t i = 5; i + 6 < name.size(); ++i)
      digits = digits && name[i] >= '0' && name[i] <= '9';
    if (digits) return true;
  }
  return false;
}

class SampleLogSource final : public RunSource {
 public:
  explicit SampleLogSource(const std::string& dir) : reader_(dir) {}
  bool next(Window& out) override { return reader_.next(out); }
  const RunStats& stats() const noexcept override { return reader_.stats(); }
  std::uint64_t bytes_read() const noexcept override { return reader_.bytes_read(); }
  std::uint64_t bytes_total() const noexcept override { return reader_.bytes_total(); }
  const std::vector<std::string>& files() const noexcept override { return reader_.files(); }
  RunFormat format() const noexcept override { return RunFormat::sample_logs; }

 private:
  RunReader reader_;
};

class TraceSource final : public RunSource {
 public:
  TraceSource(const std::string& dir, TraceOptions options) : reader_(dir, std::move(options)) {}
  bool next(Window& out) override { return reader_.next(out); }
  const RunStats& stats() const noexcept override { return reader_.stats(); }
  std::uint64_t bytes_read() const noexcept override { return reader_.bytes_read(); }
  std::uint64_t bytes_total() const noexcept override { return reader_.bytes_total(); }
  const std::vector<std::string>& files() const noexcept override { return reader_.files(); }
  RunFormat format() const noexcept override { return RunFormat::profiler_traces; }
  const std::vector<RankTrace>* traces() const noexcept override { return &reader_.ranks(); }

 private:
  TraceRunReader reader_;
};

}  // namespace

const char* to_string(RunFormat format) noexcept {
  return format == RunFormat::profiler_traces ? "profiler traces" : "sample logs";
}

RunFormat detect_run_format(const std::string& dir) {
  std::vector<std::string> traces;
  try {
    if (has_sample_logs(dir)) return RunFormat::sample_logs;
    traces = find_trace_files(dir);
  } catch (const InputError&) {
    RunReader reader(dir);  // the missing or unreadable directory, in RunReader's words
    throw;
  }
  if (!traces.empty()) return RunFormat::profiler_traces;
  try {
    RunReader reader(dir);  // throws "no rank-*.jsonl files in DIR (...)"
  } catch (const InputError& e) {
    throw InputError(std::string(e.what()) +
                     "; no profiler traces either (*.json or *.json.gz holding traceEvents)");
  }
  return RunFormat::sample_logs;
}

std::unique_ptr<RunSource> open_run(const std::string& dir, TraceOptions trace_options) {
  if (detect_run_format(dir) == RunFormat::profiler_traces)
    return std::make_unique<TraceSource>(dir, std::move(trace_options));
  return std::make_unique<SampleLogSource>(dir);
}

}  // namespace laggard
