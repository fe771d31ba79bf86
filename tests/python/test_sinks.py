"""Sinks: JSONL reports, TensorBoard behind a clean import check, and the tracker and
monitoring sinks (TensorBoard, Weights & Biases offline, MLflow's default SQLite store and an
explicit tracking URI, Prometheus), each read back with the tool's own reader; the compact
metric set trackers get by default, and the full one on request."""

import json
import math
import sys
import time

import pytest

import laggard
from laggard import sinks


def test_jsonl_report_sink_writes_one_object_per_line(tmp_path):
    path = tmp_path / "sub" / "reports.jsonl"
    s = sinks.JsonlReportSink(path)
    s(10, {"straggler/forward/max_ms": 3.5, "straggler/hints": "x", "straggler/bad": math.nan})
    s(20, {"straggler/forward/max_ms": 4.0})
    s.close()
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert rows[0] == {"step": 10, "straggler/forward/max_ms": 3.5, "straggler/hints": "x",
                       "straggler/bad": None}
    assert rows[1]["step"] == 20


def test_callable_sink_rejects_non_callables():
    with pytest.raises(TypeError):
        sinks.CallableSink(42)


def test_tensorboard_unavailable_is_clean(monkeypatch):
    # as if the tensorboard package were missing (None in sys.modules: its import fails)
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    assert not laggard.tensorboard_available()
    with pytest.raises(ImportError, match="tensorboard"):
        laggard.TensorBoardSink("/tmp/never-created")
    assert sinks.tensorboard_sink("/tmp/never-created") is None


def test_tensorboard_sink_writes(tmp_path):
    s = laggard.TensorBoardSink(tmp_path)
    s(10, {"straggler/forward/max_ms": 3.0, "straggler/likely_bottleneck": "forward"})
    s.close()
    assert any(p.name.startswith("events.") for p in tmp_path.iterdir())


# -- trackers and monitoring: each sink's output read back with the tool's own reader ----------

WORLD = 4
SLOW_RANK = 2


def _sample_line(rank, step, forward_ms):
    from laggard import _core

    s = _core.StepSample()
    s.rank, s.world_size, s.step, s.host, s.step_ms = rank, WORLD, step, "host-%d" % rank, 60.0
    s.stages = [_core.StageTime("forward", ms=forward_ms),
                _core.StageTime("communication", "communication", ms=52.0 - forward_ms)]
    return s.to_json()


class _Analysis:
    """WORLD ranks as Analyzers of this process over the "local" side channel, rank 2's
    forward 4x slower (the others wait for it in communication) and a backward equal on every
    rank (a stage no window flags): the reports the sinks get (on rank 0) are laggard's own (the
    live engine, the C++ detector, the live metrics), without starting processes. Every
    window's report has reached the sinks when the constructor returns; `reports` holds them
    all, (step, metrics), and `confirmed_steps` the steps of those that confirm rank 2's
    forward."""

    _runs = 0

    def __init__(self, sinks, windows=8):
        self.reports = []
        sinks = list(sinks) + [lambda step, m: self.reports.append((step, dict(m)))]
        _Analysis._runs += 1
        channel = "test-sinks-%d" % _Analysis._runs
        self.ranks = [laggard.Analyzer(interval=1, rank=r, world_size=WORLD, transport="local",
                                       channel=channel, host="host-%d" % r,
                                       sinks=sinks if r == 0 else (), close_timeout_s=10.0)
                      for r in range(WORLD)]
        for w in range(windows):
            for r, an in enumerate(self.ranks):
                an.begin_step(w * 10)
                forward = 40.0 if r == SLOW_RANK else 10.0
                an.add("forward", forward)
                an.add("backward", 5.0)
                an.add("communication", 52.0 - forward, kind="communication")
                an.end_step()
        deadline = time.monotonic() + 30
        # The engine's reports, then the sinks' thread (laggard.sinks.SinkDelivery) handing
        # them on: the last sink, which has no min_period_s, gets every one.
        while len(self.reports) < windows and time.monotonic() < deadline:
            time.sleep(0.01)
        assert self.ranks[0].counters()["reports"] == windows
        assert len(self.reports) == windows
        self.confirmed_steps = [step for step, m in self.reports
                                if "%d:forward" % SLOW_RANK in m["straggler/confirmed"]]
        assert self.confirmed_steps, "rank 2's forward is never confirmed"

    def latest_report(self):
        return self.ranks[0].latest_report()

    def close(self):
        for an in reversed(self.ranks):
            an.close()


def _train_single_rank(sinks, steps=12):
    """A real Analyzer (one process, interval 1) timing three sections; returns it closed."""
    an = laggard.Analyzer(interval=1, sinks=sinks, close_timeout_s=10.0)
    for step in range(steps):
        an.begin_step(step)
        for stage in ("dataloader", "forward", "backward"):
            with an.section(stage):
                pass
        an.end_step()
    an.close()
    return an


def _per_stage(names):
    """The stages of the per-stage metrics among `names` (straggler/<stage>/<RFC field>)."""
    return {sinks._stage_of(n) for n in names} - {None}


def test_tracker_metrics_compact_is_the_summary_and_the_confirmed_stages():
    reports = []
    analysis = _Analysis([lambda step, m: reports.append(dict(m))])
    analysis.close()
    last = reports[-1]
    assert last["straggler/confirmed"] == "%d:forward" % SLOW_RANK
    assert last["straggler/backward/num_stragglers"] == 0.0  # equal on every rank
    # the others' wait: flagged in the window, never confirmed
    assert last["straggler/communication/num_stragglers"] > 0
    compact = sinks.tracker_metrics(last)
    assert compact == sinks.tracker_metrics(last, "compact")
    # every summary metric, and all seven RFC fields of the confirmed stage only
    summary = {n for n in last if sinks._stage_of(n) is None}
    assert {"straggler/num_confirmed", "straggler/confirmed", "straggler/likely_bottleneck",
            "straggler/report_errors", "straggler/dropped_samples",
            "straggler/incomplete_windows", "straggler/whatif_step_saving_ms"} <= summary
    assert set(compact) == summary | {"straggler/%s/%s" % (stage, field)
                                      for stage in ("forward",)
                                      for field in sinks._STAGE_FIELDS}
    assert all(compact[n] == last[n] for n in compact)
    assert _per_stage(last) == {"forward", "backward", "communication"}
    assert sinks.tracker_metrics(last, "full") == last
    # a confirmed stage that this window did not flag stays; two confirmed stages, both; a
    # healthy report is the summary
    quiet = dict(last, **{"straggler/forward/num_stragglers": 0.0})
    assert _per_stage(sinks.tracker_metrics(quiet)) == {"forward"}
    two = dict(last, **{"straggler/confirmed": "%d:forward,0:backward" % SLOW_RANK})
    assert _per_stage(sinks.tracker_metrics(two)) == {"forward", "backward"}
    healthy = dict(last, **{"straggler/confirmed": "", "straggler/num_confirmed": 0.0})
    assert set(sinks.tracker_metrics(healthy)) == summary
    for bad in ("all", None, True):
        with pytest.raises(ValueError, match="metrics must be .compact."):
            sinks.check_metric_set(bad, "TensorBoardSink")


def test_tracker_sinks_reject_an_unknown_metric_set(tmp_path):
    with pytest.raises(ValueError, match="TensorBoardSink: metrics must be"):
        sinks.TensorBoardSink(tmp_path, metrics="everything")
    with pytest.raises(ValueError, match="WandbSink: metrics must be"):
        sinks.WandbSink(metrics="everything")
    with pytest.raises(ValueError, match="MLflowSink: metrics must be"):
        sinks.MLflowSink(metrics="everything")


def test_tensorboard_sink_is_read_back_by_tensorboard(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    # min_period_s=0: every report (by default at most one a second)
    compact, full = sinks.TensorBoardSink(tmp_path / "compact", min_period_s=0), \
        sinks.TensorBoardSink(tmp_path / "full", metrics="full", min_period_s=0)
    analysis = _Analysis([compact, full])
    analysis.close()
    acc = EventAccumulator(str(tmp_path / "compact"),
                           size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    top = acc.Scalars("straggler/forward/top_rank")
    # compact (the default): the confirmed stage's series, from its confirmation on
    assert [e.step for e in top] == analysis.confirmed_steps
    assert {e.value for e in top} == {float(SLOW_RANK)}
    assert acc.Scalars("straggler/num_confirmed")[-1].value == 1.0
    # text metrics are TensorBoard text summaries (tensors with the text plugin)
    assert "straggler/confirmed/text_summary" in acc.Tags()["tensors"]
    confirmed = acc.Tensors("straggler/confirmed/text_summary")[-1]
    assert confirmed.tensor_proto.string_val[0].decode() == "%d:forward" % SLOW_RANK
    # compact (the default): the confirmed stage's series only; full: every stage's
    assert _per_stage(acc.Tags()["scalars"]) == {"forward"}
    acc_full = EventAccumulator(str(tmp_path / "full"), size_guidance={"scalars": 0})
    acc_full.Reload()
    top = acc_full.Scalars("straggler/forward/top_rank")
    assert [e.step for e in top] == [w * 10 for w in range(8)]
    assert {e.value for e in top} == {float(SLOW_RANK)}
    assert _per_stage(acc_full.Tags()["scalars"]) == {"forward", "backward", "communication"}
    assert len(acc_full.Scalars("straggler/backward/mean_ms")) == 8


def _no_mlflow_settings(monkeypatch):
    """A user's environment without MLflow settings: no MLFLOW_TRACKING_URI and MLflow's file
    store left refused (this test process may have them from elsewhere)."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)


def test_mlflow_sink_with_mlflows_default_store_is_read_back_by_mlflow_client(tmp_path,
                                                                              monkeypatch):
    from mlflow.tracking import MlflowClient

    _no_mlflow_settings(monkeypatch)
    monkeypatch.chdir(tmp_path)  # MLflow's default local store is in the working directory
    # min_period_s=0: every report (the default writes at most one a second; tested below)
    s = sinks.MLflowSink(experiment="laggard-test", run_name="slow-rank", min_period_s=0)
    assert s.run_id is None  # nothing touched before the first report
    analysis = _Analysis([s])
    run_id = s.run_id
    analysis.close()
    assert analysis.ranks[0].counters()["report_errors"] == 0
    client = MlflowClient()  # MLflow's default, as the sink had it
    assert client.tracking_uri.startswith("sqlite:")
    assert (tmp_path / "mlflow.db").is_file()
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.info.run_name == "slow-rank"
    history = client.get_metric_history(run_id, "straggler/forward/top_rank")
    assert sorted(m.step for m in history) == analysis.confirmed_steps
    assert {m.value for m in history} == {float(SLOW_RANK)}
    assert run.data.tags["straggler/confirmed"] == "%d:forward" % SLOW_RANK
    assert run.data.tags["straggler/likely_bottleneck"] == "forward"
    # the compact set: the confirmed stage's metrics only
    assert run.data.metrics["straggler/num_confirmed"] == 1.0
    assert _per_stage(run.data.metrics) == {"forward"}


def test_mlflow_sink_logs_into_the_trainers_run_at_a_tracking_uri(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    _no_mlflow_settings(monkeypatch)
    uri = "sqlite:///" + str(tmp_path / "tracking" / "runs.db")
    (tmp_path / "tracking").mkdir()
    client = MlflowClient(tracking_uri=uri)
    run = client.create_run(client.create_experiment("trainer"))
    analysis = _Analysis([sinks.MLflowSink(tracking_uri=uri, run_id=run.info.run_id,
                                           metrics="full")])
    analysis.close()
    assert analysis.ranks[0].counters()["report_errors"] == 0
    back = client.get_run(run.info.run_id)
    assert back.info.status == "RUNNING"  # the trainer's run: not ended by laggard
    assert back.data.metrics["straggler/forward/top_rank"] == float(SLOW_RANK)
    assert _per_stage(back.data.metrics) == {"forward", "backward", "communication"}  # full
    # At most one write a second (min_period_s=1.0, the default): of the 8 reports, which come
    # within about a second, the first and the last at least; the rest skipped, counted.
    steps = [m.step for m in client.get_metric_history(run.info.run_id,
                                                       "straggler/backward/mean_ms")]
    reports = [step for step, _ in analysis.reports]
    assert steps == sorted(steps) and set(steps) <= set(reports), (steps, reports)
    assert steps[0] == reports[0] and steps[-1] == reports[-1], (steps, reports)
    c = analysis.ranks[0].counters()
    assert c["sink_writes_skipped"] == 8 - len(steps) and c["sink_reports_dropped"] == 0, c


def test_mlflow_sink_says_what_to_set_when_mlflow_refuses_its_file_store(tmp_path, monkeypatch):
    import importlib.metadata

    _no_mlflow_settings(monkeypatch)
    version = tuple(int(p) for p in importlib.metadata.version("mlflow").split(".")[:2])
    if version < sinks.MLflowSink.REFUSES_FILE_STORE:
        pytest.skip("this MLflow (%d.%d) keeps its file store" % version)
    db = "sqlite:///" + str(tmp_path / "mlflow.db")
    # at setup, from tracking_uri or MLFLOW_TRACKING_URI: the SQLite file beside it to set
    for uri in ("file:" + str(tmp_path / "mlruns"), str(tmp_path / "mlruns")):
        with pytest.raises(ValueError) as e:
            sinks.MLflowSink(tracking_uri=uri)
        assert "refuses its file store %r (tracking_uri)" % uri in str(e.value)
        assert "Set MLflowSink(tracking_uri=%r)" % db in str(e.value)
        assert "MLFLOW_ALLOW_FILE_STORE=true" in str(e.value)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "file://" + str(tmp_path / "mlruns"))
    with pytest.raises(ValueError, match="Set MLFLOW_TRACKING_URI=%s:" % db):
        sinks.MLflowSink()
    # MLflow's own switch keeps the file store, as the message says
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    assert sinks.MLflowSink().tracking_uri is None
    assert sinks.MLflowSink(tracking_uri="file:" + str(tmp_path / "mlruns")).run_id is None


def test_mlflow_default_file_store_refused_at_the_first_report_says_what_to_set(
        tmp_path, monkeypatch, caplog):
    from mlflow.tracking import MlflowClient

    _no_mlflow_settings(monkeypatch)
    monkeypatch.chdir(tmp_path)
    # ./mlruns holding an older MLflow's runs: MLflow's default stays that file store
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    old = MlflowClient(tracking_uri="file:" + str(tmp_path / "mlruns"))
    old.create_run(old.create_experiment("older-mlflow"))
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE")
    s = sinks.MLflowSink()  # nothing to check at setup: the default is MLflow's to resolve
    with caplog.at_level("WARNING", logger="laggard"):
        an = _train_single_rank([s])
    assert an.counters()["report_errors"] >= 1
    assert an.counters()["sampled_steps"] == 12
    said = [r.getMessage() for r in caplog.records if "MLflowSink" in r.getMessage()]
    assert said and "training continues" in said[0], said
    assert "(MLflow's default here)" in said[0] and \
        "Set MLflowSink(tracking_uri='sqlite:///%s')" % (tmp_path / "mlflow.db") in said[0]
    assert not (tmp_path / "mlflow.db").exists()


# -- the framework loggers' payload: the same sets through the callbacks' `metrics` ------------
#
# One rank, in this process, trains for real: one rank flags no stage, so the compact set
# (the default) is the summary alone, and metrics="full" adds every timed stage's RFC metrics.

@pytest.mark.parametrize("which", ["compact", "full"])
def test_transformers_callback_logs_the_metric_set_asked_for(tmp_path, which):
    pytest.importorskip("transformers")
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    from laggard.transformers import LaggardCallback

    with pytest.raises(ValueError, match="LaggardCallback: metrics must be"):
        LaggardCallback(metrics="all")
    class TinyGPT2(GPT2LMHeadModel):
        def forward(self, input_ids=None, labels=None, **kwargs):
            time.sleep(0.005)  # a stand-in for a real forward: reports come while it trains
            return super().forward(input_ids=input_ids, labels=labels, **kwargs)

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=2, n_head=2,
                        bos_token_id=0, eos_token_id=0)
    data = [{"input_ids": ids, "labels": ids} for ids in torch.randint(0, 64, (96, 8))]
    args = TrainingArguments(output_dir=str(tmp_path), max_steps=24, logging_steps=6,
                             per_device_train_batch_size=4, report_to="none",
                             save_strategy="no", use_cpu=True, disable_tqdm=True)
    options = {} if which == "compact" else {"metrics": "full"}
    callback = LaggardCallback(interval=2, close_timeout_s=10.0, **options)
    trainer = Trainer(model=TinyGPT2(config), args=args, train_dataset=data,
                      callbacks=[callback])
    trainer.train()
    logged = [h for h in trainer.state.log_history if "straggler/ranks" in h]
    assert logged and len(logged) == callback.reports_logged
    for h in logged:
        assert h["straggler/num_confirmed"] == 0.0 and h["straggler/report_errors"] == 0.0
        stages = _per_stage(h)
        if which == "compact":
            assert not stages, h
        else:
            assert {"dataloader", "forward", "backward", "optimizer"} <= stages, h
            assert all("straggler/forward/%s" % f in h for f in sinks._STAGE_FIELDS)


@pytest.mark.parametrize("which", ["compact", "full"])
def test_lightning_callback_logs_the_metric_set_asked_for(tmp_path, which):
    pytest.importorskip("lightning")
    import csv

    import lightning as L
    import torch
    from lightning.pytorch.loggers import CSVLogger

    from laggard.lightning import LaggardCallback

    with pytest.raises(ValueError, match="LaggardCallback: metrics must be"):
        LaggardCallback(metrics="all")

    class Model(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Linear(8, 1)

        def training_step(self, batch, batch_idx):
            x, y = batch
            time.sleep(0.005)  # a stand-in for a real step: reports come while it trains
            return torch.nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    gen = torch.Generator().manual_seed(1)
    data = torch.utils.data.TensorDataset(torch.randn(192, 8, generator=gen),
                                          torch.randn(192, 1, generator=gen))
    options = {} if which == "compact" else {"metrics": "full"}
    callback = LaggardCallback(interval=2, close_timeout_s=10.0, **options)
    trainer = L.Trainer(accelerator="cpu", devices=1, max_steps=24, max_epochs=1,
                        logger=CSVLogger(str(tmp_path), name="csv", version=0),
                        log_every_n_steps=1000, enable_progress_bar=False,
                        enable_model_summary=False, enable_checkpointing=False,
                        callbacks=[callback])
    trainer.fit(Model(), torch.utils.data.DataLoader(data, batch_size=8))
    with open(tmp_path / "csv" / "version_0" / "metrics.csv") as f:
        rows = [r for r in csv.DictReader(f) if r.get("straggler/step")]
    assert rows and len(rows) == callback.reports_logged
    columns = _per_stage(rows[0])  # the CSV's columns: every key logged in the run
    if which == "compact":
        assert not columns and all(r["straggler/num_confirmed"] == "0.0" for r in rows)
    else:
        assert {"forward", "backward", "optimizer"} <= columns, columns
        assert all(r["straggler/forward/mean_ms"] != "" for r in rows)


def test_wandb_sink_offline_run_is_read_back(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    s = sinks.WandbSink(project="laggard-test", dir=str(tmp_path), min_period_s=0)
    analysis = _Analysis([s])
    run_dir = s.run.dir
    analysis.close()
    history, summary = _read_wandb_offline_run(tmp_path)
    steps = [row["straggler/step"] for row in history if "straggler/forward/top_rank" in row]
    assert steps == analysis.confirmed_steps
    assert {row["straggler/forward/top_rank"] for row in history
            if "straggler/forward/top_rank" in row} == {float(SLOW_RANK)}
    assert summary["straggler/confirmed"] == "%d:forward" % SLOW_RANK
    assert run_dir.startswith(str(tmp_path))
    # the compact set: the summary in every row, the confirmed stage's series only
    assert all("straggler/num_confirmed" in row for row in history if "straggler/step" in row)
    assert _per_stage(k for row in history for k in row) == {"forward"}


def test_prometheus_sink_is_scraped_over_http():
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    # min_period_s=0: the latest report at once (by default at most a second later)
    s = sinks.PrometheusSink(port=0, addr="127.0.0.1", host="analysis-host", min_period_s=0)
    analysis = _Analysis([s])
    try:
        assert s.port > 0  # started at the first report, on a free port
        body = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % s.port,
                                      timeout=10).read().decode()
    finally:
        analysis.close()
    samples = {}
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((sample.labels, sample.value))
    assert samples["laggard_confirmed_straggler"] == [
        ({"rank": str(SLOW_RANK), "stage": "forward", "host": "host-%d" % SLOW_RANK}, 1.0)]
    assert ({"stage": "forward"}, float(SLOW_RANK)) in samples["laggard_stage_top_rank"]
    assert ({"stage": "forward", "rank": "0", "host": "analysis-host"}, 10.0) in \
        samples["laggard_stage_local_ms"]
    assert samples["laggard_report_step"] == [({}, 70.0)]
    per_rank = {(l["rank"], l["stage"]): v for l, v in samples["laggard_rank_stage_ms"]}
    assert per_rank[(str(SLOW_RANK), "forward")] == 40.0
    assert per_rank[("1", "forward")] == 10.0
    named = {(l["rank"], l["stage"], l["role"]): l["host"]
             for l, _ in samples["laggard_straggler_slowdown"]}
    assert named[(str(SLOW_RANK), "forward", "straggler")] == "host-%d" % SLOW_RANK
    assert samples["laggard_likely_bottleneck"] == [({"stage": "forward"}, 1.0)]
    # closed: the server is gone
    with pytest.raises(OSError):
        urllib.request.urlopen("http://127.0.0.1:%d/metrics" % s.port, timeout=5)


def test_prometheus_sink_in_an_analyzer_serves_its_reports():
    import urllib.request

    s = sinks.PrometheusSink(port=0, addr="127.0.0.1")
    seen = []
    an = laggard.Analyzer(interval=1, sinks=[s, lambda step, m: seen.append(step)],
                          close_timeout_s=10.0)
    for step in range(6):
        an.begin_step(step)
        with an.section("forward"):
            pass
        an.end_step()
    deadline = time.monotonic() + 20
    while not seen and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        body = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % s.port,
                                      timeout=10).read().decode()
    finally:
        an.close()
    from prometheus_client.parser import text_string_to_metric_families

    samples = {(sample.name, tuple(sorted(sample.labels.items())))
               for family in text_string_to_metric_families(body) for sample in family.samples}
    host = s.host
    assert ("laggard_stage_local_ms", (("host", host), ("rank", "0"), ("stage", "forward"))) \
        in samples
    # attached by the Analyzer: the full report's per-rank times
    assert ("laggard_rank_stage_ms", (("cohort", ""), ("rank", "0"), ("stage", "forward"))) \
        in samples
    assert an.counters()["report_errors"] == 0


def test_prometheus_sink_port_in_use_is_counted_not_raised(caplog):
    import socket

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    try:
        s = sinks.PrometheusSink(port=taken.getsockname()[1], addr="127.0.0.1")
        with caplog.at_level("WARNING", logger="laggard"):
            an = _train_single_rank([s])
    finally:
        taken.close()
    assert an.counters()["report_errors"] >= 1
    assert any("PrometheusSink" in r.getMessage() for r in caplog.records)


def test_tracker_sink_without_its_package_is_an_import_error_at_setup(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in ("wandb", "mlflow") else real(name, *a))
    with pytest.raises(ImportError, match="pip install wandb"):
        sinks.WandbSink()
    with pytest.raises(ImportError, match="pip install mlflow"):
        sinks.MLflowSink()


def test_failing_tracker_sink_warns_and_counts_and_training_goes_on(tmp_path, caplog):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    s = sinks.MLflowSink(tracking_uri="sqlite:///" + str(blocker / "mlflow.db"))
    with caplog.at_level("WARNING", logger="laggard"):
        an = _train_single_rank([s])
    assert an.counters()["report_errors"] >= 1
    assert an.counters()["sampled_steps"] == 12
    assert any("MLflowSink" in r.getMessage() and "training continues" in r.getMessage()
               for r in caplog.records)


def _read_wandb_offline_run(root):
    """(history rows, summary) of the one offline run under root/wandb, from its run-<id>.wandb
    file: wandb's header (":W&B", 2 magic bytes, a version byte), then records in LevelDB's log
    format (32 KiB blocks; a chunk is crc32c, length, type, data; FULL=1 FIRST=2 MIDDLE=3
    LAST=4), each a wandb.proto Record — what `wandb sync` uploads."""
    import glob

    from wandb.proto import wandb_internal_pb2

    (path,) = glob.glob(str(root / "wandb" / "offline-run-*" / "run-*.wandb"))
    # run.finish() can return before wandb's service has written the run out: wait for the
    # run's exit record.
    deadline = time.monotonic() + 60
    while True:
        history, summary, finished = _wandb_records(path, wandb_internal_pb2)
        if finished or time.monotonic() > deadline:
            return history, summary
        time.sleep(0.2)


def _wandb_records(path, wandb_internal_pb2):
    import struct

    data = open(path, "rb").read()
    assert data[:4] == b":W&B", data[:8]
    block, pos, pending, history, summary, finished = 32768, 7, b"", [], {}, False
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a chunk header is padding
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        chunk = data[pos + 7:pos + 7 + length]
        if len(chunk) < length:  # the writer is still writing this chunk: read again later
            break
        pos += 7 + length
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind not in (1, 4):
            continue
        record = wandb_internal_pb2.Record()
        record.ParseFromString(pending)
        which = record.WhichOneof("record_type")
        if which == "history":
            history.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                            for item in record.history.item})
        elif which == "summary":
            for item in record.summary.update:
                summary[item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
        elif which == "exit":
            finished = True
    return history, summary, finished
