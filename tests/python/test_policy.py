"""Acting on a verdict (laggard.policy): real gloo ranks (processes) train with laggard's default
detector, one rank's forward about 2x the others' (20 ms more).

- policy="stop": every rank of a plain DDP loop, of a Lightning fit and of an HF Trainer run stops
  at the same step, the one the analysis rank agreed once the straggler held for 2 windows,
  before the run's end; the reason is on every rank's console and (Lightning, HF) in the
  trainer's own logs; the checkpoint written at the stop loads and is at that step; a raising
  on_straggler callback is counted (report_errors) and training goes on to the stop.
- A user callable as the policy and the on_straggler callbacks get the verdict on every rank:
  rank, host, stage, slowdown, cost, reason, onset and confirmed steps; nothing stops.
- fleet_store=: the analysis rank adds the stopped run to the fleet store when it closes.
- The events' rule (VerdictEvents) and the options' errors, without ranks.
"""

import csv
import json
import os

import pytest

from laggard.policy import CLEAR_VERDICTS, StopTraining, VerdictEvents, make_policy

torch = pytest.importorskip("torch")
if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("torch.distributed with gloo is needed", allow_module_level=True)

from ranks import run_worker  # noqa: E402

WORLD = 3
SLOW_RANK = 2
SLOW_MS = 20.0
INTERVAL = 5
STEPS = 200  # a cap: the stop comes long before (confirmed ~step 30, held 2 windows, lead 2 s)


def run(tmp_path, trainer, policy, steps=STEPS, **extra):
    cfg = dict(out=str(tmp_path), trainer=trainer, policy=policy, slow_rank=SLOW_RANK,
               slow_ms=SLOW_MS, interval=INTERVAL, steps=steps, stop_after_windows=2, **extra)
    results = run_worker("policy_worker", WORLD, cfg, str(tmp_path), timeout_s=240)
    consoles = [(tmp_path / ("stderr-%d.txt" % r)).read_text() for r in range(WORLD)]
    return results, "\n".join("--- rank %d stderr:\n%s" % (r, c) for r, c in enumerate(consoles)), \
        consoles


def check_verdict_fields(v, rank):
    assert v["rank"] == SLOW_RANK and v["stage"] == "forward", v
    assert v["host"], v
    assert 1.5 <= v["slowdown"] <= 2.6, v  # 40 ms against 20 ms
    assert 0.5 * SLOW_MS <= v["cost_ms"] <= 1.6 * SLOW_MS, v
    assert 0.1 <= v["cost_share"] <= 0.6, v
    assert v["reason"].startswith("its own compute"), v
    assert v["evidence"]["windows_flagged"] >= 1 and v["evidence"]["windows_held"] >= 1, v
    assert 0 <= v["onset_step"] <= v["confirmed_step"] <= v["step"], v
    assert v["onset_step"] % INTERVAL == 0 and v["confirmed_step"] % INTERVAL == 0, v
    assert v["self"] == (rank == SLOW_RANK), v


def check_stopped_together(results, shown):
    stops = {r["stop_step"] for r in results}
    assert len(stops) == 1 and None not in stops, (stops, shown)
    (stop,) = stops
    assert INTERVAL < stop < STEPS, shown  # stopped by the policy, not by the run's end
    for r in results:
        assert r["should_stop"], (r["rank"], shown)
        assert r["steps_run"] == stop, (r["rank"], r["steps_run"], stop, shown)
        assert r["stop_reason"].startswith("laggard stop policy: straggler rank %d " % SLOW_RANK)
        assert "in 'forward'" in r["stop_reason"], r["stop_reason"]
        ons = [e for name, e in r["events"] if name == "on_straggler" and e["stage"] == "forward"]
        assert len(ons) == 1, (r["rank"], r["events"])  # once, not per verdict
        check_verdict_fields(ons[0], r["rank"])
        assert ons[0]["step"] < stop, ons
        assert r["counters"]["verdicts_received" if r["rank"] else "verdicts_sent"] > 0
    return stop


@pytest.mark.multiproc
def test_stop_policy_stops_every_rank_of_a_ddp_loop_at_the_same_step(tmp_path):
    store = tmp_path / "fleet.db"
    results, shown, consoles = run(tmp_path, "torch", "stop", raising=True,
                                   log_dir=str(tmp_path / "run"), fleet_store=str(store))
    stop = check_stopped_together(results, shown)
    for r in results:
        assert r["stopped_by"] == "should_stop", r
        # The raising callback ran (once per new straggler) and was counted, never raised.
        assert r["raising"] >= 1, r
        assert r["counters"]["report_errors"] == r["raising"], (r["rank"], r["counters"], shown)
        assert "verdict callback" in consoles[r["rank"]], shown
    # Every rank says why it stops; the analysis rank also says when it decided.
    for c in consoles:
        assert "laggard: stopping before step %d: laggard stop policy: straggler rank %d" % (
            stop, SLOW_RANK) in c, shown
    assert "straggler stop: every rank stops before step %d" % stop in consoles[0], shown
    # The checkpoint written where it stopped is whole and at that step.
    ckpt = torch.load(str(tmp_path / "ckpt.pt"), weights_only=False)
    assert ckpt["step"] == stop
    assert set(ckpt["model"]) == {"l1.weight", "l1.bias", "l2.weight", "l2.bias"}
    # The rank logs are whole: every line parses, each rank's last sampled step is before stop.
    for rank in range(WORLD):
        lines = (tmp_path / "run" / ("rank-%d.jsonl" % rank)).read_text().splitlines()
        steps = [json.loads(line)["step"] for line in lines if '"step"' in line]
        assert steps and max(steps) < stop and max(steps) >= stop - INTERVAL, (rank, steps[-3:])
    # fleet_store=: the analysis rank added the run when it closed, naming the slow host.
    added = results[0]["fleet_run"]
    assert added is not None and added["added"], (results[0], shown)
    import laggard.fleet

    with laggard.fleet.open_store(str(store)) as s:
        runs = s.runs()
    assert len(runs) == 1, runs
    assert added["slow_hosts"], added
    for r in results[1:]:
        assert r["fleet_run"] is None, r  # only the analysis rank adds it


@pytest.mark.multiproc
def test_a_callable_policy_and_callbacks_get_the_verdict_on_every_rank(tmp_path):
    results, shown, consoles = run(tmp_path, "torch", "callable", steps=70)
    for r in results:
        assert not r["should_stop"] and r["stop_step"] is None, r
        assert r["steps_run"] == 70, r
        assert r["counters"]["report_errors"] == 0, (r["rank"], r["counters"], shown)
        by_policy = [e for name, e in r["events"] if name == "policy" and e["stage"] == "forward"]
        by_callback = [e for name, e in r["events"]
                       if name == "on_straggler" and e["stage"] == "forward"]
        assert len(by_policy) == 1 and by_policy[0]["event"] == "straggler", (r["rank"], r)
        assert by_callback == by_policy, r
        check_verdict_fields(by_policy[0], r["rank"])
    # warn (the default policy's part): the analysis rank's console line, nothing else stops
    assert "straggler confirmed: rank %d" % SLOW_RANK in consoles[0], shown
    assert all("stopping before step" not in c for c in consoles), shown


@pytest.mark.multiproc
def test_stop_policy_stops_a_lightning_fit_on_every_rank_at_the_same_step(tmp_path):
    results, shown, consoles = run(tmp_path, "lightning", "stop")
    stop = check_stopped_together(results, shown)
    import lightning.pytorch as pl  # noqa: F401

    for r in results:
        assert r["lightning_should_stop"] and r["stopped_step"] == stop, r
        assert r["stop_reason_cb"] == r["stop_reason"], r
        assert r["counters"]["report_errors"] == 0, (r["rank"], r["counters"], shown)
    # Lightning's own checkpoint at the end of the stopped fit: whole, at the stop step.
    path = results[0]["ckpt"]
    assert path and os.path.exists(path), results[0]
    ckpt = torch.load(path, weights_only=False)
    assert ckpt["global_step"] == stop, ckpt["global_step"]
    assert {"net.l1.weight", "net.l2.bias"} <= set(ckpt["state_dict"]), ckpt["state_dict"].keys()
    # The reason in Lightning's own logs (the CSV logger of the analysis rank).
    with open(tmp_path / "logs" / "fit" / "version_0" / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    stopped = [row for row in rows if row.get("laggard/stopped_step")]
    assert stopped and float(stopped[0]["laggard/stopped_step"]) == stop, rows[-3:]
    for c in consoles:
        assert "laggard: stopping before step %d" % stop in c, shown


@pytest.mark.multiproc
def test_stop_policy_stops_an_hf_trainer_run_on_every_rank_at_the_same_step(tmp_path):
    results, shown, consoles = run(tmp_path, "transformers", "stop")
    stop = check_stopped_together(results, shown)
    for r in results:
        assert r["stopped_step"] == stop, r
        assert r["counters"]["report_errors"] == 0, (r["rank"], r["counters"], shown)
        # The reason in the Trainer's own log history.
        logged = [h for h in r["log_history"] if "laggard_stop" in h]
        assert len(logged) == 1 and logged[0]["laggard_stopped_step"] == stop, r["log_history"]
        assert logged[0]["step"] == stop
    # The Trainer wrote its checkpoint at the stop step: whole, loads, at that step.
    ckpt_dir = tmp_path / "hf" / ("checkpoint-%d" % stop)
    assert ckpt_dir.is_dir(), sorted(os.listdir(tmp_path / "hf"))
    state = json.loads((ckpt_dir / "trainer_state.json").read_text())
    assert state["global_step"] == stop
    assert any("laggard_stop" in h for h in state["log_history"]), state["log_history"]
    weights = [p for p in os.listdir(ckpt_dir) if p.startswith("model.") or
               p.startswith("pytorch_model")]
    assert weights, os.listdir(ckpt_dir)
    if weights[0].endswith(".safetensors"):
        from safetensors.torch import load_file

        tensors = load_file(str(ckpt_dir / weights[0]))
    else:
        tensors = torch.load(str(ckpt_dir / weights[0]), weights_only=True)
    assert "net.l1.weight" in tensors, tensors.keys()


# -- without ranks ---------------------------------------------------------------------------

def _verdict(seq, confirmed, stop_step=None):
    return {"seq": seq, "step": 5 * seq, "rank": 0, "score": 1.0, "stop_step": stop_step,
            "confirmed": [dict(rank=r, host="h%d" % r, cohort="", stage=s, kind="compute",
                               ms=2.0, ref_ms=1.0, slowdown=2.0, cost_ms=1.0, cost_share=0.3,
                               windows_flagged=2, reason="its own compute", onset_step=0,
                               confirmed_step=5, windows_held=seq) for r, s in confirmed]}


def test_events_once_per_straggler_and_cleared_after_absent_verdicts():
    ev = VerdictEvents()
    assert [(v.event, v.rank) for v in ev.update(_verdict(1, [(2, "forward")]))] == \
        [("straggler", 2)]
    assert ev.update(_verdict(2, [(2, "forward")])) == []  # still confirmed: no new event
    assert ev.update(_verdict(3, [])) == []  # absent once: not cleared yet
    # Verdict 4 is never seen here (a rank looks at its sampled steps only): seq still counts.
    cleared = ev.update(_verdict(2 + CLEAR_VERDICTS, [(1, "backward")]))
    assert [(v.event, v.rank, v.stage) for v in cleared] == \
        [("straggler", 1, "backward"), ("clear", 2, "forward")]
    assert cleared[1].step == 5 * (2 + CLEAR_VERDICTS) and cleared[1].slowdown == 2.0


def test_policy_option_errors_and_the_disabled_analyzer():
    import laggard

    with pytest.raises(ValueError, match="policy must be"):
        laggard.Analyzer(enabled=False, policy="exit")
    with pytest.raises(ValueError, match="stop_after_windows"):
        laggard.Analyzer(enabled=False, policy="stop", stop_after_windows=0)
    an = laggard.Analyzer(enabled=False, policy="stop")
    an.begin_step(0)
    an.end_step()
    assert not an.should_stop and an.stop_step is None
    an.check_stop()  # nothing to raise
    assert isinstance(make_policy(None), type(make_policy("warn")))
    assert StopTraining("why", 7).step == 7
