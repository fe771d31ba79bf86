// laggard — side channels: how per-rank samples reach the analysis rank, off the training thread.
//
// A Transport moves byte messages between the ranks of one job, point to point and without
// waiting. The Analyzer's background thread is its only user: it gathers samples up a tree —
// each rank to its parent, host members to their host's leader, leaders in a tree to the
// analysis rank (gather_tree) — in laggard's binary format, with acknowledgements, bounded
// memory and timeouts of its own (docs/design.md). So a transport only delivers messages, in
// order per pair of ranks, and connects only to the ranks it exchanges messages with: its
// parent and its children. Transports are chosen by name: "local" (ranks that are threads of
// one process, or a single process), "mpi" (a duplicate of the application's communicator, the
// laggard::mpi component: laggard/mpi.hpp), and any a program registers, such as Python's over
// torch.distributed (docs/reference/python.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "laggard/export.hpp"
#include "laggard/model.hpp"

namespace laggard {

/// Where a rank sits in the gather tree.
struct TreeLinks {
  int parent = -1;            ///< -1 on the analysis rank (the root)
  std::vector<int> children;  ///< ranks that send to this one, in rank order
};

/// The gather tree of `world_size` ranks rooted at `root`: ranks are grouped by host
/// (`host_of[r]`, any id per host; empty: every rank its own host), each host's leader is the
/// root if it is on that host, else the host's lowest rank; members send to their leader;
/// leaders form a `fan_out`-ary tree with the root's host at the top and the other hosts in
/// the order of their leaders' ranks. Every rank computes the same tree. O(world_size) time
/// and memory; thread-safe. Throws std::invalid_argument for a rank or root outside the world,
/// a host_of of the wrong size, or fan_out < 1.
LAGGARD_API TreeLinks gather_tree(int rank, int world_size, int root,
                                  const std::vector<int>& host_of, int fan_out);

/// One message from a peer.
struct TransportMessage {
  int peer = -1;
  std::string bytes;
};

/// What a transport is created with (by the Analyzer, on the thread that constructs it).
struct TransportSetup {
  RankInfo rank;          ///< rank and world size as the caller knows them
  int analysis_rank = 0;  ///< the root of the gather tree
  int fan_out = 32;       ///< children per host leader in the tree of leaders (gather_tree)
  /// "local": the in-process group; Analyzers with the same channel and world size form one.
  std::string channel;
  /// When > 0, ranks [k*n, (k+1)*n) count as one host in the gather tree instead of what the
  /// transport finds ("local": 0 = each rank its own host; "mpi": the ranks sharing a node).
  /// For tests and for launchers that place ranks differently from what MPI reports.
  int ranks_per_host = 0;
  /// "mpi": the Fortran handle (MPI_Comm_c2f) of the application's communicator, which is
  /// duplicated and never used itself; -1 = MPI_COMM_WORLD. laggard/mpi.hpp sets it.
  int mpi_comm = -1;
  /// Reports a failure or degradation: `kind` groups repeats for rate limiting. Thread-safe.
  std::function<void(std::string_view kind, std::string_view message)> warn;
};

/// A side channel: point-to-point messages between ranks. Used from one thread (the
/// Analyzer's background thread); implementations may throw, and the Analyzer turns what they
/// throw into a counted warning. No call may wait on another rank.
class LAGGARD_API Transport {
 public:
  virtual ~Transport();
  /// Short name for logs ("local", "mpi", "gloo").
  virtual const char* name() const noexcept = 0;
  /// This process's rank and the number of ranks, as the transport knows them (MPI: from the
  /// communicator, which wins over what the caller said).
  virtual int rank() const noexcept = 0;
  virtual int world_size() const noexcept = 0;
  /// This rank's parent and children in the gather tree, fixed at creation.
  virtual TreeLinks links() const = 0;
  /// Starts sending `message` to `peer` (it may be taken) and returns at once. False when the
  /// message was not accepted: too many messages to `peer` are still in flight, or the link to
  /// it broke. Messages to one peer arrive in the order they were sent.
  virtual bool send(int peer, std::string& message) = 0;
  /// Appends every message that has arrived to `out`. Never waits.
  virtual void receive(std::vector<TransportMessage>& out) = 0;
  /// Completes what can be completed without waiting.
  virtual void progress() {}
  /// Appends (peer, reason) for every link that broke since the last call (a peer that died or
  /// closed). The gather decides what it means: a warning, or nothing for a peer that had said
  /// its last word. Default: the transport reports nothing of the kind.
  virtual void broken_links(std::vector<std::pair<int, std::string>>& out) { (void)out; }
  /// Wake-on-data: a transport that can wake the Analyzer's background thread keeps `wake`
  /// and calls it (from any thread; it never waits and takes no lock) after a message arrives,
  /// a link breaks or the transport fails, and returns true; the thread then sleeps while
  /// nothing arrives and no timer of its own is due. False (the default): the thread looks
  /// every poll_interval_s while it has links. Called once, before the first receive().
  virtual bool set_wake(std::function<void()> wake) {
    (void)wake;
    return false;
  }
  /// The Analyzer is closing (called once, before its last turns): a transport may stop
  /// waiting for what can no longer come, reporting such links through broken_links().
  virtual void closing() {}
  /// False once the transport as a whole failed (or fail() was called): it then sends and
  /// receives nothing. A broken link to one peer is a warning, not a failure.
  virtual bool healthy() const = 0;
  /// Stops as if the side channel had died: nothing is sent or received any more. For failure
  /// drills and tests.
  virtual void fail() = 0;
  /// Releases what the transport holds without waiting for anything (messages still in flight
  /// are cancelled). Called once, last.
  virtual void shutdown() = 0;
};

/// Creates a transport; throws (std::runtime_error, say) with a reason when it cannot.
using TransportFactory = std::function<std::unique_ptr<Transport>(const TransportSetup& setup)>;

/// Registers (or replaces) the transport called `name`. Thread-safe. Throws
/// std::invalid_argument for an empty name or an empty factory.
LAGGARD_API void register_transport(const std::string& name, TransportFactory factory);

/// The registered names, sorted: "local", "mpi" once use_mpi() ran, and any registered.
LAGGARD_API std::vector<std::string> transport_names();

/// Creates the transport called `name`. Throws std::invalid_argument for an unknown name (the
/// message lists the known ones), or whatever the factory throws. Thread-safe.
LAGGARD_API std::unique_ptr<Transport> make_transport(std::string_view name,
                                                      const TransportSetup& setup);

}  // namespace laggard
