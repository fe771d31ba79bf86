"""laggard: find the slow rank, the slow stage and the moment a distributed training job got
slower — cheaply enough to leave on for the whole run.

    import laggard
    an = laggard.Analyzer(enabled=True, interval=10)
    for step in range(n):
        an.begin_step(step)
        with an.section("forward"): ...
        an.end_step()
    an.latest_metrics()
    an.close()

The C++ core is laggard._core; torch is imported only by laggard.torch and only when a program
uses torch.distributed (the package works offline without torch).
"""

from .analyzer import NOOP_SECTION, Analyzer
from .flags import add_arguments
from .sinks import CallableSink, JsonlReportSink, TensorBoardSink, tensorboard_available


__all__ = [
    "Analyzer",
    "add_arguments",
    "CallableSink",
    "JsonlReportSink",
    "TensorBoardSink",
    "tensorboard_available",
    "NOOP_SECTION",
    "first_regression",
    "read_run",
    "analyze_run",
]


def first_regression(baseline, current, relative_threshold=0.05):
    """The first stage (in pipeline order) whose time exceeds its baseline by the threshold:
    (index, current - baseline), or None. ValueError when the lengths differ."""
    from . import _core

    return _core.first_regression(list(baseline), list(current), relative_threshold)


def __getattr__(name):
    # The version number is the C++ core's (CMake's project VERSION, as `laggard --version` and
    # the package metadata have it), read from laggard._core only when asked for.
    if name == "__version__":
        from ._core import __version__

        return __version__
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


def read_run(run_dir):
    """Reads RUN_DIR/rank-*.jsonl as `laggard analyze` does: ([(step, [StepSample])], stats)."""
    from . import _core

    return _core.read_run(str(run_dir))


def analyze_run(run_dir, options=None, baseline_dir=None, outputs=("text", "json")):
    """Reads and analyses a recorded run (rank logs or profiler traces) in this process, as
    `laggard analyze`, `laggard diagnose` and `laggard report` do, and returns its outputs:
    ``{"windows": N, "text": ..., "json": ..., ...}`` for each name in `outputs` — ``text`` and
    ``json`` (the summary), ``diagnosis_text`` and ``diagnosis_json`` (the triage chain, with
    `baseline_dir` its regression layer) and ``html`` (the report page). The JSON outputs are
    parsed into dicts. `options`: a _core.DetectorOptions (default: the defaults). Raises
    laggard._core.InputError (an OSError) for a run that cannot be read."""
    import json

    from . import _core

    out = _core.analyze_run(str(run_dir), options if options is not None else
                            _core.DetectorOptions(), str(baseline_dir or ""), list(outputs))
    for key in ("json", "diagnosis_json"):
        if key in out:
            out[key] = json.loads(out[key])
    return out
