// The triage chain (docs/howto/triage.md): correctness, resources, timeline, stragglers, regression.
#include "laggard/diagnose.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "laggard/detail/statistics.hpp"

namespace laggard {

namespace {

// Numbers in the findings' text: up to `decimals` places, thousands grouped ("1,410").
std::string num(double v, int decimals = 1) {
  if (!std::isfinite(v)) return std::isnan(v) ? "NaN" : (v > 0 ? "Infinity" : "-Infinity");
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  std::string s(buf);
  // Trailing zeros of the fraction go ("12.50" -> "12.5", "3.0" -> "3").
  if (s.find('.') != std::string::npos) {
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
  }
  const std::size_t sign = (s[0] == '-') ? 1 : 0;
  std::size_t end = s.find('.');
  if (end == std::string::npos) end = s.size();
  for (std::size_t i = end; i > sign + 3; i -= 3) s.insert(i - 3, ",");
  return s;
}

// A value in full ("the loss was 2.3125"): shortest round-trip text.
std::string exact(double v) {
  if (!std::isfinite(v)) return num(v);
  char buf[64];
  for (int p = 1; p <= 17; ++p) {
    std::snprintf(buf, sizeof buf, "%.*g", p, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

std::string pct(double share) { return num(100.0 * share, 1) + "%"; }

bool is_work_name(const std::string& name) {
  return name == "tokens" || name == "samples" || name == "work";
}

template <typename Rank>
Rank& slot_for(std::vector<Rank>& ranks, std::vector<std::int32_t>& slot, const StepSample& s) {
  const auto r = static_cast<std::size_t>(std::max(0, s.rank));
  if (slot.size() <= r) slot.resize(r + 1, -1);
  if (slot[r] < 0) {
    // Ranks arrive in any order; keep ranks_ ascending by inserting and renumbering the slots.
    Rank fresh;
    fresh.rank = s.rank;
    const auto pos = std::lower_bound(ranks.begin(), ranks.end(), s.rank,
                                      [](const Rank& a, int b) { return a.rank < b; });
    const auto at = static_cast<std::size_t>(pos - ranks.begin());
    ranks.insert(pos, std::move(fresh));
    for (std::size_t i = at; i < ranks.size(); ++i)
      slot[static_cast<std::size_t>(ranks[i].rank)] = static_cast<std::int32_t>(i);
  }
  return ranks[static_cast<std::size_t>(slot[r])];
}

void add_stat(ResourceStats& st, double v) {
  if (st.windows == 0) {
    st.min = st.max = st.first = v;
  } else {
    st.min = std::min(st.min, v);
    st.max = std::max(st.max, v);
  }
  st.last = v;
  st.sum += v;
  ++st.windows;
  if (v > 0.0) ++st.positive;
}

}  // namespace

// -- correctness ------------------------------------------------------------------------------

void CorrectnessOptions::validate() const {
  if (history < 3) throw std::invalid_argument("correctness history must be at least 3");
  if (min_history < 2 || min_history > history)
    throw std::invalid_argument("correctness min_history must be in [2, history]");
  if (!(jump_factor > 0.0) || !std::isfinite(jump_factor))
    throw std::invalid_argument("correctness jump_factor must be a positive number");
  if (!(relative_floor >= 0.0) || !std::isfinite(relative_floor))
    throw std::invalid_argument("correctness relative_floor must be a number >= 0");
}

const char* to_string(CorrectnessFinding::Kind kind) noexcept {
  return kind == CorrectnessFinding::Kind::jump ? "jump" : "non_finite";
}

CorrectnessGate::CorrectnessGate(CorrectnessOptions options) : options_(options) {
  options_.validate();
}

std::size_t CorrectnessGate::count_of(int rank, const std::string& name) const {
  const auto it = series_.find({rank, name});
  return it == series_.end() ? 0 : it->second.findings;
}

std::size_t CorrectnessGate::add(const Window& window) {
  std::size_t found = 0;
  for (const StepSample& s : window.samples) {
    for (const NamedValue& v : s.values) {
      ++values_seen_;
      Series& series = series_[{s.rank, v.name}];
      CorrectnessFinding f;
      f.step = window.step;
      f.rank = s.rank;
      f.name = v.name;
      f.value = v.value;
      bool finding = false;
      if (!std::isfinite(v.value)) {
        f.kind = CorrectnessFinding::Kind::non_finite;
        finding = true;
      } else if (!is_work_name(v.name) && series.recent.size() >= options_.min_history) {
        scratch_.assign(series.recent.begin(), series.recent.end());
        const double med = detail::median_of(scratch_);
        for (double& x : scratch_) x = std::fabs(x - med);
        const double mad = detail::median_of(scratch_);
        const double spread = std::max({1.4826 * mad, options_.relative_floor * std::fabs(med),
                                        1e-12});
        if (std::fabs(v.value - med) > options_.jump_factor * spread) {
          f.kind = CorrectnessFinding::Kind::jump;
          f.recent_median = med;
          const auto [lo, hi] = std::minmax_element(series.recent.begin(), series.recent.end());
          f.recent_low = *lo;
          f.recent_high = *hi;
          finding = true;
        }
      }
      if (std::isfinite(v.value)) {
        // A jump joins the history too: a lasting new level stops being a finding.
        if (series.recent.size() < options_.history) {
          series.recent.push_back(v.value);
        } else {
          series.recent[series.next] = v.value;
          series.next = (series.next + 1) % options_.history;
        }
      }
      if (finding) {
        ++found;
        ++total_;
        ++series.findings;
        if (findings_.size() < options_.max_findings) findings_.push_back(std::move(f));
      }
    }
  }
  return found;
}

// -- resources --------------------------------------------------------------------------------

void ResourceProfile::add(const Window& window) {
  for (const StepSample& s : window.samples) {
    Rank& r = slot_for(ranks_, slot_, s);
    if (r.windows == 0) {
      r.host = s.host;
      r.cohort = s.cohort;
    }
    ++r.windows;
    for (const NamedValue& v : s.resources) {
      if (!std::isfinite(v.value)) continue;
      add_stat(r.readings[v.name], v.value);
      ++readings_;
    }
    double work = s.work;
    if (!std::isfinite(work))
      for (const NamedValue& v : s.values)
        if ((v.name == "tokens" || v.name == "samples") && std::isfinite(v.value)) work = v.value;
    if (std::isfinite(work)) add_stat(r.work, work);
  }
}

const ResourceProfile::Rank* ResourceProfile::find(int rank) const noexcept {
  if (rank < 0 || static_cast<std::size_t>(rank) >= slot_.size() ||
      slot_[static_cast<std::size_t>(rank)] < 0)
    return nullptr;
  return &ranks_[static_cast<std::size_t>(slot_[static_cast<std::size_t>(rank)])];
}

namespace {

// The median over the other ranks of the cohort of `pick(rank)`, for those that have it; NaN when
// none does.
template <typename Pick>
double cohort_median(const ResourceProfile& p, const ResourceProfile::Rank& me, Pick pick) {
  std::vector<double> v;
  for (const auto& r : p.ranks()) {
    if (r.rank == me.rank || r.cohort != me.cohort) continue;
    const double x = pick(r);
    if (std::isfinite(x)) v.push_back(x);
  }
  return v.empty() ? std::nan("") : detail::median_of(std::move(v));
}

const ResourceStats* reading(const ResourceProfile::Rank& r, const char* name) {
  const auto it = r.readings.find(name);
  return it == r.readings.end() || it->second.windows == 0 ? nullptr : &it->second;
}

double mean_of(const ResourceProfile::Rank& r, const char* name) {
  const ResourceStats* st = reading(r, name);
  return st ? st->mean() : std::nan("");
}

double share_of(const ResourceProfile::Rank& r, const char* name) {
  const ResourceStats* st = reading(r, name);
  return st ? static_cast<double>(st->positive) / static_cast<double>(st->windows) : std::nan("");
}

// A flag set in at least a third of the rank's windows, and in more of them than for the median
// other rank of its cohort.
void flag_reason(const ResourceProfile& p, const ResourceProfile::Rank& r, const char* name,
                 const char* code, const char* what, std::vector<Reason>& out) {
  const ResourceStats* st = reading(r, name);
  if (!st) return;
  const double share = share_of(r, name);
  const double others = cohort_median(p, r, [name](const auto& x) { return share_of(x, name); });
  if (share < 1.0 / 3.0 || (std::isfinite(others) && share <= others + 0.2)) return;
  std::string ev = std::string(what) + " in " + std::to_string(st->positive) + " of " +
                   std::to_string(st->windows) + " windows";
  if (std::isfinite(others)) ev += " (the cohort's median rank: " + pct(others) + " of windows)";
  out.push_back({code, ev});
}

}  // namespace

std::vector<Reason> resource_reasons(const ResourceProfile& p, int rank) {
  std::vector<Reason> out;
  const ResourceProfile::Rank* rp = p.find(rank);
  if (!rp) return out;
  const ResourceProfile::Rank& r = *rp;
  const auto median_mean = [&](const char* name) {
    return cohort_median(p, r, [name](const auto& x) { return mean_of(x, name); });
  };

  // GPU clocks and throttling.
  const double clock = mean_of(r, "gpu_sm_clock_mhz");
  const double clock_max = mean_of(r, "gpu_sm_clock_max_mhz");
  std::string clock_text;
  if (std::isfinite(clock)) {
    // The mean mixes the windows before a slowdown with those after it: the lowest is cited too.
    const ResourceStats* st = reading(r, "gpu_sm_clock_mhz");
    clock_text = "SM clock " + num(clock, 0) + " MHz mean" +
                 (st->min < 0.99 * clock ? ", " + num(st->min, 0) + " lowest" : std::string()) +
                 (std::isfinite(clock_max) ? ", of " + num(clock_max, 0) + " MHz" : std::string());
    const double others = median_mean("gpu_sm_clock_mhz");
    if (std::isfinite(others)) clock_text += " (the cohort's median rank: " + num(others, 0) + " MHz)";
  }
  const std::size_t before = out.size();
  flag_reason(p, r, "gpu_throttle_thermal", "thermal_throttle", "thermal throttle", out);
  flag_reason(p, r, "gpu_throttle_power", "power_throttle", "power cap or power brake", out);
  flag_reason(p, r, "gpu_throttle_hw_slowdown", "hw_slowdown", "hardware slowdown", out);
  for (std::size_t i = before; i < out.size(); ++i)
    if (!clock_text.empty()) out[i].evidence = clock_text + ", " + out[i].evidence;
  if (std::isfinite(clock) && out.size() == before) {
    const double others = median_mean("gpu_sm_clock_mhz");
    const bool below_max = std::isfinite(clock_max) && clock < 0.9 * clock_max;
    const bool below_others = std::isfinite(others) && clock < 0.9 * others;
    if (below_others || (below_max && !std::isfinite(others)))
      out.push_back({"clock_drop", clock_text});
  }

  // ECC errors during the run (volatile counts since the driver loaded: a rise, or any
  // uncorrected one).
  if (const ResourceStats* u = reading(r, "gpu_ecc_uncorrected"); u && u->max > 0)
    out.push_back({"ecc_errors", num(u->max, 0) + " uncorrected ECC errors (" +
                                     num(u->last - u->first, 0) + " during the run)"});
  else if (const ResourceStats* c = reading(r, "gpu_ecc_corrected"); c && c->last > c->first)
    out.push_back({"ecc_errors", num(c->last - c->first, 0) +
                                     " corrected ECC errors during the run (" + num(c->last, 0) +
                                     " since the driver loaded)"});

  // PCIe link below its maximum in most windows (an idle link may step down: one window is not
  // evidence).
  const auto link = [&](const char* now, const char* max, const char* what, const char* unit) {
    const ResourceStats* n = reading(r, now);
    const ResourceStats* m = reading(r, max);
    if (!n || !m) return;
    const double mean_now = n->mean(), mean_max = m->mean();
    if (mean_now < mean_max - 0.5 && n->max < m->max + 0.5)
      out.push_back({"pcie_downgraded", std::string("PCIe link ") + what + " " + num(mean_now, 1) +
                                            " of " + num(mean_max, 0) + unit + " (mean over " +
                                            std::to_string(n->windows) + " windows)"});
  };
  link("gpu_pcie_gen", "gpu_pcie_gen_max", "generation", "");
  if (out.empty() || out.back().code != "pcie_downgraded")
    link("gpu_pcie_width", "gpu_pcie_width_max", "width", " lanes");

  // GC pauses and data waits, per step: before host-bound, which they often cause (a collection
  // runs on the training thread; the more specific cause comes first).
  const auto per_step = [&](const char* name, const char* code, const char* what) {
    const double mine = mean_of(r, name);
    const double others = median_mean(name);
    if (!(mine >= 1.0) || (std::isfinite(others) && mine < 2.0 * others + 1.0)) return;
    out.push_back({code, std::string(what) + " " + num(mine, 1) + " ms per step" +
                             (std::isfinite(others) ? " (the cohort's median rank: " +
                                                          num(others, 1) + " ms)"
                                                    : std::string())});
  };
  per_step("host_gc_pause_ms", "gc_pauses", "Python garbage collection");
  per_step("host_data_wait_ms", "data_starvation", "waiting for the next batch");

  // Host-bound: the training thread at a core, or another thread at half a core or more (one
  // that holds the GIL or a core that long takes it from the training thread), more than on the
  // others; or preempted far more often than them. (A Python thread that spins beside the
  // training thread gets 84-92 % of a core on the 2-core test machine: at 85 % it was missed in
  // some runs.)
  for (const char* name : {"host_train_thread_cpu_pct", "host_top_thread_cpu_pct"}) {
    const bool train = name[5] == 't' && name[6] == 'r';
    const double mine = mean_of(r, name);
    const double others = median_mean(name);
    if (!(mine >= (train ? 85.0 : 50.0)) || (std::isfinite(others) && mine < others + 25.0))
      continue;
    out.push_back({"host_bound",
                   std::string(train ? "the training thread" : "another thread of the process") +
                       " at " + num(mine, 0) + "% of a core" +
                       (std::isfinite(others) ? " (the cohort's median rank: " + num(others, 0) + "%)"
                                              : std::string()) +
                       (train ? ": bound by the host" : ": CPU or GIL contention")});
    break;
  }
  if (out.empty() || out.back().code != "host_bound") {
    const double mine = mean_of(r, "host_ctx_involuntary_per_s");
    const double others = median_mean("host_ctx_involuntary_per_s");
    if (mine >= 100.0 && std::isfinite(others) && mine >= 3.0 * others + 50.0)
      out.push_back({"host_bound", "preempted " + num(mine, 0) +
                                       " times a second (the cohort's median rank: " +
                                       num(others, 0) + "): CPU contention on the host"});
  }

  // More work than the others.
  if (r.work.windows > 0) {
    const double mine = r.work.mean();
    const double others = cohort_median(p, r, [](const auto& x) {
      return x.work.windows ? x.work.mean() : std::nan("");
    });
    if (std::isfinite(others) && others > 0 && mine >= 1.05 * others)
      out.push_back({"more_work", num(mine, 0) + " tokens or samples per step against " +
                                      num(others, 0) + " for the cohort's median rank (" +
                                      num(mine / others, 2) + "x)"});
  }

  // Memory pressure: the allocator retried allocations during the run.
  if (const ResourceStats* a = reading(r, "cuda_alloc_retries"); a && a->last > a->first) {
    const double mine = a->last - a->first;
    const double others = cohort_median(p, r, [](const auto& x) {
      const ResourceStats* o = reading(x, "cuda_alloc_retries");
      return o ? o->last - o->first : std::nan("");
    });
    if (!std::isfinite(others) || mine > others)
      out.push_back({"memory_pressure",
                     "the CUDA allocator retried " + num(mine, 0) +
                         " allocations after freeing its cache during the run" +
                         (std::isfinite(others) ? " (the cohort's median rank: " + num(others, 0) + ")"
                                                : std::string())});
  }
  return out;
}

// -- timeline from sample logs ----------------------------------------------------------------

void SampleTimeline::add(const Window& window) {
  // Per cohort and communication stage, the fastest rank's time: the transfer itself; what the
  // others spent beyond it, they waited. A window has a handful of such stages: a linear search
  // that allocates nothing once they are known.
  for (Comm& c : comm_) c.ms.clear();
  const auto find = [this](const std::string& cohort, const std::string& name) -> Comm& {
    for (Comm& c : comm_)
      if (c.name == name && c.cohort == cohort) return c;
    comm_.push_back({cohort, name, {}, 0.0});
    return comm_.back();
  };
  for (const StepSample& s : window.samples)
    for (const StageTime& st : s.stages)
      if (st.kind == StageKind::communication && std::isfinite(st.ms))
        find(s.cohort, st.name).ms.push_back(st.ms);
  for (Comm& c : comm_)
    c.fastest = c.ms.size() >= 2 ? *std::min_element(c.ms.begin(), c.ms.end()) : std::nan("");

  for (const StepSample& s : window.samples) {
    Rank& r = slot_for(ranks_, slot_, s);
    r.cohort = s.cohort;
    if (!(std::isfinite(s.step_ms) && s.step_ms > 0.0)) continue;
    ++r.windows;
    r.step_ms += s.step_ms;
    double covered = 0.0;
    for (const StageTime& st : s.stages) {
      if (!std::isfinite(st.ms)) continue;
      covered += st.ms;
      if (st.kind == StageKind::data) r.data_ms += st.ms;
      if (st.kind == StageKind::communication) {
        r.comm_ms += st.ms;
        const double fastest = find(s.cohort, st.name).fastest;
        if (std::isfinite(fastest)) r.comm_wait_ms += st.ms - fastest;
      }
    }
    if (!s.stages.empty()) r.untimed_ms += std::max(0.0, s.step_ms - covered);
  }
}

// -- the chain --------------------------------------------------------------------------------

const char* to_string(DiagnosisLayer::Status status) noexcept {
  switch (status) {
    case DiagnosisLayer::Status::pass:
      return "pass";
    case DiagnosisLayer::Status::fail:
      return "fail";
    case DiagnosisLayer::Status::not_measured:
      return "not_measured";
  }
  return "not_measured";
}

RunDiagnosis::RunDiagnosis(DetectorOptions detector, CorrectnessOptions correctness, bool chain)
    : analysis_(detector), gate_(correctness), chain_(chain) {}

const Report& RunDiagnosis::add(const Window& window) {
  const Report& report = analysis_.add(window);
  if (!chain_) return report;
  gate_.add(window);
  resources_.add(window);
  timeline_.add(window);
  return report;
}

namespace {

using Status = DiagnosisLayer::Status;

DiagnosisLayer correctness_layer(const CorrectnessGate& gate) {
  DiagnosisLayer layer;
  layer.name = "correctness";
  if (gate.values_seen() == 0) {
    layer.summary = "no recorded values (an.record(\"loss\", ...) writes them; "
                    "laggard.torch.instrument records the loss)";
    return layer;
  }
  layer.status = gate.findings_total() ? Status::fail : Status::pass;
  // One finding per (rank, value): its first, with how many more it had.
  std::map<std::pair<int, std::string>, bool> listed;
  for (const CorrectnessFinding& f : gate.findings()) {
    if (listed[{f.rank, f.name}]) continue;
    listed[{f.rank, f.name}] = true;
    DiagnosisFinding d;
    d.kind = to_string(f.kind);
    d.rank = f.rank;
    d.step = f.step;
    d.value = f.name;
    const std::size_t n = gate.count_of(f.rank, f.name);
    if (f.kind == CorrectnessFinding::Kind::non_finite)
      d.text = "'" + f.name + "' is " + exact(f.value) + " at step " + std::to_string(f.step) +
               " on rank " + std::to_string(f.rank);
    else
      d.text = "'" + f.name + "' jumped to " + exact(f.value) + " at step " +
               std::to_string(f.step) + " on rank " + std::to_string(f.rank) +
               " (its recent values: " + exact(f.recent_low) + " to " + exact(f.recent_high) +
               ", median " + exact(f.recent_median) + ")";
    if (n > 1) d.text += "; " + std::to_string(n) + " findings of this value on this rank in all";
    layer.findings.push_back(std::move(d));
  }
  layer.summary = std::to_string(gate.values_seen()) + " recorded values checked: " +
                  (gate.findings_total()
                       ? std::to_string(gate.findings_total()) +
                             " not finite or far outside their recent range; performance "
                             "findings after the first of them may be symptoms"
                       : std::string("all finite and within their recent range"));
  return layer;
}

// Resource anomalies on any rank, whether or not it is a straggler.
DiagnosisLayer resources_layer(const ResourceProfile& p) {
  DiagnosisLayer layer;
  layer.name = "resources";
  if (!p.any()) {
    layer.summary = "no resource readings in the samples (the Python package samples GPU, "
                    "allocator and host readings: docs/howto/triage.md)";
    return layer;
  }
  layer.status = Status::pass;
  std::size_t ranks_with = 0;
  // Ranks with the same reason are reported together.
  std::map<std::string, DiagnosisFinding> by_code;
  std::vector<std::string> order;
  for (const auto& r : p.ranks()) {
    if (r.readings.empty()) continue;
    ++ranks_with;
    for (const Reason& why : resource_reasons(p, r.rank)) {
      auto [it, fresh] = by_code.try_emplace(why.code);
      DiagnosisFinding& f = it->second;
      if (fresh) {
        order.push_back(why.code);
        f.kind = why.code;
        f.rank = r.rank;
        f.text = "rank " + std::to_string(r.rank) + ": " + why.evidence;
      }
      f.ranks.push_back(r.rank);
      f.reasons.push_back(why);
    }
  }
  for (const std::string& code : order) {
    DiagnosisFinding f = std::move(by_code[code]);
    if (f.ranks.size() > 1) {
      f.rank = -1;
      f.text += " (and " + std::to_string(f.ranks.size() - 1) + " more ranks: ";
      for (std::size_t i = 1; i < f.ranks.size() && i < 9; ++i)
        f.text += (i > 1 ? ", " : "") + std::to_string(f.ranks[i]);
      f.text += f.ranks.size() > 9 ? ", ...)" : ")";
    }
    layer.findings.push_back(std::move(f));
  }
  if (!layer.findings.empty()) layer.status = Status::fail;
  layer.summary = std::to_string(p.readings()) + " readings from " + std::to_string(ranks_with) +
                  " ranks: " +
                  (layer.findings.empty() ? std::string("no rank throttled, short of clock, "
                                                        "host-bound or starved against its cohort")
                                          : std::to_string(layer.findings.size()) +
                                                " kind(s) of trouble");
  return layer;
}

std::string ranks_list(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size() && i < 16; ++i)
    s += (i ? "," : "") + std::to_string(ranks[i]);
  if (ranks.size() > 16) s += ",...";
  return s;
}

// Gaps worth a look: a share of the step of at least 10 % and 1 ms per step.
constexpr double kGapShare = 0.10;
constexpr double kGapMs = 1.0;

DiagnosisLayer timeline_from_samples(const SampleTimeline& t) {
  DiagnosisLayer layer;
  layer.name = "timeline";
  struct Gap {
    const char* kind;
    std::vector<int> ranks;
    double ms = 0.0, share = 0.0;
  };
  Gap data{"data_wait", {}, 0, 0}, untimed{"untimed", {}, 0, 0}, wait{"comm_wait", {}, 0, 0};
  std::size_t ranks = 0;
  for (const auto& r : t.ranks()) {
    if (r.windows == 0) continue;
    ++ranks;
    const double n = static_cast<double>(r.windows);
    const double step = r.step_ms / n;
    const auto check = [&](Gap& g, double total) {
      const double ms = total / n;
      if (ms >= kGapMs && ms >= kGapShare * step) {
        g.ranks.push_back(r.rank);
        g.ms += ms;
        g.share += ms / step;
      }
    };
    check(data, r.data_ms);
    check(untimed, r.untimed_ms);
    check(wait, r.comm_wait_ms);
  }
  if (ranks == 0) {
    layer.summary = "no step times in the samples";
    return layer;
  }
  layer.status = Status::pass;
  const auto add = [&](Gap& g, const std::string& what, bool explained) {
    if (g.ranks.empty()) return;
    const double k = static_cast<double>(g.ranks.size());
    DiagnosisFinding f;
    f.kind = g.kind;
    f.ranks = g.ranks;
    if (g.ranks.size() == 1) f.rank = g.ranks[0];
    f.explained_by_stragglers = explained;
    f.text = (g.ranks.size() == ranks && ranks > 1 ? "every rank (" + ranks_list(g.ranks) + ")"
                                                    : ranks_list(g.ranks)) +
             ": " + what + " " + num(g.ms / k, 1) + " ms per step (" + pct(g.share / k) +
             " of the step)";
    layer.findings.push_back(std::move(f));
    if (!explained) layer.status = Status::fail;
  };
  add(data, "waiting for data", false);
  add(untimed, "outside every section", false);
  add(wait, "waiting in communication beyond the cohort's fastest rank", true);
  layer.summary = "step time of " + std::to_string(ranks) +
                  " ranks split into data, communication and untimed time";
  return layer;
}

DiagnosisLayer timeline_from_traces(const TimelineSummary& sum) {
  DiagnosisLayer layer;
  layer.name = "timeline";
  if (sum.ranks.empty()) {
    layer.summary = "no device activity in the traces (CPU-only profiles): no timeline";
    return layer;
  }
  layer.status = Status::pass;
  for (const TimelineFinding& tf : sum.findings) {
    DiagnosisFinding f;
    f.kind = to_string(tf.kind);
    f.ranks = tf.ranks;
    if (tf.ranks.size() == 1) f.rank = tf.ranks[0];
    const std::string who =
        tf.every_rank ? "every rank (" + ranks_list(tf.ranks) + ")" : ranks_list(tf.ranks);
    switch (tf.kind) {
      case TimelineFinding::Kind::late_arrival:
        f.explained_by_stragglers = true;
        f.text = who + " reached " + std::to_string(tf.last) + " of " + std::to_string(tf.of) +
                 " collectives last: the others waited " + num(tf.others_wait_ms, 1) +
                 " ms per step inside NCCL kernels";
        break;
      case TimelineFinding::Kind::data_wait:
        f.text = who + ": device waiting for data " + num(tf.ms_per_step, 1) + " ms per step (" +
                 pct(tf.share) + " of the device's time)";
        break;
      case TimelineFinding::Kind::comm_idle:
        // The device idle while the host was in a collective. Ranks that wait there while
        // others do not wait for those others (the stragglers layer names them); when every
        // rank waits, the communication itself is slow or exposed. Never input loading.
        f.explained_by_stragglers = tf.ranks.size() < sum.ranks.size();
        f.text = who + ": device idle " + num(tf.ms_per_step, 1) + " ms per step (" +
                 pct(tf.share) + ") while the host was in a collective: " +
                 (f.explained_by_stragglers
                      ? std::string("waiting for ranks that reach it later")
                      : std::string("slow or exposed communication")) +
                 ", not input loading";
        break;
      case TimelineFinding::Kind::launch_bound:
        f.text = who + ": launch-bound " + num(tf.ms_per_step, 1) + " ms per step (" +
                 pct(tf.share) + "): the host too slow to feed the device";
        break;
      case TimelineFinding::Kind::other_idle:
        f.text = who + ": device idle " + num(tf.ms_per_step, 1) + " ms per step (" +
                 pct(tf.share) + ") for no reason the trace shows";
        break;
    }
    if (!f.explained_by_stragglers) layer.status = Status::fail;
    layer.findings.push_back(std::move(f));
  }
  layer.summary = "device time of " + std::to_string(sum.ranks.size()) +
                  " ranks from their profiler traces (" +
                  std::to_string(sum.collectives_matched) + " collectives matched across ranks)";
  return layer;
}

DiagnosisLayer stragglers_layer(const RunSummary& sum, const ResourceProfile& p) {
  DiagnosisLayer layer;
  layer.name = "stragglers";
  if (sum.windows == 0) {
    layer.summary = "no sampled steps";
    return layer;
  }
  layer.status = Status::pass;
  for (const StragglerSummary& s : sum.stragglers) {
    DiagnosisFinding f;
    f.kind = "straggler";
    f.rank = s.rank;
    f.stage = s.stage;
    f.step = s.onset_step ? *s.onset_step : s.confirmed_step;
    f.reasons = resource_reasons(p, s.rank);
    if (s.kind == StageKind::data &&
        std::none_of(f.reasons.begin(), f.reasons.end(),
                     [](const Reason& r) { return r.code == "data_starvation"; }))
      f.reasons.push_back({"data_starvation", "its slow stage is a data stage ('" + s.stage +
                                                  "', " + num(s.typical_slowdown, 2) +
                                                  "x the cohort's reference)"});
    f.text = "rank " + std::to_string(s.rank) + (s.host.empty() ? "" : " (" + s.host + ")") +
             " slow in " + s.stage + ": " + num(s.typical_slowdown, 2) + "x typical, confirmed at step " +
             std::to_string(s.confirmed_step) +
             (s.onset_step ? ", since step " + std::to_string(*s.onset_step) : std::string()) +
             "; reason: ";
    if (f.reasons.empty()) {
      f.text += p.find(s.rank) && !p.find(s.rank)->readings.empty()
                    ? "unknown (its resource readings do not differ from its cohort's)"
                    : "unknown (no resource readings)";
    } else {
      for (std::size_t i = 0; i < f.reasons.size(); ++i)
        f.text += (i ? "; " : "") + f.reasons[i].code + " (" + f.reasons[i].evidence + ")";
    }
    layer.findings.push_back(std::move(f));
  }
  for (const HostSummary& h : sum.slow_hosts) {
    DiagnosisFinding f;
    f.kind = "slow_host";
    f.ranks = h.ranks;
    f.stage = h.stage;
    f.text = "host " + h.host + " (" + ranks_list(h.ranks) + ") slow in " + h.stage + ": " +
             num(h.typical_slowdown, 2) + "x typical in " + std::to_string(h.windows) + " windows";
    layer.findings.push_back(std::move(f));
  }
  if (!layer.findings.empty()) layer.status = Status::fail;
  layer.summary = std::to_string(sum.ranks) + " ranks over " + std::to_string(sum.windows) +
                  " sampled steps: " +
                  (sum.stragglers.empty() ? std::string("no confirmed straggler")
                                          : std::to_string(sum.stragglers.size()) +
                                                " confirmed (rank, stage) pair(s)") +
                  (sum.waiting.empty() ? std::string()
                                       : "; " + std::to_string(sum.waiting.size()) +
                                             " (rank, stage) pair(s) only waited (not blamed)");
  return layer;
}

DiagnosisLayer regression_layer(const Comparison* c) {
  DiagnosisLayer layer;
  layer.name = "regression";
  if (!c) {
    layer.summary = "no baseline (--baseline RUN_DIR compares against one)";
    return layer;
  }
  const StageComparison& st = c->step_time;
  if (st.verdict == Verdict::unknown && c->origin < 0) {
    layer.summary = "step time against the baseline: UNKNOWN (" + st.reason + ")";
    return layer;
  }
  layer.status = Status::pass;
  if (c->origin >= 0) {
    const StageComparison& o = c->stages[static_cast<std::size_t>(c->origin)];
    DiagnosisFinding f;
    f.kind = "first_regression";
    f.stage = o.stage;
    f.text = "first regressed stage: " + o.stage + (o.cohort.empty() ? "" : " [" + o.cohort + "]") +
             ", " + num(o.baseline_ms, 2) + " -> " + num(o.current_ms, 2) + " ms (" +
             num(o.ratio, 3) + "x" +
             (std::isfinite(o.ci_low) ? ", 95% CI " + num(o.ci_low, 3) + "-" + num(o.ci_high, 3)
                                      : std::string()) +
             ")" + (c->victims.empty() ? std::string()
                                       : "; " + std::to_string(c->victims.size()) +
                                             " later stage(s) regressed after it");
    layer.findings.push_back(std::move(f));
    layer.status = Status::fail;
  }
  if (st.verdict == Verdict::regressed) {
    DiagnosisFinding f;
    f.kind = "step_time";
    f.text = "step time " + num(st.baseline_ms, 2) + " -> " + num(st.current_ms, 2) + " ms (" +
             num(st.ratio, 3) + "x)";
    layer.findings.push_back(std::move(f));
    layer.status = Status::fail;
  }
  if (c->rank_origin >= 0) {
    const RankComparison& r = c->ranks[static_cast<std::size_t>(c->rank_origin)];
    DiagnosisFinding f;
    f.kind = "rank_regression";
    f.rank = r.rank;
    f.stage = r.stage;
    f.text = "rank " + std::to_string(r.rank) + "'s own " + r.stage + " regressed: " +
             num(r.baseline_ms, 2) + " -> " + num(r.current_ms, 2) + " ms (" + num(r.ratio, 3) +
             "x)";
    layer.findings.push_back(std::move(f));
    layer.status = Status::fail;
  }
  if (!c->hint.empty()) {
    DiagnosisFinding f;
    f.kind = "hint";
    f.text = c->hint;
    layer.findings.push_back(std::move(f));
  }
  layer.summary = "against the baseline: step time " + std::string(to_string(st.verdict)) +
                  " (" + num(st.ratio, 3) + "x), " + std::to_string(c->stages_tested) +
                  " stages tested";
  return layer;
}

}  // namespace

Diagnosis RunDiagnosis::finish(const TimelineSummary* traces, const Comparison* comparison) const {
  Diagnosis d;
  d.layers.push_back(correctness_layer(gate_));
  d.layers.push_back(resources_layer(resources_));
  // Traces without device activity (CPU-only profiles) have no device timeline: their host-side
  // stages, as for sample logs.
  d.layers.push_back(traces && !traces->ranks.empty() ? timeline_from_traces(*traces)
                                                      : timeline_from_samples(timeline_));
  d.layers.push_back(stragglers_layer(analysis_.summary(), resources_));
  d.layers.push_back(regression_layer(comparison));
  for (std::size_t i = 0; i < d.layers.size(); ++i)
    if (d.layers[i].status == Status::fail) {
      d.first_failing = static_cast<int>(i);
      break;
    }
  return d;
}

}  // namespace laggard
