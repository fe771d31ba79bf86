// The live Analyzer: a Recorder on the training thread, a ring to the log writer thread, which
// appends every sample to the rank log and hands it on, through a second ring, to the background
// thread: the side channel and (on the analysis rank) the analysis and sinks. The rank log waits
// on nothing but the disk: a sink that blocks, a slow analysis or a stuck side channel fill the
// second ring (its drops are counted as analysis_dropped), not the first.
#include "laggard/analyzer.hpp"

#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "laggard/cuda.hpp"
#include "laggard/diagnose.hpp"
#include "laggard/jsonl.hpp"
#include "live/error_counter.hpp"
#include "live/gather.hpp"
#include "live/line_file.hpp"
#include "live/signal_flush.hpp"
#include "live/report_json.hpp"
#include "live/sample_ring.hpp"
#include "live/wake_word.hpp"
#include "live/window_assembler.hpp"

namespace laggard {
namespace {

using Clock = std::chrono::steady_clock;

Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

std::string what(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    return ex.what();
  } catch (...) {
    return "unknown exception";
  }
}

void require(bool ok, const std::string& message) {
  if (!ok) throw std::invalid_argument("Analyzer: " + message);
}

bool finite_at_least(double v, double lo) { return std::isfinite(v) && v >= lo; }

void validate(const AnalyzerOptions& o) {
  require(o.interval >= 0, "interval must be >= 0 (0 = never sample), got " +
                               std::to_string(o.interval));
  o.detector().validate();
  const bool mpi = o.transport == "mpi";  // rank and world size come from the communicator
  require(o.rank.world_size >= 1 || mpi,
          "rank.world_size must be >= 1, got " + std::to_string(o.rank.world_size));
  require(mpi || (o.rank.rank >= 0 && o.rank.rank < o.rank.world_size),
          "rank.rank must be in [0, world_size), got " + std::to_string(o.rank.rank));
  require(o.analysis_rank >= 0 && (mpi || o.analysis_rank < o.rank.world_size),
          "analysis_rank must be in [0, world_size), got " + std::to_string(o.analysis_rank));
  require(o.queue_capacity >= 1 && o.queue_capacity <= (1u << 20),
          "queue_capacity must be in [1, 1048576], got " + std::to_string(o.queue_capacity));
  require(o.max_unacked_samples >= 1, "max_unacked_samples must be >= 1");
  require(o.max_pending_windows >= 1, "max_pending_windows must be >= 1");
  require(o.fan_out >= 1, "fan_out must be >= 1, got " + std::to_string(o.fan_out));
  require(o.ranks_per_host >= 0, "ranks_per_host must be >= 0");
  require(finite_at_least(o.batch_period_s, 0.0), "batch_period_s must be >= 0");
  require(o.max_pending_steps >= 1 && o.max_pending_steps <= 64,
          "max_pending_steps must be in [1, 64], got " + std::to_string(o.max_pending_steps));
  require(finite_at_least(o.window_timeout_s, 0.0), "window_timeout_s must be >= 0");
  require(finite_at_least(o.side_channel_timeout_s, 0.0) && o.side_channel_timeout_s > 0.0,
          "side_channel_timeout_s must be > 0");
  require(finite_at_least(o.close_timeout_s, 0.0), "close_timeout_s must be >= 0");
  require(finite_at_least(o.warning_interval_s, 0.0), "warning_interval_s must be >= 0");
  require(std::isfinite(o.poll_interval_s) && o.poll_interval_s > 0.0 && o.poll_interval_s <= 1.0,
          "poll_interval_s must be in (0, 1]");
  require(!o.log_dir || !o.log_dir->empty(), "log_dir must not be empty when set");
  require(o.stop_after_windows >= 0, "stop_after_windows must be >= 0 (0 = never stop), got " +
                                         std::to_string(o.stop_after_windows));
  require(finite_at_least(o.stop_lead_s, 0.0), "stop_lead_s must be >= 0");
}

std::uint64_t thread_cpu_ns() {
  timespec ts{};
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return 0;
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ull +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

// Everything the background thread uses. Shared with that thread, so that a thread left behind
// by close() (stuck in a user's sink, say) never outlives what it touches.
struct Background {
  Background(const AnalyzerOptions& o, std::size_t ring_capacity)
      : options(o), ring(ring_capacity), handoff(ring_capacity), errors("", o.warning_interval_s) {
    options.sinks.clear();  // kept in `sinks`, under their own lock
  }

  AnalyzerOptions options;
  int rank = 0;
  int world_size = 1;
  bool analysis_rank = false;
  StepRing ring;       // training thread -> log writer (numbers by slot; the writer names them)
  SampleRing handoff;  // log writer -> background thread (full: analysis_dropped)
  // Wake-on-data. The log writer looks at `ring` every poll_interval_s while samples come, and
  // once it has found it empty for kDeepAfterPolls polls in a row it sleeps on `*log_wake`
  // until the training thread's next push wakes it (WakeWord: a fence and a load per push, a
  // system call only for the push that ends a deep sleep). The background thread sleeps on
  // `run_wake` until the writer hands samples on, the transport says a message arrived or a
  // link broke (`transport_pending`, Transport::set_wake), or its next timer is due (a batch's
  // flush, the parent's silence timeout, a window's timeout: Gather::next_due,
  // WindowAssembler::next_due); with nothing due, until one of those. A transport that cannot
  // wake it is looked at every poll_interval_s. log_wake is the signal flush slot's word
  // where there is one (the handler wakes the writer).
  static constexpr int kDeepAfterPolls = 20;
  WakeWord own_log_wake;
  WakeWord* log_wake = &own_log_wake;
  WakeWord run_wake;
  bool transport_wakes = false;               // set_wake() said yes
  std::atomic<bool> transport_pending{false};  // the transport woke us since the last turn
  /// The transport's wake: from its threads (or another rank's, "local").
  void wake_for_transport() noexcept {
    // Only the first since the last turn wakes the thread: the rest wait for that turn.
    if (!transport_pending.exchange(true, std::memory_order_relaxed))
      run_wake.wake_any();  // its fence orders the store before the sleeper's check
  }
  std::atomic<bool> stopping{false};  // `stop`, readable without `mu`
  /// Wakes both threads (after `stop`).
  void wake_all() noexcept {
    log_wake->wake_any();
    run_wake.wake_any();
  }
  ErrorCounter errors;
  std::unique_ptr<Transport> transport;
  std::string transport_name;

  // Control.
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  bool done = false;
  bool log_done = false;  // the log writer wrote everything and closed the rank log
  Clock::time_point deadline{};
  Clock::time_point close_started{};
  std::atomic<bool> fail_requested{false};

  std::mutex sinks_mu;
  std::vector<std::shared_ptr<Sink>> sinks;

  mutable std::mutex latest_mu;
  Metrics latest_metrics;
  std::optional<Report> latest_report;
  std::optional<StragglerVerdict> latest_verdict;  // every rank: the analysis rank's, or its parent's
  std::atomic<std::uint64_t> verdict_seq_seen{0};  // latest_verdict's seq, read without the lock
  std::atomic<std::int64_t> stop_step_seen{-1};    // latest_verdict's stop_step, likewise

  mutable std::mutex analysis_mu;
  std::optional<RunAnalysis> analysis;
  // The triage chain's live part (docs/howto/triage.md): the correctness gate over recorded values, and
  // the resource readings that give a confirmed straggler its reason. Background thread only.
  std::optional<CorrectnessGate> gate;
  ResourceProfile resources;
  std::size_t correctness_warned = 0;  // findings looked at for a warning
  std::set<std::pair<int, std::string>> correctness_said;  // (rank, value) warned about
  void triage(const Window& analysed, Report& report, Metrics& metrics);

  std::atomic<std::uint64_t> samples_logged{0}, log_lost{0}, samples_sent{0}, send_dropped{0},
      samples_received{0}, late_samples{0}, malformed{0}, windows{0}, incomplete{0}, reports{0},
      forwarded{0}, forward_dropped{0}, background_cpu_ns{0}, log_cpu_ns{0}, verdicts_received{0},
      verdicts_sent{0}, malformed_verdicts{0};
  std::atomic<bool> channel_healthy{false};
  std::atomic<bool> parent_down{false};
  std::atomic<bool> transport_failed{false};

  void run() noexcept;
  void write_loop() noexcept;  // the log writer thread

 private:
  void write_ring() noexcept;
  void tick(bool final) noexcept;
  void drain_ring();
  void deliver();
  void analyse(bool final);
  void publish(std::int64_t step, Report&& report, Metrics&& extra = {});
  StragglerVerdict make_verdict(const Window& analysed, const Report& report, const Metrics& extra);
  void announce(const Window& analysed, const Report& report, StragglerVerdict& verdict);
  void finish() noexcept;
  void close_sinks() noexcept;
  void mirror_counts();
  bool analysing() const { return analysis_rank && analysis_on; }
  std::uint64_t dropped_here() const {
    return ring.dropped() + handoff.dropped() + (gather ? gather->own_dropped() + gather->forward_dropped() : 0);
  }

  bool wanted = true;  // a side channel was asked for ("" and no factory: none, on purpose)

  // Background thread only.
  bool analysis_on = false;
  bool reported_channel_down = false;
  std::optional<WindowAssembler> assembler;
  std::optional<Gather> gather;
  StepSample sample;
  std::vector<StepSample> received;
  std::size_t received_used = 0;
  std::vector<StepSample> spare;  // analysed windows' samples, their buffers reused by decoding
  Window window;
  std::vector<wire::RankCounts> received_counts;
  std::vector<int> gone_ranks;  // scratch: ranks cut off from the tree (Gather::take_gone)
  std::map<int, std::uint64_t> remote_dropped;
  std::map<int, std::uint64_t> remote_errors;
  std::uint64_t own_analysed = 0;
  // The verdict: what goes down the tree, and the console lines of the analysis rank.
  std::uint64_t verdict_seq = 0;
  std::vector<wire::RankScore> verdict_scores;
  std::vector<float> score_of_rank;
  std::vector<std::uint8_t> rank_seen, rank_confirmed;
  std::vector<float> score_history;         // by rank: its last kScoreWindows window scores
  std::vector<std::uint32_t> score_windows;  // by rank: window scores so far
  StragglerVerdict incoming;
  struct Announced {
    std::string host;
    std::string stage;
    std::int64_t confirmed_step = 0;
    double slowdown = 1.0;
    int absent = 0;  // windows it took part in without being confirmed, in a row
    int held = 0;    // windows it was confirmed in since it was announced
  };
  std::map<std::pair<int, std::string>, Announced> announced;  // (rank, cohort \x1f stage)
  // The first step of each flagged finding's current run of flagged windows (its onset).
  std::map<std::pair<int, std::string>, std::int64_t> flagged_since;
  std::int64_t own_latest_step = -1;  // the analysis rank's latest sampled step seen here
  std::int64_t stop_step = -1;        // the stop policy's agreed step, once decided
  void decide_stop(StragglerVerdict& verdict);
  LineFile report_log;
  std::string rank_log_path;
  std::string report_log_path;
  std::string report_line;
  std::string error_text;

  // The log writer's.
  signal_flush::Slot* flush_slot = nullptr;  // a signal asks for the rank log written out
  // close() gave up on the writer (a slow or hung disk): from then on it writes no more lines
  // and counts none; what it had not written is rank_log_left. Under log_count_mu, with the
  // counts of lines written and lost, so that the three add up to queue_pushed.
  std::mutex log_count_mu;
  bool log_abandoned = false;
  std::atomic<std::uint64_t> log_left{0};
  bool log_dir_set() const { return !rank_log_path.empty(); }
  bool log_given_up() {
    std::lock_guard<std::mutex> lock(log_count_mu);
    return log_abandoned;
  }
  StepSample log_sample;
  std::uint64_t handed_on = 0;  // samples the writer pushed into `handoff` (its thread only)
  std::string log_line;
  std::string log_error;
  LineFile rank_log;

  friend class laggard::Analyzer;
};

void Background::run() noexcept {
  SampleRing::reserve(sample);
  const auto period =
      std::chrono::duration_cast<WakeWord::Duration>(seconds(options.poll_interval_s));
  // A transport that cannot wake this thread is looked at every period while it has links.
  const bool poll = transport != nullptr && world_size > 1 && !transport_wakes;
  Clock::time_point last_turn{};
  for (;;) {
    // Woken by the log writer when it hands samples on, by the transport (a message, a broken
    // link), by close(), or at the next timer (Background's wake-on-data comment).
    const Clock::time_point now = Clock::now();
    Clock::time_point due = Clock::time_point::max();
    if (gather) due = gather->next_due(now, period);
    if (analysing()) due = std::min(due, assembler->next_due());  // else nothing releases it
    WakeWord::Duration wait = period;
    if (due != Clock::time_point::max()) {
      const auto left = std::chrono::duration_cast<WakeWord::Duration>(due - now);
      wait = std::max(WakeWord::Duration::zero(), poll ? std::min(left, period) : left);
    }
    WakeWord::Sleep how =
        poll || due != Clock::time_point::max() ? WakeWord::kLight : WakeWord::kDeep;
    run_wake.arm(how);
    if (stopping.load(std::memory_order_relaxed)) {
      run_wake.disarm();
      break;
    }
    if (!handoff.empty() || transport_pending.load(std::memory_order_relaxed)) {
      // Data waits: a turn now, or a period after the last one if that was sooner (messages
      // and samples that come fast are taken a period's worth at a time, as before).
      const auto gap = std::chrono::duration_cast<WakeWord::Duration>(last_turn + period - now);
      wait = std::min(wait, std::max(WakeWord::Duration::zero(), gap));
      how = WakeWord::kLight;
      run_wake.arm(how);
      if (stopping.load(std::memory_order_relaxed)) {  // a close() wake before this arm
        run_wake.disarm();
        break;
      }
    }
    if (wait > WakeWord::Duration::zero())
      run_wake.sleep(how, wait);
    else
      run_wake.disarm();
    if (stopping.load(std::memory_order_relaxed)) break;
    last_turn = Clock::now();
    tick(false);
    background_cpu_ns.store(thread_cpu_ns(), std::memory_order_relaxed);
  }
  finish();
  background_cpu_ns.store(thread_cpu_ns(), std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mu);
    done = true;
  }
  cv.notify_all();
}

void Background::write_loop() noexcept {
  SampleRing::reserve(log_sample);
  const auto period =
      std::chrono::duration_cast<WakeWord::Duration>(seconds(options.poll_interval_s));
  int empty_polls = 0;
  for (;;) {
    // A light sleep (the period; close() and the signal flush handler wake it) while samples
    // come; a deep one (until the training thread's next push) after kDeepAfterPolls empty
    // polls.
    const WakeWord::Sleep how = empty_polls >= kDeepAfterPolls ? WakeWord::kDeep
                                                               : WakeWord::kLight;
    log_wake->arm(how);
    const bool stop_now = stopping.load(std::memory_order_relaxed);
    const bool flush = flush_slot != nullptr &&
                       flush_slot->requested.load(std::memory_order_acquire) &&
                       !flush_slot->drained.load(std::memory_order_acquire);
    if (!stop_now && !flush && ring.empty())
      log_wake->sleep(how, period);
    else
      log_wake->disarm();
    empty_polls = ring.empty() ? empty_polls + 1 : 0;
    const std::uint64_t handed_before = handed_on;
    write_ring();  // after stop the training thread pushes no more: this is the last of it
    if (handed_on != handed_before) run_wake.wake_any();
    if (flush_slot != nullptr && flush_slot->requested.load(std::memory_order_acquire))
      flush_slot->drained.store(true, std::memory_order_release);  // a signal waits for this
    log_cpu_ns.store(thread_cpu_ns(), std::memory_order_relaxed);
    if (stop_now) break;
  }
  rank_log.close();
  {
    std::lock_guard<std::mutex> lock(mu);
    log_done = true;
  }
  cv.notify_all();
}

void Background::write_ring() noexcept {
  try {
    while (!log_given_up() && ring.pop(log_sample)) {
      log_line.clear();
      if (const std::size_t left_out = append_sample_json(log_sample, log_line)) {
        // Infinity or NaN (an add() of inf, a sum that overflowed): the stage is left out of
        // the log line and of the analysis, the rest of the sample is kept, and the loss is
        // counted.
        errors.report("non-finite value", "step " + std::to_string(log_sample.step) + ": " +
                                              std::to_string(left_out) +
                                              " stage time(s) not finite, left out of the sample");
        auto& st = log_sample.stages;
        st.erase(std::remove_if(st.begin(), st.end(),
                                [](const StageTime& x) { return !std::isfinite(x.ms); }),
                 st.end());
      }
      if (!rank_log_path.empty()) {
        const bool ok = rank_log.write(rank_log_path, log_line, log_error);
        {
          // A write that returns after close() gave up was counted as left there.
          std::lock_guard<std::mutex> lock(log_count_mu);
          if (log_abandoned) return;
          (ok ? samples_logged : log_lost).fetch_add(1, std::memory_order_relaxed);
        }
        if (!ok) errors.report("rank log", log_error);
      }
      handoff.push(log_sample);  // full (the background thread is behind): counted there
      ++handed_on;
    }
  } catch (...) {
    errors.report("rank log", what(std::current_exception()));
  }
}

void Background::mirror_counts() {
  if (!gather) return;
  if (!gather->root()) {  // the root's own samples go into its windows (drain_ring)
    samples_sent.store(gather->own_acked(), std::memory_order_relaxed);
    send_dropped.store(gather->own_dropped(), std::memory_order_relaxed);
  }
  forwarded.store(gather->forwarded(), std::memory_order_relaxed);
  forward_dropped.store(gather->forward_dropped(), std::memory_order_relaxed);
  parent_down.store(gather->parent_down(), std::memory_order_relaxed);
  verdicts_received.store(gather->verdicts_received(), std::memory_order_relaxed);
  verdicts_sent.store(gather->verdicts_sent(), std::memory_order_relaxed);
  malformed_verdicts.store(gather->malformed_verdicts(), std::memory_order_relaxed);
}

void Background::tick(bool final) noexcept {
  try {
    if (fail_requested.exchange(false) && transport) {
      transport->fail();
      errors.report("side channel", "stopped by debug_fail_transport() (failure drill)");
    }
    drain_ring();
    transport_pending.store(false, std::memory_order_relaxed);  // what it woke us for: now
    if (gather) {
      gather->set_own_counts(dropped_here(), errors.total());
      received_used = 0;
      received_counts.clear();
      if (!spare.empty()) {  // decode into the buffers of samples analysed already
        received.clear();
        received.swap(spare);
      }
      gather->tick(Clock::now(), final, received, received_used, received_counts);
      if (!analysis_rank && gather->take_verdict(incoming)) {
        std::lock_guard<std::mutex> lock(latest_mu);
        latest_verdict = incoming;
        verdict_seq_seen.store(incoming.seq, std::memory_order_release);
        stop_step_seen.store(incoming.stop_step, std::memory_order_release);
      }
      if (analysing()) deliver();
    }
    if (transport) {
      const bool healthy = transport->healthy();
      channel_healthy.store(healthy, std::memory_order_relaxed);
      if (!healthy && !transport_failed.exchange(true, std::memory_order_relaxed))
        errors.report("side channel", std::string("the side channel (") + transport_name +
                                          ") failed; this rank sends and receives nothing more "
                                          "(the rank log still gets every sample)");
    }
    if (analysing() && world_size > 1 && wanted && (!transport || !transport->healthy())) {
      analysis_on = false;
      if (!reported_channel_down) {
        reported_channel_down = true;
        errors.warn("analysis", "the side channel is down: this rank stops analysing (the rank "
                                "log still gets every sample)");
      }
    }
    if (analysing()) analyse(false);
    if (gather) {
      // Acknowledgements and verdicts, the ones of the windows just analysed included (an
      // acknowledgement rides on a verdict to the same child).
      gather->send_down(Clock::now(), final);
      mirror_counts();
    }
  } catch (...) {
    errors.report("background", what(std::current_exception()));
    mirror_counts();
  }
}

void Background::drain_ring() {
  while (handoff.pop(sample)) {  // logged already, non-finite times left out
    if (analysing()) {
      own_latest_step = std::max(own_latest_step, sample.step);
      StepSample own(sample);
      // The other ranks' times reach the analysis rounded to the wire's float32; its own are
      // rounded alike, so that no rank is treated differently.
      if (world_size > 1) {
        own.step_ms = wire::wire_ms(own.step_ms);
        for (StageTime& t : own.stages) t.ms = wire::wire_ms(t.ms);
      }
      if (assembler->add(std::move(own), Clock::now()) == WindowAssembler::Added::late)
        late_samples.fetch_add(1, std::memory_order_relaxed);
    } else if (gather && !analysis_rank) {
      gather->add_own(sample);
    }
  }
}

void Background::deliver() {
  const auto now = Clock::now();
  samples_received.fetch_add(received_used, std::memory_order_relaxed);
  for (std::size_t i = 0; i < received_used; ++i) {
    StepSample& s = received[i];
    const int who = s.rank;
    switch (assembler->add(std::move(s), now)) {
      case WindowAssembler::Added::late:
        late_samples.fetch_add(1, std::memory_order_relaxed);
        break;
      case WindowAssembler::Added::bad_rank:
        malformed.fetch_add(1, std::memory_order_relaxed);
        errors.warn("malformed sample", "a sample names rank " + std::to_string(who) +
                                            ", outside the world of " +
                                            std::to_string(world_size));
        break;
      default:
        break;
    }
  }
  for (const wire::RankCounts& c : received_counts) {
    if (c.rank == rank) continue;
    remote_dropped[c.rank] = c.dropped;
    remote_errors[c.rank] = c.errors;
    if (c.final) assembler->finished(c.rank);
  }
  gone_ranks.clear();
  gather->take_gone(gone_ranks);
  for (int r : gone_ranks)
    if (r != rank) assembler->finished(r);
  malformed.store(gather->malformed(), std::memory_order_relaxed);
}

void Background::analyse(bool final) {
  bool complete = false;
  while (assembler->next(window, complete, Clock::now(), final)) {
    windows.fetch_add(1, std::memory_order_relaxed);
    if (!complete) incomplete.fetch_add(1, std::memory_order_relaxed);
    Report report;
    {
      std::lock_guard<std::mutex> lock(analysis_mu);
      report = analysis->add(window);
    }
    Metrics extra;
    try {
      triage(window, report, extra);
    } catch (const std::exception& e) {
      errors.report("triage", e.what());
    }
    try {
      StragglerVerdict verdict = make_verdict(window, report, extra);
      announce(window, report, verdict);
      decide_stop(verdict);
      if (gather) gather->send_verdict(verdict, verdict_scores);
      std::lock_guard<std::mutex> lock(latest_mu);
      verdict_seq_seen.store(verdict.seq, std::memory_order_release);
      stop_step_seen.store(verdict.stop_step, std::memory_order_release);
      latest_verdict = std::move(verdict);
    } catch (const std::exception& e) {
      errors.report("verdict", e.what());
    }
    // This rank's own sample reached the live analysis when its window is analysed.
    for (const StepSample& s : window.samples)
      if (s.rank == rank) samples_sent.store(++own_analysed, std::memory_order_relaxed);
    for (StepSample& s : window.samples) spare.push_back(std::move(s));
    window.samples.clear();
    publish(window.step, std::move(report), std::move(extra));
  }
}

void Background::triage(const Window& analysed, Report& report, Metrics& metrics) {
  if (!gate) return;
  gate->add(analysed);
  resources.add(analysed);
  // Correctness first: a warning for each (rank, value) the first time it fails, the count and
  // the first finding as metrics.
  const auto& found = gate->findings();
  for (; correctness_warned < found.size(); ++correctness_warned) {
    const CorrectnessFinding& f = found[correctness_warned];
    if (!correctness_said.insert({f.rank, f.name}).second) continue;
    log_message(LogLevel::warning,
                "correctness: '" + f.name + "' " +
                    (f.kind == CorrectnessFinding::Kind::non_finite ? "is not finite"
                                                                    : "jumped out of its range") +
                    " at step " + std::to_string(f.step) + " on rank " + std::to_string(f.rank) +
                    ": performance findings after it may be symptoms");
  }
  if (gate->values_seen() > 0) {
    metrics["straggler/correctness/findings"] = static_cast<double>(gate->findings_total());
    if (!found.empty()) {
      const CorrectnessFinding& f = found.front();
      metrics["straggler/correctness/first"] =
          f.name + " " + to_string(f.kind) + " at step " + std::to_string(f.step) + " on rank " +
          std::to_string(f.rank);
    }
  }
  // Reasons of the confirmed stragglers (at most 8 a window: each reads every rank's readings).
  if (!resources.any()) return;
  std::size_t explained = 0;
  std::map<int, bool> explained_rank;
  for (const RankFinding& f : report.stragglers) {
    if (!f.confirmed || explained_rank[f.rank] || explained >= 8) continue;
    explained_rank[f.rank] = true;
    ++explained;
    const std::vector<Reason> why = resource_reasons(resources, f.rank);
    const std::string key = "straggler/" + std::to_string(f.rank) + "/reason";
    if (why.empty()) {
      metrics[key] = std::string("unknown");
      continue;
    }
    std::string codes;
    for (const Reason& r : why) codes += (codes.empty() ? "" : ",") + r.code;
    metrics[key] = codes;
    report.hints.push_back("measured: rank " + std::to_string(f.rank) + " " + why.front().code +
                           " (" + why.front().evidence + ")");
  }
}

// ---------------------------------------------------------------------------------------------
// The verdict (docs/design.md, "The verdict down the tree"): what every rank learns after each
// report, and the console lines of the analysis rank.

// A rank's score: the worst (ref + floor) / (t + floor) over its stages, the floor 0.5 ms or a
// tenth of the window's step time, whichever is larger: a stage of a few tenths of a
// millisecond, whose ratio is mostly clock noise, does not score, nor does a few-millisecond
// hiccup of a short stage that costs the step little (a 5 ms data stage that took 7 ms in a
// 70 ms step scores 0.86, not 0.7; a forward of 45 ms where the others take 20 scores 0.52).
constexpr double kScoreFloorMs = 0.5;
constexpr double kScoreFloorOfStep = 0.1;
// ... taken as the median over a rank's last this many windows.
constexpr std::size_t kScoreWindows = 5;
// A confirmed (rank, stage) is cleared once it was not confirmed in this many windows in a row
// that the rank took part in (a window without its sample says nothing about it).
constexpr int kClearWindows = 3;
// Console lines of one window at most (a whole host confirmed at once is 8 lines, not 64); the
// rest are in one line, and straggler/confirmed lists them all.
constexpr std::size_t kMaxLinesPerWindow = 8;

// What a finding costs the step: the detector's figures (RankFinding::cost_ms, cost_share).
double cost_ms_of(const RankFinding& f) { return f.cost_ms; }
double cost_share_of(const RankFinding& f) { return f.cost_share; }

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, std::isfinite(v) ? v : 0.0);
  return buf;
}

// "ranks 0,2,3" / "rank 4" / "31 ranks".
std::string rank_list(const std::vector<int>& ranks) {
  if (ranks.size() > 6) return std::to_string(ranks.size()) + " ranks";
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size(); ++i)
    out += (i ? "," : "") + std::to_string(ranks[i]);
  return out;
}

// Why a confirmed straggler is slow, in words: its own work in the stage's kind, who waits for
// it, and the measured resource reason when triage found one. The others wait for it in a stage
// of its cohort (other than its own) where their time exceeds its own by at least half its
// excess: a collective, or a stage that holds one (DDP's all-reduce inside "backward"), where
// they sit while it works.
std::string reason_of(const RankFinding& f, const Report& report, const Metrics& extra) {
  std::string why = "its own ";
  if (f.stage == kUntimedStage) why += "time outside the timed sections";
  else if (f.kind == StageKind::data) why += "data loading";
  else why += to_string(f.kind);
  const double excess = std::max(0.0, f.ms - f.ref_ms);
  std::vector<int> waiters;
  std::string in_comm, inside;
  for (const StageFigures& st : report.stages) {
    if (st.cohort != f.cohort || st.stage == f.stage) continue;
    double own = -1.0;
    for (std::size_t i = 0; i < st.rank_ids.size() && i < st.rank_ms.size(); ++i)
      if (st.rank_ids[i] == f.rank) own = st.rank_ms[i];
    if (own < 0.0 || excess <= 0.0) continue;
    bool any = false;
    for (std::size_t i = 0; i < st.rank_ids.size() && i < st.rank_ms.size(); ++i) {
      if (st.rank_ids[i] == f.rank || st.rank_ms[i] - own < 0.5 * excess) continue;
      any = true;
      if (std::find(waiters.begin(), waiters.end(), st.rank_ids[i]) == waiters.end())
        waiters.push_back(st.rank_ids[i]);
    }
    if (!any) continue;
    std::string& list = st.kind == StageKind::communication ? in_comm : inside;
    list += (list.empty() ? "'" : ", '") + st.stage + "'";
  }
  if (!waiters.empty()) {
    std::sort(waiters.begin(), waiters.end());
    why += "; " + rank_list(waiters) + (waiters.size() == 1 ? " waits" : " wait") + " for it";
    if (!in_comm.empty()) why += " in " + in_comm;
    if (!inside.empty()) why += std::string(in_comm.empty() ? "" : " and") + " inside " + inside;
  }
  const auto measured = extra.find("straggler/" + std::to_string(f.rank) + "/reason");
  if (measured != extra.end())
    if (const auto* codes = std::get_if<std::string>(&measured->second))
      if (!codes->empty() && *codes != "unknown") why += "; measured: " + *codes;
  return why;
}

StragglerVerdict Background::make_verdict(const Window& analysed, const Report& report,
                                 const Metrics& extra) {
  StragglerVerdict v;
  v.seq = ++verdict_seq;
  v.step = analysed.step;
  v.ranks_seen = report.ranks_seen;
  v.world_size = world_size;
  v.whatif_step_saving_ms = report.whatif_step_saving_ms;
  v.likely_bottleneck = report.likely_bottleneck;
  std::vector<double> steps;
  steps.reserve(analysed.samples.size());
  for (const StepSample& s : analysed.samples)
    if (std::isfinite(s.step_ms) && s.step_ms > 0.0) steps.push_back(s.step_ms);
  if (!steps.empty()) {
    auto mid = steps.begin() + static_cast<std::ptrdiff_t>(steps.size() / 2);
    std::nth_element(steps.begin(), mid, steps.end());
    v.step_ms = *mid;
  }
  const std::vector<const RankFinding*> confirmed = confirmed_costliest_first(report);
  v.num_confirmed = static_cast<int>(confirmed.size());
  for (const RankFinding* f : confirmed) {
    if (v.confirmed.size() >= StragglerVerdict::kMaxFindings) break;
    VerdictFinding out;
    out.rank = f->rank;
    out.host = f->host;
    out.cohort = f->cohort;
    out.stage = f->stage;
    out.kind = f->kind;
    out.ms = f->ms;
    out.ref_ms = f->ref_ms;
    out.slowdown = f->slowdown;
    out.cost_ms = cost_ms_of(*f);
    out.cost_share = cost_share_of(*f);
    out.windows_flagged = f->windows_flagged;
    out.reason = reason_of(*f, report, extra);
    v.confirmed.push_back(std::move(out));
  }
  // Every rank's score: one pass over the window's stage figures, O(ranks x stages).
  const auto world = static_cast<std::size_t>(std::max(1, world_size));
  const double floor_ms = std::max(kScoreFloorMs, kScoreFloorOfStep * v.step_ms);
  score_of_rank.assign(world, 1.0f);
  rank_seen.assign(world, 0);
  rank_confirmed.assign(world, 0);
  for (const StageFigures& st : report.stages) {
    const bool scored = st.kind != StageKind::communication;
    for (std::size_t i = 0; i < st.rank_ids.size() && i < st.rank_ms.size(); ++i) {
      const int r = st.rank_ids[i];
      if (r < 0 || static_cast<std::size_t>(r) >= world) continue;
      rank_seen[static_cast<std::size_t>(r)] = 1;
      if (!scored || !std::isfinite(st.rank_ms[i])) continue;
      const double score = (st.ref_ms + floor_ms) / (std::max(0.0, st.rank_ms[i]) + floor_ms);
      float& worst = score_of_rank[static_cast<std::size_t>(r)];
      worst = std::min(worst, static_cast<float>(std::min(1.0, score)));
    }
  }
  for (const RankFinding* f : confirmed)
    if (f->rank >= 0 && static_cast<std::size_t>(f->rank) < world)
      rank_confirmed[static_cast<std::size_t>(f->rank)] = 1;
  // A rank's score is the median of its last kScoreWindows window scores: one window's worst
  // stage is often a wait that landed in a compute stage (DDP's all-reduce inside backward),
  // which says nothing about the rank.
  if (score_windows.size() != world) {
    score_windows.assign(world, 0);
    score_history.assign(world * kScoreWindows, 1.0f);
  }
  verdict_scores.clear();
  float recent[kScoreWindows];
  for (std::size_t r = 0; r < world; ++r) {
    float* history = &score_history[r * kScoreWindows];
    if (rank_seen[r]) history[score_windows[r]++ % kScoreWindows] = score_of_rank[r];
    const std::size_t n = std::min<std::size_t>(score_windows[r], kScoreWindows);
    if (n == 0) continue;
    std::copy(history, history + n, recent);
    std::sort(recent, recent + n);
    score_of_rank[r] = n % 2 ? recent[n / 2] : 0.5f * (recent[n / 2 - 1] + recent[n / 2]);
    verdict_scores.push_back(
        wire::RankScore{static_cast<int>(r), score_of_rank[r], rank_confirmed[r] != 0});
  }
  v.rank = rank;
  v.score = std::numeric_limits<double>::quiet_NaN();
  if (rank >= 0 && static_cast<std::size_t>(rank) < world && score_windows[static_cast<std::size_t>(rank)] > 0)
    v.score = score_of_rank[static_cast<std::size_t>(rank)];
  v.self_confirmed = rank >= 0 && static_cast<std::size_t>(rank) < world &&
                     rank_confirmed[static_cast<std::size_t>(rank)] != 0;
  return v;
}

void Background::announce(const Window& analysed, const Report& report, StragglerVerdict& verdict) {
  std::size_t lines = 0, unsaid = 0;
  std::set<std::pair<int, std::string>> now;
  {  // onsets: a flagged finding's run of flagged windows, ended by a window it took part in
    std::set<int> present;
    for (const StepSample& s : analysed.samples) present.insert(s.rank);
    std::set<std::pair<int, std::string>> flagged;
    for (const RankFinding& f : report.stragglers) {
      auto key = std::make_pair(f.rank, f.cohort + '\x1f' + f.stage);
      flagged.insert(key);
      flagged_since.emplace(key, analysed.step);
    }
    for (auto it = flagged_since.begin(); it != flagged_since.end();)
      it = !flagged.count(it->first) && present.count(it->first.first) ? flagged_since.erase(it)
                                                                          : std::next(it);
  }
  for (const RankFinding& f : report.stragglers) {
    if (!f.confirmed) continue;
    auto key = std::make_pair(f.rank, f.cohort + '\x1f' + f.stage);
    now.insert(key);
    auto it = announced.find(key);
    const auto since = flagged_since.find(key);
    const std::int64_t onset = since != flagged_since.end() ? since->second : analysed.step;
    if (it != announced.end()) {
      it->second.absent = 0;
      it->second.slowdown = f.slowdown;
      ++it->second.held;
      for (VerdictFinding& vf : verdict.confirmed)
        if (vf.rank == f.rank && vf.cohort == f.cohort && vf.stage == f.stage) {
          vf.onset_step = std::min(onset, it->second.confirmed_step);
          vf.confirmed_step = it->second.confirmed_step;
          vf.windows_held = it->second.held;
        }
      continue;
    }
    announced.emplace(key, Announced{f.host, f.stage, analysed.step, f.slowdown, 0, 1});
    for (VerdictFinding& vf : verdict.confirmed)
      if (vf.rank == f.rank && vf.cohort == f.cohort && vf.stage == f.stage) {
        vf.onset_step = onset;
        vf.confirmed_step = analysed.step;
        vf.windows_held = 1;
      }
    if (lines >= kMaxLinesPerWindow) {
      ++unsaid;
      continue;
    }
    ++lines;
    std::string reason;
    for (const VerdictFinding& vf : verdict.confirmed)
      if (vf.rank == f.rank && vf.cohort == f.cohort && vf.stage == f.stage) reason = vf.reason;
    if (reason.empty()) reason = reason_of(f, report, {});
    // A share of 1 is a clamp, not a measurement: the step times were shorter than the stage
    // (stages given with add() outside the step's span); the line then leaves the share out.
    const double share = cost_share_of(f) < 0.999 ? cost_share_of(f) : 0.0;
    log_message(LogLevel::warning,
                "straggler confirmed: rank " + std::to_string(f.rank) +
                    (f.host.empty() ? "" : " (host " + f.host + ")") + " in '" + f.stage +
                    "', " + fixed(f.slowdown, 2) + "x the reference (" + fixed(f.ms, 1) +
                    " ms vs " + fixed(f.ref_ms, 1) + " ms); it costs every step " +
                    fixed(cost_ms_of(f), 1) + " ms" +
                    (share > 0.0 ? " (" + fixed(100.0 * share, 0) + "% of the step time)" : "") +
                    "; why: " + reason + " [step " + std::to_string(analysed.step) + "]");
  }
  if (unsaid > 0)
    log_message(LogLevel::warning,
                "straggler confirmed: " + std::to_string(unsaid) +
                    " more (rank, stage) pairs in this window (straggler/confirmed lists them "
                    "all) [step " + std::to_string(analysed.step) + "]");
  // Clearing: only windows the rank took part in count.
  if (announced.size() == now.size()) return;
  std::set<int> present;
  for (const StepSample& s : analysed.samples) present.insert(s.rank);
  for (auto it = announced.begin(); it != announced.end();) {
    if (now.count(it->first) || !present.count(it->first.first)) {
      ++it;
      continue;
    }
    Announced& a = it->second;
    if (++a.absent < kClearWindows) {
      ++it;
      continue;
    }
    log_message(LogLevel::warning,
                "straggler cleared: rank " + std::to_string(it->first.first) +
                    (a.host.empty() ? "" : " (host " + a.host + ")") + " in '" + a.stage +
                    "' is no longer confirmed (confirmed at step " +
                    std::to_string(a.confirmed_step) + ", last " + fixed(a.slowdown, 2) +
                    "x; not confirmed in the " + std::to_string(kClearWindows) +
                    " windows since) [step " + std::to_string(analysed.step) + "]");
    it = announced.erase(it);
  }
}

// The stop policy: decided once, on the analysis rank, then carried by every later verdict. The
// step is ahead of this rank's latest sampled step by stop_lead_s of step time and at least two
// intervals (a rank checks for a new verdict at its sampled steps), so that the verdict reaches
// every rank before it; ranks of one data-parallel job are within a step of each other.
void Background::decide_stop(StragglerVerdict& verdict) {
  if (stop_step < 0 && options.stop_after_windows > 0) {
    bool held = false;
    for (const VerdictFinding& f : verdict.confirmed)
      held = held || f.windows_held >= options.stop_after_windows;
    if (held) {
      const std::int64_t interval = std::max(1, options.interval);
      std::int64_t lead = 2 * interval;
      if (verdict.step_ms > 0.0 && std::isfinite(verdict.step_ms))
        lead = std::max<std::int64_t>(
            lead, static_cast<std::int64_t>(std::ceil(1000.0 * options.stop_lead_s / verdict.step_ms)));
      lead = std::min<std::int64_t>(lead, 1000000);
      stop_step = std::max(own_latest_step, verdict.step) + lead;
      log_message(LogLevel::warning,
                  "straggler stop: every rank stops before step " + std::to_string(stop_step) +
                      " (stop policy: a confirmed straggler held for " +
                      std::to_string(options.stop_after_windows) + " windows) [step " +
                      std::to_string(verdict.step) + "]");
    }
  }
  verdict.stop_step = stop_step;
}

void Background::publish(std::int64_t step, Report&& report, Metrics&& extra) {
  Metrics metrics = report.metrics(rank);
  for (auto& [key, value] : extra) metrics[key] = std::move(value);
  std::uint64_t remote_err = 0;
  std::uint64_t dropped =
      ring.dropped() + handoff.dropped() + late_samples.load(std::memory_order_relaxed);
  for (const auto& [r, n] : remote_errors) remote_err += n;
  for (const auto& [r, n] : remote_dropped) dropped += n;
  add_live_metrics(report, static_cast<double>(errors.total() + remote_err),
                   static_cast<double>(dropped),
                   static_cast<double>(incomplete.load(std::memory_order_relaxed)), metrics);

  if (!report_log_path.empty()) {
    report_line.clear();
    append_report_json(step, metrics, report, report_line);
    if (!report_log.write(report_log_path, report_line, error_text))
      errors.report("report log", error_text);
  }
  {
    // Before the sinks: a sink that asks for the latest report gets the one it is told about.
    std::lock_guard<std::mutex> lock(latest_mu);
    latest_metrics = metrics;
    latest_report = std::move(report);
  }
  std::vector<std::shared_ptr<Sink>> targets;
  {
    std::lock_guard<std::mutex> lock(sinks_mu);
    targets = sinks;  // called outside the lock: a sink may add a sink
  }
  if (!targets.empty()) {
    std::optional<Report> current;
    {
      std::lock_guard<std::mutex> lock(latest_mu);
      current = latest_report;
    }
    for (const auto& sink : targets) {
      try {
        sink->write(step, metrics, *current);
      } catch (...) {
        const std::string name = sink->name();
        errors.report(name.empty() ? std::string("sink") : "sink " + name,
                      what(std::current_exception()));
      }
    }
  }
  reports.fetch_add(1, std::memory_order_relaxed);
}

void Background::close_sinks() noexcept {
  std::vector<std::shared_ptr<Sink>> targets;
  try {
    std::lock_guard<std::mutex> lock(sinks_mu);
    targets = sinks;
  } catch (...) {
  }
  for (const auto& sink : targets) {
    try {
      sink->close();
    } catch (...) {
      errors.report(std::string("sink ") + sink->name() + " close",
                    what(std::current_exception()));
    }
  }
}

void Background::finish() noexcept {
  Clock::time_point until, started;
  {
    std::lock_guard<std::mutex> lock(mu);
    until = deadline;
    started = close_started;
  }
  const auto nap = std::chrono::milliseconds(1);
  {
    // The log writer hands on the training thread's last samples, then stops.
    std::unique_lock<std::mutex> lock(mu);
    cv.wait_until(lock, until, [this] { return log_done; });
  }
  try {
    // The transport stops waiting for what can no longer come (links that never came up).
    if (transport) transport->closing();
    tick(true);  // the last samples, from the log writer
    const auto healthy = [this] { return transport && transport->healthy(); };
    if (analysing()) assembler->finished(rank);
    if (gather && !gather->root()) {
      // An aggregator forwards its children's last samples before its own last batch, for at
      // most three quarters of the time left.
      const auto children_until = started + (until - started) * 3 / 4;
      while (Clock::now() < children_until && !gather->children_final() && healthy()) {
        std::this_thread::sleep_for(nap);
        tick(true);
      }
      if (healthy()) {
        gather->set_own_counts(dropped_here(), errors.total());
        gather->send_final(Clock::now());
      }
      while (Clock::now() < until && !gather->settled() && healthy()) {
        std::this_thread::sleep_for(nap);
        tick(true);
      }
      if (!gather->settled())
        errors.report("close", "closed before the parent acknowledged every batch; the samples "
                               "not acknowledged are counted as dropped");
      gather->abandon();
      mirror_counts();
    }
    if (analysing()) {
      // Wait for the other ranks' last samples, analysing as they come.
      while (Clock::now() < until && !assembler->all_finished() && healthy()) {
        tick(true);
        if (!assembler->all_finished()) std::this_thread::sleep_for(nap);
      }
      if (!assembler->all_finished() && world_size > 1)
        errors.warn("close", "closed before every rank sent its last samples; the last "
                             "windows are analysed without them");
      analyse(true);
      if (gather) {
        gather->send_down(Clock::now(), true);  // the last verdict goes at once
        mirror_counts();
      }
      while (gather && Clock::now() < until && !gather->settled() && healthy()) {
        tick(true);  // acknowledgements still owed
        std::this_thread::sleep_for(nap);
      }
    }
  } catch (...) {
    errors.report("close", what(std::current_exception()));
  }
  close_sinks();
  try {
    if (transport) transport->shutdown();
  } catch (...) {
    errors.report("side channel", what(std::current_exception()));
  }
  channel_healthy.store(false, std::memory_order_relaxed);
  report_log.close();
}

// What every rank reads of a verdict as metrics (Analyzer::latest_metrics). `full`: the summary
// too (every rank but the analysis rank, which has the report's own).
void add_verdict_metrics(const StragglerVerdict& v, bool full, Metrics& m) {
  m["straggler/verdict_step"] = static_cast<double>(v.step);
  m["straggler/local_score"] = v.score;
  m["straggler/local_confirmed"] = v.self_confirmed ? 1.0 : 0.0;
  if (!full) return;
  std::string confirmed;
  for (const VerdictFinding& f : v.confirmed)
    confirmed += (confirmed.empty() ? "" : ",") + std::to_string(f.rank) + ":" + f.stage;
  m["straggler/num_confirmed"] = static_cast<double>(v.num_confirmed);
  m["straggler/confirmed"] = std::move(confirmed);
  m["straggler/likely_bottleneck"] = v.likely_bottleneck;
  m["straggler/whatif_step_saving_ms"] = v.whatif_step_saving_ms;
  m["straggler/ranks"] = static_cast<double>(v.ranks_seen);
  m["straggler/step_ms"] = v.step_ms;
}

// A rank other than the analysis rank: its latest_report(), made from the verdict.
Report report_of(const StragglerVerdict& v) {
  Report r;
  r.step = v.step;
  r.ranks_seen = v.ranks_seen;
  r.world_size = v.world_size;
  r.likely_bottleneck = v.likely_bottleneck;
  r.whatif_step_saving_ms = v.whatif_step_saving_ms;
  for (const VerdictFinding& f : v.confirmed) {
    RankFinding out;
    out.rank = f.rank;
    out.host = f.host;
    out.cohort = f.cohort;
    out.stage = f.stage;
    out.kind = f.kind;
    out.ms = f.ms;
    out.ref_ms = f.ref_ms;
    out.slowdown = f.slowdown;
    out.cost_ms = f.cost_ms;
    out.cost_share = f.cost_share;
    out.windows_flagged = f.windows_flagged;
    out.confirmed = true;
    r.stragglers.push_back(std::move(out));
    r.hints.push_back("rank " + std::to_string(f.rank) + " in '" + f.stage + "': " + f.reason);
  }
  return r;
}

// Every started Analyzer of the process, for the fork handlers: a child gets copies of them
// without their threads (and maybe with mutexes those threads held), and must mark them all
// before anything in it runs. Never destroyed: an Analyzer may outlive static destruction.
struct ForkRegistry {
  std::mutex mu;
  std::vector<Analyzer*> live;
};

ForkRegistry& fork_registry() {
  static ForkRegistry* r = new ForkRegistry;
  return *r;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

namespace {
struct ActiveVerdict {
  VerdictFinding finding;
  std::uint64_t last_seq = 0;  // the latest verdict that confirmed it
};
using ActiveVerdicts = std::map<std::tuple<int, std::string, std::string>, ActiveVerdict>;
}  // namespace

struct Analyzer::Impl {
  AnalyzerOptions options;
  std::shared_ptr<Background> bg;
  std::unique_ptr<Recorder> recorder;
  std::thread log_thread;  // the rank log's writer
  std::thread thread;      // the side channel, analysis and sinks
  std::string backend_name;
  bool closed = false;
  // Set in a forked child only (the fork handler): the copy records nothing.
  bool forked = false;
  pid_t pid = ::getpid();  // the process that started the Analyzer
  std::uint64_t forked_steps = 0;
  std::uint64_t fork_errors = 0;
  // on_straggler / on_clear: the training thread's, in end_sampled_step.
  std::vector<Analyzer::VerdictCallback> on_straggler, on_clear;
  std::uint64_t verdict_seq_acted = 0;
  ActiveVerdicts active;
};

namespace {

// A verdict not seen yet: on_straggler for what newly appears among the confirmed, on_clear for
// what has been absent from kClearWindows verdicts (seqs; a verdict missed in between counts).
// Not a member of Analyzer::Impl: a member of the exported class's nested type would be
// exported from the shared library with it.
void act_on_verdict(const std::vector<Analyzer::VerdictCallback>& on_straggler,
                    const std::vector<Analyzer::VerdictCallback>& on_clear,
                    ActiveVerdicts& active, ErrorCounter& errors, const StragglerVerdict& v) {
  const auto call = [&errors, &v](const std::vector<Analyzer::VerdictCallback>& fns,
                                  const VerdictFinding& f) {
    for (const Analyzer::VerdictCallback& fn : fns) {
      try {
        fn(f, v);
      } catch (const std::exception& e) {
        errors.report("verdict callback", e.what());
      } catch (...) {
        errors.report("verdict callback", "a non-standard exception");
      }
    }
  };
  for (const VerdictFinding& f : v.confirmed) {
    auto [it, added] = active.try_emplace(std::make_tuple(f.rank, f.cohort, f.stage));
    it->second.finding = f;
    it->second.last_seq = v.seq;
    if (added) call(on_straggler, f);
  }
  for (auto it = active.begin(); it != active.end();) {
    if (v.seq >= it->second.last_seq + kClearWindows) {
      call(on_clear, it->second.finding);
      it = active.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace

Analyzer::Analyzer(AnalyzerOptions options) {
  if (!options.enabled) return;  // nothing created: no thread, no file, no side channel
  validate(options);
  try {
    auto impl = std::make_unique<Impl>();
    if (options.rank.host.empty()) options.rank.host = host_name();
    auto bg = std::make_shared<Background>(options, options.queue_capacity);
    for (MetricsSink& fn : options.sinks)
      if (fn) bg->sinks.push_back(callback_sink(std::move(fn)));
    for (auto& sink : options.sink_objects)
      if (sink) bg->sinks.push_back(std::move(sink));
    Background* b = bg.get();
    b->errors.set_prefix("rank " + std::to_string(options.rank.rank) + ": ");

    // The side channel first: with MPI it decides rank and world size.
    TransportSetup setup;
    setup.rank = options.rank;
    setup.analysis_rank = options.analysis_rank;
    setup.channel = options.channel;
    setup.mpi_comm = options.mpi_comm;
    setup.fan_out = options.fan_out;
    setup.ranks_per_host = options.ranks_per_host;
    setup.warn = [b](std::string_view kind, std::string_view message) {
      b->errors.report(kind, message);
    };
    // An empty name with no factory: no side channel, on purpose (the rank log only).
    const bool wanted = !options.transport.empty() || options.transport_factory;
    bg->wanted = wanted;
    if (wanted) try {
      bg->transport = options.transport_factory ? options.transport_factory(setup)
                                                : make_transport(options.transport, setup);
      if (!bg->transport) throw std::runtime_error("the transport factory returned nothing");
      bg->transport_name = bg->transport->name();
      bg->transport_wakes = bg->transport->set_wake([b] { b->wake_for_transport(); });
      options.rank.rank = bg->transport->rank();
      options.rank.world_size = bg->transport->world_size();
    } catch (...) {
      bg->errors.report("side channel",
                        "transport '" + options.transport +
                            "' unavailable: " + what(std::current_exception()) +
                            "; this rank records and logs samples but does not send them");
    }
    if (options.rank.world_size < 1) options.rank.world_size = 1;
    bg->options.rank = options.rank;
    bg->rank = options.rank.rank;
    bg->world_size = options.rank.world_size;
    bg->errors.set_prefix("rank " + std::to_string(bg->rank) + ": ");
    bg->analysis_rank = bg->rank == options.analysis_rank;
    // With no side channel on purpose, the analysis rank analyses its own samples alone.
    bg->analysis_on =
        bg->analysis_rank && (bg->world_size == 1 || bg->transport != nullptr || !wanted);
    if (bg->transport && bg->world_size > 1) {
      Gather::Options go;
      go.max_unacked_samples = options.max_unacked_samples;
      go.peer_timeout = seconds(options.side_channel_timeout_s);
      go.batch_period = seconds(options.batch_period_s);
      go.verdict_period = go.batch_period;  // verdicts to a child at most as often as batches
      go.max_batch_samples = std::min<std::size_t>(64, options.max_unacked_samples);
      try {
        bg->gather.emplace(*bg->transport, bg->rank, bg->world_size, go, bg->errors);
      } catch (...) {
        bg->errors.report("side channel", "the gather tree could not be set up: " +
                                              what(std::current_exception()));
        bg->analysis_on = bg->analysis_rank && bg->world_size == 1;
      }
    }
    if (bg->analysis_on) {
      OnsetOptions onsets;
      // Per-rank onsets cost more than the detector at many thousand ranks (docs/notes/live-scale.md);
      // `laggard analyze` of the rank logs still gives them.
      onsets.per_rank = bg->world_size <= options.rank_onsets_max_ranks;
      bg->analysis.emplace(options.detector(), onsets);
      bg->gate.emplace();
      bg->assembler.emplace(bg->world_size, seconds(options.window_timeout_s),
                            options.max_pending_windows);
      if (!wanted)  // nobody else will send: windows do not wait for the others
        for (int r = 0; r < bg->world_size; ++r)
          if (r != bg->rank) bg->assembler->finished(r);
    }
    if (options.log_dir) {
      const std::filesystem::path dir(*options.log_dir);
      bg->rank_log_path = (dir / ("rank-" + std::to_string(bg->rank) + ".jsonl")).string();
      if (bg->analysis_rank) bg->report_log_path = (dir / "reports.jsonl").string();
    }

    // Timing: CUDA events when asked for and possible, else the host clock.
    std::unique_ptr<TimingBackend> backend;
    if (options.timing_backend) {
      backend = options.timing_backend();
    } else if (options.timing == Timing::cuda) {
      const auto regions = static_cast<std::uint32_t>(options.max_pending_steps + 1);
      auto made = make_cuda_backend(regions * 2 * 256, options.cuda_device);
      if (made.backend) {
        backend = std::move(made.backend);
        backend->set_stream(options.cuda_stream);
      } else if (should_log_cuda_fallback(made.reason)) {
        log_message(LogLevel::warning, "CUDA event timing unavailable (" + made.reason +
                                           "); using the host clock");
      }
    }
    RecorderOptions ro;
    ro.interval = options.interval;
    ro.rank = options.rank;
    ro.max_pending_steps = options.max_pending_steps;
    impl->recorder = std::make_unique<Recorder>(ro, std::move(backend));
    impl->backend_name = impl->recorder->backend_name();
    if (options.flush_on_signal && bg->log_dir_set())
      bg->flush_slot = signal_flush::attach(bg->rank);
    if (bg->flush_slot != nullptr) bg->log_wake = &bg->flush_slot->wake;
    // Sampled steps go into the ring as numbers; the log writer builds the samples.
    bg->ring.set_source(options.rank, bg->log_wake);
    impl->recorder->set_raw_sink(&bg->ring);
    // laggard's threads never take a signal that the flush handler waits on them for.
    signal_flush::BlockInScope block_signals;
    impl->log_thread = std::thread([bg] { bg->write_loop(); });
    try {
      impl->thread = std::thread([bg] { bg->run(); });
    } catch (...) {
      {
        std::lock_guard<std::mutex> lock(bg->mu);
        bg->stop = true;
      }
      bg->stopping.store(true);
      bg->cv.notify_all();
      bg->wake_all();
      impl->log_thread.join();
      throw;
    }
    log_message(LogLevel::debug,
                "rank " + std::to_string(bg->rank) + ": laggard Analyzer on, interval " +
                    std::to_string(options.interval) + ", timing " + impl->backend_name +
                    ", side channel " +
                    (bg->transport_name.empty() ? std::string("none") : bg->transport_name) +
                    (bg->analysis_rank ? ", analysis rank" : ""));
    impl->options = std::move(options);
    impl->options.sinks.clear();
    impl->bg = std::move(bg);
    recorder_ = impl->recorder.get();
    impl_ = std::move(impl);
    register_for_fork();
  } catch (const std::invalid_argument&) {
    throw;
  } catch (...) {
    log_message(LogLevel::error, "laggard Analyzer disabled: setup failed: " +
                                     what(std::current_exception()));
    recorder_ = nullptr;
    impl_.reset();
  }
}

void Analyzer::register_for_fork() noexcept {
  static std::once_flag once;
  try {
    std::call_once(once, [] {
      // The registry's lock is held across fork(), so that the child's copy of the list is
      // whole; in the child every Analyzer copied is marked before the child runs on.
      ::pthread_atfork([] { fork_registry().mu.lock(); }, [] { fork_registry().mu.unlock(); },
                       [] {
                         ForkRegistry& r = fork_registry();
                         for (Analyzer* a : r.live) {
                           a->impl_->forked = true;
                           a->recorder_ = nullptr;
                           a->sampled_ = false;
                         }
                         r.mu.unlock();
                       });
    });
    std::lock_guard<std::mutex> lock(fork_registry().mu);
    fork_registry().live.push_back(this);
  } catch (...) {
    log_message(LogLevel::warning, "laggard Analyzer: could not register for fork(): a child "
                                   "forked from this process may wait for threads it lacks");
  }
}

void Analyzer::forked_step() noexcept {
  if (impl_->forked_steps++ != 0) return;
  ++impl_->fork_errors;
  // Straight to the log handler: the copy's error counter may hold a lock a parent's thread
  // took before the fork.
  log_message(LogLevel::warning,
              "rank " + std::to_string(impl_->bg->rank) + ": fork: this process (pid " +
                  std::to_string(::getpid()) + ") was forked from pid " +
                  std::to_string(impl_->pid) +
                  " after its Analyzer started: the Analyzer records nothing here (its steps "
                  "are counted in forked_steps_dropped); create a new Analyzer in the child");
}

Analyzer::~Analyzer() {
  if (!impl_) return;
  if (impl_->forked) {
    // The copy's threads do not exist here and its mutexes may be held: destroying it could
    // wait forever (or terminate, for a thread object still joinable). Left to the exit.
    {
      std::lock_guard<std::mutex> lock(fork_registry().mu);
      auto& live = fork_registry().live;
      live.erase(std::remove(live.begin(), live.end(), this), live.end());
    }
    (void)impl_.release();
    return;
  }
  close(impl_->options.close_timeout_s);
  try {
    std::lock_guard<std::mutex> lock(fork_registry().mu);
    auto& live = fork_registry().live;
    live.erase(std::remove(live.begin(), live.end(), this), live.end());
  } catch (...) {
  }
}

Analyzer::StageId Analyzer::stage(std::string_view name) noexcept {
  return stage(name, default_stage_kind(name));
}

Analyzer::StageId Analyzer::stage(std::string_view name, StageKind kind) noexcept {
  if (recorder_ == nullptr) return -1;
  try {
    const StageId id = recorder_->stage(name, kind);
    if (id < 0)
      impl_->bg->errors.warn("stage", "more than " + std::to_string(Recorder::kMaxStages) +
                                          " stages: '" + std::string(name) +
                                          "' is not recorded");
    return id;
  } catch (...) {
    impl_->bg->errors.report("stage", what(std::current_exception()));
    return -1;
  }
}

LAGGARD_HOT void Analyzer::begin_step(std::int64_t step) noexcept {
  if (recorder_ == nullptr) {
    if (LAGGARD_UNLIKELY(impl_ != nullptr && impl_->forked)) forked_step();
    return;
  }
  recorder_->begin_step(step);
  sampled_ = recorder_->sampled();
}

LAGGARD_HOT void Analyzer::end_sampled_step(std::chrono::steady_clock::time_point now,
                                            const Recorder::SlotReadings& readings) noexcept {
  sampled_ = false;
  recorder_->end_step(now, readings);
  if (LAGGARD_LIKELY(!verdict_callbacks_)) return;  // (no cache line of impl_ read)
  Impl& im = *impl_;
  if ((!im.on_straggler.empty() || !im.on_clear.empty()) &&
      im.bg->verdict_seq_seen.load(std::memory_order_acquire) != im.verdict_seq_acted) {
    try {
      std::optional<StragglerVerdict> v = latest_verdict();
      if (v && v->seq != im.verdict_seq_acted) {
        im.verdict_seq_acted = v->seq;
        act_on_verdict(im.on_straggler, im.on_clear, im.active, im.bg->errors, *v);
      }
    } catch (const std::exception& e) {
      im.bg->errors.report("verdict callback", e.what());
    }
  }
}

void Analyzer::set_stream(void* cu_stream) noexcept {
  if (recorder_ == nullptr) return;
  if (TimingBackend* backend = recorder_->backend()) backend->set_stream(cu_stream);
}

Metrics Analyzer::latest_metrics() const noexcept {
  if (!impl_ || impl_->forked) return {};  // (forked: its lock may be held)
  try {
    const Background& b = *impl_->bg;
    std::lock_guard<std::mutex> lock(b.latest_mu);
    Metrics m = b.latest_metrics;
    if (b.latest_verdict) add_verdict_metrics(*b.latest_verdict, !b.analysis_rank, m);
    return m;
  } catch (...) {
    return {};
  }
}

std::optional<Report> Analyzer::latest_report() const noexcept {
  if (!impl_ || impl_->forked) return std::nullopt;
  try {
    const Background& b = *impl_->bg;
    std::lock_guard<std::mutex> lock(b.latest_mu);
    if (b.analysis_rank || !b.latest_verdict) return b.latest_report;
    return report_of(*b.latest_verdict);
  } catch (...) {
    return std::nullopt;
  }
}

std::uint64_t Analyzer::verdict_seq() const noexcept {
  if (!impl_ || impl_->forked) return 0;
  return impl_->bg->verdict_seq_seen.load(std::memory_order_acquire);
}

void Analyzer::on_straggler(VerdictCallback fn) {
  if (impl_ && fn) {
    impl_->on_straggler.push_back(std::move(fn));
    verdict_callbacks_ = true;
  }
}

void Analyzer::on_clear(VerdictCallback fn) {
  if (impl_ && fn) {
    impl_->on_clear.push_back(std::move(fn));
    verdict_callbacks_ = true;
  }
}

std::int64_t Analyzer::stop_step() const noexcept {
  if (!impl_ || impl_->forked) return -1;
  return impl_->bg->stop_step_seen.load(std::memory_order_acquire);
}

std::optional<StragglerVerdict> Analyzer::latest_verdict() const noexcept {
  if (!impl_ || impl_->forked) return std::nullopt;
  try {
    std::lock_guard<std::mutex> lock(impl_->bg->latest_mu);
    return impl_->bg->latest_verdict;
  } catch (...) {
    return std::nullopt;
  }
}

RunSummary Analyzer::summary() const noexcept {
  try {
    if (impl_ && !impl_->forked) {
      std::lock_guard<std::mutex> lock(impl_->bg->analysis_mu);
      if (impl_->bg->analysis) return impl_->bg->analysis->summary();
    }
  } catch (...) {
  }
  return {};
}

AnalyzerCounters Analyzer::counters() const noexcept {
  AnalyzerCounters c;
  if (!impl_) return c;
  const Background& b = *impl_->bg;
  if (impl_->recorder) {
    const RecorderCounters& r = impl_->recorder->counters();
    c.sampled_steps = r.sampled_steps;
    c.samples_emitted = r.samples_emitted;
    c.recorder_dropped =
        r.dropped_stages + r.dropped_intervals + r.dropped_steps + r.dropped_values +
        r.deferred_dropped;
    c.recorder = r;
  }
  const auto get = [](const std::atomic<std::uint64_t>& a) {
    return a.load(std::memory_order_relaxed);
  };
  c.queue_dropped = b.ring.dropped();
  c.queue_pushed = c.samples_emitted >= c.queue_dropped ? c.samples_emitted - c.queue_dropped : 0;
  c.analysis_dropped = b.handoff.dropped();
  c.samples_logged = get(b.samples_logged);
  c.rank_log_lost = get(b.log_lost);
  c.rank_log_left = get(b.log_left);
  c.samples_sent = get(b.samples_sent);
  c.send_dropped = get(b.send_dropped);
  c.samples_received = get(b.samples_received);
  c.late_samples = get(b.late_samples);
  c.malformed_samples = get(b.malformed);
  c.windows = get(b.windows);
  c.incomplete_windows = get(b.incomplete);
  c.reports = get(b.reports);
  c.verdicts_sent = get(b.verdicts_sent);
  c.verdicts_received = get(b.verdicts_received);
  c.malformed_verdicts = get(b.malformed_verdicts);
  c.forwarded_samples = get(b.forwarded);
  c.forward_dropped = get(b.forward_dropped);
  c.background_cpu_ns = get(b.background_cpu_ns) + get(b.log_cpu_ns);
  c.errors = b.errors.total() + impl_->fork_errors;
  c.forked_steps_dropped = impl_->forked_steps;
  c.side_channel_healthy = b.channel_healthy.load(std::memory_order_relaxed);
  c.parent_down = b.parent_down.load(std::memory_order_relaxed);
  c.side_channel_failed = b.transport_failed.load(std::memory_order_relaxed);
  // Every sample handed on (queue_pushed) reached the analysis or is counted here; after
  // close() nothing is still on its way, so whatever was not confirmed is lost.
  if (impl_->closed)
    c.gather_dropped = c.queue_pushed > c.samples_sent ? c.queue_pushed - c.samples_sent : 0;
  else
    c.gather_dropped = c.analysis_dropped + c.send_dropped;
  return c;
}

void Analyzer::add_sink(MetricsSink sink) noexcept {
  if (!impl_ || impl_->forked || !sink) return;
  try {
    add_sink(callback_sink(std::move(sink)));
  } catch (...) {
    impl_->bg->errors.report("sink", "could not add a sink: " + what(std::current_exception()));
  }
}

void Analyzer::add_sink(std::shared_ptr<Sink> sink) noexcept {
  if (!impl_ || impl_->forked || !sink) return;
  try {
    std::lock_guard<std::mutex> lock(impl_->bg->sinks_mu);
    impl_->bg->sinks.push_back(std::move(sink));
  } catch (...) {
    impl_->bg->errors.report("sink", "could not add a sink: " + what(std::current_exception()));
  }
}

int Analyzer::rank() const noexcept { return impl_ ? impl_->bg->rank : 0; }
int Analyzer::world_size() const noexcept { return impl_ ? impl_->bg->world_size : 1; }
bool Analyzer::is_analysis_rank() const noexcept { return impl_ && impl_->bg->analysis_rank; }
const char* Analyzer::backend_name() const noexcept {
  return impl_ ? impl_->backend_name.c_str() : "";
}
const char* Analyzer::transport_name() const noexcept {
  return impl_ ? impl_->bg->transport_name.c_str() : "";
}

void Analyzer::count_error(std::string_view kind, std::string_view message) noexcept {
  if (!impl_) return;
  if (LAGGARD_UNLIKELY(impl_->forked)) {  // the copy's error counter may hold a parent's lock
    ++impl_->fork_errors;
    log_message(LogLevel::warning, std::string(kind) + ": " + std::string(message));
    return;
  }
  impl_->bg->errors.report(kind, message);
}

void Analyzer::debug_fail_transport() noexcept {
  if (impl_) {
    impl_->bg->fail_requested.store(true);
    impl_->bg->run_wake.wake_any();
  }
}

void Analyzer::close() noexcept {
  if (impl_) close(impl_->options.close_timeout_s);
}

void Analyzer::close(double timeout_s) noexcept {
  if (!impl_ || impl_->closed) return;
  impl_->closed = true;
  if (impl_->forked) return;  // a copy without threads: nothing to wait for, nothing to lock
  Background& b = *impl_->bg;
  try {
    if (!(timeout_s >= 0.0) || !std::isfinite(timeout_s)) timeout_s = impl_->options.close_timeout_s;
    const auto start = Clock::now();
    const auto until = start + seconds(timeout_s);
    end_step();  // a sampled step never ended
    Recorder& rec = *impl_->recorder;
    if (rec.backend() != nullptr) {
      // Device timing: poll (never wait on the device) until every sampled step is emitted or
      // dropped, for at most a quarter of the bound. Nobody resolves a deferred value from here
      // on (that is the training thread's, and it is here): a step whose marks have completed
      // goes without the values it still waits for (counted, deferred_dropped).
      const auto drain_until = start + seconds(std::min(1.0, timeout_s / 4));
      while (Clock::now() < drain_until) {
        rec.flush();
        const RecorderCounters& c = rec.counters();
        if (c.samples_emitted + c.dropped_steps >= c.sampled_steps) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    recorder_ = nullptr;
    sampled_ = false;
    {
      std::lock_guard<std::mutex> lock(b.mu);
      b.stop = true;
      b.close_started = start;
      // The background thread keeps a margin to shut the side channel down before we give up.
      b.deadline = start + seconds(timeout_s * 0.8);
    }
    b.stopping.store(true);
    b.cv.notify_all();
    b.wake_all();
    bool finished = false, logged = false;
    {
      std::unique_lock<std::mutex> lock(b.mu);
      // The rank log first: its writer waits on nothing but the disk.
      logged = b.cv.wait_until(lock, until, [&b] { return b.log_done; });
      finished = b.cv.wait_until(lock, until, [&b] { return b.done; });
    }
    if (logged) {
      impl_->log_thread.join();
    } else {
      {
        // The writer writes and counts no more: what it has not written is left, so that
        // queue_pushed = rank_log_written + rank_log_lost + rank_log_left from here on.
        std::lock_guard<std::mutex> lock(b.log_count_mu);
        b.log_abandoned = true;
        const RecorderCounters& r = impl_->recorder->counters();
        const std::uint64_t pushed =
            r.samples_emitted >= b.ring.dropped() ? r.samples_emitted - b.ring.dropped() : 0;
        const std::uint64_t done = b.samples_logged.load() + b.log_lost.load();
        b.log_left.store(pushed > done ? pushed - done : 0);
      }
      impl_->log_thread.detach();  // it holds its own reference to everything it uses
      b.errors.warn("close", "the rank log writer did not finish within " +
                                 std::to_string(timeout_s) + " s (the disk may hang); left behind");
    }
    if (finished) {
      impl_->thread.join();
    } else {
      impl_->thread.detach();  // it holds its own reference to everything it uses
      // What it has not delivered is lost to the analysis: counted (gather_dropped), and a
      // failure of its own.
      b.errors.report("close", "the background thread (side channel, analysis, sinks) did not "
                               "finish within " + std::to_string(timeout_s) +
                               " s (a sink or a peer may block); left behind");
    }
    signal_flush::detach(b.flush_slot);
  } catch (...) {
    recorder_ = nullptr;
    sampled_ = false;
    signal_flush::detach(b.flush_slot);
    b.errors.report("close", what(std::current_exception()));
    if (impl_->log_thread.joinable()) impl_->log_thread.detach();
    if (impl_->thread.joinable()) impl_->thread.detach();
  }
}

}  // namespace laggard
