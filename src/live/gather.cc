#include "live/gather.hpp"

#include <algorithm>
#include <limits>
#include <utility>

#include "laggard/log.hpp"

namespace laggard {

Gather::Gather(Transport& transport, int rank, int world_size, Options options,
               ErrorCounter& errors)
    : transport_(transport),
      rank_(rank),
      world_size_(std::max(1, world_size)),
      options_(options),
      errors_(errors),
      links_(transport.links()),
      forwarded_ranks_(static_cast<std::size_t>(std::max(1, world_size)), 0),
      via_(static_cast<std::size_t>(std::max(1, world_size)), -1) {
  own_counts_.rank = rank;
  for (int child : links_.children) children_.try_emplace(child);
}

void Gather::start_batch() {
  encoder_.begin(next_seq_);
  batch_open_ = true;
  batch_started_ = Clock::now();
  batch_own_ = 0;
}

void Gather::add_own(const StepSample& sample) {
  if (root()) return;
  if (!batch_open_) start_batch();
  encoder_.add(sample);
  ++batch_own_;
}

void Gather::set_own_counts(std::uint64_t dropped, std::uint64_t errors) {
  if (own_counts_.dropped != dropped || own_counts_.errors != errors) counts_dirty_ = true;
  own_counts_.dropped = dropped;
  own_counts_.errors = errors;
}

std::size_t Gather::unacked_limit() const {
  return options_.max_unacked_samples * (1 + forwarded_rank_count_);
}

void Gather::tick(Clock::time_point now, bool flush_now, std::vector<StepSample>& samples,
                  std::size_t& used, std::vector<wire::RankCounts>& counts) {
  transport_.progress();
  // Broken links first, then what arrived before they broke (a last acknowledgement, a final
  // batch), so that a peer that closed after its last word is not taken for a failure.
  broken_.clear();
  transport_.broken_links(broken_);
  receive(now, samples, used, counts);
  for (const auto& [peer, why] : broken_) {
    const auto child = children_.find(peer);
    if (child != children_.end()) child->second.gone = true;
    const bool said_last = (peer == links_.parent && final_acked()) ||
                           (child != children_.end() && child->second.final);
    if (said_last) {
      log_message(LogLevel::debug, "laggard side channel: the link to rank " +
                                       std::to_string(peer) + " closed after its last batch");
      continue;
    }
    errors_.report("side channel", why);
    if (peer == links_.parent) presumed_down_ = true;  // nothing it was sent can be confirmed
    if (child != children_.end() && !child->second.final) {
      // Nothing more comes from its subtree: it and the ranks whose samples came through it
      // are done, so that nobody waits for them at close (a killed rank never says final).
      child->second.final = true;
      ++children_final_;
      for (int r = 0; r < world_size_; ++r) {
        if (r != peer && via_[static_cast<std::size_t>(r)] != peer) continue;
        if (root()) {
          gone_.push_back(r);
        } else {
          wire::RankCounts& c = forwarded_counts_[r];
          c.rank = r;
          c.final = true;
          counts_dirty_ = true;
        }
      }
    }
  }
  if (root()) return;
  if (!presumed_down_ && !outstanding_.empty() && now - last_progress_ > options_.peer_timeout) {
    presumed_down_ = true;
    errors_.report("side channel",
                   "rank " + std::to_string(links_.parent) + " (this rank's parent in the gather "
                   "tree) acknowledged nothing for " +
                       std::to_string(std::chrono::duration<double>(now - last_progress_).count()) +
                       " s (" + std::to_string(unacked_samples_) +
                       " samples outstanding): presumed down; samples are dropped until it "
                       "answers again (the rank log still gets every sample)");
  }
  const bool due = batch_open_ && (flush_now || now - batch_started_ >= options_.batch_period ||
                                   encoder_.samples() >= options_.max_batch_samples);
  if (due || (counts_dirty_ && (flush_now || outstanding_.empty()))) flush(now, false);
}

Gather::Clock::time_point Gather::next_due(Clock::time_point now,
                                           Clock::duration retry) const noexcept {
  Clock::time_point due = Clock::time_point::max();
  const bool healthy = transport_.healthy();
  const Clock::duration period = root() ? options_.verdict_period : Clock::duration::zero();
  for (const auto& [peer, child] : children_) {
    if (child.gone) continue;
    if (child.received > child.acked) due = std::min(due, now + retry);  // refused
    if (healthy && child.verdict_due && !child.final) {
      // Held back until two periods after the last (an acknowledgement may take it sooner);
      // one that should have gone already was refused.
      const Clock::time_point at =
          child.sent_key != down_key_ ? now : child.verdict_sent + 2 * period;
      due = std::min(due, at > now ? at : now + retry);
    }
  }
  if (root()) return due;
  if (batch_open_)
    due = std::min(due, encoder_.samples() >= options_.max_batch_samples
                            ? now
                            : batch_started_ + options_.batch_period);
  if (!presumed_down_ && !outstanding_.empty())
    due = std::min(due, last_progress_ + options_.peer_timeout + std::chrono::milliseconds(1));
  return due;
}

void Gather::send_final(Clock::time_point now) {
  if (root()) return;
  counts_dirty_ = true;
  flush(now, true);
  if (!outstanding_.empty()) final_seq_ = outstanding_.back().seq;
}

void Gather::flush(Clock::time_point now, bool final) {
  if (!batch_open_) start_batch();
  own_counts_.final = final;
  encoder_.add(own_counts_);
  for (const auto& [r, c] : forwarded_counts_) encoder_.add(c);
  const std::size_t samples = encoder_.samples();
  const std::size_t own = batch_own_;
  batch_open_ = false;
  batch_own_ = 0;
  const auto drop = [&](const std::string& why) {
    encoder_.rollback();
    own_dropped_ += own;
    forward_dropped_ += samples - own;
    counts_dirty_ = true;
    if (samples > 0 || final) {
      // The samples are counted (send_dropped, forward_dropped); the first drop after a
      // delivery is also a counted failure, the rest of the episode a warning.
      if (!dropping_) errors_.report("side channel", why);
      else errors_.warn("side channel", why);
      dropping_ = true;
    }
  };
  if (!transport_.healthy()) return drop("the side channel is down; samples are dropped");
  if (presumed_down_)
    return drop("rank " + std::to_string(links_.parent) +
                " is presumed down; samples are dropped (the rank log still has them)");
  if (samples > 0 && unacked_samples_ + samples > unacked_limit())
    return drop("rank " + std::to_string(links_.parent) + " is behind (" +
                std::to_string(unacked_samples_) + " samples unacknowledged); " +
                std::to_string(samples) + " samples are dropped");
  if (outstanding_.empty()) last_progress_ = now;  // the silence clock starts now
  bool ok = false;
  try {
    ok = transport_.send(links_.parent, encoder_.message());
  } catch (...) {
    encoder_.rollback();
    own_dropped_ += own;
    forward_dropped_ += samples - own;
    counts_dirty_ = true;
    throw;  // the Analyzer counts it
  }
  if (!ok)
    return drop("the link to rank " + std::to_string(links_.parent) +
                " refused a batch; its samples are dropped");
  encoder_.commit();
  dropping_ = false;
  outstanding_.push_back(Outstanding{next_seq_, samples, own});
  unacked_samples_ += samples;
  ++next_seq_;
  counts_dirty_ = false;
}

void Gather::receive(Clock::time_point now, std::vector<StepSample>& samples, std::size_t& used,
                     std::vector<wire::RankCounts>& counts) {
  inbox_.clear();
  transport_.receive(inbox_);
  for (TransportMessage& m : inbox_) {
    wire::Decoder::Header h;
    if (!wire::Decoder::header(m.bytes, h, error_)) {
      ++malformed_;
      errors_.warn("malformed sample", "a message from rank " + std::to_string(m.peer) +
                                           " was discarded: " + error_);
      continue;
    }
    if (h.kind == wire::Kind::ack) {
      if (m.peer == links_.parent) on_ack(h.seq, now);
      continue;
    }
    if (h.ack > 0 && m.peer == links_.parent) on_ack(h.ack, now);  // riding on a verdict
    if (h.kind == wire::Kind::verdict) {
      on_verdict(m);
      continue;
    }
    Child& child = children_[m.peer];
    child.received = std::max(child.received, h.seq);
    const std::size_t first_count = counts.size();
    bool ok;
    const auto came_through = [&](int r) {
      if (r >= 0 && r < world_size_) via_[static_cast<std::size_t>(r)] = m.peer;
    };
    if (root()) {
      const std::size_t first = used;
      ok = child.decoder.decode(m.bytes, samples, used, counts, error_);
      for (std::size_t i = first; i < used; ++i) came_through(samples[i].rank);
    } else {
      std::size_t n = 0;
      ok = child.decoder.decode(m.bytes, scratch_, n, counts, error_);
      if (n > 0 && !batch_open_) start_batch();
      for (std::size_t i = 0; i < n; ++i) {
        const StepSample& s = scratch_[i];
        encoder_.add(s);
        came_through(s.rank);
        if (s.rank >= 0 && s.rank < world_size_ && !forwarded_ranks_[static_cast<std::size_t>(s.rank)]) {
          forwarded_ranks_[static_cast<std::size_t>(s.rank)] = 1;
          ++forwarded_rank_count_;
        }
      }
      forwarded_ += n;
    }
    if (!ok) {
      ++malformed_;
      errors_.warn("malformed sample", "a batch from rank " + std::to_string(m.peer) +
                                           " was cut short: " + error_);
    }
    for (std::size_t i = first_count; i < counts.size(); ++i) {
      const wire::RankCounts& c = counts[i];
      if (c.rank == m.peer && c.final && !child.final) {
        child.final = true;
        if (std::binary_search(links_.children.begin(), links_.children.end(), m.peer))
          ++children_final_;
      }
    }
    if (!root()) {  // forwarded: the latest of each rank goes up with the next batch
      for (std::size_t i = first_count; i < counts.size(); ++i)
        forwarded_counts_[counts[i].rank] = counts[i];
      if (counts.size() > first_count) counts_dirty_ = true;
      counts.resize(first_count);
    }
  }
}

void Gather::on_ack(std::uint64_t seq, Clock::time_point now) {
  if (seq <= acked_) return;
  acked_ = seq;
  last_progress_ = now;
  while (!outstanding_.empty() && outstanding_.front().seq <= acked_) {
    own_acked_ += outstanding_.front().own;
    unacked_samples_ -= outstanding_.front().samples;
    outstanding_.pop_front();
  }
  if (presumed_down_) {
    presumed_down_ = false;
    log_message(LogLevel::info, "laggard side channel: rank " + std::to_string(links_.parent) +
                                    " acknowledges again; sending resumes");
  }
}

void Gather::on_verdict(const TransportMessage& m) {
  if (m.peer != links_.parent) {
    ++malformed_verdicts_;
    errors_.warn("malformed verdict", "a verdict from rank " + std::to_string(m.peer) +
                                          ", which is not this rank's parent, was discarded");
    return;
  }
  StragglerVerdict verdict;
  std::vector<wire::RankScore> scores;
  if (!wire::decode_verdict(m.bytes, verdict, scores, error_)) {
    ++malformed_verdicts_;
    errors_.warn("malformed verdict", "a verdict from rank " + std::to_string(m.peer) +
                                          " was discarded: " + error_);
    return;  // the previous verdict stands
  }
  verdict_ = std::move(verdict);
  verdict_scores_ = std::move(scores);
  ++verdicts_received_;
  verdict_new_ = true;
  send_verdict(verdict_, verdict_scores_);
}

namespace {

// What makes a verdict go at once: its confirmed (rank, cohort, stage)s in any order, their
// number, the confirmed ranks among the scores, and the stop step.
void confirmed_key(const StragglerVerdict& v, const std::vector<wire::RankScore>& scores,
                   std::vector<std::string>& parts, std::string& key) {
  parts.clear();
  for (const VerdictFinding& f : v.confirmed)
    parts.push_back(std::to_string(f.rank) + '\x1f' + f.cohort + '\x1f' + f.stage + '\x1e');
  std::sort(parts.begin(), parts.end());
  key = std::to_string(v.stop_step) + ' ' + std::to_string(v.num_confirmed) + '\x1e';
  for (const std::string& p : parts) key += p;
  for (const wire::RankScore& s : scores)
    if (s.confirmed) key += std::to_string(s.rank) + ' ';
}

}  // namespace

void Gather::send_verdict(const StragglerVerdict& verdict, const std::vector<wire::RankScore>& scores) {
  if (children_.empty()) return;
  down_ = verdict;
  down_scores_ = scores;
  confirmed_key(down_, down_scores_, key_parts_, down_key_);
  for (auto& [peer, child] : children_)
    if (!child.final) child.verdict_due = true;  // one that is closing reads no more verdicts
}

void Gather::send_down(Clock::time_point now, bool flush) {
  const bool healthy = transport_.healthy();
  const Clock::duration period = root() ? options_.verdict_period : Clock::duration::zero();
  bool bucketed = false;
  for (auto& [peer, child] : children_) {
    if (child.gone) continue;
    const bool ack = child.received > child.acked;
    const bool verdict = healthy && child.verdict_due && !child.final &&
                         (flush || child.sent_key != down_key_ ||
                          now - child.verdict_sent >= 2 * period ||
                          (ack && now - child.verdict_sent >= period));
    if (verdict) {
      if (!bucketed) {  // each child's subtree's scores, by the subtrees known now
        bucketed = true;
        for (auto& [p, c] : children_) c.scores.clear();
        for (const wire::RankScore& s : down_scores_) {
          if (s.rank < 0 || s.rank >= world_size_) continue;
          const int via = via_[static_cast<std::size_t>(s.rank)];
          if (via < 0) continue;
          const auto it = children_.find(via);
          if (it != children_.end()) it->second.scores.push_back(s);
        }
      }
      wire::encode_verdict(down_, child.scores, message_, ack ? child.received : 0);
      if (transport_.send(peer, message_)) {  // the transport may take the message
        ++verdicts_sent_;
        child.verdict_due = false;
        child.sent_key = down_key_;
        child.verdict_sent = now;
        if (ack) child.acked = child.received;
        continue;
      }
    }
    if (ack) {
      message_ = wire::ack_message(child.received);
      if (transport_.send(peer, message_)) child.acked = child.received;
    }
  }
}

bool Gather::take_verdict(StragglerVerdict& out) {
  if (!verdict_new_) return false;
  verdict_new_ = false;
  out = verdict_;
  out.rank = rank_;
  out.score = std::numeric_limits<double>::quiet_NaN();
  out.self_confirmed = false;
  const auto it = std::lower_bound(
      verdict_scores_.begin(), verdict_scores_.end(), rank_,
      [](const wire::RankScore& s, int r) { return s.rank < r; });
  if (it != verdict_scores_.end() && it->rank == rank_) {
    out.score = it->score;
    out.self_confirmed = it->confirmed;
  }
  for (const VerdictFinding& f : out.confirmed)
    if (f.rank == rank_) out.self_confirmed = true;
  return true;
}

bool Gather::settled() const noexcept {
  for (const auto& [peer, child] : children_)
    if (child.received > child.acked && !child.gone) return false;  // a dead child's is not owed
  return root() || (outstanding_.empty() && !batch_open_) || presumed_down_;
}

void Gather::abandon() {
  for (const Outstanding& o : outstanding_) {
    own_dropped_ += o.own;
    forward_dropped_ += o.samples - o.own;
  }
  outstanding_.clear();
  unacked_samples_ = 0;
  if (batch_open_) {
    own_dropped_ += batch_own_;
    forward_dropped_ += encoder_.samples() - batch_own_;
    encoder_.rollback();
    batch_open_ = false;
    batch_own_ = 0;
  }
}

}  // namespace laggard
