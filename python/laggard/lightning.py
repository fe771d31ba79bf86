"""laggard in PyTorch Lightning: one callback.

    from laggard.lightning import LaggardCallback
    trainer = lightning.Trainer(strategy="ddp", callbacks=[LaggardCallback(interval=10)])

Works with the `lightning` package (lightning.pytorch) and with `pytorch_lightning`. The
Analyzer is created at fit start on every rank (after Lightning has initialized
torch.distributed, so laggard's side channel spans the ranks) with the keyword arguments given
here (laggard.Analyzer's), and closed when fit's training ends (on_train_end), or when fit
fails.

Stages, from Lightning's hooks (one laggard step per training batch, numbered from 0 by this
callback, the same on every rank):

  between_batches  (kind communication) from the end of the previous batch (this callback's
                 on_train_batch_end) to the batch fetch: Lightning's bookkeeping and the callbacks
                 after this one, and, with several ranks, the broadcast from rank 0 that Lightning
                 makes before every batch (its SIGTERM check) — a collective, so rank 0 waits
                 there for a late rank: its excess is waiting, not a verdict.
  dataloader     the batch fetch itself (Lightning reports it to its profiler: this callback
                 wraps trainer.profiler, passing every call on), on every sampled step: where
                 no step was begun at the previous batch's end (an epoch's first batch, the
                 first after a validation), the step begins at the fetch, without
                 between_batches. Lightning makes no collective inside the fetch.
  forward        training_step: from on_train_batch_start to on_before_backward; under DDP,
                 the DDP model's forward (laggard.torch.instrument), which is training_step.
  backward       from on_before_backward to on_after_backward; under DDP, the rank's own
                 backward compute, and
  communication  (DDP only) its wait for the gradient all-reduce, apart: see laggard.torch.
  optimizer      from on_before_optimizer_step (after the closure that runs training_step and
                 backward) to the end of the batch: the optimizer's update, gradient clipping,
                 the lr scheduler.

Reports go, on the analysis rank, to every logger of the Trainer (trainer.loggers):
log_metrics of the numeric straggler/* metrics at the trainer's global step, with
straggler/step (laggard's step of the report); from the training thread, after the batch.
metrics="compact" (the default) logs the summary and the per-stage metrics of the stages with
a confirmed straggler only (laggard.sinks.tracker_metrics); metrics="full" every stage's.
Text metrics (straggler/confirmed, likely_bottleneck, hints) are in analyzer.latest_metrics()
and, with log_dir, in reports.jsonl. Nothing here raises into training: a failure is a warning
and counted in straggler/report_errors.
"""

import collections
import time

from ._log import ErrorCounter

try:  # the `lightning` package, else the older `pytorch_lightning`
    from lightning.pytorch.callbacks import Callback as _Callback
except ImportError:  # pragma: no cover - depends on what is installed
    from pytorch_lightning.callbacks import Callback as _Callback


class _Reports:
    """A sink that keeps the reports for the training thread to log (sinks run on laggard's
    thread; loggers are not thread-safe)."""

    def __init__(self, maxlen=1000):
        self.queue = collections.deque(maxlen=maxlen)  # append/popleft are thread-safe

    def __call__(self, step, metrics):
        self.queue.append((step, metrics))

    def close(self):
        pass


def _numeric(metrics):
    return {k: float(v) for k, v in metrics.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)}


class LaggardCallback(_Callback):
    """Finds the straggler rank and stage of a Lightning fit. `analyzer_options`: laggard.Analyzer's
    keyword arguments (interval, log_dir, sinks, preset, ...); `enabled=True` unless given.
    log_to_loggers: log each report through trainer.loggers (analysis rank).
    record_loss: the loss of each sampled step goes into its sample's values (.item(): a GPU
    sync, on sampled steps only).
    metrics: what the loggers get of a report, "compact" (the default) or "full"."""

    def __init__(self, log_to_loggers=True, record_loss=True, metrics="compact",
                 **analyzer_options):
        super().__init__()
        from .sinks import check_metric_set

        self.metrics = check_metric_set(metrics, "LaggardCallback")
        self.record_loss = bool(record_loss)
        analyzer_options.setdefault("enabled", True)
        self.analyzer_options = analyzer_options
        self.log_to_loggers = bool(log_to_loggers)
        self.analyzer = None
        self.instrumentation = None
        self.reports_logged = 0
        self._reports = _Reports()
        self._errors = ErrorCounter()
        self._step = 0
        self._open = None  # the section open now (a context manager), or None
        self._open_name = None
        self._early = False  # the next batch's step was begun at the end of this one
        self._in_batch = False  # between on_train_batch_start and on_train_batch_end
        self._ddp = False
        self._fetch_t0 = None  # perf_counter at the start of a sampled step's batch fetch
        self.stopped_step = None  # the stop policy's step, once this fit was stopped by it
        self.stop_reason = None

    # -- lifecycle ---------------------------------------------------------------------------

    def on_fit_start(self, trainer, pl_module):
        import laggard

        if self.analyzer is not None:  # a second fit with the same callback: a new analyzer
            self._close()
        options = dict(self.analyzer_options)
        sinks = list(options.pop("sinks", ()) or ())
        if self.log_to_loggers:
            sinks.append(self._reports)
        # Setup misuse (a bad setting) raises here, before training starts.
        self.analyzer = laggard.Analyzer(sinks=sinks, **options)
        self.stopped_step = self.stop_reason = None
        self._step = 0
        self._early = False
        self._in_batch = False
        self._open = None

    def _wrap_profiler(self, trainer):
        profiler = getattr(trainer, "profiler", None)
        if profiler is not None and not isinstance(profiler, _FetchTimer):
            trainer.profiler = _FetchTimer(profiler, self)

    def _unwrap_profiler(self, trainer):
        profiler = getattr(trainer, "profiler", None)
        if isinstance(profiler, _FetchTimer) and profiler.callback is self:
            trainer.profiler = profiler.inner

    def _fetch(self, started):
        # Called by the profiler wrapper around the batch fetch (training only).
        an = self.analyzer
        if an is None or not an.enabled or self._in_batch or (not started and not self._early):
            # (inside a batch: a training_step that fetches for itself, from a dataloader_iter;
            # that fetch stays in the stage it happens in)
            return
        try:
            if started:
                if not self._early:
                    # No step was begun at the previous batch's end (an epoch's first batch,
                    # the first after a validation, a loader of unknown length): it begins
                    # here, so that every sampled step's fetch is timed.
                    an.begin_step(self._step)
                    self._early = True
                self._begin_section("dataloader")
                # The fetch's host time is also the resource host_data_wait_ms (sampled steps).
                self._fetch_t0 = time.perf_counter() if an.sampled else None
            else:
                self._end_section()
                t0, self._fetch_t0 = self._fetch_t0, None
                res = an.resources
                if t0 is not None and res is not None and an.sampled:
                    res.add_data_wait((time.perf_counter() - t0) * 1000.0, True)
        except Exception as e:
            self._failed("lightning fetch", e)

    def on_train_start(self, trainer, pl_module):
        # The strategy has wrapped the model by now: under DDP, laggard.torch splits the
        # backward into the rank's own compute and its wait for the all-reduce.
        an = self.analyzer
        if an is None or not an.enabled:
            return
        try:
            self._wrap_profiler(trainer)
            from torch.nn.parallel import DistributedDataParallel

            model = getattr(trainer.strategy, "model", None)
            if isinstance(model, DistributedDataParallel):
                import laggard.torch

                self.instrumentation = laggard.torch.instrument(
                    an, model=model, record_loss=self.record_loss)
                self._ddp = "backward" in self.instrumentation.stages
        except Exception as e:
            self._failed("lightning instrument", e)

    def _act_on_stop(self, trainer, pl_module, an):
        """The stop policy (Analyzer(policy="stop"); docs/reference/python.md, "Stopping under
        each framework"):
        at the agreed step boundary every rank sets Lightning's own trainer.should_stop, so the fit
        ends after this batch as an early stop does (callbacks, checkpoints and loggers run their
        end-of-fit hooks), with the reason in the log and in the loggers (laggard/stopped_step)."""
        if not an.should_stop or self.stopped_step is not None:
            return
        self.stopped_step = an.stop_step
        self.stop_reason = an.stop_reason
        trainer.should_stop = True
        if self.log_to_loggers and an.is_analysis_rank:
            for lg in trainer.loggers:
                try:
                    lg.log_metrics({"laggard/stopped_step": float(an.stop_step)},
                                   step=trainer.global_step)
                except Exception as e:
                    self._failed("lightning stop", e)

    def on_train_end(self, trainer, pl_module):
        # The end of fit's training loop: before Lightning's teardown unwraps the DDP model
        # (laggard's hooks come out first) and while every rank can still make the final gather.
        self._close(trainer)

    def on_fit_end(self, trainer, pl_module):
        self._close(trainer)

    def on_exception(self, trainer, pl_module, exception):
        self._close(trainer)

    def teardown(self, trainer, pl_module, stage):
        if stage == "fit":
            self._close(trainer)

    def _close(self, trainer=None):
        an, self.analyzer = self.analyzer, None
        if an is None:
            return
        self._last = an  # results stay readable: latest_metrics(), counters()
        try:
            if trainer is not None:
                self._unwrap_profiler(trainer)
            self._end_section()
            an.close()
            if trainer is not None:
                self._log_reports(trainer, an)
        except Exception as e:
            self._failed("lightning close", e)

    @property
    def last_analyzer(self):
        """The analyzer of the latest fit (also after it was closed)."""
        return self.analyzer if self.analyzer is not None else getattr(self, "_last", None)

    def _failed(self, kind, error):
        # Counted where straggler/report_errors counts (the analyzer's counter), else here.
        an = self.analyzer if self.analyzer is not None else getattr(self, "_last", None)
        errors = getattr(an, "_errors", None) or self._errors
        errors.report(kind, error)

    # -- sections ----------------------------------------------------------------------------

    def _begin_section(self, name, kind=None):
        self._end_section()
        section = self.analyzer.section(name, kind)
        section.__enter__()
        self._open = section
        self._open_name = name

    def _end_section(self):
        section, self._open = self._open, None
        if section is not None:
            section.__exit__(None, None, None)

    # -- the training batch ------------------------------------------------------------------

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self._in_batch = True
        an = self.analyzer
        if an is None or not an.enabled:
            return
        try:
            if self._early:  # begun at the previous batch's end: the dataloader section ends
                self._early = False
                self._end_section()
            else:
                an.begin_step(self._step)
            if not self._ddp:
                self._begin_section("forward")
        except Exception as e:
            self._failed("lightning on_train_batch_start", e)

    def on_before_backward(self, trainer, pl_module, loss):
        an = self.analyzer
        if an is None or self._ddp:  # under DDP laggard.torch.instrument records the loss
            return
        try:
            if an.sampled and self.record_loss:  # .item() syncs a GPU: sampled steps only
                an.record("loss", loss.detach().item())
            self._begin_section("backward")
        except Exception as e:
            self._failed("lightning on_before_backward", e)

    def on_after_backward(self, trainer, pl_module):
        if self.analyzer is None or self._ddp:
            return
        try:
            self._end_section()
        except Exception as e:
            self._failed("lightning on_after_backward", e)

    def on_before_optimizer_step(self, trainer, pl_module, optimizer, *args):
        if self.analyzer is None:
            return
        try:
            self._begin_section("optimizer")
        except Exception as e:
            self._failed("lightning on_before_optimizer_step", e)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self._in_batch = False
        an = self.analyzer
        if an is None or not an.enabled:
            return
        try:
            self._end_section()
            an.end_step()
            self._step += 1
            self._log_reports(trainer, an)
            self._act_on_stop(trainer, pl_module, an)
            # The next batch's fetch is timed as its "dataloader" stage when the next batch is
            # sure to follow in this epoch (an epoch's end, a validation or a stop come between
            # batches and are not data loading).
            total = trainer.num_training_batches
            last = isinstance(total, int) and batch_idx + 1 >= total
            stopping = trainer.should_stop or (
                trainer.max_steps is not None and trainer.max_steps >= 0 and
                trainer.global_step >= trainer.max_steps)
            if not (last or stopping or total == float("inf")):
                an.begin_step(self._step)
                self._early = True
                self._begin_section("between_batches", "communication")
        except Exception as e:
            self._failed("lightning on_train_batch_end", e)

    def _abandon_early_step(self):
        # Something other than the next batch came first (validation, the epoch's end): the
        # step begun for the next batch ends here, without its open section, and that batch
        # goes untimed (on every rank alike, so steps stay matched).
        if not self._early or self.analyzer is None:
            return
        self._early = False
        section, self._open = self._open, None
        an = self.analyzer
        try:
            if section is not None and an.sampled:
                an._recorder.cancel(an.stage_id(self._open_name))
            an.end_step()
            self._step += 1
        except Exception as e:
            self._failed("lightning step", e)

    def on_validation_start(self, trainer, pl_module):
        self._abandon_early_step()

    def on_train_epoch_end(self, trainer, pl_module):
        self._abandon_early_step()

    # -- reports -------------------------------------------------------------------------------

    def _log_reports(self, trainer, an):
        from .sinks import tracker_metrics

        queue = self._reports.queue
        if not queue:
            return
        loggers = list(getattr(trainer, "loggers", None) or ())
        while queue:
            step, metrics = queue.popleft()
            values = _numeric(tracker_metrics(metrics, self.metrics))
            values["straggler/step"] = float(step)
            for logger in loggers:
                try:
                    logger.log_metrics(values, step=trainer.global_step)
                except Exception as e:
                    self._failed("lightning logger %s" % type(logger).__name__, e)
            self.reports_logged += 1

    def counters(self):
        """The analyzer's counters, with this callback's own failures added to report_errors."""
        an = self.last_analyzer
        out = an.counters() if an is not None else {"report_errors": 0}
        out["report_errors"] = out.get("report_errors", 0) + self._errors.total  # before fit
        out["reports_logged"] = self.reports_logged
        return out


class _FetchTimer:
    """Stands in for trainer.profiler while fitting: tells the callback when Lightning starts
    and stops fetching a training batch (the "train_dataloader_next" action Lightning reports
    to its profiler), and passes every call on to the profiler it replaced."""

    _FETCH = "train_dataloader_next"

    def __init__(self, inner, callback):
        self.inner = inner
        self.callback = callback

    def start(self, action_name):
        if action_name.endswith(self._FETCH):
            self.callback._fetch(True)
        return self.inner.start(action_name)

    def stop(self, action_name):
        result = self.inner.stop(action_name)
        if action_name.endswith(self._FETCH):
            self.callback._fetch(False)
        return result

    def __getattr__(self, name):
        return getattr(self.inner, name)
