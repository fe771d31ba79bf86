// laggard — the onset detectors of one stage, one per rank, stepped together: what RunAnalysis
// runs per (rank, stage). Not part of the stable API (a seam for its tests).
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

#include "laggard/export.hpp"
#include "laggard/onset.hpp"

namespace laggard::detail {

/// Many OnsetDetector series with the same options, each given at most one value per window. A
/// window's values are staged per series (`stage`) and added together (`add_window`): the series
/// whose detector is in control and learning (nearly every value of a healthy run) take one
/// vectorised step over all of them, four at a time; the others take OnsetDetector::add itself.
/// Every series' results are OnsetDetector's, bit for bit (`detector` gives its detector).
class LAGGARD_API OnsetColumns {
 public:
  OnsetColumns() = default;
  /// Throws std::invalid_argument for invalid options (as OnsetDetector does).
  OnsetColumns(const OnsetOptions& options, double baseline_cap);

  /// A new series; returns its index.
  std::int32_t add_series();
  std::size_t size() const noexcept { return cold_.size(); }

  /// The value of `series` at `step` for the next add_window (a log time; non-finite values are
  /// ignored, as OnsetDetector::add ignores them). Values are added in the order they are staged
  /// per series: a series given a second value before add_window takes the first one at once, and
  /// a value of another step than those staged adds them first.
  void stage(std::int32_t series, std::int64_t step, double log_value) noexcept {
    double& slot = staged_[static_cast<std::size_t>(series)];
    if (!std::isfinite(log_value)) return;
    if ((any_staged_ && step != staged_step_) || !std::isnan(slot)) {
      stage_again(series, step, log_value);
      return;
    }
    slot = log_value;
    staged_step_ = step;
    any_staged_ = true;
  }
  /// Adds the staged values to their series.
  void add_window() noexcept;

  /// The detector of `series`, as OnsetDetector::add would have left it.
  OnsetDetector detector(std::int32_t series) const noexcept;
  std::optional<std::int64_t> onset(std::int32_t series) const noexcept {
    return detector(series).onset();
  }

 private:
  void stage_again(std::int32_t series, std::int64_t step, double log_value) noexcept;
  void add_one(std::size_t i, std::int64_t step, double log_value) noexcept;
  void spill(std::size_t i, OnsetDetector& d) const noexcept;
  void try_warm(std::size_t i) noexcept;
  void add_warm(std::int64_t step) noexcept;

  OnsetDetector prototype_;
  // Per series: its detector, which holds the whole state while the series is cold; while it is
  // warm (in control, learning, past its warm-up), the fields that a quiet step changes live in
  // the arrays below instead.
  std::vector<OnsetDetector> cold_;
  std::vector<double> staged_;  // NaN: no value this window
  std::int64_t staged_step_ = 0;
  bool any_staged_ = false;
  std::vector<std::int64_t> warm_;  // all ones: warm (a lane mask), 0: cold
  std::vector<float> ring_[5];
  std::vector<std::int64_t> ring_steps_[5];
  std::vector<std::int32_t> phase_;  // raw % 5: the ring slot the next value takes
  std::vector<std::uint32_t> raw_;
  std::vector<std::int32_t> values_;
  std::vector<float> mu_, sigma_, learn_n_;
  std::vector<double> learn_sum_, learn_abs_;
  std::vector<unsigned char> later_;  // add_window's scratch: the lanes add() takes
  std::size_t warm_count_ = 0;
};

}  // namespace laggard::detail
