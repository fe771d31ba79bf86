"""python -m laggard.launch: environment, worst exit code, signal forwarding."""

import json
import os
import signal
import subprocess
import sys
import time

from laggard.launch import worst_exit_code

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENV = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))

SCRIPT = r"""
import json, os, signal, sys, time
out = sys.argv[1]
rank = int(os.environ["RANK"])
keys = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"]
with open(os.path.join(out, "env-%d.json" % rank), "w") as f:
    json.dump({k: os.environ.get(k) for k in keys} | {"argv": sys.argv[2:]}, f)
if sys.argv[2] == "exit":
    sys.exit(int(sys.argv[3 + rank]))
if sys.argv[2] == "one-fails" and rank == 0:
    sys.exit(5)
def on_int(signum, frame):
    open(os.path.join(out, "sigint-%d" % rank), "w").close()
    sys.exit(7)
signal.signal(signal.SIGINT, on_int)
open(os.path.join(out, "ready-%d" % rank), "w").close()
time.sleep(60)
sys.exit(1)
"""


def launch(tmp_path, *args):
    script = tmp_path / "rank.py"
    script.write_text(SCRIPT)
    return [sys.executable, "-m", "laggard.launch", "-n", "2", str(script), str(tmp_path)] + \
        list(args)


def test_environment_and_worst_exit_code(tmp_path):
    out = subprocess.run(launch(tmp_path, "exit", "0", "3"), env=ENV, timeout=60)
    assert out.returncode == 3
    envs = [json.loads((tmp_path / ("env-%d.json" % r)).read_text()) for r in (0, 1)]
    assert [e["RANK"] for e in envs] == ["0", "1"]
    assert all(e["WORLD_SIZE"] == "2" and e["LOCAL_WORLD_SIZE"] == "2" for e in envs)
    assert [e["LOCAL_RANK"] for e in envs] == ["0", "1"]
    assert envs[0]["MASTER_ADDR"] == "127.0.0.1"
    assert envs[0]["MASTER_PORT"] == envs[1]["MASTER_PORT"] and int(envs[0]["MASTER_PORT"]) > 0
    assert envs[0]["argv"] == ["exit", "0", "3"]


def test_all_ranks_succeed(tmp_path):
    assert subprocess.run(launch(tmp_path, "exit", "0", "0"), env=ENV, timeout=60).returncode == 0


def test_sigint_is_forwarded_to_every_rank(tmp_path):
    p = subprocess.Popen(launch(tmp_path, "wait"), env=ENV)
    try:
        deadline = time.monotonic() + 30
        while not all((tmp_path / ("ready-%d" % r)).exists() for r in (0, 1)):
            assert time.monotonic() < deadline, "ranks did not start"
            time.sleep(0.05)
        p.send_signal(signal.SIGINT)
        assert p.wait(timeout=30) == 7
        assert (tmp_path / "sigint-0").exists() and (tmp_path / "sigint-1").exists()
    finally:
        if p.poll() is None:
            p.kill()


def test_a_failed_rank_gets_the_others_stopped(tmp_path):
    t0 = time.monotonic()
    script = launch(tmp_path, "one-fails")
    script[5:5] = ["--kill-grace", "1"]
    out = subprocess.run(script, env=ENV, timeout=60)
    assert time.monotonic() - t0 < 30  # rank 1 would sleep 60 s
    assert out.returncode == 128 + signal.SIGTERM  # the worst: rank 1, terminated


def test_worst_exit_code():
    assert worst_exit_code([0, 0]) == 0
    assert worst_exit_code([0, 1, 3]) == 3
    assert worst_exit_code([0, -9, 1]) == 137  # killed by SIGKILL
