"""Multi-process tests: real ranks, DDP over gloo on CPU, laggard.torch.instrument.

Each scenario runs once per module (fixtures) and several tests read its results. Every rank
sleeps --base-ms in forward, backward and optimizer (standing in for compute), so stage times
are milliseconds, as on a real job, rather than microseconds of scheduler noise.
"""

import json
import os
import subprocess

import pytest

torch = pytest.importorskip("torch")
if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("torch.distributed with gloo is needed", allow_module_level=True)

import laggard  # noqa: E402
from ranks import run_ranks  # noqa: E402
import testenv  # noqa: E402

pytestmark = pytest.mark.multiproc

STEPS = 40
INTERVAL = 2
WINDOWS = STEPS // INTERVAL
COMMON = ["--straggler-analysis", "--straggler-interval", str(INTERVAL), "--steps", str(STEPS),
          "--base-ms", "20"]


def confirmed_over_run(result):
    """(rank, stage) pairs confirmed in any report the analysis rank's sink received."""
    found = set()
    for seen in result["seen"]:
        text = seen["metrics"]["straggler/confirmed"]
        for item in filter(None, text.split(",")):
            rank, stage = item.split(":", 1)
            found.add((int(rank), stage))
    return found


@pytest.fixture(scope="module")
def forward_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("forward")
    log_dir = out / "logs"
    results = run_ranks(4, COMMON + ["--delay-rank", "2", "--delay-stage", "forward",
                                     "--delay-ms", "30", "--count-calls",
                                     "--straggler-log-dir", str(log_dir)], out)
    return results, log_dir


# Interval 2: the backward starts at the output's gradient hook; interval 1 (hooks attached
# for good): at the torch.autograd.backward call, confirmed by a parameter's hook.
@pytest.fixture(scope="module", params=[INTERVAL, 1], ids=["interval-2", "interval-1"])
def backward_run(request, tmp_path_factory):
    out = tmp_path_factory.mktemp("backward")
    steps = STEPS if request.param == INTERVAL else 20
    results = run_ranks(4, COMMON + ["--straggler-interval", str(request.param), "--steps",
                                     str(steps), "--delay-rank", "1", "--delay-stage",
                                     "backward", "--delay-ms", "30"], out)
    return results, steps // request.param


# Windows 4 steps apart: on a loaded 2-core machine a burst of scheduling delay can span two
# windows 2 steps apart and "confirm" a rank that the machine, not jitter, slowed down.
JITTER_INTERVAL = 4
JITTER_WINDOWS = STEPS // JITTER_INTERVAL


@pytest.fixture(scope="module")
def jitter_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("jitter")
    log_dir = out / "logs"
    args = COMMON + ["--straggler-interval", str(JITTER_INTERVAL), "--jitter-ms", "2",
                     "--raising-sink", "--straggler-log-dir", str(log_dir)]
    results = run_ranks(4, args, out)
    return results, log_dir


# -- a slow forward ----------------------------------------------------------------------------

def test_slow_forward_names_rank_and_stage(forward_run):
    results, _ = forward_run
    r0 = results[0]
    assert len(r0["seen"]) == WINDOWS  # one report per sampled step, all delivered
    m = r0["latest_metrics"]
    assert m["straggler/likely_bottleneck"] == "forward"
    assert m["straggler/forward/top_rank"] == 2.0
    assert m["straggler/forward/num_stragglers"] >= 1.0
    assert m["straggler/forward/max_ms"] > m["straggler/forward/mean_ms"] + 15
    assert (2, "forward") in confirmed_over_run(r0)
    # The waiting ranks are evidence, never verdicts: nobody but rank 2 is confirmed.
    assert {rank for rank, _ in confirmed_over_run(r0)} == {2}
    bottlenecks = [s["metrics"]["straggler/likely_bottleneck"] for s in r0["seen"]]
    assert bottlenecks.count("forward") >= WINDOWS - 2
    waiting = {f["rank"] for f in r0["latest_report"]["waiting"]}
    assert 2 not in waiting


def test_sinks_on_the_analysis_rank_the_verdict_on_every_rank(forward_run):
    results, _ = forward_run
    for r in results[1:]:
        assert r["seen"] == []  # sinks run on the analysis rank only
        # The verdict came down the gather tree, with this rank's own part; the per-stage
        # figures stay on the analysis rank.
        m = r["latest_metrics"]
        assert "2:forward" in m["straggler/confirmed"].split(","), m
        assert m["straggler/local_confirmed"] == (1.0 if r["rank"] == 2 else 0.0), m
        assert "straggler/forward/local_ms" not in m, m
    assert results[0]["latest_metrics"]["straggler/ranks"] == 4.0


def test_no_device_sync_or_blocking_collective_on_training_thread(forward_run):
    results, _ = forward_run
    for r in results:
        assert r["calls_training_thread"] == {}, r["calls_training_thread"]
        # The counter works: the side channel's messages (point to point, up the gather tree)
        # were seen, on its own threads, and nothing else of laggard's.
        other = r["calls_other_threads"]
        assert set(other) <= {"dist.send", "dist.recv"}, other
        assert other.get("dist.send", 0) >= 1 and other.get("dist.recv", 0) >= 1, other
    for r in results[1:]:
        assert r["counters"]["gather_sent"] == WINDOWS, r["counters"]  # every sample delivered
    assert results[0]["counters"]["samples_received"] == WINDOWS * 3


def test_log_dir_is_readable_by_the_cpp_reader(forward_run):
    _, log_dir = forward_run
    names = sorted(os.listdir(log_dir))
    assert names == ["rank-0.jsonl", "rank-1.jsonl", "rank-2.jsonl", "rank-3.jsonl",
                     "reports.jsonl"]
    windows, stats = laggard.read_run(str(log_dir))
    assert stats["malformed"] == 0 and stats["files"] == 4
    assert len(windows) == WINDOWS
    assert all(len(samples) == 4 for _, samples in windows)
    assert [step for step, _ in windows] == list(range(0, STEPS, INTERVAL))
    stages = {t.name for t in windows[0][1][0].stages}
    assert stages == {"forward", "backward", "communication", "optimizer"}
    with open(log_dir / "reports.jsonl") as f:
        reports = [json.loads(line) for line in f]
    assert [r["step"] for r in reports] == list(range(0, STEPS, INTERVAL))
    assert reports[-1]["straggler/likely_bottleneck"] == "forward"
    assert all(k == "step" or k.startswith("straggler/") or k in ("stragglers", "waiting")
               for k in reports[-1])


def test_cli_analyzes_the_log_dir(forward_run):
    _, log_dir = forward_run
    cli = testenv.cli()
    if cli is None:
        assert not testenv.INSTALLED, "the installed package has no `laggard` command"
        pytest.skip("the laggard CLI is not built")
    out = subprocess.run([cli, "analyze", str(log_dir)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode in (0, 1, 2, 3), out.stderr
    assert "forward" in out.stdout and "2" in out.stdout, out.stdout


# -- a slow backward -------------------------------------------------------------------------------

def test_slow_backward_names_that_rank_not_the_waiting_ones(backward_run):
    results, windows = backward_run
    r0 = results[0]
    assert len(r0["seen"]) == windows
    for r in results:  # every stage entry began and ended, nothing failed
        assert r["counters"]["unbalanced"] == 0 and r["counters"]["report_errors"] == 0, r
    m = r0["latest_metrics"]
    assert m["straggler/likely_bottleneck"] == "backward"
    assert m["straggler/backward/top_rank"] == 1.0
    # Measured naively (backward() call to return) every rank's backward would be ~30 ms
    # longer, the others waiting inside it; here only rank 1's is.
    report = r0["latest_report"]
    backward = next(s for s in report["stages"] if s["stage"] == "backward")
    t = {int(k): v for k, v in backward["rank_ms"].items()}
    assert t[1] > max(t[0], t[2], t[3]) + 20, t
    found = confirmed_over_run(r0)
    assert (1, "backward") in found
    assert found == {(1, "backward")}, found
    # The others waited for rank 1 in communication: evidence, not a verdict.
    waiting = {f["rank"] for f in report["waiting"]}
    assert waiting and waiting <= {0, 2, 3}
    assert all(f["rank"] == 1 for f in report["stragglers"] if f["stage"] == "backward")
    comm = next(s for s in report["stages"] if s["stage"] == "communication")
    waits = {int(k): v for k, v in comm["rank_ms"].items()}
    assert waits[1] < min(waits[0], waits[2], waits[3]) - 15


# -- only jitter, and a sink that always raises -----------------------------------------------

def test_jitter_confirms_nobody(jitter_run):
    results, _ = jitter_run
    r0 = results[0]
    assert confirmed_over_run(r0) == set()
    assert r0["latest_metrics"]["straggler/num_confirmed"] == 0.0


def test_raising_sink_does_not_stop_training_or_reports(jitter_run):
    results, log_dir = jitter_run
    r0 = results[0]
    for r in results:
        assert len(r["losses"]) == STEPS  # training finished on every rank
    # The sink after the raising one still got every report.
    assert len(r0["seen"]) == JITTER_WINDOWS
    # Each report counts the failures known when its batch of windows was analysed: one per
    # window of the earlier batches. So the first window of a batch shows its own index, and
    # the others of the batch the same value.
    seen = [m["metrics"]["straggler/report_errors"] for m in r0["seen"]]
    assert all(seen.index(v) == v for v in seen), seen
    assert len(set(seen)) > 1, seen  # several batches: the failures reached the metrics
    assert r0["counters"]["report_errors"] == JITTER_WINDOWS
    with open(log_dir / "reports.jsonl") as f:
        assert sum(1 for _ in f) == JITTER_WINDOWS


# -- analyzer on vs off -------------------------------------------------------------------------

def test_losses_bit_identical_with_and_without_analysis(tmp_path):
    args = ["--steps", "20", "--straggler-interval", "2", "--base-ms", "1"]
    on = run_ranks(2, args + ["--straggler-analysis", "--straggler-log-dir",
                              str(tmp_path / "on-logs")], tmp_path / "on")
    off = run_ranks(2, args + ["--straggler-log-dir", str(tmp_path / "off-logs")],
                    tmp_path / "off")
    for a, b in zip(on, off):
        assert a["losses"] == b["losses"]  # float.hex strings: bit for bit
        assert a["params"] == b["params"]
    assert on[0]["counters"]["reports"] == 10
    assert off[0]["counters"] == {"report_errors": 0}

    # Disabled on real ranks: no gloo group, no thread, no file. Enabled: one group, and for
    # its one link (the other rank: parent or child in the gather tree) a Python thread that
    # receives and one that sends (the engine's own threads are C++), and the resource
    # sampler's thread (laggard.resources); on the analysis rank (0), which has the worker's
    # sink, also the sinks' thread (laggard.sinks.SinkDelivery).
    for r in off:
        assert r["new_group_calls"] == [] and r["gloo_groups_made"] == []
        assert r["threads_started_by_analyzer"] == 0
    for r in on:
        # The group is laggard's own ProcessGroupGloo, never a new_group (which is collective
        # and advances torch's group counter); the setup thread has ended by the end of training.
        assert r["new_group_calls"] == [] and r["gloo_groups_made"] == ["gloo"]
        assert r["threads_started_by_analyzer"] == (4 if r["rank"] == 0 else 3), r["rank"]
    assert not (tmp_path / "off-logs").exists()
    assert sorted(os.listdir(tmp_path / "on-logs")) == ["rank-0.jsonl", "rank-1.jsonl",
                                                         "reports.jsonl"]


def test_another_analysis_rank(tmp_path):
    results = run_ranks(2, ["--straggler-analysis", "--straggler-interval", "2", "--steps", "10",
                            "--base-ms", "1", "--analysis-rank", "1"], tmp_path)
    # Rank 0 analyses nothing: no sink calls, no figures (only the verdict, when one came down
    # the tree before this short run closed).
    assert results[0]["seen"] == []
    assert not any(k.startswith("straggler/forward/") for k in results[0]["latest_metrics"])
    assert [s["step"] for s in results[1]["seen"]] == [0, 2, 4, 6, 8]
    m = results[1]["latest_metrics"]
    assert m["straggler/ranks"] == 2.0 and "straggler/forward/local_ms" in m
