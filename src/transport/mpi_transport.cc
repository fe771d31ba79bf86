// "mpi": the side channel over a duplicate of the application's communicator.
//
// Messages: one MPI_BYTE message each (tag kTag), MPI_Isend to the peer, MPI_Iprobe and MPI_Recv
// (after a successful probe, it completes at once) from any source, on the duplicate only; the
// application's communicator is never used. The gather tree (what goes to whom, the
// acknowledgements and timeouts) is the Analyzer's, the same over every transport; this file
// only builds the tree's host groups: MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) splits the ranks
// by host (node), and every rank learns each rank's host through one MPI_Allgather of an int at
// creation. A rank then exchanges messages only with its parent and children, so MPI connects
// (lazily, as Open MPI and MPICH do) only those pairs.
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

constexpr int kTag = 7303;
constexpr std::size_t kSendSlots = 256;     // messages in flight from one rank, all peers
constexpr std::size_t kPerPeer = 16;        // ... to one peer
constexpr int kMaxReceivesPerCall = 1024;   // so one call cannot spin forever under a flood

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
  std::array<int, kSendSlots> send_peer{};

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
      : analysis_rank_(setup.analysis_rank), warn_(setup.warn), s_(std::make_shared<MpiState>()) {
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
    int rc = MPI_Comm_dup(app, &s_->comm);
    if (rc != MPI_SUCCESS) throw std::runtime_error("MPI_Comm_dup failed: " + mpi_error(rc));
    // Errors on laggard's communicator come back as codes (and become warnings); the default
    // handler would abort the application.
    MPI_Comm_set_errhandler(s_->comm, MPI_ERRORS_RETURN);
    MPI_Comm_set_name(s_->comm, const_cast<char*>("laggard side channel"));
    MPI_Comm_rank(s_->comm, &rank_);
    MPI_Comm_size(s_->comm, &size_);
    const auto give_up = [this](const std::string& why) {
      std::lock_guard<std::mutex> lock(s_->mu);
      release_locked(*s_);
      throw std::runtime_error(why);
    };
    if (analysis_rank_ < 0 || analysis_rank_ >= size_) {
      std::lock_guard<std::mutex> lock(s_->mu);
      release_locked(*s_);
      throw std::invalid_argument("analysis_rank " + std::to_string(analysis_rank_) +
                                  " is not a rank of the communicator (size " +
                                  std::to_string(size_) + ")");
    }
    // Host groups, collectively: a host is named by the lowest rank on it.
    MPI_Comm node = MPI_COMM_NULL;
    rc = MPI_Comm_split_type(s_->comm, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node);
    if (rc != MPI_SUCCESS) give_up("MPI_Comm_split_type failed: " + mpi_error(rc));
    int host = rank_;
    rc = MPI_Allreduce(&rank_, &host, 1, MPI_INT, MPI_MIN, node);
    MPI_Comm_free(&node);
    if (rc != MPI_SUCCESS) give_up("MPI_Allreduce (host groups) failed: " + mpi_error(rc));
    std::vector<int> host_of(static_cast<std::size_t>(size_));
    rc = MPI_Allgather(&host, 1, MPI_INT, host_of.data(), 1, MPI_INT, s_->comm);
    if (rc != MPI_SUCCESS) give_up("MPI_Allgather (host groups) failed: " + mpi_error(rc));
    if (setup.ranks_per_host > 0)  // told otherwise: hosts of that many consecutive ranks
      for (int r = 0; r < size_; ++r) host_of[static_cast<std::size_t>(r)] = r / setup.ranks_per_host;
    links_ = gather_tree(rank_, size_, analysis_rank_, host_of, setup.fan_out);
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
  TreeLinks links() const override { return links_; }

  bool send(int peer, std::string& message) override {
    std::lock_guard<std::mutex> lock(s_->mu);
    if (!usable_locked() || peer < 0 || peer >= size_) return false;
    progress_locked();
    if (!usable_locked()) return false;
    std::size_t slot = kSendSlots, to_peer = 0;
    for (std::size_t i = 0; i < kSendSlots; ++i) {
      if (s_->send_req[i] == MPI_REQUEST_NULL) {
        if (slot == kSendSlots) slot = i;
      } else if (s_->send_peer[i] == peer) {
        ++to_peer;
      }
    }
    if (slot == kSendSlots || to_peer >= kPerPeer) return false;  // the caller counts it
    if (message.size() > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
      warn("a message of " + std::to_string(message.size()) + " bytes is too large; dropped");
      return false;
    }
    std::string& buf = s_->send_buf[slot];
    buf.swap(message);
    s_->send_peer[slot] = peer;
    const int rc = MPI_Isend(buf.data(), static_cast<int>(buf.size()), MPI_BYTE, peer, kTag,
                             s_->comm, &s_->send_req[slot]);
    if (rc != MPI_SUCCESS) {
      broken("MPI_Isend failed: " + mpi_error(rc));
      return false;
    }
    return true;
  }

  void receive(std::vector<TransportMessage>& out) override {
    std::lock_guard<std::mutex> lock(s_->mu);
    if (!usable_locked()) return;
    for (int i = 0; i < kMaxReceivesPerCall; ++i) {
      int flag = 0;
      MPI_Status status;
      int rc = MPI_Iprobe(MPI_ANY_SOURCE, kTag, s_->comm, &flag, &status);
      if (rc != MPI_SUCCESS) return broken("MPI_Iprobe failed: " + mpi_error(rc));
      if (!flag) break;
      int count = 0;
      MPI_Get_count(&status, MPI_BYTE, &count);
      TransportMessage m;
      m.peer = status.MPI_SOURCE;
      m.bytes.resize(static_cast<std::size_t>(std::max(0, count)));
      rc = MPI_Recv(m.bytes.data(), count, MPI_BYTE, status.MPI_SOURCE, kTag, s_->comm,
                    MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) return broken("MPI_Recv failed: " + mpi_error(rc));
      out.push_back(std::move(m));
    }
    progress_locked();
  }

  void progress() override {
    std::lock_guard<std::mutex> lock(s_->mu);
    if (usable_locked()) progress_locked();
  }

  bool healthy() const override {
    std::lock_guard<std::mutex> lock(s_->mu);
    return !s_->dead && !failed_;
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

  void progress_locked() {
    for (auto& req : s_->send_req) {
      if (req == MPI_REQUEST_NULL) continue;
      int done = 0;
      const int rc = MPI_Test(&req, &done, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) return broken("MPI_Test failed: " + mpi_error(rc));
    }
  }

  int rank_ = 0;
  int size_ = 1;
  int analysis_rank_ = 0;
  std::function<void(std::string_view, std::string_view)> warn_;
  std::shared_ptr<MpiState> s_;
  TreeLinks links_;
  bool failed_ = false;
  bool reported_finalize_ = false;
  bool shut_down_ = false;
};

}  // namespace

}  // namespace detail

void register_mpi_transport() {
  register_transport("mpi", [](const TransportSetup& setup) -> std::unique_ptr<Transport> {
    return std::make_unique<detail::MpiTransport>(setup);
  });
}

}  // namespace laggard
