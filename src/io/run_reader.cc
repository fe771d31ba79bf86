// Reads a run directory (RUN_DIR/rank-*.jsonl) as one stream of per-step Windows.
//
// The rank files are merged k-way by step as they stream: one head sample per file, a min-heap
// of (step, file). Memory is bounded by the number of files, never by the number of steps.
//
// With more than one CPU, reading and parsing move to worker threads, each merging a contiguous
// range of the files into partial windows (the samples of its files at one step) in a bounded
// queue; next() merges the workers' partial windows by step, so the caller's analysis of one
// window runs while the workers parse the next ones. Everything the caller sees (windows, their
// samples' order, the counts, which errors are kept and in which order) is what one thread
// reading every file gives: a partial window carries what its files met along the way, and
// next() adds it up in the order the single-threaded merge meets it (files in order, at start
// and then after each step's samples are taken).
#include <sched.h>
#include <sys/resource.h>

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
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
// buys nothing: 256 KiB already makes read() calls rare, and fits in a core's L2 cache). Every
// buffer page is touched once the file is read, so the budget is most of the reader's memory:
// 64 files of 64 KiB read as fast as 64 of 256 KiB, in half the peak RSS (docs/notes/performance-ingest.md).
constexpr std::size_t kBufferBudget = std::size_t{4} << 20;
constexpr std::size_t kMinChunk = std::size_t{16} << 10;
constexpr std::size_t kMaxChunk = std::size_t{256} << 10;
// Partial windows a worker may have ready ahead of the merge. Enough that neither side waits
// for the other's jitter; small enough that memory stays a few windows' worth.
constexpr std::size_t kQueueWindows = 32;
// More workers than this add threads, not speed: the caller's analysis of each window then
// dominates (docs/performance.md).
constexpr unsigned kMaxWorkers = 8;

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

// CPUs this process may run on (taskset, cgroup cpusets), at least 1.
unsigned usable_cpus() {
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return static_cast<unsigned>(n);
  }
#endif
  return std::max(1u, std::thread::hardware_concurrency());
}

// What reading met on the way, to be added to RunStats: counts, and errors in the order met.
struct Tally {
  std::size_t malformed = 0;
  std::size_t duplicates = 0;
  std::size_t out_of_order = 0;
  std::uint64_t bytes = 0;
  std::vector<LineError> errors;
  // Samples of another rank than their file's name says; the first, of the lowest file index.
  std::size_t rank_mismatches = 0;
  std::size_t rank_mismatch_file = SIZE_MAX;
  std::string rank_mismatch;

  void clear() {
    malformed = duplicates = out_of_order = 0;
    bytes = 0;
    errors.clear();
    rank_mismatches = 0;
    rank_mismatch_file = SIZE_MAX;
    rank_mismatch.clear();
  }
};

// One rank file in the merge: its reader, its current head sample and what was taken from it.
struct Source {
  std::unique_ptr<SampleFileReader> reader;
  StepSample head;
  bool has_last = false;
  std::int64_t last_step = 0;  // step of the latest sample taken as head
  std::uint64_t file_rank = 0;  // the rank its name says
  std::size_t file_index = 0;   // in the run's file order
  bool rank_mismatch_seen = false;
  // How much of the reader's counters is already tallied.
  std::size_t malformed_seen = 0;
  std::size_t errors_seen = 0;
  std::uint64_t bytes_seen = 0;
};

// The k-way merge of some rank files (all of them, or a worker's range) by step.
//
// Files written side by side hold the same steps, so usually every file's head is at the same
// step: the window is then every file that has not ended, in file order, with no heap at all
// (`lockstep_`: the heap's pops cost ~3 % of reading 64 files). As soon as the heads differ the
// heap takes over, and gives the merge back once a window has taken every file and left their
// heads at one step again. Either way the windows, and the order in which files are read, are
// the same.
class FileMerge {
 public:
  explicit FileMerge(std::vector<Source> sources) : sources_(std::move(sources)) {
    heap_.reserve(sources_.size());
    live_.reserve(sources_.size());
  }

  // Reads every file's first usable sample.
  void start(Tally& tally) {
    for (std::uint32_t i = 0; i < sources_.size(); ++i)
      if (advance(i, tally)) live_.push_back(i);
    settle();
  }

  // The samples of the smallest remaining step, in file order, into samples[0, count) (reusing
  // the objects there; `spare` holds more for reuse), or false when every file has ended.
  bool next(std::vector<StepSample>& samples, std::vector<StepSample>& spare, std::int64_t& step,
            Tally& tally) {
    if (lockstep_) return next_lockstep(samples, spare, step, tally);
    if (heap_.empty()) {
      shrink(samples, spare, 0);
      return false;
    }
    step = heap_.front().first;
    std::size_t count = 0;
    while (!heap_.empty() && heap_.front().first == step) {
      std::pop_heap(heap_.begin(), heap_.end(), std::greater<>());
      const std::uint32_t i = heap_.back().second;
      heap_.pop_back();
      take(samples, spare, count, i);
      // Its next head has a larger step, so it stays in the heap for later.
      if (advance(i, tally)) {
        heap_.emplace_back(sources_[i].head.step, i);
        std::push_heap(heap_.begin(), heap_.end(), std::greater<>());
      }
      if (i + 1 < sources_.size()) sources_[i + 1].reader->prefetch();
    }
    shrink(samples, spare, count);
    // Every file that had not ended was in this window: back to lockstep if their heads agree.
    if (count >= heap_.size() && !heap_.empty()) {
      bool same = true;
      for (const Entry& e : heap_) same = same && e.first == heap_.front().first;
      if (same) {
        live_.clear();
        for (const Entry& e : heap_) live_.push_back(e.second);
        std::sort(live_.begin(), live_.end());
        heap_.clear();
        lockstep_ = true;
      }
    }
    return true;
  }

  // `from` into samples[count++], growing samples from spare first. Swap, not copy: the window
  // takes from's buffers and from's owner reuses the old ones.
  static void swap_in(std::vector<StepSample>& samples, std::vector<StepSample>& spare,
                      std::size_t& count, StepSample& from) {
    if (count == samples.size()) {
      if (!spare.empty()) {
        samples.push_back(std::move(spare.back()));
        spare.pop_back();
      } else {
        samples.emplace_back();
      }
    }
    std::swap(samples[count], from);
    ++count;
  }

  static void shrink(std::vector<StepSample>& samples, std::vector<StepSample>& spare,
                     std::size_t size) {
    while (samples.size() > size) {
      spare.push_back(std::move(samples.back()));
      samples.pop_back();
    }
  }

 private:
  using Entry = std::pair<std::int64_t, std::uint32_t>;

  // The window when every live file's head is at one step: all of them, in file order.
  bool next_lockstep(std::vector<StepSample>& samples, std::vector<StepSample>& spare,
                     std::int64_t& step, Tally& tally) {
    if (live_.empty()) {
      shrink(samples, spare, 0);
      return false;
    }
    step = sources_[live_.front()].head.step;
    std::size_t count = 0, kept = 0;
    bool same = true;
    std::int64_t next_step = 0;
    for (const std::uint32_t i : live_) {
      take(samples, spare, count, i);
      if (advance(i, tally)) {
        const std::int64_t at = sources_[i].head.step;
        if (kept == 0) next_step = at;
        same = same && at == next_step;
        live_[kept++] = i;
      }
      if (i + 1 < sources_.size()) sources_[i + 1].reader->prefetch();
    }
    live_.resize(kept);
    shrink(samples, spare, count);
    if (!same) settle();
    return true;
  }

  // After start, or a lockstep window whose files' heads went apart: lockstep when the live
  // files' heads agree, else the heap.
  void settle() {
    bool same = true;
    for (const std::uint32_t i : live_)
      same = same && sources_[i].head.step == sources_[live_.front()].head.step;
    lockstep_ = same;
    heap_.clear();
    if (same) return;
    for (const std::uint32_t i : live_) heap_.emplace_back(sources_[i].head.step, i);
    std::make_heap(heap_.begin(), heap_.end(), std::greater<>());
  }

  // Source i's head into samples[count++].
  void take(std::vector<StepSample>& samples, std::vector<StepSample>& spare, std::size_t& count,
            std::uint32_t i) {
    swap_in(samples, spare, count, sources_[i].head);
  }


  // Reads source i's next usable sample into its head; false when the file has ended.
  bool advance(std::uint32_t i, Tally& tally) {
    Source& s = sources_[i];
    bool more = false;
    while (s.reader->next(s.head)) {
      if (s.has_last && s.head.step <= s.last_step) {
        ++(s.head.step == s.last_step ? tally.duplicates : tally.out_of_order);
        continue;
      }
      s.has_last = true;
      s.last_step = s.head.step;
      if (s.head.rank < 0 || static_cast<std::uint64_t>(s.head.rank) != s.file_rank) {
        ++tally.rank_mismatches;
        if (!s.rank_mismatch_seen && s.file_index < tally.rank_mismatch_file) {
          tally.rank_mismatch_file = s.file_index;
          tally.rank_mismatch = s.reader->path() + ":" + std::to_string(s.reader->lines()) +
                                " holds rank " + std::to_string(s.head.rank) + ", not rank " +
                                std::to_string(s.file_rank) + " as its name says";
        }
        s.rank_mismatch_seen = true;
      }
      more = true;
      break;
    }
    const SampleFileReader& r = *s.reader;
    tally.malformed += r.malformed() - s.malformed_seen;
    s.malformed_seen = r.malformed();
    tally.bytes += r.bytes() - s.bytes_seen;
    s.bytes_seen = r.bytes();
    const auto& errors = r.errors();
    for (; s.errors_seen < errors.size(); ++s.errors_seen)
      if (errors_kept_ < kMaxKeptErrors) {
        tally.errors.push_back(errors[s.errors_seen]);
        ++errors_kept_;  // the run keeps its first 20; none of them comes later than these
      }
    return more;
  }

  std::vector<Source> sources_;
  // Min-heap of (head step, source index): equal steps pop in file order, so "first" is well
  // defined when two files hold the same (rank, step). Empty in lockstep.
  std::vector<Entry> heap_;
  // In lockstep: the files not ended, in file order.
  std::vector<std::uint32_t> live_;
  bool lockstep_ = false;
  std::size_t errors_kept_ = 0;
};

// A worker thread: merges its range of files into partial windows, queued for RunReader::next.
class Worker {
 public:
  // One entry of the queue: the worker's start (what reading its first samples met), a partial
  // window, its end, or the exception that stopped it.
  struct Item {
    enum class Kind : std::uint8_t { start, window, end, failure };
    Kind kind = Kind::window;
    std::int64_t step = 0;
    std::vector<StepSample> samples;
    Tally tally;
    std::exception_ptr failure;
  };

  explicit Worker(std::vector<Source> sources)
      : merge_(std::move(sources)), items_(kQueueWindows) {}
  ~Worker() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    space_.notify_one();
    if (thread_.joinable()) thread_.join();
  }
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  void launch() {
    thread_ = std::thread([this] { run(); });
  }

  // The oldest queued item, waiting for one; valid until pop().
  Item& front() {
    std::unique_lock<std::mutex> lock(mutex_);
    if (size_ == 0) {
      consumer_waiting_ = true;
      ready_.wait(lock, [this] { return size_ != 0; });
      consumer_waiting_ = false;
    }
    return items_[head_];
  }

  // Gives the front item back for reuse (its samples vector keeps the buffers swapped into it).
  void pop() {
    bool wake;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      head_ = (head_ + 1) % items_.size();
      --size_;
      // Wake a waiting worker only once the queue is half empty: it then fills many slots in a
      // row instead of trading a wake-up per window with the merge.
      wake = producer_waiting_ && size_ <= items_.size() / 2;
    }
    if (wake) space_.notify_one();
  }

 private:
  void run() {
    std::vector<StepSample> spare;
    bool started = false;
    for (;;) {
      Item* item = slot();
      if (item == nullptr) return;  // stopping
      item->tally.clear();
      item->failure = nullptr;
      try {
        if (!started) {
          started = true;
          item->kind = Item::Kind::start;
          merge_.start(item->tally);
        } else if (merge_.next(item->samples, spare, item->step, item->tally)) {
          item->kind = Item::Kind::window;
        } else {
          item->kind = Item::Kind::end;
        }
      } catch (...) {
        item->kind = Item::Kind::failure;
        item->failure = std::current_exception();
      }
      const bool last = item->kind == Item::Kind::end || item->kind == Item::Kind::failure;
      publish();
      if (last) return;
    }
  }

  // The next free slot, waiting for one; nullptr once the reader is being destroyed.
  Item* slot() {
    std::unique_lock<std::mutex> lock(mutex_);
    if (size_ == items_.size() && !stop_) {
      producer_waiting_ = true;
      space_.wait(lock, [this] { return size_ < items_.size() || stop_; });
      producer_waiting_ = false;
    }
    if (stop_) return nullptr;
    return &items_[(head_ + size_) % items_.size()];
  }

  void publish() {
    bool wake;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++size_;
      wake = consumer_waiting_;
    }
    if (wake) ready_.notify_one();
  }

  FileMerge merge_;
  std::vector<Item> items_;  // a ring: [head_, head_ + size_) are queued
  std::mutex mutex_;
  std::condition_variable ready_, space_;
  std::size_t head_ = 0, size_ = 0;
  bool consumer_waiting_ = false, producer_waiting_ = false, stop_ = false;
  std::thread thread_;
};

}  // namespace

struct RunReader::Impl {
  std::vector<std::string> files;
  RunStats stats;
  std::uint64_t bytes_total = 0;
  int world_size = 0;       // the first sample's, which the others are checked against
  int world_size_rank = 0;  // the rank of that sample
  std::size_t rank_mismatch_file = SIZE_MAX;  // the file of stats.rank_mismatch
  bool started = false;
  bool ended = false;
  unsigned workers_count = 0;
  // One of the two: the merge itself, or the workers doing it (in file order).
  std::unique_ptr<FileMerge> merge;
  std::vector<std::unique_ptr<Worker>> workers;
  // Samples no longer needed in a Window, kept so their buffers serve again (no allocation in
  // steady state even when window sizes vary).
  std::vector<StepSample> spare;
  Tally tally;  // single-threaded: what the merge met since the last window

  void add(Tally& t) {
    stats.malformed += t.malformed;
    stats.duplicates += t.duplicates;
    stats.out_of_order += t.out_of_order;
    stats.bytes += t.bytes;
    for (auto& e : t.errors)
      if (stats.errors.size() < kMaxKeptErrors) stats.errors.push_back(std::move(e));
    stats.rank_mismatches += t.rank_mismatches;
    if (t.rank_mismatch_file < rank_mismatch_file) {
      rank_mismatch_file = t.rank_mismatch_file;
      stats.rank_mismatch = std::move(t.rank_mismatch);
    }
    t.clear();
  }

  // The next window's samples (unsorted) and step from the workers, or false at the end.
  bool next_from_workers(std::vector<StepSample>& samples, std::int64_t& step) {
    if (!started) {
      started = true;
      for (auto& w : workers) {
        Worker::Item& item = w->front();
        if (item.kind == Worker::Item::Kind::failure) std::rethrow_exception(item.failure);
        add(item.tally);
        w->pop();
      }
    }
    bool any = false;
    for (auto& w : workers) {
      Worker::Item& item = w->front();
      if (item.kind == Worker::Item::Kind::failure) std::rethrow_exception(item.failure);
      if (item.kind != Worker::Item::Kind::window) continue;
      if (!any || item.step < step) step = item.step;
      any = true;
    }
    std::size_t count = 0;
    if (any) {
      for (auto& w : workers) {
        Worker::Item& item = w->front();
        if (item.kind != Worker::Item::Kind::window || item.step != step) continue;
        for (StepSample& s : item.samples) FileMerge::swap_in(samples, spare, count, s);
        add(item.tally);
        w->pop();
      }
    }
    FileMerge::shrink(samples, spare, count);
    return any;
  }
};

RunReader::RunReader(const std::string& run_dir, RunReaderOptions options)
    : impl_(std::make_unique<Impl>()) {
  std::error_code ec;
  const fs::path dir(run_dir);
  const fs::file_status status = fs::status(dir, ec);
  if (status.type() == fs::file_type::none)
    throw InputError("cannot access run directory " + run_dir + ": " + ec.message());
  if (!fs::exists(status)) throw InputError("run directory " + run_dir + " does not exist");
  if (!fs::is_directory(status)) throw InputError(run_dir + " is not a directory");

  std::vector<std::pair<std::uint64_t, std::string>> found;  // (rank number, path)
  std::vector<std::string> misnamed;                         // rank-*.jsonl whose * is not a number
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
                         : fs::is_directory(st)                ? "a directory"
                         : fs::is_fifo(st)                     ? "a FIFO"
                         : fs::is_socket(st)                   ? "a socket"
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
  std::vector<Source> sources(found.size());
  for (std::size_t i = 0; i < found.size(); ++i) {
    s.files.push_back(std::move(found[i].second));
    sources[i].reader = std::make_unique<SampleFileReader>(s.files[i], chunk);
    sources[i].file_rank = found[i].first;
    sources[i].file_index = i;
    std::error_code size_ec;
    const auto size = fs::file_size(s.files[i], size_ec);
    if (!size_ec) s.bytes_total += size;
  }
  s.stats.files = s.files.size();

  unsigned workers = options.workers;
  if (workers == RunReaderOptions::kAuto) {
    // One CPU: no thread (a worker would only take turns with the caller). More: the caller
    // analyses while the workers parse, one per other CPU (docs/performance.md).
    const unsigned cpus = usable_cpus();
    workers = std::min(cpus - 1, kMaxWorkers);
  }
  workers = static_cast<unsigned>(std::min<std::size_t>(workers, sources.size()));
  if (workers == 0) {
    s.merge = std::make_unique<FileMerge>(std::move(sources));
    return;
  }
  s.workers_count = workers;
  // Contiguous ranges of files, as even as can be: concatenated in worker order, the workers'
  // partial windows are in file order, as one merge of all files gives them.
  s.workers.reserve(workers);
  std::size_t first = 0;
  for (unsigned w = 0; w < workers; ++w) {
    const std::size_t last = sources.size() * (w + 1) / workers;
    std::vector<Source> range(std::make_move_iterator(sources.begin() + first),
                              std::make_move_iterator(sources.begin() + last));
    s.workers.push_back(std::make_unique<Worker>(std::move(range)));
    first = last;
  }
  for (auto& w : s.workers) w->launch();
}

RunReader::~RunReader() = default;

bool RunReader::next(Window& out) {
  Impl& s = *impl_;
  if (s.ended) {
    FileMerge::shrink(out.samples, s.spare, 0);
    return false;
  }
  std::int64_t step = 0;
  bool more;
  if (s.merge) {
    if (!s.started) {
      s.started = true;
      s.merge->start(s.tally);
    }
    more = s.merge->next(out.samples, s.spare, step, s.tally);
    s.add(s.tally);
  } else {
    more = s.next_from_workers(out.samples, step);
  }
  if (!more) {
    s.ended = true;
    s.workers.clear();  // every worker has ended: join them now
    return false;
  }

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
  FileMerge::shrink(samples, s.spare, kept);

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
unsigned RunReader::workers() const noexcept { return impl_->workers_count; }

}  // namespace laggard
