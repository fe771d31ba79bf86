"""The triage chain on real runs: 4 gloo ranks train a small DDP model on the CPU
(triage_worker.py) with one cause injected on one rank; `laggard diagnose --json` of the rank logs
must stop at the right layer and name the cause, in every repetition (docs/howto/triage.md). The live
side is checked too: the analysis rank's straggler/correctness/* metrics."""

import json
import subprocess

import pytest

torch = pytest.importorskip("torch")
if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("torch.distributed with gloo is needed", allow_module_level=True)

from ranks import run_worker  # noqa: E402
import testenv  # noqa: E402

pytestmark = pytest.mark.multiproc
WORLD, STEPS, INTERVAL = 4, 40, 2
REPEATS = 2


def diagnose(tmp_path, cause, rank=-1, **extra):
    program = testenv.cli()
    if program is None:
        pytest.skip("the laggard program is not built (build/tools/laggard; or set LAGGARD_CLI)")
    cfg = {"out": str(tmp_path), "log_dir": str(tmp_path / "logs"), "steps": STEPS,
           "interval": INTERVAL, "cause": cause, "rank": rank}
    cfg.update(extra)
    results = run_worker("triage_worker", WORLD, cfg, str(tmp_path), 120)
    out = subprocess.run([program, "diagnose", "--json", "-q", cfg["log_dir"]],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         universal_newlines=True, timeout=60)
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    return {layer["name"]: layer for layer in d["layers"]}, d["first_failing"], results


def stragglers(layers):
    return {(f["rank"], f["stage"]): f for f in layers["stragglers"]["findings"]
            if f["kind"] == "straggler"}


@pytest.mark.parametrize("repeat", range(REPEATS))
def test_a_healthy_run_passes_every_layer(tmp_path, repeat):
    layers, first, _ = diagnose(tmp_path, "healthy")
    assert first is None, json.dumps(layers, indent=1)
    assert layers["correctness"]["status"] == "pass"
    assert layers["stragglers"]["status"] == "pass"
    assert layers["regression"]["status"] == "not_measured"


@pytest.mark.parametrize("repeat", range(REPEATS))
def test_a_nan_loss_stops_the_chain_at_correctness_with_its_step_and_rank(tmp_path, repeat):
    layers, first, results = diagnose(tmp_path, "nan", rank=1, step=20)
    assert first == "correctness"
    findings = layers["correctness"]["findings"]
    first_finding = min(findings, key=lambda f: (f["step"], f["rank"]))
    assert (first_finding["kind"], first_finding["value"]) == ("non_finite", "loss")
    assert (first_finding["step"], first_finding["rank"]) == (20, 1), findings
    live = results[0]["latest_metrics"]  # rank 0 analyses: it saw it live
    assert live["straggler/correctness/first"] == "loss non_finite at step 20 on rank 1"
    assert live["straggler/correctness/findings"] > 0


@pytest.mark.parametrize("repeat", range(REPEATS))
def test_more_tokens_on_one_rank_is_its_reason(tmp_path, repeat):
    layers, first, _ = diagnose(tmp_path, "tokens", rank=2)
    found = stragglers(layers)
    assert found and {r for r, _ in found} == {2}, json.dumps(layers["stragglers"], indent=1)
    for f in found.values():
        assert f["reason"] == "more_work", f
        assert "48 tokens or samples per step against 32" in f["reasons"][0]["evidence"]
    # The resource readings (on by default) are measured; the extra work is the resources
    # layer's finding, on rank 2 only, and the chain stops there.
    kinds = {(f["kind"], f["rank"]) for f in layers["resources"]["findings"]}
    assert kinds == {("more_work", 2)}, layers["resources"]
    assert first == "resources"


@pytest.mark.parametrize("repeat", range(REPEATS))
def test_a_slow_dataloader_is_data_starvation(tmp_path, repeat):
    layers, first, _ = diagnose(tmp_path, "dataloader", rank=0, ms=30.0)
    found = stragglers(layers)
    assert set(found) == {(0, "dataloader")}, json.dumps(layers["stragglers"], indent=1)
    assert found[(0, "dataloader")]["reason"] == "data_starvation"
    # The timeline names the data wait first (rank 0 only), and the chain stops there.
    data = [f for f in layers["timeline"]["findings"] if f["kind"] == "data_wait"]
    assert data and data[0]["ranks"] == [0], layers["timeline"]
    assert first == "timeline"


def reason_of_the_only_straggler_rank(layers, rank):
    found = stragglers(layers)
    assert found and {r for r, _ in found} == {rank}, json.dumps(layers["stragglers"], indent=1)
    return {f["reason"] for f in found.values()}, found


@pytest.mark.parametrize("repeat", range(REPEATS))
def test_a_busy_thread_makes_its_rank_host_bound(tmp_path, repeat):
    layers, first, _ = diagnose(tmp_path, "busy", rank=1)
    reasons, found = reason_of_the_only_straggler_rank(layers, 1)
    assert reasons == {"host_bound"}, found
    kinds = {(f["kind"], f["rank"]) for f in layers["resources"]["findings"]}
    assert kinds == {("host_bound", 1)}, layers["resources"]
    assert first == "resources"


@pytest.mark.parametrize("repeat", range(REPEATS))
def test_gc_pauses_on_one_rank_are_its_reason(tmp_path, repeat):
    layers, first, _ = diagnose(tmp_path, "gc", rank=2)
    reasons, found = reason_of_the_only_straggler_rank(layers, 2)
    assert reasons == {"gc_pauses"}, found  # the first reason; the collections may also keep
    for f in found.values():                # its training thread at a core (host_bound)
        assert "Python garbage collection" in f["reasons"][0]["evidence"]
    kinds = {(f["kind"], f["rank"]) for f in layers["resources"]["findings"]}
    assert ("gc_pauses", 2) in kinds and all(r == 2 for _, r in kinds), layers["resources"]
    assert first == "resources"
