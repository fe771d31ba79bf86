// laggard — side channels: how per-rank samples reach the analysis rank, off the training thread.
//
// A Transport is used by one Analyzer's background thread only; the training thread never calls
// it. Transports are chosen by name: "local" (built in: ranks that are threads of one process, or
// a single process), "mpi" (a duplicate of the application's communicator: the laggard::mpi
// component, registered by laggard::use_mpi() in laggard/mpi.hpp), and any a program registers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "laggard/export.hpp"
#include "laggard/model.hpp"

namespace laggard {

/// Samples of one rank on their way to the analysis rank: "laggard.sample/1" JSON lines plus what
/// the sending rank counted, so the analysis rank can report every rank's drops and failures.
struct SampleBatch {
  int rank = 0;
  std::uint64_t samples = 0;  ///< lines in `lines`
  std::uint64_t dropped = 0;  ///< samples the sending rank dropped so far (cumulative)
  std::uint64_t errors = 0;   ///< failures the sending rank counted so far (cumulative)
  bool final = false;         ///< the rank's last batch: it is closing
  std::string lines;          ///< each line ends with '\n'
};

/// What a transport is created with (by the Analyzer, on the thread that constructs it).
struct TransportSetup {
  RankInfo rank;          ///< rank and world size as the caller knows them
  int analysis_rank = 0;  ///< where the samples go
  /// "local": the in-process group; Analyzers with the same channel and world size form one.
  std::string channel;
  /// "mpi": the Fortran handle (MPI_Comm_c2f) of the application's communicator, which is
  /// duplicated and never used itself; -1 = MPI_COMM_WORLD. laggard/mpi.hpp sets it.
  int mpi_comm = -1;
  /// Samples a rank may have sent without the analysis rank having taken them; beyond this,
  /// batches are dropped (and counted by the caller) instead of piling up.
  std::size_t max_unacked_samples = 256;
  /// A sending rank presumes the analysis rank's side channel down when it has acknowledged
  /// nothing for this long while samples are outstanding (it recovers if acknowledgements
  /// resume).
  double peer_timeout_s = 30.0;
  /// Reports a failure or degradation: `kind` groups repeats for rate limiting. Thread-safe.
  std::function<void(std::string_view kind, std::string_view message)> warn;
};

/// A side channel. Implementations are used from one thread (the Analyzer's background thread)
/// and may throw: the Analyzer catches everything and turns it into a warning. No call may
/// block on another rank.
class LAGGARD_API Transport {
 public:
  virtual ~Transport();
  /// Short name for logs ("local", "mpi").
  virtual const char* name() const noexcept = 0;
  /// This process's rank and the number of ranks, as the transport knows them (MPI: from the
  /// communicator, which wins over what the caller said).
  virtual int rank() const noexcept = 0;
  virtual int world_size() const noexcept = 0;
  /// Every rank but the analysis rank: hands `batch` on to the analysis rank and returns at once
  /// (`batch.lines` may be taken). False when the batch was dropped because the analysis rank
  /// is behind or gone; the caller counts it.
  virtual bool send(SampleBatch& batch) = 0;
  /// Analysis rank: appends every batch that has arrived to `out`. Never waits.
  virtual void receive(std::vector<SampleBatch>& out) = 0;
  /// Completes what can be completed without waiting (sends, acknowledgements).
  virtual void progress() {}
  /// True when nothing this rank sent is still outstanding (delivered, or given up on).
  virtual bool settled() const = 0;
  /// False once the transport failed (or fail() was called); it then sends and receives nothing.
  virtual bool healthy() const = 0;
  /// Stops as if the side channel had died: nothing is sent, received or acknowledged any more.
  /// For failure drills and tests.
  virtual void fail() = 0;
  /// Releases what the transport holds without waiting for anything (requests still in flight
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
