// laggard — the sequential method (docs/detection.md, "The default detector"): the noise
// estimate, the log-ratios, the CUSUM tests (the shifts', the own-baseline one, the cost test) in
// one vectorized pass (seq_pass), and Detector::observe_sequential around it.
#include "laggard/detector.hpp"

#include "analysis/column_kernels.hpp"
#include "analysis/detector_internal.hpp"
#include "analysis/detector_wording.hpp"
#include "analysis/median.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <stdexcept>
#include <type_traits>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace laggard {

using namespace detector_detail;

namespace {

// The method's constants: each is defined once, here, with why; their values and where each was
// measured are tabled in docs/detection.md, The constants.

// Times below this are noise of the clock and the interpreter, not of the work:
// x = ln((t + e) / (ref + e)). Sub-millisecond stages (untimed time is often 0.1 ms) would
// otherwise swing by tens of percent from window to window.
constexpr double kEpsilonMs = 0.5;  // epsilon (docs/detection.md, The constants)
// A rank faster than the median by less than this holds no wait worth the name.
constexpr double kMinWaitMs = 0.5;  // (docs/detection.md, Waiting is never blamed)
// Nor is an excess under this a slowdown worth naming, whatever its ratio: 0.3 ms of untimed
// time against 0.1 ms is interpreter noise, not a straggler.
constexpr double kMinExcessMs = 0.5;  // least excess (docs/detection.md, The constants)
// Before a (cohort, stage) has two windows, the noise of its log-ratio is taken as this.
constexpr double kPriorSigma = 0.05;  // prior sigma (docs/detection.md, The constants)
// The noise estimate never goes below this: a rank 0.5 % off is not resolved.
constexpr double kMinSigma = 0.005;  // sigma floor (docs/detection.md, The constants)
// EWMA of each rank's log-ratio (noise estimate only), and of ln(sigma) of a (cohort, stage); both
// are running means over their first windows (weight max(alpha, 1 / n)), so that the first
// window's draw, and the first deviations from a level that is one draw, do not linger: started
// as EWMAs from their first value, they had held sigma 15-20 % over its settled value at window
// 20, which made every test read the first windows of an onset as noisier than they are.
constexpr double kLevelAlpha = 0.1;  // level alpha (docs/detection.md, The constants)
constexpr double kScaleAlpha = 0.1;  // scale alpha (docs/detection.md, The constants)
// A difference of two windows' log-ratios has sqrt(2) times the noise of one (exact).
constexpr double kSqrt2 = 1.4142135623730951;
// Rank-windows pause_rate counts for in the pause rate a stage has shown. 100, not 1,000: on a
// loaded machine with 3 ranks a 2 ms region stalled in ~13 % of rank-windows, and a prior of
// 1,000 held the cap near ln 100 for the whole run (45 rank-windows), so 3-4 stalls of one rank
// came within one window of a verdict (docs/notes/detection-absolute.md).
constexpr double kPausePrior = 100.0;  // pause prior weight (docs/detection.md, The constants)
// EWMA of a rank's own baseline (after its first windows): own baseline alpha
// (docs/detection.md, The constants).
constexpr double kBaseAlpha = 0.05;
// Windows a rank's baseline takes before it is tested: own warm-up
// (docs/detection.md, The constants).
constexpr int kOwnWarmup = 10;
// The own-baseline test runs where one window separates its shift from no change by this many
// sigma or more.
constexpr double kOwnSeparation = 3.0;  // own gate (docs/detection.md, The constants)
// A pause: at least 1.5x the median (pause; docs/detection.md, The constants).
const double kLogPause = std::log(1.5);
// The own-baseline test's noise model: Student's t with kOwnNu degrees of freedom. Its scale is
// kOwnScaleShrink of the t(4) scale with the stage's sigma (1.4826 MAD: MAD = 0.6745 sigma, and
// the MAD of t(4) is 0.7407 of its scale). The shrink is measured, not derived: sigma is a MAD of
// distances to an EWMA level that is itself noisy (over the first windows most), so it overstates
// the spread of a rank around a baseline learnt over many windows. 0.85 was measured with no
// healthy run alarmed at 8 to 4,096 ranks (0.7 alarmed in one at 64; 1.0, the t(4) scale as
// estimated, found fewer 1.1x ranks: docs/detection.md).
constexpr double kOwnNu = 4.0;  // t degrees of freedom (docs/detection.md, The constants)
constexpr double kOwnScalePerSigma = 0.6745 / 0.7407;  // 0.9106 (docs/detection.md, The constants)
constexpr double kOwnScaleShrink = 0.85;  // scale shrink (docs/detection.md, The constants)
// The baseline's update after a rank's first kOwnWarmup windows: a step of Fisher scoring for the
// location of the same t(kOwnNu) noise (at the stage's t scale, unshrunk): psi(d) = d / (1 + d^2
// / (nu s^2)), times 1 / E[psi'] = (nu + 3) / nu. A window near the baseline moves it as the mean
// would; one far from it (a pause, a tail, the first window of an onset, 6-7 t scales over it at
// 1.1x under 2 % jitter) moves it little: psi redescends. The 3-sigma clip it replaces let an
// onset's first window drag the baseline by 3 sigma x alpha, a third to a half of its standard
// error at window 20 (docs/detection.md).
constexpr double kOwnScoreGain = (kOwnNu + 3.0) / kOwnNu;  // 7/4 (docs/detection.md, The constants)
// Most evidence one window adds to the own-baseline test: this, and no more than the cohort
// tests' cap ln(1 / pause rate). The t LLR is bounded (by 6-7 under 2 % jitter, 9-10 under 1 %)
// and redescends: a pause far over the shift adds little. But a window just over the shift is
// not rare in every noise: under right-skewed jitter (a long slow tail; lognormal) healthy ranks
// had two such windows running, 8 each, and were named; like a pause, such a window counts as
// one unusual window (docs/detection.md, The constants).
constexpr double kOwnCeiling = 8.0;  // own ceiling (docs/detection.md, The constants)
// Shares of the false-alarm budget where the own-baseline test runs: it, the cohort test for
// relative_threshold and the cost test; the larger shifts' tests share what is left
// (docs/detection.md, step 4; docs/notes/detection-absolute.md).
constexpr double kShareOwn = 0.4;    // shares (docs/detection.md, The constants)
constexpr double kShareFirst = 0.2;  // shares (docs/detection.md, The constants)
constexpr double kShareCost = 0.2;   // shares (docs/detection.md, The constants)
constexpr double kShareMix = 0.1;    // shares (docs/detection.md, The constants)
// The intermittent test (docs/detection.md, Intermittent faults): per (rank, stage), "each window
// is, with probability kMixShare, slow by what costs the step kCostTarget x min_cost_share on
// average (and at least kMixRatio over the median), else as the null" against the cost test's
// null. Three kinds of window: ordinary, in the fault band (over the slow component's midpoint,
// under kMixPauseCut) and pause-sized (at or over it). The null has the shares of each that the
// cohort shows (r_b, r_p); the alternative puts 1 - kMixPauseSized of its slow windows in the
// band. In the band the LLR is ln((1 - p + p' LR) / (1 - r_b + r_b LR)), p' = p (1 - alpha), LR
// the normal likelihood ratio of the slow component: an ordinary window takes about
// ln((1 - p) / (1 - r_b)) away, a band window adds at most ln(p' / r_b). A pause-sized window
// takes ln(1 - p + p alpha / r_p) whatever its size. p = 0.5, not 0.3: with pauses counted as
// slow windows 0.3 named a rank paused every tenth window
// (Sequential.PausesInSeparateWindowsAreNotAStraggler). 1.25 is the second shift of the cohort
// tests (by construction).
constexpr double kMixShare = 0.5;   // (docs/detection.md, Intermittent faults)
constexpr double kMixRatio = 1.25;  // (docs/detection.md, Intermittent faults)
// Pause-sized: x at or over ln 2 (twice the median, with epsilon). A GC or a preemption adds a
// share of a step to one stage, far over what a 1.25-1.5x fault adds; counted with the fault
// band, the cohort's pauses set the null's share of slow windows, and a fault's slow window
// gained only ln(p / that share) (by construction: ln 2 is over a 1.5x fault's ln 1.5).
const double kMixPauseCut = std::log(2.0);  // (docs/detection.md, Intermittent faults)
// The alternative's share of slow windows that are pause-sized (a fault may be that large): a
// pause of a healthy rank adds ln(1 - p + p alpha / r_p), under ln(1 + 12.5) at r_p = 1 %; 0.1
// and 0.25 found as many intermittent faults (docs/notes/detection-absolute.md).
constexpr double kMixPauseSized = 0.25;  // (docs/detection.md, Intermittent faults)
// The null's share of pause-sized windows is at least this x pause_rate (one in 1,000 by
// default), with pause_rate as a prior worth kPausePrior rank-windows; its share of band windows
// is at least kMixBandFloor x pause_rate (one in 10,000), with pause_rate as a prior worth
// kMixBandPrior rank-windows: a cohort that has shown none is not taken to have none, and one
// that has shown few a window within 2x of the median is rarer than a pause. With a prior of
// 0.1 % worth 100 (a band window's first evidence 5.9), a rank's untimed code 1.75x slow from
// the first window was named at the third, before the dataloader stall that explains it
// (Sequential.UntimedSlownessThatATimedStageExplainsIsNotNamedApart); with this prior it starts
// at ln(p' / 1 %) = 3.6, under the cohort tests' cap.
constexpr double kMixNullFloor = 0.1;   // (docs/detection.md, Intermittent faults)
constexpr double kMixBandFloor = 0.01;  // (docs/detection.md, Intermittent faults)
constexpr double kMixBandPrior = 10.0;  // (docs/detection.md, Intermittent faults)
// The cost test (docs/notes/detection-absolute.md): per (rank, stage), "its excess costs the step
// kCostTarget x min_cost_share" against "its excess is within healthy_spread or under
// min_cost_share of the step", each mapped onto the log-ratio x, so that a fault's size in the
// step, not its stage's size, decides how fast it is found. Where the stage is most of the step
// the alternative is at least kCostLeastRatio x healthy_spread (a 1.05x slowdown).
constexpr double kCostTarget = 2.0;  // (docs/detection.md, Detection by cost)
// The step time the cost test measures against: the median of the cohort's step time over this
// many of its latest windows (a pause anywhere in a synchronous job lengthens every rank's step
// in its window; a change of the job's pace is followed within half of them).
constexpr std::size_t kCostStepWindows = 15;  // (docs/detection.md, Detection by cost)
// The cost test's x is clipped at its alternative + this many sigma (a Huber-type CUSUM): where
// its null and alternative are close (under 2 sigma apart) each healthy window takes little
// away, and without the clip frequent windows 1.1-1.4x over (GC, preemption: under what counts
// as a pause) added up to a verdict on healthy ranks (Sequential.
// HealthyRunsWithFrequentPausesConfirmNobody); with it a window adds at most
// delta^2 / (2 sigma^2) + kCostClip delta / sigma. A fault at or under the alternative + 3 sigma
// loses nothing. 2 and 4 pass that test too; 2 took small stages' 1.2x faults past 10 windows
// (docs/notes/detection-absolute.md).
constexpr double kCostClip = 3.0;  // (docs/detection.md, Detection by cost)
// The cost test's least alternative, over healthy_spread: 1.015 x 1.03 is a 1.05x slowdown
// (docs/detection.md, Detection by cost).
constexpr double kCostLeastRatio = 1.015;
// A rank confirmed in a timed stage with this many times its untimed excess (ms over the median)
// is not named for `untimed` as well (observe_sequential).
constexpr double kUntimedExplained = 4.0;  // untimed explained (docs/detection.md, The constants)


// The two passes over every slot, compiled twice where the toolchain can pick at load time
// (GNU ifunc): for AVX2 (eight float lanes, where SSE2 has four) and for the baseline. AVX2
// alone, not FMA: each lane computes what the baseline does, bit for bit.
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(LAGGARD_NO_CLONES)
#define LAGGARD_WIDE_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define LAGGARD_WIDE_CLONES
#endif

// e^v for v in [-80, 80] within about 2e-7 relative, without a branch: 2^n from the bits and a
// series for the rest (|r| <= ln 2 / 2), for the vectorized pass below.
inline float fast_expf(float v) {
  v = std::min(std::max(v, -80.0f), 80.0f);
  // Rounded to the nearest integer by adding and taking away 1.5 x 2^23.
  const float n = (v * 1.44269504f + 12582912.0f) - 12582912.0f;
  const float r = v - n * 0.693147181f;
  const float poly =
      1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720))))));
  const std::int32_t e = static_cast<std::int32_t>(n) + 127;
  const std::uint32_t bits = static_cast<std::uint32_t>(std::max(e, 1)) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return poly * scale;
}

// ln(v) for v > 0 within about 1e-7 (v a ratio near 1; any normal float): the exponent from the
// bits, and ln(m) for the mantissa m in [sqrt(1/2), sqrt(2)) from a series in
// s = (m - 1) / (m + 1). In float, four lanes to an SSE2 register: std::log was an eighth of a
// 16,384-rank window, and a double series half the log-ratio pass (docs/performance.md); the
// evidence it feeds is compared with thresholds of order 0.01 and stored as float anyway.
// Without branches, for the vectorized pass below.
inline float fast_logf(float v) {
  std::uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  float exponent = static_cast<float>(static_cast<std::int32_t>((bits >> 23) & 0xff) - 127);
  bits = (bits & 0x007fffffu) | 0x3f800000u;  // m in [1, 2)
  float m;
  std::memcpy(&m, &bits, sizeof m);
  const bool high = m > 1.41421356f;
  // m * 0.5f where high, exactly: one off the exponent field. In the bits, not as a select of
  // two floats: GCC sank that select below the division of s (two divisions a lane, one of
  // them thrown away).
  bits -= high ? 0x00800000u : 0u;
  std::memcpy(&m, &bits, sizeof m);
  exponent = high ? exponent + 1.0f : exponent;
  const float s = (m - 1.0f) / (m + 1.0f), s2 = s * s;  // |s| <= 0.172: s2^4 / 9 < 1e-7
  const float series = 2.0f * s * (1.0f + s2 * (1.0f / 3 + s2 * (1.0f / 5 + s2 * (1.0f / 7))));
  return series + exponent * 0.693147181f;
}

// Each rank's log-ratio to its stage's median, x = ln((t + e) / (median + e)), with
// inv_ref = 1 / (median + e) (log_ratio_ref): the ratio is formed in double and its log taken in
// float, within about 1e-7 of the exact value (a log of each time less the log of the median
// would lose the digits of the difference). Times are finite here (the window leaves out the
// others). Every user of x computes it with this function, so all see the same float.
inline double log_ratio_ref(double median) { return 1.0 / (std::max(median, 0.0) + kEpsilonMs); }
inline float log_ratio(double t, double inv_ref) {
  const double ratio = (std::max(t, 0.0) + kEpsilonMs) * inv_ref;
  // Clamped to float's normal range: a time of 1e300 ms or a median of 0 against a huge time
  // stays finite.
  return fast_logf(static_cast<float>(std::min(std::max(ratio, 1e-30), 1e30)));
}

// The log-ratios of n times to `median` into x: one vectorized pass, for the few places that
// need x outside seq_pass (which computes it again: at 16,384 x 16, recomputing is cheaper than
// writing a float per slot and reading it back).
LAGGARD_WIDE_CLONES
void log_ratios(std::size_t n, const double* __restrict ms, double median, float* __restrict x) {
  const double inv_ref = log_ratio_ref(median);
  for (std::size_t j = 0; j < n; ++j) x[j] = log_ratio(ms[j], inv_ref);
}


// The spread of the deviations x - level on the side the tests look at, on the MAD's scale: the
// larger of their median |x - level| (the MAD) and the distance from their median to their upper
// quartile. The two are the same for symmetric noise, so neither the noise the constants were
// chosen on nor a cohort of a few ranks gets a smaller sigma than the MAD gave; for right-skewed
// noise (a long slow tail over a short fast one) the slow side reaches further. Reorders `dev`
// (and may leave |x - level| in it).
double slow_side_spread(std::vector<double>& dev) {
  const std::size_t n = dev.size();
  double* d = dev.data();
  if (n > 64 && detail::median_width() == 2) {
    // Each order statistic from a copy, selected out of place (detail::median_of,
    // detail::kth_of: eight values a step), the same values as the selections in place below.
    thread_local std::vector<double> work;
    const double center = detail::median_of(d, n, work);
    const double h = 0.75 * static_cast<double>(n - 1);
    const std::size_t lo = static_cast<std::size_t>(h);
    double q_lo = 0.0;
    const double q_hi = lo + 1 < n ? detail::kth_of(d, n, lo + 1, work, &q_lo)
                                   : (q_lo = detail::kth_of(d, n, lo, work));
    const double upper = q_lo + (h - static_cast<double>(lo)) * (q_hi - q_lo) - center;
    for (std::size_t i = 0; i < n; ++i) d[i] = std::fabs(d[i]);
    return std::max(detail::median_of(d, n, work), upper);
  }
  bool sorted = false;
  const double center = detail::median_inplace(d, n, sorted);
  // The upper quartile, interpolated between its two order statistics. The median's selection
  // left d[n / 2, n) holding the order statistics from n / 2 on: the quartile's search needs
  // only those (none where it sorted them all).
  const double h = 0.75 * static_cast<double>(n - 1);
  const std::size_t lo = static_cast<std::size_t>(h);
  const std::size_t from = n > 0 && lo >= n / 2 ? n / 2 : 0;
  const double q_lo = sorted ? d[lo] : detail::kth_inplace(d + from, n - from, lo - from);
  const double q_hi = lo + 1 < n ? (sorted ? d[lo + 1] : *std::min_element(d + lo + 1, d + n))
                                 : q_lo;
  const double upper = q_lo + (h - static_cast<double>(lo)) * (q_hi - q_lo) - center;
  // The median of |d|: from the sorted values by a merge where they are finite.
  if (sorted && std::isfinite(d[0]) && std::isfinite(d[n - 1]))
    return std::max(detail::median_abs_deviation_sorted(d, n, 0.0), upper);
  for (std::size_t i = 0; i < n; ++i) d[i] = std::fabs(d[i]);
  return std::max(detail::median_inplace(d, n), upper);
}

// std::clamp for the vectorized pass (it returns a reference, which keeps GCC from
// if-converting the loop).
inline float clamp_f(float v, float lo, float hi) { return std::min(std::max(v, lo), hi); }


// The parameters of one (cohort, stage)'s pass in a window.
struct SeqPass {
  float weight[4], mid[4];       // per shift: LLR = weight (x - mid)
  float ceiling_open, ceiling_held;  // most evidence a window may add; held: waiting or tiny
  float hold_below, absolute;    // excess (ms) at or under which the window is held
  float step_limit;              // 3 sigma: the most a window moves the level
  float early_limit;             // first windows: |x| over this is left out of the baseline
  bool early;                    // some slot may be in its first kOwnWarmup windows
  float log_slow;                // ln(relative_threshold): pauses count after windows under it
  // The own-baseline test: a Student-t LLR of d = x - base,
  // own_half_nu1 ln((own_nu_s2 + d^2) / (own_nu_s2 + (d - own_delta)^2)), capped at
  // own_ceiling_*.
  float own_half_nu1, own_nu_s2, own_delta;
  float own_shift;  // taken off after the cap: the evidence falls to 0 where the test is off
  float own_jump;  // over the baseline by this (log): no evidence for the own-baseline test
  float own_ceiling_open, own_ceiling_held;
  float base_inv_nu_s2;  // 1 / (nu s^2) of the baseline's score (kOwnScoreGain)
  // The cost test: LLR = cost_weight (x - cost_mid); held where the excess is at or under
  // hold_below or under cost_absolute (the user's absolute rule; no 0.5 ms floor).
  float cost_weight, cost_mid, cost_absolute;
  float cost_clip;  // x is taken at most this (Huber): alternative + kCostClip sigma
  // The most the cost test's CUSUM holds: one window's cap over its threshold. Its healthy
  // windows take little away where null and alternative are close, so a CUSUM that had grown
  // over a long slowdown would keep the rank named for many windows after it recovered.
  float cost_top;
  // The intermittent test: LLR = mix_keep + ln(1 + mix_odds e^L), L = min(ceiling of the cost
  // test, mix_weight (x - mix_mid)); mix_keep = ln(1 - p), mix_odds = p / (1 - p). Its CUSUM
  // holds at most mix_top, half a slow window's most over its threshold, and it keeps a rank
  // named only while at or over its threshold: a rank slow in a share of the windows is not
  // known to have recovered until several ordinary windows ran, and one that was slow in every
  // window (which this test also sees) is to be cleared as fast as the other tests clear it.
  float mix_weight, mix_mid, mix_keep, mix_odds, mix_top;
  // The null's share r0 of slow windows (what the cohort's ranks show): the LLR's denominator is
  // 1 - r0 + r0 LR = (1 - r0)(1 + mix_null_odds LR); mix_null_keep = ln(1 - r0).
  float mix_null_keep, mix_null_odds;
  // A pause-sized window (x at or over mix_cut, not held) takes mix_big_llr, ln(1 - p + p alpha /
  // r_p), whatever its size: against the share r_p of such windows the cohort shows.
  float mix_cut, mix_big_llr;
  float mix_ceiling;  // open: no cap (the null's share of slow windows bounds the LLR by p / r0)
  // Added to the evidence of the relative_threshold test, the own-baseline one and the cost
  // test where it is over 0: their larger shares of the budget (the threshold is that of the
  // smallest share).
  float bonus0, bonus_own, bonus_cost, bonus_mix;
};

// The own-baseline test's evidence of one window before its cap: none until the rank has a
// baseline (kOwnWarmup windows); a window 1.5x or more over the baseline is a pause or a larger
// slowdown, which the other shifts' tests weigh: it adds nothing here, either way.
inline float own_llr(const SeqPass& q, float xj, float b, bool warm) {
  const float d = xj - b, e = d - q.own_delta;
  const float t = q.own_half_nu1 * fast_logf((q.own_nu_s2 + d * d) / (q.own_nu_s2 + e * e));
  return !warm ? -1.0f : d >= q.own_jump ? 0.0f : t;
}

// What one pass over a (cohort, stage) counts besides the state it updates.
struct SeqCounts {
  int jumps = 0, jump_base = 0;  // pauses: 1.5x the median after a window under the shift
  int mix_hits = 0, mix_chances = 0;  // slow windows of ranks whose intermittent evidence is 0
  int mix_bigs = 0;                   // of them, pause-sized ones (not in mix_hits)
  int open = 0;  // slots whose own-baseline or intermittent test was open (seq_pass_block)
};

// Slots per block of seq_pass: the block's saved baselines and marks stay in L1 while the few
// slots the vectorized loop left open are finished.
constexpr std::size_t kSeqBlock = 256;
// A block with more than 1 / kFullShare of its slots open makes the next block compute every
// slot's LLRs in its loop (the results are the same either way; only the cost differs).
constexpr int kFullShare = 64;
// Windows after which every slot of a settled track has seen at least 1 / kBaseAlpha windows: its
// baseline's weight max(kBaseAlpha, 1 / seen) is kBaseAlpha (1.0f / 20.0f is 0.05f, the float
// nearest 0.05), and the pass takes it as a constant instead of a division per slot.
constexpr int kSteadyWindows = 20;
static_assert(kSteadyWindows >= kOwnWarmup, "settled_windows counts up to the larger of the two");
static_assert(kMixShare == 0.5 && kMixPauseSized == 0.25,
              "seq_pass_block's closed intermittent test: its margin is for these shares");

// Whether the eight values from j on are all 0 (false where fewer than eight are left): the
// loops over rare marks skip those eight at once.
inline bool eight_clear(const std::int32_t* v, std::size_t j, std::size_t n) {
  if (j + 8 > n) return false;
  std::int32_t any = 0;
  for (std::size_t k = 0; k < 8; ++k) any |= v[j + k];
  return any == 0;
}

// The intermittent test's window LLR (the same expression wherever it is computed): a
// pause-sized window (`big`) takes mix_big_llr, any other the band's mixture LLR.
inline float mix_value(const SeqPass& q, float mix_old, float mix_l, bool big) {
  const float mix_lr = fast_expf(mix_l);
  const float mix_band = (q.mix_keep - q.mix_null_keep) +
                         fast_logf((1.0f + q.mix_odds * mix_lr) / (1.0f + q.mix_null_odds * mix_lr));
  return std::min(q.mix_top, std::max(0.0f, mix_old + (big ? q.mix_big_llr : mix_band)));
}

// A slot's evidence from its CUSUMs after the window: the largest CUSUM with its test's bonus
// (as Handle::evidence computes it for the few findings).
inline float seq_most(const SeqPass& q, float threshold, float v0, float v1, float v2, float v3,
                      float v5, float vc, float vm) {
  return std::max(
      std::max(std::max(std::max(v0 > 0.0f ? v0 + q.bonus0 : 0.0f, v1), std::max(v2, v3)),
               v5 > 0.0f ? v5 + q.bonus_own : 0.0f),
      std::max(vc > 0.0f ? vc + q.bonus_cost : 0.0f,
               vm + q.bonus_mix >= threshold ? vm + q.bonus_mix : 0.0f));
}

// A slot's name after the window (set at the threshold, kept until the evidence is back at 0)
// and its attention: bit 0 the name held, bit 1 evidence that rose from 0 (was_zero: every CUSUM
// was 0 before the window). In 32-bit integers, as the pass's floats: a byte in the vectorized
// loop would make it run 32 slots to a step (four vectors per float), more than the registers
// hold.
inline std::int32_t seq_marks(float most, float threshold, std::int32_t was_zero,
                              std::int32_t named_before, std::int32_t& named_after) {
  const std::int32_t held_name = (named_before | (most >= threshold)) & (most != 0.0f);
  named_after = held_name;
  return held_name | ((was_zero & (most > 0.0f)) << 1);
}

// Finishes a slot that seq_pass_block's loop left open (`open`: bit 0 the own-baseline test, bit
// 1 the intermittent one): their CUSUMs from the values before the window (`own`, `mix`; b the
// baseline before it), then the slot's evidence, name and marks (`attention` holds was_zero).
inline __attribute__((always_inline)) void finish_open_slot(
    const SeqPass& q, float threshold, std::int32_t open, float xj, double ms, double median,
    int seen, float b, float c0, float c1, float c2, float c3, float cost, float& own, float& mix,
    std::int32_t& named, std::int32_t& attention) {
  const float exj = static_cast<float>(ms - median);
  const bool held = (exj <= q.hold_below) | (exj < q.absolute);
  const bool cost_held = (exj <= q.hold_below) | (exj < q.cost_absolute);
  if (open & 2) {
    const float mix_l =
        std::min(cost_held ? q.ceiling_held : q.mix_ceiling, q.mix_weight * (xj - q.mix_mid));
    mix = mix_value(q, mix, mix_l, (xj >= q.mix_cut) & !cost_held);
  }
  if (open & 1) {
    const bool warm = seen - 1 >= kOwnWarmup;
    const float own_ceiling = held ? q.own_ceiling_held : q.own_ceiling_open;
    own = std::max(0.0f, own + std::min(own_ceiling, own_llr(q, xj, b, warm)) - q.own_shift);
  }
  const float most = seq_most(q, threshold, c0, c1, c2, c3, own, cost, mix);
  // attention: bit 0 was_zero, bits 2 and 3 the band's marks (kept).
  attention = seq_marks(most, threshold, attention & 1, named, named) | (attention & 12);
}
// The same as a call (for the sparse loop).
__attribute__((noinline)) void finish_open_slot_call(
    const SeqPass& q, float threshold, std::int32_t open, float xj, double ms, double median,
    int seen, float b, float c0, float c1, float c2, float c3, float cost, float& own, float& mix,
    std::int32_t& named, std::int32_t& attention) {
  finish_open_slot(q, threshold, open, xj, ms, median, seen, b, c0, c1, c2, c3, cost, own, mix,
                   named, attention);
}

// One window of one (cohort, stage) over its slots [0, n): the noise level, the five shifts'
// CUSUMs and the own-baseline one with its baseline, the names (set at the threshold, kept
// until the evidence is back at 0), and the pauses seen. `attention` is non-zero where the
// caller has per-slot work: evidence that rose from 0 in this window, or a name held. A
// branch-free pass over contiguous arrays (restrict: nothing aliases), so the compiler
// vectorizes it; at 16,384 ranks x 16 stages it is the detector's inner loop.
//
// The own-baseline and intermittent tests' LLRs (two float divisions, two logarithms and an
// exponential a slot) are left out of the vectorized loop where their result is known without
// them, which is nearly every slot of a healthy window: their CUSUM is at 0 and stays there.
//  - own: at 0, the new value is max(0, min(ceiling, llr) - own_shift), own_shift >= 0, which is
//    0 wherever llr <= 0: before the warm-up (llr = -1), a jump (llr = 0), or
//    half_nu1 ln((nu_s2 + d^2) / (nu_s2 + e^2)) with half_nu1 >= 0 and the float numerator at
//    or under the float denominator: their correctly rounded quotient is then at most 1, and
//    fast_logf of a float at most 1 is at most 0 (fast_logf(1) is 0; below 1 the series of the
//    mantissa, |series| <= 0.347, never outweighs a negative exponent's ln 2).
//  - intermittent, in a window that is not pause-sized: at 0, the new value is min(mix_top,
//    max(0, ln((1 - p + p' LR) / (1 - r_b + r_b LR)))) with p = kMixShare = 1/2,
//    p' = p (1 - kMixPauseSized) = 0.375 and r_b clamped to at most p' / 2, which is under 0 for
//    LR < 1 and rises with LR; for mix_l <= -1 (LR <= e^-1) it is under -0.32 (at r_b = p' / 2;
//    further under for smaller r_b), far past fast_expf's and fast_logf's errors (~1e-7): the
//    value is min(mix_top, 0). A pause-sized window is always open (its LLR is positive).
// The slots where either is open are marked in the block (`open`: bit 0 own, bit 1 intermittent),
// keep their old CUSUM and name through the loop (their attention holds was_zero), and are
// finished right after it with the same expressions: the same floats as one pass computing
// everything for every slot. kFull is that one pass (no slot left open), for blocks where many
// are open (seq_pass_blocks picks it).
// Outside kFull, a group of eight slots that are all quiet (quiet_lane: every CUSUM and the name
// at +0, and x where no test's LLR can be over 0) takes a short body that moves only the level,
// the baseline and the counts: what the whole body computes for them, without its tests. In a
// healthy window nearly every group is quiet.
template <bool kEarly, bool kSteady, bool kFull>
inline __attribute__((always_inline)) SeqCounts seq_pass_block(
    std::size_t n, const SeqPass& p, float threshold, const double* __restrict ms, double median,
    int* __restrict seen, float* __restrict level, float* __restrict last,
    float* __restrict c0, float* __restrict c1, float* __restrict c2,
    float* __restrict c3, float* __restrict base, float* __restrict own,
    float* __restrict cost, float* __restrict mix, std::int32_t* __restrict named,
    std::int32_t* __restrict attention, float* __restrict base_before,
    float* __restrict x_of, float* __restrict deviation, std::int32_t* __restrict open,
    std::uint8_t* __restrict name_bytes, std::uint8_t* __restrict mark_bytes) {
  const SeqPass q = p;  // locals: no reload through the reference in the loop
  const double inv_ref = log_ratio_ref(median);
  const float log_slow = q.log_slow, log_pause = q.own_jump;
  const float mix_closed = std::min(q.mix_top, 0.0f);
  const bool own_off = q.own_half_nu1 == 0.0f;
  // Quiet slots (quiet_lane) take the short body where every test's LLR has a sign that is known
  // from x: the weights >= 0, and the caps of the cost and intermittent tests and the threshold
  // over 0 (a CUSUM at 0 then stays at +0).
  float x_quiet = std::numeric_limits<float>::infinity();
  bool quiet_ok = q.cost_weight >= 0.0f && q.cost_top > 0.0f && q.mix_top > 0.0f &&
                  threshold > 0.0f && q.bonus_mix < threshold;
  for (int k = 0; k < 4; ++k) {
    quiet_ok = quiet_ok && q.weight[k] >= 0.0f;
    if (q.weight[k] > 0.0f) x_quiet = std::min(x_quiet, q.mid[k]);
  }
  if (q.cost_weight > 0.0f) x_quiet = std::min(x_quiet, q.cost_mid);
  int jumps = 0, jump_base = 0, mix_hits = 0, mix_chances = 0, mix_bigs = 0;
  std::int32_t open_count = 0;
  // What every slot does first (`slot` and `quiet_slot`). Pauses: 1.5x the median straight after
  // a window at most relative_threshold (a straggler's onset counts once; its later windows do
  // not). The level follows the rank, a pause moving it by 3 sigma at most: a running mean over
  // the first windows, then an EWMA (past kOwnWarmup windows every slot is in the EWMA).
  auto move_level = [&](std::size_t j, float xj, int seen_before) __attribute__((always_inline)) {
    const int pause_base = (seen_before > 0) & (last[j] < log_slow);
    jump_base += pause_base;
    jumps += pause_base & (xj >= log_pause);
    deviation[j] = xj - level[j];  // the noise estimate's sample (before the level moves)
    const float dev = clamp_f(xj - level[j], -q.step_limit, q.step_limit);
    const float level_alpha =
        kEarly ? std::max(static_cast<float>(kLevelAlpha),
                          1.0f / static_cast<float>(seen_before + 1))
               : static_cast<float>(kLevelAlpha);
    level[j] = seen_before > 0 ? level[j] + level_alpha * dev : xj;
    last[j] = xj;
  };
  // The rank's own baseline b (d = x - b) is learnt while the own test's CUSUM is at 0
  // (own_zero), from the rank's second window on (the first one's sigma is only the prior), as a
  // running mean and then an EWMA, from 0 (the median). Over the first kOwnWarmup windows a
  // window whose |x| is over 3 sigma + ln(healthy_spread) (a pause, a heavy-tailed or warm-up
  // window) is left out; after them each window moves it by a step of the t score
  // (kOwnScoreGain), which a window far from the baseline hardly moves. Clipped around the
  // baseline instead, two fast first windows had held it low: the ordinary windows that followed
  // were clipped too, so it came back too slowly, the test started against it and read them as
  // slow, and a baseline learnt only at 0 stayed there.
  auto move_base = [&](std::size_t j, float xj, float b, float d, int seen_before, bool warm,
                       bool own_zero) __attribute__((always_inline)) {
    const bool early = kEarly && !warm;
    const float base_alpha =
        kSteady ? static_cast<float>(kBaseAlpha)
                : std::max(static_cast<float>(kBaseAlpha),
                           1.0f / static_cast<float>(std::max(seen_before, 1)));
    const float base_step =
        early ? d : static_cast<float>(kOwnScoreGain) * d / (1.0f + d * d * q.base_inv_nu_s2);
    const bool learn = own_zero & (seen_before > 0) & (!early | (std::fabs(xj) <= q.early_limit));
    base[j] = learn ? b + base_alpha * base_step : b;
    base_before[j] = b;
  };
  // One slot, every test.
  auto slot = [&](std::size_t j) __attribute__((always_inline)) {
    const float xj = x_of[j];
    const float exj = static_cast<float>(ms[j] - median);  // the excess in ms
    const int seen_before = seen[j];
    seen[j] = seen_before + 1;
    move_level(j, xj, seen_before);
    const bool held = (exj <= q.hold_below) | (exj < q.absolute);
    const float ceiling = held ? q.ceiling_held : q.ceiling_open;
    const float v0 = std::max(0.0f, c0[j] + std::min(ceiling, q.weight[0] * (xj - q.mid[0])));
    const float v1 = std::max(0.0f, c1[j] + std::min(ceiling, q.weight[1] * (xj - q.mid[1])));
    const float v2 = std::max(0.0f, c2[j] + std::min(ceiling, q.weight[2] * (xj - q.mid[2])));
    const float v3 = std::max(0.0f, c3[j] + std::min(ceiling, q.weight[3] * (xj - q.mid[3])));
    // The evidence (the largest CUSUM) rises from 0 where every CUSUM was at 0 before this
    // window: no array of it is kept (Handle::evidence computes it for the few findings).
    const float own_before = own[j], mix_before = mix[j];
    const bool was_zero = (c0[j] == 0.0f) & (c1[j] == 0.0f) & (c2[j] == 0.0f) &
                          (c3[j] == 0.0f) & (own_before == 0.0f) & (cost[j] == 0.0f) &
                          (mix_before == 0.0f);
    c0[j] = v0;
    c1[j] = v1;
    c2[j] = v2;
    c3[j] = v3;
    // The cost test: no 0.5 ms floor (its null holds what costs the step too little).
    const bool cost_held = (exj <= q.hold_below) | (exj < q.cost_absolute);
    const float cost_ceiling = cost_held ? q.ceiling_held : q.ceiling_open;
    const float vc = std::min(
        q.cost_top,
        std::max(0.0f, cost[j] + std::min(cost_ceiling, q.cost_weight * (std::min(xj, q.cost_clip) -
                                                                          q.cost_mid))));
    cost[j] = vc;
    // The intermittent test, on the same x as the cost test (unclipped: a slow window is the
    // slow component, however slow) and held as it is.
    // Against a null with the share of slow windows the cohort shows (the ranks whose evidence
    // here is 0 count it; a rank slow in a share of its windows counts about one per run of
    // evidence). Closed (at 0, staying there): min(mix_top, 0), see above.
    const float mix_l =
        std::min(cost_held ? q.ceiling_held : q.mix_ceiling, q.mix_weight * (xj - q.mix_mid));
    const bool mix_big = (xj >= q.mix_cut) & !cost_held;
    const int mix_open = mix_before == 0.0f;
    mix_chances += mix_open;
    const int mix_band_window = (mix_l > 0.0f) & !mix_big;
    const int mix_hit = mix_open & mix_band_window;
    mix_hits += mix_hit;
    mix_bigs += mix_open & mix_big;
    const bool mix_closed_here = (mix_before == 0.0f) & (mix_l <= -1.0f) & !mix_big;
    const float vm = kFull              ? mix_value(q, mix_before, mix_l, mix_big)
                     : mix_closed_here ? mix_closed
                                       : mix_before;
    mix[j] = vm;
    // Against the rank's own baseline, once it has one (kOwnWarmup windows; move_base learns it).
    // Closed (at 0, staying there): 0, see above.
    const float b = base[j];
    const bool warm = seen_before >= kOwnWarmup;  // the test runs; before, the first windows' rule
    const float d = xj - b, e = d - q.own_delta;
    const bool own_closed_here =
        (own_before == 0.0f) &
        (!warm | (d >= q.own_jump) | own_off | (q.own_nu_s2 + d * d <= q.own_nu_s2 + e * e));
    const float own_ceiling = held ? q.own_ceiling_held : q.own_ceiling_open;
    const float v5 =
        kFull ? std::max(0.0f, own_before + std::min(own_ceiling, own_llr(q, xj, b, warm)) -
                                   q.own_shift)
        : own_closed_here ? 0.0f
                          : own_before;
    move_base(j, xj, b, d, seen_before, warm, own_before == 0.0f);
    own[j] = v5;
    const std::int32_t was_open = static_cast<std::int32_t>(!own_closed_here) |
                                  (static_cast<std::int32_t>(!mix_closed_here) << 1);
    const std::int32_t opened = kFull ? 0 : was_open;
    std::int32_t held_name;
    const std::int32_t marks = seq_marks(seq_most(q, threshold, v0, v1, v2, v3, v5, vc, vm),
                                         threshold, was_zero, named[j], held_name);
    // Bits 2 and 3: a window in the intermittent test's fault band, and one that counted in the
    // cohort's share of them (observe_sequential weighs it again against the share without the
    // rank's own).
    const std::int32_t band_marks = (mix_band_window << 2) | (mix_hit << 3);
    if (kFull) {
      // In bytes here (copied out below): a byte in the loop makes the compiler run it 32 slots
      // to a step, four independent chains of this loop's long dependent arithmetic (three
      // divisions, two logarithms and an exponential in a row), which hides their latency
      // better than one chain of 8 where every slot computes all of it.
      name_bytes[j] = static_cast<std::uint8_t>(held_name);
      mark_bytes[j] = static_cast<std::uint8_t>(marks | band_marks);
    } else {
      named[j] = opened ? named[j] : held_name;
      attention[j] = (opened ? static_cast<std::int32_t>(was_zero) : marks) | band_marks;
    }
    open[j] = opened;
    open_count += was_open != 0;
  };
  // A quiet slot (quiet_lane): every CUSUM at 0 and staying there, no name, no mark; only the
  // level, the baseline and the counts move. The same expressions as in `slot`.
  auto quiet_slot = [&](std::size_t j) __attribute__((always_inline)) {
    const float xj = x_of[j];
    const int seen_before = seen[j];
    seen[j] = seen_before + 1;
    move_level(j, xj, seen_before);
    mix_chances += 1;
    const float b = base[j];
    move_base(j, xj, b, xj - b, seen_before, seen_before >= kOwnWarmup, true);
    attention[j] = 0;
    open[j] = 0;
  };
  // Whether slot j is quiet: every CUSUM and the name at 0, and x at or under every test's
  // midpoint (x_quiet), so that each cohort test's and the cost test's window LLR is at most 0
  // (weights >= 0; x - mid rounds to a value of the same sign) and its CUSUM stays at +0; the
  // intermittent test's mix_l at most -1 and the window not pause-sized (closed: min(mix_top, 0)
  // = +0 with mix_top > 0); the own-baseline test closed (the same test as in `slot`). Then the
  // evidence is 0 (bonus_mix under the threshold), and so are the name and the marks.
  auto quiet_lane = [&](std::size_t j) __attribute__((always_inline)) {
    const float xj = x_of[j];
    // Every CUSUM +0 and no name: all their bits 0 (a -0 is not taken for quiet; none is
    // stored: each CUSUM is a max with +0, a min of that with a positive top, or +0).
    auto bits = [](float v) {
      std::uint32_t u;
      std::memcpy(&u, &v, sizeof u);
      return u;
    };
    const bool zero = (bits(c0[j]) | bits(c1[j]) | bits(c2[j]) | bits(c3[j]) | bits(cost[j]) |
                       bits(mix[j]) | bits(own[j]) | static_cast<std::uint32_t>(named[j])) == 0;
    const float b = base[j];
    const bool warm = seen[j] >= kOwnWarmup;
    const float d = xj - b, e = d - q.own_delta;
    const bool own_shut =
        !warm | (d >= q.own_jump) | own_off | (q.own_nu_s2 + d * d <= q.own_nu_s2 + e * e);
    const bool mix_shut = (q.mix_weight * (xj - q.mix_mid) <= -1.0f) & (xj < q.mix_cut);
    return static_cast<std::int32_t>(zero & (xj <= x_quiet) & mix_shut & own_shut);
  };
  // Every slot's x first (each body reads it), and where quiet slots may be, which are (in
  // `open`, which each group's bodies overwrite after reading the group's marks).
  const bool quiet_groups = !kFull && quiet_ok;
  if (quiet_groups) {
    for (std::size_t j = 0; j < n; ++j) {
      x_of[j] = log_ratio(ms[j], inv_ref);
      open[j] = quiet_lane(j);
    }
  } else {
    for (std::size_t j = 0; j < n; ++j) x_of[j] = log_ratio(ms[j], inv_ref);
  }
  std::size_t from = 0;
  if (quiet_groups) {
    for (; from + 8 <= n; from += 8) {
      std::uint64_t marks[4];  // the group's eight marks, two a word
      std::memcpy(marks, open + from, sizeof marks);
      const bool quiet = (marks[0] & marks[1] & marks[2] & marks[3]) == 0x0000000100000001ull;
      if (quiet) {
        for (std::size_t k = 0; k < 8; ++k) quiet_slot(from + k);
      } else {
        for (std::size_t k = 0; k < 8; ++k) slot(from + k);
      }
    }
  }
  for (std::size_t j = from; j < n; ++j) slot(j);
  if (kFull) {
    for (std::size_t j = 0; j < n; ++j) {
      named[j] = name_bytes[j];
      attention[j] = mark_bytes[j];
    }
  }
  if (kFull || open_count == 0)
    return {jumps, jump_base, mix_hits, mix_chances, mix_bigs, open_count};
  // The slots left open: their LLRs, then their evidence and marks. Where they are many (a
  // window with pauses, a run of stragglers) in one vectorized loop over the block, else one by
  // one (a call each, which also keeps the compiler from vectorizing that loop).
  if (open_count * 10 > static_cast<std::int32_t>(n)) {
    for (std::size_t j = 0; j < n; ++j)
      if (open[j] != 0)
        finish_open_slot(q, threshold, open[j], x_of[j], ms[j], median, seen[j], base_before[j],
                         c0[j], c1[j], c2[j], c3[j], cost[j], own[j], mix[j], named[j],
                         attention[j]);
  } else {
    for (std::size_t j = 0; j < n; ++j) {
      if (eight_clear(open, j, n)) {
        j += 7;
        continue;
      }
      if (open[j] != 0)
        finish_open_slot_call(q, threshold, open[j], x_of[j], ms[j], median, seen[j],
                              base_before[j], c0[j], c1[j], c2[j], c3[j], cost[j], own[j], mix[j],
                              named[j], attention[j]);
    }
  }
  return {jumps, jump_base, mix_hits, mix_chances, mix_bigs, open_count};
}

// The pass over [0, n), kSeqBlock slots at a time; `full` says whether the first block runs the
// one-pass loop (kFull), and is left saying whether the block after the last would (a track's
// next window starts from it). With `stride` > 0, the deviations x - level
// (before the level moves) of the slots j = 0, stride, 2 stride, ... that had a window before
// are appended to `noise`, as doubles, in the order of j: the noise estimate's sample, taken
// here while the block is in cache instead of by strided reads before the pass.
template <bool kEarly, bool kSteady>
inline __attribute__((always_inline)) SeqCounts seq_pass_blocks(
    std::size_t n, const SeqPass& p, float threshold, const double* __restrict ms, double median,
    int* __restrict seen, float* __restrict level, float* __restrict last,
    float* __restrict c0, float* __restrict c1, float* __restrict c2,
    float* __restrict c3, float* __restrict base, float* __restrict own,
    float* __restrict cost, float* __restrict mix, std::int32_t* __restrict named,
    std::int32_t* __restrict attention, std::size_t stride, std::vector<double>& noise,
    bool& full) {
  alignas(64) float base_before[kSeqBlock];
  alignas(64) float deviation[kSeqBlock];
  alignas(64) float x_of[kSeqBlock];
  alignas(64) std::uint8_t name_bytes[kSeqBlock], mark_bytes[kSeqBlock];
  alignas(64) std::int32_t open[kSeqBlock];
  SeqCounts total;
  std::size_t next = 0;  // the next slot the noise estimate samples
  for (std::size_t s = 0; s < n; s += kSeqBlock) {
    const std::size_t len = std::min(kSeqBlock, n - s);
    // Where the block before had many slots open (a window with pauses or stragglers), every
    // slot's LLRs in the one loop (kFull): finishing them apart costs more there.
    const SeqCounts c =
        full ? seq_pass_block<kEarly, kSteady, true>(
                   len, p, threshold, ms + s, median, seen + s, level + s, last + s, c0 + s,
                   c1 + s, c2 + s, c3 + s, base + s, own + s, cost + s, mix + s, named + s,
                   attention + s, base_before, x_of, deviation, open, name_bytes, mark_bytes)
             : seq_pass_block<kEarly, kSteady, false>(
                   len, p, threshold, ms + s, median, seen + s, level + s, last + s, c0 + s,
                   c1 + s, c2 + s, c3 + s, base + s, own + s, cost + s, mix + s, named + s,
                   attention + s, base_before, x_of, deviation, open, name_bytes, mark_bytes);
    full = c.open * kFullShare > static_cast<int>(len);
    for (; stride > 0 && next < s + len; next += stride)
      if (seen[next] > 1) noise.push_back(static_cast<double>(deviation[next - s]));
    total.jumps += c.jumps;
    total.jump_base += c.jump_base;
    total.mix_hits += c.mix_hits;
    total.mix_chances += c.mix_chances;
    total.mix_bigs += c.mix_bigs;
  }
  return total;
}

// The pass, for a (cohort, stage) whose slots may still be in their first kOwnWarmup windows
// (p.early) or not, and have all seen kSteadyWindows windows (steady) or not: the first
// windows' baseline rule and the weight's division are compiled out of the loop where they
// cannot apply.
LAGGARD_WIDE_CLONES
SeqCounts seq_pass(std::size_t n, const SeqPass& p, bool steady, float threshold,
                   const double* __restrict ms, double median, int* __restrict seen,
                   float* __restrict level, float* __restrict last, float* __restrict c0,
                   float* __restrict c1, float* __restrict c2, float* __restrict c3,
                   float* __restrict base, float* __restrict own,
                   float* __restrict cost, float* __restrict mix,
                   std::int32_t* __restrict named, std::int32_t* __restrict attention,
                   std::size_t stride, std::vector<double>& noise, bool& full) {
  if (p.early)
    return seq_pass_blocks<true, false>(n, p, threshold, ms, median, seen, level, last, c0, c1,
                                        c2, c3, base, own, cost, mix, named, attention, stride,
                                        noise, full);
  if (steady)
    return seq_pass_blocks<false, true>(n, p, threshold, ms, median, seen, level, last, c0, c1,
                                        c2, c3, base, own, cost, mix, named, attention, stride,
                                        noise, full);
  return seq_pass_blocks<false, false>(n, p, threshold, ms, median, seen, level, last, c0, c1,
                                       c2, c3, base, own, cost, mix, named, attention, stride,
                                       noise, full);
}

}  // namespace

void Detector::SeqTrack::arrange(const std::vector<int>& ranks) {
  const std::size_t n = ranks.size();
  if (n <= slot_rank.size() && std::equal(ranks.begin(), ranks.end(), slot_rank.begin())) return;
  settled_windows = 0;  // a slot may be new
  // For each new slot, the old slot it takes (-1: a rank not seen before): the window's ranks
  // in order, then the ranks that are not in this window, parked.
  const std::size_t old_slots = slot_rank.size();
  std::vector<int> from;
  from.reserve(n + old_slots);
  std::vector<char> taken(old_slots, 0);
  std::vector<int> new_rank;
  new_rank.reserve(n + old_slots);
  for (int rank : ranks) {
    int old = slot(rank);
    if (old >= 0 && taken[static_cast<std::size_t>(old)]) old = -1;  // the rank twice: a new slot
    if (old >= 0) taken[static_cast<std::size_t>(old)] = 1;
    from.push_back(old);
    new_rank.push_back(rank);
  }
  for (std::size_t s = 0; s < old_slots; ++s)
    if (!taken[s]) {
      from.push_back(static_cast<int>(s));
      new_rank.push_back(slot_rank[s]);
    }
  auto permute = [&](auto& values, auto fresh) {
    std::remove_reference_t<decltype(values)> out(from.size(), fresh);
    for (std::size_t s = 0; s < from.size(); ++s)
      if (from[s] >= 0) out[s] = values[static_cast<std::size_t>(from[s])];
    values.swap(out);
  };
  for (auto& c : cusum) permute(c, 0.0f);
  permute(level, 0.0f);
  permute(last, 0.0f);
  permute(base, 0.0f);
  permute(own, 0.0f);
  permute(cost, 0.0f);
  permute(mix, 0.0f);
  permute(seen, 0);
  permute(named_bit, std::int32_t{0});
  permute(cold, SeqState{});
  slot_rank.swap(new_rank);
  // Ranks index slot_of_rank: ranks beyond kMaxTrackedRank keep a slot but are not found by rank.
  for (int& v : slot_of_rank) v = -1;
  for (std::size_t s = 0; s < slot_rank.size(); ++s) {
    const int rank = slot_rank[s];
    if (rank < 0 || rank >= kMaxTrackedRank) continue;
    const std::size_t r = static_cast<std::size_t>(rank);
    if (r >= slot_of_rank.size()) slot_of_rank.resize(r + 1, -1);
    if (slot_of_rank[r] < 0) slot_of_rank[r] = static_cast<int>(s);
  }
}

double Detector::SeqTrack::sigma() const {
  return scale_windows > 0 ? std::max(kMinSigma, std::exp(log_scale)) : kPriorSigma;
}

std::optional<Detector::SequentialState> Detector::sequential_state(const std::string& cohort,
                                                                    const std::string& stage,
                                                                    int rank) const {
  std::string key;
  const auto it = seq_tracks_.find(stage_key(key, cohort, stage));
  if (it == seq_tracks_.end()) return std::nullopt;
  const SeqTrack& t = it->second;
  const int slot = t.slot(rank);
  if (slot < 0) return std::nullopt;
  const std::size_t u = static_cast<std::size_t>(slot);
  SequentialState s;
  s.sigma = t.sigma();
  s.baseline = t.base[u];
  s.own_evidence = t.own[u];
  s.windows = t.seen[u];
  return s;
}

void Detector::observe_sequential(const ColumnarWindow& window, Report& report) {
  const double log_slow = std::log(options_.relative_threshold);
  const double log_healthy = std::log(options_.healthy_spread);
  // The slowdowns the test looks for: relative_threshold and those of 1.25, 1.5 and 2 above
  // it. One shift's test is weak against a much larger one when the noise is large (its
  // evidence per window grows with the gap it was built for); the others are not.
  double shifts[5];
  int num_shifts = 0;
  shifts[num_shifts++] = log_slow;
  for (double factor : {1.25, 1.5, 2.0})
    if (factor > options_.relative_threshold * 1.05) shifts[num_shifts++] = std::log(factor);
  const double cap = std::log(1.0 / options_.pause_rate);
  const bool use_absolute = std::isfinite(options_.absolute_ms_threshold);

  // Pairs watched: (rank, stage) of the stages that are not communication.
  double pairs = 0.0;
  for (const StageFigures& f : report.stages)
    if (f.kind != StageKind::communication) pairs += static_cast<double>(f.rank_ids.size());
  pairs_ = std::max(pairs_, pairs);
  // One test per shift, and the one against each rank's own baseline.
  // The budget is shared among the tests (Bonferroni, weighted): where the own-baseline test
  // runs, it takes kShareOwn and the test for relative_threshold kShareFirst, since those two
  // carry a slowdown near relative_threshold, where evidence is scarce; the tests for the larger
  // shifts share the rest: they reach the cap in every slow window, and a higher threshold costs
  // them a fraction of a window. Where it does not run, the cohort's tests share the budget
  // equally, as before (the own test's share is not given to them: under heavy noise that is what
  // keeps a healthy run quiet).
  // The cost test takes kShareCost where the own test runs, and an equal share where it does not.
  const double base_threshold = evidence_threshold(options_, pairs_);
  const double uniform_threshold = base_threshold + std::log(num_shifts + 3);
  const double share_first =
      num_shifts > 1 ? kShareFirst : 1.0 - kShareOwn - kShareCost - kShareMix;
  const double share_rest =
      num_shifts > 1 ? (1.0 - kShareOwn - kShareFirst - kShareCost - kShareMix) / (num_shifts - 1)
                     : share_first;
  const double split_threshold = base_threshold - std::log(share_rest);
  const float bonus_first = static_cast<float>(std::log(share_first / share_rest));
  const float bonus_own = static_cast<float>(std::log(kShareOwn / share_rest));
  const float bonus_cost = static_cast<float>(std::log(kShareCost / share_rest));
  const float bonus_mix = static_cast<float>(std::log(kShareMix / share_rest));
  const double healthy_ratio = options_.healthy_spread;

  std::string key;
  auto track_key = [&](const std::string& cohort, const std::string& stage) -> const std::string& {
    return stage_key(key, cohort, stage);
  };

  // Per stage: how many ranks are relative_threshold slower and faster than the median (the wait
  // search below looks at a stage only where there are some). The stage's extent answers for
  // most stages without a pass: no rank is late when even the slowest is short of the threshold
  // (by more than the 1e-7 of x's rounding), none fast when even the fastest is. The counts are
  // needed only where some rank may be fast (a stage of own work, not communication): elsewhere
  // the late count stays -1, "maybe", and the search, which tests every rank itself where it
  // runs, is not misled (a window with pauses has late ranks in every stage).
  std::vector<std::pair<int, int>>& ratio_counts = seq_ratio_counts_;
  ratio_counts.resize(report.stages.size());
  const float flog_slow = static_cast<float>(log_slow);
  constexpr float kRoundingMargin = 1e-5f;
  // Stage i's log-ratios, computed once per window where first asked for (the wait search and
  // the noise estimate read the same ones). Room for every stage's is made here, so a pointer
  // handed out stays valid.
  std::size_t ratio_room = 0;
  for (const StageFigures& f : report.stages) ratio_room += f.rank_ms.size();
  if (seq_x_.size() < ratio_room) seq_x_.resize(ratio_room);
  seq_x_at_.assign(report.stages.size(), 0);
  std::size_t ratio_used = 0;
  auto stage_ratios = [&](std::size_t i) -> const float* {
    if (seq_x_at_[i] == 0) {
      const StageFigures& f = report.stages[i];
      log_ratios(f.rank_ms.size(), f.rank_ms.data(), f.median_ms, seq_x_.data() + ratio_used);
      seq_x_at_[i] = ratio_used + 1;
      ratio_used += f.rank_ms.size();
    }
    return seq_x_.data() + (seq_x_at_[i] - 1);
  };
  for (std::size_t i = 0; i < report.stages.size(); ++i) {
    const StageFigures& f = report.stages[i];
    const double inv_ref = log_ratio_ref(f.median_ms);
    const bool maybe_late = log_ratio(f.max_ms, inv_ref) >= flog_slow - kRoundingMargin;
    const bool maybe_fast = log_ratio(f.min_ms, inv_ref) <= -flog_slow + kRoundingMargin;
    ratio_counts[i] = {maybe_late ? -1 : 0, 0};
    if (maybe_fast && f.kind != StageKind::communication) {
      // From the stage's log-ratios, which the wait search reads next.
      const float* x = stage_ratios(i);
      int late = 0, fast = 0;
      for (std::size_t j = 0; j < f.rank_ms.size(); ++j) {
        late += x[j] >= flog_slow;
        fast += x[j] <= -flog_slow;
      }
      ratio_counts[i] = {late, fast};
    }
  }

  // A stage holds a wait for a late rank when a rank that is relative_threshold slower than the
  // median in another stage of its cohort is faster than the median in this one, by more than
  // relative_threshold and 3 sigma of the stage, and by about what it lost elsewhere (0.5x to 2x
  // in ms): it arrived last at a collective inside this stage, and the others waited there for
  // it. Excess in this stage up to 1.5x that wait is then waiting, whatever the stage was
  // called: it gives no evidence. (Matching the milliseconds keeps a pause in one stage and
  // jitter in another from looking like a wait in a large cohort.)
  std::vector<double>& wait_ms = seq_wait_;
  wait_ms.assign(report.stages.size(), 0.0);
  // A stage of own work with a rank relative_threshold faster than the median: else nobody
  // arrived last in it.
  auto may_hold_wait = [&](std::size_t i) {
    const StageFigures& f = report.stages[i];
    return f.kind != StageKind::communication && f.rank_ids.size() >= 2 &&
           ratio_counts[i].second > 0;
  };
  for (std::size_t b = 0; b < report.stages.size();) {
    std::size_t e = b;
    while (e < report.stages.size() && report.stages[e].cohort == report.stages[b].cohort) ++e;
    auto& late = seq_late_;
    late.clear();
    // The late ranks matter only where some rank is fast enough to have waited for them.
    bool any_fast = false;
    for (std::size_t i = b; i < e; ++i) any_fast |= may_hold_wait(i);
    // Where every stage the search reads has the same ranks in ascending order (the usual case),
    // a rank's position is its key: `late` holds per position (1 if late, its largest excess),
    // and no sort is needed (a sort of the late ranks was a tenth of `laggard analyze` at 64
    // ranks, where noisy stages have late ranks in every window).
    auto reads = [&](std::size_t i) {
      return report.stages[i].kind != StageKind::communication &&
             (ratio_counts[i].first != 0 || may_hold_wait(i));
    };
    const std::vector<int>* ids = nullptr;
    bool by_position = any_fast;
    for (std::size_t i = b; i < e && by_position; ++i) {
      if (!reads(i)) continue;
      if (!ids)
        ids = &report.stages[i].rank_ids;
      else if (report.stages[i].rank_ids != *ids)
        by_position = false;
    }
    by_position = by_position && ids &&
                  std::adjacent_find(ids->begin(), ids->end(), std::greater_equal<int>()) ==
                      ids->end();
    if (by_position) late.assign(ids->size(), {0, 0.0});
    bool any_late = false;
    for (std::size_t i = b; i < e && any_fast; ++i) {
      const StageFigures& f = report.stages[i];
      if (f.kind == StageKind::communication || ratio_counts[i].first == 0) continue;
      const float* x = stage_ratios(i);
      if (by_position) {
        // Without a branch on lateness (in a noisy stage a coin toss per rank, which compilers
        // keep as a branch even for a select of doubles): the bits are selected by a mask.
        for (std::size_t j = 0; j < f.rank_ids.size(); ++j) {
          const bool is_late = x[j] >= flog_slow;
          const double excess = f.rank_ms[j] - f.median_ms;
          std::pair<int, double>& entry = late[j];
          const bool larger = is_late & ((entry.first == 0) | (excess > entry.second));
          std::uint64_t now, kept;
          std::memcpy(&now, &excess, sizeof now);
          std::memcpy(&kept, &entry.second, sizeof kept);
          const std::uint64_t take = 0 - static_cast<std::uint64_t>(larger);
          const std::uint64_t bits = (now & take) | (kept & ~take);
          std::memcpy(&entry.second, &bits, sizeof bits);
          entry.first |= static_cast<int>(is_late);
          any_late |= is_late;
        }
        continue;
      }
      for (std::size_t j = 0; j < f.rank_ids.size(); ++j) {
        if (!(x[j] >= flog_slow)) continue;
        any_late = true;
        late.emplace_back(f.rank_ids[j], f.rank_ms[j] - f.median_ms);
      }
    }
    if (!by_position) {
      std::sort(late.begin(), late.end(), [](const auto& a, const auto& c) {
        return a.first < c.first || (a.first == c.first && a.second > c.second);
      });
      late.erase(std::unique(late.begin(), late.end(),
                             [](const auto& a, const auto& c) { return a.first == c.first; }),
                 late.end());  // each rank once, with its largest excess
    }
    // The largest excess of the rank at position j of stage f, or null where it is not late.
    auto late_excess = [&](const StageFigures& f, std::size_t j) -> const double* {
      if (by_position) return late[j].first ? &late[j].second : nullptr;
      auto it = std::lower_bound(
          late.begin(), late.end(), f.rank_ids[j],
          [](const std::pair<int, double>& a, int rank) { return a.first < rank; });
      return it == late.end() || it->first != f.rank_ids[j] ? nullptr : &it->second;
    };
    if (any_late) {
      for (std::size_t i = b; i < e; ++i) {
        if (!may_hold_wait(i)) continue;
        const StageFigures& f = report.stages[i];
        auto t = seq_tracks_.find(track_key(f.cohort, f.stage));
        const double low = -std::max(log_slow, 3.0 * (t == seq_tracks_.end()
                                                           ? kPriorSigma
                                                           : t->second.sigma()));
        const float* x = stage_ratios(i);
        for (std::size_t j = 0; j < f.rank_ids.size(); ++j) {
          const double deficit = f.median_ms - f.rank_ms[j];
          if (static_cast<double>(x[j]) > low || deficit < kMinWaitMs) continue;
          const double* excess = late_excess(f, j);
          if (!excess) continue;
          if (!(*excess >= 0.5 * deficit && *excess <= 2.0 * deficit)) continue;
          if (deficit <= wait_ms[i]) continue;
          if (wait_ms[i] == 0.0) {
            report.hints.push_back("measured: rank " + std::to_string(f.rank_ids[j]) +
                                   cohort_suffix(f.cohort) + " is slow in another stage and " +
                                   fixed2(deficit) + " ms faster than the median in '" + f.stage +
                                   "'; inferred: '" + f.stage +
                                   "' holds a wait for it, and the others' excess there is "
                                   "waiting");
          }
          wait_ms[i] = deficit;
        }
      }
    }
    b = e;
  }

  std::vector<double>& scratch = seq_scratch_;
  seq_named_.clear();
  for (std::size_t i = 0; i < report.stages.size(); ++i) {
    const StageFigures& f = report.stages[i];
    SeqTrack& track = seq_tracks_[track_key(f.cohort, f.stage)];
    track.arrange(f.rank_ids);  // slot j is f.rank_ids[j]
    const double* ms = f.rank_ms.data();
    const std::size_t n = f.rank_ids.size();

    // The evidence uses the noise estimated up to the previous window; this window's deviations
    // update it afterwards.
    const double sigma = track.sigma();
    const bool comparable = f.kind != StageKind::communication && n >= 2;
    // Shifts not looked for get weight 0: their CUSUM stays at 0 (the loop has a fixed length).
    float weight[kShifts] = {}, mid[kShifts] = {};
    for (int k = 0; k < num_shifts; ++k) {
      weight[k] = static_cast<float>((shifts[k] - log_healthy) / (sigma * sigma));
      mid[k] = static_cast<float>(0.5 * (shifts[k] + log_healthy));
    }
    // The cap follows the pauses this stage has actually seen, when they are more frequent than
    // pause_rate: the budget holds on a noisier machine, at the price of more windows to confirm.
    // The rate seen, with pause_rate as a prior worth kPausePrior rank-windows.
    const double pause_share =
        std::max(options_.pause_rate, (track.pauses + kPausePrior * options_.pause_rate) /
                                          (track.pause_chances + kPausePrior));
    const float fcap = static_cast<float>(std::min(cap, std::log(1.0 / pause_share)));
    // Waiting (explained by the wait this stage holds) or below the absolute rule: evidence may
    // not rise. Communication, or nothing to compare with: it only falls.
    const float hold_below = wait_ms[i] > 0.0 ? static_cast<float>(1.5 * wait_ms[i]) : -1.0f;
    const float absolute = static_cast<float>(
        std::max(kMinExcessMs, use_absolute ? options_.absolute_ms_threshold : 0.0));
    const float step_limit = static_cast<float>(3.0 * sigma);
    const float flog_pause = static_cast<float>(kLogPause);

    int* seen = track.seen.data();
    float* level = track.level.data();
    float* last = track.last.data();

    // Noise: the median over ranks of each rank's deviation from its own level (its persistent
    // offset taken out), so one slow or paused rank does not move it; over 1,024 ranks at most
    // (every n/1,024-th), which estimates a median as well at a fraction of the cost.
    // Two ranks are the exception: their log-ratios to the midpoint mirror each other, so one
    // rank's onset moves both away from their levels and would read as noise for as long as the
    // levels take to follow. Their noise is the change from the previous window instead (/ sqrt 2:
    // the difference of two draws), which a persistent shift moves once.
    const std::size_t stride = n > 2048 ? n / 1024 : 1;
    const bool pair_noise = n == 2;
    scratch.clear();
    if (stride == 1) {
      const float* x = stage_ratios(i);
      for (std::size_t j = 0; j < n; ++j)
        if (seen[j] > 0)
          scratch.push_back(pair_noise ? std::fabs(static_cast<double>(x[j] - last[j])) / kSqrt2
                                       : static_cast<double>(x[j] - level[j]));
    }
    // (With a stride, the pass below takes the sample: the same x - level, from the same x.)
    // The test, one pass over the slots.
    SeqPass pass;
    for (int k = 0; k < kShifts; ++k) {
      pass.weight[k] = weight[k];
      pass.mid[k] = mid[k];
    }
    pass.ceiling_open = comparable ? fcap : -fcap;
    pass.ceiling_held = comparable ? 0.0f : -fcap;
    pass.hold_below = hold_below;
    pass.absolute = absolute;
    pass.step_limit = step_limit;
    pass.early_limit = step_limit + static_cast<float>(std::log(options_.healthy_spread));
    pass.early = track.settled_windows < kOwnWarmup;
    const bool steady = track.settled_windows >= kSteadyWindows;
    track.settled_windows = std::min(track.settled_windows + 1, kSteadyWindows);
    // The own-baseline test: "slower than its own baseline by relative_threshold" against "no
    // change", the LLR of a Student-t(kOwnNu) d = x - base, bounded and redescending.
    const double own_scale = sigma * kOwnScalePerSigma * kOwnScaleShrink;
    const float own_cap = std::min(static_cast<float>(kOwnCeiling), fcap);
    pass.own_half_nu1 = static_cast<float>(0.5 * (kOwnNu + 1.0));
    pass.own_nu_s2 = static_cast<float>(kOwnNu * own_scale * own_scale);
    pass.own_delta = static_cast<float>(log_slow);
    pass.own_shift = 0.0f;
    // Only where one window separates the shift from no change by 3 sigma or more: in a noisier
    // stage a rank's baseline is not known to a fraction of the shift within the windows it has,
    // and a streak of noise against a baseline learnt before it reads as a slowdown.
    const bool own_on = sigma * kOwnSeparation <= log_slow;
    pass.own_jump = flog_pause;
    if (!own_on) {
      pass.own_half_nu1 = 0.0f;
      pass.own_delta = 0.0f;  // the ratio is 1 (own_nu_s2 > 0)
      pass.own_shift = own_cap;  // no evidence: what it had falls to 0
    }
    const double base_scale = sigma * kOwnScalePerSigma;
    pass.base_inv_nu_s2 = static_cast<float>(1.0 / (kOwnNu * base_scale * base_scale));
    pass.own_ceiling_open = comparable ? own_cap : -own_cap;
    pass.own_ceiling_held = comparable ? 0.0f : -own_cap;
    pass.log_slow = flog_slow;
    pass.bonus0 = own_on ? bonus_first : 0.0f;
    pass.bonus_own = own_on ? bonus_own : 0.0f;
    pass.bonus_cost = own_on ? bonus_cost : 0.0f;
    pass.bonus_mix = own_on ? bonus_mix : 0.0f;
    track.bonus_mix = pass.bonus_mix;
    track.bonus_first = pass.bonus0;
    track.bonus_own = pass.bonus_own;
    track.bonus_cost = pass.bonus_cost;
    pass.cost_weight = 0.0f;
    // The cost test's null and alternative as excesses in ms, then as log-ratios (with the same
    // kEpsilonMs as x): null, within healthy_spread or under min_cost_share of the step;
    // alternative, kCostTarget times that share, and at least kCostLeastRatio over the null's
    // ratio. Off (its evidence falls to 0) without a step time.
    double step_ms = f.step_ms;
    if (std::isfinite(step_ms) && step_ms > 0.0) {
      if (track.steps.size() < kCostStepWindows) {
        track.steps.push_back(step_ms);
      } else {
        track.steps[track.step_next] = step_ms;
        track.step_next = (track.step_next + 1) % kCostStepWindows;
      }
      double recent[kCostStepWindows];
      std::copy(track.steps.begin(), track.steps.end(), recent);
      step_ms = detail::median_inplace(recent, track.steps.size());
    }
    const double m = std::max(f.median_ms, 0.0);
    if (comparable && std::isfinite(step_ms) && step_ms > 0.0 && std::isfinite(m)) {
      const double e0 = std::max((healthy_ratio - 1.0) * m, options_.min_cost_share * step_ms);
      const double e1 = std::max((healthy_ratio * kCostLeastRatio - 1.0) * m,
                                 kCostTarget * options_.min_cost_share * step_ms);
      const double x0 = std::log1p(e0 / (m + kEpsilonMs));
      const double x1 = std::log1p(e1 / (m + kEpsilonMs));
      pass.cost_weight = static_cast<float>((x1 - x0) / (sigma * sigma));
      pass.cost_mid = static_cast<float>(0.5 * (x0 + x1));
      pass.cost_clip = static_cast<float>(x1 + kCostClip * sigma);
      // The intermittent test's slow component: what costs the step kCostTarget x
      // min_cost_share on average when present in kMixShare of the windows, and at least
      // kMixRatio over the median.
      const double em = std::max((kMixRatio - 1.0) * m,
                                 kCostTarget * options_.min_cost_share * step_ms / kMixShare);
      const double xm = std::log1p(em / (m + kEpsilonMs));
      pass.mix_weight = static_cast<float>((xm - x0) / (sigma * sigma));
      pass.mix_mid = static_cast<float>(0.5 * (x0 + xm));
    }
    if (!(comparable && std::isfinite(step_ms) && step_ms > 0.0 && std::isfinite(m)) ||
        !(pass.cost_weight > 0.0f)) {
      pass.cost_weight = 1.0f;
      pass.cost_mid = 1e30f;
      pass.cost_clip = 0.0f;
      pass.mix_weight = 1.0f;
      pass.mix_mid = 1e30f;
    }
    pass.mix_keep = static_cast<float>(std::log1p(-kMixShare));
    const double mix_band_share = kMixShare * (1.0 - kMixPauseSized);
    pass.mix_odds = static_cast<float>(mix_band_share / (1.0 - kMixShare));
    // The null's share of windows in the fault band: what the cohort has shown, with pause_rate
    // as a prior worth kMixBandPrior rank-windows, at least kMixBandFloor x pause_rate, and at
    // most half the alternative's. A rank's band windows are weighed against the share without
    // its own (after the pass: band_null_without): a rank slow in a share of its windows would
    // set the share it is tested against (in a cohort of 8, one such window per run of evidence
    // raised it five-fold).
    const double band_hits = track.mix_hits, band_chances = track.mix_chances;
    auto band_null_without = [&](double own_hits) {
      const double others = static_cast<double>(n - 1) / static_cast<double>(std::max<std::size_t>(n, 1));
      return std::clamp((band_hits - own_hits + kMixBandPrior * options_.pause_rate) /
                            (band_chances * others + kMixBandPrior),
                        kMixBandFloor * options_.pause_rate, 0.5 * mix_band_share);
    };
    const double mix_null = band_null_without(0.0);
    pass.mix_null_keep = static_cast<float>(std::log1p(-mix_null));
    pass.mix_null_odds = static_cast<float>(mix_null / (1.0 - mix_null));
    // The null's share of pause-sized windows, the same way (prior: pause_rate).
    const double mix_pauses = std::clamp(
        (track.mix_bigs + kPausePrior * options_.pause_rate) / (track.mix_chances + kPausePrior),
        kMixNullFloor * options_.pause_rate, 1.0);
    pass.mix_big_llr = static_cast<float>(
        std::log(1.0 - kMixShare + kMixShare * kMixPauseSized / mix_pauses));
    pass.mix_cut = pass.mix_mid < 1e30f && comparable ? static_cast<float>(kMixPauseCut) : 1e30f;
    pass.cost_absolute = use_absolute ? static_cast<float>(options_.absolute_ms_threshold)
                                      : -std::numeric_limits<float>::infinity();
    const float fthreshold = static_cast<float>(own_on ? split_threshold : uniform_threshold);
    pass.cost_top = fthreshold - pass.bonus_cost + fcap;
    pass.mix_top = fthreshold - pass.bonus_mix +
                   static_cast<float>(0.5 * std::log(mix_band_share / mix_null));
    pass.mix_ceiling = comparable ? 80.0f : -fcap;
    std::vector<std::int32_t>& attention = seq_attention_;
    attention.resize(n);
    static_assert(kShifts == 4, "seq_pass updates four shifts' CUSUMs");
    const SeqCounts counts =
        seq_pass(n, pass, steady, fthreshold, ms, f.median_ms, seen, level, last,
                 track.cusum[0].data(), track.cusum[1].data(), track.cusum[2].data(),
                 track.cusum[3].data(), track.base.data(),
                 track.own.data(), track.cost.data(), track.mix.data(), track.named_bit.data(),
                 attention.data(), stride > 1 ? stride : 0, scratch, track.full_pass);
    if (comparable) {
      track.pauses += counts.jumps;
      track.pause_chances += counts.jump_base;
      track.mix_hits += counts.mix_hits;
      track.mix_chances += counts.mix_chances;
      track.mix_bigs += counts.mix_bigs;
    }
    // The slots the pass marked (rare): a rise's step, the names held now. Eight slots at a time
    // where none is marked.
    const std::int32_t* marks = attention.data();
    for (std::size_t j = 0; j < n; ++j) {
      if (eight_clear(marks, j, n)) {
        j += 7;
        continue;
      }
      if (marks[j] == 0) continue;
      if (marks[j] & 2) track.cold[j].rise_step = window.step();
      bool named_now = marks[j] & 1;
      if ((marks[j] & 4) && comparable) {
        // A band window of a rank that has counted band windows: weighed again against the
        // cohort's share without them (the pass weighed it against the share with them).
        SeqState& c = track.cold[j];
        const double own_null = c.mix_hits > 0 ? band_null_without(c.mix_hits) : mix_null;
        if (own_null < mix_null && track.mix[j] > 0.0f) {
          const double xj = log_ratio(ms[j], log_ratio_ref(f.median_ms));
          const double lr = std::exp(std::min(static_cast<double>(pass.mix_ceiling),
                                              pass.mix_weight * (xj - pass.mix_mid)));
          auto band_null_part = [&](double r) {  // -(ln(1 - r) + ln(1 + r / (1 - r) LR))
            return -std::log1p(-r) - std::log1p(r / (1.0 - r) * lr);
          };
          const double gain = band_null_part(own_null) - band_null_part(mix_null);
          const double top = fthreshold - pass.bonus_mix + 0.5 * std::log(mix_band_share / own_null);
          track.mix[j] = static_cast<float>(std::min(top, track.mix[j] + gain));
          if (track.mix[j] + pass.bonus_mix >= fthreshold && !named_now) {
            track.named_bit[j] = 1;
            named_now = true;
          }
        }
        if (marks[j] & 8) ++c.mix_hits;
      }
      if (named_now && comparable) seq_named_.emplace_back(i, j);
    }
    if (scratch.size() >= 2) {
      const double window_sigma =
          std::max(kMinSigma, kMadToSigma * (pair_noise ? detail::median_inplace(
                                                              scratch.data(), scratch.size())
                                                        : slow_side_spread(scratch)));
      // The first windows count as a running mean (kScaleAlpha): for a pair, warm-up and an
      // onset; for larger cohorts, the first deviations from levels that are still one draw.
      const double alpha =
          std::max(kScaleAlpha, 1.0 / static_cast<double>(track.scale_windows + 1));
      track.log_scale = track.scale_windows == 0
                            ? std::log(window_sigma)
                            : (1.0 - alpha) * track.log_scale + alpha * std::log(window_sigma);
      ++track.scale_windows;
    }
    for (int rank : f.flagged_ranks) {
      const int slot = track.slot(rank);
      if (slot < 0) continue;
      SeqState& st = track.cold[static_cast<std::size_t>(slot)];
      ++st.flagged;
      if (st.first_flagged_step < 0) st.first_flagged_step = window.step();
    }
  }

  // Findings: the window's flags, marked confirmed when named; flags in a stage that holds a
  // wait become waiting; a named rank that is not flagged in this window is still listed.
  // Findings come grouped by (cohort, stage): each group's track is looked up once.
  const std::string* last_cohort = nullptr;
  const std::string* last_stage = nullptr;
  SeqTrack* last_track = nullptr;
  struct Handle {
    SeqTrack* track = nullptr;
    std::size_t slot = 0;
    explicit operator bool() const { return track != nullptr; }
    SeqState* operator->() const { return &track->cold[slot]; }
    bool named() const { return track->named_bit[slot] != 0; }
    // The largest CUSUM with its test's bonus, as the pass computed it (seq_pass_body).
    double evidence() const {
      const SeqTrack& t = *track;
      auto with = [](float v, float bonus) { return v > 0.0f ? v + bonus : 0.0f; };
      float most = with(t.cusum[0][slot], t.bonus_first);
      for (int k = 1; k < kShifts; ++k) most = std::max(most, t.cusum[k][slot]);
      most = std::max(most, with(t.own[slot], t.bonus_own));
      most = std::max(most, with(t.cost[slot], t.bonus_cost));
      most = std::max(most, with(t.mix[slot], t.bonus_mix));
      return static_cast<double>(most);
    }
  };
  auto state_of = [&](const std::string& cohort, const std::string& stage, int rank) -> Handle {
    if (!last_cohort || !same_name(*last_cohort, cohort) || !same_name(*last_stage, stage)) {
      auto it = seq_tracks_.find(track_key(cohort, stage));
      last_track = it == seq_tracks_.end() ? nullptr : &it->second;
      last_cohort = &cohort;
      last_stage = &stage;
    }
    const int slot = last_track ? last_track->slot(rank) : -1;
    if (slot < 0) return {};
    return {last_track, static_cast<std::size_t>(slot)};
  };
  const bool any_wait = std::any_of(wait_ms.begin(), wait_ms.end(), [](double w) { return w > 0; });
  auto is_wait_bearing = [&](const RankFinding& f) {
    if (!any_wait) return false;
    for (std::size_t i = 0; i < report.stages.size(); ++i)
      if (wait_ms[i] > 0.0 && report.stages[i].stage == f.stage &&
          report.stages[i].cohort == f.cohort)
        return f.ms - report.stages[i].median_ms <= 1.5 * wait_ms[i];
    return false;
  };
  // Each finding's state first, its cold part fetched ahead: with pauses a window has thousands of
  // findings, each the state of another slot, and reading them one by one waited on memory.
  std::vector<Handle> handles;
  handles.reserve(report.stragglers.size());
  for (const RankFinding& f : report.stragglers) {
    handles.push_back(state_of(f.cohort, f.stage, f.rank));
    if (handles.back()) __builtin_prefetch(handles.back().operator->());
  }
  std::vector<RankFinding> kept;
  kept.reserve(report.stragglers.size());
  for (std::size_t k = 0; k < report.stragglers.size(); ++k) {
    RankFinding& f = report.stragglers[k];
    const Handle st = handles[k];
    f.windows_flagged = st ? st->flagged : 0;
    f.evidence = st ? st.evidence() : 0.0;
    f.confirmed = st && st.named();  // statistically; the gate comes below
    if (!f.confirmed && is_wait_bearing(f)) {
      f.role = RankFinding::Role::waiting;
      report.waiting.push_back(std::move(f));
    } else {
      kept.push_back(std::move(f));
    }
  }
  report.stragglers.swap(kept);
  last_cohort = last_stage = nullptr;
  for (const auto& [i, j] : seq_named_) {
    const StageFigures& f = report.stages[i];
    const int rank = f.rank_ids[j];
    if (std::find(f.flagged_ranks.begin(), f.flagged_ranks.end(), rank) != f.flagged_ranks.end())
      continue;  // listed already
    const Handle st = state_of(f.cohort, f.stage, rank);
    if (!st) continue;
    RankFinding r;
    if (const ColumnarWindow::Cohort* c = window.find_cohort(f.cohort))
      for (std::size_t m = 0; m < c->members; ++m)
        if (c->ranks[m] == rank) {
          r.host = c->hosts[m];
          break;
        }
    r.rank = rank;
    r.cohort = f.cohort;
    r.stage = f.stage;
    r.kind = f.kind;
    r.role = RankFinding::Role::straggler;
    r.ms = f.rank_ms[j];
    r.ref_ms = f.ref_ms;
    r.slowdown = f.ref_ms > 0.0 ? f.rank_ms[j] / f.ref_ms : 1.0;
    set_cost(r, f.step_ms);
    r.windows_flagged = st->flagged;
    r.evidence = st.evidence();
    r.confirmed = true;
    report.stragglers.push_back(std::move(r));
  }

  // Materiality: a named pair is a verdict while its current run of naming is, typically, above
  // healthy_spread and at least min_cost_share of the step. `named` keeps which are named.
  std::vector<std::uint8_t>& named = seq_stat_named_;
  named.assign(report.stragglers.size(), 0);
  last_cohort = last_stage = nullptr;
  std::string episode_key;
  for (std::size_t k = 0; k < report.stragglers.size(); ++k) {
    RankFinding& f = report.stragglers[k];
    if (!f.confirmed) continue;
    const Handle st = state_of(f.cohort, f.stage, f.rank);
    if (!st) {
      f.confirmed = false;
      continue;
    }
    named[k] = 1;
    f.confirmed = extend_episode(st->episode, stage_key(episode_key, f.cohort, f.stage), f);
  }
  end_lapsed_episodes();

  // Waiting is persistent evidence (confirmed) while its cohort has a confirmed straggler to
  // wait for; it is never a verdict.
  std::vector<std::string_view> cohorts_named;
  for (const RankFinding& f : report.stragglers)
    if (f.confirmed &&
        std::find(cohorts_named.begin(), cohorts_named.end(), f.cohort) == cohorts_named.end())
      cohorts_named.push_back(f.cohort);
  last_cohort = last_stage = nullptr;
  for (RankFinding& f : report.waiting) {
    const Handle st = state_of(f.cohort, f.stage, f.rank);
    f.windows_flagged = st ? st->flagged : 0;
    f.confirmed = std::find(cohorts_named.begin(), cohorts_named.end(), f.cohort) !=
                  cohorts_named.end();
  }

  // The untimed stage is what no section covers. Where the same rank is confirmed in a timed
  // stage of its cohort with an excess kUntimedExplained times its untimed excess or more, that
  // stage says why the rank is slow, and the small rest outside the sections is a side effect
  // (code right after a long stall runs on cold caches; a slow host is slow everywhere): it is
  // not named apart. Its finding stays, unconfirmed, and a hint says so.
  for (RankFinding& u : report.stragglers) {
    if (!u.confirmed || u.stage != kUntimedStage) continue;
    const double untimed_excess = u.ms - u.ref_ms;
    const RankFinding* why = nullptr;
    for (const RankFinding& f : report.stragglers)
      if (f.confirmed && f.rank == u.rank && f.cohort == u.cohort && f.stage != kUntimedStage &&
          f.ms - f.ref_ms >= kUntimedExplained * untimed_excess &&
          (!why || f.ms - f.ref_ms > why->ms - why->ref_ms))
        why = &f;
    if (!why) continue;
    u.confirmed = false;
    named[static_cast<std::size_t>(&u - report.stragglers.data())] = 0;  // not named apart
    char buf[160];
    std::snprintf(buf, sizeof buf, " is %.2f ms over the median in '%s' and %.2f ms in '",
                  untimed_excess, std::string(kUntimedStage).c_str(), why->ms - why->ref_ms);
    report.hints.push_back("measured: rank " + std::to_string(u.rank) + cohort_suffix(u.cohort) +
                           buf + why->stage + "', where it is confirmed; inferred: '" +
                           why->stage + "' explains it, '" + std::string(kUntimedStage) +
                           "' is not named apart");
  }

  // The run's confirmed list: a pair enters it when first confirmed (named and material), with
  // the figures of its run of naming so far, and then takes every window it is named in.
  last_cohort = last_stage = nullptr;
  for (std::size_t k = 0; k < report.stragglers.size(); ++k) {
    const RankFinding& f = report.stragglers[k];
    if (!named[k]) continue;
    const Handle st = state_of(f.cohort, f.stage, f.rank);
    if (!st) continue;
    if (st->confirmed_index < 0) {
      if (!f.confirmed) continue;
      st->confirmed_index = static_cast<int>(confirmed_.size());
      publish(f, st->episode, window.step(),
              st->first_flagged_step >= 0 ? st->first_flagged_step
              : st->rise_step >= 0        ? st->rise_step
                                          : window.step(),
              stage_key(key, f.cohort, f.stage));
      continue;
    }
    Confirmed& c = confirmed_[static_cast<std::size_t>(st->confirmed_index)];
    c.finding = f;
    c.slowdowns.push_back(f.slowdown);
    c.costs_ms.push_back(f.cost_ms);
    c.cost_shares.push_back(f.cost_share);
  }
  for (std::size_t i = 0; i < confirmed_.size(); ++i) {
    auto it = seq_tracks_.find(confirmed_at_[i].key);
    if (it == seq_tracks_.end()) continue;
    const int slot = it->second.slot(confirmed_at_[i].rank);
    if (slot >= 0) confirmed_[i].windows_seen = it->second.seen[static_cast<std::size_t>(slot)];
  }
}

}  // namespace laggard
