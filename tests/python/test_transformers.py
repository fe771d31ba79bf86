"""laggard.transformers.LaggardCallback in a real Hugging Face Trainer run, as
docs/howto/huggingface.md has a user set it up: laggard's default settings (log_dir only, for the
offline check) and default TrainingArguments but for what a tiny run needs. A tiny GPT-2 built
from a config trains on the CPU, alone and as 3 DDP ranks over gloo (real processes, with the
environment torchrun gives).

With 3 ranks, one rank made slow in one stage — its batch loading, forward, backward or
optimizer step — is named in that stage, and nobody else is, live and offline, in each of 3
repetitions; so is a slow loader with logging_steps equal to laggard's interval (every sampled
step then ends in a logging step); a healthy run names nobody. The Trainer gathers each
update's label-token count across ranks inside its batch fetch (average_tokens_across_devices,
on by default): the others' wait there for a slow loader is their `allgather`, not their
`dataloader`.
"""

import json
import math
import os
import sys

import pytest

from laggard import _core, sinks
from laggard.launch import free_port
from ranks import join_ranks, rank_context

# 15 windows: under a loaded machine's stalls (steps 2-7x as long on every rank for a few
# windows), 10 were not always enough to confirm a 25 ms slower backward
STEPS = 150
EPOCH_STEPS = 60  # updates in an epoch: the runs cross two epochs' ends
INTERVAL = 10  # laggard's default
WORLD = 3
SLOW_MS = 25.0
STAGES = {"dataloader", "allgather", "forward", "backward", "communication", "optimizer"}


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


def train(tmp_path, world, slow="none", slow_rank=-1, slow_ms=0.0, logging_steps=None,
          steps=STEPS):
    import laggard.transformers  # noqa: F401

    cfg = {"out": str(tmp_path), "log_dir": str(tmp_path / "laggard"), "steps": steps,
           "epoch_steps": EPOCH_STEPS, "logging_steps": logging_steps, "slow_rank": slow_rank,
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
    return {(f["rank"], f["stage"]) for f in det.confirmed()}, stages, windows


def confirmed_live(log_dir):
    found = set()
    for line in (log_dir / "reports.jsonl").read_text().splitlines():
        for item in filter(None, json.loads(line).get("straggler/confirmed", "").split(",")):
            rank, stage = item.split(":", 1)
            found.add((int(rank), stage))
    return found


def check_common(tmp_path, results, world, steps=STEPS):
    assert [r["process_index"] for r in results] == list(range(world))
    assert all(r["world"] == world and r["global_step"] == steps for r in results)
    assert all(r["counters"]["report_errors"] == 0 for r in results), results
    # the defaults the user gets: the Trainer's all-gather in the fetch is on
    assert all(r["defaults"]["average_tokens_across_devices"] for r in results)
    # the Trainer's fetch was found and timed, and put back after training
    assert all(r["fetch_timed"] and not r["patched_after"] for r in results)
    _, stages, windows = offline(tmp_path / "laggard", world)
    want = STAGES if world > 1 else STAGES - {"allgather", "communication"}
    # under DDP the backward's all-reduce wait is its own stage (the Trainer's DDP wrapper found)
    assert stages == want, stages
    assert [step for step, _ in windows] == list(range(0, steps, INTERVAL))
    for step, samples in windows:
        for s in samples:
            names = {st.name for st in s.stages}
            # every sampled update's fetch is timed, an epoch's first one included
            assert names == want, (step, s.rank, names)
            # every sample has the step's loss (laggard.torch.instrument, from the backward's
            # call) and the resource readings of the host
            assert math.isfinite(s.values["loss"]), (step, s.rank, s.values)
            assert "host_gc_pause_ms" in s.resources, (step, s.rank, s.resources)
    # the metrics joined the Trainer's own log (state.log_history): at least its closing
    # summary row (train_loss), and the callbacks after laggard's (report_to's trackers, when
    # it comes first) got them
    logged = [h for h in results[0]["log_history"] if "straggler/ranks" in h]
    assert len(logged) == results[0]["reports_logged"] >= 1
    for h in logged:
        assert ("loss" in h or "train_loss" in h) and h["straggler/ranks"] == float(world), h
    seen = [h for h in results[0]["seen_logs"] if "straggler/ranks" in h]
    assert len(seen) == len(logged)
    return logged, windows


def stage_ms(windows, stage):
    """Each rank's median time in `stage` over the windows."""
    per_rank = {}
    for _, samples in windows:
        for s in samples:
            per_rank.setdefault(s.rank, []).extend(st.ms for st in s.stages if st.name == stage)
    return {r: sorted(v)[len(v) // 2] for r, v in per_rank.items()}


def test_transformers_trainer_single_process(tmp_path):
    results = train(tmp_path, 1, steps=50)
    logged, _ = check_common(tmp_path, results, 1, steps=50)
    # the compact set (the default): one rank flags no stage, so the log has the summary alone
    assert "straggler/num_confirmed" in logged[-1] and "straggler/ranks" in logged[-1]
    assert not [k for k in logged[-1] if sinks._stage_of(k)], logged[-1]
    assert confirmed_live(tmp_path / "laggard") == set()


CASES = {
    # (slow stage, slow rank, logging_steps)
    "dataloader": ("dataloader", 1, None),
    "dataloader-logging-at-interval": ("dataloader", 2, INTERVAL),
    "forward": ("forward", 2, None),
    "backward": ("backward", 1, None),
    "optimizer": ("optimizer", 0, None),
}


@pytest.mark.multiproc
@pytest.mark.parametrize("repetition", range(3))
@pytest.mark.parametrize("case", sorted(CASES))
def test_transformers_trainer_ddp_names_the_slow_rank_and_stage(tmp_path, case, repetition):
    stage, rank, logging_steps = CASES[case]
    results = train(tmp_path, WORLD, slow=stage, slow_rank=rank, slow_ms=SLOW_MS,
                    logging_steps=logging_steps)
    logged, windows = check_common(tmp_path, results, WORLD)
    live = confirmed_live(tmp_path / "laggard")
    found, _, _ = offline(tmp_path / "laggard", WORLD)
    assert live == {(rank, stage)} and found == {(rank, stage)}, (live, found)
    assert results[0]["latest_metrics"]["straggler/confirmed"] == "%d:%s" % (rank, stage)
    if stage == "dataloader":
        # the others waited for the slow loader in the Trainer's all-gather, inside the fetch:
        # there, not in their dataloader time
        loading, waiting = stage_ms(windows, "dataloader"), stage_ms(windows, "allgather")
        for other in set(range(WORLD)) - {rank}:
            assert loading[rank] > loading[other] + 0.6 * SLOW_MS, loading
            assert waiting[other] > waiting[rank] + 0.6 * SLOW_MS, waiting
    if logging_steps is not None:
        # every sampled update ended in a logging step; the metrics joined those logs too
        assert len(logged) >= 3 and "straggler/dataloader/top_rank" in logged[-1]
        assert logged[-1]["straggler/dataloader/top_rank"] == float(rank)


@pytest.mark.multiproc
@pytest.mark.parametrize("repetition", range(3))
def test_transformers_trainer_ddp_healthy_run_names_nobody(tmp_path, repetition):
    results = train(tmp_path, WORLD)
    check_common(tmp_path, results, WORLD)
    assert confirmed_live(tmp_path / "laggard") == set()
    assert offline(tmp_path / "laggard", WORLD)[0] == set()


def test_transformers_callback_outside_a_trainer_times_steps_without_the_fetch(tmp_path, caplog):
    """Called by something that is not a transformers.Trainer (no Trainer up the call stack):
    the fetch is not timed, an INFO line says so, and steps begin at on_step_begin."""
    from transformers import TrainerControl, TrainerState, TrainingArguments

    from laggard import _log
    from laggard.transformers import LaggardCallback

    _log._once_seen.discard("transformers-fetch")
    args = TrainingArguments(output_dir=str(tmp_path / "out"), use_cpu=True)
    state, control = TrainerState(), TrainerControl()
    callback = LaggardCallback(interval=1, log_dir=str(tmp_path / "laggard"),
                               close_timeout_s=10.0)
    with caplog.at_level("INFO", logger="laggard"):
        callback.on_train_begin(args, state, control)
        for step in range(4):
            state.global_step = step
            callback.on_step_begin(args, state, control)
            callback.on_pre_optimizer_step(args, state, control)
            callback.on_optimizer_step(args, state, control)
            state.global_step = step + 1
            callback.on_step_end(args, state, control)
        callback.on_train_end(args, state, control)
    assert not callback.fetch_timed
    assert any("batch fetch is not timed" in r.getMessage() for r in caplog.records)
    counters = callback.last_analyzer.counters()
    assert counters["report_errors"] == 0 and counters["unbalanced"] == 0, counters
    windows, _ = _core.read_run(str(tmp_path / "laggard"))
    assert [step for step, _ in windows] == [0, 1, 2, 3]
    assert all({st.name for st in samples[0].stages} == {"optimizer"} for _, samples in windows)
