// "mpi": the side channel over a duplicate of the application's communicator.
//
// Protocol (on the duplicate only; the application's communicator is never used):
//   batch  (tag kTagBatch, rank -> analysis rank): one MPI_CHAR message, a header line
//          "laggard.batch/1 <seq> <dropped> <errors> <final>\n" then the sample lines. <seq> is
//          the sender's running count of samples sent (plus one for its final batch).
//   ack    (tag kTagAck, analysis rank -> rank): two int64, the highest <seq> received.
// A sender keeps at most max_unacked_samples unacknowledged and drops (and counts) beyond that,
// so a slow or dead analysis rank costs bounded memory on both sides. When nothing has been
// acknowledged for peer_timeout_s while samples are outstanding, it presumes the analysis rank
// down and drops until acknowledgements resume. Every call is non-blocking: MPI_Isend,
// MPI_Test, MPI_Iprobe (the MPI_Recv after a successful probe completes at once).
//
// Threads: the background thread calls MPI while the application does, so MPI must provide
// MPI_THREAD_MULTIPLE (MPI_THREAD_SERIALIZED would require the application to serialize its own
// calls with laggard's, which it cannot know about); with less, creation fails and the Analyzer
// runs without a side channel.
//
// Shutdown: requests still in flight are cancelled and freed (never waited for); their buffers
// are kept alive to the end of the process, as MPI may still read them. If the application
// calls MPI_Finalize before closing the Analyzer, a delete callback on MPI_COMM_SELF (which
// MPI_Finalize runs first) releases the communicator and marks the transport dead, so the
// background thread never calls MPI after finalization.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <functional>
#include <limits>
#include <string_view>
#include <chrono>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "laggard/log.hpp"
#include "laggard/mpi.hpp"
#include "laggard/transport.hpp"

namespace laggard {
namespace detail {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kTagBatch = 7301;
constexpr int kTagAck = 7302;
constexpr std::size_t kSendSlots = 16;      // batches in flight from one rank
constexpr int kMaxReceivesPerCall = 256;    // so one call cannot spin forever under a flood
constexpr std::string_view kBatchSchema = "laggard.batch/1";

std::string mpi_error(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(rc);
  return std::string(text, static_cast<std::size_t>(len));
}

const char* thread_level_name(int level) {
  if (level == MPI_THREAD_SINGLE) return "MPI_THREAD_SINGLE";
  if (level == MPI_THREAD_FUNNELED) return "MPI_THREAD_FUNNELED";
  if (level == MPI_THREAD_SERIALIZED) return "MPI_THREAD_SERIALIZED";
  if (level == MPI_THREAD_MULTIPLE) return "MPI_THREAD_MULTIPLE";
  return "an unknown thread level";
}

/// Everything MPI_Finalize's hook may have to release. Every MPI call on `comm` happens under
/// `mu`; once `dead` is set, none happens any more.
struct MpiState : std::enable_shared_from_this<MpiState> {
  std::mutex mu;
  bool dead = false;
  bool finalized_first = false;  // dead because MPI_Finalize ran before shutdown
  MPI_Comm comm = MPI_COMM_NULL;
  std::array<MPI_Request, kSendSlots> send_req{};
  std::array<std::string, kSendSlots> send_buf;
  std::vector<MPI_Request> ack_req;  // analysis rank: one per rank
  std::vector<std::array<std::int64_t, 2>> ack_buf;

  MpiState() { send_req.fill(MPI_REQUEST_NULL); }
};

struct FinalizeHook {
  std::mutex mu;
  bool installed = false;
  bool finalizing = false;
  std::vector<std::weak_ptr<MpiState>> live;
  std::vector<std::shared_ptr<MpiState>> graveyard;  // states with requests MPI may still use
};

FinalizeHook& hook() {
  static auto* h = new FinalizeHook;  // never destroyed: MPI_Finalize may run during exit
  return *h;
}

/// Cancels and frees what is in flight and frees the communicator. Caller holds s.mu.
/// Returns true when some request was still active (its buffer must outlive the process).
bool release_locked(MpiState& s) {
  if (s.dead) return false;
  bool active = false;
  auto drop = [&active](MPI_Request& req) {
    if (req == MPI_REQUEST_NULL) return;
    int done = 0;
    if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done) return;
    active = true;
    MPI_Cancel(&req);
    MPI_Request_free(&req);  // never wait: the peer may be gone
    req = MPI_REQUEST_NULL;
  };
  for (auto& req : s.send_req) drop(req);
  for (auto& req : s.ack_req) drop(req);
  if (s.comm != MPI_COMM_NULL) MPI_Comm_free(&s.comm);
  s.dead = true;
  return active;
}

// MPI_Finalize deletes MPI_COMM_SELF's attributes before anything else: last chance to stop.
int on_finalize(MPI_Comm, int, void*, void*) {
  FinalizeHook& h = hook();
  std::lock_guard<std::mutex> lock(h.mu);
  h.finalizing = true;
  for (auto& weak : h.live) {
    if (auto s = weak.lock()) {
      std::lock_guard<std::mutex> state_lock(s->mu);
      if (!s->dead) {
        s->finalized_first = true;
        if (release_locked(*s)) h.graveyard.push_back(s);
      }
    }
  }
  h.live.clear();
  return MPI_SUCCESS;
}

class MpiTransport final : public Transport {
 public:
  explicit MpiTransport(const TransportSetup& setup)
      : analysis_rank_(setup.analysis_rank),
        max_unacked_(setup.max_unacked_samples),
        peer_timeout_(std::chrono::duration_cast<Clock::duration>(
            std::chrono::duration<double>(std::max(0.0, setup.peer_timeout_s)))),
        warn_(setup.warn),
        s_(std::make_shared<MpiState>()) {
    int initialized = 0;
    int finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (!initialized)
      throw std::runtime_error("MPI is not initialized: call MPI_Init_thread before creating the "
                               "Analyzer");
    if (finalized) throw std::runtime_error("MPI is already finalized");
    int provided = MPI_THREAD_SINGLE;
    MPI_Query_thread(&provided);
    if (provided < MPI_THREAD_MULTIPLE)
      throw std::runtime_error(
          std::string("MPI provides ") + thread_level_name(provided) +
          ", but the side channel's background thread calls MPI while the application does, "
          "which needs MPI_THREAD_MULTIPLE (initialize with MPI_Init_thread(..., "
          "MPI_THREAD_MULTIPLE, ...))");
    MPI_Comm app = setup.mpi_comm == -1 ? MPI_COMM_WORLD
                                        : MPI_Comm_f2c(static_cast<MPI_Fint>(setup.mpi_comm));
    if (app == MPI_COMM_NULL) throw std::runtime_error("the application communicator is null");
    {
      FinalizeHook& h = hook();
      std::lock_guard<std::mutex> lock(h.mu);
      if (h.finalizing) throw std::runtime_error("MPI is being finalized");
      if (!h.installed) {
        int keyval = MPI_KEYVAL_INVALID;
        if (MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, on_finalize, &keyval, nullptr) ==
                MPI_SUCCESS &&
            MPI_Comm_set_attr(MPI_COMM_SELF, keyval, nullptr) == MPI_SUCCESS)
          h.installed = true;
      }
    }
    // Collective over the application's communicator: every rank constructs its Analyzer here.
    const int rc = MPI_Comm_dup(app, &s_->comm);
    if (rc != MPI_SUCCESS) throw std::runtime_error("MPI_Comm_dup failed: " + mpi_error(rc));
    // Errors on laggard's communicator come back as codes (and become warnings); the default
    // handler would abort the application.
    MPI_Comm_set_errhandler(s_->comm, MPI_ERRORS_RETURN);
    MPI_Comm_set_name(s_->comm, const_cast<char*>("laggard side channel"));
    MPI_Comm_rank(s_->comm, &rank_);
    MPI_Comm_size(s_->comm, &size_);
    if (analysis_rank_ < 0 || analysis_rank_ >= size_) {
      std::lock_guard<std::mutex> lock(s_->mu);
      release_locked(*s_);
      throw std::invalid_argument("analysis_rank " + std::to_string(analysis_rank_) +
                                  " is not a rank of the communicator (size " +
                                  std::to_string(size_) + ")");
    }
    if (rank_ == analysis_rank_) {
      s_->ack_req.assign(static_cast<std::size_t>(size_), MPI_REQUEST_NULL);
      s_->ack_buf.assign(static_cast<std::size_t>(size_), {0, 0});
      received_.assign(static_cast<std::size_t>(size_), 0);
      acked_to_.assign(static_cast<std::size_t>(size_), 0);
    }
    FinalizeHook& h = hook();
    std::lock_guard<std::mutex> lock(h.mu);
    h.live.push_back(s_);
  }

  ~MpiTransport() override {
    try {
      shutdown();
    } catch (...) {
    }
  }

  const char* name() const noexcept override { return "mpi"; }
  int rank() const noexcept override { return rank_; }
  int world_size() const noexcept override { return size_; }

  bool send(SampleBatch& batch) override {
    std::lock_guard<std::mutex> lock(s_->mu);
    if (!usable_locked()) return false;
    progress_locked();
    if (presumed_down_ || !usable_locked()) return false;
    const std::uint64_t outstanding = sent_ - acked_;
    if (batch.samples > 0 && outstanding + batch.samples > max_unacked_) {
      warn("analysis rank " + std::to_string(analysis_rank_) + " is behind (" +
           std::to_string(outstanding) + " samples unacknowledged); samples are dropped");
      return false;
    }
    std::size_t slot = kSendSlots;
    for (std::size_t i = 0; i < kSendSlots; ++i) {
      if (s_->send_req[i] == MPI_REQUEST_NULL) {
        slot = i;
        break;
      }
    }
    if (slot == kSendSlots) {
      warn("all " + std::to_string(kSendSlots) + " sends to analysis rank " +
           std::to_string(analysis_rank_) + " are still in flight; samples are dropped");
      return false;
    }
    const std::uint64_t seq = sent_ + batch.samples + (batch.final ? 1 : 0);
    std::string& buf = s_->send_buf[slot];
    buf.clear();
    buf.append(kBatchSchema)
        .append(" ")
        .append(std::to_string(seq))
        .append(" ")
        .append(std::to_string(batch.dropped))
        .append(" ")
        .append(std::to_string(batch.errors))
        .append(batch.final ? " 1\n" : " 0\n")
        .append(batch.lines);
    if (buf.size() > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
      warn("a batch of " + std::to_string(buf.size()) + " bytes is too large; dropped");
      return false;
    }
    const int rc = MPI_Isend(buf.data(), static_cast<int>(buf.size()), MPI_CHAR, analysis_rank_,
                             kTagBatch, s_->comm, &s_->send_req[slot]);
    if (rc != MPI_SUCCESS) {
      broken("MPI_Isend failed: " + mpi_error(rc));
      return false;
    }
    if (sent_ == acked_) silent_since_ = Clock::now();  // the silence clock starts now
    sent_ = seq;
    return true;
  }

  void receive(std::vector<SampleBatch>& out) override {
    std::lock_guard<std::mutex> lock(s_->mu);
    if (!usable_locked() || rank_ != analysis_rank_) return;
    for (int i = 0; i < kMaxReceivesPerCall; ++i) {
      int flag = 0;
      MPI_Status status;
      int rc = MPI_Iprobe(MPI_ANY_SOURCE, kTagBatch, s_->comm, &flag, &status);
      if (rc != MPI_SUCCESS) return broken("MPI_Iprobe failed: " + mpi_error(rc));
      if (!flag) break;
      int count = 0;
      MPI_Get_count(&status, MPI_CHAR, &count);
      recv_buf_.resize(static_cast<std::size_t>(std::max(0, count)));
      rc = MPI_Recv(recv_buf_.data(), count, MPI_CHAR, status.MPI_SOURCE, kTagBatch, s_->comm,
                    MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) return broken("MPI_Recv failed: " + mpi_error(rc));
      SampleBatch batch;
      if (!parse_batch(status.MPI_SOURCE, batch)) {
        warn("a malformed batch from rank " + std::to_string(status.MPI_SOURCE) +
             " was discarded");
        continue;
      }
      out.push_back(std::move(batch));
    }
    progress_locked();
  }

  void progress() override {
    std::lock_guard<std::mutex> lock(s_->mu);
    if (usable_locked()) progress_locked();
  }

  bool settled() const override {
    std::lock_guard<std::mutex> lock(s_->mu);
    if (s_->dead || failed_ || presumed_down_) return true;  // given up on
    for (const auto& req : s_->send_req)
      if (req != MPI_REQUEST_NULL) return false;
    for (const auto& req : s_->ack_req)
      if (req != MPI_REQUEST_NULL) return false;
    for (std::size_t r = 0; r < received_.size(); ++r)
      if (received_[r] > acked_to_[r]) return false;
    return acked_ >= sent_;
  }

  bool healthy() const override {
    std::lock_guard<std::mutex> lock(s_->mu);
    return !s_->dead && !failed_ && !presumed_down_;
  }

  void fail() override {
    std::lock_guard<std::mutex> lock(s_->mu);
    failed_ = true;
  }

  void shutdown() override {
    if (shut_down_) return;
    shut_down_ = true;
    bool keep = false;
    {
      std::lock_guard<std::mutex> lock(s_->mu);
      if (!s_->dead) keep = release_locked(*s_);
    }
    FinalizeHook& h = hook();
    std::lock_guard<std::mutex> lock(h.mu);
    if (keep) h.graveyard.push_back(s_);
    h.live.erase(std::remove_if(h.live.begin(), h.live.end(),
                                [this](const std::weak_ptr<MpiState>& w) {
                                  auto s = w.lock();
                                  return !s || s == s_;
                                }),
                 h.live.end());
  }

 private:
  bool usable_locked() {
    if (s_->dead) {
      if (s_->finalized_first && !reported_finalize_) {
        reported_finalize_ = true;
        warn("MPI_Finalize ran before the Analyzer was closed; the side channel stopped");
      }
      return false;
    }
    return !failed_;
  }

  void broken(const std::string& why) {
    failed_ = true;
    warn(why + "; the side channel stopped (the rank log still gets every sample)");
  }

  void warn(const std::string& message) {
    if (warn_) warn_("side channel", message);
  }

  bool parse_batch(int source, SampleBatch& out) {
    const std::string_view text(recv_buf_);
    const std::size_t eol = text.find('\n');
    if (eol == std::string_view::npos) return false;
    std::string_view header = text.substr(0, eol);
    if (header.substr(0, kBatchSchema.size()) != kBatchSchema) return false;
    header.remove_prefix(kBatchSchema.size());
    std::uint64_t fields[4] = {0, 0, 0, 0};
    for (auto& field : fields) {
      while (!header.empty() && header.front() == ' ') header.remove_prefix(1);
      const auto r = std::from_chars(header.data(), header.data() + header.size(), field);
      if (r.ec != std::errc()) return false;
      header.remove_prefix(static_cast<std::size_t>(r.ptr - header.data()));
    }
    out.rank = source;
    out.dropped = fields[1];
    out.errors = fields[2];
    out.final = fields[3] != 0;
    out.lines.assign(text.substr(eol + 1));
    out.samples = static_cast<std::uint64_t>(std::count(out.lines.begin(), out.lines.end(), '\n'));
    auto& seen = received_[static_cast<std::size_t>(source)];
    seen = std::max<std::uint64_t>(seen, fields[0]);
    return true;
  }

  void progress_locked() {
    for (auto& req : s_->send_req) {
      if (req == MPI_REQUEST_NULL) continue;
      int done = 0;
      const int rc = MPI_Test(&req, &done, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) return broken("MPI_Test failed: " + mpi_error(rc));
    }
    const auto now = Clock::now();
    if (rank_ == analysis_rank_) {
      send_acks_locked();
      return;
    }
    for (int i = 0; i < kMaxReceivesPerCall; ++i) {
      int flag = 0;
      MPI_Status status;
      int rc = MPI_Iprobe(analysis_rank_, kTagAck, s_->comm, &flag, &status);
      if (rc != MPI_SUCCESS) return broken("MPI_Iprobe failed: " + mpi_error(rc));
      if (!flag) break;
      std::int64_t ack[2] = {0, 0};
      rc = MPI_Recv(ack, 2, MPI_INT64_T, analysis_rank_, kTagAck, s_->comm, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) return broken("MPI_Recv failed: " + mpi_error(rc));
      const auto value = static_cast<std::uint64_t>(std::max<std::int64_t>(0, ack[0]));
      if (value > acked_) {
        acked_ = value;
        silent_since_ = now;
        if (presumed_down_) {
          presumed_down_ = false;
          log_message(LogLevel::info, "laggard side channel: analysis rank " +
                                          std::to_string(analysis_rank_) +
                                          " acknowledges again; sending resumes");
        }
      }
    }
    if (!presumed_down_ && sent_ > acked_ && now - silent_since_ > peer_timeout_) {
      presumed_down_ = true;
      warn("analysis rank " + std::to_string(analysis_rank_) + " acknowledged nothing for " +
           std::to_string(std::chrono::duration<double>(now - silent_since_).count()) + " s (" +
           std::to_string(sent_ - acked_) +
           " samples outstanding): presumed down; samples are dropped until it answers again "
           "(the rank log still gets every sample)");
    }
  }

  void send_acks_locked() {
    for (std::size_t r = 0; r < received_.size(); ++r) {
      MPI_Request& req = s_->ack_req[r];
      if (req != MPI_REQUEST_NULL) {
        int done = 0;
        const int rc = MPI_Test(&req, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return broken("MPI_Test failed: " + mpi_error(rc));
        if (!done) continue;  // one acknowledgement in flight per rank; the next one coalesces
      }
      if (received_[r] <= acked_to_[r]) continue;
      s_->ack_buf[r] = {static_cast<std::int64_t>(received_[r]), 0};
      const int rc = MPI_Isend(s_->ack_buf[r].data(), 2, MPI_INT64_T, static_cast<int>(r),
                               kTagAck, s_->comm, &req);
      if (rc != MPI_SUCCESS) return broken("MPI_Isend failed: " + mpi_error(rc));
      acked_to_[r] = received_[r];
    }
  }

  int rank_ = 0;
  int size_ = 1;
  int analysis_rank_ = 0;
  std::size_t max_unacked_;
  Clock::duration peer_timeout_;
  std::function<void(std::string_view, std::string_view)> warn_;
  std::shared_ptr<MpiState> s_;
  bool failed_ = false;
  bool presumed_down_ = false;
  bool reported_finalize_ = false;
  bool shut_down_ = false;
  // sender
  std::uint64_t sent_ = 0;
  std::uint64_t acked_ = 0;
  Clock::time_point silent_since_{};
  // analysis rank
  std::vector<std::uint64_t> received_;  // highest seq received, per rank
  std::vector<std::uint64_t> acked_to_;  // highest seq acknowledged, per rank
  std::string recv_buf_;
};

}  // namespace

}  // namespace detail

void register_mpi_transport() {
  register_transport("mpi", [](const TransportSetup& setup) -> std::unique_ptr<Transport> {
    return std::make_unique<detail::MpiTransport>(setup);
  });
}

}  // namespace laggard
