"""laggard.megatron.Timers: the stage map, nesting, barriers, delegation to Megatron's own
Timers, and Megatron's own pipeline schedule and optimizer on 4 real gloo ranks (2 pipeline
stages x 2 data-parallel ranks), set up as docs/howto/megatron.md shows, with and without Megatron's
own Timers inside: one rank slow in forward, backward or the optimizer step, or none."""

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


def test_inner_barriers_are_waits_timed_as_communication_not_untimed(tmp_path, monkeypatch):
    """Megatron's own Timers make a barrier where Megatron asks for one: there a fast rank waits
    for a slow one. That wait is the communication stage timers-barrier, never part of the
    stage around it (Megatron-LM's `optimizer` around optimizer-inner-step) nor untimed. The
    bounds are the measured times of the barriers and the spans, so that a busy machine's
    longer sleeps do not move them."""
    import time

    from megatron.core.timers import Timers as MegatronTimers

    barriers = []  # (step or None, seconds spent) of each barrier made

    def waiting_barrier(*a, **k):  # stands in for the wait for a slower rank
        t0 = time.perf_counter()
        time.sleep(0.03)
        barriers.append((an.step if an.sampled else None, time.perf_counter() - t0))

    monkeypatch.setattr(torch.distributed, "barrier", waiting_barrier)
    undo = megatron_cpu.redirect()
    spans = []  # the optimizer timer's span (start called .. stop returned) of each step
    try:
        inner = MegatronTimers(log_level=2, log_option="minmax")
        an = _analyzer(tmp_path)
        timers = Timers(an, inner=inner)
        # Megatron-LM's interval-time, started and read outside the steps: its barriers are
        # made, nothing is recorded
        timers("interval-time", log_level=0).start(barrier=True)
        for step in range(2):
            an.begin_step(step)
            timers("forward-backward", log_level=1).start(barrier=True)  # not a stage
            timers("forward-compute", log_level=2).start()
            time.sleep(0.004)
            timers("forward-compute").stop()
            timers("forward-backward").stop()
            t0 = time.perf_counter()
            timers("optimizer", log_level=1).start(barrier=True)
            timers("optimizer-inner-step", log_level=1).start(barrier=True)  # inside optimizer
            time.sleep(0.004)
            timers("optimizer-inner-step").stop()
            timers("optimizer").stop()
            spans.append(time.perf_counter() - t0)
            an.end_step()
        timers("interval-time").elapsed(barrier=True)  # stopped and started: two barriers
        an.close()
    finally:
        undo()
    # every barrier Megatron asked for, made by its own timers (3 a step, 3 outside the steps)
    assert [step for step, _ in barriers] == [None, 0, 0, 0, 1, 1, 1, None, None]
    assert timers.barrier_requests == 0  # (counted only without inner)
    with open(os.path.join(str(tmp_path), "rank-0.jsonl")) as f:
        samples = [json.loads(line) for line in f]
    assert [sample["step"] for sample in samples] == [0, 1]
    for sample, span in zip(samples, spans):
        step_barriers = [spent for step, spent in barriers if step == sample["step"]]
        stages = {s["name"]: s for s in sample["stages"]}
        assert set(stages) == {"forward", "optimizer", "timers-barrier"}
        wait = stages["timers-barrier"]
        assert wait["kind"] == "communication" and wait["calls"] == 3
        assert wait["ms"] >= sum(step_barriers) * 1000 * 0.999  # each barrier inside an entry
        # the optimizer's own work only: its span less the barrier inside it
        optimizer_barrier = step_barriers[2]
        assert stages["optimizer"]["ms"] <= (span - optimizer_barrier) * 1000
        assert stages["optimizer"]["ms"] >= 3.9
        assert stages["optimizer"]["calls"] == 2  # closed around the barrier, reopened after
        # nothing outside the stages but the calls between them: no barrier's wait
        untimed = sample["step_ms"] - sum(s["ms"] for s in sample["stages"])
        assert untimed < min(step_barriers) * 1000 * 0.5, sample
    # Megatron's own timers saw what they always do: its optimizer timer contains the barrier
    # of optimizer-inner-step (the third of each step's)
    nested = [spent for step, spent in barriers if step is not None][2::3]
    assert len(nested) == 2 and inner("optimizer").elapsed(reset=False) >= sum(nested)
    assert an.counters()["report_errors"] == 0 and an.counters()["unbalanced"] == 0


def test_inner_dummy_timers_make_no_barrier_and_time_none(tmp_path, monkeypatch):
    """Above the inner Timers' log level Megatron hands out its dummy timer, which makes no
    barrier: nothing is timed as a wait."""
    from megatron.core.timers import Timers as MegatronTimers

    made = []
    monkeypatch.setattr(torch.distributed, "barrier", lambda *a, **k: made.append(1))
    undo = megatron_cpu.redirect()
    try:
        an = _analyzer(tmp_path)
        timers = Timers(an, inner=MegatronTimers(log_level=0, log_option="minmax"))
        an.begin_step(0)
        timers("all-grads-sync", log_level=1).start(barrier=True)
        timers("all-grads-sync").stop()
        an.end_step()
        an.close()
    finally:
        undo()
    assert made == []
    assert set(_stage_ms(tmp_path)[0]) == {"all-grads-sync"}


# -- Megatron's pipeline schedule on real ranks --------------------------------------------------

# Each case: the rank made slow and the laggard stage it is slow in (None: a healthy run). Ranks
# of both pipeline stages: rank 1 is pp0, ranks 2 and 3 are pp1.
CASES = {"forward": (1, "forward"), "backward": (3, "backward"),
         "optimizer": (2, "optimizer"), "healthy": None}
# The docs' interval (10) and 8 sampled steps: every slowdown here is confirmed within 4-6 of
# them (measured on 2 busy cores), so 8 leave a margin; a run takes 5-10 s.
STEPS = 80
# The barriers Megatron asks for in a step (barrier_with_L1_time): forward-backward,
# all-grads-sync and finalize_model_grads' three all-reduce timers, the training loop's
# optimizer, and FP32Optimizer's optimizer-copy-to-main-grad, -clip-main-grad, -count-zeros and
# -inner-step.
BARRIERS_PER_STEP = 10


def _peer(rank):
    """The other data-parallel rank of `rank`'s pipeline stage (ranks 0/1 are pp0, 2/3 pp1)."""
    return rank ^ 1


@pytest.fixture(scope="module")
def megatron_run(tmp_path_factory):
    """run(inner, case, repetition) -> (results, out): one real 4-rank run, made once."""
    from laggard.launch import free_port
    from ranks import join_ranks, rank_context

    done = {}

    def run(inner, case, repetition=0):
        key = (inner, case, repetition)
        if key not in done:
            out = tmp_path_factory.mktemp("megatron-%s-%s-%d" % (
                "inner" if inner else "plain", case, repetition))
            argv = ["--out", str(out), "--steps", str(STEPS)]
            if inner:
                argv.append("--inner")
            else:
                argv.append("--unpatched-check")
            if CASES[case] is not None:
                argv += ["--slow-rank", str(CASES[case][0]), "--slow-stage", case]
            ctx = rank_context()
            port = free_port()
            procs = [ctx.Process(target=_rank, args=(r, 4, port, argv)) for r in range(4)]
            done[key] = join_ranks(procs, out, 120), out
        return done[key]

    return run


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
inner_or_not = pytest.mark.parametrize("inner", [False, True], ids=["plain", "inner"])


def _confirmed(report):
    return {(f["rank"], f["stage"]) for f in report["stragglers"] if f["confirmed"]}


@pipeline
@pytest.mark.parametrize("repetition", range(3))
@pytest.mark.parametrize("case", sorted(CASES))
@inner_or_not
def test_megatron_names_the_slow_rank_and_stage_and_nobody_else(megatron_run, inner, case,
                                                                  repetition):
    results, _ = megatron_run(inner, case, repetition)
    report = results[0]["latest_report"]  # the analysis rank's
    assert report is not None and report["ranks_seen"] == 4
    if CASES[case] is None:
        assert _confirmed(report) == set(), report["stragglers"]
        return
    rank, stage = CASES[case]
    assert _confirmed(report) == {(rank, stage)}, (report["stragglers"], report["hints"])
    slow = next(f for f in report["stragglers"] if (f["rank"], f["stage"]) == (rank, stage))
    assert slow["cohort"] == "pp%d" % (rank // 2) and slow["slowdown"] > 1.3
    # its pipeline-stage peer waits for it, in a communication stage: evidence, not a verdict
    assert _peer(rank) in {f["rank"] for f in report["waiting"] if f["confirmed"]}, \
        report["waiting"]
    if inner:
        # Megatron's own timers measured the same slowdown (its log reads them)
        name = {"forward": "forward-compute", "backward": "backward-compute",
                "optimizer": "optimizer"}[case]
        times = [r["megatron_times"][name] for r in results]
        assert all(times[rank] > 1.5 * t for r, t in enumerate(times) if r != rank), times


@pipeline
def test_megatron_schedule_without_cuda_stops_at_its_first_cuda_allocation(megatron_run):
    results, _ = megatron_run(False, "forward")
    for r in results:
        assert r["unpatched_error"] == "AssertionError: Torch not compiled with CUDA enabled"


@pipeline
@inner_or_not
def test_pipeline_stage_is_the_cohort(megatron_run, inner):
    results, out = megatron_run(inner, "forward")
    assert [r["cohort"] for r in results] == ["pp0", "pp0", "pp1", "pp1"]
    windows, stats = laggard.read_run(str(out / "logs"))
    assert stats["malformed"] == 0 and len(windows) == STEPS // 10
    for _, samples in windows:
        assert {s.rank: s.cohort for s in samples} == {0: "pp0", 1: "pp0", 2: "pp1", 3: "pp1"}


def _last_window_stages(out):
    windows, _ = laggard.read_run(str(out / "logs"))
    return {sample.rank: {t.name: t for t in sample.stages} for sample in windows[-1][1]}


@pipeline
def test_megatron_stages_from_the_schedule_the_same_with_inner(megatron_run):
    plain_results, plain_out = megatron_run(False, "forward")
    inner_results, inner_out = megatron_run(True, "forward")
    plain, inner = _last_window_stages(plain_out), _last_window_stages(inner_out)
    for rank, stages in plain.items():
        assert {"forward", "backward", "pipeline-p2p", "all-grads-sync", "optimizer",
                "batch-generator"} <= set(stages), sorted(stages)
        assert "forward-backward" not in stages
        assert stages["forward"].calls == 2  # two microbatches
        assert stages["optimizer"].calls == 1  # Megatron's optimizer-* timers inside: once
        assert str(stages["pipeline-p2p"].kind).endswith("communication")
        assert str(stages["all-grads-sync"].kind).endswith("communication")
        # With Megatron's own Timers inside: the same stages, and where they wait for each
        # other, one more communication stage
        assert set(inner[rank]) == set(stages) | {"timers-barrier"}, (rank, sorted(inner[rank]))
        assert str(inner[rank]["timers-barrier"].kind).endswith("communication")
        assert inner[rank]["timers-barrier"].calls == BARRIERS_PER_STEP
        assert inner[rank]["forward"].calls == 2 and inner[rank]["optimizer"].calls == 5
    for r in plain_results + inner_results:
        assert r["counters"]["unbalanced"] == 0 and r["counters"]["report_errors"] == 0, r
        assert r["stage_names"]["forward-send-backward-recv" if r["cohort"] == "pp0"
                                else "backward-send-forward-recv"] == "pipeline-p2p"
        assert r["stage_names"]["optimizer-inner-step"] == "optimizer"


@pipeline
def test_barrier_requests_are_not_barriers_and_megatrons_own_are_kept(megatron_run):
    plain, _ = megatron_run(False, "forward")
    for r in plain:
        # Megatron asked (barrier_with_L1_time); laggard made none (the +1: the schedule's
        # forward-backward in its first call, which stops at its CUDA allocation)
        assert r["barrier_requests"] == STEPS * BARRIERS_PER_STEP + 1
        assert r["barriers_on_training_thread"] == 0
    inner, _ = megatron_run(True, "forward")
    for r in inner:
        # Megatron's own Timers make every barrier Megatron asked for, as without laggard
        assert r["barriers_on_training_thread"] == STEPS * BARRIERS_PER_STEP
        assert r["barrier_requests"] == 0
    log = inner[-1]["megatron_log"]  # Megatron's own timer table (the last rank's)
    assert log is not None and "forward-compute" in log and "optimizer" in log, log
