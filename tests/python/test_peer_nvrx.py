"""bench/peer_nvrx.py runs: laggard and resiliency-ext's straggler detector on the same short
injected DDP run (3 gloo ranks, rank 1's backward 2x slower)."""

import os
import subprocess
import sys

import pytest

import testenv

pytest.importorskip("torch")
pytest.importorskip("nvidia_resiliency_ext.straggler")
pytestmark = [pytest.mark.multiproc,
              pytest.mark.skipif(testenv.INSTALLED, reason="bench/ runs from the source tree")]


def test_peer_bench_runs_both_tools_and_laggard_names_the_slow_backward():
    p = subprocess.run(
        [sys.executable, os.path.join(testenv.ROOT, "bench", "peer_nvrx.py"), "--steps", "40",
         "--warmup", "3", "--reps", "1", "--interval", "2", "--nvrx-report-every", "10",
         "--scenarios", "backward"],
        capture_output=True, text=True, env=testenv.subprocess_env(OMP_NUM_THREADS="1"),
        timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = {line.split()[0]: line for line in p.stdout.splitlines()
             if line.startswith("  ")}
    assert set(lines) == {"none", "laggard", "nvrx"}, p.stdout
    assert "vs none" in lines["laggard"] and "vs none" in lines["nvrx"]
    assert "report " in lines["nvrx"]  # resiliency-ext's report ran on every rank
    named = {item.split(" (", 1)[0]
             for item in lines["laggard"].split("names: ", 1)[1].split("), ")}
    assert "1:backward" in named, p.stdout
    # the ranks that wait for rank 1 are never named in a compute stage
    assert not named & {"0:backward", "2:backward", "0:forward", "2:forward"}, p.stdout
