"""Healthy real runs on a loaded machine name nobody: 3 gloo ranks (real processes) train with
laggard's default settings — a DDP loop (real_run_worker.py: sections by hand and
laggard.torch.instrument, alternately), a PyTorch Lightning fit (lightning_worker.py) and a Hugging
Face Trainer run (transformers_worker.py) — while two busy processes started here spin on the
machine's cores. No rank has a fault, so no (rank, stage) may be confirmed: not in any live report
(reports.jsonl, what the analysis rank's sinks got) and not in any window of laggard's offline
analysis of the rank logs (a Detector with the default options, as `laggard analyze` does).

Each framework runs LAGGARD_LOADED_REPS times (10 by default; every repetition must pass). A run
is 6 windows at laggard's default interval (10), a few seconds (LAGGARD_LOADED_STEPS: another
number of steps). On failure the message holds what a detector change must be judged against:
the confirmed findings with their figures (slowdown, cost, share of the step, evidence), the
live report that carried each verdict, each rank's median and largest stage times, and the load
average.

Marked `long` (and `multiproc`): `-m "not long"` leaves it out.
"""

import json
import os
import statistics
import sys

import pytest

torch = pytest.importorskip("torch")
if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("torch.distributed with gloo is needed", allow_module_level=True)

from laggard import _core  # noqa: E402
from laggard.launch import free_port  # noqa: E402
from ranks import cpu_burners, join_ranks, rank_context  # noqa: E402

pytestmark = [pytest.mark.multiproc, pytest.mark.long]

REPS = int(os.environ.get("LAGGARD_LOADED_REPS", "10"))
WORLD = 3
INTERVAL = 10  # laggard's default
# 6 windows by default; LAGGARD_LOADED_STEPS sets another length (longer runs give a false
# confirmation more windows to build up in)
STEPS = int(os.environ.get("LAGGARD_LOADED_STEPS", "60"))
EPOCH_STEPS = 40  # the Lightning and Trainer runs cross an epoch's end
BURNERS = 2  # busy processes: one per core of the 2-core machine the tests run on

FRAMEWORKS = ["ddp", "lightning", "transformers"]


def _available(framework):
    module = {"lightning": "lightning", "transformers": "transformers"}.get(framework)
    if module is None:
        return True
    try:
        __import__(module)
    except ImportError:
        return False
    return True


@pytest.fixture(scope="module")
def burner():
    """BURNERS processes spinning on the CPU for the module's runs, killed at its end."""
    with cpu_burners(BURNERS) as procs:
        yield procs


def _child(rank, port, framework, cfg):
    # The environment a launcher gives (torchrun's; with LOCAL_RANK set, Lightning takes the
    # processes as created for it and starts none itself).
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(WORLD), LOCAL_RANK=str(rank),
                      LOCAL_WORLD_SIZE=str(WORLD), NODE_RANK="0", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port), OMP_NUM_THREADS="1", PL_DISABLE_FORK="1",
                      TOKENIZERS_PARALLELISM="false")
    code = 1
    try:
        if framework == "ddp":
            import real_run_worker

            code = real_run_worker.run(rank, WORLD, port, cfg)
        elif framework == "lightning":
            import lightning_worker

            code = lightning_worker.run(rank, WORLD, cfg)
        else:
            import transformers_worker

            code = transformers_worker.run(rank, WORLD, cfg)
    except BaseException:
        import traceback

        traceback.print_exc()  # the test's captured output shows why the rank failed
        sys.stderr.flush()
    finally:
        os._exit(code or 0)


def run_healthy(tmp_path, framework, rep):
    cfg = {"out": str(tmp_path), "log_dir": str(tmp_path / "laggard"), "steps": STEPS,
           "interval": INTERVAL, "epoch_steps": EPOCH_STEPS, "slow": "none", "slow_rank": -1,
           "slow_ms": 0.0, "mode": ("sections", "instrument")[rep % 2]}
    if framework == "lightning":
        import laggard.lightning  # noqa: F401
    elif framework == "transformers":
        import laggard.transformers  # noqa: F401
    ctx = rank_context()
    port = free_port()
    procs = [ctx.Process(target=_child, args=(r, port, framework, cfg)) for r in range(WORLD)]
    return join_ranks(procs, str(tmp_path), timeout_s=240)


def live_verdicts(log_dir):
    """(rank, stage) -> the first live report (reports.jsonl) that confirmed it; and the count
    of reports."""
    first = {}
    lines = (log_dir / "reports.jsonl").read_text().splitlines()
    for line in lines:
        report = json.loads(line)
        for item in filter(None, report.get("straggler/confirmed", "").split(",")):
            rank, stage = item.split(":", 1)
            first.setdefault((int(rank), stage), report)
    return first, len(lines)


def offline_verdicts(log_dir):
    """The findings confirmed by laggard's offline analysis of the rank logs (default options) at
    the end; (rank, stage) -> the step of the window that first confirmed it and its finding
    there (a verdict's figures at the end can be those of windows long after the ones that made
    it); and the windows."""
    windows, stats = _core.read_run(str(log_dir))
    assert stats["files"] == WORLD and stats["malformed"] == 0, stats
    det = _core.Detector(_core.DetectorOptions())
    first = {}
    for step, samples in windows:
        report = det.observe(samples, step)
        for f in report["stragglers"]:
            if f["confirmed"]:
                first.setdefault((f["rank"], f["stage"]), (step, f))
    return det.confirmed(), first, windows


def stage_table(windows):
    """Per rank: the median and largest ms of each stage over the windows, step_ms, and
    untimed (step_ms minus the sum of the stages), as text."""
    per_rank = {}
    for _, samples in windows:
        for s in samples:
            row = per_rank.setdefault(s.rank, {})
            total = 0.0
            for t in s.stages:
                row.setdefault(t.name, []).append(t.ms)
                total += t.ms
            row.setdefault("step_ms", []).append(s.step_ms)
            row.setdefault("(untimed)", []).append(s.step_ms - total)
    names = []
    for row in per_rank.values():
        names += [n for n in row if n not in names]
    lines = ["rank  " + "  ".join("%15s" % n[:15] for n in names) + "   (median [max], ms)"]
    for rank in sorted(per_rank):
        row = per_rank[rank]
        lines.append("%4d  " % rank + "  ".join(
            "%7.1f [%5.1f]" % (statistics.median(row[n]), max(row[n])) if n in row
            else "%15s" % "-" for n in names))
    return "\n".join(lines)


def _figures(f):
    return "%d:%s %.2fx (%.2f vs %.2f ms), cost %.2f ms = %.2f%% of the step, flagged in %d " \
           "windows, evidence %.1f" % (f["rank"], f["stage"], f["slowdown"], f["ms"],
                                        f["ref_ms"], f["cost_ms"], 100.0 * f["cost_share"],
                                        f["windows_flagged"], f["evidence"])


def verdict_figures(live, offline, first):
    """Each verdict as text: the offline finding's figures at the end and in the window that
    first confirmed it, the live report's for its stage."""
    lines = ["offline at the end " + _figures(f) for f in offline]
    for (rank, stage), (step, f) in sorted(first.items()):
        lines.append("offline first confirmed at step %d: %s" % (step, _figures(f)))
    for (rank, stage), report in sorted(live.items()):
        keys = {k: v for k, v in report.items()
                if k.startswith("straggler/%s/" % stage) or k in (
                    "straggler/step", "straggler/confirmed", "straggler/verdicts",
                    "straggler/step_ms")}
        lines.append("live %d:%s first in report %s" % (rank, stage, json.dumps(keys)))
    return "\n".join(lines)


@pytest.mark.parametrize("rep", range(REPS))
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_healthy_run_under_cpu_load_names_nobody(tmp_path, burner, framework, rep):
    if not _available(framework):
        pytest.skip("%s is not installed" % framework)
    assert all(p.poll() is None for p in burner), "a burner process ended"
    load_before = os.getloadavg()
    results = run_healthy(tmp_path, framework, rep)
    load = os.getloadavg()
    log_dir = tmp_path / "laggard"
    live, reports = live_verdicts(log_dir)
    offline, first, windows = offline_verdicts(log_dir)
    assert [step for step, _ in windows] == list(range(0, STEPS, INTERVAL))
    assert reports >= STEPS // INTERVAL - 2, reports
    for r in results:
        counters = r["counters"]
        assert counters.get("unbalanced", 0) == 0 and counters.get("report_errors", 0) == 0, \
            counters
    what = framework + (" " + ("sections", "instrument")[rep % 2] if framework == "ddp" else "")
    why = "%s rep %d, load %.1f -> %.1f: live %s, offline %s\n%s\n%s" % (
        what, rep, load_before[0], load[0], sorted(live), sorted(first),
        verdict_figures(live, offline, first), stage_table(windows))
    print("\n" + why)
    # no verdict at any time: not in a live report, not in any window of the offline analysis
    assert not live and not first and not offline, why
