"""Where reports go. A sink is any callable taking (step, metrics); it may have close().

Sinks run on the analysis rank, on a thread of their own (SinkDelivery), never on the training
thread nor on the engine's (side channel, analysis). A sink that raises is counted in
straggler/report_errors and logged (rate-limited); later reports still reach it. A sink's
`min_period_s` attribute bounds how often it is written, its `prepare()` is its setup.
"""

import collections
import json
import math
import os
import threading
import time

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
    torch.utils.tensorboard.SummaryWriter. metrics: "compact" (the default: the summary, and the
    per-stage metrics of stages with a confirmed straggler; see tracker_metrics) or "full". Raises
    ImportError (with what to install) when TensorBoard is not importable; see
    tensorboard_available(). min_period_s: an Analyzer writes it at most this often (see
    SinkDelivery)."""

    def __init__(self, log_dir, metrics="compact", min_period_s=1.0, **writer_kwargs):
        self.metrics = check_metric_set(metrics, "TensorBoardSink")
        self.min_period_s = _period(min_period_s, "TensorBoardSink")
        try:
            from torch.utils.tensorboard import SummaryWriter
        except Exception as e:
            raise ImportError("TensorBoardSink needs torch and the tensorboard package "
                              "(torch.utils.tensorboard could not be imported: %s)" % e) from e
        self.writer = SummaryWriter(log_dir=os.fspath(log_dir), **writer_kwargs)

    def __call__(self, step, metrics):
        for name, value in tracker_metrics(metrics, self.metrics).items():
            if isinstance(value, str):
                if value:
                    self.writer.add_text(name, value, global_step=step)
            else:
                self.writer.add_scalar(name, value, global_step=step)
        self.writer.flush()

    def close(self):
        self.writer.close()


def tensorboard_sink(log_dir, metrics="compact", min_period_s=1.0, **writer_kwargs):
    """A TensorBoardSink, or None (logged once) when TensorBoard is not importable."""
    if not tensorboard_available():
        logger.info("laggard: TensorBoard sink not available (torch.utils.tensorboard cannot be "
                    "imported); reports go to the other sinks")
        return None
    return TensorBoardSink(log_dir, metrics=metrics, min_period_s=min_period_s,
                           **writer_kwargs)


def as_sink(obj):
    """Wraps a plain callable; passes objects with __call__ and close() through."""
    if hasattr(obj, "close") and callable(obj):
        return obj
    return CallableSink(obj)


# -- delivery: the sinks' own thread -----------------------------------------------------------
#
# The engine's background thread (the side channel, the analysis) used to call each sink in
# turn, and a sink's Python holds the interpreter's lock that the training thread needs: MLflow
# on SQLite held it ~7 ms per report and ~3 s at its first (creating the store), enough to make
# the analysis rank the slowest of its peers at interval 2 with ms steps (docs/notes/sink-cost.md).
# Now the engine only queues the report; one thread of laggard's hands it on, no more often than
# each sink's min_period_s, and the first-report setup runs on that thread as the Analyzer starts.

class SinkDelivery:
    """Hands an Analyzer's reports to its sinks on a thread of its own (`laggard-sinks`), so
    that neither the training thread nor the engine's background thread waits on a tracker.

    Called as a sink itself (by the engine, on the analysis rank): the report joins a queue of
    `capacity` reports and the call returns; a full queue drops its oldest report (counted in
    `dropped`), so a stuck sink costs reports, never a wait. Each sink is written at most every
    `min_period_s` seconds (its attribute; 0, every report, when it has none): a report that
    comes sooner is kept as that sink's latest and written when the period has passed, the one
    it replaces counted in `skipped`; so a sink always gets the latest report, a little later.
    `start(wait_s)` (the analysis rank) starts the thread, which first calls each sink's
    `prepare()` if it has one (the store, the run: what the first report would otherwise set
    up); an Analyzer waits for that as it starts, at most PREPARE_WAIT_S, so that it is done
    before the training steps (a slow tracker server: the rest goes on behind them).
    close() delivers what is queued and each sink's latest, then closes the sinks, waiting for
    that at most `close_timeout_s`. A sink's failure goes to `report_error(kind, exception)`
    (the Analyzer's counted, rate-limited warnings). Thread-safe."""

    PREPARE_WAIT_S = 30.0  # how long an Analyzer waits for the sinks' setup as it starts

    def __init__(self, sinks, capacity=128, report_error=None, close_timeout_s=15.0):
        self.sinks = list(sinks)
        self.capacity = max(1, int(capacity))
        self.close_timeout_s = float(close_timeout_s)
        self._report_error = report_error
        self._cond = threading.Condition()
        self._queue = collections.deque()  # (step, metrics), oldest first
        self._periods = [max(0.0, float(getattr(s, "min_period_s", 0.0) or 0.0))
                         for s in self.sinks]
        self._last = [None] * len(self.sinks)  # monotonic time of each sink's last write
        self._held = [None] * len(self.sinks)  # each sink's latest report not yet written
        self._thread = None
        self._closing = False
        self._done = threading.Event()
        self._prepared = threading.Event()
        self._warned = None  # when the last warning of dropped reports was logged
        self.writes = 0
        self.dropped = 0
        self.skipped = 0

    def counters(self):
        with self._cond:
            return {"sink_reports_queued": len(self._queue), "sink_writes": self.writes,
                    "sink_reports_dropped": self.dropped, "sink_writes_skipped": self.skipped}

    def start(self, wait_s=0.0):
        """Starts the thread, which first calls the sinks' prepare(); waits for that at most
        `wait_s` seconds (True when it is done)."""
        with self._cond:
            if self._thread is None and not self._closing:
                self._start_thread()
        return self._prepared.wait(wait_s) if wait_s > 0 else self._prepared.is_set()

    def _start_thread(self):
        self._thread = threading.Thread(target=self._run, name="laggard-sinks", daemon=True)
        self._thread.start()

    def __call__(self, step, metrics):
        with self._cond:
            if self._closing:
                return
            if len(self._queue) >= self.capacity:
                self._queue.popleft()
                self.dropped += 1
                dropped = self.dropped
            else:
                dropped = 0
            self._queue.append((int(step), metrics))
            self._cond.notify()
        if self._thread is None:
            self.start()
        if dropped:
            now = time.monotonic()
            if self._warned is None or now - self._warned >= 60.0:  # a warning, not a flood
                self._warned = now
                logger.warning("laggard: sink delivery: %d reports dropped so far: the sinks "
                               "fell %d reports behind (a sink is slow or stuck); training "
                               "continues", dropped, self.capacity)

    def _error(self, kind, e):
        if self._report_error is not None:
            try:
                self._report_error(kind, e)
                return
            except Exception:
                pass
        logger.warning("laggard: %s failed: %s: %s; training continues", kind,
                       type(e).__name__, e)

    def _write(self, i, step, metrics):
        sink = self.sinks[i]
        self._last[i] = time.monotonic()
        try:
            sink(step, metrics)
        except Exception as e:
            self._error("sink " + _sink_label(sink), e)
        with self._cond:
            self.writes += 1
        # Hands the interpreter's lock to a training thread waiting for it now, rather than
        # after the switch interval (5 ms) into the next sink's write.
        time.sleep(0)

    def _call_each(self, method, what=""):
        """Each sink's `method()` where it has one (prepare, close); a failure is counted."""
        for sink in self.sinks:
            call = getattr(sink, method, None)
            if callable(call):
                try:
                    call()
                except Exception as e:
                    self._error("sink " + _sink_label(sink) + what, e)

    def _run(self):
        try:
            try:
                self._call_each("prepare")
            finally:
                self._prepared.set()
            while True:
                with self._cond:
                    while True:
                        closing = self._closing
                        held = any(h is not None for h in self._held)
                        if self._queue or closing:
                            break  # closing: the held reports are written, periods or not
                        now = time.monotonic()
                        due = [self._last[i] + p for i, p in enumerate(self._periods)
                               if self._held[i] is not None]
                        if due and min(due) <= now:
                            break
                        self._cond.wait(min(due) - now if due else None)
                    # One report at a time: what is still queued when a sink is stuck can be
                    # dropped (and counted) by __call__ and close().
                    report = self._queue.popleft() if self._queue else None
                    if report is None and closing and not held:
                        break
                    flush = report is None and closing  # the queue done: the held ones now
                # In order: a sink whose period has passed is written the report, one that is
                # within it holds the report (the one held before, never written, is skipped).
                for i in range(len(self.sinks)):
                    if report is not None:
                        if self._held[i] is not None:
                            self.skipped += 1
                        self._held[i] = report
                    held_i, last = self._held[i], self._last[i]
                    if held_i is not None and (flush or last is None or
                                               time.monotonic() - last >= self._periods[i]):
                        self._held[i] = None
                        self._write(i, *held_i)
            self._call_each("close", " close")
        finally:
            self._done.set()

    def close(self):
        """Delivers what is queued and each sink's latest report, closes the sinks; waits for
        that at most close_timeout_s (a stuck sink is left behind, counted)."""
        with self._cond:
            if self._closing:
                return
            self._closing = True
            started = self._thread is not None
            self._cond.notify()
        if not started:
            if not self._queue:  # never got a report (not the analysis rank): just close
                self._call_each("close", " close")
                return
            self._start_thread()
        if not self._done.wait(self.close_timeout_s):
            with self._cond:
                left = len(self._queue)
                self.dropped += left  # never delivered: counted as dropped
                self._queue.clear()
            self._error("sink close", RuntimeError(
                "the sinks did not finish within %.3g s (a sink is stuck); left behind, %d "
                "reports dropped" % (self.close_timeout_s, left)))


def _sink_label(sink):
    fn = getattr(sink, "fn", sink)
    return getattr(fn, "__qualname__", None) or type(fn).__name__


# -- what a tracker gets of a report ----------------------------------------------------------
#
# A report's metrics hold the RFC's seven per-stage metrics for every stage the ranks time (58
# numbers, ~2.7 KB, with eight stages), though few stages ever hold a straggler. Trackers keep
# every key of every step they are given (a W&B/MLflow/TensorBoard series, a column of the
# Trainer's log), so by default they get the compact set; metrics="full" gives them all.
# Why confirmed stages and not every stage a window flags (num_stragglers > 0): on a busy host
# the per-window flags touch most stages (3 ranks, 8 stages, 100 windows of a Trainer run:
# communication flagged in 100, allgather 95, forward 75, backward 44, ...), which kept 37 of
# the 58 numbers and made each stage's series come and go with the noise; confirmed stages
# kept 16 (635 B), and a stage's series runs while it holds a straggler.

METRIC_SETS = ("compact", "full")


def check_metric_set(metrics, where):
    """`metrics` when it is one of METRIC_SETS, else ValueError naming `where` it was given."""
    if metrics not in METRIC_SETS:
        raise ValueError("%s: metrics must be \"compact\" (the default) or \"full\", got %r"
                         % (where, metrics))
    return metrics


def _stage_of(name):
    """The stage of a per-stage metric straggler/<stage>/<field> (field one of the RFC's
    _STAGE_FIELDS), else None (a summary metric)."""
    if not name.startswith("straggler/"):
        return None
    stage, sep, field = name[len("straggler/"):].rpartition("/")
    return stage if sep and stage and field in _STAGE_FIELDS else None


def tracker_metrics(metrics, which="compact"):
    """The metrics a tracker gets of one report. "full": all of them (a copy). "compact": every
    summary metric (num_confirmed, confirmed, likely_bottleneck, hints, whatif_step_saving_ms,
    num_stragglers_total, num_waiting, ranks, report_errors, dropped_samples,
    incomplete_windows, ...: every straggler/* that is not a stage's), and the RFC's per-stage
    metrics (local_ms, mean_ms, max_ms, slowdown_ratio, relative_score, top_rank,
    num_stragglers) only of the stages that hold a confirmed straggler (straggler/confirmed).
    A healthy run's report: the summary alone. Cost: one pass over the keys."""
    if which == "full":
        return dict(metrics)
    keep = {stage for _, stage in parse_confirmed(metrics.get("straggler/confirmed"))}
    out = {}
    for name, value in metrics.items():
        stage = _stage_of(name)
        if stage is None or stage in keep:
            out[name] = value
    return out


# -- trackers and monitoring ------------------------------------------------------------------
#
# Each of these is created on every rank (as `sinks=` is) but touches its tracker only at its
# setup (prepare()) or first call, which happen only on the analysis rank: no run, experiment or
# port on the others. Like every sink, a failure is raised from __call__ and counted by the
# live analysis (straggler/report_errors, a rate-limited warning); training never sees it.

def _period(value, sink):
    """min_period_s as a float >= 0, else ValueError naming the sink."""
    try:
        period = float(value)
    except (TypeError, ValueError):
        period = float("nan")
    if not period >= 0.0 or not math.isfinite(period):
        raise ValueError("%s: min_period_s must be a number of seconds >= 0, got %r"
                         % (sink, value))
    return period


def _require(module, sink):
    """Setup: ImportError (what to install) when `module` is missing, found without importing
    it (these sinks import their tracker at the first report, on the analysis rank only)."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise ImportError("%s needs the %s package (pip install %s)" % (
            sink, module, module.replace("_", "-")))


def _numbers(metrics):
    """The numeric metrics (finite or not) and the text ones, apart."""
    numbers, texts = {}, {}
    for name, value in metrics.items():
        if isinstance(value, str):
            texts[name] = value
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            numbers[name] = float(value)
    return numbers, texts


class WandbSink:
    """Logs straggler/* to Weights & Biases, against their own x-axis `straggler/step` (so
    laggard's steps never clash with the steps the trainer logs to the same run).

    run: a wandb Run to log to (the trainer's own); else wandb.init(**init_kwargs) is called at
    its setup (prepare(), or the first report; project="laggard" unless given) and the run
    finished at close().
    WANDB_MODE=offline (or mode="offline") writes the run locally, for `wandb sync` later.
    metrics: "compact" (the default; see tracker_metrics) or "full". min_period_s: an Analyzer
    logs at most this often (see SinkDelivery); its prepare() starts the run before the first
    report."""

    def __init__(self, run=None, metrics="compact", min_period_s=1.0, **init_kwargs):
        self.metrics = check_metric_set(metrics, "WandbSink")
        self.min_period_s = _period(min_period_s, "WandbSink")
        if run is None:
            _require("wandb", "WandbSink")
        self._run = run
        self._own = run is None
        self._init_kwargs = dict(init_kwargs)
        self._init_kwargs.setdefault("project", "laggard")
        self._defined = False
        self._lock = threading.Lock()

    @property
    def run(self):
        return self._run

    def _start(self):
        if self._run is None:
            import wandb

            self._run = wandb.init(**self._init_kwargs)
        if not self._defined:
            self._run.define_metric("straggler/step")
            self._run.define_metric("straggler/*", step_metric="straggler/step")
            self._defined = True

    def prepare(self):
        """The run (wandb.init) and its x-axis, before the first report."""
        with self._lock:
            self._start()

    def __call__(self, step, metrics):
        with self._lock:
            self._start()
            record = {name: value
                      for name, value in tracker_metrics(metrics, self.metrics).items()
                      if isinstance(value, str) or
                      (isinstance(value, (int, float)) and not isinstance(value, bool))}
            record["straggler/step"] = int(step)
            self._run.log(record)

    def close(self):
        with self._lock:
            run, self._run = self._run, None
            if run is not None and self._own:
                run.finish()


def _mlflow_version():
    """(major, minor) of the installed MLflow (mlflow or mlflow-skinny), read from its metadata
    without importing it; None when unknown."""
    import importlib.metadata

    for dist in ("mlflow", "mlflow-skinny"):
        try:
            parts = importlib.metadata.version(dist).split(".")
            return int(parts[0]), int("".join(c for c in parts[1] if c.isdigit()) or 0)
        except Exception:
            continue
    return None


def _mlflow_file_store_path(uri):
    """The directory of MLflow's file store named by `uri` ("file:..." or a plain path, which
    MLflow also takes as a file store), else None (sqlite:, http(s):, databricks, ...)."""
    from urllib.parse import unquote, urlparse

    if uri in ("databricks", "databricks-uc", "uc"):  # MLflow's names without a scheme
        return None
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        return unquote(parsed.path) or "."
    if parsed.scheme == "":
        return uri
    return None


def _mlflow_file_store_allowed():
    """MLFLOW_ALLOW_FILE_STORE=true (or 1): MLflow's own switch that keeps its file store."""
    return os.environ.get("MLFLOW_ALLOW_FILE_STORE", "").strip().lower() in ("true", "1")


def mlflow_file_store_refused(uri, source):
    """The message for MLflow's refusal of its file store `uri`, which came from `source`
    ("tracking_uri", "MLFLOW_TRACKING_URI" or "MLflow's default here"): what to set instead."""
    path = _mlflow_file_store_path(uri) or uri
    db = "sqlite:///" + os.path.join(os.path.dirname(os.path.abspath(path)), "mlflow.db")
    version = _mlflow_version()
    instead = "MLFLOW_TRACKING_URI=%s" % db if source == "MLFLOW_TRACKING_URI" else \
        "MLflowSink(tracking_uri=%r)" % db
    return ("MLflowSink: MLflow%s refuses its file store %r (%s). Set %s: a SQLite file, MLflow's "
            "default local store (`mlflow ui --backend-store-uri %s` shows it); or a tracking "
            "server's URI (\"http://host:5000\"); or, to keep the file store, "
            "MLFLOW_ALLOW_FILE_STORE=true in the environment of every rank"
            % (" %d.%d" % version if version else "", uri, source, instead, db))


class MLflowSink:
    """Logs numeric straggler/* as MLflow metrics (with laggard's step) and text ones
    (likely_bottleneck, confirmed, hints) as tags holding the latest value.

    Through an MlflowClient, not mlflow's fluent API, so the trainer's active run (a thread-local
    of the training thread) is left alone.

    tracking_uri: where the run goes; None: MLflow's own choice, MLFLOW_TRACKING_URI if set,
    else MLflow's default local store (MLflow 3: the SQLite file mlflow.db in the analysis
    rank's working directory, "sqlite:///mlflow.db"). Any URI MLflow takes: "sqlite:///path.db",
    "http://host:5000", "databricks". MLflow >= 3.13 refuses its file store ("file:..." or a
    plain path) unless MLFLOW_ALLOW_FILE_STORE=true: such a URI, given here or in
    MLFLOW_TRACKING_URI, is a ValueError at setup saying what to set instead (MLflow's default
    falling on an old ./mlruns directory is found at its setup: the same message, as the sink's
    counted, warned error).

    run_id: log into that run (the trainer's); else a run named run_name is created in
    `experiment` at its setup (prepare(), or the first report) and ended at close().
    metrics: "compact" (the default; see tracker_metrics) or "full". min_period_s: an Analyzer
    logs at most this often (see SinkDelivery); its prepare() opens the store and the run
    before the first report."""

    TAG_LIMIT = 5000  # MLflow's longest tag value
    REFUSES_FILE_STORE = (3, 13)  # the first MLflow that refuses its file store by default

    def __init__(self, tracking_uri=None, experiment="laggard", run_id=None, run_name=None,
                 metrics="compact", min_period_s=1.0):
        _require("mlflow", "MLflowSink")
        self.metrics = check_metric_set(metrics, "MLflowSink")
        self.min_period_s = _period(min_period_s, "MLflowSink")
        if tracking_uri is not None:
            tracking_uri = os.fspath(tracking_uri)
        uri, source = tracking_uri, "tracking_uri"
        if uri is None and os.environ.get("MLFLOW_TRACKING_URI"):
            uri, source = os.environ["MLFLOW_TRACKING_URI"], "MLFLOW_TRACKING_URI"
        version = _mlflow_version()
        if (uri is not None and _mlflow_file_store_path(uri) is not None
                and version is not None and version >= self.REFUSES_FILE_STORE
                and not _mlflow_file_store_allowed()):
            raise ValueError(mlflow_file_store_refused(uri, source))
        self.tracking_uri = tracking_uri
        self.experiment = experiment
        self.run_id = run_id
        self.run_name = run_name
        self._own = run_id is None
        self._client = None
        self._tags = {}
        self._lock = threading.Lock()

    def _start(self):
        import mlflow
        from mlflow.tracking import MlflowClient

        try:
            client = MlflowClient(tracking_uri=self.tracking_uri)
            experiment_id = None
            if self.run_id is None:
                found = client.get_experiment_by_name(self.experiment)
                experiment_id = found.experiment_id if found is not None else \
                    client.create_experiment(self.experiment)
        except Exception as e:
            # MLflow's default here can still be its file store (./mlruns holding an older
            # MLflow's runs, or mlflow.set_tracking_uri): say what to set, not MLflow's advice.
            uri = self.tracking_uri or mlflow.get_tracking_uri()
            if _mlflow_file_store_path(uri) is not None and not _mlflow_file_store_allowed():
                source = "tracking_uri" if self.tracking_uri else "MLflow's default here"
                raise RuntimeError(mlflow_file_store_refused(uri, source)) from e
            raise
        if experiment_id is not None:
            self.run_id = client.create_run(experiment_id, run_name=self.run_name).info.run_id
        self._client = client

    def prepare(self):
        """Opens the store (creating it: seconds for a new SQLite file) and the run, before the
        first report."""
        with self._lock:
            if self._client is None:
                self._start()

    def __call__(self, step, metrics):
        from mlflow.entities import Metric, RunTag

        with self._lock:
            if self._client is None:
                self._start()
            numbers, texts = _numbers(tracker_metrics(metrics, self.metrics))
            now = int(time.time() * 1000)
            batch = [Metric(name, value, now, int(step)) for name, value in numbers.items()
                     if math.isfinite(value)]
            tags = [RunTag(name, value[:self.TAG_LIMIT]) for name, value in texts.items()
                    if self._tags.get(name) != value]
            self._client.log_batch(self.run_id, metrics=batch, tags=tags)
            self._tags.update((t.key, t.value) for t in tags)

    def close(self):
        with self._lock:
            if self._client is not None and self._own and self.run_id is not None:
                self._client.set_terminated(self.run_id)
            self._client = None


_STAGE_FIELDS = ("local_ms", "mean_ms", "max_ms", "slowdown_ratio", "relative_score",
                 "top_rank", "num_stragglers")


def prometheus_name(name):
    """laggard_<name> with what Prometheus does not allow in a metric name replaced by '_'."""
    out = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return "laggard_" + out


def parse_confirmed(text):
    """[(rank, stage)] from straggler/confirmed ("1:backward,3:forward"); malformed items are
    skipped."""
    out = []
    for item in (text or "").split(","):
        rank, sep, stage = item.partition(":")
        if sep and rank.strip().lstrip("-").isdigit() and stage:
            out.append((int(rank), stage))
    return out


class PrometheusSink:
    """Serves the latest report's straggler/* metrics for Prometheus to scrape
    (prometheus-client), on http://addr:port/metrics of the analysis rank:

      laggard_stage_<field>{stage}         per stage: mean_ms, max_ms, slowdown_ratio,
                                           relative_score, top_rank, num_stragglers
      laggard_stage_local_ms{stage,rank,host}  the analysis rank's own time
      laggard_<name>                       every other number (whatif_step_saving_ms,
                                           num_confirmed, report_errors, dropped_samples, ...)
      laggard_report_step                  the step of the latest report
      laggard_confirmed_straggler{rank,stage,host}  1 for each straggler confirmed in it
      laggard_likely_bottleneck{stage}     1 for the likely bottleneck
    and, once the sink is attached to its Analyzer (an Analyzer does that for every sink it is
    given), from the full report:
      laggard_rank_stage_ms{rank,stage,cohort}  every rank's time in every stage
      laggard_straggler_slowdown{rank,stage,host,role}  each rank named in the window (role
                                           straggler or waiting), its time over the reference

    Only the latest report is served (series of ranks or stages no longer named disappear).
    The HTTP server starts at the first report (only the analysis rank gets reports, so ranks
    sharing a host do not compete for the port); port=0 takes a free one (see .port).
    port=None starts no server: the metrics go into `registry` (default prometheus_client's
    REGISTRY), for a server the program already runs. A port that cannot be bound is raised at
    each report (counted, warned) until one can be.

    The server listens on the loopback interface only (addr="127.0.0.1"): the endpoint has no
    authentication, so other hosts reach it only when asked for, with addr="0.0.0.0" (every
    interface) or one interface's address, e.g. for a Prometheus on another node
    (docs/reference/security.md). min_period_s: an Analyzer updates it at most this often (see
    SinkDelivery)."""

    def __init__(self, port=None, addr="127.0.0.1", registry=None, host=None, min_period_s=1.0):
        import socket

        import prometheus_client

        self._prom = prometheus_client
        self.min_period_s = _period(min_period_s, "PrometheusSink")
        self.addr = addr
        self.port = port
        self.host = host if host is not None else socket.gethostname()
        if registry is None:
            registry = prometheus_client.CollectorRegistry() if port is not None \
                else prometheus_client.REGISTRY
        self.registry = registry
        self._lock = threading.Lock()
        self._families = []  # the latest report, as metric families (built off the lock)
        self._server = None
        self._analyzer = None  # weak reference, see attach
        self._hosts = {}  # rank -> host, learned from findings
        self._rank = 0
        registry.register(self)

    def attach(self, analyzer):
        """Called by the Analyzer given this sink: its rank, and its full reports."""
        import weakref

        self._analyzer = weakref.ref(analyzer)
        self._rank = int(getattr(analyzer, "rank", 0))

    # prometheus_client's collector protocol: called by the registry at every scrape
    def collect(self):
        with self._lock:
            return list(self._families)

    def describe(self):
        return []  # nothing to check at registration: the families change with the reports

    def __call__(self, step, metrics):
        from prometheus_client.core import GaugeMetricFamily

        numbers, texts = _numbers(metrics)
        report = None
        analyzer = self._analyzer() if self._analyzer is not None else None
        if analyzer is not None:
            report = analyzer.latest_report()
        if report:
            for finding in report.get("stragglers", []) + report.get("waiting", []):
                if finding.get("host"):
                    self._hosts[int(finding["rank"])] = finding["host"]
        families = {}

        def family(name, doc, labels=()):
            if name not in families:
                families[name] = GaugeMetricFamily(name, doc, labels=list(labels))
            return families[name]

        for name, value in sorted(numbers.items()):
            parts = name.split("/")
            if len(parts) == 3 and parts[0] == "straggler" and parts[2] in _STAGE_FIELDS:
                stage, field = parts[1], parts[2]
                if field == "local_ms":
                    family("laggard_stage_local_ms", "the analysis rank's own time in the "
                           "stage (ms)", ("stage", "rank", "host")).add_metric(
                        [stage, str(self._rank), self.host], value)
                else:
                    family("laggard_stage_" + field, "straggler/<stage>/" + field,
                           ("stage",)).add_metric([stage], value)
            elif len(parts) == 2 and parts[0] == "straggler":
                family(prometheus_name(parts[1]), name).add_metric([], value)
        family("laggard_report_step", "the step of the latest report").add_metric([], step)
        confirmed = family("laggard_confirmed_straggler", "1 for each (rank, stage) confirmed "
                           "in the latest report", ("rank", "stage", "host"))
        for rank, stage in parse_confirmed(texts.get("straggler/confirmed")):
            confirmed.add_metric([str(rank), stage, self._hosts.get(rank, "")], 1.0)
        bottleneck = texts.get("straggler/likely_bottleneck")
        if bottleneck:
            family("laggard_likely_bottleneck", "1 for the stage that most likely limits the "
                   "step", ("stage",)).add_metric([bottleneck], 1.0)
        if report:
            ranks = family("laggard_rank_stage_ms", "each rank's time in each stage (ms)",
                           ("rank", "stage", "cohort"))
            for stage in report.get("stages", []):
                for rank, ms in sorted(stage.get("rank_ms", {}).items()):
                    ranks.add_metric([str(rank), stage["stage"], stage.get("cohort", "")], ms)
            named = family("laggard_straggler_slowdown", "each rank named in the latest report: "
                           "its time over the reference", ("rank", "stage", "host", "role"))
            for finding in report.get("stragglers", []) + report.get("waiting", []):
                named.add_metric([str(finding["rank"]), finding["stage"],
                                  finding.get("host", ""), finding.get("role", "")],
                                 float(finding.get("slowdown", 0.0)))
        with self._lock:
            self._families = list(families.values())
            start = self._server is None and self.port is not None
        if start:
            self._start_server()

    def _start_server(self):
        started = self._prom.start_http_server(int(self.port), addr=self.addr,
                                               registry=self.registry)
        server = started[0] if isinstance(started, tuple) else started
        with self._lock:
            self._server = server
            if server is not None and hasattr(server, "server_address"):
                self.port = int(server.server_address[1])

    def close(self):
        """Stops the HTTP server; the registry keeps the last report (port=None)."""
        with self._lock:
            server, self._server = self._server, None
        if server is not None and hasattr(server, "shutdown"):
            server.shutdown()
            server.server_close()
