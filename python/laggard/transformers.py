"""laggard in the Hugging Face Trainer: one TrainerCallback.

    from laggard.transformers import LaggardCallback
    trainer = transformers.Trainer(model, args, train_dataset=ds,
                                   callbacks=[LaggardCallback()])

The Analyzer is created at on_train_begin on every rank (the Trainer has initialized
torch.distributed by then: torchrun, accelerate launch) with the keyword arguments given here
(laggard.Analyzer's), and closed at on_train_end. One laggard step per optimizer update,
numbered by state.global_step before it, the same on every rank; the step begins where the
Trainer starts fetching the update's batches and ends at on_step_end, so the Trainer's logging,
evaluation and saving between updates are outside every step.

At on_train_begin the callback finds the Trainer that calls it (the `self` of a frame up the
call stack: callbacks are not given the Trainer) and, for the run, sets two attributes on that
Trainer object (its class is untouched; both are put back at on_train_end):
  - get_batch_samples, the Trainer's batch fetch for an update: timed as `dataloader`;
  - accelerator.gather: the Trainer's all-gathers within an update, timed as `allgather`
    (kind communication). In the batch fetch the Trainer gathers the update's count of label
    tokens from every rank (average_tokens_across_devices, on by default), so the fetch ends
    with a wait for the slowest rank's loading: timed apart, the slow rank's own loading is
    its `dataloader` time and the others' wait for it is their `allgather`, never a verdict.

Stages:
  dataloader  the batch fetch (every micro-batch of the update), less its all-gather.
  allgather   (communication) the Trainer's accelerator.gather calls within the update: the
              label-token count in the fetch, include_num_input_tokens_seen's count after each
              micro-batch; one inside a stage this callback times (optimizer) stays in it.
  forward     the model's forward (laggard.torch.instrument on the Trainer's model; every
              micro-batch of a gradient-accumulation cycle adds to the step's stage).
  backward    from the backward call on the loss to the end of its autograd work: the rank's
              own compute.
  communication  under DDP, the rank's wait for the gradient all-reduce after its backward
              (laggard.torch on the Trainer's DistributedDataParallel wrapper, its
              model_wrapped; where it is not a DDP wrapper of the model, the model alone is
              instrumented and the wait counts in backward).
  optimizer   from on_pre_optimizer_step to on_optimizer_step (the optimizer's step); gradient
              clipping comes before it, the lr scheduler after it (untimed).

The latest report's numeric straggler/* metrics join the Trainer's own log (on_log: the `logs`
dict, and so state.log_history and the callbacks after this one) at each logging step when a
report is newer than the last one logged. report_to's trackers are callbacks the Trainer puts
before those given in `callbacks=`; to give them the metrics too, put this callback first:
`trainer.callback_handler.callbacks.insert(1, LaggardCallback(...))` (after
DefaultFlowCallback). Nothing here raises into training: failures are warnings, counted in
straggler/report_errors; an exception of the Trainer's own fetch or gather passes through
unchanged.
"""

import logging

from ._log import ErrorCounter, log_once

try:
    from transformers import TrainerCallback as _Callback
except ImportError as e:  # pragma: no cover - depends on what is installed
    raise ImportError("laggard.transformers needs the transformers package: %s" % e) from e

FETCH_STAGE = "dataloader"
GATHER_STAGE = "allgather"


class LaggardCallback(_Callback):
    """Finds the straggler rank and stage of a Hugging Face Trainer run. `analyzer_options`:
    laggard.Analyzer's keyword arguments (interval, log_dir, sinks, preset, ...); enabled=True
    unless given. metrics: what joins the Trainer's log of a report, "compact" (the default:
    the summary and the per-stage metrics of the stages with a confirmed straggler,
    laggard.sinks.tracker_metrics) or "full"."""

    def __init__(self, metrics="compact", **analyzer_options):
        from .sinks import check_metric_set

        self.metrics = check_metric_set(metrics, "LaggardCallback")
        analyzer_options.setdefault("enabled", True)
        self.analyzer_options = analyzer_options
        self.analyzer = None
        self.last_analyzer = None  # the latest run's analyzer, also after it was closed
        self.instrumentation = None
        self.fetch_timed = False  # whether this run's batch fetch is timed (the Trainer found)
        self.reports_logged = 0
        self._errors = ErrorCounter()
        self._open = None
        self._step = 0
        self._trainer = None
        self._patches = []  # (object, attribute, wrapper, the instance value it replaced)
        self._in_fetch = False
        self._begun_at_fetch = False  # the update's step was begun by its batch fetch
        self._logged_report = None  # identity of the latest metrics logged
        self.stopped_step = None  # the stop policy's step, once this run was stopped by it
        self.stop_reason = None

    def _failed(self, kind, error):
        an = self.last_analyzer
        errors = getattr(an, "_errors", None) or self._errors
        errors.report(kind, error)

    # -- lifecycle ---------------------------------------------------------------------------

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        import laggard

        if self.analyzer is not None:
            self._close()
        self.analyzer = self.last_analyzer = laggard.Analyzer(**self.analyzer_options)
        self.stopped_step = self.stop_reason = None
        self._open = None
        self._in_fetch = self._begun_at_fetch = False
        self._step = int(state.global_step)
        self.fetch_timed = False
        if not self.analyzer.enabled:
            return
        trainer = None
        try:
            trainer = _calling_trainer()
        except Exception as e:
            self._failed("transformers trainer", e)
        if model is not None:
            try:
                import laggard.torch

                self.instrumentation = laggard.torch.instrument(
                    self.analyzer, model=_ddp_wrapper(trainer, model) or model)
            except Exception as e:
                self._failed("transformers instrument", e)
        try:
            self._time_fetch(trainer)
        except Exception as e:
            self._failed("transformers fetch", e)
        if not self.fetch_timed:
            log_once("transformers-fetch", logging.INFO, "laggard: the Trainer's batch fetch "
                     "is not timed (no Trainer with get_batch_samples found up the call stack "
                     "of on_train_begin); steps begin at on_step_begin")

    def on_train_end(self, args, state, control, **kwargs):
        self._close()

    def _close(self):
        an, self.analyzer = self.analyzer, None
        self._unpatch()
        if an is None:
            return
        try:
            self._end_section()
            an.close()
        except Exception as e:
            self._failed("transformers close", e)

    # -- the Trainer's batch fetch and all-gathers -------------------------------------------

    def _time_fetch(self, trainer):
        fetch = getattr(trainer, "get_batch_samples", None)
        if trainer is None or not callable(fetch):
            return
        self._trainer = trainer

        def get_batch_samples(*args, **kwargs):
            if self.analyzer is None or self._in_fetch:
                return fetch(*args, **kwargs)
            self._fetch_begins()
            try:
                return fetch(*args, **kwargs)
            finally:
                self._fetch_ends()

        self._patch(trainer, "get_batch_samples", get_batch_samples)
        self.fetch_timed = True
        accelerator = getattr(trainer, "accelerator", None)
        gather = getattr(accelerator, "gather", None)
        if callable(gather):
            def timed_gather(*args, **kwargs):
                an = self.analyzer
                if an is None or not an.sampled:
                    return gather(*args, **kwargs)
                resume = self._gather_begins()
                if resume is None:
                    return gather(*args, **kwargs)
                try:
                    return gather(*args, **kwargs)
                finally:
                    self._gather_ends(resume)

            self._patch(accelerator, "gather", timed_gather)

    def _patch(self, obj, name, wrapper):
        # An instance attribute: the class (and every other Trainer) is untouched.
        self._patches.append((obj, name, wrapper, obj.__dict__.get(name)))
        setattr(obj, name, wrapper)

    def _unpatch(self):
        patches, self._patches = self._patches, []
        self._trainer = None
        for obj, name, wrapper, before in reversed(patches):
            try:
                if obj.__dict__.get(name) is not wrapper:
                    continue  # replaced since by someone else: theirs stays (ours passes through)
                if before is None:
                    delattr(obj, name)
                else:
                    setattr(obj, name, before)
            except Exception as e:
                self._failed("transformers close", e)

    def _fetch_begins(self):
        an = self.analyzer
        try:
            if not self._begun_at_fetch:
                # (still set: the previous fetch returned no batch at an epoch's end, and no
                # update began; global_step has not moved, so this fetch continues that step)
                self._end_section()
                self._step = int(self._trainer.state.global_step)
                an.begin_step(self._step)
                self._begun_at_fetch = True
            self._in_fetch = True
            self._begin_section(FETCH_STAGE)
        except Exception as e:
            self._failed("transformers fetch", e)

    def _fetch_ends(self):
        self._in_fetch = False
        try:
            self._end_section()
        except Exception as e:
            self._failed("transformers fetch", e)

    def _gather_begins(self):
        """Opens the all-gather's section; returns the section to resume after it ("" for
        none), or None when the gather is not timed apart (inside a stage of this callback's
        other than the fetch)."""
        try:
            if self._in_fetch:
                resume = FETCH_STAGE
            elif self._open is None:
                resume = ""
            else:
                return None
            self._begin_section(GATHER_STAGE, "communication")
            return resume
        except Exception as e:
            self._failed("transformers gather", e)
            return None

    def _gather_ends(self, resume):
        try:
            self._end_section()
            if resume and self._in_fetch and self.analyzer is not None:
                self._begin_section(resume)
        except Exception as e:
            self._failed("transformers gather", e)

    # -- sections ----------------------------------------------------------------------------

    def _begin_section(self, name, kind=None):
        self._end_section()
        section = self.analyzer.section(name, kind)
        section.__enter__()
        self._open = section

    def _end_section(self):
        section, self._open = self._open, None
        if section is not None:
            section.__exit__(None, None, None)

    # -- the update ----------------------------------------------------------------------------

    def on_step_begin(self, args, state, control, **kwargs):
        an = self.analyzer
        if an is None or not an.enabled:
            return
        try:
            if self._begun_at_fetch:
                self._begun_at_fetch = False
            else:  # the fetch is not timed: the step begins here
                self._step = int(state.global_step)
                an.begin_step(self._step)
        except Exception as e:
            self._failed("transformers on_step_begin", e)

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        if self.analyzer is None:
            return
        try:
            self._begin_section("optimizer")
        except Exception as e:
            self._failed("transformers on_pre_optimizer_step", e)

    def on_optimizer_step(self, args, state, control, **kwargs):
        if self.analyzer is None:
            return
        try:
            self._end_section()
        except Exception as e:
            self._failed("transformers on_optimizer_step", e)

    def on_step_end(self, args, state, control, **kwargs):
        an = self.analyzer
        if an is None or not an.enabled:
            return
        try:
            self._end_section()
            an.end_step()
        except Exception as e:
            self._failed("transformers on_step_end", e)
        self._act_on_stop(args, state, control, an)

    def _act_on_stop(self, args, state, control, an):
        """The stop policy (Analyzer(policy="stop"); docs/reference/python.md, "Stopping under
        each framework"):
        at the agreed step boundary every rank sets the Trainer's own
        control.should_training_stop, and (unless save_strategy is "no") control.should_save,
        so that the Trainer writes a checkpoint at the stop step; the reason joins the Trainer's
        log history (laggard_stop, laggard_stopped_step)."""
        if not an.should_stop or self.stopped_step is not None:
            return
        try:
            self.stopped_step = an.stop_step
            self.stop_reason = an.stop_reason
            control.should_training_stop = True
            if str(getattr(args, "save_strategy", "no")).lower().split(".")[-1] != "no":
                control.should_save = True
            history = getattr(state, "log_history", None)
            if history is not None:
                history.append({"laggard_stop": an.stop_reason,
                                "laggard_stopped_step": an.stop_step, "step": state.global_step})
        except Exception as e:
            self._failed("transformers stop", e)

    # -- the Trainer's log ---------------------------------------------------------------------

    def on_log(self, args, state, control, logs=None, **kwargs):
        an = self.analyzer or self.last_analyzer
        if an is None or logs is None:
            return
        from .sinks import tracker_metrics

        try:
            metrics = an.latest_metrics()
            if not metrics or metrics == self._logged_report:
                return
            self._logged_report = metrics
            values = {k: float(v) for k, v in tracker_metrics(metrics, self.metrics).items()
                      if isinstance(v, (int, float)) and not isinstance(v, bool)}
            logs.update(values)
            history = getattr(state, "log_history", None)
            if history and history[-1].get("step") == state.global_step:
                history[-1].update(values)  # the Trainer appended this log before on_log
            self.reports_logged += 1
        except Exception as e:
            self._failed("transformers on_log", e)


def _calling_trainer():
    """The transformers.Trainer whose method called this callback's on_train_begin, or None.

    The Trainer calls on_train_begin from one of its own methods, so it is the `self` of a
    frame up the call stack (a few frames: the callback handler's two). Costs one walk of the
    stack, once per train()."""
    import sys

    trainer_type = getattr(sys.modules.get("transformers.trainer"), "Trainer", None)
    if trainer_type is None:
        return None
    frame = sys._getframe(1)
    while frame is not None:
        owner = frame.f_locals.get("self")
        if isinstance(owner, trainer_type):
            return owner
        frame = frame.f_back
    return None


def _ddp_wrapper(trainer, model):
    """The DistributedDataParallel around `model` that `trainer` trains (its model_wrapped, set
    before on_train_begin), or None. Callbacks are given Trainer.model, not the wrapper;
    laggard.torch needs the wrapper to tell the rank's backward from its wait for the
    all-reduce."""
    import sys

    torch = sys.modules.get("torch")
    if trainer is None or torch is None or not (
            torch.distributed.is_available() and torch.distributed.is_initialized()):
        return None
    wrapped = getattr(trainer, "model_wrapped", None)
    if isinstance(wrapped, torch.nn.parallel.DistributedDataParallel) and \
            getattr(wrapped, "module", None) is model:
        return wrapped
    return None
