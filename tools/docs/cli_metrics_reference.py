#!/usr/bin/env python3
"""Writes the generated reference pages from the code: docs/reference/cli.md (the programs' own
--help) and docs/reference/metrics.md (the metric names a live Analyzer emits, with their
meanings from the table below).

    PYTHONPATH=python .venv/bin/python tools/docs/cli_metrics_reference.py [--laggard PROGRAM]
    ... --check     exit 1 when a committed page differs from what the code gives now

tests/python/test_reference_docs.py runs the same functions and compares with the pages.
"""

import argparse
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI_PAGE = os.path.join(ROOT, "docs", "reference", "cli.md")
METRICS_PAGE = os.path.join(ROOT, "docs", "reference", "metrics.md")

# The help pages, in the order the reference lists them: (the arguments after `laggard`).
HELP_PAGES = [
    (), ("analyze",), ("report",), ("compare",), ("diagnose",), ("timeline",), ("scale",),
    ("diverge",), ("watch",), ("demo",), ("exclude",), ("fleet",), ("fleet", "add"),
    ("fleet", "hosts"), ("fleet", "runs"),
]


def _help_env():
    env = dict(os.environ)
    env["COLUMNS"] = "100"  # argparse wraps to the terminal: the same width everywhere
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.join(ROOT, "python")] + [p for p in [env.get("PYTHONPATH")] if p])
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    return env


def help_text(laggard, args):
    """`laggard ARGS --help` as a user sees it (the program called `laggard`)."""
    r = subprocess.run(["laggard"] + list(args) + ["--help"], executable=laggard, env=_help_env(),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    text = r.stdout.decode("utf-8")
    if r.returncode != 0:
        raise RuntimeError("laggard %s --help exited %d:\n%s"
                           % (" ".join(args), r.returncode, text))
    return "\n".join(line.rstrip() for line in text.rstrip().splitlines()) + "\n"


def cli_markdown(laggard):
    out = ["# Command line", "",
           "<!-- made by tools/docs/cli_metrics_reference.py from the programs' --help; "
           "do not edit -->",
           "",
           "Every subcommand of `laggard`, as its `--help` prints it. The words they use:",
           "[concepts.md](../concepts.md); the detector flags they share:",
           "[settings.md](settings.md).", ""]
    for args in HELP_PAGES:
        title = " ".join(("laggard",) + tuple(args))
        out += ["## `%s`" % title, "", "```text", help_text(laggard, args).rstrip("\n"), "```", ""]
    return "\n".join(out)


# Every metric a live Analyzer emits: (name, where, meaning). {stage} and {rank} stand for a
# stage's name and a rank's number. `where`: "window" (the analysis rank's report of a window),
# "every rank" (the verdict, on every rank), "other ranks" (the verdict's summary, on ranks other
# than the analysis rank), "values" (once an.record was called), "resources" (a confirmed
# straggler with resource readings).
METRICS = [
    ("straggler/{stage}/local_ms", "window", "this rank's time in the stage in the window (ms)"),
    ("straggler/{stage}/mean_ms", "window", "the mean over the cohort's ranks (ms)"),
    ("straggler/{stage}/max_ms", "window", "the largest over the cohort's ranks (ms)"),
    ("straggler/{stage}/slowdown_ratio", "window",
     "max / ref, ref the window rule's reference (the median by default); 1 when ref is 0"),
    ("straggler/{stage}/relative_score", "window",
     "ref / t of the slowest rank, in (0, 1]: 1 = typical, smaller = slower"),
    ("straggler/{stage}/top_rank", "window", "the rank with the largest time"),
    ("straggler/{stage}/num_stragglers", "window",
     "ranks flagged in the stage by the window rule (a description of the window, not a verdict)"),
    ("straggler/likely_bottleneck", "every rank",
     "the stage with the largest max − ref among stages with a flag (\"\" when none)"),
    ("straggler/hints", "window", "the window's hints, one per line"),
    ("straggler/whatif_step_saving_ms", "every rank",
     "the step time saved if every rank ran each non-communication stage at the reference (ms)"),
    ("straggler/num_stragglers_total", "window", "distinct ranks flagged in a compute, data or "
     "other stage in the window"),
    ("straggler/num_waiting", "window", "distinct ranks flagged in a communication stage: waiting "
     "for someone else, never a verdict on them"),
    ("straggler/ranks", "every rank", "ranks whose sample the window holds"),
    ("straggler/num_confirmed", "every rank", "confirmed stragglers (verdicts) in the window"),
    ("straggler/confirmed", "every rank",
     "the verdicts as `rank:stage`, comma-separated, costliest first (\"\" when none; on ranks "
     "other than the analysis rank the 16 costliest)"),
    ("straggler/report_errors", "window",
     "failures counted so far (sinks, disk, side channel)"),
    ("straggler/dropped_samples", "window",
     "samples lost on the way (full queues, arrived too late)"),
    ("straggler/incomplete_windows", "window", "windows analysed without every rank's sample"),
    ("straggler/verdict_step", "every rank", "the step of the window the verdict is about"),
    ("straggler/local_score", "every rank",
     "this rank's score: the median over its last 5 windows of its worst (ref + e) / (t + e) over "
     "its compute, data and other stages, in (0, 1]; 1 = nowhere slower; NaN until its samples "
     "reach the analysis"),
    ("straggler/local_confirmed", "every rank", "1.0 when this rank is a confirmed straggler"),
    ("straggler/step_ms", "other ranks", "the window's step time (median over its ranks, ms)"),
    ("straggler/correctness/findings", "values", "recorded values so far that were NaN, infinite "
     "or far outside their own recent range"),
    ("straggler/correctness/first", "values",
     "the first of them, e.g. `loss non_finite at step 3 on rank 0`"),
    ("straggler/{rank}/reason", "resources", "the causes the resource readings support "
     "(`thermal_throttle`, `gc_pauses`, ..., comma-separated) or `unknown`"),
]


def emitted_metrics():
    """The metric names a one-rank Analyzer emits (stage names as {stage}), after steps with a
    recorded value that goes NaN."""
    import laggard
    an = laggard.Analyzer(enabled=True, interval=1, resources=False)
    try:
        for step in range(6):
            an.begin_step(step)
            with an.section("forward"):
                time.sleep(0.001)
            an.record("loss", float("nan") if step == 3 else 1.0)
            an.end_step()
        names = set()
        deadline = time.time() + 30
        while time.time() < deadline:
            names = set(an.latest_metrics())
            if "straggler/correctness/first" in names and "straggler/verdict_step" in names:
                break
            time.sleep(0.05)
    finally:
        an.close()
    return {re.sub(r"^straggler/(forward|untimed)/", "straggler/{stage}/", n) for n in names}


def metrics_markdown():
    where = {
        "window": "the analysis rank, every window",
        "every rank": "every rank, every window",
        "other ranks": "ranks other than the analysis rank",
        "values": "the analysis rank, once a value was recorded",
        "resources": "the analysis rank, with resource readings",
    }
    out = ["# Metrics", "",
           "<!-- made by tools/docs/cli_metrics_reference.py; do not edit -->", "",
           "The `straggler/*` metrics: what `Analyzer.latest_metrics()` returns and what sinks "
           "and trackers receive.",
           "`{stage}` is a stage's name (`untimed` included), `{rank}` a rank's number. The "
           "verdict is `straggler/confirmed`; what the words mean: [concepts.md](../concepts.md). "
           "Numbers are floats, text is a string.", "",
           "| metric | on | meaning |", "| --- | --- | --- |"]
    for name, on, meaning in METRICS:
        out.append("| `%s` | %s | %s |" % (name, where[on], meaning))
    out.append("")
    return "\n".join(out)


def _find_laggard(given):
    if given:
        return os.path.abspath(given)
    return os.path.join(ROOT, "build", "tools", "laggard")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--laggard", help="the program (default: build/tools/laggard)")
    p.add_argument("--check", action="store_true", help="compare instead of writing")
    args = p.parse_args(argv)
    pages = [(CLI_PAGE, cli_markdown(_find_laggard(args.laggard))),
             (METRICS_PAGE, metrics_markdown())]
    stale = []
    for path, text in pages:
        if args.check:
            with open(path, encoding="utf-8") as f:
                if f.read() != text:
                    stale.append(path)
        else:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
    for path in stale:
        print("%s differs from what the code gives; run tools/docs/cli_metrics_reference.py"
              % os.path.relpath(path, ROOT), file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
