"""The verdict reaches people by default: real gloo ranks (processes) train a small DDP model with
laggard at its defaults (no sink, no log_dir, no logging configuration; only the interval, as
the other real-run tests), one rank's forward 25 ms slower.

- The analysis rank's console (its stderr) carries the confirmation line: rank, host, stage,
  slowdown, what it costs every step, why; once, not per window; not counted as an error.
- A rank that is not the analysis rank reads the verdict through latest_metrics() and
  latest_report(), with its own score, within a couple of windows of the analysis.
- A healthy run prints no confirmation line, and every rank reads a verdict naming nobody.
"""

import json
import re

import pytest

torch = pytest.importorskip("torch")
if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("torch.distributed with gloo is needed", allow_module_level=True)

from ranks import run_worker  # noqa: E402

pytestmark = pytest.mark.multiproc

WORLD = 3
STEPS = 70
INTERVAL = 5
SLOW_RANK = 2
SLOW_MS = 25.0


def run(tmp_path, slow_rank):
    cfg = {"out": str(tmp_path), "slow_rank": slow_rank, "slow_ms": SLOW_MS,
           "interval": INTERVAL, "steps": STEPS}
    results = run_worker("verdict_worker", WORLD, cfg, str(tmp_path), timeout_s=150)
    consoles = [(tmp_path / ("stderr-%d.txt" % r)).read_text() for r in range(WORLD)]
    return results, consoles


def lines_with(text, what):
    return [line for line in text.splitlines() if what in line]


def test_a_default_run_says_the_straggler_on_the_console_and_every_rank_reads_it(tmp_path):
    results, consoles = run(tmp_path, SLOW_RANK)
    assert results[0]["is_analysis_rank"]
    shown = "\n".join("--- rank %d stderr:\n%s" % (r, c) for r, c in enumerate(consoles))

    # The analysis rank's console: one confirmation line for the slow rank's forward (the slow
    # rank may also be named in a stage its delay really slows, never another rank), through
    # the "laggard" logger at WARNING with no logging configured.
    confirmed = lines_with(consoles[0], "straggler confirmed")
    assert confirmed, shown
    assert all(line.startswith("laggard: straggler confirmed: rank %d " % SLOW_RANK)
               for line in confirmed), shown
    forward = [line for line in confirmed if "in 'forward'" in line]
    assert len(forward) == 1, shown  # once, not once per window
    line = forward[0]
    assert re.search(r"\(host [^)]+\) in 'forward', \d+\.\d\dx the reference "
                     r"\(\d+\.\d ms vs \d+\.\d ms\); it costs every step (\d+\.\d) ms "
                     r"\((\d+)% of the step time\); why: its own compute", line), line
    cost = float(re.search(r"costs every step (\d+\.\d) ms", line).group(1))
    assert 0.6 * SLOW_MS <= cost <= 1.6 * SLOW_MS, line
    share = int(re.search(r"\((\d+)% of the step time\)", line).group(1))
    assert 10 <= share <= 60, line
    # The ranks that are not slow wait for it in DDP's all-reduce, inside their backward.
    assert "why: its own compute; ranks 0,1 wait for it inside 'backward'" in line, line
    assert not lines_with(consoles[0], "straggler cleared"), shown
    # Nobody else prints it: the analysis rank speaks for the job.
    for r in (1, 2):
        assert not lines_with(consoles[r], "straggler confirmed"), shown
    # The line is the verdict, not a failure: nothing counted as an error on any rank.
    for res in results:
        assert res["counters"]["report_errors"] == 0, (res["rank"], res["counters"], shown)

    # Every rank reads the verdict; the non-analysis ranks from the message down the tree.
    for res in results:
        r = res["rank"]
        m = res["metrics"]
        assert str(SLOW_RANK) + ":forward" in m["straggler/confirmed"].split(","), (r, m)
        assert m["straggler/num_confirmed"] >= 1, (r, m)
        assert m["straggler/verdict_step"] == res["last_sampled"], (r, m)
        assert m["straggler/local_confirmed"] == (1.0 if r == SLOW_RANK else 0.0), (r, m)
        score = m["straggler/local_score"]
        if r == SLOW_RANK:  # its forward takes 45 ms where the others take 20
            assert 0.3 < score < 0.75, (r, m)
        else:
            assert score > 0.8, (r, m)
        report = res["report"]
        assert report is not None, r
        verdict = report["verdict"]
        assert verdict["rank"] == r and verdict["self_confirmed"] == (r == SLOW_RANK), verdict
        named = [f for f in report["stragglers"] if f["confirmed"]]
        assert (SLOW_RANK, "forward") in {(f["rank"], f["stage"]) for f in named}, report
        assert {f["rank"] for f in named} == {SLOW_RANK}, report
        found = [f for f in verdict["confirmed"] if f["stage"] == "forward"][0]
        assert found["rank"] == SLOW_RANK and found["reason"].startswith("its own compute")
        assert 0.6 * SLOW_MS <= found["cost_ms"] <= 1.6 * SLOW_MS, found
        if r != 0:
            assert res["counters"]["verdicts_received"] > 0, res["counters"]
            assert res["counters"]["malformed_verdicts"] == 0, res["counters"]
            assert report["stages"] == [], report  # made from the verdict: no figures
    # A non-analysis rank learns each verdict within a couple of windows: at every sampled
    # step of the second half, the verdict it holds is about a window at most 3 back. (The
    # window of the step itself cannot have been analysed yet; the analysis rank's own lag is
    # two windows here, as a window is analysed once every rank's batch is in, and batches go
    # every 0.25 s: the message down the tree adds a few background turns.)
    for res in results[1:]:
        late = [(step, seen) for step, seen in res["lags"]
                if step >= STEPS // 2 and step - seen > 3 * INTERVAL]
        assert not late, (res["rank"], res["lags"])


def test_a_healthy_default_run_prints_no_confirmation(tmp_path):
    results, consoles = run(tmp_path, -1)
    for r, console in enumerate(consoles):
        assert not lines_with(console, "straggler confirmed"), (r, console)
    for res in results:
        m = res["metrics"]
        assert m["straggler/num_confirmed"] == 0, (res["rank"], m)
        assert m["straggler/local_confirmed"] == 0.0, (res["rank"], m)
        assert m["straggler/local_score"] > 0.8, (res["rank"], m)
        assert res["report"]["verdict"]["confirmed"] == [], res["report"]
