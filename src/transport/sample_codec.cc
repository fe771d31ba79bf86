#include "transport/sample_codec.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

namespace laggard::wire {
namespace {

enum Record : std::uint8_t {
  kStage = 1,
  kString = 2,
  kLayout = 3,
  kRank = 4,
  kSample = 5,
  kCounts = 6,
};

constexpr std::uint8_t kFresh = 1;
constexpr std::uint8_t kAck = 2;
constexpr std::uint8_t kHasWork = 1;
constexpr std::uint8_t kHasValues = 2;
constexpr std::uint8_t kHasResources = 4;
// Bounds a malformed message cannot push a decoder past (allocation, loops).
constexpr std::uint64_t kMaxIndex = 1u << 20;
constexpr std::uint64_t kMaxStages = 1u << 12;
constexpr std::uint64_t kMaxText = 1u << 16;

void put_varint(std::string& out, std::uint64_t v) {
  char buf[10];
  std::size_t n = 0;
  while (v >= 0x80) {
    buf[n++] = static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  buf[n++] = static_cast<char>(v);
  out.append(buf, n);
}

void put_f32(std::string& out, double v) {
  const float f = static_cast<float>(v);
  char buf[4];
  std::memcpy(buf, &f, 4);  // the machines laggard runs on are little-endian (x86-64, aarch64)
  out.append(buf, 4);
}

void put_f64(std::string& out, double v) {
  char buf[8];
  std::memcpy(buf, &v, 8);
  out.append(buf, 8);
}

void put_text(std::string& out, std::string_view s) {
  put_varint(out, s.size());
  out.append(s);
}

// A bounds-checked reader over one message.
class Reader {
 public:
  explicit Reader(std::string_view s) : p_(s.data()), end_(s.data() + s.size()) {}
  bool done() const { return p_ == end_; }
  bool u8(std::uint8_t& v) {
    if (p_ == end_) return false;
    v = static_cast<std::uint8_t>(*p_++);
    return true;
  }
  bool varint(std::uint64_t& v) {
    v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p_ == end_) return false;
      const auto b = static_cast<std::uint8_t>(*p_++);
      v |= static_cast<std::uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return true;
    }
    return false;
  }
  bool bounded(std::uint64_t& v, std::uint64_t limit) { return varint(v) && v < limit; }
  bool f32(double& v) {
    if (end_ - p_ < 4) return false;
    float f;
    std::memcpy(&f, p_, 4);
    p_ += 4;
    v = static_cast<double>(f);
    return true;
  }
  bool f64(double& v) {
    if (end_ - p_ < 8) return false;
    std::memcpy(&v, p_, 8);
    p_ += 8;
    return true;
  }
  bool text(std::string& s) {
    std::uint64_t n = 0;
    if (!bounded(n, kMaxText) || static_cast<std::uint64_t>(end_ - p_) < n) return false;
    s.assign(p_, static_cast<std::size_t>(n));
    p_ += n;
    return true;
  }

 private:
  const char* p_;
  const char* end_;
};

template <typename Map>
const typename Map::mapped_type* lookup(const Map& known, const Map& pending,
                                        const typename Map::key_type& key) {
  if (auto it = known.find(key); it != known.end()) return &it->second;
  if (auto it = pending.find(key); it != pending.end()) return &it->second;
  return nullptr;
}

}  // namespace

void Encoder::begin(std::uint64_t seq) {
  pending_ = Known{};
  samples_ = 0;
  out_.clear();
  out_.push_back('L');
  out_.push_back('g');
  out_.push_back(static_cast<char>(kVersion));
  out_.push_back(static_cast<char>(Kind::batch));
  out_.push_back(static_cast<char>(fresh_ ? kFresh : 0));
  put_varint(out_, seq);
}

std::uint32_t Encoder::string_index(const std::string& s) {
  if (const auto* i = lookup(known_.strings, pending_.strings, s)) return *i;
  const auto index = static_cast<std::uint32_t>(known_.strings.size() + pending_.strings.size());
  pending_.strings.emplace(s, index);
  out_.push_back(static_cast<char>(kString));
  put_varint(out_, index);
  put_text(out_, s);
  return index;
}

std::uint32_t Encoder::stage_index(const StageTime& t) {
  key_.clear();
  key_.push_back(static_cast<char>(t.kind));
  key_.append(t.name);
  if (const auto* i = lookup(known_.stages, pending_.stages, key_)) return *i;
  const auto index = static_cast<std::uint32_t>(known_.stages.size() + pending_.stages.size());
  pending_.stages.emplace(key_, index);
  out_.push_back(static_cast<char>(kStage));
  put_varint(out_, index);
  out_.push_back(static_cast<char>(t.kind));
  put_text(out_, t.name);
  return index;
}

std::uint32_t Encoder::layout_index(const StepSample& s) {
  // Stage definitions first (they may append records), then the layout's key.
  std::string key;
  key.reserve(s.stages.size() * 2);
  for (const StageTime& t : s.stages) {
    const std::uint32_t i = stage_index(t);
    key.push_back(static_cast<char>(i & 0xff));
    key.push_back(static_cast<char>((i >> 8) & 0xff));
    key.push_back(static_cast<char>((i >> 16) & 0xff));
  }
  if (const auto* i = lookup(known_.layouts, pending_.layouts, key)) return *i;
  const auto index = static_cast<std::uint32_t>(known_.layouts.size() + pending_.layouts.size());
  out_.push_back(static_cast<char>(kLayout));
  put_varint(out_, index);
  put_varint(out_, s.stages.size());
  for (std::size_t k = 0; k < key.size(); k += 3) {
    const std::uint32_t i = static_cast<std::uint8_t>(key[k]) |
                            static_cast<std::uint32_t>(static_cast<std::uint8_t>(key[k + 1])) << 8 |
                            static_cast<std::uint32_t>(static_cast<std::uint8_t>(key[k + 2])) << 16;
    put_varint(out_, i);
  }
  pending_.layouts.emplace(std::move(key), index);
  return index;
}

void Encoder::define_rank(const StepSample& s) {
  const auto* known = lookup(known_.ranks, pending_.ranks, s.rank);
  // Hosts and cohorts are looked up (or defined) before the rank record that names them.
  const std::uint32_t host = string_index(s.host);
  const std::uint32_t cohort = string_index(s.cohort);
  if (known && known->world_size == s.world_size && known->host == host &&
      known->cohort == cohort)
    return;
  pending_.ranks[s.rank] = Known::Rank{s.world_size, host, cohort};
  out_.push_back(static_cast<char>(kRank));
  put_varint(out_, static_cast<std::uint64_t>(s.rank));
  put_varint(out_, static_cast<std::uint64_t>(s.world_size));
  put_varint(out_, host);
  put_varint(out_, cohort);
}

void Encoder::add(const StepSample& s) {
  define_rank(s);
  const std::uint32_t layout = layout_index(s);
  // Names of values and resources are strings of the link's table, defined before the sample.
  name_index_.clear();
  for (const NamedValue& v : s.values) name_index_.push_back(string_index(v.name));
  for (const NamedValue& v : s.resources) name_index_.push_back(string_index(v.name));
  out_.push_back(static_cast<char>(kSample));
  put_varint(out_, static_cast<std::uint64_t>(s.rank));
  put_varint(out_, static_cast<std::uint64_t>(s.step));
  put_f32(out_, s.step_ms);
  const bool work = !std::isnan(s.work);
  out_.push_back(static_cast<char>((work ? kHasWork : 0) | (s.values.empty() ? 0 : kHasValues) |
                                   (s.resources.empty() ? 0 : kHasResources)));
  if (work) put_f64(out_, s.work);
  put_varint(out_, layout);
  for (const StageTime& t : s.stages) {
    put_f32(out_, t.ms);
    put_varint(out_, t.calls);
  }
  // Values and resources bit for bit (float64): a loss of NaN must stay NaN, a byte count exact.
  std::size_t k = 0;
  for (const auto* list : {&s.values, &s.resources}) {
    if (list->empty()) continue;
    put_varint(out_, list->size());
    for (const NamedValue& v : *list) {
      put_varint(out_, name_index_[k++]);
      put_f64(out_, v.value);
    }
  }
  ++samples_;
}

void Encoder::add(const RankCounts& c) {
  out_.push_back(static_cast<char>(kCounts));
  put_varint(out_, static_cast<std::uint64_t>(c.rank));
  put_varint(out_, c.dropped);
  put_varint(out_, c.errors);
  out_.push_back(static_cast<char>(c.final ? 1 : 0));
}

void Encoder::commit() {
  for (auto& e : pending_.strings) known_.strings.insert(e);
  for (auto& e : pending_.stages) known_.stages.insert(e);
  for (auto& e : pending_.layouts) known_.layouts.insert(e);
  for (auto& e : pending_.ranks) known_.ranks[e.first] = e.second;
  pending_ = Known{};
  fresh_ = false;
}

void Encoder::rollback() { pending_ = Known{}; }

void Encoder::reset() {
  known_ = Known{};
  pending_ = Known{};
  fresh_ = true;
}

bool Decoder::header(std::string_view message, Header& out, std::string& error) {
  Reader r(message);
  std::uint8_t l = 0, g = 0, version = 0, kind = 0, flags = 0;
  if (!r.u8(l) || !r.u8(g) || l != 'L' || g != 'g') {
    error = "not a laggard side-channel message";
    return false;
  }
  if (!r.u8(version) || version != kVersion) {
    error = "wire version " + std::to_string(version) + ", expected " + std::to_string(kVersion);
    return false;
  }
  if (!r.u8(kind) || (kind != static_cast<std::uint8_t>(Kind::batch) &&
                      kind != static_cast<std::uint8_t>(Kind::ack) &&
                      kind != static_cast<std::uint8_t>(Kind::verdict))) {
    error = "unknown message kind " + std::to_string(kind);
    return false;
  }
  out.ack = 0;
  if (!r.u8(flags) || !r.varint(out.seq) || ((flags & kAck) != 0 && !r.varint(out.ack))) {
    error = "truncated header";
    return false;
  }
  out.kind = static_cast<Kind>(kind);
  out.fresh = (flags & kFresh) != 0;
  return true;
}

bool Decoder::decode(std::string_view message, std::vector<StepSample>& samples,
                     std::size_t& used, std::vector<RankCounts>& counts, std::string& error) {
  Header h;
  if (!header(message, h, error)) return false;
  if (h.kind != Kind::batch) {
    error = "not a batch";
    return false;
  }
  if (h.fresh) {
    stages_.clear();
    strings_.clear();
    layouts_.clear();
    ranks_.clear();
  }
  Reader r(message);
  {  // skip the header again
    std::uint8_t b;
    std::uint64_t v;
    for (int i = 0; i < 5; ++i) r.u8(b);
    r.varint(v);
    if ((static_cast<std::uint8_t>(message[4]) & kAck) != 0) r.varint(v);  // an ack riding along
  }
  const auto fail = [&error](const char* what) {
    error = std::string("malformed batch: ") + what;
    return false;
  };
  std::string text;
  while (!r.done()) {
    std::uint8_t type = 0;
    r.u8(type);
    switch (type) {
      case kStage: {
        std::uint64_t index = 0;
        std::uint8_t kind = 0;
        if (!r.bounded(index, kMaxIndex) || !r.u8(kind) || kind > 3 || !r.text(text))
          return fail("stage record");
        if (index >= stages_.size()) stages_.resize(index + 1);
        stages_[index].name = text;
        stages_[index].kind = static_cast<StageKind>(kind);
        break;
      }
      case kString: {
        std::uint64_t index = 0;
        if (!r.bounded(index, kMaxIndex) || !r.text(text)) return fail("string record");
        if (index >= strings_.size()) strings_.resize(index + 1);
        strings_[index] = text;
        break;
      }
      case kLayout: {
        std::uint64_t index = 0, n = 0;
        if (!r.bounded(index, kMaxIndex) || !r.bounded(n, kMaxStages))
          return fail("layout record");
        if (index >= layouts_.size()) layouts_.resize(index + 1);
        auto& layout = layouts_[index];
        layout.resize(n);
        for (auto& stage : layout) {
          std::uint64_t s = 0;
          if (!r.varint(s) || s >= stages_.size()) return fail("layout names an unknown stage");
          stage = static_cast<std::uint32_t>(s);
        }
        break;
      }
      case kRank: {
        std::uint64_t rank = 0, world = 0, host = 0, cohort = 0;
        if (!r.bounded(rank, std::numeric_limits<int>::max()) ||
            !r.bounded(world, std::numeric_limits<int>::max()) || !r.varint(host) ||
            !r.varint(cohort) || host >= strings_.size() || cohort >= strings_.size())
          return fail("rank record");
        ranks_[static_cast<int>(rank)] = Rank{static_cast<int>(world),
                                              static_cast<std::uint32_t>(host),
                                              static_cast<std::uint32_t>(cohort)};
        break;
      }
      case kSample: {
        std::uint64_t rank = 0, step = 0, layout = 0;
        std::uint8_t flags = 0;
        double step_ms = 0, work = std::numeric_limits<double>::quiet_NaN();
        if (!r.bounded(rank, std::numeric_limits<int>::max()) ||
            !r.bounded(step, static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) ||
            !r.f32(step_ms) || !r.u8(flags))
          return fail("sample record");
        if ((flags & kHasWork) && !r.f64(work)) return fail("sample record");
        if (!r.varint(layout) || layout >= layouts_.size())
          return fail("sample names an unknown layout");
        const auto who = ranks_.find(static_cast<int>(rank));
        if (who == ranks_.end()) return fail("sample of a rank never defined");
        if (used == samples.size()) samples.emplace_back();
        StepSample& s = samples[used];
        s.rank = static_cast<int>(rank);
        s.world_size = who->second.world_size;
        s.step = static_cast<std::int64_t>(step);
        if (s.host != strings_[who->second.host]) s.host = strings_[who->second.host];
        if (s.cohort != strings_[who->second.cohort]) s.cohort = strings_[who->second.cohort];
        s.step_ms = step_ms;
        s.work = work;
        const auto& names = layouts_[layout];
        s.stages.resize(names.size());
        for (std::size_t i = 0; i < names.size(); ++i) {
          StageTime& t = s.stages[i];
          const StageTime& def = stages_[names[i]];
          std::uint64_t calls = 0;
          if (!r.f32(t.ms) || !r.varint(calls) || calls > std::numeric_limits<std::uint32_t>::max())
            return fail("stage time");
          if (t.name != def.name) t.name = def.name;
          t.kind = def.kind;
          t.calls = static_cast<std::uint32_t>(calls);
        }
        for (auto [bit, list] : {std::pair{kHasValues, &s.values}, std::pair{kHasResources, &s.resources}}) {
          list->clear();
          if (!(flags & bit)) continue;
          std::uint64_t n = 0;
          if (!r.bounded(n, kMaxStages)) return fail("named values");
          list->resize(n);
          for (NamedValue& v : *list) {
            std::uint64_t name = 0;
            if (!r.varint(name) || name >= strings_.size() || !r.f64(v.value))
              return fail("named value");
            if (v.name != strings_[name]) v.name = strings_[name];
          }
        }
        ++used;
        break;
      }
      case kCounts: {
        RankCounts c;
        std::uint64_t rank = 0;
        std::uint8_t final = 0;
        if (!r.bounded(rank, std::numeric_limits<int>::max()) || !r.varint(c.dropped) ||
            !r.varint(c.errors) || !r.u8(final))
          return fail("counts record");
        c.rank = static_cast<int>(rank);
        c.final = final != 0;
        counts.push_back(c);
        break;
      }
      default:
        return fail("unknown record type");
    }
  }
  return true;
}

std::string ack_message(std::uint64_t seq) {
  std::string out;
  out.push_back('L');
  out.push_back('g');
  out.push_back(static_cast<char>(kVersion));
  out.push_back(static_cast<char>(Kind::ack));
  out.push_back(0);
  put_varint(out, seq);
  return out;
}

namespace {

constexpr std::size_t kMaxVerdictText = 256;

void put_short_text(std::string& out, const std::string& s) {
  put_text(out, std::string_view(s).substr(0, kMaxVerdictText));
}

bool finite_f32(Reader& r, double& v) { return r.f32(v) && std::isfinite(v); }

}  // namespace

void encode_verdict(const StragglerVerdict& v, const std::vector<RankScore>& scores, std::string& out,
                    std::uint64_t ack) {
  out.clear();
  out.push_back('L');
  out.push_back('g');
  out.push_back(static_cast<char>(kVersion));
  out.push_back(static_cast<char>(Kind::verdict));
  out.push_back(static_cast<char>(ack > 0 ? kAck : 0));
  put_varint(out, v.seq);
  if (ack > 0) put_varint(out, ack);
  put_varint(out, static_cast<std::uint64_t>(std::max<std::int64_t>(0, v.step)));
  put_varint(out, static_cast<std::uint64_t>(std::max(0, v.ranks_seen)));
  put_varint(out, static_cast<std::uint64_t>(std::max(0, v.world_size)));
  const auto finite = [](double x) { return std::isfinite(x) ? x : 0.0; };
  put_f32(out, finite(v.step_ms));
  put_f32(out, finite(v.whatif_step_saving_ms));
  put_short_text(out, v.likely_bottleneck);
  put_varint(out, static_cast<std::uint64_t>(std::max(0, v.num_confirmed)));
  const std::size_t n = std::min(v.confirmed.size(), StragglerVerdict::kMaxFindings);
  put_varint(out, n);
  for (std::size_t i = 0; i < n; ++i) {
    const VerdictFinding& f = v.confirmed[i];
    put_varint(out, static_cast<std::uint64_t>(std::max(0, f.rank)));
    put_short_text(out, f.host);
    put_short_text(out, f.cohort);
    put_short_text(out, f.stage);
    out.push_back(static_cast<char>(f.kind));
    for (double x : {f.ms, f.ref_ms, f.slowdown, f.cost_ms, f.cost_share}) put_f32(out, finite(x));
    put_varint(out, static_cast<std::uint64_t>(std::max(0, f.windows_flagged)));
    put_short_text(out, f.reason);
  }
  put_varint(out, scores.size());
  int previous = 0;
  for (const RankScore& s : scores) {
    put_varint(out, static_cast<std::uint64_t>(std::max(0, s.rank - previous)) * 2 +
                        (s.confirmed ? 1 : 0));
    previous = s.rank;
    const float clamped = std::isfinite(s.score) ? std::min(1.0f, std::max(0.0f, s.score)) : 1.0f;
    const auto q = static_cast<std::uint16_t>(std::lround(clamped * 65535.0f));
    out.push_back(static_cast<char>(q & 0xff));
    out.push_back(static_cast<char>(q >> 8));
  }
  // The stop step (+1, 0 = none) and each finding's onset, confirmation and windows held.
  put_varint(out, static_cast<std::uint64_t>(std::max<std::int64_t>(-1, v.stop_step) + 1));
  for (std::size_t i = 0; i < n; ++i) {
    const VerdictFinding& f = v.confirmed[i];
    put_varint(out, static_cast<std::uint64_t>(std::max<std::int64_t>(0, f.onset_step)));
    put_varint(out, static_cast<std::uint64_t>(std::max<std::int64_t>(0, f.confirmed_step)));
    put_varint(out, static_cast<std::uint64_t>(std::max(0, f.windows_held)));
  }
}

bool decode_verdict(std::string_view message, StragglerVerdict& v, std::vector<RankScore>& scores,
                    std::string& error) {
  Decoder::Header h;
  if (!Decoder::header(message, h, error)) return false;
  if (h.kind != Kind::verdict) {
    error = "not a verdict";
    return false;
  }
  Reader r(message);
  {  // skip the header
    std::uint8_t b = 0, flags = 0;
    std::uint64_t x;
    for (int i = 0; i < 4; ++i) r.u8(b);
    r.u8(flags);
    r.varint(x);
    if ((flags & kAck) != 0) r.varint(x);
  }
  const auto fail = [&error](const char* what) {
    error = std::string("malformed verdict: ") + what;
    return false;
  };
  constexpr auto kMaxInt = static_cast<std::uint64_t>(std::numeric_limits<int>::max());
  std::uint64_t step = 0, seen = 0, world = 0, num = 0, n = 0;
  v = StragglerVerdict{};
  v.seq = h.seq;
  if (!r.bounded(step, static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) ||
      !r.bounded(seen, kMaxInt) || !r.bounded(world, kMaxInt) || !finite_f32(r, v.step_ms) ||
      !finite_f32(r, v.whatif_step_saving_ms) || !r.text(v.likely_bottleneck) ||
      !r.bounded(num, kMaxInt) || !r.bounded(n, StragglerVerdict::kMaxFindings + 1) || n > num)
    return fail("summary");
  v.step = static_cast<std::int64_t>(step);
  v.ranks_seen = static_cast<int>(seen);
  v.world_size = static_cast<int>(world);
  v.num_confirmed = static_cast<int>(num);
  v.confirmed.resize(n);
  for (VerdictFinding& f : v.confirmed) {
    std::uint64_t rank = 0, flagged = 0;
    std::uint8_t kind = 0;
    if (!r.bounded(rank, kMaxInt) || !r.text(f.host) || !r.text(f.cohort) || !r.text(f.stage) ||
        !r.u8(kind) || kind > 3)
      return fail("finding");
    for (double* x : {&f.ms, &f.ref_ms, &f.slowdown, &f.cost_ms, &f.cost_share})
      if (!finite_f32(r, *x)) return fail("finding's figures");
    if (!r.bounded(flagged, kMaxInt) || !r.text(f.reason)) return fail("finding");
    f.rank = static_cast<int>(rank);
    f.kind = static_cast<StageKind>(kind);
    f.windows_flagged = static_cast<int>(flagged);
  }
  std::uint64_t m = 0;
  // Each score takes at least 3 bytes: a count beyond what is left is a lie, not an allocation.
  if (!r.varint(m) || m > message.size() / 3) return fail("score count");
  scores.resize(m);
  std::uint64_t rank = 0;
  for (RankScore& s : scores) {
    std::uint64_t delta = 0;
    std::uint8_t lo = 0, hi = 0;
    if (!r.varint(delta) || !r.u8(lo) || !r.u8(hi)) return fail("score");
    rank += delta >> 1;
    if (rank > kMaxInt || (delta >> 1) > kMaxInt) return fail("score's rank");
    s.rank = static_cast<int>(rank);
    s.confirmed = (delta & 1) != 0;
    s.score = static_cast<float>(lo | (hi << 8)) / 65535.0f;
  }
  {
    constexpr auto kMaxStep = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
    std::uint64_t stop = 0;
    if (!r.bounded(stop, kMaxStep)) return fail("stop step");
    v.stop_step = static_cast<std::int64_t>(stop) - 1;
    for (VerdictFinding& f : v.confirmed) {
      std::uint64_t onset = 0, confirmed = 0, held = 0;
      if (!r.bounded(onset, kMaxStep) || !r.bounded(confirmed, kMaxStep) || !r.bounded(held, kMaxInt))
        return fail("finding's steps");
      f.onset_step = static_cast<std::int64_t>(onset);
      f.confirmed_step = static_cast<std::int64_t>(confirmed);
      f.windows_held = static_cast<int>(held);
    }
  }
  if (!r.done()) return fail("trailing bytes");
  return true;
}

}  // namespace laggard::wire
