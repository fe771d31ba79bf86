// Reads a run directory (RUN_DIR/rank-*.jsonl) as one stream of per-step Windows.
//
// The rank files are merged k-way by step as they stream: one head sample per file, a min-heap
// of (step, file). Memory is bounded by the number of files, never by the number of steps.
#include <sys/resource.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "laggard/jsonl.hpp"

namespace laggard {
namespace {

namespace fs = std::filesystem;

constexpr std::size_t kMaxKeptErrors = 20;
// Descriptors left for everything else the process has open (logs, sockets, the sinks).
constexpr rlim_t kSpareDescriptors = 64;
// Read buffers of all files together stay near this budget; each gets 16 KiB to 256 KiB (more
// buys nothing: 256 KiB already makes read() calls rare, and fits in a core's L2 cache).
constexpr std::size_t kBufferBudget = std::size_t{256} << 20;
constexpr std::size_t kMinChunk = std::size_t{16} << 10;
constexpr std::size_t kMaxChunk = std::size_t{256} << 10;

// "rank-12.jsonl" → 12. Only decimal digits between "rank-" and ".jsonl" qualify.
bool rank_file_number(const std::string& name, std::uint64_t& number) {
  static constexpr std::string_view kPrefix = "rank-", kSuffix = ".jsonl";
  if (name.size() <= kPrefix.size() + kSuffix.size()) return false;
  if (name.compare(0, kPrefix.size(), kPrefix) != 0) return false;
  if (name.compare(name.size() - kSuffix.size(), kSuffix.size(), kSuffix) != 0) return false;
  const std::string_view digits(name.data() + kPrefix.size(),
                                name.size() - kPrefix.size() - kSuffix.size());
  if (digits.size() > 18) return false;  // no overflow; no real run has 10^18 ranks
  number = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return false;
    number = number * 10 + static_cast<std::uint64_t>(c - '0');
  }
  return true;
}

// The merge keeps every rank file open at once, so a large run can exceed the default soft
// limit on open files (often 1024). Raise it toward the hard limit rather than fail.
void ensure_open_file_limit(std::size_t files, const std::string& dir) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return;  // cannot tell: let open() report it
  const rlim_t needed = static_cast<rlim_t>(files) + kSpareDescriptors;
  if (limit.rlim_cur == RLIM_INFINITY || limit.rlim_cur >= needed) return;
  rlimit raised = limit;
  raised.rlim_cur = limit.rlim_max == RLIM_INFINITY ? needed : std::min(needed, limit.rlim_max);
  if (raised.rlim_cur > limit.rlim_cur && ::setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  if (limit.rlim_cur >= needed) return;
  const std::string hard =
      limit.rlim_max == RLIM_INFINITY ? "unlimited" : std::to_string(limit.rlim_max);
  throw InputError(dir + " has " + std::to_string(files) +
                   " rank files, which laggard reads all at once and so needs " +
                   std::to_string(needed) + " open files, but the limit is " +
                   std::to_string(limit.rlim_cur) + " (hard limit " + hard +
                   "); raise it, e.g. `ulimit -n " + std::to_string(needed) + "`");
}

// One rank file in the merge: its reader, its current head sample and what was taken from it.
struct Source {
  std::unique_ptr<SampleFileReader> reader;
  StepSample head;
  bool has_last = false;
  std::int64_t last_step = 0;  // step of the latest sample taken as head
  // How much of the reader's counters is already in RunStats.
  std::size_t malformed_seen = 0;
  std::size_t errors_seen = 0;
  std::uint64_t bytes_seen = 0;
};

}  // namespace

struct RunReader::Impl {
  std::vector<std::string> files;
  std::vector<Source> sources;
  RunStats stats;
  std::uint64_t bytes_total = 0;
  int world_size = 0;       // the first sample's, which the others are checked against
  int world_size_rank = 0;  // the rank of that sample
  bool started = false;
  // Min-heap of (head step, source index): equal steps pop in file order, so "first" is well
  // defined when two files hold the same (rank, step).
  using Entry = std::pair<std::int64_t, std::uint32_t>;
  std::vector<Entry> heap;
  // Samples no longer needed in a Window, kept so their buffers serve again (no allocation in
  // steady state even when window sizes vary).
  std::vector<StepSample> spare;

  // Reads source i's next usable sample into its head and pushes it on the heap, if any.
  void advance(std::uint32_t i) {
    Source& s = sources[i];
    while (s.reader->next(s.head)) {
      if (s.has_last && s.head.step <= s.last_step) {
        ++(s.head.step == s.last_step ? stats.duplicates : stats.out_of_order);
        continue;
      }
      s.has_last = true;
      s.last_step = s.head.step;
      heap.emplace_back(s.head.step, i);
      std::push_heap(heap.begin(), heap.end(), std::greater<>());
      break;
    }
    collect(s);
  }

  // Adds what the reader met since the last call to the run's statistics.
  void collect(Source& s) {
    const SampleFileReader& r = *s.reader;
    stats.malformed += r.malformed() - s.malformed_seen;
    s.malformed_seen = r.malformed();
    stats.bytes += r.bytes() - s.bytes_seen;
    s.bytes_seen = r.bytes();
    const auto& errors = r.errors();
    for (; s.errors_seen < errors.size(); ++s.errors_seen)
      if (stats.errors.size() < kMaxKeptErrors) stats.errors.push_back(errors[s.errors_seen]);
  }

  void shrink(std::vector<StepSample>& samples, std::size_t size) {
    while (samples.size() > size) {
      spare.push_back(std::move(samples.back()));
      samples.pop_back();
    }
  }
};

RunReader::RunReader(const std::string& run_dir) : impl_(std::make_unique<Impl>()) {
  std::error_code ec;
  const fs::path dir(run_dir);
  const fs::file_status status = fs::status(dir, ec);
  if (status.type() == fs::file_type::none)
    throw InputError("cannot access run directory " + run_dir + ": " + ec.message());
  if (!fs::exists(status)) throw InputError("run directory " + run_dir + " does not exist");
  if (!fs::is_directory(status)) throw InputError(run_dir + " is not a directory");

  std::vector<std::pair<std::uint64_t, std::string>> found;  // (rank number, path)
  std::vector<std::string> misnamed;  // rank-*.jsonl whose * is not a number
  fs::directory_iterator it(dir, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::uint64_t number = 0;
    if (!rank_file_number(name, number)) {
      if (name.size() > 11 && name.compare(0, 5, "rank-") == 0 &&
          name.compare(name.size() - 6, 6, ".jsonl") == 0 && misnamed.size() < 3)
        misnamed.push_back(name);
      continue;
    }
    // Whatever it is (a directory, a FIFO, a dangling or looping link), a file named as a rank
    // file is opened, and one that cannot be read stops the run with the reason, as an
    // unreadable regular file does: skipping it would analyse a run with a rank missing.
    std::error_code type_ec;
    const fs::file_status st = it->status(type_ec);
    if (type_ec)
      throw InputError("cannot read " + it->path().string() + ": " + type_ec.message() +
                       (it->is_symlink(type_ec) ? " (a symbolic link)" : ""));
    if (!fs::is_regular_file(st)) {
      const char* what = st.type() == fs::file_type::not_found ? "a dangling symbolic link"
                         : fs::is_directory(st)   ? "a directory"
                         : fs::is_fifo(st)      ? "a FIFO"
                         : fs::is_socket(st)    ? "a socket"
                         : fs::is_block_file(st) || fs::is_character_file(st) ? "a device"
                                                                              : "not a file";
      throw InputError("cannot read " + it->path().string() + ": it is " + what +
                       ", not a regular file");
    }
    found.emplace_back(number, it->path().string());
  }
  if (ec) throw InputError("cannot list run directory " + run_dir + ": " + ec.message());
  if (found.empty()) {
    std::string why = "no rank-*.jsonl files in " + run_dir;
    if (!misnamed.empty()) {
      why += " (";
      for (std::size_t i = 0; i < misnamed.size(); ++i) why += (i ? ", " : "") + misnamed[i];
      why += misnamed.size() == 1 ? " does" : " do";
      why += " not name a rank: expected rank-<N>.jsonl with N in decimal digits)";
    }
    throw InputError(why);
  }
  // Numerically, so rank-10 follows rank-9; the name breaks ties (rank-1 vs rank-01).
  std::sort(found.begin(), found.end());

  ensure_open_file_limit(found.size(), run_dir);

  Impl& s = *impl_;
  const std::size_t chunk = std::clamp(kBufferBudget / found.size(), kMinChunk, kMaxChunk);
  s.files.reserve(found.size());
  s.sources.resize(found.size());
  for (std::size_t i = 0; i < found.size(); ++i) {
    s.files.push_back(std::move(found[i].second));
    s.sources[i].reader = std::make_unique<SampleFileReader>(s.files[i], chunk);
    std::error_code size_ec;
    const auto size = fs::file_size(s.files[i], size_ec);
    if (!size_ec) s.bytes_total += size;
  }
  s.stats.files = s.files.size();
  s.heap.reserve(s.sources.size());
}

RunReader::~RunReader() = default;

bool RunReader::next(Window& out) {
  Impl& s = *impl_;
  if (!s.started) {
    s.started = true;
    for (std::uint32_t i = 0; i < s.sources.size(); ++i) s.advance(i);
  }
  if (s.heap.empty()) {
    s.shrink(out.samples, 0);
    return false;
  }

  const std::int64_t step = s.heap.front().first;
  std::size_t count = 0;
  while (!s.heap.empty() && s.heap.front().first == step) {
    std::pop_heap(s.heap.begin(), s.heap.end(), std::greater<>());
    const std::uint32_t i = s.heap.back().second;
    s.heap.pop_back();
    if (count == out.samples.size()) {
      if (!s.spare.empty()) {
        out.samples.push_back(std::move(s.spare.back()));
        s.spare.pop_back();
      } else {
        out.samples.emplace_back();
      }
    }
    // Swap, not copy: the window takes the head's buffers and the source reuses the old ones.
    std::swap(out.samples[count], s.sources[i].head);
    ++count;
    s.advance(i);  // its next head has a larger step, so it stays in the heap for later windows
  }
  s.shrink(out.samples, count);

  auto& samples = out.samples;
  const auto by_rank = [](const StepSample& a, const StepSample& b) { return a.rank < b.rank; };
  // Files are sorted by rank, so windows usually come out sorted already. A stable sort keeps
  // file order among equal ranks, which decides which duplicate is "first".
  if (!std::is_sorted(samples.begin(), samples.end(), by_rank))
    std::stable_sort(samples.begin(), samples.end(), by_rank);

  std::size_t kept = samples.empty() ? 0 : 1;
  for (std::size_t r = 1; r < samples.size(); ++r) {
    if (samples[r].rank == samples[kept - 1].rank) {
      ++s.stats.duplicates;  // the same (rank, step) in two files: keep the first
      continue;
    }
    if (r != kept) std::swap(samples[kept], samples[r]);
    ++kept;
  }
  s.shrink(samples, kept);

  for (const StepSample& sample : samples) {
    if (s.world_size == 0) {
      s.world_size = sample.world_size;
      s.world_size_rank = sample.rank;
    } else if (sample.world_size != s.world_size) {
      if (s.stats.world_size_conflicts++ == 0)
        s.stats.world_size_conflict =
            "files disagree on world_size: rank " + std::to_string(sample.rank) + " says " +
            std::to_string(sample.world_size) + " at step " + std::to_string(step) + ", rank " +
            std::to_string(s.world_size_rank) + " said " + std::to_string(s.world_size);
    }
  }

  out.step = step;
  s.stats.samples += kept;
  ++s.stats.windows;
  return true;
}

const RunStats& RunReader::stats() const noexcept { return impl_->stats; }
std::uint64_t RunReader::bytes_read() const noexcept { return impl_->stats.bytes; }
std::uint64_t RunReader::bytes_total() const noexcept { return impl_->bytes_total; }
const std::vector<std::string>& RunReader::files() const noexcept { return impl_->files; }

}  // namespace laggard
