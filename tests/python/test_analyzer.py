"""Analyzer in one process: the section API, log_dir, sinks, failure rules, disabled mode."""

import argparse
import json
import logging
import os
import subprocess
import sys
import threading
import time

import pytest

import laggard
from laggard import _core

import testenv


def train(an, steps, stages=("forward", "backward"), ms=1.0):
    for step in range(steps):
        an.begin_step(step)
        for name in stages:
            with an.section(name):
                time.sleep(ms / 1000.0)
        an.end_step()


def wait_for(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


def test_disabled_is_a_noop_that_creates_nothing(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    import torch.distributed as dist

    calls = []
    monkeypatch.setattr(dist, "new_group", lambda *a, **k: calls.append((a, k)))
    # laggard's own gloo group (laggard.transport) is made without new_group
    monkeypatch.setattr(dist, "ProcessGroupGloo", lambda *a, **k: calls.append((a, k)))
    before = threading.active_count()
    log_dir = tmp_path / "logs"
    sink_calls = []
    an = laggard.Analyzer(enabled=False, interval=1, log_dir=str(log_dir),
                          sinks=[lambda s, m: sink_calls.append(s)])
    assert threading.active_count() == before
    for step in range(20):
        an.begin_step(step)
        assert an.section("forward") is laggard.NOOP_SECTION
        with an.section("forward"):
            pass
        an.add("communication", 3.0)
        an.end_step()
    assert an.latest_metrics() == {} and an.latest_report() is None
    an.close()
    assert threading.active_count() == before
    assert not log_dir.exists()
    assert calls == [] and sink_calls == []
    assert not an.enabled
    del torch


def test_disabled_with_distributed_initialized_creates_no_group(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    import torch.distributed as dist

    if dist.is_initialized():
        pytest.skip("a process group is already initialized")
    dist.init_process_group("gloo", init_method="file://" + str(tmp_path / "store"), rank=0,
                            world_size=1)
    try:
        calls = []
        real = dist.new_group
        monkeypatch.setattr(dist, "new_group", lambda *a, **k: calls.append(1) or real(*a, **k))
        real_gloo = dist.ProcessGroupGloo
        monkeypatch.setattr(dist, "ProcessGroupGloo",
                            lambda *a, **k: calls.append(1) or real_gloo(*a, **k))
        before = threading.active_count()
        an = laggard.Analyzer(enabled=False, log_dir=str(tmp_path / "logs"))
        model = torch.nn.Linear(2, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        step_before = opt.step
        import laggard.torch as lt

        inst = lt.instrument(an, model=model, optimizer=opt)
        assert inst.stages == [] and not model._forward_hooks and not model._forward_pre_hooks
        assert opt.step == step_before
        train(an, 5)
        an.close()
        assert calls == [] and threading.active_count() == before
        assert not (tmp_path / "logs").exists()
    finally:
        dist.destroy_process_group()


def test_unsampled_section_is_one_shared_noop_and_sampled_is_cached():
    an = laggard.Analyzer(enabled=True, interval=10)
    try:
        an.begin_step(3)
        assert not an.sampled
        assert an.section("forward") is laggard.NOOP_SECTION
        an.end_step()
        an.begin_step(10)
        assert an.sampled
        s = an.section("forward")
        assert s is not laggard.NOOP_SECTION and an.section("forward") is s
        with s:
            pass
        an.end_step()
    finally:
        an.close()


def test_single_process_reports_logs_and_sinks(tmp_path):
    got = []
    log_dir = tmp_path / "run"
    an = laggard.Analyzer(enabled=True, interval=2, log_dir=str(log_dir),
                          sinks=[lambda step, m: got.append((step, m))])
    assert an.latest_metrics() == {}  # before the first report
    train(an, 10, stages=("forward", "backward", "optimizer"))
    assert wait_for(lambda: len(got) == 5)
    m = an.latest_metrics()
    assert m["straggler/forward/local_ms"] >= 0.9
    assert m["straggler/ranks"] == 1.0
    assert m["straggler/report_errors"] == 0.0
    m["straggler/ranks"] = -1.0  # a copy: the analyzer's stays intact
    assert an.latest_metrics()["straggler/ranks"] == 1.0
    an.close()
    assert [s for s, _ in got] == [0, 2, 4, 6, 8]
    lines = (log_dir / "rank-0.jsonl").read_text().splitlines()
    assert len(lines) == 5
    parser = _core.SampleParser()
    samples = [parser.parse(line) for line in lines]
    assert [s.step for s in samples] == [0, 2, 4, 6, 8]
    assert [t.name for t in samples[0].stages] == ["forward", "backward", "optimizer"]
    reports = [json.loads(x) for x in (log_dir / "reports.jsonl").read_text().splitlines()]
    assert [r["step"] for r in reports] == [0, 2, 4, 6, 8]
    assert "straggler/forward/mean_ms" in reports[0]
    windows, stats = laggard.read_run(str(log_dir))
    assert len(windows) == 5 and stats["malformed"] == 0


def test_close_flushes_and_is_idempotent(tmp_path):
    got = []
    an = laggard.Analyzer(enabled=True, interval=1, sinks=[lambda s, m: got.append(s)])
    train(an, 3)
    an.close()
    assert got == [0, 1, 2]  # every report delivered by close()
    before = threading.active_count()
    an.close()
    an.begin_step(3)
    with an.section("forward"):
        pass
    an.end_step()
    assert threading.active_count() == before and got == [0, 1, 2]


def test_step_never_ended_is_closed_by_the_next_begin_step():
    got = []
    an = laggard.Analyzer(enabled=True, interval=1, sinks=[lambda s, m: got.append(s)])
    an.begin_step(0)
    with an.section("forward"):
        pass
    an.begin_step(1)  # no end_step for step 0
    an.end_step()
    an.close()
    assert got == [0, 1]


def test_raising_sink_is_counted_and_warned_once(caplog):
    good = []

    def bad(step, metrics):
        raise ValueError("tracker down")

    caplog.set_level(logging.WARNING, logger="laggard")
    an = laggard.Analyzer(enabled=True, interval=1, sinks=[bad, lambda s, m: good.append(m)])
    # One window at a time, each delivered (the sinks' thread calls `bad`, then the good sink)
    # before the next one ends: the sinks run on a thread of their own, so a window analysed
    # while an earlier report still waits for its sinks would not count that report's failure.
    for step in range(6):
        an.begin_step(step)
        with an.section("forward"):
            time.sleep(0.0001)
        an.end_step()
        assert wait_for(lambda: len(good) == step + 1), (step, len(good))
    an.close()
    assert len(good) == 6  # later sinks and later reports still run
    # Each window's metric counts the failures known when it was analysed: one for each earlier
    # window, whose report had reached the failing sink by then.
    seen = [m["straggler/report_errors"] for m in good]
    assert seen == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0], seen
    assert an.counters()["report_errors"] == 6
    warnings = [r for r in caplog.records if "tracker down" in r.getMessage()]
    assert len(warnings) == 1  # rate-limited


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_full_disk_is_counted_not_raised(tmp_path):
    log_dir = tmp_path / "full"
    log_dir.mkdir()
    os.symlink("/dev/full", log_dir / "rank-0.jsonl")
    os.symlink("/dev/full", log_dir / "reports.jsonl")
    got = []
    an = laggard.Analyzer(enabled=True, interval=1, log_dir=str(log_dir),
                          sinks=[lambda s, m: got.append(m)])
    train(an, 4, ms=0.1)
    an.close()
    assert len(got) == 4  # reports keep arriving
    assert got[-1]["straggler/report_errors"] >= 3
    assert an.counters()["report_errors"] >= 4


class PairTransport:
    """A Python transport between two Analyzers of this process (the protocol of
    laggard.transport.GlooTransport); `broken` makes every send raise, as a dead link does."""

    name = "pair"

    def __init__(self, rank, inboxes):
        self.rank, self.world_size, self.inboxes = rank, 2, inboxes
        self.broken = False

    def links(self):
        return (-1, [1]) if self.rank == 0 else (0, [])

    def send(self, peer, data):
        if self.broken:
            raise RuntimeError("Connection closed by peer")
        self.inboxes[peer].append((self.rank, bytes(data)))
        return True

    def receive(self):
        box = self.inboxes[self.rank]
        out = list(box)
        del box[:len(out)]
        return out

    def healthy(self):  # a broken link is not a failed transport (GlooTransport's rule)
        return True

    def fail(self):
        self.broken = True

    def shutdown(self):
        pass


def test_side_channel_failure_is_counted_and_logs_continue(tmp_path, caplog):
    # Two ranks in this process over a transport written in Python; rank 1's link dies after
    # two steps: counted and warned on rank 1, whose log still gets every sample; rank 0
    # analyses the later windows without it.
    got = []
    inboxes = {0: [], 1: []}
    t0, t1 = PairTransport(0, inboxes), PairTransport(1, inboxes)
    an0 = laggard.Analyzer(enabled=True, interval=1, rank=0, world_size=2, transport=t0,
                           log_dir=str(tmp_path), sinks=[lambda s, m: got.append(s)],
                           close_timeout_s=2.0)
    an1 = laggard.Analyzer(enabled=True, interval=1, rank=1, world_size=2, transport=t1,
                           log_dir=str(tmp_path), close_timeout_s=2.0)
    for step in range(5):
        if step == 2:
            assert wait_for(lambda: got == [0, 1]), got
            t1.broken = True
        for an in (an0, an1):
            an.begin_step(step)
            with an.section("forward"):
                time.sleep(0.0001)
            an.end_step()
    time.sleep(0.5)
    an1.close()
    an0.close()
    c1, c0 = an1.counters(), an0.counters()
    assert c1["report_errors"] >= 1, c1
    assert c1["gather_sent"] == 2 and c1["gather_dropped"] == 3, c1
    assert len((tmp_path / "rank-1.jsonl").read_text().splitlines()) == 5
    assert got == [0, 1, 2, 3, 4] and c0["incomplete_windows"] == 3, (got, c0)
    assert any("Connection closed by peer" in r.getMessage() for r in caplog.records)


def test_public_methods_never_raise_into_training():
    an = laggard.Analyzer(enabled=True, interval=1)

    class Broken:
        def __getattr__(self, name):
            raise RuntimeError("recorder broke")

    def broken(*args):
        raise RuntimeError("recorder broke")

    real = an._recorder, an._rec_begin_step, an._rec_end_step
    an._recorder = Broken()
    an._rec_begin_step = an._rec_end_step = broken
    # The methods' recorder calls are the ones replaced here: the builtins out of the way.
    an.__dict__.pop("begin_step", None)
    an.__dict__.pop("end_step", None)
    try:
        an.begin_step(0)  # fails inside: counted, step treated as unsampled
        assert an._errors.total == 1 and not an.sampled
        with an.section("forward"):
            pass
        an.add("x", 1.0)
        an.end_step()
        assert an.counters()["report_errors"] >= 1
        assert an.latest_metrics() == {}
    finally:
        an._recorder, an._rec_begin_step, an._rec_end_step = real
        an.close()


def test_steps_that_are_not_non_negative_ints_are_counted_not_raised():
    an = laggard.Analyzer(enabled=True, interval=1, resources=False)
    # The builtins hand these to the methods: counted (1.5 % 1 is not 0: a step not sampled).
    for bad in ("x", -1, 2 ** 70, 1.5):
        an.begin_step(bad)
        assert not an.sampled
        an.end_step()
    an.begin_step(True)  # an int, but not an exact one: the method, which records it
    assert an.sampled and an.step is True
    an.end_step()
    c = an.counters()
    an.close()
    assert c["report_errors"] == 3 and c["samples_emitted"] == 1, c


def test_unbalanced_sections_do_not_raise():
    an = laggard.Analyzer(enabled=True, interval=1)
    an.begin_step(0)
    s = an.section("forward")
    s.__enter__()  # never exited
    an.section("backward").__exit__(None, None, None)  # exit without enter
    an.end_step()
    c = an.counters()
    an.close()
    assert c["unbalanced"] >= 2


def test_add_records_durations_measured_elsewhere(tmp_path):
    an = laggard.Analyzer(enabled=True, interval=1, log_dir=str(tmp_path))
    an.begin_step(0)
    an.add("allreduce", 4.5, kind="communication")
    an.end_step()
    an.close()
    s = _core.StepSample.from_json((tmp_path / "rank-0.jsonl").read_text().strip())
    assert s.find("allreduce").ms == 4.5
    assert s.find("allreduce").kind == _core.StageKind.communication


def test_from_args():
    p = argparse.ArgumentParser()
    laggard.add_arguments(p)
    an = laggard.Analyzer.from_args(p.parse_args([]))
    assert not an.enabled
    args = p.parse_args(["--straggler-analysis", "--straggler-interval", "5",
                         "--straggler-relative-threshold", "1.5",
                         "--straggler-absolute-ms-threshold", "2.5", "--straggler-ref", "median",
                         "--straggler-enable-module-stages"])
    an = laggard.Analyzer.from_args(args)
    try:
        assert an.enabled
        o = an.options
        assert (o["interval"], o["relative_threshold"], o["absolute_ms_threshold"], o["ref"]) == \
            (5, 1.5, 2.5, "median")
        assert an.module_stages
        an.begin_step(5)
        assert an.sampled
        an.end_step()
    finally:
        an.close()


def test_bad_settings_are_value_errors():
    with pytest.raises(ValueError, match="interval"):
        laggard.Analyzer(enabled=True, interval=-1)
    with pytest.raises(ValueError, match="ref"):
        laggard.Analyzer(enabled=True, ref="max")
    with pytest.raises(ValueError):
        laggard.Analyzer(enabled=True, relative_threshold=-2)
    with pytest.raises(ValueError, match="analysis_rank"):
        laggard.Analyzer(enabled=True, analysis_rank=3)


def test_package_works_without_torch(tmp_path):
    code = r"""
import sys, time
sys.modules["torch"] = None  # any `import torch` now fails
import laggard
an = laggard.Analyzer(enabled=True, interval=1, log_dir=sys.argv[1])
for step in range(3):
    an.begin_step(step)
    with an.section("forward"):
        time.sleep(0.001)
    an.end_step()
an.close()
assert an.latest_metrics()["straggler/ranks"] == 1.0
assert sys.modules["torch"] is None
print("ok", an.backend_name)
"""
    env = testenv.subprocess_env()
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                         text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok host-clock"
    assert len((tmp_path / "rank-0.jsonl").read_text().splitlines()) == 3


def test_timing_choice_is_logged_once(caplog):
    caplog.set_level(logging.INFO, logger="laggard")
    from laggard import _log

    _log._once_seen.discard("timing")
    for _ in range(2):
        laggard.Analyzer(enabled=True, interval=1).close()
    msgs = [r.getMessage() for r in caplog.records if "timing" in r.getMessage()]
    assert len(msgs) == 1


def test_unwritable_log_dir_is_counted_and_training_goes_on(tmp_path):
    # The log directory cannot be created (a file is in the way): every write of the rank log
    # and of reports.jsonl fails. Each failure is counted, the reports still reach the sinks,
    # and nothing reaches the training loop.
    blocker = tmp_path / "blocked"
    blocker.write_text("not a directory")
    got = []
    an = laggard.Analyzer(enabled=True, interval=1, log_dir=str(blocker / "logs"),
                          sinks=[lambda s, m: got.append(m)])
    train(an, 3, ms=0.1)
    an.close()
    assert len(got) == 3
    c = an.counters()
    assert c["report_errors"] >= 2  # the rank log and reports.jsonl, at least once each
    assert got[-1]["straggler/report_errors"] >= 1
    assert blocker.read_text() == "not a directory"


def test_rank_log_and_reports_written_by_the_background_thread(tmp_path):
    an = laggard.Analyzer(enabled=True, interval=2, log_dir=str(tmp_path))
    train(an, 6, ms=0.1)
    an.close()
    lines = (tmp_path / "rank-0.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [0, 2, 4]
    reports = [json.loads(line) for line in (tmp_path / "reports.jsonl").read_text().splitlines()]
    assert [r["step"] for r in reports] == [0, 2, 4]
    for r in reports:
        assert r["straggler/ranks"] == 1.0 and r["straggler/report_errors"] == 0.0
        assert r["stragglers"] == [] and r["waiting"] == []
        assert "straggler/forward/mean_ms" in r and "straggler/confirmed" in r


def test_record_lands_in_the_rank_log_on_sampled_steps_only(tmp_path):
    log_dir = tmp_path / "run"
    an = laggard.Analyzer(enabled=True, interval=2, log_dir=str(log_dir))
    for step in range(4):
        an.begin_step(step)
        an.record("loss", float("inf") if step == 2 else 1.0 / 3.0)
        an.end_step()
    an.close()
    lines = (log_dir / "rank-0.jsonl").read_text().splitlines()
    assert [json.loads(line)["values"] for line in lines] == [
        {"loss": 1.0 / 3.0}, {"loss": "Infinity"}]
