// laggard — the first divergent step: where two runs of the same job (same seed, same data) stop
// recording the same values. Same seed is not same bits: this finds the step and rank where they
// part, bit for bit or beyond a tolerance.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "laggard/export.hpp"
#include "laggard/model.hpp"
#include "laggard/source.hpp"

namespace laggard {

struct DivergenceOptions {
  /// Compare only the value of this name (`loss`, `grad_norm`); empty: every value both sides
  /// recorded.
  std::string value;
  /// 0: bit for bit (the doubles' bits; +0 and -0 differ, a NaN equals a NaN). Above 0: values
  /// differ when |a - b| > rtol x max(|a|, |b|) (a NaN against a number differs; two NaNs do not).
  double rtol = 0.0;
  /// Windows kept on each side of the divergent step for `around` (memory: that many windows).
  int context = 2;
};

/// One rank's sample at one step in both runs, for the timings around the divergence.
struct DivergenceContext {
  std::int64_t step = 0;
  bool in_a = false, in_b = false;
  StepSample a, b;  ///< the divergent rank's sample in each run (when in_a / in_b)
};

struct DivergenceResult {
  bool diverged = false;
  std::int64_t step = 0;        ///< the first step where a value differs (when diverged)
  int rank = 0;                 ///< the lowest rank differing at that step
  std::string value;            ///< the first differing value of that rank (sample A's order)
  double a = 0.0, b = 0.0;      ///< the value in each run
  /// Every (rank, value) that differs at that step (rank, then A's order), the first included.
  struct Difference {
    int rank = 0;
    std::string value;
    double a = 0.0, b = 0.0;
  };
  std::vector<Difference> at_step;
  std::vector<DivergenceContext> around;  ///< steps around `step` (ascending), that rank

  std::size_t steps_compared = 0;   ///< steps both runs hold with a value compared
  std::size_t values_compared = 0;  ///< (step, rank, value) triples compared
  std::size_t steps_only_a = 0, steps_only_b = 0;
  std::size_t ranks_only = 0;  ///< (step, rank) samples in one run only, at steps in both
  /// Names recorded in one run and never in the other (each once), for the report.
  std::vector<std::string> values_only_a, values_only_b;
};

/// Reads both runs in step order (memory bounded by ranks x (2 context + 1) windows) and finds
/// the first step where a recorded value differs. Throws InputError when there is nothing to
/// compare: no value recorded in either run, `options.value` recorded in neither (naming the
/// values that are), or no step in common. Not thread-safe (reads both sources).
LAGGARD_API DivergenceResult find_divergence(RunSource& a, RunSource& b,
                                             const DivergenceOptions& options = {});

/// Whether two recorded values count as the same under `rtol` (see DivergenceOptions).
LAGGARD_API bool same_value(double a, double b, double rtol) noexcept;

}  // namespace laggard
