"""The Python benchmark scripts run, and what they check holds (bench/overhead.py exits 1 when
the losses with the analyzer on differ from those with it off)."""

import os
import subprocess
import sys

import pytest

import testenv

pytest.importorskip("torch")
# The benchmark scripts belong to the source tree (they put its python/ on sys.path themselves).
pytestmark = pytest.mark.skipif(testenv.INSTALLED, reason="bench/ runs from the source tree")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_bench(*args):
    env = testenv.subprocess_env(OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, os.path.join(ROOT, "bench", args[0])] + list(args[1:]),
                          capture_output=True, text=True, env=env, timeout=600)


def test_overhead_ab_quick_runs_and_losses_are_bit_identical():
    p = run_bench("overhead.py", "--quick", "--breakdown")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "losses: bit-identical on and off" in p.stdout
    for mode in ("off", "on, interval 10", "on, interval 1", "off, second copy (A/A)"):
        assert "\n" + mode in p.stdout
    # the A/B ran in two processes (--quick), each reporting back; the A/A line is printed
    assert "A/B process 2/2 done" in p.stderr
    assert "A/A (two identical off copies): " in p.stdout
    # the accounted breakdown saw the hooks of laggard.torch on sampled steps (at interval 1,
    # the backward call's marks: once the anchor parameter's hook has confirmed 3 backward
    # calls, in the accounted copies' warm-up, the call itself ends the stage)
    for hook in ("forward end (+ output's gradient hook)", "optimizer hook", "backward call",
                 "backward end (a mark)"):
        assert hook in p.stdout, hook


def test_cold_calls_runs():
    p = run_bench("cold_calls.py", "--rounds", "5")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "HookSwitch: on() + off()" in p.stdout and "hook registrar" in p.stdout


def test_side_channel_bench_runs_and_drops_nothing():
    p = run_bench("side_channel.py", "--steps", "300")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "300 analysed, 0 dropped" in p.stdout, p.stdout


def test_resources_bench_runs_and_counts_no_errors():
    p = run_bench("resources_overhead.py", "--rounds", "30")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "added by resources, sampled step:" in p.stdout
    assert "resource names per sampled step" in p.stdout
