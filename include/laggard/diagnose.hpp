// laggard — the triage chain over a run: correctness, resources, timeline, stragglers and (with a
// baseline) the first regressed stage, each layer pass / fail / not measured with its evidence.
// docs/howto/triage.md describes the rules; `laggard diagnose` prints the chain.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "laggard/compare.hpp"
#include "laggard/export.hpp"
#include "laggard/model.hpp"
#include "laggard/summary.hpp"
#include "laggard/timeline.hpp"

namespace laggard {

// -- correctness: recorded values that are not finite, or far outside their own recent range --

struct CorrectnessOptions {
  std::size_t history = 20;      ///< recent finite values kept per (rank, value)
  std::size_t min_history = 5;   ///< values needed before a jump can be judged
  double jump_factor = 10.0;     ///< a jump: |x - median| > this x the recent spread ...
  double relative_floor = 0.05;  ///< ... the spread being at least this share of |median|
  std::size_t max_findings = 64;  ///< findings kept (in step order); more are only counted
  /// Throws std::invalid_argument naming the offending setting.
  void validate() const;
};

struct CorrectnessFinding {
  enum class Kind : std::uint8_t { non_finite = 0, jump = 1 };
  Kind kind = Kind::non_finite;
  std::int64_t step = 0;
  int rank = 0;
  std::string name;
  double value = 0.0;
  double recent_median = 0.0;  ///< jump: the median of the recent values, and their range
  double recent_low = 0.0;
  double recent_high = 0.0;
};

/// "non_finite", "jump". Thread-safe.
LAGGARD_API const char* to_string(CorrectnessFinding::Kind kind) noexcept;

/// Watches every recorded value (StepSample::values) of every rank, window by window. Memory:
/// `history` doubles per (rank, value name). `tokens`, `samples` and `work` are counts of work,
/// not results: only a non-finite one is a finding. Not thread-safe.
class LAGGARD_API CorrectnessGate {
 public:
  explicit CorrectnessGate(CorrectnessOptions options = {});
  /// Checks the window's values; returns how many findings it gave.
  std::size_t add(const Window& window);
  /// The first max_findings findings, in step order (then rank).
  const std::vector<CorrectnessFinding>& findings() const noexcept { return findings_; }
  std::size_t findings_total() const noexcept { return total_; }
  std::size_t values_seen() const noexcept { return values_seen_; }
  /// The first finding of each kind, per (rank, name): how many findings it had in all.
  std::size_t count_of(int rank, const std::string& name) const;

 private:
  struct Series {
    std::vector<double> recent;  ///< ring of the last `history` finite values
    std::size_t next = 0;
    std::size_t findings = 0;
  };
  CorrectnessOptions options_;
  std::map<std::pair<int, std::string>, Series> series_;
  std::vector<CorrectnessFinding> findings_;
  std::vector<double> scratch_;
  std::size_t total_ = 0;
  std::size_t values_seen_ = 0;
};

// -- resources: per rank, what its readings (StepSample::resources) were over the run ----------

/// One reading of one rank over the windows that had it.
struct ResourceStats {
  std::size_t windows = 0;
  std::size_t positive = 0;  ///< windows with a value > 0 (flags: windows the flag was set)
  double sum = 0.0;
  double min = 0.0;
  double max = 0.0;
  double first = 0.0;
  double last = 0.0;
  double mean() const noexcept { return windows ? sum / static_cast<double>(windows) : 0.0; }
};

/// Per rank: its cohort, host, readings and the work it did (the sample's `work`, or a value
/// named tokens or samples). Memory: ranks x reading names. Not thread-safe.
class LAGGARD_API ResourceProfile {
 public:
  struct Rank {
    int rank = 0;
    std::string host;
    std::string cohort;
    std::size_t windows = 0;
    std::map<std::string, ResourceStats> readings;
    ResourceStats work;  ///< tokens or samples per step, where recorded
  };
  void add(const Window& window);
  bool any() const noexcept { return readings_ > 0; }
  std::size_t readings() const noexcept { return readings_; }
  /// Ranks that sent samples, ascending.
  const std::vector<Rank>& ranks() const noexcept { return ranks_; }
  const Rank* find(int rank) const noexcept;

 private:
  std::vector<Rank> ranks_;        ///< ascending rank
  std::vector<std::int32_t> slot_;  ///< rank -> index into ranks_, -1 if none
  std::size_t readings_ = 0;
};

/// A cause with its numbers: "thermal_throttle" with "thermal throttle in 9 of 10 windows".
struct Reason {
  std::string code;  ///< thermal_throttle, power_throttle, hw_slowdown, clock_drop, ecc_errors,
                     ///< pcie_downgraded, host_bound, gc_pauses, data_starvation, more_work,
                     ///< memory_pressure
  std::string evidence;
};

/// The causes the readings of `rank` support against the other ranks of its cohort (the rules
/// are in docs/howto/triage.md); empty when none does. Thread-safe.
LAGGARD_API std::vector<Reason> resource_reasons(const ResourceProfile& profile, int rank);

// -- timeline from sample logs: the step's time outside the rank's own work ---------------------

/// Per rank, means per sampled step: data stages, communication stages, the part of the
/// communication it spent waiting (its time minus the cohort's fastest rank's, per window) and
/// the time outside every section. Memory: ranks. Not thread-safe.
class LAGGARD_API SampleTimeline {
 public:
  struct Rank {
    int rank = 0;
    std::string cohort;
    std::size_t windows = 0;
    double step_ms = 0.0;  ///< sums; divide by windows
    double data_ms = 0.0;
    double comm_ms = 0.0;
    double comm_wait_ms = 0.0;
    double untimed_ms = 0.0;
  };
  void add(const Window& window);
  const std::vector<Rank>& ranks() const noexcept { return ranks_; }

 private:
  struct Comm {
    std::string cohort;
    std::string name;
    std::vector<double> ms;  ///< this window's times
    double fastest = 0.0;    ///< NaN with fewer than 2
  };
  std::vector<Rank> ranks_;
  std::vector<std::int32_t> slot_;
  std::vector<Comm> comm_;
};

// -- the chain ------------------------------------------------------------------------------

struct DiagnosisFinding {
  std::string kind;   ///< "non_finite", "jump", "thermal_throttle", "data_wait", "straggler", ...
  std::string text;   ///< one line with its numbers
  int rank = -1;      ///< -1: not one rank
  std::vector<int> ranks;       ///< when several
  std::int64_t step = -1;       ///< -1: not one step
  std::string stage;            ///< stragglers, regression
  std::string value;            ///< correctness: the value's name
  std::vector<Reason> reasons;  ///< stragglers: why, when the evidence supports it
  bool explained_by_stragglers = false;  ///< timeline: a wait the stragglers layer explains
};

struct DiagnosisLayer {
  enum class Status : std::uint8_t { pass = 0, fail = 1, not_measured = 2 };
  std::string name;  ///< correctness, resources, timeline, stragglers, regression
  Status status = Status::not_measured;
  std::string summary;  ///< one line: what was checked, or why it was not
  std::vector<DiagnosisFinding> findings;
};

/// "pass", "fail", "not_measured". Thread-safe.
LAGGARD_API const char* to_string(DiagnosisLayer::Status status) noexcept;

struct Diagnosis {
  std::vector<DiagnosisLayer> layers;  ///< in the chain's order
  int first_failing = -1;              ///< index into layers, -1 when none fails
};

/// Feeds one run, window by window, to every layer's analysis (RunAnalysis, CorrectnessGate,
/// ResourceProfile, SampleTimeline), then assembles the chain. Not thread-safe.
class LAGGARD_API RunDiagnosis {
 public:
  /// Throws std::invalid_argument for invalid options. `chain` false: only the run analysis is
  /// fed (`laggard analyze`, which prints no chain, pays nothing for it).
  explicit RunDiagnosis(DetectorOptions detector = {}, CorrectnessOptions correctness = {},
                        bool chain = true);
  /// Adds one window; returns the detector's report of it (valid until the next call).
  const Report& add(const Window& window);
  /// The chain. `traces`: the timeline of profiler traces (replaces the sample logs' timeline),
  /// `comparison`: the run against a baseline (the regression layer; not measured without).
  Diagnosis finish(const TimelineSummary* traces = nullptr,
                   const Comparison* comparison = nullptr) const;
  const RunAnalysis& analysis() const noexcept { return analysis_; }
  const CorrectnessGate& correctness() const noexcept { return gate_; }
  const ResourceProfile& resources() const noexcept { return resources_; }

 private:
  RunAnalysis analysis_;
  CorrectnessGate gate_;
  ResourceProfile resources_;
  SampleTimeline timeline_;
  bool chain_ = true;
};

}  // namespace laggard
