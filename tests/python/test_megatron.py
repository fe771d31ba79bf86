"""laggard.megatron.Timers: the stage map, nesting, barriers, delegation to Megatron's own
Timers, and Megatron's own pipeline schedule on 4 real gloo ranks (2 pipeline stages x 2
data-parallel ranks), where one rank's forward is slow."""

import json
import os
import warnings

import pytest

torch = pytest.importorskip("torch")
warnings.filterwarnings("ignore", module="megatron")
pytest.importorskip("megatron.core")

import laggard  # noqa: E402
import laggard.megatron  # noqa: E402
from laggard.megatron import Timers, stage_for  # noqa: E402

import megatron_cpu  # noqa: E402


def test_megatron_timer_names_map_to_stages():
    assert stage_for("forward-compute") == ("forward", "compute")
    assert stage_for("backward-compute") == ("backward", "compute")
    for name in ("forward-send", "forward-recv", "backward-send", "backward-recv",
                 "forward-send-backward-recv", "backward-send-forward-recv",
                 "forward-send-forward-recv", "backward-send-backward-recv"):
        assert stage_for(name) == ("pipeline-p2p", "communication"), name
    assert stage_for("all-grads-sync") == ("all-grads-sync", "communication")
    assert stage_for("params-all-gather") == ("params-all-gather", "communication")
    assert stage_for("embedding-grads-all-reduce") == ("embedding-grads-all-reduce",
                                                        "communication")
    for name in ("optimizer", "optimizer-inner-step", "optimizer-copy-to-main-grad",
                 "optimizer-clip-main-grad"):
        assert stage_for(name) == ("optimizer", "compute"), name
    assert stage_for("batch-generator") == ("batch-generator", "data")
    assert stage_for("forward-backward") is None  # around every other timer
    assert stage_for("interval-time") is None  # spans iterations
    assert stage_for("save-checkpoint") == ("save-checkpoint", "other")


def _stage_ms(log_dir):
    """{step: {stage: (ms, calls, kind)}} of the single rank's log."""
    out = {}
    with open(os.path.join(str(log_dir), "rank-0.jsonl")) as f:
        for line in f:
            sample = json.loads(line)
            out[sample["step"]] = {s["name"]: (s["ms"], s["calls"], s["kind"])
                                   for s in sample["stages"]}
    return out


def _analyzer(tmp_path, **kw):
    return laggard.Analyzer(enabled=True, interval=1, log_dir=str(tmp_path), rank=0,
                            world_size=1, **kw)


def test_timers_record_stages_and_count_nested_timers_once(tmp_path):
    import time

    an = _analyzer(tmp_path)
    timers = Timers(an)
    for step in range(2):
        an.begin_step(step)
        timers("forward-compute", log_level=2).start()
        time.sleep(0.004)
        timers("forward-compute").stop()
        timers("forward-send", log_level=2).start()
        timers("forward-send").stop()
        timers("backward-recv", log_level=2).start()
        timers("backward-recv").stop()
        # Megatron-LM's "optimizer" around megatron-core's optimizer-* timers: one entry
        timers("optimizer", log_level=1).start(barrier=True)
        timers("optimizer-inner-step", log_level=1).start(barrier=True)
        time.sleep(0.002)
        timers("optimizer-inner-step").stop()
        timers("optimizer").stop()
        an.end_step()
    an.close()
    stages = _stage_ms(tmp_path)
    assert sorted(stages) == [0, 1]
    for step in (0, 1):
        s = stages[step]
        assert set(s) == {"forward", "pipeline-p2p", "optimizer"}
        assert s["forward"][0] >= 3.5 and s["forward"][1] == 1
        assert s["pipeline-p2p"][1] == 2 and s["pipeline-p2p"][2] == "communication"
        assert s["optimizer"][1] == 1 and s["optimizer"][0] >= 1.5
    assert an.counters()["unbalanced"] == 0
    assert an.counters()["report_errors"] == 0
    assert timers.barrier_requests == 4  # asked for (two starts a step), not made


def test_no_barrier_and_no_device_sync_when_asked(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(torch.distributed, "barrier", lambda *a, **k: calls.append("barrier"))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: calls.append("sync"))
    an = _analyzer(tmp_path)
    timers = Timers(an)
    an.begin_step(0)
    t = timers("all-grads-sync", log_level=1)
    t.start(barrier=True)
    t.stop(barrier=True)
    assert t.elapsed(reset=True, barrier=True) > 0.0
    an.end_step()
    an.close()
    assert calls == []
    assert timers.barrier_requests == 3


def test_elapsed_reset_and_active_time_follow_megatrons_timer(tmp_path):
    import time

    timers = Timers(None)  # no analyzer at all: still a working timer
    t = timers("interval-time", log_level=0)
    t.start()
    time.sleep(0.01)
    t.stop()
    assert 0.009 <= t.elapsed(reset=False) < 1.0
    first = t.elapsed()  # reset=True
    assert first >= 0.009 and t.elapsed() == 0.0
    t.start()
    time.sleep(0.005)
    running = t.elapsed()  # a running timer is read and restarted, as Megatron's does
    assert running >= 0.004
    t.stop()
    assert t.active_time() >= 0.014
    t.reset()
    assert t.elapsed() == 0.0
    assert timers.log() is None and timers.write() is None


def test_disabled_analyzer_times_nothing_but_timers_work():
    an = laggard.Analyzer(enabled=False)
    timers = Timers(an)
    an.begin_step(0)
    t = timers("forward-compute", log_level=2)
    t.start()
    t.stop()
    an.end_step()
    assert t.elapsed() >= 0.0
    assert timers.stage_names == {}


def test_misuse_is_counted_never_raised(tmp_path):
    an = _analyzer(tmp_path)
    timers = Timers(an)
    an.begin_step(0)
    timers("forward-compute").stop()  # never started
    timers("backward-compute").start()
    timers("backward-compute").start()  # started twice: the first entry is kept
    timers("backward-compute").stop()
    an.end_step()
    an.close()
    assert an.counters()["report_errors"] == 2
    assert an.counters()["unbalanced"] == 0


def test_inner_megatron_timers_keep_their_own_timing_and_log(tmp_path):
    from megatron.core.timers import Timers as MegatronTimers

    undo = megatron_cpu.redirect()  # Megatron's Timer synchronizes the device
    try:
        inner = MegatronTimers(log_level=1, log_option="minmax")
        an = _analyzer(tmp_path)
        timers = Timers(an, inner=inner)
        an.begin_step(0)
        t = timers("forward-compute", log_level=1)
        t.start()
        t.stop()
        timers("backward-compute", log_level=2).start()  # above inner's level: its dummy timer
        timers("backward-compute").stop()
        an.end_step()
        an.close()
        assert inner("forward-compute")._elapsed > 0.0  # Megatron's own timer ran
        assert t.elapsed(reset=False) == inner("forward-compute").elapsed(reset=False)
        assert timers.get_all_timers_string is not None  # other attributes: the inner's
        with pytest.raises(Exception, match="dummy timer"):
            timers("backward-compute").elapsed()  # Megatron's own behaviour, unchanged
        # laggard timed both, whatever Megatron's log level
        assert set(_stage_ms(tmp_path)[0]) == {"forward", "backward"}
        with pytest.raises(AssertionError, match="does not match"):
            timers("forward-compute", log_level=2)  # Megatron's own check
    finally:
        undo()


# -- Megatron's pipeline schedule on real ranks --------------------------------------------------

@pytest.fixture(scope="module")
def pipeline_run(tmp_path_factory):
    from laggard.launch import free_port
    from ranks import join_ranks, rank_context

    out = tmp_path_factory.mktemp("megatron")
    ctx = rank_context()
    port = free_port()
    argv = ["--out", str(out), "--slow-rank", "1", "--steps", "30", "--interval", "2"]
    procs = [ctx.Process(target=_rank, args=(r, 4, port, argv)) for r in range(4)]
    return join_ranks(procs, out, 120), out


def _rank(rank, world, port, argv):
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
    code = 1
    try:
        import megatron_worker

        code = megatron_worker.main(argv)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        os._exit(code or 0)


pipeline = pytest.mark.multiproc


@pipeline
def test_megatron_schedule_without_cuda_stops_at_its_first_cuda_allocation(pipeline_run):
    results, _ = pipeline_run
    for r in results:
        assert r["unpatched_error"] == "AssertionError: Torch not compiled with CUDA enabled"


@pipeline
def test_pipeline_stage_is_the_cohort(pipeline_run):
    results, out = pipeline_run
    assert [r["cohort"] for r in results] == ["pp0", "pp0", "pp1", "pp1"]
    windows, stats = laggard.read_run(str(out / "logs"))
    assert stats["malformed"] == 0 and len(windows) == 15
    for _, samples in windows:
        assert {s.rank: s.cohort for s in samples} == {0: "pp0", 1: "pp0", 2: "pp1", 3: "pp1"}


@pipeline
def test_megatron_stages_from_the_schedule(pipeline_run):
    results, out = pipeline_run
    windows, _ = laggard.read_run(str(out / "logs"))
    for sample in windows[-1][1]:
        stages = {t.name: t for t in sample.stages}
        assert {"forward", "backward", "pipeline-p2p", "all-grads-sync", "optimizer",
                "batch-generator"} <= set(stages), sorted(stages)
        assert "forward-backward" not in stages
        assert stages["forward"].calls == 2  # two microbatches
        assert str(stages["pipeline-p2p"].kind).endswith("communication")
        assert str(stages["all-grads-sync"].kind).endswith("communication")
    for r in results:
        assert r["counters"]["unbalanced"] == 0 and r["counters"]["report_errors"] == 0, r
        assert r["stage_names"]["forward-send-backward-recv" if r["cohort"] == "pp0"
                                else "backward-send-forward-recv"] == "pipeline-p2p"


@pipeline
def test_barrier_requests_are_not_barriers(pipeline_run):
    results, _ = pipeline_run
    for r in results:
        # Megatron asked (barrier_with_L1_time: forward-backward, all-grads-sync, optimizer ...)
        assert r["barrier_requests"] >= 30 * 3
        assert r["barriers_on_training_thread"] == 0


@pipeline
def test_slow_forward_on_one_rank_is_named_within_its_pipeline_stage(pipeline_run):
    results, _ = pipeline_run
    assert len(results[3]["losses"]) == 60  # the last stage computed every microbatch's loss
    report = results[0]["latest_report"]
    confirmed = {(f["rank"], f["stage"]) for f in report["stragglers"] if f["confirmed"]}
    assert confirmed == {(1, "forward")}, report["stragglers"]
    slow = next(f for f in report["stragglers"] if f["rank"] == 1 and f["stage"] == "forward")
    assert slow["cohort"] == "pp0" and slow["slowdown"] > 1.3
    # rank 0 waits for rank 1 in the data-parallel all-reduce: evidence, not a verdict
    waiting = {(f["rank"], f["stage"]) for f in report["waiting"]}
    assert (0, "all-grads-sync") in waiting
