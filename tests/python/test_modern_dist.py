"""laggard.torch.instrument with torch 2.x's distributed training: FSDP2 (fully_shard), a
torch.compile'd model under DDP, and ranks that train in subgroups while laggard's side channel
spans every rank. Real gloo ranks on the CPU (modern_worker.py)."""

import os

import pytest

torch = pytest.importorskip("torch")
if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("torch.distributed with gloo is needed", allow_module_level=True)

import laggard  # noqa: E402
from laggard.launch import free_port  # noqa: E402
from ranks import join_ranks, rank_context  # noqa: E402

pytestmark = pytest.mark.multiproc
STEPS, INTERVAL = 24, 2


def _rank(rank, world, port, argv):
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
    code = 1
    try:
        import modern_worker

        code = modern_worker.main(argv)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        os._exit(code or 0)


def run(n, out, *argv):
    ctx = rank_context()
    port = free_port()
    argv = ["--out", str(out), "--steps", str(STEPS), "--interval", str(INTERVAL)] + list(argv)
    procs = [ctx.Process(target=_rank, args=(r, n, port, argv)) for r in range(n)]
    return join_ranks(procs, out, 120)


def confirmed(result):
    return {(f["rank"], f["stage"]) for f in result["latest_report"]["stragglers"]
            if f["confirmed"]}


def assert_side_channel_off_the_default_group(results):
    for r in results:
        used = {group for _, group in r["side_thread_collectives"]}
        assert used == {"other"}, r["side_thread_collectives"]
        names = {name for name, _ in r["side_thread_collectives"]}
        assert {"send", "recv"} <= names, names  # the gather tree's messages


def assert_every_sample_has(out, stages, ranks):
    windows, stats = laggard.read_run(str(out / "logs"))
    assert stats["malformed"] == 0
    assert [step for step, _ in windows] == list(range(0, STEPS, INTERVAL))
    for _, samples in windows:
        assert sorted(s.rank for s in samples) == list(range(ranks))
        for s in samples:
            assert {t.name for t in s.stages} == stages, (s.rank, [t.name for t in s.stages])


# -- FSDP2 ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def fsdp2_runs(tmp_path_factory):
    from torch.distributed.fsdp import fully_shard  # noqa: F401 — torch >= 2.6

    with_laggard = tmp_path_factory.mktemp("fsdp2")
    without = tmp_path_factory.mktemp("fsdp2-plain")
    return (run(2, with_laggard, "--mode", "fsdp2", "--slow-rank", "1"), with_laggard,
            run(2, without, "--mode", "fsdp2", "--slow-rank", "1", "--no-laggard"))


def test_fsdp2_stages_every_sampled_step(fsdp2_runs):
    results, out, _ = fsdp2_runs
    for r in results:
        assert r["stages"] == ["forward", "backward", "optimizer"]
        assert r["notes"] == ["backward: from the model output's gradient (FSDP2)"]
        assert r["counters"]["unbalanced"] == 0 and r["counters"]["report_errors"] == 0, r
    # the backward from the first sampled step on (FSDP2's sharded parameters never run an
    # anchor's gradient hook, so the output's gradient marks the start from the outset)
    assert_every_sample_has(out, {"forward", "backward", "optimizer"}, 2)
    assert_side_channel_off_the_default_group(results)


def test_fsdp2_losses_are_those_without_laggard(fsdp2_runs):
    results, _, plain = fsdp2_runs
    for r, p in zip(results, plain):
        assert r["losses"] == p["losses"]


# -- torch.compile ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def compile_run(tmp_path_factory):
    import modern_worker
    from torch._inductor import config as inductor_config

    # Compiled once here, before the ranks are forked: they find dynamo and inductor imported
    # and the compiled graphs in inductor's caches (seconds instead of a minute each).
    inductor_config.compile_threads = 1
    net = torch.compile(modern_worker.Net(0.0))
    net(torch.randn(8, 16)).sum().backward()
    out = tmp_path_factory.mktemp("compile")
    return run(2, out, "--mode", "compile", "--slow-rank", "1"), out


def test_compiled_model_under_ddp_names_the_slow_forward(compile_run):
    results, out = compile_run
    for r in results:
        assert r["stages"] == ["forward", "backward", "communication", "optimizer"]
        assert r["counters"]["unbalanced"] == 0 and r["counters"]["report_errors"] == 0, r
    assert_every_sample_has(out, {"forward", "backward", "communication", "optimizer"}, 2)
    assert confirmed(results[0]) == {(1, "forward")}
    waiting = {(f["rank"], f["stage"]) for f in results[0]["latest_report"]["waiting"]}
    assert (0, "communication") in waiting
    assert_side_channel_off_the_default_group(results)


# -- ranks training in subgroups ----------------------------------------------------------------

@pytest.fixture(scope="module")
def subgroup_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("subgroups")
    return run(4, out, "--mode", "subgroups", "--slow-rank", "3"), out


def test_subgroups_train_while_the_side_channel_runs(subgroup_run):
    results, out = subgroup_run
    for r in results:
        assert len(r["losses"]) == STEPS + 2  # every step trained (2 warm-up steps), no hang
        # the training's own collective on the default group, every step, on every rank
        assert len(r["default_group_metric"]) == STEPS + 2
    # the side channel's collectives (and those inside gather_object) never on the default
    # group, which the training thread uses at moments of its own
    assert_side_channel_off_the_default_group(results)
    assert_every_sample_has(out, {"forward", "backward", "communication", "optimizer"}, 4)


def test_subgroup_cohorts_compare_ranks_of_the_same_subgroup(subgroup_run):
    results, out = subgroup_run
    windows, _ = laggard.read_run(str(out / "logs"))
    assert {s.rank: s.cohort for s in windows[0][1]} == {0: "sub0", 1: "sub0", 2: "sub1",
                                                          3: "sub1"}
    assert confirmed(results[0]) == {(3, "forward")}
    waiting = {(f["rank"], f["stage"]) for f in results[0]["latest_report"]["waiting"]}
    assert (2, "communication") in waiting
