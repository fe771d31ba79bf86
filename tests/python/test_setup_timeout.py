"""The side channel's setup never holds training: real gloo ranks (setup_timeout_worker.py) where
some ranks create their Analyzer late or never (docs/reference/failure-contract.md, "The side channel's
setup").

Each rank measures its Analyzer's construction, its training loop and its close; the bounds
below are what "never waits" means on a loaded 2-core machine: the constructor returns in well
under a second, close() in a few seconds (never close_timeout_s = 30 s, never the setup
timeout), and no rank's laggard time exceeds its own training by more than those.
"""

import inspect
import os

import pytest

torch = pytest.importorskip("torch")
if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("torch.distributed with gloo is needed", allow_module_level=True)

import laggard  # noqa: E402
from ranks import run_worker  # noqa: E402
import testenv  # noqa: E402

pytestmark = pytest.mark.multiproc

CREATE_MAX_S = 1.0  # the constructor returns at once (the setup runs on a thread)
CLOSE_MAX_S = 3.0  # close() never waits for ranks that did not join
STEP_MS = 50


def run(tmp_path, world, create, setup_timeout_s, steps, **extra):
    cfg = {"out": str(tmp_path), "create": {str(r): d for r, d in create.items()},
           "setup_timeout_s": setup_timeout_s, "steps": steps, "step_ms": STEP_MS}
    cfg.update(extra)
    return run_worker("setup_timeout_worker", world, cfg, str(tmp_path), timeout_s=120)


def check_user_groups(results, world):
    """The user's own new_group after laggard's (made on some ranks only) pairs correctly."""
    for res in results:
        assert res["sum_everyone"] == world * (world + 1) / 2, res
        if res["rank"] in (0, 1):
            assert res["sum_pair"] == 3.0, res


def check_never_waited(res, steps):
    assert res["create_s"] < CREATE_MAX_S, res
    assert res["close_s"] < CLOSE_MAX_S, res
    # The training loop itself: its sleeps plus scheduling noise, nothing laggard waited for.
    assert res["train_s"] < steps * 2 * STEP_MS / 1000.0 * 1.5 + 1.0, res
    assert res["laggard_s"] < res["train_s"] + CREATE_MAX_S + CLOSE_MAX_S, res


def setup_warnings(res):
    """The setup's warnings (each names the ranks missing and says what this rank does)."""
    return [w for w in res["warnings"] if "side channel setup:" in w]


@pytest.mark.parametrize("world", [2, 4])
def test_only_rank_0_creates_an_analyzer_and_nobody_waits(tmp_path, world):
    # The timeout (2 s) passes while rank 0 trains (3 s): its one warning names the others.
    steps = 30
    results = run(tmp_path, world, {0: 0.0}, setup_timeout_s=2.0, steps=steps)
    r0 = results[0]
    check_never_waited(r0, steps)
    missing = "rank 1 " if world == 2 else "ranks 1-3 "
    warned = setup_warnings(r0)
    assert len(warned) == 1 and missing + "did not create an Analyzer" in warned[0], \
        r0["warnings"]
    assert "setup_timeout_s = 2 s" in warned[0]
    assert r0["setup_state"] == "timed out" and r0["missing_ranks"] == list(range(1, world))
    assert 2.0 <= r0["setup_s"] < 2.0 + 1.5, r0  # decided at the timeout, not later
    c = r0["counters"]
    assert c["side_channel_setup_failed"] == 1 and c["side_channel_missing_ranks"] == world - 1
    assert c["side_channel_broken"] and not c["side_channel_joining"]
    # Every sample is accounted for: the rank's own go into its windows (the analysis rank).
    assert c["samples_emitted"] == steps and c["queue_pushed"] == steps
    assert c["gather_sent"] + c["gather_dropped"] == c["queue_pushed"]
    for res in results[1:]:
        assert res["warnings"] == [], res
    check_user_groups(results, world)


def test_a_rank_that_closes_before_the_others_join_does_not_wait_for_the_timeout(tmp_path):
    # Only rank 0 creates one and closes after ~1 s of training, long before its 20 s timeout:
    # close() gives the setup up at once (warning, naming the ranks), instead of waiting.
    steps = 10
    results = run(tmp_path, 4, {0: 0.0}, setup_timeout_s=20.0, steps=steps)
    r0 = results[0]
    check_never_waited(r0, steps)
    warned = setup_warnings(r0)
    assert len(warned) == 1 and "closed its Analyzer before ranks 1-3 created one" in warned[0], \
        r0["warnings"]
    assert r0["setup_state"] == "closed" and r0["missing_ranks"] == [1, 2, 3]
    assert r0["counters"]["side_channel_setup_failed"] == 1
    check_user_groups(results, 4)


def test_a_rank_that_creates_it_after_the_timeout_runs_alone_and_nobody_waits(tmp_path):
    # Rank 1 creates its Analyzer 4 s after rank 0, whose setup times out after 1.5 s: rank 0
    # goes on alone at once; rank 1 learns it from the store when it arrives.
    steps = 30
    results = run(tmp_path, 2, {0: 0.0, 1: 4.0}, setup_timeout_s=1.5, steps=steps)
    r0, r1 = results
    for res in results:
        check_never_waited(res, steps)
        assert res["setup_state"] == "timed out" and res["missing_ranks"] == [1], res
        assert res["counters"]["side_channel_setup_failed"] == 1
    assert 1.5 <= r0["setup_s"] < 1.5 + 1.5, r0
    assert r1["setup_s"] < 1.0, r1  # it learns at once, it does not wait a timeout of its own
    (w0,) = setup_warnings(r0)
    assert "rank 1 did not create an Analyzer within setup_timeout_s" in w0
    (w1,) = setup_warnings(r1)
    assert "created its Analyzer after the side channel's setup had timed out" in w1
    assert "rank 1 had not joined" in w1
    c1 = r1["counters"]  # its samples: none sent, every one counted
    assert c1["queue_pushed"] == steps and c1["gather_sent"] + c1["gather_dropped"] == steps
    check_user_groups(results, 2)


def test_a_rank_that_creates_it_late_within_the_timeout_joins_the_live_analysis(tmp_path):
    # Rank 1 creates its Analyzer 2 s after rank 0 (timeout 10 s): the side channel is set up
    # when it arrives, and its samples reach the analysis rank, which analyses them.
    steps = 40
    results = run(tmp_path, 2, {0: 0.0, 1: 2.0}, setup_timeout_s=10.0, steps=steps,
                  wait_for_peers_s=15.0)
    r0, r1 = results
    for res in results:
        assert res["create_s"] < CREATE_MAX_S and res["close_s"] < CLOSE_MAX_S, res
        assert res["setup_state"] == "joined" and res["missing_ranks"] == [], res
        assert not setup_warnings(res) and res["counters"]["side_channel_setup_failed"] == 0
        assert not res["counters"]["side_channel_broken"], res
    assert 1.5 < r0["setup_s"] < 2.0 + 3.0, r0  # joined when rank 1 arrived
    assert r1["setup_s"] < 1.5, r1
    c0, c1 = r0["counters"], r1["counters"]
    assert c1["gather_sent"] == steps and c1["gather_dropped"] == 0, c1
    assert c0["samples_received"] == steps, c0
    # Every window holds both ranks' samples (rank 1's arrive ~2 s after rank 0's, within the
    # 5 s window_timeout_s), and the reports are of both ranks.
    assert c0["windows"] == steps and c0["incomplete_windows"] == 0, c0
    assert c0["reports"] > 0 and r0["report"]["ranks_seen"] == 2, r0["report"]
    check_user_groups(results, 2)


def test_setup_timeout_default_and_validation():
    default = inspect.signature(laggard.Analyzer).parameters["setup_timeout_s"].default
    assert default == 30.0
    with open(os.path.join(testenv.ROOT, "docs", "reference", "python.md")) as f:
        assert "`setup_timeout_s=30`" in f.read()
    with open(os.path.join(testenv.ROOT, "docs", "reference", "failure-contract.md")) as f:
        assert "`setup_timeout_s` (default 30 s)" in f.read()
    for bad in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="setup_timeout_s"):
            laggard.Analyzer(setup_timeout_s=bad)
    with pytest.raises(ValueError, match="setup_timeout_s"):
        laggard.Analyzer(setup_timeout_s="30")
