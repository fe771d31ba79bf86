"""Real PyTorch profiler traces: gloo ranks as real processes record torch.profiler traces on the
CPU (tests/data/record_cpu_traces.py, tensorboard_trace_handler's file names), and the `laggard`
program reads the directory: ranks from distributedInfo, steps from ProfilerStep#N, the host-side
stages, and the slow rank named by the same detector as for laggard's own logs."""

import json
import os
import socket
import subprocess
import sys

import pytest

import testenv

RECORDER = os.path.join(testenv.ROOT, "tests", "data", "record_cpu_traces.py")


def _record(out, *args):
    """Runs the recorder as a program of its own: its ranks fork from a fresh interpreter, not
    from this pytest process, whose threads from earlier tests (gloo loops, tracker services)
    could leave a lock held in a forked child (ranks hung before training now and then)."""
    r = subprocess.run([sys.executable, RECORDER, str(out)] + [str(a) for a in args],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                       env=testenv.subprocess_env(), timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.multiproc
def test_recorded_traces_name_the_slow_rank(tmp_path):
    pytest.importorskip("torch")
    cli = testenv.cli()
    if cli is None:
        pytest.skip("no laggard program (build it: bash scripts/build.sh)")
    out = tmp_path / "traces"
    # 3 ranks, 8 profiled steps; rank 1 sleeps 20 ms in its forward.
    _record(out, "--ranks", 3, "--steps", 8, "--slow-rank", 1, "--slow-ms", 20.0, "--handler")
    names = sorted(os.listdir(str(out)))
    assert len(names) == 3 and all(n.endswith(".pt.trace.json.gz") for n in names), names

    run = subprocess.run([cli, "analyze", "--json", "-q", str(out)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, universal_newlines=True, timeout=60)
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert result["ranks"] == 3 and result["world_size"] == 3
    assert result["windows"] == 8 and result["input"]["files"] == 3
    assert result["input"]["malformed"] == 0
    stragglers = [(s["rank"], s["stage"]) for s in result["stragglers"]]
    assert stragglers == [(1, "forward")], result["stragglers"]
    assert result["stragglers"][0]["host"] == socket.gethostname()
    waiting = sorted(w["rank"] for w in result["waiting"])
    assert waiting == [0, 2], result["waiting"]

    # Host-side stages only (no device in these traces), and no timeline to draw.
    timeline = subprocess.run([cli, "timeline", "-q", str(out)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, universal_newlines=True, timeout=60)
    assert timeline.returncode == 2
    assert "no device activity in any trace" in timeline.stderr
