"""Slow and hung disks, and the signals that end a job (docs/reference/failure-contract.md): every sample
of a rank is in its rank log or counted, the counters add up at every exit path, no line is
written twice, and nothing but laggard's own writer thread ever waits for the disk.

The disk faults are injected into the real write() calls on the rank log with strace (its
`inject=write:delay_enter=` delays each write on that one path, as a slow or hung disk would).
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from testenv import TESTS, subprocess_env

pytestmark = pytest.mark.multiproc

STRACE = shutil.which("strace")
needs_strace = pytest.mark.skipif(STRACE is None, reason="strace is not installed "
                                  "(scripts/install-deps.sh installs it)")


def _worker(log_dir, *args, delay=None):
    cmd = [sys.executable, os.path.join(TESTS, "disk_worker.py"), str(log_dir)] + \
        [str(a) for a in args]
    if delay is not None:
        # -qq: no attach/exit messages; -P: only the calls on the rank log.
        cmd = [STRACE, "-f", "-qq", "-o", os.devnull, "-e", "trace=write", "-P",
               os.path.join(str(log_dir), "rank-0.jsonl"),
               "-e", "inject=write:delay_enter=%s" % delay] + cmd
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            universal_newlines=True, env=subprocess_env(OMP_NUM_THREADS="1"))


def _steps_in_log(log_dir):
    steps = []
    with open(os.path.join(str(log_dir), "rank-0.jsonl")) as f:
        for line in f:
            steps.append(json.loads(line)["step"])
    return steps


def _counters(out):
    return json.loads([line for line in out.splitlines() if line.startswith("{")][-1])


@needs_strace
def test_a_slow_disk_loses_no_line_uncounted(tmp_path):
    """Each write takes 1 s: close() gives up after 3 s. Written + lost + left = pushed, and
    the log holds exactly the lines counted as written (and at most the one being written when
    close() gave up)."""
    p = _worker(tmp_path, 101, 3, delay="1s")
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    c = _counters(out)
    assert c["queue_pushed"] == c["samples_emitted"] == 101, c
    assert c["rank_log_written"] + c["rank_log_lost"] + c["rank_log_left"] == 101, c
    assert c["rank_log_left"] > 0 and c["close_s"] < 4.5, c
    steps = _steps_in_log(tmp_path)
    assert c["rank_log_written"] <= len(steps) <= c["rank_log_written"] + 1, (c, steps)
    assert steps == list(range(len(steps))), steps  # in order, none twice
    assert "did not finish within 3" in err


@needs_strace
def test_a_hung_disk_never_holds_the_training_thread_and_writes_no_line_twice(tmp_path):
    """Writes hang for 8 s: close() returns on time, the training thread exits at once (it never
    writes to the rank log itself), and once the disk recovers no line is in the log twice."""
    p = _worker(tmp_path, 20, 2, delay="8s")
    t0 = time.monotonic()
    line = p.stdout.readline()
    while line and line.strip() != "closed":
        last = line
        line = p.stdout.readline()
    closed_after = time.monotonic() - t0
    c = json.loads(last)
    assert c["rank_log_written"] + c["rank_log_lost"] + c["rank_log_left"] == 20, c
    assert c["close_s"] < 3.0, c
    # The interpreter's exit must not wait for the disk: the training (main) thread is gone
    # well before the hung write returns. (strace holds the stopped writer thread, so the
    # process as a whole ends only then.)
    pid = _traced_pid(p.pid)
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline and _thread_alive(pid, pid):
        time.sleep(0.05)
    assert not _thread_alive(pid, pid), "the main thread still runs 3 s after close()"
    assert closed_after < 8.0
    p.communicate(timeout=60)
    steps = _steps_in_log(tmp_path)
    assert len(steps) == len(set(steps)) and len(steps) <= c["rank_log_written"] + 1, steps


def _traced_pid(strace_pid):
    with open("/proc/%d/task/%d/children" % (strace_pid, strace_pid)) as f:
        return int(f.read().split()[0])


def _thread_alive(pid, tid):
    try:
        with open("/proc/%d/task/%d/stat" % (pid, tid)) as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_writes_the_rank_log_out_before_the_process_ends(tmp_path, sig):
    """A scheduler's SIGTERM (or a lost terminal's SIGHUP) mid-run: every step the loop
    finished is in the rank log, and the process still ends by that signal."""
    p = _worker(tmp_path, "forever")
    finished = []
    for line in p.stdout:
        finished.append(int(line))
        if len(finished) == 1000:
            p.send_signal(sig)
            break
    rest, err = p.communicate(timeout=30)
    finished += [int(x) for x in rest.split()]
    assert p.returncode == -sig, (p.returncode, err)
    steps = _steps_in_log(tmp_path)
    assert steps[:len(finished)] == finished, (len(steps), len(finished))


def test_a_handler_of_the_programs_own_is_left_alone(tmp_path):
    """A program that handles SIGTERM itself keeps its handler (and calls close() there)."""
    code = (
        "import signal, sys, laggard\n"
        "signal.signal(signal.SIGTERM, lambda *a: (an.close(), print('mine'), sys.exit(7)))\n"
        "an = laggard.Analyzer(interval=1, log_dir=sys.argv[1], resources=False)\n"
        "an.begin_step(0); an.end_step()\n"
        "print('ready', flush=True)\n"
        "signal.pause()\n")
    p = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, universal_newlines=True,
                         env=subprocess_env())
    assert p.stdout.readline().strip() == "ready"
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 7 and "mine" in out, (p.returncode, out, err)
    assert _steps_in_log(tmp_path) == [0]
