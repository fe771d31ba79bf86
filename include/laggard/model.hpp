// laggard — the one sample model every source produces and every analysis reads.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "laggard/export.hpp"

namespace laggard {

/// What a stage's time means. `communication` is time spent waiting as much as transferring:
/// the kind is what lets the analysis tell a rank's own work from its wait for others.
enum class StageKind : std::uint8_t { compute = 0, communication = 1, data = 2, other = 3 };

/// "compute", "communication", "data" or "other". Thread-safe, no allocation.
LAGGARD_API const char* to_string(StageKind kind) noexcept;

/// Parses the names `to_string` prints; anything else gives std::nullopt. Thread-safe.
LAGGARD_API std::optional<StageKind> parse_stage_kind(std::string_view text) noexcept;

/// The kind laggard assumes for a well-known stage name ("communication", "allreduce",
/// "all_to_all", ... and the whole words "dist", "a2a", "mpi" → communication, checked first so
/// that "sparse_data_dist" is communication; "dataloader", "data_loader" and the whole word
/// "data" → data ("load_data", not "metadata"); everything else →
/// compute).
LAGGARD_API StageKind default_stage_kind(std::string_view name) noexcept;

/// One stage of one rank in one step: accumulated over every entry of the stage in the step.
struct StageTime {
  std::string name;
  StageKind kind = StageKind::compute;
  double ms = 0.0;          ///< device time where a device backend timed it, else host time
  std::uint32_t calls = 0;  ///< how many times the stage was entered in the step
};

/// A named number beside a step's times: a value the training loop recorded (`loss`,
/// `grad_norm`, `tokens`) or a resource reading (`gpu_sm_clock_mhz`, docs/reference/formats.md). Any double,
/// NaN and infinities included: the log keeps it bit for bit (a NaN as NaN, without its payload).
struct NamedValue {
  std::string name;
  double value = 0.0;
};

/// Who a rank is. Ranks are compared only with ranks of the same cohort (same work).
struct RankInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string host;
  std::string cohort;  ///< empty = the default cohort
};

/// One rank's figures for one sampled step. `stages` is in pipeline order.
struct LAGGARD_API StepSample {
  int rank = 0;
  int world_size = 1;
  std::int64_t step = 0;
  std::string host;
  std::string cohort;
  double step_ms = 0.0;
  double work = std::numeric_limits<double>::quiet_NaN();  ///< optional: tokens or samples
  std::vector<StageTime> stages;
  /// Optional: what the training loop recorded in this step (Recorder::record), names unique,
  /// in the order first recorded. Non-finite values are kept: the correctness gate reads them.
  std::vector<NamedValue> values;
  /// Optional: resource readings beside this step (clocks, throttling, host CPU, GC, allocator;
  /// names in docs/reference/formats.md), names unique. Compared across ranks like stage times.
  std::vector<NamedValue> resources;

  /// The stage called `name`, or nullptr. Linear scan: steps have a handful of stages.
  const StageTime* find(std::string_view name) const noexcept;
  /// The recorded value called `name`, or nullptr (linear scan).
  const NamedValue* find_value(std::string_view name) const noexcept;
  /// The resource reading called `name`, or nullptr (linear scan).
  const NamedValue* find_resource(std::string_view name) const noexcept;
};

/// Every rank's sample of one step (one sampled window).
struct Window {
  std::int64_t step = 0;
  std::vector<StepSample> samples;
};

}  // namespace laggard
