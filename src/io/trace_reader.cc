// Reads PyTorch profiler (Kineto) traces: one Chrome-trace JSON document per rank, plain or
// gzip-compressed, into StepSamples (one per ProfilerStep#N) and per-step device timelines.
//
// A trace is one JSON object whose traceEvents array holds every event, and may be gigabytes:
// neither simdjson's On-Demand API nor its document_stream can stream the elements of one huge
// array. So a small scanner of our own walks the text a chunk at a time, tracking only strings
// and bracket depth, and cuts the array into its event objects; each batch of whole events in a
// chunk is then handed to simdjson as one little array ("[ev, ev, ...]"). Events become compact
// records (host spans, launch calls, device activities: ~40 bytes each, only for the events used)
// and the raw text is dropped. Kineto writes every host event of the whole trace before the
// device events, and those in no step order, so a step is complete only at the end of the file:
// the compact records are resolved into samples there (TraceResolver). The directory reader is
// src/io/trace_run_reader.cc; the file's bytes (plain or gzip) come from src/io/byte_source.hpp.
#include <simdjson.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "io/byte_source.hpp"
#include "io/json_scan.hpp"
#include "io/trace_reader.hpp"
#include "laggard/trace.hpp"

namespace laggard {
namespace {

namespace fs = std::filesystem;
namespace od = simdjson::ondemand;
using detail::digits_end;
using detail::is_digit;
using detail::plain_end;
using detail::ByteSource;

constexpr std::size_t kMaxKeptErrors = 20;
constexpr std::size_t kMaxEventBytes = std::size_t{64} << 20;    // one event larger: skipped
constexpr std::size_t kMaxCapturedBytes = std::size_t{16} << 20;  // distributedInfo and the like

std::uint64_t fnv1a(std::string_view text, std::uint64_t h = 0xcbf29ce484222325ull) {
  for (unsigned char c : text) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && s.compare(0, prefix.size(), prefix) == 0;
}
bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// A JSON string token ("...", quotes included) without its quotes; empty view for a non-string.
bool string_body(std::string_view token, std::string_view& body) {
  token = trim(token);
  if (token.size() < 2 || token.front() != '"' || token.back() != '"') return false;
  body = token.substr(1, token.size() - 2);
  return true;
}

void append_utf8(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool hex4(std::string_view s, std::size_t i, std::uint32_t& v) {
  if (i + 4 > s.size()) return false;
  v = 0;
  for (std::size_t k = i; k < i + 4; ++k) {
    const char c = s[k];
    v <<= 4;
    if (c >= '0' && c <= '9') v |= static_cast<std::uint32_t>(c - '0');
    else if (c >= 'a' && c <= 'f') v |= static_cast<std::uint32_t>(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') v |= static_cast<std::uint32_t>(c - 'A' + 10);
    else return false;
  }
  return true;
}

// The text of a JSON string body (escapes resolved). A bad escape keeps its characters as they
// are: a name is for display and grouping, and laggard does not refuse an event over it.
void unescape(std::string_view body, std::string& out) {
  out.clear();
  if (body.find('\\') == std::string_view::npos) {
    out.assign(body.data(), body.size());
    return;
  }
  for (std::size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (c != '\\' || i + 1 == body.size()) {
      out += c;
      continue;
    }
    const char e = body[++i];
    switch (e) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'u': {
        std::uint32_t cp = 0;
        if (!hex4(body, i + 1, cp)) {
          out += "\\u";
          break;
        }
        i += 4;
        std::uint32_t low = 0;
        if (cp >= 0xD800 && cp < 0xDC00 && i + 6 < body.size() + 0 && body[i + 1] == '\\' &&
            body[i + 2] == 'u' && hex4(body, i + 3, low) && low >= 0xDC00 && low < 0xE000) {
          cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          i += 6;
        }
        append_utf8(out, cp);
        break;
      }
      default: out += e; break;  // \" \\ \/
    }
  }
}

// A time in microseconds, as Kineto writes it (a number, or a string holding one: some writers
// quote ts), in integer nanoseconds: absolute timestamps of 1.7e15 us keep their nanoseconds,
// which a double would round to a quarter of a microsecond. False when it is not a number.
bool parse_us(std::string_view token, std::int64_t& ns) {
  token = trim(token);
  std::string_view body;
  if (string_body(token, body)) token = trim(body);
  if (token.empty()) return false;
  std::size_t i = 0;
  bool negative = false;
  if (token[i] == '-') {
    negative = true;
    ++i;
  }
  std::int64_t whole = 0;
  std::size_t digits = 0;
  while (i < token.size() && token[i] >= '0' && token[i] <= '9') {
    if (whole > (std::numeric_limits<std::int64_t>::max() / 1000 - 9) / 10) return false;
    whole = whole * 10 + (token[i] - '0');
    ++i;
    ++digits;
  }
  std::int64_t frac = 0;
  int frac_digits = 0;
  if (i < token.size() && token[i] == '.') {
    ++i;
    while (i < token.size() && token[i] >= '0' && token[i] <= '9') {
      if (frac_digits < 3) {
        frac = frac * 10 + (token[i] - '0');
        ++frac_digits;
      }
      ++i;
      ++digits;
    }
  }
  if (digits == 0) return false;
  if (i < token.size()) {
    // An exponent (rare): through a double, to the nanosecond it can hold.
    if (token[i] != 'e' && token[i] != 'E') return false;
    const std::string copy(token);
    char* end = nullptr;
    const double v = std::strtod(copy.c_str(), &end);
    if (end != copy.c_str() + copy.size() || !std::isfinite(v) || std::fabs(v) > 9e15)
      return false;
    ns = static_cast<std::int64_t>(std::llround(v * 1000.0));
    return true;
  }
  while (frac_digits < 3) {
    frac *= 10;
    ++frac_digits;
  }
  ns = whole * 1000 + frac;
  if (negative) ns = -ns;
  return true;
}

// An integer field (a number, or a string holding one); false otherwise.
bool parse_int(std::string_view token, std::int64_t& v) {
  token = trim(token);
  std::string_view body;
  if (string_body(token, body)) token = trim(body);
  if (token.empty() || token.size() > 19) return false;
  std::size_t i = token[0] == '-' ? 1 : 0;
  if (i == token.size()) return false;
  std::int64_t x = 0;
  for (; i < token.size(); ++i) {
    if (token[i] < '0' || token[i] > '9') return false;
    x = x * 10 + (token[i] - '0');
  }
  v = token[0] == '-' ? -x : x;
  return true;
}

// ---------------------------------------------------------------------------------------------
// One event, as raw JSON tokens (views into the batch being parsed).

struct RawEvent {
  std::string_view ph, cat, name, pid, tid, ts, dur;
  std::string_view correlation, collective, group, in_nelems, out_nelems;
  bool args_seen = false;
};

enum class Category : std::uint8_t {
  other,
  annotation,      // user_annotation (ProfilerStep#N among them)
  gpu_annotation,  // gpu_user_annotation
  cpu_op,          // cpu_op / Operator
  python,          // python_function
  kernel,
  memcpy,
  memset,
  runtime,  // cuda_runtime, cuda_driver, Runtime, ...
};

Category category_of(std::string_view token) {
  std::string_view c;
  if (!string_body(token, c)) return Category::other;
  switch (c.size()) {
    case 6:
      if (c == "kernel" || c == "Kernel") return Category::kernel;
      if (c == "cpu_op" || c == "Memcpy" || c == "Memset" || c == "Driver")
        return c == "cpu_op" ? Category::cpu_op : c == "Memcpy" ? Category::memcpy
               : c == "Memset" ? Category::memset : Category::runtime;
      break;
    case 7:
      if (c == "Runtime") return Category::runtime;
      break;
    case 8:
      if (c == "Operator") return Category::cpu_op;
      break;
    case 10:
      if (c == "gpu_memcpy") return Category::memcpy;
      if (c == "gpu_memset") return Category::memset;
      break;
    case 11:
      if (c == "cuda_driver" || c == "hip_runtime") return Category::runtime;
      break;
    case 12:
      if (c == "cuda_runtime") return Category::runtime;
      break;
    case 15:
      if (c == "user_annotation" || c == "python_function")
        return c[0] == 'u' ? Category::annotation : Category::python;
      break;
    case 19:
      if (c == "gpu_user_annotation") return Category::gpu_annotation;
      break;
    default:
      break;
  }
  return Category::other;
}

// Whether a runtime call starts device work (its correlation id names a kernel, copy or memset).
bool is_launch_call(std::string_view name) {
  return name.find("Launch") != std::string_view::npos ||
         name.find("Memcpy") != std::string_view::npos ||
         name.find("Memset") != std::string_view::npos ||
         name.find("memcpy") != std::string_view::npos;
}

bool is_nccl_kernel(std::string_view name) {
  if (starts_with(name, "void ")) name.remove_prefix(5);
  return starts_with(name, "nccl") || starts_with(name, "rccl");
}

// ---------------------------------------------------------------------------------------------
// Stage names: what the annotations around the work say it is.

struct StageName {
  std::string name;
  StageKind kind = StageKind::compute;
};

// "## forward ##" → forward; PyTorch's own annotations (the DataLoader's iterator, the
// optimizer, DDP's forward, the collectives' record_param_comms) by the stage they time.
StageName normalize_stage(std::string_view name) {
  if (starts_with(name, "enumerate(DataLoader)") || starts_with(name, "DataLoader"))
    return {"dataloader", StageKind::data};
  if (starts_with(name, "Optimizer.step")) return {"optimizer", StageKind::compute};
  if (starts_with(name, "Optimizer.zero_grad")) return {"zero_grad", StageKind::compute};
  if (name == "DistributedDataParallel.forward") return {"forward", StageKind::compute};
  for (std::string_view p : {"nccl:", "gloo:", "mpi:", "hccl:", "c10d::", "ucc:"})
    if (starts_with(name, p)) return {"communication", StageKind::communication};
  std::string_view s = name;
  if (starts_with(s, "##") && ends_with(s, "##") && s.size() >= 4) s = s.substr(2, s.size() - 4);
  s = trim(s);
  if (s.empty()) s = name;
  return {std::string(s), default_stage_kind(s)};
}

// ---------------------------------------------------------------------------------------------
// Compact records of one trace, and their resolution into samples at the end of the file.

enum class SpanClass : std::uint8_t { annotation = 0, backward = 1, module = 2 };

struct HostSpan {
  std::int64_t start, end;
  std::uint64_t thread;
  std::uint32_t name;  // into names (the normalized stage's index)
  SpanClass cls;
};

struct StepSpan {
  std::int64_t start, end;
  std::int64_t number;
};

enum class ActivityKind : std::uint8_t { kernel = 0, nccl = 1, memset = 2, h2d = 3, copy = 4 };

struct Activity {
  std::int64_t start, end;
  std::uint64_t correlation;
  std::uint64_t stream;
  std::uint32_t collective;  // into collectives_, or kNone
  bool has_correlation;
  ActivityKind kind;
};

struct Launch {
  std::uint64_t correlation;
  std::int64_t start, end;
  std::uint64_t thread;
};

struct GpuSpan {
  std::int64_t start, end;
  std::uint64_t stream;
  std::uint32_t name;
};

struct CollectiveArgs {
  std::string name;
  std::uint64_t group;
  std::uint64_t signature;
};

constexpr std::uint32_t kNone = std::numeric_limits<std::uint32_t>::max();

// Where a rank number hides in a file name: rank-3, rank_3, rank3, RANK.3 (the first such).
bool rank_from_name(const std::string& file, int& rank) {
  std::string lower = file;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (std::size_t pos = lower.find("rank"); pos != std::string::npos;
       pos = lower.find("rank", pos + 1)) {
    std::size_t i = pos + 4;
    if (i < lower.size() && (lower[i] == '-' || lower[i] == '_' || lower[i] == '.')) ++i;
    std::size_t j = i;
    while (j < lower.size() && j - i < 9 && lower[j] >= '0' && lower[j] <= '9') ++j;
    if (j > i) {
      rank = std::stoi(lower.substr(i, j - i));
      return true;
    }
  }
  return false;
}

// tensorboard_trace_handler names files <host>_<pid>.<time>.pt.trace.json: the host, if so.
std::string host_from_name(const std::string& file) {
  if (file.find(".pt.trace.json") == std::string::npos) return {};
  const std::string worker = file.substr(0, file.find('.'));
  const std::size_t us = worker.rfind('_');
  if (us == std::string::npos || us == 0 || us + 1 == worker.size()) return {};
  for (std::size_t i = us + 1; i < worker.size(); ++i)
    if (worker[i] < '0' || worker[i] > '9') return {};
  return worker.substr(0, us);
}

// The line an event starts on, counted only when a message needs it.
struct LineRef {
  std::size_t (*count)(void*, std::size_t) = nullptr;
  void* scanner = nullptr;
  std::size_t offset = 0;
  std::size_t operator()() const { return count ? count(scanner, offset) : 0; }
};

class TraceBuilder {
 public:
  TraceBuilder(std::string path, std::uint64_t max_records) : max_records_(max_records) {
    stats_.path = std::move(path);
  }

  TraceFileStats& stats() { return stats_; }

  void error(std::size_t line, std::string what) {
    if (stats_.errors.size() < kMaxKeptErrors)
      stats_.errors.push_back({stats_.path, line, std::move(what)});
  }

  void malformed(std::size_t line, std::string what) {
    ++stats_.malformed;
    error(line, std::move(what));
  }

  // One event; `line` tells the line its object starts on (for messages).
  void add(const RawEvent& e, const LineRef& line) {
    ++stats_.events;
    std::string_view ph;
    if (!string_body(e.ph, ph) || ph != "X") return;  // complete events only
    std::string_view cat_body;
    if (!e.cat.empty() && !string_body(e.cat, cat_body)) {
      malformed(line(), "'cat' is not a string");
      return;
    }
    const Category cat = category_of(e.cat);
    if (cat == Category::other) return;
    std::string_view raw_name;
    if (!string_body(e.name, raw_name)) {
      if (cat == Category::cpu_op || cat == Category::python) return;
      malformed(line(), "event without a string 'name'");
      return;
    }
    // The host-side ops that are neither annotations nor autograd nor modules: most of a trace.
    if (cat == Category::cpu_op && !starts_with(raw_name, "autograd::engine::evaluate_function") &&
        !starts_with(raw_name, "ProfilerStep#"))
      return;
    if (cat == Category::python && !starts_with(raw_name, "nn.Module: ")) return;
    if (cat == Category::runtime && !is_launch_call(raw_name)) return;

    std::int64_t ts = 0, dur = 0;
    if (e.ts.empty() || !parse_us(e.ts, ts)) {
      malformed(line(), e.ts.empty() ? "event without 'ts'" : "'ts' is not a number");
      return;
    }
    if (e.dur.empty() || !parse_us(e.dur, dur) || dur < 0) {
      malformed(line(), e.dur.empty() ? "complete event (ph X) without 'dur'"
                                    : "'dur' is not a number >= 0");
      return;
    }
    const std::int64_t end = ts + dur;
    switch (cat) {
      case Category::annotation:
      case Category::cpu_op: {
        if (starts_with(raw_name, "ProfilerStep#")) {
          std::int64_t n = 0;
          if (!parse_int(raw_name.substr(13), n)) {
            malformed(line(), "ProfilerStep annotation without a step number");
            return;
          }
          steps_.push_back({ts, end, n});
          keep(1);
          return;
        }
        if (cat == Category::cpu_op) {
          add_span({ts, end, thread_key(e), backward_name(), SpanClass::backward});
          return;
        }
        unescape(raw_name, text_);
        add_span({ts, end, thread_key(e), stage_index(text_), SpanClass::annotation});
        return;
      }
      case Category::python:
        add_span({ts, end, thread_key(e), forward_name(), SpanClass::module});
        return;
      case Category::gpu_annotation: {
        if (starts_with(raw_name, "ProfilerStep#")) return;
        unescape(raw_name, text_);
        gpu_spans_.push_back({ts, end, thread_key(e), stage_index(text_)});
        keep(1);
        return;
      }
      case Category::runtime: {
        std::int64_t corr = 0;
        if (e.correlation.empty() || !parse_int(e.correlation, corr)) return;
        launches_.push_back({static_cast<std::uint64_t>(corr), ts, end, thread_key(e)});
        keep(1);
        return;
      }
      case Category::kernel:
      case Category::memcpy:
      case Category::memset: {
        Activity a{ts, end, 0, thread_key(e), kNone, false, ActivityKind::kernel};
        std::int64_t corr = 0;
        if (!e.correlation.empty() && parse_int(e.correlation, corr)) {
          a.correlation = static_cast<std::uint64_t>(corr);
          a.has_correlation = true;
        }
        if (cat == Category::memset) {
          a.kind = ActivityKind::memset;
        } else if (cat == Category::memcpy) {
          a.kind = raw_name.find("HtoD") != std::string_view::npos ? ActivityKind::h2d
                                                                   : ActivityKind::copy;
        } else if (is_nccl_kernel(raw_name)) {
          a.kind = ActivityKind::nccl;
          a.collective = collective_of(e, raw_name);
        }
        activities_.push_back(a);
        keep(1);
        return;
      }
      default:
        return;
    }
  }

  void set_distributed(int rank, bool has_rank, int world_size) {
    has_rank_ = has_rank;
    rank_ = rank;
    world_size_ = world_size;
  }
  void set_host(std::string host) { host_ = std::move(host); }

  RankTrace finish();

 private:
  // Counts kept records (a long name as several) and refuses the file past max_records: what
  // bounds the memory of a file that inflates to gigabytes of events.
  void keep(std::uint64_t records) {
    kept_ += records;
    if (max_records_ > 0 && kept_ > max_records_)
      throw InputError(stats_.path + ": more than " + std::to_string(max_records_) +
                       " kernels, launch calls and annotations after " +
                       std::to_string(stats_.events) +
                       " events: refused to bound memory (about 100 bytes each); a gzip bomb, or "
                       "a trace of too many steps (profile fewer)");
  }

  std::uint64_t thread_key(const RawEvent& e) const {
    return fnv1a(trim(e.tid), fnv1a(trim(e.pid)) * 31u);
  }

  std::uint32_t stage_index(const std::string& annotation) {
    const auto it = annotation_stage_.find(annotation);
    if (it != annotation_stage_.end()) return it->second;
    StageName s = normalize_stage(annotation);
    const std::uint32_t index = intern(s);
    annotation_stage_.emplace(annotation, index);
    keep(1 + annotation.size() / 32);  // the name, held twice
    return index;
  }
  std::uint32_t intern(const StageName& s) {
    const auto it = stage_index_.find(s.name);
    if (it != stage_index_.end()) return it->second;
    const auto index = static_cast<std::uint32_t>(stages_.size());
    stages_.push_back(s);
    stage_index_.emplace(s.name, index);
    return index;
  }
  std::uint32_t backward_name() {
    if (backward_ == kNone) backward_ = intern({"backward", StageKind::compute});
    return backward_;
  }
  std::uint32_t forward_name() {
    if (forward_ == kNone) forward_ = intern({"forward", StageKind::compute});
    return forward_;
  }

  // Autograd and module spans come by the thousand, nested: one that lies inside the last kept
  // span of its thread and class adds nothing (only the outermost ones name a stage).
  void add_span(const HostSpan& s) {
    if (s.cls != SpanClass::annotation) {
      const std::uint64_t key = s.thread * 4 + static_cast<std::uint64_t>(s.cls);
      const auto it = last_span_.find(key);
      if (it != last_span_.end()) {
        const HostSpan& last = spans_[it->second];
        if (s.start >= last.start && s.end <= last.end) return;
      }
      last_span_[key] = spans_.size();
    }
    spans_.push_back(s);
    keep(1);
  }

  std::uint32_t collective_of(const RawEvent& e, std::string_view kernel_name) {
    CollectiveArgs c;
    std::string_view body;
    if (!e.collective.empty() && string_body(e.collective, body)) {
      unescape(body, c.name);
    } else {
      std::string_view n = kernel_name;
      if (starts_with(n, "void ")) n.remove_prefix(5);
      c.name = std::string(n.substr(0, n.find('(')));
    }
    std::string_view group = trim(e.group);
    if (string_body(group, body)) group = body;
    c.group = fnv1a(group);
    c.signature = fnv1a(trim(e.out_nelems), fnv1a(trim(e.in_nelems), fnv1a(c.name)));
    const auto index = static_cast<std::uint32_t>(collectives_.size());
    const std::size_t name_bytes = c.name.size();
    collectives_.push_back(std::move(c));
    keep(1 + name_bytes / 64);
    return index;
  }

  TraceFileStats stats_;
  std::uint64_t max_records_ = 0;
  std::uint64_t kept_ = 0;
  std::string text_;
  bool has_rank_ = false;
  int rank_ = 0;
  int world_size_ = 0;
  std::string host_;
  std::vector<StageName> stages_;
  std::unordered_map<std::string, std::uint32_t> stage_index_;       // stage name → index
  std::unordered_map<std::string, std::uint32_t> annotation_stage_;  // annotation → stage
  std::uint32_t backward_ = kNone, forward_ = kNone;
  std::vector<StepSpan> steps_;
  std::vector<HostSpan> spans_;
  std::unordered_map<std::uint64_t, std::size_t> last_span_;
  std::vector<GpuSpan> gpu_spans_;
  std::vector<Launch> launches_;
  std::vector<Activity> activities_;
  std::vector<CollectiveArgs> collectives_;

  friend class TraceResolver;
};

// ---------------------------------------------------------------------------------------------
// End of file: spans, launches and activities into samples and timelines.

constexpr double kNsPerMs = 1e6;

// The outermost spans of one thread and class, sorted by start.
struct SpanList {
  std::vector<HostSpan> spans;
  // The span containing t, or nullptr.
  const HostSpan* find(std::int64_t t) const {
    auto it = std::upper_bound(spans.begin(), spans.end(), t,
                               [](std::int64_t v, const HostSpan& s) { return v < s.start; });
    while (it != spans.begin()) {
      --it;
      if (t < it->end || (t == it->start)) return &*it;
      // Outermost spans do not nest; an earlier one that reaches t would overlap this one.
      break;
    }
    return nullptr;
  }
};

struct ThreadSpans {
  SpanList by_class[3];
};

class TraceResolver {
 public:
  explicit TraceResolver(TraceBuilder& b) : b_(b) {}

  RankTrace run();

 private:
  void index_spans();
  // The stage a launch at host time t on `thread` belongs to, or kNone.
  std::uint32_t host_stage(std::uint64_t thread, std::int64_t t) const;
  // Step index (into steps_) for host time t: the step containing t; between two steps the
  // earlier one (prof.step() runs there); -1 outside them all.
  int step_of(std::int64_t t) const;
  void device_samples(RankTrace& out);
  void host_samples(RankTrace& out);
  void timelines(RankTrace& out, const std::vector<std::int64_t>& launch_end);

  TraceBuilder& b_;
  std::vector<StepSpan> steps_;
  std::unordered_map<std::uint64_t, ThreadSpans> threads_;
  std::unordered_map<std::uint64_t, SpanList> gpu_streams_;
  std::vector<std::int64_t> last_end_;  // per step: the last device activity's end
  std::vector<int> activity_step_;       // per activity
  // Every annotation of kind data or communication, nested ones too, of every host thread: what
  // explains the device's idle time (timelines()).
  std::vector<std::pair<std::int64_t, std::int64_t>> data_spans_, comm_spans_;
};

void TraceResolver::index_spans() {
  auto& spans = b_.spans_;
  for (const HostSpan& s : spans) {
    if (s.cls != SpanClass::annotation) continue;
    const StageKind kind = b_.stages_[s.name].kind;
    if (kind == StageKind::data) data_spans_.emplace_back(s.start, s.end);
    if (kind == StageKind::communication) comm_spans_.emplace_back(s.start, s.end);
  }
  std::sort(spans.begin(), spans.end(), [](const HostSpan& x, const HostSpan& y) {
    if (x.thread != y.thread) return x.thread < y.thread;
    if (x.cls != y.cls) return x.cls < y.cls;
    if (x.start != y.start) return x.start < y.start;
    return x.end > y.end;
  });
  for (std::size_t i = 0; i < spans.size();) {
    std::size_t j = i;
    SpanList& list = threads_[spans[i].thread].by_class[static_cast<int>(spans[i].cls)];
    std::int64_t outer_end = std::numeric_limits<std::int64_t>::min();
    while (j < spans.size() && spans[j].thread == spans[i].thread && spans[j].cls == spans[i].cls) {
      if (spans[j].end > outer_end && spans[j].start >= outer_end) {
        list.spans.push_back(spans[j]);
        outer_end = spans[j].end;
      } else if (spans[j].end > outer_end) {
        // Overlapping without nesting (rare): kept, so that its time counts.
        list.spans.push_back(spans[j]);
        outer_end = spans[j].end;
      }
      ++j;
    }
    i = j;
  }
  std::vector<HostSpan>().swap(spans);
  auto& gs = b_.gpu_spans_;
  std::sort(gs.begin(), gs.end(), [](const GpuSpan& x, const GpuSpan& y) {
    if (x.stream != y.stream) return x.stream < y.stream;
    if (x.start != y.start) return x.start < y.start;
    return x.end > y.end;
  });
  for (const GpuSpan& g : gs) {
    SpanList& list = gpu_streams_[g.stream];
    if (!list.spans.empty() && g.end <= list.spans.back().end) continue;  // nested
    list.spans.push_back({g.start, g.end, g.stream, g.name, SpanClass::annotation});
  }
}

std::uint32_t TraceResolver::host_stage(std::uint64_t thread, std::int64_t t) const {
  const auto it = threads_.find(thread);
  if (it == threads_.end()) return kNone;
  for (const SpanList& list : it->second.by_class)
    if (const HostSpan* s = list.find(t)) return s->name;
  return kNone;
}

int TraceResolver::step_of(std::int64_t t) const {
  auto it = std::upper_bound(steps_.begin(), steps_.end(), t,
                             [](std::int64_t v, const StepSpan& s) { return v < s.start; });
  if (it == steps_.begin()) return -1;
  --it;
  const auto index = static_cast<int>(it - steps_.begin());
  if (t < it->end) return index;
  // After this step: in the gap before the next one, or past the last.
  if (static_cast<std::size_t>(index) + 1 < steps_.size()) return index;
  return -1;
}

struct StageAcc {
  double ms = 0.0;
  std::uint32_t calls = 0;
  std::int64_t first = std::numeric_limits<std::int64_t>::max();
};

void finish_samples(RankTrace& out, const std::vector<StepSpan>& steps,
                    const std::vector<std::vector<std::pair<std::uint32_t, StageAcc>>>& acc,
                    const std::vector<StageName>& stages) {
  out.samples.resize(steps.size());
  for (std::size_t s = 0; s < steps.size(); ++s) {
    StepSample& sample = out.samples[s];
    sample.rank = out.info.rank;
    sample.world_size = out.info.world_size;
    sample.step = steps[s].number;
    sample.host = out.info.host;
    sample.cohort = out.info.cohort;
    sample.step_ms = static_cast<double>(steps[s].end - steps[s].start) / kNsPerMs;
    auto list = acc[s];
    // Pipeline order: the order the stages began in within the step.
    std::stable_sort(list.begin(), list.end(),
                     [](const auto& x, const auto& y) { return x.second.first < y.second.first; });
    for (const auto& [index, a] : list)
      sample.stages.push_back({stages[index].name, stages[index].kind, a.ms, a.calls});
  }
}

// Accumulates (step, stage) figures.
class StepStages {
 public:
  explicit StepStages(std::size_t steps) : acc_(steps) {}
  void add(int step, std::uint32_t stage, double ms, std::int64_t first) {
    auto& list = acc_[static_cast<std::size_t>(step)];
    for (auto& [index, a] : list)
      if (index == stage) {
        a.ms += ms;
        ++a.calls;
        a.first = std::min(a.first, first);
        return;
      }
    StageAcc a;
    a.ms = ms;
    a.calls = 1;
    a.first = first;
    list.emplace_back(stage, a);
  }
  bool has(int step, std::uint32_t stage) const {
    for (const auto& [index, a] : acc_[static_cast<std::size_t>(step)])
      if (index == stage) return true;
    return false;
  }
  void merge(int step, std::uint32_t stage, const StageAcc& a) {
    acc_[static_cast<std::size_t>(step)].emplace_back(stage, a);
  }
  const std::vector<std::vector<std::pair<std::uint32_t, StageAcc>>>& lists() const { return acc_; }

 private:
  std::vector<std::vector<std::pair<std::uint32_t, StageAcc>>> acc_;
};

void TraceResolver::device_samples(RankTrace& out) {
  auto& launches = b_.launches_;
  std::sort(launches.begin(), launches.end(),
            [](const Launch& x, const Launch& y) { return x.correlation < y.correlation; });
  const auto find_launch = [&](std::uint64_t corr) -> const Launch* {
    auto it = std::lower_bound(launches.begin(), launches.end(), corr,
                               [](const Launch& l, std::uint64_t c) { return l.correlation < c; });
    return it != launches.end() && it->correlation == corr ? &*it : nullptr;
  };
  const std::uint32_t comm =
      b_.intern({"communication", StageKind::communication});
  const std::uint32_t h2d = b_.intern({"h2d", StageKind::data});
  std::uint32_t unannotated = kNone;

  StepStages acc(steps_.size());
  const std::size_t n = b_.activities_.size();
  activity_step_.assign(n, -1);
  std::vector<std::int64_t> launch_end(n, std::numeric_limits<std::int64_t>::min());
  std::vector<std::int64_t> launch_start(n, 0);
  last_end_.assign(steps_.size(), std::numeric_limits<std::int64_t>::min());
  for (std::size_t i = 0; i < n; ++i) {
    const Activity& a = b_.activities_[i];
    const Launch* l = a.has_correlation ? find_launch(a.correlation) : nullptr;
    if (!l) ++b_.stats_.unmatched;
    const std::int64_t when = l ? l->start : a.start;
    const int step = step_of(when);
    if (step < 0) {
      ++b_.stats_.outside_steps;
      continue;
    }
    activity_step_[i] = step;
    launch_start[i] = when;
    if (l) launch_end[i] = l->end;
    last_end_[static_cast<std::size_t>(step)] =
        std::max(last_end_[static_cast<std::size_t>(step)], a.end);
    std::uint32_t stage = kNone;
    if (a.kind == ActivityKind::nccl) {
      stage = comm;
    } else {
      if (l) stage = host_stage(l->thread, l->start);
      if (stage == kNone) {
        const auto g = gpu_streams_.find(a.stream);
        if (g != gpu_streams_.end())
          if (const HostSpan* s = g->second.find(a.start)) stage = s->name;
      }
      if (stage == kNone) {
        if (a.kind == ActivityKind::h2d) {
          stage = h2d;
        } else {
          if (unannotated == kNone) unannotated = b_.intern({"unannotated", StageKind::compute});
          stage = unannotated;
        }
      }
    }
    acc.add(step, stage, static_cast<double>(a.end - a.start) / kNsPerMs, when);
  }
  // Annotated host work with no device work in its step (the DataLoader, zero_grad, a
  // host-side pre-processing stage) is a stage too, in host time, as the live recorder gives it.
  StepStages host(steps_.size());
  for (const auto& [thread, ts] : threads_) {
    (void)thread;
    for (const HostSpan& s : ts.by_class[static_cast<int>(SpanClass::annotation)].spans) {
      const int step = step_of(s.start);
      if (step < 0) continue;
      host.add(step, s.name, static_cast<double>(s.end - s.start) / kNsPerMs, s.start);
    }
  }
  for (std::size_t s = 0; s < steps_.size(); ++s)
    for (const auto& [stage, a] : host.lists()[s])
      if (!acc.has(static_cast<int>(s), stage)) acc.merge(static_cast<int>(s), stage, a);
  finish_samples(out, steps_, acc.lists(), b_.stages_);

  // Collectives: per step, in launch order, numbered within their process group.
  std::vector<std::size_t> nccl;
  for (std::size_t i = 0; i < n; ++i)
    if (b_.activities_[i].kind == ActivityKind::nccl && activity_step_[i] >= 0) nccl.push_back(i);
  std::stable_sort(nccl.begin(), nccl.end(), [&](std::size_t x, std::size_t y) {
    if (activity_step_[x] != activity_step_[y]) return activity_step_[x] < activity_step_[y];
    return launch_start[x] < launch_start[y];
  });
  std::unordered_map<std::uint64_t, std::uint32_t> ordinal;
  int current = -1;
  for (std::size_t i : nccl) {
    const Activity& a = b_.activities_[i];
    if (activity_step_[i] != current) {
      current = activity_step_[i];
      ordinal.clear();
    }
    const CollectiveArgs& c = b_.collectives_[a.collective];
    CollectiveKernel k;
    k.step = steps_[static_cast<std::size_t>(current)].number;
    k.ordinal = ordinal[c.group]++;
    k.group = c.group;
    k.signature = c.signature;
    k.ms = static_cast<double>(a.end - a.start) / kNsPerMs;
    k.name = c.name;
    out.collectives.push_back(std::move(k));
  }
  timelines(out, launch_end);
}

void TraceResolver::host_samples(RankTrace& out) {
  StepStages acc(steps_.size());
  for (const auto& [thread, ts] : threads_) {
    (void)thread;
    for (int cls = 0; cls < 3; ++cls) {
      for (const HostSpan& s : ts.by_class[cls].spans) {
        // A backward or module span inside an annotation of its thread is covered by it.
        bool covered = false;
        for (int outer = 0; outer < cls && !covered; ++outer)
          covered = ts.by_class[outer].find(s.start) != nullptr;
        if (covered) continue;
        const int step = step_of(s.start);
        if (step < 0) continue;
        acc.add(step, s.name, static_cast<double>(s.end - s.start) / kNsPerMs, s.start);
      }
    }
  }
  finish_samples(out, steps_, acc.lists(), b_.stages_);
}

// The device timeline of each step (docs/howto/traces.md, "Timeline bubbles"): a sweep over the
// activities' start and end points, with the steps' windows and the host's data and
// communication spans.
void TraceResolver::timelines(RankTrace& out, const std::vector<std::int64_t>& launch_end) {
  const auto& acts = b_.activities_;
  const std::size_t steps = steps_.size();
  // Windows: step s covers [a_s, b_s), a_s = max(host start, b_{s-1}), b_s = max(host end, the
  // last end of its activities, a_s).
  std::vector<std::int64_t> wa(steps), wb(steps);
  for (std::size_t s = 0; s < steps; ++s) {
    wa[s] = s == 0 ? steps_[s].start : std::max(steps_[s].start, wb[s - 1]);
    wb[s] = std::max({steps_[s].end, last_end_[s], wa[s]});
  }
  // Idle time is explained first by data loading, then by communication: the union of the data
  // spans, and the union of data and communication spans (communication = the difference).
  using Spans = std::vector<std::pair<std::int64_t, std::int64_t>>;
  const auto merge = [](Spans v) {
    std::sort(v.begin(), v.end());
    Spans merged;
    for (const auto& d : v) {
      if (!merged.empty() && d.first <= merged.back().second)
        merged.back().second = std::max(merged.back().second, d.second);
      else
        merged.push_back(d);
    }
    return merged;
  };
  const Spans data = merge(data_spans_);
  Spans either = data_spans_;
  either.insert(either.end(), comm_spans_.begin(), comm_spans_.end());
  either = merge(std::move(either));
  // The part of [x, y) that `merged` covers.
  const auto overlap = [](const Spans& merged, std::int64_t x, std::int64_t y) {
    if (y <= x || merged.empty()) return std::int64_t{0};
    auto it = std::upper_bound(merged.begin(), merged.end(), std::make_pair(x, std::int64_t{0}),
                               [](const auto& v, const auto& m) { return v.first < m.first; });
    if (it != merged.begin()) --it;
    std::int64_t total = 0;
    for (; it != merged.end() && it->first < y; ++it) {
      const std::int64_t lo = std::max(x, it->first), hi = std::min(y, it->second);
      if (hi > lo) total += hi - lo;
    }
    return total;
  };

  // Points: +1/-1 per activity class; window boundaries split segments.
  struct Point {
    std::int64_t t;
    int delta;  // +1 start, -1 end
    ActivityKind kind;
  };
  std::vector<Point> points;
  points.reserve(acts.size() * 2);
  std::vector<std::size_t> by_start;
  by_start.reserve(acts.size());
  for (std::size_t i = 0; i < acts.size(); ++i) {
    if (activity_step_[i] < 0) continue;
    points.push_back({acts[i].start, +1, acts[i].kind});
    points.push_back({acts[i].end, -1, acts[i].kind});
    by_start.push_back(i);
  }
  std::sort(points.begin(), points.end(), [](const Point& x, const Point& y) {
    if (x.t != y.t) return x.t < y.t;
    return x.delta < y.delta;  // ends before starts at the same time
  });
  std::sort(by_start.begin(), by_start.end(),
            [&](std::size_t x, std::size_t y) { return acts[x].start < acts[y].start; });

  out.timeline.resize(steps);
  for (std::size_t s = 0; s < steps; ++s) {
    StepTimeline& t = out.timeline[s];
    t.step = steps_[s].number;
    t.step_ms = static_cast<double>(steps_[s].end - steps_[s].start) / kNsPerMs;
    t.window_ms = static_cast<double>(wb[s] - wa[s]) / kNsPerMs;
  }
  for (std::size_t i = 0; i < acts.size(); ++i) {
    if (activity_step_[i] < 0) continue;
    StepTimeline& t = out.timeline[static_cast<std::size_t>(activity_step_[i])];
    ++t.activities;
    if (acts[i].kind == ActivityKind::nccl) {
      ++t.collectives;
      t.comm_ms += static_cast<double>(acts[i].end - acts[i].start) / kNsPerMs;
    }
  }
  if (steps == 0) return;

  int busy = 0, h2d = 0, copies = 0;
  std::size_t p = 0, next = 0;  // next: first activity (by start) not yet begun
  std::size_t w = 0;
  std::int64_t cursor = wa[0];
  // Moves `cursor` to `t`, charging the segment [cursor, t) to the windows it crosses.
  const auto charge = [&](std::int64_t until) {
    while (cursor < until && w < steps) {
      if (cursor < wa[w]) cursor = std::min(until, wa[w]);  // between windows: not charged
      if (cursor >= until) break;
      const std::int64_t hi = std::min(until, wb[w]);
      if (hi > cursor) {
        StepTimeline& t = out.timeline[w];
        const double len = static_cast<double>(hi - cursor) / kNsPerMs;
        if (busy > 0) {
          t.busy_ms += len;
        } else if (h2d > 0) {
          t.data_wait_ms += len;
        } else if (copies > 0) {
          t.copy_ms += len;
        } else {
          // Idle: the part the host spent loading data, then the part it spent in a
          // collective, then the wait for the next launch, then the rest.
          while (next < by_start.size() && acts[by_start[next]].start < hi) ++next;
          const std::int64_t data_ns = overlap(data, cursor, hi);
          const std::int64_t comm_ns = overlap(either, cursor, hi) - data_ns;
          std::int64_t launch_ns = 0;
          if (next < by_start.size()) {
            const std::int64_t le = launch_end[by_start[next]];
            if (le > cursor) {
              const std::int64_t lhi = std::min(hi, le);
              launch_ns = (lhi - cursor) - overlap(either, cursor, lhi);
            }
          }
          t.data_wait_ms += static_cast<double>(data_ns) / kNsPerMs;
          t.comm_idle_ms += static_cast<double>(comm_ns) / kNsPerMs;
          t.launch_wait_ms += static_cast<double>(launch_ns) / kNsPerMs;
          t.other_idle_ms +=
              static_cast<double>(hi - cursor - data_ns - comm_ns - launch_ns) / kNsPerMs;
        }
        cursor = hi;
      }
      if (cursor >= wb[w]) ++w;
    }
    cursor = std::max(cursor, until);
  };
  for (; p < points.size(); ++p) {
    charge(points[p].t);
    int& counter = points[p].kind == ActivityKind::h2d    ? h2d
                   : points[p].kind == ActivityKind::copy ? copies
                                                          : busy;
    counter += points[p].delta;
  }
  charge(wb[steps - 1]);
}

RankTrace TraceResolver::run() {
  TraceFileStats& st = b_.stats_;
  const std::string file = fs::path(st.path).filename().string();
  RankTrace out;
  if (b_.steps_.empty())
    throw InputError(st.path +
                     ": no ProfilerStep#N annotation (laggard reads steps from them: profile "
                     "with torch.profiler.profile(schedule=...) and call prof.step() every step)");
  steps_ = std::move(b_.steps_);
  std::stable_sort(steps_.begin(), steps_.end(),
                   [](const StepSpan& x, const StepSpan& y) { return x.start < y.start; });
  // The same step number twice (two profiler windows in one file numbered alike): the first.
  {
    std::vector<StepSpan> unique;
    std::vector<std::int64_t> seen;
    for (const StepSpan& s : steps_) {
      if (std::find(seen.begin(), seen.end(), s.number) != seen.end()) continue;
      seen.push_back(s.number);
      unique.push_back(s);
    }
    steps_ = std::move(unique);
    // Ascending step numbers keep the windows in order: a file whose numbers go down is read in
    // time order all the same, and its samples sorted by step below.
  }
  st.steps = steps_.size();
  st.activities = b_.activities_.size();
  st.launches = b_.launches_.size();

  int rank = b_.rank_;
  if (!b_.has_rank_) {
    if (!rank_from_name(file, rank))
      throw InputError(st.path +
                       ": no rank: the trace has no distributedInfo.rank and its file name "
                       "names none (name it rank-<N>.json, or profile after "
                       "torch.distributed.init_process_group)");
    out.rank_from_file_name = true;
  }
  out.info.rank = rank;
  out.info.world_size = b_.world_size_ > 0 ? b_.world_size_ : 0;
  out.info.host = b_.host_.empty() ? host_from_name(file) : b_.host_;
  index_spans();
  out.has_device_activity = !b_.activities_.empty();
  if (out.has_device_activity)
    device_samples(out);
  else
    host_samples(out);
  // Samples in ascending step (the timeline in the same order).
  std::vector<std::size_t> order(out.samples.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) {
    return out.samples[x].step < out.samples[y].step;
  });
  bool sorted = true;
  for (std::size_t i = 0; i < order.size(); ++i) sorted = sorted && order[i] == i;
  if (!sorted) {
    std::vector<StepSample> samples;
    std::vector<StepTimeline> timeline;
    for (std::size_t i : order) {
      samples.push_back(std::move(out.samples[i]));
      if (!out.timeline.empty()) timeline.push_back(out.timeline[i]);
    }
    out.samples = std::move(samples);
    out.timeline = std::move(timeline);
  }
  out.stats = std::move(st);
  return out;
}

RankTrace TraceBuilder::finish() { return TraceResolver(*this).run(); }

// ---------------------------------------------------------------------------------------------
// The scanner: the document's top level, and traceEvents cut into event objects.

// The end of the object starting at p ('{'), or nullptr when [p, end) holds only its beginning.
// Only strings and brackets are tracked: simdjson checks the rest when the event is parsed.
const char* scan_object(const char* p, const char* end) {
  int depth = 0;
  while (p < end) {
    const char c = *p;
    if (c == '"') {
      const char* s = ++p;
      for (;;) {
        const void* hit = std::memchr(p, '"', static_cast<std::size_t>(end - p));
        if (!hit) return nullptr;
        const char* q = static_cast<const char*>(hit);
        std::size_t backslashes = 0;
        for (const char* b = q; b > s && b[-1] == '\\'; --b) ++backslashes;
        p = q + 1;
        if (backslashes % 2 == 0) break;
      }
      continue;
    }
    if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return p + 1;
    }
    ++p;
  }
  return nullptr;
}

// The key a raw_json_string points at (escapes not resolved: laggard's keys have none).
std::string_view key_view(od::raw_json_string key) {
  const char* p = key.raw();
  const void* q = std::memchr(p, '"', 64);
  if (!q) return {};
  return {p, static_cast<std::size_t>(static_cast<const char*>(q) - p)};
}

std::string_view token_of(od::value& v) {
  return trim(v.raw_json_token());
}

bool wants_args(std::string_view cat_token) {
  if (cat_token.empty()) return true;  // args before cat: cannot tell, read them
  switch (category_of(cat_token)) {
    case Category::kernel:
    case Category::memcpy:
    case Category::memset:
    case Category::runtime:
      return true;
    default:
      return false;
  }
}

simdjson::error_code decode_event(od::object& obj, RawEvent& e) {
  for (auto field : obj) {
    od::raw_json_string raw_key;
    if (auto err = field.key().get(raw_key)) return err;
    const std::string_view k = key_view(raw_key);
    od::value v = field.value();
    // By length first: this runs for every field of every event.
    switch (k.size()) {
      case 2:
        if (k == "ph") e.ph = token_of(v);
        else if (k == "ts") e.ts = token_of(v);
        break;
      case 3:
        if (k == "cat") e.cat = token_of(v);
        else if (k == "pid") e.pid = token_of(v);
        else if (k == "tid") e.tid = token_of(v);
        else if (k == "dur") e.dur = token_of(v);
        break;
      case 4:
        if (k == "name") {
          e.name = token_of(v);
        } else if (k == "args" && wants_args(e.cat)) {
          od::object args;
          if (v.get_object().get(args)) break;  // args that are not an object: none
          e.args_seen = true;
          for (auto a : args) {
            od::raw_json_string ak;
            if (auto err = a.key().get(ak)) return err;
            const std::string_view n = key_view(ak);
            od::value av = a.value();
            if (n == "correlation") e.correlation = token_of(av);
            else if (n == "Collective name") e.collective = token_of(av);
            else if (n == "Process Group Name") e.group = token_of(av);
            else if (n == "In msg nelems") e.in_nelems = token_of(av);
            else if (n == "Out msg nelems") e.out_nelems = token_of(av);
          }
        }
        break;
      default:
        break;
    }
  }
  return simdjson::SUCCESS;
}

// A forward pass over one event in the read buffer, for the common case: the fields the reader
// keeps, as the same raw tokens decode_event takes from simdjson, without copying the event
// into a batch or indexing it. It accepts only strict JSON (every value checked: strings of
// printable ASCII without escapes, numbers by the JSON grammar, nesting up to 64 deep) and
// answers `unsure` for anything else (escapes, other bytes, a kept field whose value is an
// object or array), which then goes the simdjson way: what it accepts is valid JSON, for which
// both give the same tokens. `incomplete` when the buffer ends inside the event.
class FastEvent {
 public:
  enum Result { ok, unsure, incomplete };

  FastEvent(const char* p, const char* end) : p_(p), end_(end) {}

  // The event object at p ('{'), into `e`; on success `next` is just past its '}'.
  Result decode(RawEvent& e, const char*& next) {
    ++p_;  // '{'
    if (!ws()) return incomplete;
    if (*p_ == '}') {
      next = p_ + 1;
      return ok;
    }
    for (;;) {
      std::string_view k;
      if (Result r = key(k); r != ok) return r;
      // By length first, as in decode_event.
      std::string_view* slot = nullptr;
      bool args_read = false;
      switch (k.size()) {
        case 2:
          slot = k == "ph" ? &e.ph : k == "ts" ? &e.ts : nullptr;
          break;
        case 3:
          slot = k == "cat" ? &e.cat : k == "pid" ? &e.pid : k == "tid" ? &e.tid
               : k == "dur" ? &e.dur : nullptr;
          break;
        case 4:
          if (k == "name") {
            slot = &e.name;
          } else if (k == "args" && *p_ == '{' && wants_args(e.cat)) {
            if (Result r = args(e); r != ok) return r;
            args_read = true;
          }
          break;
        default:
          break;
      }
      if (slot) {
        if (Result r = token(*slot); r != ok) return r;
      } else if (!args_read) {
        if (Result r = value(0); r != ok) return r;
      }
      if (!ws()) return incomplete;
      if (*p_ == ',') {
        ++p_;
        if (!ws()) return incomplete;
        continue;
      }
      if (*p_ == '}') {
        next = p_ + 1;
        return ok;
      }
      return unsure;
    }
  }

 private:
  static constexpr int kMaxDepth = 64;

  // Skips white space; false at the end of the buffer.
  bool ws() {
    while (p_ < end_ && is_space(*p_)) ++p_;
    return p_ < end_;
  }

  // A key and its ':', leaving p_ on the value's first character.
  Result key(std::string_view& k) {
    if (*p_ != '"') return unsure;
    const char* s = p_;
    if (Result r = string(); r != ok) return r;
    // key_view's reading: up to the first quote within 64 bytes, else no key.
    k = p_ - s - 2 < 64 ? std::string_view(s + 1, static_cast<std::size_t>(p_ - s - 2))
                         : std::string_view();
    if (!ws()) return incomplete;
    if (*p_ != ':') return unsure;
    ++p_;
    if (!ws()) return incomplete;
    return ok;
  }

  // A kept field's value: a string, number or literal, as its raw token.
  Result token(std::string_view& v) {
    const char* s = p_;
    const char c = *p_;
    if (c == '{' || c == '[') return unsure;
    if (Result r = value(0); r != ok) return r;
    v = {s, static_cast<std::size_t>(p_ - s)};
    return ok;
  }

  // The args object of a launch, copy or kernel: the collective's fields and the correlation.
  Result args(RawEvent& e) {
    ++p_;  // '{'
    e.args_seen = true;
    if (!ws()) return incomplete;
    if (*p_ == '}') {
      ++p_;
      return ok;
    }
    for (;;) {
      std::string_view n;
      if (Result r = key(n); r != ok) return r;
      std::string_view* slot = nullptr;
      if (n == "correlation") slot = &e.correlation;
      else if (n == "Collective name") slot = &e.collective;
      else if (n == "Process Group Name") slot = &e.group;
      else if (n == "In msg nelems") slot = &e.in_nelems;
      else if (n == "Out msg nelems") slot = &e.out_nelems;
      if (slot) {
        if (Result r = token(*slot); r != ok) return r;
      } else if (Result r = value(1); r != ok) {
        return r;
      }
      if (!ws()) return incomplete;
      if (*p_ == ',') {
        ++p_;
        if (!ws()) return incomplete;
        continue;
      }
      if (*p_ == '}') {
        ++p_;
        return ok;
      }
      return unsure;
    }
  }

  // A string from its opening quote; p_ ends just past the closing one. A quote, a backslash, or
  // a byte below 0x20 or above 0x7f stops the run (json_scan.hpp: 16 bytes at a time).
  Result string() {
    p_ = plain_end(p_ + 1, end_);
    if (p_ >= end_) return incomplete;
    if (*p_ == '"') {
      ++p_;
      return ok;
    }
    return unsure;
  }

  // A number by the JSON grammar; it must end before the buffer does. Digit runs are found 8
  // bytes at a time (json_scan.hpp, as the rank-log fast path does).
  Result number() {
    if (*p_ == '-' && ++p_ == end_) return incomplete;
    if (*p_ == '0') {
      ++p_;
    } else if (is_digit(*p_)) {
      p_ = digits_end(p_, end_);
    } else {
      return unsure;
    }
    if (p_ == end_) return incomplete;
    if (*p_ == '.') {
      if (++p_ == end_) return incomplete;
      if (!is_digit(*p_)) return unsure;
      p_ = digits_end(p_, end_);
      if (p_ == end_) return incomplete;
    }
    if (*p_ == 'e' || *p_ == 'E') {
      if (++p_ == end_) return incomplete;
      if (*p_ == '+' || *p_ == '-')
        if (++p_ == end_) return incomplete;
      if (!is_digit(*p_)) return unsure;
      p_ = digits_end(p_, end_);
      if (p_ == end_) return incomplete;
    }
    const char c = *p_;
    return is_space(c) || c == ',' || c == '}' || c == ']' ? ok : unsure;
  }

  Result literal(std::string_view word) {
    const auto left = static_cast<std::size_t>(end_ - p_);
    if (left <= word.size()) {
      return std::string_view(p_, left) == word.substr(0, left) ? incomplete : unsure;
    }
    if (std::string_view(p_, word.size()) != word) return unsure;
    p_ += word.size();
    const char c = *p_;
    return is_space(c) || c == ',' || c == '}' || c == ']' ? ok : unsure;
  }

  // Any value, checked and skipped; p_ on its first character.
  Result value(int depth) {
    switch (*p_) {
      case '"':
        return string();
      case '{':
      case '[': {
        if (depth >= kMaxDepth) return unsure;
        const char close = *p_ == '{' ? '}' : ']';
        const bool object = close == '}';
        ++p_;
        if (!ws()) return incomplete;
        if (*p_ == close) {
          ++p_;
          return ok;
        }
        for (;;) {
          if (object) {
            std::string_view k;
            if (Result r = key(k); r != ok) return r;
          }
          if (Result r = value(depth + 1); r != ok) return r;
          if (!ws()) return incomplete;
          if (*p_ == ',') {
            ++p_;
            if (!ws()) return incomplete;
            continue;
          }
          if (*p_ == close) {
            ++p_;
            return ok;
          }
          return unsure;
        }
      }
      case 't':
        return literal("true");
      case 'f':
        return literal("false");
      case 'n':
        return literal("null");
      default:
        return number();
    }
  }

  const char* p_;
  const char* end_;
};

// A std::allocator whose value-initialisation leaves a char as it is: the scanner's buffer is
// not zero-filled, so only the pages that reads reach are ever touched.
template <typename T>
struct UninitAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = UninitAllocator<U>;
  };
  UninitAllocator() = default;
  template <typename U>
  UninitAllocator(const UninitAllocator<U>&) noexcept {}
  template <typename U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

// Bytes asked of the source at a time: the text is scanned while it is still in the cache, and
// a chunk's pages beyond what the reads reach are never touched.
constexpr std::size_t kReadBytes = std::size_t{256} << 10;

class TraceScanner {
 public:
  TraceScanner(const std::string& path, ByteSource& source, TraceBuilder& builder,
               std::size_t chunk, const std::function<void(std::uint64_t)>& progress)
      : path_(path), src_(source), b_(builder), progress_(progress) {
    cap_ = std::max<std::size_t>(chunk, 1 << 12);
    buf_.resize(cap_ + simdjson::SIMDJSON_PADDING);
  }

  void run() {
    int c = peek();
    if (c == '[') {  // Chrome's "JSON array format": the events alone
      ++pos_;
      saw_events_ = true;
      events();
    } else if (c == '{') {
      ++pos_;
      top_level();
    } else {
      throw InputError(path_ + ": not a profiler trace: expected a JSON object holding "
                               "traceEvents" +
                       (src_.error().empty() ? "" : " (" + src_.error() + ")"));
    }
    if (!saw_events_)
      throw InputError(path_ + ": not a profiler trace: no traceEvents" +
                       (truncated_ ? " before the file ends" : ""));
    b_.stats().truncated = truncated_;
    b_.stats().json_bytes = json_bytes_;
    if (!src_.error().empty() && !truncated_) b_.error(line_at(pos_), src_.error());
  }

 private:
  struct Pending {
    std::size_t offset, length;
  };

  LineRef line_ref(std::size_t offset) {
    return {[](void* self, std::size_t at) { return static_cast<TraceScanner*>(self)->line_at(at); },
            this, offset};
  }

  // Lines are counted only as far as needed, each byte once.
  std::size_t line_at(std::size_t offset) {
    if (offset < counted_) {
      counted_ = 0;
      newlines_ = 0;
    }
    newlines_ += detail::count_byte(buf_.data() + counted_, buf_.data() + std::min(offset, len_), '\n');
    counted_ = std::min(offset, len_);
    return line_base_ + newlines_ + 1;
  }

  // Drops [0, pos_), reads more. False when the file has no more text.
  bool refill() {
    if (pos_ > 0) {
      line_at(pos_);
      line_base_ += newlines_;
      newlines_ = 0;
      counted_ = 0;
      std::memmove(buf_.data(), buf_.data() + pos_, len_ - pos_);
      len_ -= pos_;
      pos_ = 0;
    }
    if (len_ == cap_) {
      if (cap_ >= kMaxEventBytes) return false;
      cap_ *= 2;
      buf_.resize(cap_ + simdjson::SIMDJSON_PADDING);
    }
    const std::size_t n = src_.read(buf_.data() + len_, std::min(cap_ - len_, kReadBytes));
    json_bytes_ += n;
    len_ += n;
    if (progress_) progress_(src_.consumed());
    return n > 0;
  }

  // The next character that is not white space (-1 at the end of the text).
  int peek() {
    for (;;) {
      while (pos_ < len_ && is_space(buf_[pos_])) ++pos_;
      if (pos_ < len_) return static_cast<unsigned char>(buf_[pos_]);
      if (!refill()) return -1;
    }
  }

  // One JSON value from pos_, into `capture` (up to kMaxCapturedBytes) when given. False when
  // the text ends inside it.
  bool skip_value(std::string* capture) {
    if (peek() < 0) return false;
    int depth = 0;
    bool in_string = false, escaped = false;
    const char first = buf_[pos_];
    const bool scalar = first != '{' && first != '[' && first != '"';
    for (;;) {
      if (pos_ == len_ && !refill()) return scalar && depth == 0;
      const char c = buf_[pos_];
      if (scalar) {
        if (c == ',' || c == '}' || c == ']' || is_space(c)) return true;
      } else if (in_string) {
        if (escaped) escaped = false;
        else if (c == '\\') escaped = true;
        else if (c == '"') {
          in_string = false;
          if (depth == 0) {
            if (capture && capture->size() < kMaxCapturedBytes) *capture += c;
            ++pos_;
            return true;
          }
        }
      } else if (c == '"') {
        in_string = true;
      } else if (c == '{' || c == '[') {
        ++depth;
      } else if (c == '}' || c == ']') {
        if (--depth == 0) {
          if (capture && capture->size() < kMaxCapturedBytes) *capture += c;
          ++pos_;
          return true;
        }
      }
      if (capture && capture->size() < kMaxCapturedBytes) *capture += c;
      ++pos_;
    }
  }

  void top_level() {
    std::string key, value;
    for (;;) {
      int c = peek();
      if (c == '}' || c < 0) {
        if (c < 0) cut("the file ends inside the trace's top-level object");
        else ++pos_;
        return;
      }
      if (c == ',') {
        ++pos_;
        continue;
      }
      key.clear();
      if (c != '"' || !skip_value(&key) || key.size() < 2) {
        cut("expected a key of the trace's top-level object");
        return;
      }
      key = key.substr(1, key.size() - 2);
      if (peek() != ':') {
        cut("expected ':' after the top-level key '" + key + "'");
        return;
      }
      ++pos_;
      c = peek();
      if (key == "traceEvents") {
        if (c != '[') {
          cut("traceEvents is not an array");
          saw_events_ = true;
          return;
        }
        ++pos_;
        saw_events_ = true;
        if (!events()) return;
        continue;
      }
      const bool keep = key == "distributedInfo" || key == "host_name" || key == "hostname";
      value.clear();
      if (!skip_value(keep ? &value : nullptr)) {
        cut("the file ends inside the top-level value '" + key + "'");
        return;
      }
      if (keep) take(key, value);
    }
  }

  void take(const std::string& key, const std::string& value) {
    simdjson::padded_string json(value);
    od::parser parser;
    od::document doc;
    if (parser.iterate(json).get(doc)) return;
    if (key != "distributedInfo") {
      std::string_view host;
      if (!doc.get_string().get(host)) b_.set_host(std::string(host));
      return;
    }
    od::object obj;
    if (doc.get_object().get(obj)) {
      b_.error(line_at(pos_), "distributedInfo is not an object");
      return;
    }
    std::int64_t rank = -1, world = 0;
    bool has_rank = false;
    for (auto field : obj) {
      od::raw_json_string k;
      if (field.key().get(k)) break;
      od::value v = field.value();
      const std::string_view name = key_view(k);
      std::int64_t x = 0;
      if (name == "rank" && parse_int(token_of(v), x) && x >= 0 && x < (1 << 30)) {
        rank = x;
        has_rank = true;
      } else if (name == "world_size" && parse_int(token_of(v), x) && x > 0 && x < (1 << 30)) {
        world = x;
      }
    }
    b_.set_distributed(static_cast<int>(rank), has_rank, static_cast<int>(world));
  }

  void cut(const std::string& what) {
    truncated_ = true;
    b_.error(line_at(std::min(pos_, len_)),
             what + (src_.error().empty() ? "" : ": " + src_.error()));
  }

  // The elements of traceEvents, from just after its '['. False when the text ended first.
  bool events() {
    for (;;) {
      while (pos_ < len_ && (is_space(buf_[pos_]) || buf_[pos_] == ',')) ++pos_;
      if (pos_ == len_) {
        flush();
        if (!refill()) {
          cut("the file ends inside traceEvents (" + std::to_string(b_.stats().events) +
              " events read; a cut or unfinished trace?)");
          return false;
        }
        continue;
      }
      const char c = buf_[pos_];
      if (c == ']') {
        flush();
        ++pos_;
        return true;
      }
      if (c == '{') {
        RawEvent e;
        const char* next = nullptr;
        FastEvent fast(buf_.data() + pos_, buf_.data() + len_);
        if (fast.decode(e, next) == FastEvent::ok) {
          flush();  // the events before it that took the simdjson way
          b_.add(e, line_ref(pos_));
          pos_ = static_cast<std::size_t>(next - buf_.data());
          continue;
        }
        const char* end = scan_object(buf_.data() + pos_, buf_.data() + len_);
        if (!end) {
          flush();
          const std::size_t before = len_ - pos_;
          if (!refill()) {
            if (before >= kMaxEventBytes)
              cut("an event larger than 64 MiB: the rest of the file is skipped");
            else
              cut("the file ends inside an event (" + std::to_string(b_.stats().events) +
                  " events read; a cut or unfinished trace?)");
            return false;
          }
          continue;
        }
        const auto length = static_cast<std::size_t>(end - (buf_.data() + pos_));
        batch_.push_back({pos_, length});
        pos_ += length;
        continue;
      }
      // An element that is not an object: counted and skipped.
      flush();
      const std::size_t line = line_at(pos_);
      const std::uint64_t at = json_bytes_ - (len_ - pos_);  // offset in the text, for progress
      if (!skip_value(nullptr)) {
        cut("the file ends inside traceEvents");
        return false;
      }
      // A stray '}' or ':' ends a scalar before it starts: skip that one character, or the
      // same element would be read again forever.
      if (json_bytes_ - (len_ - pos_) == at) ++pos_;
      ++b_.stats().events;
      b_.malformed(line, "an element of traceEvents that is not an object");
    }
  }

  // Parses the pending whole events as one array, or one by one past a broken one.
  void flush() {
    if (batch_.empty()) return;
    const std::size_t first = batch_.front().offset;
    const std::size_t last = batch_.back().offset + batch_.back().length;
    const std::size_t n = last - first;
    scratch_.resize(n + 2 + simdjson::SIMDJSON_PADDING);
    scratch_[0] = '[';
    std::memcpy(scratch_.data() + 1, buf_.data() + first, n);
    scratch_[n + 1] = ']';
    std::size_t i = 0;
    od::document doc;
    od::array arr;
    bool ok = !parser_.iterate(scratch_.data(), n + 2, scratch_.size()).get(doc) &&
              !doc.get_array().get(arr);
    if (ok) {
      for (auto element : arr) {
        od::object obj;
        RawEvent e;
        if (i == batch_.size() || element.get_object().get(obj) || decode_event(obj, e)) {
          ok = false;
          break;
        }
        b_.add(e, line_ref(batch_[i].offset));
        ++i;
      }
    }
    if (!ok || i < batch_.size())
      for (; i < batch_.size(); ++i) one(batch_[i]);
    batch_.clear();
  }

  void one(const Pending& p) {
    single_.resize(p.length + simdjson::SIMDJSON_PADDING);
    std::memcpy(single_.data(), buf_.data() + p.offset, p.length);
    od::document doc;
    od::object obj;
    RawEvent e;
    simdjson::error_code err = parser_.iterate(single_.data(), p.length, single_.size()).get(doc);
    if (!err) err = doc.get_object().get(obj);
    if (!err) err = decode_event(obj, e);
    if (err) {
      ++b_.stats().events;
      b_.malformed(line_at(p.offset),
                   std::string("an event that is not valid JSON (") + simdjson::error_message(err) + ")");
      return;
    }
    b_.add(e, line_ref(p.offset));
  }

  const std::string& path_;
  ByteSource& src_;
  TraceBuilder& b_;
  const std::function<void(std::uint64_t)>& progress_;
  std::vector<char, UninitAllocator<char>> buf_;
  std::size_t cap_ = 0, len_ = 0, pos_ = 0;
  std::size_t line_base_ = 0, counted_ = 0, newlines_ = 0;
  std::uint64_t json_bytes_ = 0;
  bool saw_events_ = false, truncated_ = false;
  std::vector<Pending> batch_;
  std::vector<char> scratch_, single_;
  od::parser parser_;
};

}  // namespace

namespace detail {

RankTrace read_trace_file(const std::string& path, const TraceOptions& options,
                          const std::function<void(std::uint64_t)>& progress) {
  ByteSource source(path);
  TraceBuilder builder(path, options.max_records);
  builder.stats().bytes = source.size();
  TraceScanner(path, source, builder, options.chunk_bytes, progress).run();
  return builder.finish();
}

}  // namespace detail

RankTrace read_trace(const std::string& path, const TraceOptions& options) {
  return detail::read_trace_file(path, options, nullptr);
}

}  // namespace laggard
