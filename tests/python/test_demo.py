"""`laggard demo` end to end: real rank processes (DDP over gloo on the CPU), a real slowdown
injected into one rank and one stage, the verdict read from what the demo prints.

The demo runs as a subprocess (python -m laggard.demo, and `laggard demo` through the C++
program: testenv.cli(), a build tree's or the installed package's). Short runs: 2 ranks, a few
dozen steps, and a clear slowdown (4x a 20 ms stage), so that the verdict does not depend on how
busy the machine is.
"""

import glob
import json
import os
import signal
import subprocess
import sys
import time

import pytest

import testenv

ROOT = testenv.ROOT

pytestmark = [pytest.mark.multiproc, pytest.mark.needs_torch]

torch = pytest.importorskip("torch")


def _env():
    return testenv.subprocess_env(OMP_NUM_THREADS="1")


def _cli():
    """The `laggard` program with the demo subcommand (testenv.cli()); None when there is none."""
    return testenv.cli()


def _run(cmd, timeout=120, env=None):
    t0 = time.monotonic()
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env or _env(),
                       universal_newlines=True, timeout=timeout, cwd=ROOT)
    r.wall_s = time.monotonic() - t0
    return r


def _demo(out, *args, via_cli=None, timeout=120, env=None):
    argv = ["--ranks", "2", "--steps", "50", "--slow-from", "0", "--progress", "never",
            "--out", str(out)] + list(args)
    if via_cli:
        return _run([via_cli, "demo"] + argv, timeout, env)
    return _run([sys.executable, "-m", "laggard.demo"] + argv, timeout, env)


# The import hook of the deprecated `pynvml` package (a shim over nvidia-ml-py that some
# packages still pull in; its .pth file installs this), which warns at the first lookup of the
# name: torch's own import looks it up.
PYNVML_SHIM = """
import importlib.abc, sys, warnings

class _PynvmlShim(importlib.abc.MetaPathFinder):
    warned = False

    def find_spec(self, name, path, target=None):
        if name.startswith("pynvml") and not self.warned:
            self.warned = True
            warnings.warn("The pynvml package is deprecated. Please install nvidia-ml-py "
                          "instead.", FutureWarning, stacklevel=2)

sys.meta_path.insert(0, _PynvmlShim())
"""


def _env_with_pynvml_shim(tmp_path):
    shim = tmp_path / "pynvml-shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(PYNVML_SHIM)
    env = _env()
    env["PYTHONPATH"] = str(shim) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _confirmed(out):
    """What the run directory says through the library (independent of the demo's text)."""
    from laggard import _core

    windows, _ = _core.read_run(str(out))
    det = _core.Detector(_core.DetectorOptions())  # the demo runs with the library's defaults
    for step, samples in windows:
        det.observe(samples, step)
    return sorted((f["rank"], f["stage"]) for f in det.confirmed()), len(windows)


def _verdict(stdout):
    lines = [l for l in stdout.splitlines() if l.startswith("Verdict:")]
    assert len(lines) == 1, stdout
    return lines[0]


def test_demo_names_the_injected_rank_and_stage(tmp_path):
    out = tmp_path / "run"
    r = _demo(out, "--slow-rank", "1", "--slow-stage", "forward", "--slowdown", "4")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "injected: rank 1's forward runs 4x slower from step 0" in r.stdout
    # The live verdict, printed when the analysis rank first confirms it.
    assert "straggler confirmed: rank 1 in forward" in r.stdout, r.stdout
    verdict = _verdict(r.stdout)
    assert verdict.startswith("Verdict: the straggler is rank 1, in forward"), r.stdout
    assert "found" in verdict
    # The run directory is a real run: both ranks' logs, read by the library as by the CLI.
    assert sorted(os.listdir(out)) == ["rank-0.jsonl", "rank-1.jsonl", "reports.jsonl"]
    confirmed, windows = _confirmed(out)
    assert confirmed == [(1, "forward")]
    assert windows == 5
    with open(out / "reports.jsonl") as f:
        reports = [json.loads(line) for line in f]
    assert any(rep["straggler/confirmed"] == "1:forward" for rep in reports)
    # The analyze summary: the CLI's text when the program is built, else the library's.
    assert ("Confirmed stragglers" in r.stdout) or ("laggard program was not found" in r.stdout)
    # No progress counter when stderr is not a terminal.
    assert "step 1/" not in r.stderr


def test_healthy_demo_names_nobody(tmp_path):
    out = tmp_path / "run"
    r = _demo(out, "--slowdown", "1")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "injected: nothing (--slowdown 1: a healthy run)" in r.stdout
    assert "straggler confirmed:" not in r.stdout, r.stdout
    assert _verdict(r.stdout).startswith("Verdict: no straggler found"), r.stdout
    confirmed, windows = _confirmed(out)
    assert confirmed == [] and windows == 5


def test_laggard_demo_through_the_cli(tmp_path):
    cli = _cli()
    if cli is None:
        assert not testenv.INSTALLED, "the installed package has no `laggard` command"
        pytest.skip("the laggard program is not built (build/tools/laggard; or set LAGGARD_CLI)")
    out = tmp_path / "run"
    # in an environment with the deprecated pynvml package, whose warning a plain
    # `import torch` prints there: none of it in the demo's output
    env = _env_with_pynvml_shim(tmp_path)
    plain = _run([sys.executable, "-c", "import torch"], env=env)
    assert "FutureWarning: The pynvml package is deprecated" in plain.stderr, plain.stderr
    r = _demo(out, "--slow-rank", "0", "--slow-stage", "backward", "--slowdown", "4",
              via_cli=cli, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Warning" not in r.stdout + r.stderr, r.stdout + r.stderr
    assert r.stdout.startswith("laggard demo: 2 ranks"), r.stdout
    # The summary is `laggard analyze`'s own text, on the run directory the demo wrote.
    assert "laggard analyze %s" % out in r.stdout
    assert "Confirmed stragglers" in r.stdout and "Waiting only" in r.stdout
    assert "rank 0 (localhost, cohort dp) in backward" in r.stdout, r.stdout
    assert _verdict(r.stdout).startswith("Verdict: the straggler is rank 0, in backward")
    # Bad usage is the demo's own (argparse through execv): exit status 2, the reason on stderr.
    bad = _run([cli, "demo", "--ranks", "1"], timeout=60)
    assert bad.returncode == 2
    assert "--ranks must be >= 2" in bad.stderr and "usage: laggard demo" in bad.stderr


def test_ctrl_c_stops_every_rank_and_leaves_a_readable_run(tmp_path):
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "laggard.demo", "--ranks", "2", "--steps", "100000",
            "--slow-rank", "1", "--slow-stage", "optimizer", "--slowdown", "4", "--slow-from",
            "0", "--progress", "never", "--out", str(out)]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(),
                         universal_newlines=True, cwd=ROOT, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        # Wait until a few sampled steps are on disk, then interrupt as a terminal would.
        while time.monotonic() < deadline:
            logs = glob.glob(str(out / "rank-*.jsonl"))
            if len(logs) == 2 and all(sum(1 for _ in open(f)) >= 2 for f in logs):
                break
            assert p.poll() is None, p.communicate()
            time.sleep(0.2)
        else:
            pytest.fail("no samples after 90 s")
        p.send_signal(signal.SIGINT)
        stdout, stderr = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    assert p.returncode == 130, stdout + stderr
    assert "interrupted: stopping every rank at step" in stdout
    assert "stopped after" in stdout
    # Every rank stopped at the same step and closed its log cleanly: whole lines, same steps.
    steps = []
    for r in (0, 1):
        with open(out / ("rank-%d.jsonl" % r)) as f:
            lines = f.read().splitlines()
        steps.append([json.loads(line)["step"] for line in lines])
    assert steps[0] == steps[1] and len(steps[0]) >= 2
    # ... and what was recorded is summarised (and names the slow rank).
    assert "Verdict:" in stdout
    assert ("Confirmed stragglers" in stdout) or ("laggard program was not found" in stdout)
    # No rank is left behind (a forked rank's command line is the demo's).
    assert not _processes_with(str(out))


def _processes_with(text):
    ps = subprocess.run(["ps", "-eo", "pid=,args="], stdout=subprocess.PIPE,
                        universal_newlines=True).stdout
    return [line for line in ps.splitlines() if text in line and "ps -eo" not in line]
