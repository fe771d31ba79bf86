"""laggard watch: a live terminal view of a running (or finished) job from its run directory.

    laggard watch RUN_DIR [--once] [--interval S] [--wait S] [--top N]
    python -m laggard.watch ...            (the same, without the C++ program)

Shows the confirmed stragglers with their cost (`cost_ms`, `cost_share` of the analysis rank's
findings), a ranks x stages heat strip for the worst ranks (each rank's recent stage time over
the median rank's), the step time with the steps where stragglers were first flagged and
confirmed, and counters of dropped samples, report errors, incomplete windows and malformed
log lines. It reads `RUN_DIR/reports.jsonl` and `RUN_DIR/rank-<r>.jsonl` (docs/reference/formats.md)
incrementally, by file offset: each refresh reads only what was appended since the previous one,
and a partial last line (a writer mid-line) waits for its newline.

On a terminal: a full-screen view (plain ANSI escapes, no curses: works over ssh), redrawn every
--interval seconds (default 0.5); `q` or Ctrl-C exits. On a non-terminal (a pipe, a log file):
no escapes, one plain line per change (a straggler confirmed or cleared, a counter changed).
--once prints one frame and exits (plain text on a non-terminal). A finished run without
reports.jsonl (logs written without the analysis rank's reports) is analysed from its rank logs
(as `laggard analyze`), at most once every 10 s while the logs grow.

A RUN_DIR that does not exist yet is waited for, up to --wait seconds (default 60; 0: fail at
once), with a message on stderr. Exit status: 0 (q, Ctrl-C, --once, or the pipe closed),
2 bad input (RUN_DIR not a directory, never appeared, holds no run; the reason on stderr).
"""

import argparse
import json
import os
import re
import select
import shutil
import statistics
import sys
import time
from collections import deque

__all__ = ["Tail", "RunState", "render", "main"]

EXIT_OK, EXIT_USAGE = 0, 2
_RANK_FILE = re.compile(r"^rank-(\d+)\.jsonl$")
_RECENT = 16  # samples per rank the heat strip and step time use
_HEAT = " .:-=+*#%@"  # ratio 1.0 .. >= 2.0 over the median rank
_OFFLINE_PERIOD_S = 10.0  # a run without reports.jsonl: re-analysed at most this often


class Tail:
    """Reads the complete lines appended to a file since the previous call. Keeps the offset and
    the partial last line; a file that shrank (rewritten) is read again from its start. Cost: one
    open and a read of the new bytes per call. Not thread-safe."""

    def __init__(self, path):
        self.path, self.offset, self.partial = path, 0, b""

    def lines(self):
        try:
            with open(self.path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size < self.offset:
                    self.offset, self.partial = 0, b""
                if size == self.offset:
                    return []
                f.seek(self.offset)
                data = f.read(size - self.offset)
        except OSError:
            return []
        self.offset += len(data)
        parts = (self.partial + data).split(b"\n")
        self.partial = parts.pop()
        return [p for p in parts if p.strip()]


class RunState:
    """What the view shows, updated from the run directory's new lines by poll()."""

    def __init__(self, run_dir):
        self.run_dir = run_dir
        self.reports = Tail(os.path.join(run_dir, "reports.jsonl"))
        self.rank_tails = {}
        self.recent = {}  # rank -> deque of (step, step_ms, {stage: ms})
        self.step_ms = {}  # step -> {rank: step_ms}
        self.stage_order = []
        self.latest = None  # the latest report
        self.report_step = None
        self.confirmed = {}  # (rank, stage) -> finding of the latest report
        self.first_flagged = {}  # (rank, stage) -> step of the first report that flagged it
        self.confirmed_at = {}  # (rank, stage) -> step of the first report that confirmed it
        self.counters = {"dropped_samples": 0, "report_errors": 0, "incomplete_windows": 0,
                         "malformed_lines": 0}
        self.offline = False  # stragglers from an analysis of the rank logs (no reports.jsonl)
        self._offline_at = None
        self._offline_grown = False

    def has_run(self):
        return bool(self.rank_tails) or os.path.exists(self.reports.path)

    def poll(self):
        """Reads what was appended; returns True when anything new was read."""
        changed = False
        for line in self.reports.lines():
            changed = True
            try:
                rep = json.loads(line)
                if not isinstance(rep, dict):
                    raise ValueError
            except ValueError:
                self.counters["malformed_lines"] += 1
                continue
            self._take_report(rep)
        try:
            names = os.listdir(self.run_dir)
        except OSError:
            names = []
        for name in names:
            m = _RANK_FILE.match(name)
            if m and int(m.group(1)) not in self.rank_tails:
                self.rank_tails[int(m.group(1))] = Tail(os.path.join(self.run_dir, name))
        for rank, tail in sorted(self.rank_tails.items()):
            for line in tail.lines():
                changed = self._offline_grown = True
                self._take_sample(rank, line)
        if self.latest is None and not os.path.exists(self.reports.path):
            self._analyze_offline()
        return changed

    def _take_report(self, rep):
        self.latest = rep
        step = rep.get("step")
        self.report_step = step
        for key in ("dropped_samples", "report_errors", "incomplete_windows"):
            v = rep.get("straggler/" + key)
            if isinstance(v, (int, float)):
                self.counters[key] = int(v)
        confirmed = {}
        for f in rep.get("stragglers") or []:
            if not isinstance(f, dict):
                continue
            key = (f.get("rank"), f.get("stage"))
            self.first_flagged.setdefault(key, step)
            if f.get("confirmed"):
                confirmed[key] = f
                self.confirmed_at.setdefault(key, step)
        self.confirmed = confirmed
        self.offline = False

    def _take_sample(self, rank, line):
        try:
            s = json.loads(line)
            step, stages = s["step"], s.get("stages") or []
            times = {st["name"]: float(st["ms"]) for st in stages}
        except (ValueError, KeyError, TypeError):
            self.counters["malformed_lines"] += 1
            return
        for st in stages:
            if st["name"] not in self.stage_order:
                self.stage_order.append(st["name"])
        step_ms = s.get("step_ms")
        step_ms = float(step_ms) if isinstance(step_ms, (int, float)) else sum(times.values())
        self.recent.setdefault(rank, deque(maxlen=_RECENT)).append((step, step_ms, times))
        self.step_ms.setdefault(step, {})[rank] = step_ms
        while len(self.step_ms) > 4 * _RECENT:
            del self.step_ms[min(self.step_ms)]

    def _analyze_offline(self):
        now = time.monotonic()
        if not self.rank_tails or not self._offline_grown:
            return
        if self._offline_at is not None and now - self._offline_at < _OFFLINE_PERIOD_S:
            return
        self._offline_at, self._offline_grown = now, False
        try:
            from . import analyze_run
            result = analyze_run(self.run_dir, outputs=("json",))["json"]
        except Exception:  # a half-written run: keep the previous view
            return
        self.offline = True
        self.confirmed = {}
        for s in result.get("stragglers") or []:
            key = (s.get("rank"), s.get("stage"))
            self.confirmed[key] = dict(s, slowdown=s.get("typical_slowdown"))
            self.first_flagged[key] = s.get("first_flagged_step")
            self.confirmed_at[key] = s.get("confirmed_step")
        self.report_step = result.get("last_step")

    # -- what the view shows ------------------------------------------------------------------

    def heat(self):
        """{rank: {stage: ratio over the median rank}} of the recent samples."""
        med = {r: {} for r in self.recent}
        for r, dq in self.recent.items():
            for stage in self.stage_order:
                xs = [t[stage] for _, _, t in dq if stage in t]
                if xs:
                    med[r][stage] = statistics.median(xs)
        out = {r: {} for r in med}
        for stage in self.stage_order:
            vals = [m[stage] for m in med.values() if stage in m]
            if not vals:
                continue
            ref = statistics.median(vals)
            for r, m in med.items():
                if stage in m:
                    out[r][stage] = (m[stage] + 0.5) / (ref + 0.5)  # +0.5 ms: tiny stages
        return out

    def step_series(self):
        """[(step, median step_ms across the ranks)] of the recent steps, ascending."""
        return [(s, statistics.median(v.values())) for s, v in sorted(self.step_ms.items())]


def _finding_line(key, f, state):
    rank, stage = key
    slow = f.get("slowdown")
    cost, share = f.get("cost_ms"), f.get("cost_share")
    parts = ["rank %s in %s" % (rank, stage)]
    if isinstance(slow, (int, float)):
        parts.append("%.2fx" % slow)
    if isinstance(cost, (int, float)):
        parts.append("cost %.1f ms/step" % cost
                     + (" (%.0f%% of the step)" % (100 * share)
                        if isinstance(share, (int, float)) and share > 0 else ""))
    parts.append("flagged at step %s, confirmed at step %s"
                 % (state.first_flagged.get(key), state.confirmed_at.get(key)))
    return ", ".join(parts)


def _spark(values):
    bars = "▁▂▃▄▅▆▇█"
    if not values:
        return ""
    lo, hi = min(values), max(values)
    if hi - lo < 1e-9:
        return bars[0] * len(values)
    return "".join(bars[int((v - lo) / (hi - lo) * (len(bars) - 1))] for v in values)


def render(state, width=120, top=4):
    """The frame as a list of plain lines."""
    src = "analysis of the rank logs" if state.offline else "reports.jsonl"
    lines = ["laggard watch %s   ranks: %d   latest report: step %s (%s)"
             % (state.run_dir, len(state.rank_tails), state.report_step, src), ""]
    lines.append("Confirmed stragglers:")
    if state.confirmed:
        for key, f in sorted(state.confirmed.items(),
                             key=lambda kv: -(kv[1].get("cost_ms") or 0)):
            lines.append("  " + _finding_line(key, f, state))
    else:
        lines.append("  none")
    lines.append("")
    heat = state.heat()
    stages = state.stage_order
    if heat and stages:
        worst = sorted(heat, key=lambda r: -max(heat[r].values() or [0]))[:top]
        lines.append("Stage time over the median rank (last %d samples; ' '=1.0x .. '@'>=2.0x):"
                     % _RECENT)
        name_w = max(len(s) for s in stages)
        for stage in stages:
            cells = []
            for r in worst:
                x = heat[r].get(stage)
                if x is None:
                    cells.append("  ?   ")
                else:
                    i = max(0, min(len(_HEAT) - 1, int((x - 1.0) / 1.0 * (len(_HEAT) - 1))))
                    cells.append("%s%5.2f" % (_HEAT[i], x))
            lines.append("  %-*s %s" % (name_w, stage, " ".join(cells)))
        lines.append("  %-*s %s" % (name_w, "rank", " ".join("%6s" % r for r in worst)))
        lines.append("")
    series = state.step_series()
    if series:
        vals = [v for _, v in series]
        lines.append("Step time (median rank), steps %s-%s: %s  last %.1f ms"
                     % (series[0][0], series[-1][0], _spark(vals), vals[-1]))
    onsets = sorted((v, "flagged %s:%s" % k) for k, v in state.first_flagged.items()
                    if v is not None and k in state.confirmed)
    onsets += sorted((v, "confirmed %s:%s" % k) for k, v in state.confirmed_at.items()
                     if v is not None and k in state.confirmed)
    if onsets:
        lines.append("Onsets: " + ", ".join("step %s %s" % o for o in sorted(onsets)))
    lines.append("")
    lines.append("Counters: " + ", ".join("%s %d" % kv for kv in state.counters.items()))
    return [ln[:width] for ln in lines]


def _events(prev, state):
    """Plain lines for what changed since `prev` (confirmed keys, counters)."""
    out = []
    prev_keys, prev_counters = prev
    for key in sorted(set(state.confirmed) - prev_keys, key=str):
        out.append("step %s: confirmed straggler %s"
                   % (state.report_step, _finding_line(key, state.confirmed[key], state)))
    for key in sorted(prev_keys - set(state.confirmed), key=str):
        out.append("step %s: cleared rank %s in %s" % (state.report_step, key[0], key[1]))
    if state.counters != prev_counters:
        out.append("step %s: counters %s" % (state.report_step, ", ".join(
            "%s %d" % kv for kv in state.counters.items())))
    return out


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog=os.environ.get("LAGGARD_WATCH_PROG", "python -m laggard.watch"),
        description="A live view of a run directory: confirmed stragglers with their cost, a "
                    "ranks x stages heat strip, the step time, counters. q or Ctrl-C exits.")
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--once", action="store_true", help="print one frame and exit")
    p.add_argument("--interval", type=float, default=0.5, metavar="S",
                   help="refresh period in seconds (default 0.5)")
    p.add_argument("--wait", type=float, default=60.0, metavar="S",
                   help="how long to wait for a RUN_DIR that does not exist yet (default 60; "
                        "0: fail at once)")
    p.add_argument("--top", type=int, default=4, metavar="N",
                   help="ranks in the heat strip, the worst first (default 4)")
    args = p.parse_args(argv)
    if not (args.interval > 0) or args.interval > 3600:
        p.error("--interval %s: expected seconds in (0, 3600]" % args.interval)
    if not (args.wait >= 0):
        p.error("--wait %s: expected seconds >= 0" % args.wait)
    if args.top < 1:
        p.error("--top %s: expected at least 1" % args.top)
    return args


def _fail(msg):
    print("laggard watch: " + msg, file=sys.stderr)
    return EXIT_USAGE


def _wait_for_dir(run_dir, wait_s, interval):
    if os.path.isdir(run_dir):
        return True
    if os.path.exists(run_dir) or wait_s <= 0:
        return False
    print("laggard watch: waiting up to %g s for %s to appear" % (wait_s, run_dir),
          file=sys.stderr, flush=True)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        time.sleep(min(interval, 0.5))
        if os.path.isdir(run_dir):
            return True
    return False


def _run_terminal(state, args):
    import termios
    import tty

    fd = sys.stdin.fileno() if sys.stdin.isatty() else None
    saved = termios.tcgetattr(fd) if fd is not None else None
    out = sys.stdout
    try:
        if fd is not None:
            tty.setcbreak(fd)
        out.write("\x1b[?1049h\x1b[?25l")
        while True:
            state.poll()
            size = shutil.get_terminal_size((120, 40))
            frame = render(state, size.columns, args.top)[:size.lines - 1]
            out.write("\x1b[H\x1b[2J" + "\r\n".join(frame)
                      + "\r\n\r\n(q quits; refresh %gs)" % args.interval)
            out.flush()
            if fd is None:
                time.sleep(args.interval)
                continue
            ready, _, _ = select.select([fd], [], [], args.interval)
            if ready and os.read(fd, 64).lower().find(b"q") >= 0:
                return EXIT_OK
    except KeyboardInterrupt:
        return EXIT_OK
    finally:
        out.write("\x1b[?25h\x1b[?1049l")
        out.flush()
        if saved is not None:
            termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def _run_plain(state, args):
    print("laggard watch: watching %s (one line per change; Ctrl-C stops)" % state.run_dir,
          flush=True)
    prev = (set(), {k: 0 for k in state.counters})
    try:
        while True:
            state.poll()
            for line in _events(prev, state):
                print(line, flush=True)
            prev = (set(state.confirmed), dict(state.counters))
            time.sleep(args.interval)
    except KeyboardInterrupt:
        return EXIT_OK
    except BrokenPipeError:
        return EXIT_OK


def main(argv=None):
    args = parse_args(argv)
    run_dir = args.run_dir
    if not _wait_for_dir(run_dir, 0 if args.once else args.wait, args.interval):
        if os.path.exists(run_dir):
            return _fail("%s is not a directory (expected a run directory holding "
                         "rank-<r>.jsonl and reports.jsonl)" % run_dir)
        return _fail("%s does not exist%s" % (run_dir, "" if args.once else
                                                " (waited %g s; --wait S waits longer)"
                                                % args.wait))
    state = RunState(run_dir)
    state.poll()
    if args.once:
        if not state.has_run():
            return _fail("%s holds no run: no rank-<r>.jsonl and no reports.jsonl" % run_dir)
        width = shutil.get_terminal_size((120, 40)).columns if sys.stdout.isatty() else 200
        print("\n".join(render(state, width, args.top)))
        return EXIT_OK
    if sys.stdout.isatty():
        return _run_terminal(state, args)
    return _run_plain(state, args)


if __name__ == "__main__":
    sys.exit(main())
