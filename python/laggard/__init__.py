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

__version__ = "0.1.0"

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
]


def first_regression(baseline, current, relative_threshold=0.05):
    """The first stage (in pipeline order) whose time exceeds its baseline by the threshold:
    (index, current - baseline), or None. ValueError when the lengths differ."""
    from . import _core

    return _core.first_regression(list(baseline), list(current), relative_threshold)


def read_run(run_dir):
    """Reads RUN_DIR/rank-*.jsonl as `laggard analyze` does: ([(step, [StepSample])], stats)."""
    from . import _core

    return _core.read_run(str(run_dir))
