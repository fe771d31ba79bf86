"""Real runs: 3 gloo ranks (real processes) train a small DDP model on the CPU with laggard's
DEFAULT detector settings (no ref, thresholds, persistence or preset passed), and the verdicts
must name exactly the injected rank and stage, and nobody in a healthy run: both the live
reports (the analysis rank's sink) and laggard's offline analysis of the rank logs
(laggard._core.read_run + a Detector with the default options, as `laggard analyze` does).

Each scenario runs twice, a healthy one three times (a flaky pass does not count: every
repetition must pass):
  healthy          no injection (hand-written sections, and laggard.torch.instrument);
  slow-optimizer   rank 1's optimizer 25 ms slower, sections by hand (the DDP all-reduce wait
                   of the others sits inside their "backward");
  slow-loss-bwd    laggard.torch.instrument under DDP, rank 2's loss backward 25 ms slower (an
                   autograd op between the model output and the loss);
  untimed          a 25 ms sleep on rank 0 outside any section: named in the stage "untimed"
                   (step_ms minus the sum of the stages, kind "other");
  slow-dataloader  rank 2's data loader 25 ms slower.

On failure the message shows each rank's median stage times (and untimed = step_ms minus the
stages), which is what a detector change should be judged against.
LAGGARD_REAL_RUNS_PRESET=recommended runs the same with that preset (by hand, for comparison).
"""

import json
import os
import statistics

import pytest

torch = pytest.importorskip("torch")
if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("torch.distributed with gloo is needed", allow_module_level=True)

from laggard import _core  # noqa: E402
from ranks import run_worker  # noqa: E402

pytestmark = pytest.mark.multiproc

WORLD = 3
STEPS = 60
INTERVAL = 5
WINDOWS = STEPS // INTERVAL
SLOW_MS = 25.0
REPEATS = 2
HEALTHY_REPEATS = 3  # a false confirmation is the likelier failure: healthy runs once more

# name: (mode, slow rank, injection, the expected confirmed (rank, stage, stage kind) findings)
SCENARIOS = {
    "healthy-sections": ("sections", -1, "none", set()),
    "healthy-instrument": ("instrument", -1, "none", set()),
    "slow-optimizer": ("sections", 1, "optimizer", {(1, "optimizer", "compute")}),
    "slow-loss-bwd": ("instrument", 2, "loss_backward", {(2, "backward", "compute")}),
    "untimed": ("sections", 0, "untimed", {(0, "untimed", "other")}),
    "slow-dataloader": ("sections", 2, "dataloader", {(2, "dataloader", "data")}),
}


def run_ranks(cfg, timeout_s=120):
    """Starts WORLD ranks of real_run_worker (from the fork server: ranks.rank_context)."""
    return run_worker("real_run_worker", WORLD, cfg, cfg["out"], timeout_s)


def offline_options():
    preset = os.environ.get("LAGGARD_REAL_RUNS_PRESET")
    if preset:
        return _core.DetectorOptions.preset(preset, WORLD)
    return _core.DetectorOptions()


def offline_confirmed(log_dir):
    """(rank, stage) confirmed by laggard's offline analysis of the rank logs, the kind of each
    such stage, and the windows."""
    windows, stats = _core.read_run(str(log_dir))
    assert stats["malformed"] == 0 and stats["files"] == WORLD, stats
    det = _core.Detector(offline_options())
    for step, samples in windows:
        det.observe(samples, step)
    confirmed = det.confirmed()
    return ({(f["rank"], f["stage"]) for f in confirmed},
            {(f["rank"], f["stage"]): f["kind"] for f in confirmed}, windows)


def live_confirmed(log_dir, results):
    """(rank, stage) confirmed in any live report: reports.jsonl and the analysis rank's sink
    must agree."""
    from_sink = set()
    for seen in results[0]["seen"]:
        for item in filter(None, seen["confirmed"].split(",")):
            rank, stage = item.split(":", 1)
            from_sink.add((int(rank), stage))
    from_log = set()
    lines = (log_dir / "reports.jsonl").read_text().splitlines()
    for line in lines:
        report = json.loads(line)
        for item in filter(None, report.get("straggler/confirmed", "").split(",")):
            rank, stage = item.split(":", 1)
            from_log.add((int(rank), stage))
    assert from_sink == from_log, (from_sink, from_log)
    return from_log, len(lines), len(results[0]["seen"])


def median_excess(windows):
    """(rank, stage) -> the median over windows of the rank's ms above the median of the ranks
    (untimed included, as step_ms minus the sum of the stages)."""
    per = {}
    for _, samples in windows:
        times = {}
        for s in samples:
            total = 0.0
            for t in s.stages:
                times.setdefault(t.name, {})[s.rank] = t.ms
                total += t.ms
            times.setdefault("untimed", {})[s.rank] = s.step_ms - total
        for stage, by_rank in times.items():
            mid = statistics.median(by_rank.values())
            for rank, ms in by_rank.items():
                per.setdefault((rank, stage), []).append(ms - mid)
    return {k: statistics.median(v) for k, v in per.items()}


def stage_table(windows):
    """Per rank: the median ms of each stage over the windows, step_ms, and untimed (step_ms
    minus the sum of the stages), as text."""
    per_rank = {}
    for _, samples in windows:
        for s in samples:
            row = per_rank.setdefault(s.rank, {})
            total = 0.0
            for t in s.stages:
                row.setdefault(t.name, []).append(t.ms)
                total += t.ms
            row.setdefault("step_ms", []).append(s.step_ms)
            row.setdefault("(untimed)", []).append(s.step_ms - total)
    names = []
    for row in per_rank.values():
        names += [n for n in row if n not in names]
    lines = ["rank  " + "  ".join("%13s" % n for n in names) + "   (medians, ms; max in [])"]
    for rank in sorted(per_rank):
        row = per_rank[rank]
        lines.append("%4d  " % rank + "  ".join(
            "%6.1f [%5.1f]" % (statistics.median(row[n]), max(row[n])) if n in row
            else "%13s" % "-" for n in names))
    return "\n".join(lines)


@pytest.mark.parametrize("scenario,repeat", [
    (name, r) for name in SCENARIOS for r in range(HEALTHY_REPEATS if name.startswith("healthy")
                                                   else REPEATS)])
def test_real_run_names_exactly_the_injected_rank(tmp_path, scenario, repeat):
    mode, slow_rank, slow, expected = SCENARIOS[scenario]
    log_dir = tmp_path / "logs"
    cfg = {"out": str(tmp_path), "log_dir": str(log_dir), "mode": mode, "slow_rank": slow_rank,
           "slow": slow, "slow_ms": SLOW_MS, "interval": INTERVAL, "steps": STEPS}
    results = run_ranks(cfg)
    offline, kinds, windows = offline_confirmed(log_dir)
    live, report_lines, sink_calls = live_confirmed(log_dir, results)
    table = stage_table(windows)
    options = {k: v for k, v in results[0]["options"].items() if k != "log_dir"}
    print("\n%s (repeat %d): offline %s, live %s, analyzer options %s\n%s" % (
        scenario, repeat, sorted(offline), sorted(live), options, table))
    assert len(windows) == WINDOWS
    assert sink_calls == report_lines >= WINDOWS - 2, (sink_calls, report_lines)
    for r in results:
        assert r["counters"]["unbalanced"] == 0, r["counters"]
    want = {(rank, stage) for rank, stage, _ in expected}
    want_ranks = {rank for rank, _, _ in expected}
    why = "%s: expected %s\n%s" % (scenario, sorted(want), table)
    # Exactly the injected rank is named (nobody in a healthy run), in the injected stage. The
    # same rank may also be named in another stage that really is slower on it: on this 2-core
    # machine the stage after its delay runs ~1 ms (18 %) slower while the others spin-wait in
    # gloo beside it. The injected stage must then be its main finding (the largest excess).
    for what, found in (("offline analysis", offline), ("live reports", live)):
        assert {rank for rank, _ in found} == want_ranks, "%s confirmed %s; %s" % (
            what, sorted(found), why)
        assert want <= found, "%s confirmed %s; %s" % (what, sorted(found), why)
    excess = median_excess(windows)
    for rank, stage in want:
        others = [excess[(r, s)] for r, s in offline if r == rank and s != stage]
        assert all(excess[(rank, stage)] > e for e in others), (
            "the injected stage is not the main finding: %s" % why)
    for rank, stage, kind in expected:
        assert kinds[(rank, stage)] == kind, (rank, stage, kinds)
