// laggard — the live API for C++ training loops: sections, sampled steps, analysis on one rank.
//
//   laggard::AnalyzerOptions opt;
//   opt.enabled = true;
//   opt.rank = {rank, world_size, local_rank, host, ""};
//   laggard::use_mpi(opt, MPI_COMM_WORLD);     // MPI side channel (laggard/mpi.hpp, laggard::mpi)
//   laggard::Analyzer an(opt);
//   const auto fwd = an.stage("forward");
//   for (std::int64_t step = 0; step < steps; ++step) {
//     an.begin_step(step);
//     { laggard::Analyzer::Section s(an, fwd); forward(); }
//     an.end_step();
//   }
//   an.close();
//
// The failure rule: nothing here throws into or stops the training loop. Setup misuse (a negative
// interval, say) throws std::invalid_argument from the constructor; everything that fails later
// (a sink, the side channel, a log file, CUDA) becomes a counted, rate-limited warning through
// the log handler (laggard/log.hpp) and `straggler/report_errors`.
//
// The training thread never blocks on laggard: a finished sample is copied into a preallocated
// ring (full: dropped and counted). A log writer thread appends every sample to the rank log and
// hands it to a background thread, which ships samples to the analysis rank over the side
// channel and runs the analysis and the sinks there; the rank log never waits for that thread
// (a sink that blocks loses samples for the analysis, counted as analysis_dropped, not for the
// log).
//
// The verdict reaches people by default: the analysis rank logs one line (LogLevel::warning)
// when a straggler is confirmed — rank, host, stage, slowdown, what it costs every step, why —
// and one when it clears, and sends the verdict down the gather tree after each report, so
// that latest_metrics(), latest_report() and latest_verdict() answer on every rank.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "laggard/detector.hpp"
#include "laggard/export.hpp"
#include "laggard/log.hpp"
#include "laggard/model.hpp"
#include "laggard/recorder.hpp"
#include "laggard/sink.hpp"
#include "laggard/summary.hpp"
#include "laggard/transport.hpp"
#include "laggard/verdict.hpp"

namespace laggard {

/// How stage times are taken on sampled steps.
enum class Timing : std::uint8_t {
  host = 0,  ///< the host clock (TSC or steady_clock)
  cuda = 1,  ///< CUDA events on `cuda_stream`; host clock, with a warning logged once, if CUDA
             ///< cannot be used
};

/// Settings of an Analyzer. The first six are the RFC flags (DESIGN.md).
struct AnalyzerOptions {
  bool enabled = false;  ///< off: nothing is created, every call is one check
  int interval = 10;     ///< sample every interval-th step (step % interval == 0); 0 = never
  // Detector settings: the defaults are DetectorOptions' (docs/detection.md);
  // DetectorOptions::rfc() gives the RFC's rule.
  Method method = DetectorOptions{}.method;
  double relative_threshold = DetectorOptions{}.relative_threshold;
  double absolute_ms_threshold = DetectorOptions{}.absolute_ms_threshold;
  Reference ref = DetectorOptions{}.ref;
  double mad_z = DetectorOptions{}.mad_z;
  int confirm_k = DetectorOptions{}.confirm_k;  ///< threshold method: confirmed when slow in k ...
  int confirm_n = DetectorOptions{}.confirm_n;  ///< ... of the last n windows
  double false_alarm_budget = DetectorOptions{}.false_alarm_budget;  ///< sequential method
  double healthy_spread = DetectorOptions{}.healthy_spread;  ///< materiality (and sequential)
  double min_cost_share = DetectorOptions{}.min_cost_share;  ///< materiality: share of the step
  /// When set: every rank appends its samples to log_dir/rank-<r>.jsonl and the analysis rank
  /// its reports to log_dir/reports.jsonl, one line each, flushed per line.
  std::optional<std::string> log_dir;
  int analysis_rank = 0;  ///< the rank that analyses and calls the sinks
  /// Who this rank is. With the "mpi" transport, rank and world_size come from the communicator;
  /// an empty host is filled in with the host name.
  RankInfo rank;
  std::vector<MetricsSink> sinks;
  std::vector<std::shared_ptr<Sink>> sink_objects;  ///< sinks with a full report and close()

  /// The side channel, by name: "local" (one process; ranks that are threads of one process
  /// share `channel`) or "mpi" (see laggard/mpi.hpp). See transport_names(). "": none (the
  /// rank log only; with several ranks, no live analysis).
  std::string transport = "local";
  std::string channel;  ///< "local" only
  int ranks_per_host = 0;  ///< > 0: hosts of this many ranks in the gather tree (TransportSetup)
  /// When set, creates the side channel instead of the registry (`transport` then only names it
  /// in errors): a transport written elsewhere, e.g. in Python over torch.distributed.
  TransportFactory transport_factory;
  int fan_out = 32;  ///< host leaders per leader in the gather tree (gather_tree)
  /// summary() gives each straggler's onset up to this many ranks; beyond, only the step
  /// time's (per-rank onsets then cost more than the detector: docs/notes/live-scale.md).
  int rank_onsets_max_ranks = 4096;
  int mpi_comm = -1;    ///< "mpi" only: MPI_Comm_c2f(application communicator); -1 = world

  Timing timing = Timing::host;
  void* cuda_stream = nullptr;  ///< CUstream the CUDA events are recorded on (null = default)
  int cuda_device = -1;         ///< -1: the calling thread's current context (cuda.hpp)
  int max_pending_steps = 4;    ///< CUDA: sampled steps whose events may still be running
  /// A device timing backend of one's own, used instead of `timing` when set (a fake device in
  /// tests; another runtime's events). Called once, by the constructor; its capacity must be
  /// at least 2 * (max_pending_steps + 1) marks.
  std::function<std::unique_ptr<TimingBackend>()> timing_backend;

  std::size_t queue_capacity = 64;        ///< samples waiting for the background thread
  std::size_t max_unacked_samples = 256;  ///< per rank, in flight to its parent in the tree
  /// A batch of samples goes to the parent this long after its first sample (0: at the
  /// background thread's next turn); fewer, larger messages where each costs more (Python).
  /// The analysis rank's verdicts go to each child at most this often too (the latest wins),
  /// but at once when the confirmed set or the stop step changes, and at close.
  double batch_period_s = 0.0;
  double window_timeout_s = 5.0;  ///< a window missing some ranks is analysed after this ...
  std::size_t max_pending_windows = 32;  ///< ... or once this many windows are waiting
  double side_channel_timeout_s = 30.0;  ///< silence after which the analysis rank is presumed down
  double close_timeout_s = 10.0;         ///< default bound of close()
  double warning_interval_s = 60.0;      ///< at most one warning per kind of failure per interval
  double poll_interval_s = 0.005;        ///< how often the background thread looks for work
  /// With a log dir: SIGTERM, SIGINT and SIGHUP whose action is still the default write the
  /// rank log out (at most 2 s) before the process ends as it would have (the handler is
  /// installed by the first such Analyzer; a handler the program installed is left alone).
  bool flush_on_signal = true;
  /// The stop policy: once a confirmed straggler has held for this many windows, the analysis
  /// rank picks a step every rank stops before (StragglerVerdict::stop_step), far enough ahead
  /// for the verdict to reach every rank: stop_lead_s of step time and at least 2 intervals
  /// past its own latest sampled step. 0 = never (the default: the verdict is a warning).
  int stop_after_windows = 0;
  double stop_lead_s = 2.0;

  /// Takes the detector settings of `d` (a preset, say).
  void set_detector(const DetectorOptions& d) {
    method = d.method;
    ref = d.ref;
    relative_threshold = d.relative_threshold;
    absolute_ms_threshold = d.absolute_ms_threshold;
    mad_z = d.mad_z;
    confirm_k = d.confirm_k;
    confirm_n = d.confirm_n;
    false_alarm_budget = d.false_alarm_budget;
    healthy_spread = d.healthy_spread;
    min_cost_share = d.min_cost_share;
  }

  /// The detector settings these options describe.
  DetectorOptions detector() const {
    DetectorOptions d;
    d.method = method;
    d.false_alarm_budget = false_alarm_budget;
    d.ref = ref;
    d.relative_threshold = relative_threshold;
    d.absolute_ms_threshold = absolute_ms_threshold;
    d.mad_z = mad_z;
    d.confirm_k = confirm_k;
    d.confirm_n = confirm_n;
    d.healthy_spread = healthy_spread;
    d.min_cost_share = min_cost_share;
    return d;
  }
};

/// What an Analyzer counted. Drops and failures never stop training; they are counted here.
struct AnalyzerCounters {
  std::uint64_t sampled_steps = 0;
  std::uint64_t samples_emitted = 0;    ///< samples the recorder finished
  /// Steps, stages, intervals and values the recorder dropped (deferred values included)
  std::uint64_t recorder_dropped = 0;
  RecorderCounters recorder;            ///< the recorder's own counters, in detail
  std::uint64_t queue_dropped = 0;      ///< samples dropped: the log writer was behind (disk)
  std::uint64_t queue_pushed = 0;      ///< samples the log writer got (emitted - queue_dropped)
  std::uint64_t samples_logged = 0;     ///< lines written to rank-<r>.jsonl
  std::uint64_t rank_log_lost = 0;      ///< samples whose rank-log write failed
  /// Samples close() left to a rank-log writer that did not finish in time (a slow or hung
  /// disk): neither written nor lost when it gave up; the writer writes no more after that, but
  /// the one line it was writing then may still reach the log. After close(), with a log dir:
  /// queue_pushed = samples_logged + rank_log_lost + rank_log_left.
  std::uint64_t rank_log_left = 0;
  /// Samples logged but not sent or analysed: the background thread (side channel, analysis,
  /// sinks) was behind, e.g. stuck in a sink that blocks.
  std::uint64_t analysis_dropped = 0;
  /// This rank's samples the live analysis got: acknowledged by the parent in the gather tree
  /// (on the analysis rank: put into a window).
  std::uint64_t samples_sent = 0;
  std::uint64_t send_dropped = 0;       ///< dropped: the parent was behind or gone, or close
  /// Samples this rank's background thread did not get or could not deliver: analysis_dropped +
  /// send_dropped; after close(), queue_pushed - samples_sent (queue_pushed = samples_sent +
  /// gather_dropped, as docs/reference/failure-contract.md has it).
  std::uint64_t gather_dropped = 0;
  std::uint64_t forwarded_samples = 0;  ///< other ranks' samples this rank passed on (a leader)
  std::uint64_t forward_dropped = 0;    ///< ... of which dropped (its parent behind or gone)
  std::uint64_t samples_received = 0;   ///< analysis rank: from other ranks
  std::uint64_t late_samples = 0;       ///< analysis rank: arrived after their window
  std::uint64_t malformed_samples = 0;  ///< analysis rank: lines that did not parse
  std::uint64_t windows = 0;            ///< analysis rank: windows analysed
  std::uint64_t incomplete_windows = 0; ///< ... of which some ranks were missing
  std::uint64_t reports = 0;
  std::uint64_t verdicts_sent = 0;       ///< verdict messages sent to children in the tree
  std::uint64_t verdicts_received = 0;   ///< ... received from the parent (not the analysis rank)
  std::uint64_t malformed_verdicts = 0;  ///< ... discarded as malformed (a warning each, limited)
  std::uint64_t errors = 0;  ///< failures counted on this rank (straggler/report_errors, local)
  std::uint64_t background_cpu_ns = 0;  ///< CPU time of laggard's two threads so far
  /// In a process forked from this one after the Analyzer started: its begin_step calls, none
  /// of them recorded (the child has a copy of the Analyzer without its threads).
  std::uint64_t forked_steps_dropped = 0;
  bool side_channel_healthy = false;
  bool parent_down = false;  ///< the parent in the gather tree is presumed down
  bool side_channel_failed = false;  ///< the transport failed while the Analyzer ran
};

/// The live analysis of one rank. One per training thread.
///
/// Thread-safety: begin_step, end_step, add, record, defer, resolve, stage, set_stream, Section,
/// counters and close belong to the training thread (the one that constructed it, for CUDA
/// timing).
/// latest_metrics, latest_report, latest_verdict, summary and add_sink may be called from any
/// thread.
///
/// Cost on the training thread: disabled, or a step that is not sampled: one predictable branch
/// per call. A sampled section: two clock reads (or two CUDA event records). A sampled
/// end_step: the step's times and readings are written by slot number into a preallocated ring
/// slot (no name compared or copied, no allocation, no lock, no system call; the log writer
/// thread builds the sample with the names): about a microsecond for 8 stages
/// (docs/performance.md).
///
/// fork(): the child's copy records nothing. Its begin_step counts the step
/// (forked_steps_dropped) and warns once (counted in errors); close() and the destructor return
/// at once and touch nothing the parent's threads own (the copy's memory is left to the child's
/// exit or exec). Create a new Analyzer in the child to record there.
///
/// Every rank's Analyzer must be constructed at the same point of the program when the "mpi"
/// transport is used (duplicating the communicator is collective), and closed before
/// MPI_Finalize (if it is not, MPI_Finalize stops its side channel first).
class LAGGARD_API Analyzer {
 public:
  using StageId = Recorder::StageId;
  class Section;

  /// Throws std::invalid_argument for invalid options of an enabled Analyzer (naming the
  /// setting). Anything else that fails (transport, log directory, CUDA, thread) is logged and
  /// degrades: at worst the Analyzer records and logs but does not analyse.
  explicit Analyzer(AnalyzerOptions options = {});
  /// close() with the options' close_timeout_s.
  ~Analyzer();
  Analyzer(const Analyzer&) = delete;
  Analyzer& operator=(const Analyzer&) = delete;
  Analyzer(Analyzer&&) = delete;
  Analyzer& operator=(Analyzer&&) = delete;

  /// False when disabled, after close(), or if setup failed outright.
  bool enabled() const noexcept { return recorder_ != nullptr; }
  /// Whether the current step is sampled.
  bool sampled() const noexcept { return sampled_; }

  /// Registers (or finds) a stage; the kind defaults from the name (default_stage_kind).
  /// Allocates on the first sight of a name only. -1 when disabled or all stage slots are used.
  StageId stage(std::string_view name) noexcept;
  StageId stage(std::string_view name, StageKind kind) noexcept;

  /// Starts step `step`; it is sampled when step % interval == 0.
  void begin_step(std::int64_t step) noexcept;
  /// Ends the step. A sampled step's sample goes to the background thread (CUDA timing: once its
  /// events have completed, seen at a later begin_step); its report comes some steps later.
  void end_step() noexcept {
    if (LAGGARD_LIKELY(!sampled_)) return;
    end_sampled_step(std::chrono::steady_clock::now(), Recorder::SlotReadings{});
  }
  /// end_step() with the step's end read by the caller (steady_clock, just before) and resource
  /// readings by slot recorded last (Recorder::end_step(now, readings)).
  void end_step(std::chrono::steady_clock::time_point now,
                const Recorder::SlotReadings& readings) noexcept {
    if (LAGGARD_LIKELY(!sampled_)) return;
    end_sampled_step(now, readings);
  }
  /// Adds a duration measured elsewhere to a stage of this step (no-op if not sampled).
  void add(StageId id, double ms, std::uint32_t calls = 1) noexcept {
    if (LAGGARD_LIKELY(!sampled_)) return;
    recorder_->add(id, ms, calls);
  }
  /// Attaches a scalar (loss, grad norm, tokens; NaN and infinities kept bit for bit) to this
  /// step's sample `values` (no-op if not sampled: one branch). Sampled: no allocation after a
  /// name's first sight; names beyond Recorder::kMaxValues are dropped and counted. The
  /// correctness gate reads these values. Training thread only.
  void record(std::string_view name, double value) noexcept {
    if (LAGGARD_LIKELY(!sampled_)) return;
    recorder_->record(name, value);
  }
  /// The same for a resource reading (`resources`; names in docs/reference/formats.md).
  void record_resource(std::string_view name, double value) noexcept {
    if (LAGGARD_LIKELY(!sampled_)) return;
    recorder_->record_resource(name, value);
  }
  /// CUDA timing: a value of this step that becomes known later (a loss still on the device,
  /// copied to the host without waiting): Recorder::defer. 0 (nothing deferred: record the
  /// value instead) when not sampled, or with the host clock. The step's sample waits for
  /// resolve(token, value) a bounded while once its events have completed; close() emits it
  /// without a value never resolved (counted, RecorderCounters::deferred_dropped).
  Recorder::DeferToken defer(std::string_view name) noexcept {
    if (LAGGARD_LIKELY(!sampled_)) return 0;
    return recorder_->defer(name);
  }
  /// Gives a deferred value (Recorder::resolve); false when its step is gone. Training thread.
  bool resolve(Recorder::DeferToken token, double value) noexcept {
    return recorder_ != nullptr && recorder_->resolve(token, value);
  }
  /// CUDA timing: later events are recorded on `cu_stream` (a CUstream). No-op otherwise.
  void set_stream(void* cu_stream) noexcept;

  /// The underlying Recorder (nullptr when disabled or closed), e.g. for laggard::Section.
  /// begin_step/end_step must still go through the Analyzer, and on_sample must not be replaced.
  Recorder* recorder() noexcept { return recorder_; }

  /// A copy of the latest straggler/* metrics, on every rank; empty before the first verdict.
  /// The analysis rank has the latest report's (what its sinks get): besides the RFC names,
  /// straggler/num_confirmed, straggler/confirmed ("rank:stage,..."), straggler/report_errors,
  /// straggler/dropped_samples, straggler/incomplete_windows. Every other rank has the verdict
  /// its parent in the gather tree passed down after that report (a few background turns
  /// later, one window late at most in practice): straggler/num_confirmed,
  /// straggler/confirmed (the StragglerVerdict::kMaxFindings costliest), straggler/likely_bottleneck,
  /// straggler/whatif_step_saving_ms, straggler/ranks, straggler/step_ms. Every rank also has
  /// its own part: straggler/verdict_step (the window's step), straggler/local_score (this
  /// rank's score, StragglerVerdict::score; NaN when the verdict had none for it) and
  /// straggler/local_confirmed (1 when this rank is a confirmed straggler). Thread-safe; copies
  /// under a lock the background thread holds only to replace it.
  Metrics latest_metrics() const noexcept;
  /// The latest report, on every rank. The analysis rank's is the whole report (with
  /// `confirmed` filled in). Elsewhere it is made from the verdict: step, ranks_seen,
  /// world_size, the confirmed stragglers (`stragglers`, each confirmed, costs filled in),
  /// likely_bottleneck, whatif_step_saving_ms, and one hint per straggler with its reason;
  /// no stage figures, no waiting. Nothing before the first verdict.
  std::optional<Report> latest_report() const noexcept;
  /// The latest verdict, on every rank (the analysis rank's own, or what came down the gather
  /// tree), with this rank's score and whether it is confirmed itself. Nothing before the
  /// first. Thread-safe.
  std::optional<StragglerVerdict> latest_verdict() const noexcept;
  /// The latest verdict's seq (0 before the first): one atomic load, to see cheaply whether a
  /// new verdict arrived (e.g. at a step boundary) before taking it with latest_verdict().
  std::uint64_t verdict_seq() const noexcept;

  /// Acting on a verdict, on every rank (each receives the verdict). `fn(finding, verdict)` is
  /// called on the training thread, inside end_step() of a sampled step at which a new verdict
  /// has arrived (one atomic load otherwise): on_straggler once per (rank, cohort, stage) when
  /// it first appears among the confirmed, on_clear when it has been absent from 3 verdicts in a
  /// row (the console line's rule, as every rank sees it). A verdict's stop_step (the stop
  /// policy, AnalyzerOptions::stop_after_windows) is read with latest_verdict() or stop_step().
  /// A callback that throws is a counted error (report_errors), never propagated. Register them
  /// before training starts (not thread-safe against end_step).
  using VerdictCallback = std::function<void(const VerdictFinding&, const StragglerVerdict&)>;
  void on_straggler(VerdictCallback fn);
  void on_clear(VerdictCallback fn);
  /// The stop policy's step, every rank stops before it; -1 until decided (one atomic load).
  std::int64_t stop_step() const noexcept;
  /// Analysis rank: the verdicts over every window analysed so far (what `laggard analyze`
  /// prints). May wait for the window being analysed; empty elsewhere.
  RunSummary summary() const noexcept;
  /// Training thread: what was sampled, sent, dropped and counted so far.
  AnalyzerCounters counters() const noexcept;
  /// Adds a sink (analysis rank; ignored elsewhere). Thread-safe.
  void add_sink(MetricsSink sink) noexcept;
  void add_sink(std::shared_ptr<Sink> sink) noexcept;
  /// Counts a failure of the caller's (a framework integration's) as this Analyzer's own:
  /// straggler/report_errors and a rate-limited warning. Thread-safe.
  void count_error(std::string_view kind, std::string_view message) noexcept;

  int rank() const noexcept;
  int world_size() const noexcept;
  bool is_analysis_rank() const noexcept;
  /// "host-clock" or "cuda-event"; "" when disabled.
  const char* backend_name() const noexcept;
  /// The side channel's name, "" when there is none.
  const char* transport_name() const noexcept;

  /// Ends an open sampled step, then lets the background thread finish: remaining samples are
  /// logged and sent, the analysis rank waits for the other ranks' last samples and analyses
  /// what is left. Waits at most `timeout_s` (the background thread is left behind, with a
  /// warning, if it takes longer). Idempotent; every rank should call it.
  void close() noexcept;
  void close(double timeout_s) noexcept;

  /// Failure drill: kills this rank's side channel as if it had died (on the analysis rank: it
  /// stops receiving and acknowledging). Training continues; the other ranks warn and drop.
  void debug_fail_transport() noexcept;

 private:
  struct Impl;
  void end_sampled_step(std::chrono::steady_clock::time_point now,
                        const Recorder::SlotReadings& readings) noexcept;
  void register_for_fork() noexcept;
  void forked_step() noexcept;

  std::unique_ptr<Impl> impl_;
  Recorder* recorder_ = nullptr;  ///< owned by impl_; null when disabled or closed
  bool sampled_ = false;
  bool verdict_callbacks_ = false;  ///< on_straggler or on_clear given (end_sampled_step acts)
};

/// RAII section scope on an Analyzer: times one entry of a stage on a sampled step, costs one
/// branch otherwise. Cannot be copied or moved.
///   { laggard::Analyzer::Section s(an, fwd_id); forward(); }
///   { laggard::Analyzer::Section s(an, "optimizer"); step(); }  // by name: looked up when sampled
class Analyzer::Section {
 public:
  Section(Analyzer& analyzer, StageId id) noexcept
      : recorder_(analyzer.sampled_ ? analyzer.recorder_ : nullptr), id_(id) {
    if (LAGGARD_UNLIKELY(recorder_ != nullptr)) recorder_->begin(id_);
  }
  Section(Analyzer& analyzer, std::string_view name) noexcept
      : recorder_(analyzer.sampled_ ? analyzer.recorder_ : nullptr) {
    if (LAGGARD_UNLIKELY(recorder_ != nullptr)) {
      id_ = analyzer.stage(name);
      recorder_->begin(id_);
    }
  }
  ~Section() {
    if (LAGGARD_UNLIKELY(recorder_ != nullptr)) recorder_->end(id_);
  }
  Section(const Section&) = delete;
  Section& operator=(const Section&) = delete;
  Section(Section&&) = delete;
  Section& operator=(Section&&) = delete;

 private:
  Recorder* recorder_;
  StageId id_ = -1;
};

}  // namespace laggard
