"""`laggard watch RUN_DIR`: the live view, in a real terminal (tmux) on a real run, in plain-line
mode on a pipe, --once on a recorded run, and bad input.

The terminal test starts `laggard demo` (real DDP ranks over gloo, one rank made slow) and the
view in a tmux pane (a real pty, 160x50), captures the pane as the run goes, and measures how long
after reports.jsonl first holds the confirmation the pane shows it.
"""

import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import time

import pytest

import testenv

ROOT = testenv.ROOT
EXAMPLE = os.path.join(ROOT, "examples", "run-slow-forward")


def _env():
    return testenv.subprocess_env(OMP_NUM_THREADS="1")


def _watch_cmd():
    """`laggard watch` through the C++ program when it has the command, else python -m."""
    cli = testenv.cli()
    if cli:
        h = subprocess.run([cli, "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           universal_newlines=True, timeout=30).stdout
        if "\n  watch " in h:
            return [cli, "watch"]
    return [sys.executable, "-m", "laggard.watch"]


def _watch(*args, timeout=60):
    return subprocess.run(_watch_cmd() + list(args), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, env=_env(),
                          timeout=timeout, cwd=ROOT)


# -- (3) --once on a recorded run ---------------------------------------------------------------

def test_once_on_a_recorded_run_shows_the_confirmed_straggler():
    r = _watch(EXAMPLE, "--once")
    assert r.returncode == 0, r.stderr
    frame = r.stdout
    assert "\x1b" not in frame  # not a terminal: plain text
    confirmed = frame.split("Confirmed stragglers:")[1].split("\n\n")[0]
    # the run's straggler (laggard analyze: rank 3, forward, 1.50x, confirmed at step 130)
    assert "rank 3 in forward, 1.50x" in confirmed, frame
    assert "confirmed at step 130" in confirmed
    assert "% of the step" in confirmed  # its cost share
    assert confirmed.count("rank ") == 1  # the waiting ranks are not verdicts
    # the heat strip's worst rank is the slow one, slow in forward
    strip = frame.split("Stage time over the median rank")[1].split("\n\n")[0].splitlines()
    assert strip[-1].split()[:2] == ["rank", "3"]
    forward = next(ln for ln in strip if ln.split()[0] == "forward")
    assert 1.3 < float(forward.split()[-4]) < 1.7, strip


# -- (4) bad input -------------------------------------------------------------------------------

def test_bad_run_dir_is_exit_2_with_the_reason(tmp_path):
    r = _watch(str(tmp_path / "nope"), "--once")
    assert r.returncode == 2 and "nope does not exist" in r.stderr, r.stderr
    f = tmp_path / "file.txt"
    f.write_text("x")
    r = _watch(str(f), "--once")
    assert r.returncode == 2 and "is not a directory" in r.stderr, r.stderr
    r = _watch(str(tmp_path), "--once")
    assert r.returncode == 2 and "holds no run" in r.stderr, r.stderr
    r = _watch(str(tmp_path), "--interval", "0")
    assert r.returncode == 2 and "--interval" in r.stderr, r.stderr
    # a run dir that never appears: waited for, with a message, then exit 2
    t0 = time.monotonic()
    r = _watch(str(tmp_path / "later"), "--wait", "1")
    assert r.returncode == 2, r.stderr
    assert "waiting up to 1 s for" in r.stderr and "waited 1 s" in r.stderr, r.stderr
    assert time.monotonic() - t0 >= 1.0


# -- (2) a pipe: one plain line per change -------------------------------------------------------

def _report(step, confirmed, dropped=0):
    finding = {"rank": 1, "stage": "backward", "kind": "compute", "ms": 42.0, "ref_ms": 21.0,
               "slowdown": 2.0, "cost_ms": 21.0, "cost_share": 0.25, "windows_flagged": 3,
               "confirmed": confirmed}
    return json.dumps({"step": step, "straggler/dropped_samples": dropped,
                       "straggler/report_errors": 0, "straggler/incomplete_windows": 0,
                       "stragglers": [finding], "waiting": []}) + "\n"


def _sample(rank, step, backward_ms):
    return json.dumps({"schema": "laggard.sample/1", "rank": rank, "world_size": 2, "step": step,
                       "step_ms": 50.0, "stages": [
                           {"name": "forward", "kind": "compute", "ms": 10.0},
                           {"name": "backward", "kind": "compute", "ms": backward_ms}]}) + "\n"


def test_pipe_prints_one_plain_line_per_change(tmp_path):
    run = tmp_path / "run"  # does not exist yet: the view waits for it
    p = subprocess.Popen(_watch_cmd() + [str(run), "--interval", "0.1", "--wait", "30"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         universal_newlines=True, env=_env(), cwd=ROOT)
    lines, err_lines = queue.Queue(), queue.Queue()
    readers = [threading.Thread(target=lambda: [lines.put(ln.rstrip("\n")) for ln in p.stdout],
                                daemon=True),
               threading.Thread(target=lambda: [err_lines.put(ln) for ln in p.stderr],
                                daemon=True)]
    for t in readers:
        t.start()
    got, err = [], []

    def expect_line():
        # waits for the view's next line, so that each change is read in a refresh of its own
        # however busy the machine is
        got.append(lines.get(timeout=30))

    try:
        # the directory is made once the view says it waits for it (on a busy machine the
        # program may take longer than any fixed sleep to start)
        err.append(err_lines.get(timeout=30))
        run.mkdir()
        expect_line()  # "watching", once the directory is there
        reports = run / "reports.jsonl"

        def append(text, settle=0.5):
            with open(reports, "a") as f:
                f.write(text)
            time.sleep(settle)

        for step in (0, 10):
            with open(run / ("rank-%d.jsonl" % 0), "a") as f:
                f.write(_sample(0, step, 20.0))
            with open(run / ("rank-%d.jsonl" % 1), "a") as f:
                f.write(_sample(1, step, 40.0))
        append(_report(10, False))  # flagged only: nothing to say
        line = _report(20, True)
        append(line[:40])  # a writer mid-line: nothing read yet
        append(line[40:], settle=0)  # the line completes: one "confirmed" line
        expect_line()
        append(_report(30, True))  # unchanged: nothing
        append(_report(40, True, dropped=3), settle=0)  # a counter changed: one line
        expect_line()
        append(_report(50, False, dropped=3), settle=0)  # cleared: one line
        expect_line()
        time.sleep(1.0)  # nothing more comes
    finally:
        p.terminate()
        p.wait(timeout=30)
        for t in readers:  # to the pipes' end
            t.join(timeout=30)
    while not lines.empty():
        got.append(lines.get())
    while not err_lines.empty():
        err.append(err_lines.get())
    err = "".join(err)
    out = "\n".join(got)
    assert "\x1b" not in out
    assert got[0].startswith("laggard watch: watching"), out
    events = got[1:]
    assert len(events) == 3, out
    assert events[0].startswith("step 20: confirmed straggler rank 1 in backward, 2.00x, "
                                "cost 21.0 ms/step (25% of the step)"), out
    assert "confirmed at step 20" in events[0] and "flagged at step 10" in events[0]
    assert events[1] == ("step 40: counters dropped_samples 3, report_errors 0, "
                         "incomplete_windows 0, malformed_lines 0"), out
    assert events[2] == "step 50: cleared rank 1 in backward", out
    assert "waiting up to 30 s for" in err, err


# -- (1) a real terminal: tmux on a live run ------------------------------------------------------

def _first_confirmed(path):
    try:
        with open(path) as f:
            for ln in f:
                if not ln.endswith("\n"):
                    break
                rep = json.loads(ln)
                for s in rep.get("stragglers") or []:
                    if s.get("confirmed"):
                        return s
    except OSError:
        pass
    return None


@pytest.mark.multiproc
@pytest.mark.needs_torch
def test_live_view_in_tmux_shows_the_verdict_within_a_window(tmp_path):
    pytest.importorskip("torch")
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed (scripts/install-deps.sh installs it)")
    out = tmp_path / "run"
    sock = "laggard-watch-test-%d" % os.getpid()
    tmux = ["tmux", "-L", sock, "-f", "/dev/null"]
    interval = 0.3
    env = _env()
    pane_cmd = " ".join(
        ["env", "PYTHONPATH=" + env.get("PYTHONPATH", ""), "TERM=xterm"]
        + ["'%s'" % a for a in _watch_cmd()]
        + ["'%s'" % out, "--interval", str(interval), "--wait", "60",
           "; echo WATCH_EXIT=$?; sleep 60"])
    subprocess.run(tmux + ["new-session", "-d", "-x", "160", "-y", "50", "-s", "w", pane_cmd],
                   check=True, env=env, timeout=30)
    demo = subprocess.Popen(
        [sys.executable, "-m", "laggard.demo", "--ranks", "2", "--steps", "120",
         "--slow-from", "0", "--progress", "never", "--slow-rank", "1",
         "--slow-stage", "forward", "--slowdown", "4", "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, env=env,
        cwd=ROOT)

    def pane():
        return subprocess.run(tmux + ["capture-pane", "-p", "-t", "w"], stdout=subprocess.PIPE,
                              universal_newlines=True, timeout=30).stdout

    try:
        reports = out / "reports.jsonl"
        report_times = []  # when each new report line was first seen
        t_report = t_pane = None
        n_lines = 0
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and t_pane is None:
            now = time.monotonic()
            if reports.exists():
                n = reports.read_text().count("\n")
                if n > n_lines:
                    report_times += [now] * (n - n_lines)
                    n_lines = n
            if t_report is None and _first_confirmed(reports):
                t_report = now
            screen = pane()
            if "rank 1 in forward" in screen.split("Confirmed stragglers:")[-1]:
                t_pane = time.monotonic()
            time.sleep(0.05)
        assert t_report is not None, "the demo confirmed nothing: %s" % demo.communicate()[0]
        assert t_pane is not None, "the pane never showed the verdict:\n" + pane()
        # one analysis window of this run, in seconds: the gap between report lines
        gaps = sorted(b - a for a, b in zip(report_times, report_times[1:]) if b > a)
        window_s = gaps[len(gaps) // 2] if gaps else 1.0
        lag = t_pane - t_report
        print("verdict on screen %.2f s after reports.jsonl held it (window %.2f s)" % (lag, window_s))
        assert lag <= max(window_s, interval + 0.2), (lag, window_s)
        screen = pane()
        assert "Stage time over the median rank" in screen and "Counters:" in screen
        subprocess.run(tmux + ["send-keys", "-t", "w", "q"], check=True, timeout=30)
        t0 = time.monotonic()
        while "WATCH_EXIT=" not in pane() and time.monotonic() - t0 < 10:
            time.sleep(0.1)
        assert "WATCH_EXIT=0" in pane(), pane()
    finally:
        demo.kill()
        demo.communicate(timeout=60)
        subprocess.run(tmux + ["kill-server"], timeout=30)
