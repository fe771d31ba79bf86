// One rank's part of the gather tree: its own samples and its children's go up to its parent
// in binary batches; the analysis rank (the root) gets them all. Private; the Analyzer's
// background thread owns it (docs/design.md, "The side channel").
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "laggard/transport.hpp"
#include "live/error_counter.hpp"
#include "transport/sample_codec.hpp"

namespace laggard {

/// Batching, acknowledgements and flow control over a Transport, the same for every transport.
///
/// Every batch to the parent is numbered; the parent acknowledges the highest number received.
/// A rank keeps at most `max_unacked_samples` (times the ranks whose samples it forwards)
/// unacknowledged and drops whole batches beyond that, counting the samples: a slow or dead
/// parent costs bounded memory. When nothing has been acknowledged for `peer_timeout` while
/// batches are outstanding, the parent is presumed down (a warning), and batches are dropped
/// until acknowledgements resume. Verdicts go the other way, down the tree (send_verdict); an
/// acknowledgement owed to a child rides on a verdict going to it in the same turn.
/// Not thread-safe.
class Gather {
 public:
  using Clock = std::chrono::steady_clock;
  struct Options {
    std::size_t max_unacked_samples = 256;
    Clock::duration peer_timeout = std::chrono::seconds(30);
    /// A batch goes out this long after its first sample (0: at the next turn) ...
    Clock::duration batch_period{};
    /// ... or once it holds this many samples.
    std::size_t max_batch_samples = 64;
    /// The root: a verdict goes to a child at most this often (0: every one), the latest
    /// winning; at once when the confirmed set or the stop step changes, and at close.
    Clock::duration verdict_period{};
  };

  Gather(Transport& transport, int rank, int world_size, Options options, ErrorCounter& errors);

  bool root() const noexcept { return links_.parent < 0; }
  const TreeLinks& links() const noexcept { return links_; }

  /// Not the root: one of this rank's own samples, for the next batch.
  void add_own(const StepSample& sample);
  /// What this rank counted so far (sent with its batches).
  void set_own_counts(std::uint64_t dropped, std::uint64_t errors);

  /// One turn: receives (acknowledgements; children's batches, which the root appends to
  /// `samples`/`counts` and every other rank forwards; verdicts) and sends the batch when it is
  /// due (`flush`: now). `samples[0, used)` are valid after the call. What goes down to the
  /// children goes at send_down, the end of the turn.
  void tick(Clock::time_point now, bool flush, std::vector<StepSample>& samples,
            std::size_t& used, std::vector<wire::RankCounts>& counts);
  /// The end of a turn: acknowledges the children's batches and sends them the verdict where it
  /// is due (send_verdict), an acknowledgement riding on a verdict to the same child. `flush`
  /// (close): every verdict waiting goes now.
  void send_down(Clock::time_point now, bool flush);
  /// Not the root: sends the last batch, marked final (after the children's, when they are).
  void send_final(Clock::time_point now);
  /// When the next turn is due without anything arriving: the open batch's flush, the
  /// parent's silence timeout, a verdict held back by `verdict_period`, or `retry` after now
  /// while an acknowledgement or a verdict waits for a link that refused it;
  /// Clock::time_point::max() when nothing is due (the thread may sleep until a message, a
  /// sample or close() wakes it).
  Clock::time_point next_due(Clock::time_point now, Clock::duration retry) const noexcept;

  /// The root: ranks whose samples will never come (their link in the tree broke before their
  /// last batch), since the last call; appended to `out`.
  void take_gone(std::vector<int>& out) {
    out.insert(out.end(), gone_.begin(), gone_.end());
    gone_.clear();
  }
  /// Every child said its last batch was final (or none has children).
  bool children_final() const noexcept { return children_final_ == links_.children.size(); }
  /// Nothing this rank sent is still unacknowledged, nor any acknowledgement owed.
  bool settled() const noexcept;
  /// Gives up on what is unacknowledged (close): its own samples count as dropped.
  void abandon();

  /// The root, after a report: `verdict` is for every child that has not said its last batch,
  /// each with the scores of its own subtree only (`scores` sorted by rank; a rank's subtree is
  /// learnt from the samples that came through it), sent at send_down. The latest wins: a
  /// verdict not sent yet (held back, or refused by its link) is replaced by a newer one. A
  /// verdict goes to a child at once when its confirmed set (the confirmed (rank, cohort,
  /// stage)s, their number, the confirmed ranks among the scores) or its stop step differs
  /// from the last one that child was sent; otherwise at most once per `verdict_period`: with
  /// the next acknowledgement to that child once a period has passed, alone after two.
  /// Every other rank passes on what its parent sends it at the turn it arrives.
  void send_verdict(const StragglerVerdict& verdict, const std::vector<wire::RankScore>& scores);
  /// Not the root: the verdict that arrived since the last call, with this rank's own score
  /// (NaN when the verdict carried none for it); false when none arrived.
  bool take_verdict(StragglerVerdict& out);

  std::uint64_t verdicts_received() const noexcept { return verdicts_received_; }
  std::uint64_t verdicts_sent() const noexcept { return verdicts_sent_; }
  std::uint64_t malformed_verdicts() const noexcept { return malformed_verdicts_; }
  std::uint64_t own_acked() const noexcept { return own_acked_; }
  std::uint64_t own_dropped() const noexcept { return own_dropped_; }
  std::uint64_t forwarded() const noexcept { return forwarded_; }
  std::uint64_t forward_dropped() const noexcept { return forward_dropped_; }
  std::uint64_t malformed() const noexcept { return malformed_; }
  bool parent_down() const noexcept { return presumed_down_; }

 private:
  void receive(Clock::time_point now, std::vector<StepSample>& samples, std::size_t& used,
               std::vector<wire::RankCounts>& counts);
  void on_ack(std::uint64_t seq, Clock::time_point now);
  void on_verdict(const TransportMessage& m);
  void start_batch();
  void flush(Clock::time_point now, bool final);
  std::size_t unacked_limit() const;

  struct Outstanding {
    std::uint64_t seq;
    std::size_t samples;
    std::size_t own;
  };
  struct Child {
    wire::Decoder decoder;
    std::uint64_t received = 0;  // highest batch number received
    std::uint64_t acked = 0;     // highest acknowledged
    bool final = false;
    bool gone = false;          // its link broke: nothing more goes to it
    bool verdict_due = false;   // the latest verdict (down_) is not yet accepted by its link
    std::string sent_key;       // the confirmed set and stop step of the last one it accepted
    Clock::time_point verdict_sent{};  // ... and when
    std::vector<wire::RankScore> scores;  // scratch: its subtree's scores in down_
  };

  Transport& transport_;
  int rank_;
  int world_size_;
  Options options_;
  ErrorCounter& errors_;
  TreeLinks links_;

  wire::Encoder encoder_;
  bool batch_open_ = false;
  Clock::time_point batch_started_{};
  std::size_t batch_own_ = 0;
  std::uint64_t next_seq_ = 1;
  std::deque<Outstanding> outstanding_;
  std::size_t unacked_samples_ = 0;
  std::uint64_t acked_ = 0;
  std::uint64_t final_seq_ = 0;  // the final batch's number, once sent
  bool final_acked() const noexcept { return final_seq_ > 0 && acked_ >= final_seq_; }
  std::vector<std::pair<int, std::string>> broken_;
  Clock::time_point last_progress_{};
  bool presumed_down_ = false;
  bool dropping_ = false;  // batches dropped since the last one delivered
  wire::RankCounts own_counts_;
  std::unordered_map<int, wire::RankCounts> forwarded_counts_;  // latest of each descendant
  bool counts_dirty_ = true;
  std::vector<char> forwarded_ranks_;  // ranks whose samples pass through here
  std::vector<int> via_;               // by rank: the child its samples came through, or -1
  StragglerVerdict verdict_;                    // the latest from the parent (not the root)
  std::vector<wire::RankScore> verdict_scores_;
  bool verdict_new_ = false;
  // The latest verdict for the children (send_verdict), and its confirmed set and stop step as
  // a key (Child::sent_key).
  StragglerVerdict down_;
  std::vector<wire::RankScore> down_scores_;
  std::string down_key_;
  std::vector<std::string> key_parts_;  // scratch
  std::string message_;  // scratch: a message to a child
  std::size_t forwarded_rank_count_ = 0;

  std::vector<int> gone_;  // the root: ranks cut off with a broken link (take_gone)
  std::unordered_map<int, Child> children_;
  std::size_t children_final_ = 0;
  std::vector<TransportMessage> inbox_;
  std::vector<StepSample> scratch_;  // a forwarding rank's decoded samples
  std::string error_;

  std::uint64_t own_acked_ = 0, own_dropped_ = 0, forwarded_ = 0, forward_dropped_ = 0,
                malformed_ = 0, verdicts_received_ = 0, verdicts_sent_ = 0,
                malformed_verdicts_ = 0;
};

}  // namespace laggard
