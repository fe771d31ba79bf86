"""laggard.lightning.LaggardCallback in a real PyTorch Lightning fit: 3 gloo ranks (real
processes) with strategy="ddp" on the CPU, laggard's default settings and Lightning's default
Trainer settings but for what the fit needs. One rank made slow in one stage — its batch
loading, training_step, backward or optimizer step — is named in that stage, and nobody else
is, by the live reports and by laggard's offline analysis of the rank logs, in each of 3
repetitions; a healthy fit names nobody; the reports reach the Trainer's logger (CSVLogger's
metrics.csv), and a PrometheusSink on the analysis rank serves them (scraped over HTTP during
the fit).
"""

import csv
import json
import math
import os
import socket
import sys

import pytest

from laggard import _core
from laggard.launch import free_port
from ranks import join_ranks, rank_context

pytestmark = pytest.mark.multiproc

WORLD = 3
STEPS = 100
EPOCH_STEPS = 40  # batches in an epoch: the fits cross two epochs' ends
INTERVAL = 10  # laggard's default
SLOW_MS = 25.0


def _child(rank, port, cfg):
    # What a launcher gives: with LOCAL_RANK set, Lightning takes the processes as created for
    # it and starts none itself.
    os.environ.update(LOCAL_RANK=str(rank), NODE_RANK="0", WORLD_SIZE=str(WORLD),
                      RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                      OMP_NUM_THREADS="1", PL_DISABLE_FORK="1")
    import lightning_worker

    code = 1
    try:
        code = lightning_worker.run(rank, WORLD, cfg)
    except BaseException:
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
    finally:
        os._exit(code or 0)


def fit(tmp_path, slow="none", slow_rank=-1, slow_ms=0.0):
    import laggard.lightning  # noqa: F401

    cfg = {"out": str(tmp_path), "log_dir": str(tmp_path / "laggard"), "steps": STEPS,
           "epoch_steps": EPOCH_STEPS, "slow": slow, "slow_rank": slow_rank,
           "slow_ms": slow_ms}
    ctx = rank_context()
    port = free_port()
    procs = [ctx.Process(target=_child, args=(r, port, cfg)) for r in range(WORLD)]
    return join_ranks(procs, str(tmp_path), timeout_s=180)


def confirmed_live(log_dir):
    found = set()
    for line in (log_dir / "reports.jsonl").read_text().splitlines():
        for item in filter(None, json.loads(line).get("straggler/confirmed", "").split(",")):
            rank, stage = item.split(":", 1)
            found.add((int(rank), stage))
    return found


def confirmed_offline(log_dir):
    windows, stats = _core.read_run(str(log_dir))
    assert stats["files"] == WORLD and stats["malformed"] == 0, stats
    det = _core.Detector(_core.DetectorOptions())
    stages = set()
    for step, samples in windows:
        det.observe(samples, step)
        for s in samples:
            stages.update(st.name for st in s.stages)
    return {(f["rank"], f["stage"]) for f in det.confirmed()}, stages, windows


def logged_rows(tmp_path):
    with open(tmp_path / "csv" / "version_0" / "metrics.csv") as f:
        return [row for row in csv.DictReader(f) if row.get("straggler/step")]


def prometheus_samples(body):
    """From a scrape: the confirmed-straggler series' labels, and each rank's forward ms."""
    from prometheus_client.parser import text_string_to_metric_families

    confirmed, forward = [], {}
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            if sample.name == "laggard_confirmed_straggler":
                confirmed.append(sample.labels)
            elif sample.name == "laggard_rank_stage_ms" and sample.labels["stage"] == "forward":
                forward[sample.labels["rank"]] = sample.value
    return confirmed, forward


def check_common(tmp_path, results):
    assert [r["global_rank"] for r in results] == list(range(WORLD))
    assert all(r["world"] == WORLD and r["global_step"] == STEPS for r in results)
    assert all(r["ddp"] and r["counters"]["report_errors"] == 0 for r in results), results
    _, stages, windows = confirmed_offline(tmp_path / "laggard")
    # every stage the callback promises under DDP, and one window per sampled batch
    assert {"between_batches", "dataloader", "forward", "backward", "communication",
            "optimizer"} <= stages, stages
    assert [step for step, _ in windows] == list(range(0, STEPS, INTERVAL))
    for step, samples in windows:
        for s in samples:
            names = {st.name for st in s.stages}
            # every sampled batch's fetch is timed, an epoch's first one included (its step
            # begins at the fetch: no between_batches)
            assert "dataloader" in names, (step, s.rank, names)
            assert ("between_batches" in names) == (step % EPOCH_STEPS != 0), (step, names)
    rows = logged_rows(tmp_path)
    assert len(rows) == results[0]["reports_logged"] >= STEPS // INTERVAL - 2
    # the compact set (the default): the summary in every report; a stage's metrics only where
    # it is confirmed or flagged (the slow-forward test reads them)
    assert all(row["straggler/num_confirmed"] != "" for row in rows), rows
    check_loss_and_data_wait(tmp_path / "laggard")


def check_loss_and_data_wait(log_dir):
    """Every sample has the step's loss (laggard.torch.instrument under DDP, the callback's
    on_before_backward without it); a batch whose fetch was timed has it as host_data_wait_ms,
    the host time of its dataloader stage."""
    windows, _ = _core.read_run(str(log_dir))
    timed = 0
    for step, samples in windows:
        for s in samples:
            assert math.isfinite(s.values["loss"]), (step, s.rank, s.values)
            fetch = [st.ms for st in s.stages if st.name == "dataloader"]
            if fetch:
                timed += 1
                wait = s.resources["host_data_wait_ms"]
                assert 0.0 <= wait <= s.step_ms
            assert "host_gc_pause_ms" in s.resources, (step, s.resources)
    assert timed > 0


def stage_ms(windows, stages):
    """Each rank's median time in `stages` (a name, or a tuple of names: their sum in a sample)
    over the windows."""
    stages = (stages,) if isinstance(stages, str) else stages
    per_rank = {}
    for _, samples in windows:
        for s in samples:
            per_rank.setdefault(s.rank, []).append(
                sum(st.ms for st in s.stages if st.name in stages))
    return {r: sorted(v)[len(v) // 2] for r, v in per_rank.items()}


CASES = {"dataloader": 2, "backward": 0, "optimizer": 1}  # slow stage: the slow rank


@pytest.mark.parametrize("repetition", range(3))
@pytest.mark.parametrize("stage", sorted(CASES))
def test_lightning_ddp_names_the_slow_rank_and_stage(tmp_path, stage, repetition):
    rank = CASES[stage]
    results = fit(tmp_path, slow=stage, slow_rank=rank, slow_ms=SLOW_MS)
    check_common(tmp_path, results)
    live = confirmed_live(tmp_path / "laggard")
    offline, _, windows = confirmed_offline(tmp_path / "laggard")
    assert live == {(rank, stage)} and offline == {(rank, stage)}, (live, offline)
    assert results[0]["latest_metrics"]["straggler/confirmed"] == "%d:%s" % (rank, stage)
    if stage == "dataloader":
        # no collective inside Lightning's fetch: the slow loader's own time is its dataloader
        # stage, and the others' wait for it is in their communication stages (the gradient
        # all-reduce, or Lightning's broadcast before the next fetch, in between_batches)
        loading = stage_ms(windows, "dataloader")
        waiting = stage_ms(windows, ("communication", "between_batches"))
        for other in set(range(WORLD)) - {rank}:
            assert loading[rank] > loading[other] + 0.6 * SLOW_MS, loading
            assert waiting[other] > waiting[rank] + 0.6 * SLOW_MS, waiting


@pytest.mark.parametrize("repetition", range(3))
def test_lightning_ddp_names_the_rank_with_the_slow_forward(tmp_path, repetition):
    results = fit(tmp_path, slow="forward", slow_rank=1, slow_ms=SLOW_MS)
    check_common(tmp_path, results)
    live = confirmed_live(tmp_path / "laggard")
    offline, _, _ = confirmed_offline(tmp_path / "laggard")
    assert live == {(1, "forward")} and offline == {(1, "forward")}, (live, offline)
    rows = logged_rows(tmp_path)
    assert float(rows[-1]["straggler/num_confirmed"]) == 1.0
    assert float(rows[-1]["straggler/forward/top_rank"]) == 1.0
    assert results[0]["latest_metrics"]["straggler/confirmed"] == "1:forward"
    # the analysis rank served it for Prometheus, scraped over HTTP while training: the rank,
    # its stage and its host, and every rank's forward time
    confirmed, forward = prometheus_samples(results[0]["prometheus"])
    assert confirmed == [{"rank": "1", "stage": "forward", "host": socket.gethostname()}]
    assert forward["1"] > forward["0"] + 15 and forward["1"] > forward["2"] + 15
    assert all(r["prometheus"] is None for r in results[1:])  # no server on the other ranks


@pytest.mark.parametrize("repetition", range(3))
def test_lightning_ddp_healthy_fit_names_nobody(tmp_path, repetition):
    results = fit(tmp_path)
    check_common(tmp_path, results)
    assert confirmed_live(tmp_path / "laggard") == set()
    offline, _, _ = confirmed_offline(tmp_path / "laggard")
    assert offline == set()
    assert all(float(r["straggler/num_confirmed"]) == 0.0 for r in logged_rows(tmp_path))
    confirmed, forward = prometheus_samples(results[0]["prometheus"])
    assert confirmed == [] and sorted(forward) == ["0", "1", "2"]


def test_lightning_single_device_stages_from_hooks_and_a_failing_logger(tmp_path, caplog):
    """Without DDP every stage comes from Lightning's hooks; a logger that raises is a counted
    warning, and the fit goes on (in this process: one device, no torch.distributed)."""
    import torch
    import torch.nn as nn

    import lightning as L
    from lightning.pytorch.loggers import CSVLogger, Logger

    from laggard.lightning import LaggardCallback

    class BrokenLogger(Logger):
        name, version = "broken", 0

        def log_hyperparams(self, params, *args, **kwargs):
            pass

        def log_metrics(self, metrics, step=None):
            if any(k.startswith("straggler/") for k in metrics):
                raise OSError("tracker unreachable")

    class Model(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(8, 2)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    data = torch.utils.data.TensorDataset(torch.randn(96, 8), torch.randn(96, 2))
    callback = LaggardCallback(interval=1, log_dir=str(tmp_path / "laggard"),
                               close_timeout_s=10.0)
    trainer = L.Trainer(accelerator="cpu", devices=1, max_epochs=2, callbacks=[callback],
                        logger=[BrokenLogger(), CSVLogger(str(tmp_path), name="csv", version=0)],
                        enable_progress_bar=False, enable_model_summary=False,
                        enable_checkpointing=False)
    with caplog.at_level("WARNING", logger="laggard"):
        trainer.fit(Model(), torch.utils.data.DataLoader(data, batch_size=8))
    assert trainer.global_step == 24  # 2 epochs of 12 batches: training went on
    assert not callback._ddp and callback.instrumentation is None
    counters = callback.counters()
    assert counters["report_errors"] >= 1 and counters["reports_logged"] >= 1
    assert any("BrokenLogger" in r.getMessage() and "tracker unreachable" in r.getMessage()
               for r in caplog.records)
    assert logged_rows(tmp_path)  # the logger after the broken one still got the reports
    windows, stats = _core.read_run(str(tmp_path / "laggard"))
    stages = {}
    for step, samples in windows:
        stages[step] = {st.name for st in samples[0].stages}
    assert {"forward", "backward", "optimizer"} <= stages[0]
    # every batch's fetch is timed; an epoch's first batch's step begins at its fetch
    assert "dataloader" in stages[0] and "dataloader" in stages[12]
    assert "between_batches" not in stages[0] and "between_batches" not in stages[12]
    assert {"between_batches", "dataloader", "forward", "backward", "optimizer"} <= stages[5]
    assert sorted(stages) == list(range(24))
    check_loss_and_data_wait(tmp_path / "laggard")


def test_lightning_single_device_training_step_that_fetches_for_itself(tmp_path):
    """A training_step that takes the dataloader_iter fetches inside the batch: that fetch
    belongs to the batch's forward, and begins no step of its own (steps stay one per batch,
    every section balanced)."""
    import torch
    import torch.nn as nn

    import lightning as L

    from laggard.lightning import LaggardCallback

    class Model(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(8, 2)

        def training_step(self, dataloader_iter):
            x, y = next(dataloader_iter)[0]
            return nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    data = torch.utils.data.TensorDataset(torch.randn(96, 8), torch.randn(96, 2))
    callback = LaggardCallback(interval=1, log_dir=str(tmp_path / "laggard"),
                               close_timeout_s=10.0)
    trainer = L.Trainer(accelerator="cpu", devices=1, max_epochs=2, callbacks=[callback],
                        logger=False, enable_progress_bar=False, enable_model_summary=False,
                        enable_checkpointing=False)
    trainer.fit(Model(), torch.utils.data.DataLoader(data, batch_size=8))
    assert trainer.global_step == 24
    counters = callback.counters()
    assert counters["report_errors"] == 0 and counters["unbalanced"] == 0, counters
    windows, _ = _core.read_run(str(tmp_path / "laggard"))
    assert [step for step, _ in windows] == list(range(24))
    for step, samples in windows:
        names = {st.name for st in samples[0].stages}
        assert {"forward", "backward", "optimizer"} <= names and "dataloader" not in names, \
            (step, names)
