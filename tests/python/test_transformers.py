"""laggard.transformers.LaggardCallback in a real Hugging Face Trainer run: a tiny GPT-2 built
from a config trains on the CPU, alone and as 3 DDP ranks over gloo (real processes, with the
environment torchrun gives). The straggler/* metrics join the Trainer's log; with 3 ranks, the
rank made slow in its forward, or in its backward, is named in that stage, and a healthy run
names nobody.
"""

import json
import math
import os
import sys

import pytest

from laggard import _core
from laggard.launch import free_port
from ranks import join_ranks, rank_context

STEPS = 30
INTERVAL = 2


def _child(rank, world, port, cfg):
    if world > 1:
        os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                          LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=str(port))
    os.environ.update(OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    import transformers_worker

    code = 1
    try:
        code = transformers_worker.run(rank, world, cfg)
    except BaseException:
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
    finally:
        os._exit(code or 0)


def train(tmp_path, world, slow_rank=-1, slow_ms=0.0, slow="forward"):
    import laggard.transformers  # noqa: F401

    cfg = {"out": str(tmp_path), "log_dir": str(tmp_path / "laggard"), "steps": STEPS,
           "interval": INTERVAL, "logging_steps": 5, "slow_rank": slow_rank,
           "slow_ms": slow_ms, "slow": slow}
    ctx = rank_context()
    port = free_port()
    procs = [ctx.Process(target=_child, args=(r, world, port, cfg)) for r in range(world)]
    return join_ranks(procs, str(tmp_path), timeout_s=180)


def offline(log_dir, world):
    windows, stats = _core.read_run(str(log_dir))
    assert stats["files"] == world and stats["malformed"] == 0, stats
    det = _core.Detector(_core.DetectorOptions())
    stages = set()
    for step, samples in windows:
        det.observe(samples, step)
        for s in samples:
            stages.update(st.name for st in s.stages)
    return {(f["rank"], f["stage"]) for f in det.confirmed()}, stages, len(windows)


def confirmed_live(log_dir):
    found = set()
    for line in (log_dir / "reports.jsonl").read_text().splitlines():
        for item in filter(None, json.loads(line).get("straggler/confirmed", "").split(",")):
            rank, stage = item.split(":", 1)
            found.add((int(rank), stage))
    return found


def check_common(tmp_path, results, world):
    assert [r["process_index"] for r in results] == list(range(world))
    assert all(r["world"] == world and r["global_step"] == STEPS for r in results)
    assert all(r["counters"]["report_errors"] == 0 for r in results), results
    _, stages, windows = offline(tmp_path / "laggard", world)
    assert {"dataloader", "forward", "backward", "optimizer"} <= stages, stages
    # under DDP the backward's all-reduce wait is its own stage (the Trainer's DDP wrapper found)
    assert ("communication" in stages) == (world > 1), stages
    assert windows == STEPS // INTERVAL
    # every sample has the step's loss (laggard.torch.instrument, from the backward's call) and
    # the resource readings of the host
    for step, samples in _core.read_run(str(tmp_path / "laggard"))[0]:
        for s in samples:
            assert math.isfinite(s.values["loss"]), (step, s.rank, s.values)
            assert "host_gc_pause_ms" in s.resources, (step, s.rank, s.resources)
    # the metrics joined the Trainer's own log (state.log_history), beside its loss
    logged = [h for h in results[0]["log_history"] if "straggler/ranks" in h]
    assert len(logged) == results[0]["reports_logged"] >= 2
    # (the Trainer's closing summary row says train_loss: a report that arrived after the last
    # logging step joins that row)
    for h in logged:
        assert ("loss" in h or "train_loss" in h) and h["straggler/ranks"] == float(world), h
    # and the callbacks after laggard's (report_to's trackers, when it comes first) got them
    seen = [h for h in results[0]["seen_logs"] if "straggler/ranks" in h]
    assert len(seen) == len(logged)
    return logged


def test_transformers_trainer_single_process(tmp_path):
    results = train(tmp_path, 1)
    logged = check_common(tmp_path, results, 1)
    assert "straggler/forward/local_ms" in logged[-1]
    assert confirmed_live(tmp_path / "laggard") == set()


@pytest.mark.multiproc
def test_transformers_trainer_ddp_names_the_rank_with_the_slow_forward(tmp_path):
    results = train(tmp_path, 3, slow_rank=2, slow_ms=25.0)
    logged = check_common(tmp_path, results, 3)
    assert confirmed_live(tmp_path / "laggard") == {(2, "forward")}
    assert offline(tmp_path / "laggard", 3)[0] == {(2, "forward")}
    assert logged[-1]["straggler/forward/top_rank"] == 2.0
    assert results[0]["latest_metrics"]["straggler/confirmed"] == "2:forward"


@pytest.mark.multiproc
def test_transformers_trainer_ddp_names_the_rank_with_the_slow_backward(tmp_path):
    # the others wait for it in the all-reduce: their wait is communication, not backward
    train(tmp_path, 3, slow_rank=1, slow_ms=25.0, slow="backward")
    assert confirmed_live(tmp_path / "laggard") == {(1, "backward")}
    assert offline(tmp_path / "laggard", 3)[0] == {(1, "backward")}


@pytest.mark.multiproc
def test_transformers_trainer_ddp_healthy_run_names_nobody(tmp_path):
    results = train(tmp_path, 3)
    check_common(tmp_path, results, 3)
    assert confirmed_live(tmp_path / "laggard") == set()
    assert offline(tmp_path / "laggard", 3)[0] == set()
