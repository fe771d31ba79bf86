// A directory of per-rank profiler traces: which files are traces, reading them (several at once),
// and their samples as Windows in step order.
#include <algorithm>
#include <atomic>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "io/byte_source.hpp"
#include "io/trace_reader.hpp"
#include "laggard/trace.hpp"

namespace laggard {
namespace {

namespace fs = std::filesystem;

constexpr std::size_t kMaxKeptErrors = 20;
constexpr std::size_t kPeekBytes = std::size_t{64} << 10;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

enum class Peek { trace, not_trace, damaged };

// What the first bytes of `path` say: a trace, something else, or a file that cannot be read as
// text (a broken gzip stream, a `.json.gz` that is not gzip, a read error). A damaged file counts
// as a trace, so that reading it names the file and what is wrong instead of passing it over.
Peek peek_file(const std::string& path) {
  try {
    detail::ByteSource source(path);
    std::string head(kPeekBytes, '\0');
    std::size_t n = 0;
    while (n < head.size()) {
      const std::size_t got = source.read(head.data() + n, head.size() - n);
      if (got == 0) break;
      n += got;
    }
    head.resize(n);
    if (!source.error().empty() || (ends_with(path, ".gz") && !source.gzip()))
      return Peek::damaged;
    const std::size_t first = head.find_first_not_of(" \t\r\n");
    if (first == std::string::npos) return Peek::not_trace;
    if (head[first] == '[') return head.find("\"ph\"") != std::string::npos ? Peek::trace : Peek::not_trace;
    if (head[first] != '{') return Peek::not_trace;
    for (const char* key : {"\"traceEvents\"", "\"schemaVersion\"", "\"distributedInfo\"",
                            "\"deviceProperties\""})
      if (head.find(key) != std::string::npos) return Peek::trace;
    return Peek::not_trace;
  } catch (const InputError&) {
    return Peek::damaged;
  }
}

}  // namespace

std::vector<std::string> find_trace_files(const std::string& dir) {
  std::error_code ec;
  const fs::file_status status = fs::status(dir, ec);
  if (status.type() == fs::file_type::none)
    throw InputError("cannot access run directory " + dir + ": " + ec.message());
  if (!fs::exists(status)) throw InputError("run directory " + dir + " does not exist");
  if (!fs::is_directory(status)) throw InputError(dir + " is not a directory");
  std::vector<std::string> out;
  fs::directory_iterator it(dir, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!ends_with(name, ".json") && !ends_with(name, ".json.gz")) continue;
    std::error_code type_ec;
    if (!it->is_regular_file(type_ec)) continue;
    // tensorboard_trace_handler's names are traces whatever their first bytes: a broken one is
    // then reported, not passed over.
    if (ends_with(name, ".pt.trace.json") || ends_with(name, ".pt.trace.json.gz") ||
        peek_file(it->path().string()) != Peek::not_trace)
      out.push_back(it->path().string());
  }
  if (ec) throw InputError("cannot list run directory " + dir + ": " + ec.message());
  std::sort(out.begin(), out.end());
  return out;
}

// ---------------------------------------------------------------------------------------------
// A directory of traces.

struct TraceRunReader::Impl {
  std::string dir;
  TraceOptions options;
  std::vector<std::string> files;
  std::vector<std::uint64_t> sizes;
  std::vector<RankTrace> ranks;
  RunStats stats;
  std::uint64_t total = 0;
  std::atomic<std::uint64_t> done{0};
  bool loaded = false;
  // Windows: (step, rank index, sample index), sorted by step.
  std::vector<std::int64_t> steps;
  std::size_t next_step = 0;
  std::vector<std::size_t> cursor;  // per rank: next sample
};

TraceRunReader::TraceRunReader(const std::string& dir, TraceOptions options)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.dir = dir;
  s.options = std::move(options);
  s.files = find_trace_files(dir);
  if (s.files.empty())
    throw InputError("no profiler traces in " + dir +
                     " (looked for *.json and *.json.gz files holding traceEvents)");
  for (const std::string& f : s.files) {
    std::error_code ec;
    const auto size = fs::file_size(f, ec);
    s.sizes.push_back(ec ? 0 : static_cast<std::uint64_t>(size));
    s.total += s.sizes.back();
  }
}

TraceRunReader::~TraceRunReader() = default;

void TraceRunReader::load() {
  Impl& s = *impl_;
  if (s.loaded) return;
  s.loaded = true;
  const std::size_t n = s.files.size();
  std::vector<RankTrace> read(n);
  std::vector<std::string> failures(n);
  std::mutex progress_mutex;
  std::atomic<std::size_t> next{0};
  std::vector<std::uint64_t> file_done(n, 0);
  const auto work = [&]() {
    for (std::size_t i = next++; i < n; i = next++) {
      std::uint64_t reported = 0;
      const std::function<void(std::uint64_t)> progress = [&](std::uint64_t consumed) {
        s.done += consumed - reported;
        reported = consumed;
        if (s.options.progress) {
          std::lock_guard<std::mutex> lock(progress_mutex);
          s.options.progress(s.done.load(), s.total);
        }
      };
      try {
        read[i] = detail::read_trace_file(s.files[i], s.options, progress);
      } catch (const InputError& e) {
        failures[i] = e.what();
      } catch (const std::exception& e) {
        failures[i] = s.files[i] + ": " + e.what();
      }
      s.done += s.sizes[i] > reported ? s.sizes[i] - reported : 0;
    }
  };
  unsigned jobs = s.options.jobs > 0 ? static_cast<unsigned>(s.options.jobs)
                                     : std::max(1u, std::min(8u, std::thread::hardware_concurrency()));
  jobs = static_cast<unsigned>(std::min<std::size_t>(jobs, n));
  std::vector<std::thread> threads;
  for (unsigned t = 1; t < jobs; ++t) threads.emplace_back(work);
  work();
  for (auto& t : threads) t.join();
  for (const std::string& f : failures)
    if (!f.empty()) throw InputError(f);

  // Ranks: each once. Without a world size in distributedInfo, the number of traces.
  std::map<int, std::size_t> by_rank;
  for (std::size_t i = 0; i < n; ++i) {
    const auto [it, fresh] = by_rank.emplace(read[i].info.rank, i);
    if (!fresh)
      throw InputError(s.files[it->second] + " and " + s.files[i] + " both hold rank " +
                       std::to_string(read[i].info.rank) +
                       (read[i].rank_from_file_name ? " (from the file name)" : "") +
                       ": one trace per rank");
  }
  int world = 0, world_rank = 0;
  for (const auto& [rank, i] : by_rank) {
    RankTrace& r = read[i];
    if (r.info.world_size <= 0) {
      r.info.world_size = static_cast<int>(n);
      for (StepSample& x : r.samples) x.world_size = r.info.world_size;
    }
    if (world == 0) {
      world = r.info.world_size;
      world_rank = rank;
    } else if (r.info.world_size != world) {
      if (s.stats.world_size_conflicts++ == 0)
        s.stats.world_size_conflict = "traces disagree on world_size: rank " +
                                      std::to_string(rank) + " says " +
                                      std::to_string(r.info.world_size) + ", rank " +
                                      std::to_string(world_rank) + " said " + std::to_string(world);
    }
    s.stats.files += 1;
    s.stats.malformed += r.stats.malformed;
    s.stats.bytes += r.stats.bytes;
    for (const LineError& e : r.stats.errors)
      if (s.stats.errors.size() < kMaxKeptErrors) s.stats.errors.push_back(e);
    s.ranks.push_back(std::move(r));
  }
  std::vector<std::int64_t> steps;
  for (const RankTrace& r : s.ranks)
    for (const StepSample& x : r.samples) steps.push_back(x.step);
  std::sort(steps.begin(), steps.end());
  steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
  s.steps = std::move(steps);
  s.cursor.assign(s.ranks.size(), 0);
}

bool TraceRunReader::next(Window& out) {
  load();
  Impl& s = *impl_;
  if (s.next_step >= s.steps.size()) return false;
  const std::int64_t step = s.steps[s.next_step++];
  out.step = step;
  out.samples.clear();
  for (std::size_t r = 0; r < s.ranks.size(); ++r) {
    const auto& samples = s.ranks[r].samples;
    std::size_t& c = s.cursor[r];
    while (c < samples.size() && samples[c].step < step) ++c;
    if (c < samples.size() && samples[c].step == step) out.samples.push_back(samples[c++]);
  }
  s.stats.samples += out.samples.size();
  ++s.stats.windows;
  return true;
}

const RunStats& TraceRunReader::stats() const noexcept { return impl_->stats; }
std::uint64_t TraceRunReader::bytes_read() const noexcept { return impl_->done.load(); }
std::uint64_t TraceRunReader::bytes_total() const noexcept { return impl_->total; }
const std::vector<std::string>& TraceRunReader::files() const noexcept { return impl_->files; }
const std::vector<RankTrace>& TraceRunReader::ranks() const noexcept { return impl_->ranks; }

}  // namespace laggard
