// The side channel's wire format: samples in binary between a rank and its parent in the
// gather tree (docs/design.md, "The side channel"). Private to the library.
//
// A message is a header and records, little-endian, integers as LEB128 varints:
//
//   header   'L' 'g' version(2) kind(u8: 1 batch, 2 ack, 3 verdict) flags(u8: bit 0 = the
//            sender's dictionaries start afresh, bit 1 = an acknowledgement rides along)
//            seq(varint) [ack(varint): with bit 1, the highest batch seq received]
//   batch records, each a type byte and its fields:
//     1 stage    index, kind(u8), name(varint length + bytes)
//     2 string   index, bytes(varint length + bytes)             (hosts and cohorts)
//     3 layout   index, n, n stage indices                       (a rank's stages in order)
//     4 rank     rank, world_size, host string, cohort string
//     5 sample   rank, step, step_ms(f32), flags(u8: bit 0 work, 1 values, 2 resources),
//                [work f64], layout, n x (ms f32, calls varint),
//                [values: n, n x (name string, f64)], [resources: n, n x (name string, f64)]
//     6 counts   rank, dropped, errors, final(u8)
//   An ack has no records: its seq is the highest batch seq received. A verdict going to a
//   child that is owed an acknowledgement carries it (flag bit 1) instead of a message of its own.
//   A verdict (parent to child, down the tree; seq = the analysis rank's report number) is
//     step, ranks_seen, world_size, step_ms(f32), whatif_step_saving_ms(f32),
//     likely_bottleneck(text), num_confirmed, n (<= StragglerVerdict::kMaxFindings),
//     n x (rank, host, cohort, stage (texts), kind(u8), ms, ref_ms, slowdown, cost_ms,
//          cost_share (f32 each), windows_flagged, reason(text)),
//     m, m x (2 x (rank delta from the previous; first: the rank) + confirmed bit,
//             score(u16: round(score x 65535)))
//   whose m scores are those of the receiving rank's subtree only (the ranks whose samples
//   reached the sender through it): a host member gets its own score, a leader its subtree's,
//   so at 4,096 ranks a member's verdict is about 100 bytes plus 40-200 a confirmed straggler,
//   and no message is larger than 16 findings and 3 bytes per rank of the receiver's subtree.
//
// Names, hosts, cohorts and stage layouts are sent once per link, then referred to by index:
// a sample of n stages costs 9 to 14 + 5n bytes (16 stages, rank and step
// below 2^21: 92). Stage times travel as
// float32 milliseconds (relative rounding 6e-8, 6 ns at 100 ms: far below any threshold the
// detector uses); step_ms likewise; `work`, values (loss, grad norm) and resource readings as
// float64, bit for bit (a value costs its name's index and 8 bytes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "laggard/model.hpp"
#include "laggard/verdict.hpp"

namespace laggard::wire {

inline constexpr std::uint8_t kVersion = 2;
enum class Kind : std::uint8_t { batch = 1, ack = 2, verdict = 3 };

/// What a sending rank counted so far, carried to the analysis rank (cumulative).
struct RankCounts {
  int rank = 0;
  std::uint64_t dropped = 0;  ///< samples it dropped before they could reach the analysis
  std::uint64_t errors = 0;   ///< failures counted on it
  bool final = false;         ///< its last batch: it is closing
};

/// Rounds a stage time the way the wire does (what the analysis rank sees of every rank).
inline double wire_ms(double ms) { return static_cast<double>(static_cast<float>(ms)); }

/// Encodes batches for one link (this rank to one peer). Not thread-safe.
///
/// Cost: a sample whose names and layout the link knows already is a few stores per stage, no
/// allocation once the message buffer has grown.
class Encoder {
 public:
  /// Starts a batch with sequence number `seq` (the message so far is discarded).
  void begin(std::uint64_t seq);
  /// Appends a sample; its names, rank and layout are defined in this batch when the link does
  /// not know them yet. Stage times that are not finite must have been left out before.
  void add(const StepSample& sample);
  void add(const RankCounts& counts);
  /// The batch so far.
  const std::string& message() const noexcept { return out_; }
  std::string& message() noexcept { return out_; }
  std::size_t samples() const noexcept { return samples_; }
  /// The batch was handed to the transport: what it defined is known to the peer from now on.
  void commit();
  /// The batch was not sent: what it defined is forgotten, so the next batch defines it again.
  void rollback();
  /// A new peer (or one that may have lost batches): everything is defined afresh, and the next
  /// batch tells the decoder to start afresh too.
  void reset();

 private:
  std::uint32_t stage_index(const StageTime& t);
  std::uint32_t string_index(const std::string& s);
  std::uint32_t layout_index(const StepSample& s);
  void define_rank(const StepSample& s);

  struct Known {
    std::unordered_map<std::string, std::uint32_t> strings;
    std::unordered_map<std::string, std::uint32_t> stages;  // kind byte + name
    std::unordered_map<std::string, std::uint32_t> layouts;  // stage indices as bytes
    struct Rank {
      int world_size = 0;
      std::uint32_t host = 0, cohort = 0;
    };
    std::unordered_map<int, Rank> ranks;
  };
  Known known_;            // what the peer knows (committed)
  Known pending_;          // defined in the current batch
  std::string out_;
  std::string key_;        // scratch
  std::vector<std::uint32_t> name_index_;  // scratch: the names of a sample's values
  std::size_t samples_ = 0;
  bool fresh_ = true;      // the next batch starts the peer's dictionaries afresh
};

/// Decodes the batches of one link (one peer to this rank). Not thread-safe.
class Decoder {
 public:
  struct Header {
    Kind kind = Kind::batch;
    std::uint64_t seq = 0;
    std::uint64_t ack = 0;  ///< an acknowledgement riding along (flag bit 1), or 0
    bool fresh = false;
  };
  /// Reads a message's header; false (with `error`) when it is not a laggard message.
  static bool header(std::string_view message, Header& out, std::string& error);

  /// Decodes a batch: samples are appended to `samples` (reusing their buffers where the vector
  /// holds some beyond `samples_used`), counts to `counts`. False, with `error`, at the first
  /// malformed record; what came before it is kept.
  bool decode(std::string_view message, std::vector<StepSample>& samples,
              std::size_t& samples_used, std::vector<RankCounts>& counts, std::string& error);

 private:
  struct Rank {
    int world_size = 1;
    std::uint32_t host = 0, cohort = 0;
  };
  std::vector<StageTime> stages_;  // name and kind per stage index
  std::vector<std::string> strings_;
  std::vector<std::vector<std::uint32_t>> layouts_;
  std::unordered_map<int, Rank> ranks_;
};

/// An acknowledgement of every batch up to `seq`.
std::string ack_message(std::uint64_t seq);

/// A rank's part of a verdict message: its score in (0, 1] and whether it is confirmed.
struct RankScore {
  int rank = 0;
  float score = 1.0f;
  bool confirmed = false;
};

/// Encodes a verdict (its per-rank fields `rank`, `score`, `self_confirmed` are not sent) with
/// the scores of the receiving subtree, `scores` sorted by rank; appends to `out` (cleared
/// first). At most StragglerVerdict::kMaxFindings findings are sent and texts are cut at 256 bytes.
/// `ack` > 0: an acknowledgement of every batch up to `ack` rides along (Decoder::Header::ack).
void encode_verdict(const StragglerVerdict& verdict, const std::vector<RankScore>& scores,
                    std::string& out, std::uint64_t ack = 0);
/// Decodes a verdict message (the header included). False, with `error`, when it is malformed;
/// `verdict` and `scores` are then unspecified.
bool decode_verdict(std::string_view message, StragglerVerdict& verdict, std::vector<RankScore>& scores,
                    std::string& error);

}  // namespace laggard::wire
