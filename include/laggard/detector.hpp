// laggard — straggler analysis over sampled windows (the RFC rule and what goes beyond it).
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "laggard/columnar_window.hpp"
#include "laggard/export.hpp"
#include "laggard/model.hpp"

namespace laggard {

/// How the per-stage reference over ranks is formed.
///  - mean:   the RFC default.
///  - median: the RFC alternative; unaffected by a minority of slow ranks.
///  - robust: median reference, and a flag also needs (t - median) >= mad_z * 1.4826 * MAD,
///            so noisy stages do not raise flags and several stragglers do not hide each other.
enum class Reference : std::uint8_t { mean = 0, median = 1, robust = 2 };

LAGGARD_API const char* to_string(Reference ref) noexcept;
/// "mean", "median" or "robust"; throws std::invalid_argument naming the bad value.
LAGGARD_API Reference parse_reference(std::string_view text);

/// How a (rank, stage) becomes a confirmed straggler.
///  - sequential: the default (docs/detection.md). Per (cohort, stage, rank), one-sided CUSUMs of
///    the log-likelihood ratio "slow by s" against "within healthy_spread of the cohort's median",
///    on the log of the rank's time over the median, for s = relative_threshold and those of
///    1.25, 1.5 and 2 above it; each window's evidence is capped at ln(1 / pause_rate), so a
///    transient pause counts as one unusual window at most; one CUSUM against the rank's own
///    baseline; and one of what the rank costs the step: "its excess is 2 x min_cost_share of
///    the step" against "within healthy_spread, or under min_cost_share of the step", so that a
///    costly fault is found whatever its stage's size. Test i confirms when it reaches
///    ln(pairs watched x budget_windows / false_alarm_budget) - ln(w_i), w_i its share of the
///    budget (the shares sum to 1; docs/detection.md, step 4), and the rank stays named until
///    every CUSUM falls back to zero.
///  - threshold: the RFC's rule: flagged in a window when t >= ref x relative_threshold or
///    t - ref >= absolute_ms_threshold, confirmed when flagged in confirm_k of the last confirm_n.
enum class Method : std::uint8_t { threshold = 0, sequential = 1 };

LAGGARD_API const char* to_string(Method method) noexcept;
/// "threshold" or "sequential"; throws std::invalid_argument naming the bad value.
LAGGARD_API Method parse_method(std::string_view text);

/// Detector settings. The defaults are the detector the benchmark measured best
/// (docs/detection.md): sequential, robust reference, 1.1x, no absolute rule. `rfc()` is the
/// RFC's rule exactly (threshold, mean, 1.2x, 5 ms, persistence 2 of 3).
struct LAGGARD_API DetectorOptions {
  Method method = Method::sequential;
  /// The reference a window's flags (StageFigures::flagged_ranks, num_stragglers) compare with.
  /// The sequential evidence always uses the cohort's median.
  Reference ref = Reference::robust;
  double relative_threshold = 1.1;  ///< slow if t >= ref * relative_threshold
  /// ... or t - ref >= absolute_ms_threshold (infinity = off). In the sequential method an excess
  /// below it (when finite) gives no evidence.
  double absolute_ms_threshold = std::numeric_limits<double>::infinity();
  double mad_z = 3.5;  ///< robust reference: a flag also needs t - median >= mad_z x sigma
  int confirm_k = 2;   ///< threshold method: confirmed when slow in k ...
  int confirm_n = 3;   ///< ... of the last n windows the rank took part in
  /// A rank this much above the reference is still healthy. Sequential method: the null
  /// hypothesis of its tests. Both methods: the materiality gate (below).
  double healthy_spread = 1.03;
  /// Materiality, both methods: a finding that is statistically confirmed (the sequential
  /// evidence, or k of n) is confirmed only while, over the windows of its current run of
  /// statistical confirmation, its median slowdown is above healthy_spread and its median
  /// cost_share (its excess as a share of the step) is at least this. 0.005: half a percent.
  double min_cost_share = 0.005;
  // Sequential method only:
  double pause_rate = 0.01;          ///< share of a pair's windows hit by a transient pause
  double false_alarm_budget = 0.01;  ///< chance of any false confirmation ...
  double budget_windows = 500;       ///< ... in a run of this many sampled windows

  /// Throws std::invalid_argument naming the offending setting.
  void validate() const;

  /// The RFC's settings: threshold, mean, 1.2, 5.0 ms, persistence 2 of 3.
  static DetectorOptions rfc();
  /// The defaults (kept under this name for the presets of earlier releases).
  static DetectorOptions recommended(int world_size);
  /// "default", "recommended" (the same) or "rfc"; throws std::invalid_argument for anything
  /// else.
  static DetectorOptions preset(std::string_view name, int world_size);
};

/// One line for reports: "sequential: slow = 1.10x the cohort's median ..." or the RFC rule's
/// "threshold: ref mean, slow if t >= ref x 1.20 or t - ref >= 5.0 ms; confirmed when ...".
LAGGARD_API std::string describe_rule(const DetectorOptions& options);

/// The evidence a confirmation needs under `options` with `pairs` (rank, stage) pairs watched:
/// ln(pairs x budget_windows / false_alarm_budget), at least ln(1 / false_alarm_budget).
LAGGARD_API double evidence_threshold(const DetectorOptions& options, double pairs);

/// The name of the stage laggard adds to every sample with a step time: the part of step_ms that
/// no section covers (kind other), compared across ranks like the others.
inline constexpr std::string_view kUntimedStage = "untimed";

/// Per stage and cohort, the RFC figures for one window.
struct StageFigures {
  std::string cohort;
  std::string stage;
  StageKind kind = StageKind::compute;
  int ranks = 0;              ///< ranks of the cohort that reported this stage
  double ref_ms = 0.0;        ///< the reference the rule compared against
  double mean_ms = 0.0;
  double median_ms = 0.0;
  double min_ms = 0.0;
  double max_ms = 0.0;
  /// The cohort's step time in this window: the median over its ranks of step_ms (of the sum of
  /// their stage times for a rank without one). The denominator of every finding's cost_share.
  double step_ms = 0.0;
  double slowdown_ratio = 1.0;  ///< max / ref (1 when ref is 0)
  double relative_score = 1.0;  ///< ref / t of the worst rank, in (0, 1]; 1 when t <= ref
  int top_rank = -1;            ///< rank with the largest time
  int num_stragglers = 0;       ///< ranks flagged by the rule in this stage
  std::vector<int> flagged_ranks;  ///< ascending
  /// Every rank that reported the stage and its time, in sample order: rank_ids[i] took
  /// rank_ms[i]. Report::metrics reads the local rank's time here; Detector::observe tracks
  /// persistence for each of these ranks.
  std::vector<int> rank_ids;
  std::vector<double> rank_ms;
};

/// A rank named in one window (or confirmed over several).
struct RankFinding {
  enum class Role : std::uint8_t { straggler = 0, waiting = 1 };
  int rank = 0;
  std::string host;
  std::string cohort;
  std::string stage;
  StageKind kind = StageKind::compute;
  Role role = Role::straggler;
  double ms = 0.0;
  double ref_ms = 0.0;
  double slowdown = 1.0;  ///< ms / ref_ms
  /// What the finding costs the step: its excess over the reference, max(0, ms - ref_ms). In a
  /// synchronous job every other rank waits for it at the next collective, so the whole job's
  /// step is that much longer (docs/detection.md, "Materiality").
  double cost_ms = 0.0;
  /// cost_ms as a share of the step time (StageFigures::step_ms of its cohort in this window),
  /// in [0, 1]; 0 when the step time is unknown.
  double cost_share = 0.0;
  // Filled by Detector::observe:
  int windows_flagged = 0;  ///< windows this (rank, stage) was flagged in, since first seen
  /// A verdict now: real statistically (threshold: slow in k of the last n; sequential:
  /// evidence >= threshold) and materially (DetectorOptions::min_cost_share, healthy_spread).
  bool confirmed = false;
  /// sequential: the largest CUSUM (log-likelihood ratio) now, plus ln(w_i / w_min) for its
  /// test's share of the budget over the smallest share, so that one threshold per stage holds
  double evidence = 0.0;
};

/// Every rank of one host slow in the same stage: the host, not one GPU, is named.
struct HostFinding {
  std::string host;
  std::string cohort;
  std::string stage;
  std::vector<int> ranks;
  double slowdown = 1.0;  ///< median slowdown of its ranks
  double cost_ms = 0.0;     ///< median of its ranks' RankFinding::cost_ms
  double cost_share = 0.0;  ///< that over the cohort's step time (StageFigures::step_ms)
};

/// A metric value: a number, or text (straggler/likely_bottleneck, straggler/hints).
using MetricValue = std::variant<double, std::string>;
/// Metrics by their exact `straggler/...` names.
using Metrics = std::map<std::string, MetricValue>;

/// What the analysis found in one window.
struct LAGGARD_API Report {
  std::int64_t step = 0;
  int ranks_seen = 0;
  int world_size = 0;
  std::vector<StageFigures> stages;   ///< per cohort, stages in pipeline order
  std::vector<RankFinding> stragglers;  ///< slow in their own work (compute, data, other)
  std::vector<RankFinding> waiting;     ///< excess only in communication: evidence, no verdict
  std::vector<HostFinding> slow_hosts;
  std::string likely_bottleneck;  ///< stage with the largest max - ref; empty if none
  double whatif_step_saving_ms = 0.0;
  std::vector<std::string> hints;  ///< "measured: ...; inferred: ..."

  /// Flattens to the RFC metric names (DESIGN.md). `local_rank` picks `straggler/{stage}/local_ms`.
  /// A stage present in several cohorts reports the cohort with the largest max - ref.
  Metrics metrics(int local_rank) const;
};

/// The RFC rule for one window, stateless. Samples of a window are grouped by cohort; stages are
/// matched by name. Cost: O(ranks × stages) expected (the medians are selections, not sorts);
/// 16,384 ranks × 16 stages take a few milliseconds on one core. Thread-safe.
LAGGARD_API Report evaluate_window(const Window& window, const DetectorOptions& options);

/// The same, written into `out`, whose storage (per-rank times of every stage, findings) is
/// reused: at thousands of ranks a window's report holds megabytes, and allocating them afresh
/// for every window costs more than the rule itself (docs/performance.md). Each thread also
/// keeps a scratch of about ranks × stages × 12 bytes between calls. If it throws, `out` is
/// valid but unspecified.
LAGGARD_API void evaluate_window(const Window& window, const DetectorOptions& options,
                                 Report& out);
/// The same over a window already in columns: what the Window forms do after turning the window
/// into columns (ColumnarWindow::assign), the same report.
LAGGARD_API void evaluate_window(const ColumnarWindow& window, const DetectorOptions& options,
                                 Report& out);

/// The analysis over a run: evaluates each window and tracks persistence per (cohort, stage,
/// rank), so a finding is `confirmed` once slow in k of the last n windows. Not thread-safe.
class LAGGARD_API Detector {
 public:
  /// Throws std::invalid_argument if `options` are invalid.
  explicit Detector(DetectorOptions options = {});

  /// Evaluates `window`, updates persistence, and returns the report with windows_flagged /
  /// confirmed filled in.
  Report observe(const Window& window);
  /// The same, written into `out` and reusing its storage (see evaluate_window): the form to
  /// call once per window in a loop.
  void observe(const Window& window, Report& out);
  /// The same over a window already in columns (the same report and state as the Window form):
  /// at thousands of ranks turning a Window into columns is a third of the cost, which a
  /// producer that appends each sample as it arrives (ColumnarWindow::add) does not pay.
  void observe(const ColumnarWindow& window, Report& out);

  /// Findings confirmed at any point so far, the latest figures of each (rank, stage). The
  /// figures start with the windows of the run of statistical confirmation in which it became
  /// material, and then take every window it is statistically confirmed in (threshold method:
  /// every window it is flagged in).
  struct Confirmed {
    RankFinding finding;
    std::int64_t first_confirmed_step = 0;
    std::int64_t first_flagged_step = 0;
    int windows_seen = 0;
    std::vector<double> slowdowns;  ///< one per flagged window (for the typical slowdown)
    std::vector<double> costs_ms;     ///< the finding's cost_ms in the same windows
    std::vector<double> cost_shares;  ///< its cost_share in the same windows
  };
  const std::vector<Confirmed>& confirmed() const noexcept { return confirmed_; }
  std::int64_t windows() const noexcept { return windows_; }
  /// Sequential method, for diagnostics and tests: what the next window's evidence of one
  /// (cohort, stage, rank) starts from. Nothing where that (cohort, stage) or rank was not seen.
  struct SequentialState {
    double sigma = 0.0;     ///< the noise of the stage's log-ratios (step 1 of the method)
    double baseline = 0.0;  ///< the rank's own baseline: its usual log-ratio to the median
    double own_evidence = 0.0;  ///< the CUSUM of the own-baseline test
    int windows = 0;        ///< windows the rank took part in
  };
  std::optional<SequentialState> sequential_state(const std::string& cohort,
                                                  const std::string& stage, int rank) const;
  const DetectorOptions& options() const noexcept { return options_; }

 private:
  struct History {
    std::uint32_t bits = 0;  ///< last confirm_n windows, newest in bit 0
    int seen = 0;
    int flagged = 0;
    int confirmed_index = -1;  ///< into confirmed_, once confirmed as a straggler
    std::int64_t first_flagged_step = -1;
    std::int64_t synced = 0;  ///< bits and seen account for the track's windows before this
    bool in_set = false;      ///< in Track::ranks: took part in every window since `synced`
    int episode = -1;         ///< into episodes_, while statistically confirmed
  };
  /// Persistence of one (cohort, stage). A window in which the same ranks take part as in the
  /// one before costs nothing per rank: those windows stay pending in `windows - synced` and
  /// are settled when a rank is flagged, confirmed, or leaves the set.
  struct Track {
    std::vector<History> history;  ///< indexed by rank
    std::vector<int> ranks;        ///< the ranks of the latest window, as in StageFigures
    std::int64_t windows = 0;      ///< windows this (cohort, stage) took part in
  };
  struct ConfirmedAt {
    std::string key;  ///< into tracks_
    int rank;
  };
  /// Sequential method: what is touched rarely about one (cohort, stage, rank).
  struct SeqState {
    int confirmed_index = -1;
    int flagged = 0;
    std::int64_t rise_step = -1;  ///< the window where the evidence last rose from 0
    std::int64_t first_flagged_step = -1;
    int episode = -1;  ///< into episodes_, while named
    int mix_hits = 0;  ///< of SeqTrack::mix_hits, this rank's (left out of its own null)
  };
  /// The materiality gate's sample of one (cohort, stage, rank): the windows of its current run
  /// of statistical confirmation (few pairs have one; it ends when that run does).
  struct Episode {
    std::vector<double> slowdowns;  ///< RankFinding::slowdown
    std::vector<double> ratios;     ///< the same for the gate: +inf where the reference is 0
    std::vector<double> costs_ms;
    std::vector<double> shares;
    std::string key;  ///< its (cohort, stage) track
    int rank = -1;    ///< -1: a free entry
    std::int64_t window = 0;  ///< the last window (windows_) it took
  };
  /// Adds the finding's figures of this window to its episode (`index` into episodes_, -1 for a
  /// new one) and returns whether the episode is material.
  bool extend_episode(int& index, const std::string& key, const RankFinding& f);
  /// Ends the episodes of pairs no longer statistically confirmed (once per window).
  void end_lapsed_episodes();
  /// A new Confirmed for `f`, first confirmed in this window, its figures its episode's.
  Confirmed& publish(const RankFinding& f, int episode, std::int64_t step,
                     std::int64_t first_flagged_step, const std::string& key);
  /// Sequential method: one (cohort, stage). What every window touches is kept in arrays of
  /// slots, one slot per rank, in the order of the window's ranks (about 40 bytes a slot): a
  /// window with the same ranks as the one before is one pass over contiguous arrays, which the
  /// compiler vectorizes. A rank that leaves keeps its slot, parked after the window's ranks.
  static constexpr int kShifts = 4;
  struct SeqTrack {
    /// One CUSUM per slowdown the test looks for (relative_threshold, and 1.25x, 1.5x, 2x
    /// above it), each >= 0: cusum[k][slot].
    std::vector<float> cusum[kShifts];
    std::vector<float> level;     ///< EWMA of the rank's log-ratio (for the noise estimate only)
    std::vector<float> last;      ///< the rank's log-ratio in its previous window
    /// The rank's own baseline: its usual log-ratio (persistent offset to the median), learnt
    /// while `own` is at 0; and the CUSUM of "slower than its baseline by relative_threshold"
    /// against "no change".
    std::vector<float> base;
    std::vector<float> own;
    /// The CUSUM of the cost test: "slower by what costs the step 2 x min_cost_share" against
    /// "within healthy_spread, or costing under min_cost_share of the step" (detector_sequential.cc).
    std::vector<float> cost;
    /// The CUSUM of the intermittent test: "slow in a share of the windows" (a mixture) against
    /// the cost test's null (detector_sequential.cc).
    std::vector<float> mix;
    /// The cohort's step time (StageFigures::step_ms) in its latest windows, a ring: the cost
    /// test measures against their median, which one window's pause somewhere in the job does
    /// not move.
    std::vector<double> steps;
    std::size_t step_next = 0;
    std::vector<int> seen;          ///< windows the rank took part in
    std::vector<std::int32_t> named_bit;  ///< 1 while the rank is named (32 bits: seq_pass's lanes)
    std::vector<SeqState> cold;
    /// What the latest window added to the CUSUMs of the tests with larger shares of the budget
    /// (the relative_threshold test, the own-baseline one, the cost test, the intermittent one)
    /// for one threshold to hold: a slot's evidence is the largest CUSUM with its bonus
    /// (detector_sequential.cc).
    float bonus_first = 0.0f, bonus_own = 0.0f, bonus_cost = 0.0f, bonus_mix = 0.0f;
    std::vector<int> slot_rank;     ///< the rank of each slot
    std::vector<int> slot_of_rank;  ///< indexed by rank: its slot, or -1
    double log_scale = 0.0;  ///< EWMA of ln(noise sigma of the log-ratio)
    /// Windows since the slots last changed, up to 20: from the own-baseline warm-up on every
    /// slot of the window has a baseline past its first windows; from 20 on (1 / the baseline's
    /// alpha) its baseline's weight is alpha (detector_sequential.cc).
    int settled_windows = 0;
    /// Whether seq_pass starts the next window in its one-pass loop (many slots' evidence open
    /// in the last block of this one).
    bool full_pass = false;
    int scale_windows = 0;
    /// Pauses seen (>= 1.5x the median straight after a window under relative_threshold), out
    /// of the rank-windows that could show one: the evidence cap is ln(1 / the rate), when that
    /// rate is above pause_rate.
    double pauses = 0.0, pause_chances = 0.0;
    /// Windows in the intermittent test's fault band (over its midpoint, under its pause cut) and
    /// pause-sized ones (at or over the cut) of ranks whose intermittent evidence was 0, out of
    /// such rank-windows: the null's shares of each.
    double mix_hits = 0.0, mix_bigs = 0.0, mix_chances = 0.0;
    /// Slots [0, ranks.size()) become `ranks`, in order; other ranks' slots are parked after
    /// them. Costs nothing when the ranks are those of the previous window.
    void arrange(const std::vector<int>& ranks);
    /// The noise of the log-ratios as estimated up to the previous window (the prior before
    /// the first estimate).
    double sigma() const;
    /// The slot of `rank`, or -1.
    int slot(int rank) const {
      return rank >= 0 && static_cast<std::size_t>(rank) < slot_of_rank.size()
                 ? slot_of_rank[static_cast<std::size_t>(rank)]
                 : -1;
    }
  };
  void observe_columns(const ColumnarWindow& window, Report& report, bool take_times);
  void observe_threshold(const ColumnarWindow& window, Report& report);
  void observe_sequential(const ColumnarWindow& window, Report& report);
  static void catch_up(const Track& track, History& h);
  /// Ranks at or above this are not tracked (histories are indexed by rank).
  static constexpr int kMaxTrackedRank = 1 << 22;
  DetectorOptions options_;
  /// key: cohort \x1f stage.
  std::unordered_map<std::string, Track> tracks_;
  std::vector<Confirmed> confirmed_;
  std::vector<ConfirmedAt> confirmed_at_;  ///< parallel to confirmed_
  std::int64_t windows_ = 0;
  std::unordered_map<std::string, SeqTrack> seq_tracks_;  ///< key: cohort \x1f stage
  double pairs_ = 0.0;  ///< most (rank, stage) pairs watched in one window so far
  std::vector<Episode> episodes_;
  std::vector<int> free_episodes_;  ///< entries of episodes_ to reuse
  std::vector<double> gate_scratch_;
  // Scratch of observe_sequential, kept between windows.
  std::vector<float> seq_x_;  ///< the window's log-ratios, each stage's where seq_x_at_ says
  std::vector<std::size_t> seq_x_at_;  ///< per stage: 1 + its offset in seq_x_, 0: not yet
  std::vector<double> seq_scratch_;
  std::vector<std::pair<int, int>> seq_ratio_counts_;  ///< per stage: ranks late, fast
  std::vector<std::int32_t> seq_attention_;  ///< per position: what seq_pass marked (detector.cc)
  std::vector<std::pair<int, double>> seq_late_;  ///< (rank, its largest excess in ms)
  std::vector<double> seq_wait_;  ///< per stage: the wait it holds in ms (0: none)
  std::vector<std::pair<std::size_t, std::size_t>> seq_named_;  ///< (stage, position) named now
  std::vector<std::uint8_t> seq_stat_named_;  ///< per straggler finding: named (before the gate)
  ColumnarWindow columns_;  ///< observe(const Window&): the window in columns
};

/// The lesson's rule over one vector of per-stage times in pipeline order. `limit` is
/// before * (1 + relative_threshold) when before != 0, else relative_threshold (absolute).
/// Returns the first index with after > limit and after - before, or nothing.
/// Throws std::invalid_argument when the lengths differ.
struct Regression {
  std::size_t index = 0;
  double delta = 0.0;
};
LAGGARD_API std::optional<Regression> first_regression(const std::vector<double>& baseline,
                                                       const std::vector<double>& current,
                                                       double relative_threshold = 0.05);

}  // namespace laggard
