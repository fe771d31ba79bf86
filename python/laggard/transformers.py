"""laggard in the Hugging Face Trainer: one TrainerCallback.

    from laggard.transformers import LaggardCallback
    trainer = transformers.Trainer(model, args, train_dataset=ds,
                                   callbacks=[LaggardCallback(interval=10)])

The Analyzer is created at on_train_begin on every rank (the Trainer has initialized
torch.distributed by then: torchrun, accelerate launch) with the keyword arguments given here
(laggard.Analyzer's), and closed at on_train_end. One laggard step per optimizer update
(state.global_step before it), the same on every rank.

Stages:
  dataloader  from the end of the previous update (on_step_end) to the start of this one
              (on_step_begin): the Trainer fetches the update's batches there. Not timed when
              the Trainer logs, evaluates or saves in between (DefaultFlowCallback's decision
              for that step is known at on_step_end), nor for an epoch's first update.
  forward     the model's forward (laggard.torch.instrument on the Trainer's model; every
              micro-batch of a gradient-accumulation cycle adds to the step's stage).
  backward    from the backward call on the loss to the end of its autograd work: the rank's
              own compute.
  communication  under DDP, the rank's wait for the gradient all-reduce after its backward
              (laggard.torch on the Trainer's DistributedDataParallel wrapper, its
              model_wrapped: callbacks are given the model inside it, so at on_train_begin the
              callback takes model_wrapped from the Trainer that calls it, found on the call
              stack; where it is not a DDP wrapper of that model, the model alone is
              instrumented and the wait counts in backward).
  optimizer   from on_pre_optimizer_step to on_optimizer_step (the optimizer's step); gradient
              clipping comes before it, the lr scheduler after it (untimed).

The latest report's numeric straggler/* metrics join the Trainer's own log (on_log: the `logs`
dict, and so state.log_history and the callbacks after this one) at each logging step when a
report is newer than the last one logged. report_to's trackers are callbacks the Trainer puts
before those given in `callbacks=`; to give them the metrics too, put this callback right after
DefaultFlowCallback (the first; its decisions for a step are read in on_step_end):
`trainer.callback_handler.callbacks.insert(1, LaggardCallback(...))`. Nothing here raises into
training: failures are warnings, counted in straggler/report_errors.
"""

from ._log import ErrorCounter

try:
    from transformers import TrainerCallback as _Callback
except ImportError as e:  # pragma: no cover - depends on what is installed
    raise ImportError("laggard.transformers needs the transformers package: %s" % e) from e


class LaggardCallback(_Callback):
    """Finds the straggler rank and stage of a Hugging Face Trainer run. `analyzer_options`:
    laggard.Analyzer's keyword arguments (interval, log_dir, sinks, preset, ...); enabled=True
    unless given."""

    def __init__(self, **analyzer_options):
        analyzer_options.setdefault("enabled", True)
        self.analyzer_options = analyzer_options
        self.analyzer = None
        self.last_analyzer = None  # the latest run's analyzer, also after it was closed
        self.instrumentation = None
        self.reports_logged = 0
        self._errors = ErrorCounter()
        self._open = None
        self._early = False
        self._step = 0
        self._logged_report = None  # identity of the latest metrics logged

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
        self._early = False
        self._open = None
        self._step = int(state.global_step)
        if model is not None and self.analyzer.enabled:
            try:
                import laggard.torch

                self.instrumentation = laggard.torch.instrument(
                    self.analyzer, model=_ddp_wrapper(model) or model)
            except Exception as e:
                self._failed("transformers instrument", e)

    def on_train_end(self, args, state, control, **kwargs):
        self._close()

    def _close(self):
        an, self.analyzer = self.analyzer, None
        if an is None:
            return
        try:
            self._end_section()
            an.close()
        except Exception as e:
            self._failed("transformers close", e)

    # -- sections ----------------------------------------------------------------------------

    def _begin_section(self, name):
        self._end_section()
        section = self.analyzer.section(name)
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
            if self._early:
                self._early = False
                self._end_section()
            else:
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
            # The next update's fetch is its "dataloader" stage, unless the Trainer does
            # something else first (DefaultFlowCallback, which runs before callbacks given to
            # the Trainer, has set these for this step).
            busy = control.should_log or control.should_evaluate or control.should_save or \
                control.should_epoch_stop or control.should_training_stop or \
                (state.max_steps and state.global_step >= state.max_steps)
            if not busy:
                self._step = int(state.global_step)
                an.begin_step(self._step)
                self._early = True
                self._begin_section("dataloader")
        except Exception as e:
            self._failed("transformers on_step_end", e)

    def on_epoch_end(self, args, state, control, **kwargs):
        # The epoch ended before another update: the step begun for it ends here without its
        # dataloader section (its step time is the few microseconds since on_step_end).
        if not self._early or self.analyzer is None:
            return
        self._early = False
        an = self.analyzer
        section, self._open = self._open, None
        try:
            if section is not None and an.sampled:
                an._recorder.cancel(an.stage_id("dataloader"))
            an.end_step()
        except Exception as e:
            self._failed("transformers on_epoch_end", e)

    # -- the Trainer's log ---------------------------------------------------------------------

    def on_log(self, args, state, control, logs=None, **kwargs):
        an = self.analyzer or self.last_analyzer
        if an is None or logs is None:
            return
        try:
            metrics = an.latest_metrics()
            if not metrics or metrics == self._logged_report:
                return
            self._logged_report = metrics
            values = {k: float(v) for k, v in metrics.items()
                      if isinstance(v, (int, float)) and not isinstance(v, bool)}
            logs.update(values)
            history = getattr(state, "log_history", None)
            if history and history[-1].get("step") == state.global_step:
                history[-1].update(values)  # the Trainer appended this log before on_log
            self.reports_logged += 1
        except Exception as e:
            self._failed("transformers on_log", e)


def _ddp_wrapper(model):
    """The DistributedDataParallel around `model` that the Trainer trains, or None.

    Callbacks are given Trainer.model, not Trainer.model_wrapped (the outermost wrapper, set
    before on_train_begin); laggard.torch needs the wrapper to tell the rank's backward from its
    wait for the all-reduce. The Trainer calls on_train_begin from one of its own methods, so
    the Trainer is the `self` of a frame up the call stack (a few frames: the callback handler's
    two). Costs one walk of the stack, once per train()."""
    import sys

    torch = sys.modules.get("torch")
    trainer_type = getattr(sys.modules.get("transformers.trainer"), "Trainer", None)
    if torch is None or trainer_type is None or not (
            torch.distributed.is_available() and torch.distributed.is_initialized()):
        return None
    frame = sys._getframe(1)
    while frame is not None:
        owner = frame.f_locals.get("self")
        if isinstance(owner, trainer_type):
            wrapped = getattr(owner, "model_wrapped", None)
            if isinstance(wrapped, torch.nn.parallel.DistributedDataParallel) and \
                    getattr(wrapped, "module", None) is model:
                return wrapped
            return None
        frame = frame.f_back
    return None
