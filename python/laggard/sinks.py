"""Where reports go. A sink is any callable taking (step, metrics); it may have close().

Sinks run on the analysis rank, on laggard's background thread, never on the training thread.
A sink that raises is counted in straggler/report_errors and logged (rate-limited); later
reports still reach it.
"""

import json
import math
import os
import threading

from ._log import logger


def _json_value(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON has no NaN/inf
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    return value


class CallableSink:
    """Adapts a plain function fn(step, metrics) (what `sinks=[fn]` accepts)."""

    def __init__(self, fn):
        if not callable(fn):
            raise TypeError("a sink must be callable as fn(step, metrics), got %r" % (fn,))
        self.fn = fn

    def __call__(self, step, metrics):
        self.fn(step, metrics)

    def close(self):
        close = getattr(self.fn, "close", None)
        if callable(close):
            close()


class JsonlReportSink:
    """Appends one JSON object per report to `path`: {"step": ..., "straggler/...": ...}.

    Flushed per line, so a crashed run keeps every report written so far. Extra keys
    ("stragglers", "waiting": the report's findings) follow the metrics when given.
    """

    def __init__(self, path):
        self.path = os.fspath(path)
        self._file = None
        self._lock = threading.Lock()

    def __call__(self, step, metrics, findings=None):
        record = {"step": int(step)}
        record.update(metrics)
        if findings:
            record.update(findings)
        line = json.dumps(_json_value(record), separators=(",", ":"), sort_keys=False) + "\n"
        with self._lock:
            if self._file is None:
                parent = os.path.dirname(self.path)
                if parent:
                    os.makedirs(parent, exist_ok=True)
                self._file = open(self.path, "a", encoding="utf-8")
            self._file.write(line)
            self._file.flush()

    def close(self):
        with self._lock:
            if self._file is not None:
                try:
                    self._file.close()
                finally:
                    self._file = None


def tensorboard_available():
    """True when torch.utils.tensorboard can be imported (it needs the tensorboard package)."""
    try:
        from torch.utils.tensorboard import SummaryWriter  # noqa: F401
    except Exception:  # ImportError, or torch itself missing or broken
        return False
    return True


class TensorBoardSink:
    """Writes numeric straggler/* metrics as scalars and text ones as text, via
    torch.utils.tensorboard.SummaryWriter. Raises ImportError (with what to install) when
    TensorBoard is not importable; see tensorboard_available()."""

    def __init__(self, log_dir, **writer_kwargs):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except Exception as e:
            raise ImportError("TensorBoardSink needs torch and the tensorboard package "
                              "(torch.utils.tensorboard could not be imported: %s)" % e) from e
        self.writer = SummaryWriter(log_dir=os.fspath(log_dir), **writer_kwargs)

    def __call__(self, step, metrics):
        for name, value in metrics.items():
            if isinstance(value, str):
                if value:
                    self.writer.add_text(name, value, global_step=step)
            else:
                self.writer.add_scalar(name, value, global_step=step)
        self.writer.flush()

    def close(self):
        self.writer.close()


def tensorboard_sink(log_dir, **writer_kwargs):
    """A TensorBoardSink, or None (logged once) when TensorBoard is not importable."""
    if not tensorboard_available():
        logger.info("laggard: TensorBoard sink not available (torch.utils.tensorboard cannot be "
                    "imported); reports go to the other sinks")
        return None
    return TensorBoardSink(log_dir, **writer_kwargs)


def as_sink(obj):
    """Wraps a plain callable; passes objects with __call__ and close() through."""
    if hasattr(obj, "close") and callable(obj):
        return obj
    return CallableSink(obj)
