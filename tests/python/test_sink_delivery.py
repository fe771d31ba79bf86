"""The sinks' own thread (laggard.sinks.SinkDelivery): what the engine hands it is delivered in
order, each sink at most every min_period_s with the latest report always arriving, a full
queue drops (counted) and never blocks, prepare() runs before the first report, a failing or
stuck sink is counted; and on real ranks, the trackers how-to's job with every tracker sink at
interval 2 does not make the analysis rank a straggler, while a real one is still named.
"""

import json
import os
import threading
import time

import pytest

from laggard.sinks import MLflowSink, SinkDelivery, TensorBoardSink
from ranks import cpu_burners, run_worker


class Recorder:
    def __init__(self, period=0.0):
        self.min_period_s = period
        self.steps = []
        self.closed = False

    def __call__(self, step, metrics):
        self.steps.append(step)

    def close(self):
        self.closed = True


def test_every_report_in_order_to_a_sink_without_a_period():
    r = Recorder()
    d = SinkDelivery([r])
    d.start()
    for step in range(100):
        d(step, {"straggler/num_confirmed": 0.0})
    d.close()
    assert r.steps == list(range(100)) and r.closed
    assert d.counters() == {"sink_reports_queued": 0, "sink_writes": 100,
                            "sink_reports_dropped": 0, "sink_writes_skipped": 0}


def test_a_period_keeps_the_first_and_the_latest_report_and_counts_the_rest():
    slow, every = Recorder(period=30.0), Recorder()
    d = SinkDelivery([slow, every])
    d.start()
    for step in range(50):
        d(step, {})
    d.close()  # the held latest report is written at close, whatever the period
    assert slow.steps == [0, 49] and every.steps == list(range(50))
    c = d.counters()
    assert c["sink_writes"] == 52 and c["sink_writes_skipped"] == 48, c


def test_the_held_report_is_written_when_the_period_has_passed():
    r = Recorder(period=0.2)
    d = SinkDelivery([r])
    d.start()
    for step in range(3):
        d(step, {})
    deadline = time.monotonic() + 10
    while r.steps != [0, 2] and time.monotonic() < deadline:
        time.sleep(0.01)
    assert r.steps == [0, 2]  # before close: the period's end wrote it
    d.close()


def test_a_stuck_sink_costs_dropped_reports_never_a_wait_and_is_left_behind_at_close():
    release, entered = threading.Event(), threading.Event()
    errors = []

    def stuck(step, metrics):
        entered.set()
        release.wait(30)

    d = SinkDelivery([stuck], capacity=8, close_timeout_s=0.5,
                     report_error=lambda kind, e: errors.append((kind, str(e))))
    d.start()
    d(0, {})
    assert entered.wait(10)  # the thread is in the sink with report 0
    done = threading.Event()

    def feed():
        for step in range(1, 200):
            d(step, {})
        done.set()

    threading.Thread(target=feed, daemon=True).start()
    assert done.wait(20), "a call blocked on the stuck sink"
    c = d.counters()
    assert c["sink_reports_queued"] == 8 and c["sink_reports_dropped"] == 200 - 8 - 1, c
    d.close()
    release.set()
    c = d.counters()
    # every report: written (none), dropped while queued, dropped at close, or the one stuck
    assert c["sink_reports_dropped"] == 199 and c["sink_writes"] == 0, c
    assert [k for k, _ in errors] == ["sink close"] and "left behind" in errors[0][1], errors


def test_a_failing_sink_is_counted_and_still_gets_later_reports():
    calls, errors = [], []

    def flaky(step, metrics):
        calls.append(step)
        if step % 2 == 0:
            raise ValueError("tracker down")

    d = SinkDelivery([flaky], report_error=lambda kind, e: errors.append((kind, repr(e))))
    d.start()
    for step in range(6):
        d(step, {})
    d.close()
    assert calls == list(range(6))
    assert errors == [("sink test_a_failing_sink_is_counted_and_still_gets_later_reports."
                       "<locals>.flaky", "ValueError('tracker down')")] * 3


def test_prepare_runs_before_the_first_report_and_start_waits_for_it():
    order = []

    class Prepared(Recorder):
        def prepare(self):
            time.sleep(0.2)
            order.append("prepare")

        def __call__(self, step, metrics):
            order.append(step)

    d = SinkDelivery([Prepared()])
    assert d.start(wait_s=10.0) is True and order == ["prepare"]
    d(7, {})
    d.close()
    assert order == ["prepare", 7]


def _local_group_with_a_sink(channel):
    """3 Analyzers over the "local" side channel, rank 2 slow in forward, a sink on rank 0:
    what the sink saw of straggler/confirmed, once all three are closed."""
    import laggard

    seen = []
    ranks = [laggard.Analyzer(interval=1, rank=r, world_size=3, transport="local",
                              channel=channel, sinks=[lambda s, m: seen.append(
                                  m.get("straggler/confirmed"))] if r == 0 else (),
                              close_timeout_s=10.0, resources=False)
             for r in range(3)]
    for w in range(12):
        for r, an in enumerate(ranks):
            an.begin_step(w)
            an.add("forward", 30.0 if r == 2 else 10.0)
            an.add("communication", 2.0, kind="communication")
            an.end_step()
    deadline = time.monotonic() + 20
    while ranks[0].counters()["reports"] < 12 and time.monotonic() < deadline:
        time.sleep(0.01)
    for an in reversed(ranks):
        an.close()
    return seen


def test_a_closed_analyzer_with_sinks_frees_its_engine_and_its_side_channel():
    # The engine holds the sinks' thread; were the thread to hold the engine (its error
    # counter), the engine and its "local" group would outlive close(), and a second group on
    # the same channel name would find the first one's closed inboxes: no report, no verdict.
    import gc

    channel = "sink-delivery-reuse-%d" % os.getpid()
    first = _local_group_with_a_sink(channel)
    gc.collect()
    second = _local_group_with_a_sink(channel)
    assert first[-1] == "2:forward", first
    assert len(second) == 12 and second[-1] == "2:forward", second


def test_tracker_sinks_bound_their_writes_by_default(tmp_path):
    assert TensorBoardSink(tmp_path).min_period_s == 1.0
    assert MLflowSink(tracking_uri="sqlite:///" + str(tmp_path / "m.db")).min_period_s == 1.0
    with pytest.raises(ValueError, match="min_period_s"):
        TensorBoardSink(tmp_path, min_period_s=-1)
    with pytest.raises(ValueError, match="min_period_s"):
        MLflowSink(min_period_s="often")


# -- real ranks ---------------------------------------------------------------------------------


WORLD = 3
INTERVAL = 2
STEPS = 120
BURNERS = 2  # busy processes: one per core of the 2-core machine the tests run on


TRACKERS = ["tensorboard", "wandb", "mlflow", "prometheus"]


def _run(tmp_path, sinks, slow_rank=-1, slow_dataloader_ms=10.0):
    torch = pytest.importorskip("torch")
    if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
        pytest.skip("torch.distributed with gloo is needed")
    for module in ("mlflow", "wandb", "prometheus_client", "tensorboard"):
        pytest.importorskip(module)
    cfg = {"out": str(tmp_path), "log_dir": str(tmp_path / "logs"), "interval": INTERVAL,
           "steps": STEPS, "slow_rank": slow_rank, "slow_dataloader_ms": slow_dataloader_ms,
           "sinks": sinks}
    results = run_worker("trackers_worker", WORLD, cfg, str(tmp_path), timeout_s=240)
    confirmed = set()
    reports = (tmp_path / "logs" / "reports.jsonl").read_text().splitlines()
    for line in reports:
        for item in filter(None, json.loads(line).get("straggler/confirmed", "").split(",")):
            rank, stage = item.split(":", 1)
            confirmed.add((int(rank), stage))
    return results, confirmed, len(reports)


@pytest.fixture
def burner():
    with cpu_burners(BURNERS) as procs:
        yield procs


# Under the burners the detector's own floor on this 2-core machine (the same job without sinks)
# names a rank now and then, rank 0 included (docs/notes/sink-cost.md): those runs are `long`.
@pytest.mark.multiproc
@pytest.mark.parametrize("load", ["idle", pytest.param("burners", marks=pytest.mark.long)])
@pytest.mark.parametrize("rep", range(3))
def test_every_tracker_sink_at_interval_2_does_not_make_the_analysis_rank_a_straggler(
        tmp_path, request, load, rep):
    if load == "burners":
        request.getfixturevalue("burner")
    results, confirmed, reports = _run(tmp_path, TRACKERS)
    c0 = results[0]["counters"]
    assert reports == STEPS // INTERVAL and c0["report_errors"] == 0, c0
    # every tracker written (at most once a second, the latest report at close), nothing lost
    assert c0["sink_reports_dropped"] == 0 and c0["sink_writes"] >= 2 * len(TRACKERS), c0
    assert c0["sink_writes"] + c0["sink_writes_skipped"] == len(TRACKERS) * reports, c0
    assert not [v for v in confirmed if v[0] == 0], \
        "the analysis rank named: %s (load %s)" % (sorted(confirmed), os.getloadavg())


@pytest.mark.multiproc
def test_every_tracker_sink_at_interval_2_still_names_a_slow_rank(tmp_path):
    results, confirmed, reports = _run(tmp_path, TRACKERS + ["jsonl", "record"], slow_rank=1,
                                       slow_dataloader_ms=60.0)
    assert (1, "dataloader") in confirmed, sorted(confirmed)
    assert not [v for v in confirmed if v[0] == 0], sorted(confirmed)
    seen = {item for s in results[0]["seen"] for item in s["confirmed"].split(",") if item}
    assert "1:dataloader" in seen
