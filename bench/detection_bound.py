#!/usr/bin/env python3
"""What the best possible test could do on the --runs benchmark's 1.1x faults (numpy only).

An oracle CUSUM per (rank, stage) that knows everything the detector has to estimate: the rank's
baseline, the jitter's scale and shape (Student's t with 4 degrees of freedom, scaled to unit
variance, times the level's jitter, as bench/detection.cc draws it), and which windows a pause
hit (those carry no evidence). Its evidence per window is the exact log-likelihood ratio of
"slower by ln 1.1" against "no change", uncapped. Nothing is estimated, so its recall is an upper
bound for any test of one pair's times against that pair's own past (the detector's tests also
see the cohort's median, whose noise this leaves out).

Per scale (ranks x the 5 stages that are not communication = pairs) and noise level it prints
the recall within 5 windows of the onset at
  (a) the detector's threshold, ln(pairs x 500 / 0.01) + ln 6 (evidence_threshold plus the six
      tests' share), and that of its own-baseline test, whose share of the budget is 0.5 where
      it runs (ln(pairs x 500 / 0.01) + ln(1 / 0.5), `h_own`), and
  (b) the least threshold at which the oracle keeps healthy runs (100 windows, every pair) with
      any alarm at 1 %: the chance that one healthy pair's CUSUM reaches h within 100 windows is
      measured at low h, where it is frequent, as A e^-h (Wald: A <= 100), and h is solved from
      pairs x A e^-h = 0.01. The union bound ln(pairs x 100 / 0.01) is printed as well.

    .venv/bin/python bench/detection_bound.py            # ~30 s, seed 1

--own-model prints instead the false alarms of the detector's own-baseline test under its own
noise model (docs/detection.md, step 4): the CUSUM of its bounded Student-t(4)
LLR of "slower by ln 1.1" (at most 8 a window, nothing from a window 1.5x over the baseline)
over t(4) noise at the test's scale s, with a known baseline, for shift-to-scale ratios ln(1.1)/s
from 3.9 (the gate under which the test does not run) to 25; per ratio, A = P(the CUSUM reaches
h within 90 windows) x e^h for h = 6 to 16. Wald's bound, which the detector's threshold keeps,
is A <= 90.

    .venv/bin/python bench/detection_bound.py --own-model    # ~2 min
"""

import argparse
import math
import time

import numpy as np

NU = 4.0                  # the bench's jitter: Student's t(4), scaled to unit variance
SHIFT = math.log(1.1)     # the fault: one rank 1.1x slower
NON_COMM_STAGES = 5       # bench/detection.cc kStageDefs: 6 stages, one of them communication
RUN_WINDOWS, ONSET, RECALL_WINDOWS = 100, 20, 5
BUDGET, BUDGET_WINDOWS, TESTS = 0.01, 500, 6
OWN_SHARE = 0.5           # the own-baseline test's share of the budget (src/analysis/detector_sequential.cc)
SCALES = (8, 64, 512, 4096)
# name, jitter (sigma of the log), share of rank-windows with a pause (spread over 5 stages)
LEVELS = (("gentle", 0.01, 0.01), ("moderate", 0.02, 0.03), ("heavy", 0.05, 0.10))


def t_logpdf(x, scale, nu=NU):
    """ln of Student's t(nu) density with this scale at x."""
    c = (math.lgamma((nu + 1) / 2) - math.lgamma(nu / 2) - 0.5 * math.log(nu * math.pi)
         - math.log(scale))
    return c - (nu + 1) / 2 * np.log1p((x / scale) ** 2 / nu)


def jitter(rng, shape, sigma):
    # bench heavy_tailed(): t(4) / sqrt(2), unit variance
    return sigma * math.sqrt((NU - 2) / NU) * rng.standard_t(NU, size=shape)


def llr(x, scale):
    return t_logpdf(x - SHIFT, scale) - t_logpdf(x, scale)


def reach_share(n, windows, evidence, h_values, counted_from=0, chunk=50_000):
    """Share of n pairs whose CUSUM reaches each h at a window >= counted_from (and < windows);
    evidence(m, w) gives the m pairs' evidence of window w."""
    hits = np.zeros(len(h_values))
    h = np.asarray(h_values)[:, None]
    done = 0
    while done < n:
        m = min(chunk, n - done)
        s = np.zeros(m)
        reached = np.zeros((len(h_values), m), dtype=bool)
        for w in range(windows):
            s = np.maximum(0.0, s + evidence(m, w))
            if w >= counted_from:
                reached |= s[None, :] >= h
        hits += reached.sum(axis=1)
        done += m
    return hits / n


def cusum_reaches(rng, n, windows, onset, sigma, pause_share, h_values):
    """Share of n pairs whose CUSUM reaches each h at a window >= onset (and < windows);
    the shift is on from `onset` when onset < windows-of-run (faulty), else none."""
    scale = sigma * math.sqrt((NU - 2) / NU)

    def evidence(m, w):
        x = jitter(rng, m, sigma) + (SHIFT if w >= onset and onset > 0 else 0.0)
        e = llr(x, scale)
        e[rng.random(m) < pause_share] = 0.0  # the oracle knows a pause: no evidence
        return e

    return reach_share(n, windows, evidence, h_values, counted_from=onset)


OWN_CEILING = 8.0            # kOwnCeiling
OWN_JUMP = math.log(1.5)     # a window this far over the baseline adds nothing
OWN_WINDOWS = RUN_WINDOWS - 10  # a run's windows past the baseline's first 10


def own_model(rng, pairs, ratios, h_values, chunk=250_000):
    """A = P(reach h within OWN_WINDOWS) e^h of the own-baseline test under its own model."""
    print(f"own-baseline test under its own model (t(4) noise at the test's scale, known "
          f"baseline), {OWN_WINDOWS} windows, {pairs} pairs per ratio; A = P(reach h) e^h "
          f"(Wald: A <= {OWN_WINDOWS})")
    print(f"{'ln1.1/s':>8} " + " ".join(f"{'h=' + format(h, 'g'):>6}" for h in h_values)
          + f" {'max A':>6}")
    worst = 0.0
    for ratio in ratios:
        s = SHIFT / ratio

        def evidence(m, _w, s=s):
            d = s * rng.standard_t(NU, size=m)
            e = 2.5 * np.log((4 * s * s + d * d) / (4 * s * s + (d - SHIFT) ** 2))
            return np.where(d >= OWN_JUMP, 0.0, np.minimum(e, OWN_CEILING))

        a = reach_share(pairs, OWN_WINDOWS, evidence, h_values, chunk=chunk) * np.exp(
            np.asarray(h_values))
        worst = max(worst, float(a.max()))
        print(f"{ratio:8.1f} " + " ".join(f"{v:6.1f}" for v in a) + f" {a.max():6.1f}")
    print(f"largest A: {worst:.1f} (Wald's bound: {OWN_WINDOWS})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--own-model", action="store_true",
                    help="the own-baseline test's false alarms under its own model")
    ap.add_argument("--pairs", type=int, default=1_000_000, help="--own-model: pairs per ratio")
    ap.add_argument("--faulty", type=int, default=200_000, help="faulty pairs per level")
    ap.add_argument("--healthy", type=int, default=400_000, help="healthy pairs per level")
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    t0 = time.time()
    if args.own_model:
        own_model(rng, args.pairs, (3.9, 5.0, 6.5, 7.8, 10.0, 15.0, 25.0),
                  [float(v) for v in range(6, 17)])
        print(f"{time.time() - t0:.0f} s")
        return
    print(f"oracle CUSUM (exact t(4) LLR, known baseline, scale and pauses), 1.1x, recall within "
          f"{RECALL_WINDOWS} windows; seed {args.seed}, {args.faulty} faulty and {args.healthy} "
          f"healthy pairs per level")
    print(f"{'noise':9} {'ranks':>5} {'pairs':>6} {'KL/win':>6} {'h_det':>6} {'recall':>7}"
          f" {'h_own':>6} {'recall':>7} {'h_union':>7} {'h_least':>7} {'recall':>7}")
    for name, sigma, pause in LEVELS:
        pause_share = pause / NON_COMM_STAGES
        scale = sigma * math.sqrt((NU - 2) / NU)
        kl = float(np.mean(llr(jitter(rng, 1_000_000, sigma) + SHIFT, scale)))
        # Healthy pairs: the chance of reaching h within a run, at h where it is measurable;
        # A = p e^h, taken where at least 200 pairs reached it (the largest such h).
        low_h = np.arange(4.0, 14.01, 0.5)
        p = cusum_reaches(rng, args.healthy, RUN_WINDOWS, 0, sigma, pause_share, low_h)
        ok = np.nonzero(p * args.healthy >= 200)[0]
        at = ok[-1] if len(ok) else 0  # too few healthy pairs for 200 hits: the lowest h
        a = float(p[at] * math.exp(low_h[at]))
        h_det = [math.log(r * NON_COMM_STAGES * BUDGET_WINDOWS / BUDGET) + math.log(TESTS)
                 for r in SCALES]
        h_own = [math.log(r * NON_COMM_STAGES * BUDGET_WINDOWS / BUDGET) - math.log(OWN_SHARE)
                 for r in SCALES]
        h_union = [math.log(r * NON_COMM_STAGES * RUN_WINDOWS / BUDGET) for r in SCALES]
        h_least = [math.log(r * NON_COMM_STAGES * a / BUDGET) for r in SCALES]
        rec = cusum_reaches(rng, args.faulty, ONSET + RECALL_WINDOWS, ONSET, sigma, pause_share,
                            h_det + h_own + h_least)
        k = len(SCALES)
        for i, r in enumerate(SCALES):
            print(f"{name:9} {r:5d} {r * NON_COMM_STAGES:6d} {kl:6.2f} {h_det[i]:6.2f}"
                  f" {100 * rec[i]:6.1f}% {h_own[i]:6.2f} {100 * rec[k + i]:6.1f}%"
                  f" {h_union[i]:7.2f} {h_least[i]:7.2f} {100 * rec[2 * k + i]:6.1f}%")
        print(f"{'':9} (healthy pair, 100 windows: P(reach h) = {a:.1f} e^-h at h = "
              f"{low_h[at]:.1f}; Wald's bound: 100 e^-h)")
    print(f"{time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
