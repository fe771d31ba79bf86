"""Megatron-core's timers as laggard stages: laggard.megatron.Timers(analyzer, inner=None).

    import laggard, laggard.megatron
    an = laggard.Analyzer(cohort=laggard.megatron.pipeline_cohort())
    timers = laggard.megatron.Timers(an, inner=megatron_timers)  # Megatron's own Timers, or None
    config.timers = timers            # the schedule and finalize_model_grads
    optimizer.config.timers = timers  # Megatron's optimizer: its optimizer-* timers
    for iteration in range(n):
        an.begin_step(iteration)
        forward_backward_func(...)       # Megatron's schedule starts and stops the timers
        timers("optimizer", log_level=1).start(barrier=config.barrier_with_L1_time)
        optimizer.step()
        timers("optimizer").stop()
        an.end_step()

docs/howto/megatron.md is the user's guide.

Megatron's schedule, its finalize_model_grads and its optimizers call config.timers(name) and
start()/stop() the timer they get. Here each name is a laggard stage (stage_for()), timed on
sampled steps by the analyzer's recorder: forward-compute and backward-compute are `forward` and
`backward`; the pipeline's sends and receives are one communication stage, `pipeline-p2p`; the
gradient and parameter collectives (all-grads-sync, params-all-gather, *-all-reduce) are
communication stages of their own name; optimizer* is `optimizer`; batch-generator is a data
stage. Megatron's `forward-backward` (the whole schedule, around every other timer) and
`interval-time` (several iterations) are not stages. Any other name is a stage of its own, of
kind other. Timers that map to one stage and nest (Megatron-LM's `optimizer` around
`optimizer-inner-step`, ...) count once, as the outermost one.

Barriers and device synchronization: laggard adds none. Megatron asks for `barrier=True` where
its timers compare ranks (barrier_with_L1_time, on by default): so that a rank's time does not
include waiting for the others. laggard does not need that: each rank's own span is recorded
without waiting, and the ranks are compared later, off the training thread; the time a fast
rank spends waiting for a slow one shows in the communication stages (all-grads-sync,
pipeline-p2p), where it is evidence that the rank waits, never a verdict against it. So without
`inner` a barrier request is counted (Timers.barrier_requests) and nothing else happens, and
elapsed() reads the host clock without synchronizing the device.

With `inner` (Megatron's own Timers), the inner timer is started and stopped exactly as Megatron
asked, so its log() and write() keep working: its barriers and synchronizations are Megatron's
own, the same as without laggard. Those barriers are where the fast ranks now wait for a slow
one (at the next barrier, before the collective that would have held the wait), and that wait
must not land outside every stage: there it would be `untimed` time, kind other, and the fast
rank that waited most would be named for it. So on a sampled step every call into the inner
Timers that makes the ranks wait for each other (a start, stop or elapsed with barrier=True on
a real inner timer; log(), write() and get_all_timers_string(), which gather across ranks) is
timed as the communication stage `timers-barrier` (TIMERS_BARRIER_STAGE). A laggard stage that
is open at that moment (Megatron-LM's `optimizer` around megatron-core's optimizer-* timers,
each with a barrier) is closed for the call and reopened after it, so that the wait counts once,
as communication, and not in the stage around it. laggard's own span of a timer begins after the
inner start and ends before the inner stop, so it contains neither the barrier nor the
synchronization.

Failures inside laggard are counted and logged, never raised; an inner timer's own errors
(Megatron's assertions) reach the caller as they would without laggard.
"""

import re
import time

__all__ = ["Timers", "pipeline_cohort", "stage_for", "P2P_STAGE", "TIMERS_BARRIER_STAGE"]

_NAMED = {
    "forward-compute": ("forward", "compute"),
    "backward-compute": ("backward", "compute"),
    "batch-generator": ("batch-generator", "data"),
}
# The schedule's timer around all the others, and Megatron-LM's timer over several iterations:
# a stage of theirs would contain (or span) the step's other stages.
_NOT_STAGES = frozenset(("forward-backward", "interval-time"))
_P2P = re.compile(r"^(forward|backward)-(send|recv)(-(forward|backward)-(send|recv))?$")
_COLLECTIVE = re.compile(r"all-reduce|all-gather|reduce-scatter|grads-sync|all-to-all")
P2P_STAGE = "pipeline-p2p"
# Where the ranks wait for each other inside Megatron's own Timers (with `inner`): their barriers
# and the gathers of their log/write. Communication: a fast rank's time there is waiting.
TIMERS_BARRIER_STAGE = "timers-barrier"


def stage_for(name):
    """(stage, kind) that Megatron timer `name` is recorded as, or None when it is not a stage.

    forward-compute -> forward, backward-compute -> backward (compute); the pipeline's
    forward-send, backward-recv, forward-send-backward-recv, ... -> pipeline-p2p
    (communication); all-grads-sync, params-all-gather, *-all-reduce -> themselves
    (communication); optimizer, optimizer-* -> optimizer (compute); batch-generator -> itself
    (data); forward-backward, interval-time -> None; anything else -> itself (other)."""
    name = str(name)
    if name in _NAMED:
        return _NAMED[name]
    if name in _NOT_STAGES:
        return None
    if _P2P.match(name):
        return P2P_STAGE, "communication"
    if name == "optimizer" or name.startswith("optimizer-"):
        return "optimizer", "compute"
    if _COLLECTIVE.search(name):
        return name, "communication"
    return name, "other"


def pipeline_cohort():
    """"pp<k>" for pipeline stage k when megatron.core.parallel_state is initialised with more
    than one pipeline stage, else "": pass it as Analyzer(cohort=...), so that only ranks of the
    same pipeline stage (the same layers, the same work) are compared."""
    try:
        from megatron.core import parallel_state

        if parallel_state.model_parallel_is_initialized() and \
                parallel_state.get_pipeline_model_parallel_world_size() > 1:
            return "pp%d" % parallel_state.get_pipeline_model_parallel_rank()
    except Exception:  # not installed, or an older parallel_state: no cohorts
        pass
    return ""


class _Stage:
    """One laggard stage and how many of its timers are running (nesting counts once)."""

    __slots__ = ("name", "begin", "end", "depth", "generation")

    def __init__(self, name, begin, end):
        self.name = name
        self.begin = begin  # the recorder's marks: builtins, no-ops on unsampled steps
        self.end = end
        self.depth = 0
        self.generation = -1  # the sampled step whose entry is open


class _Timer:
    """What Timers(name) returns: Megatron's timer interface, timing the stage as well."""

    __slots__ = ("name", "_owner", "_stage", "_inner", "_inner_waits", "_open", "_started",
                 "_t0", "_elapsed", "_active")

    def __init__(self, owner, name, stage):
        self.name = name
        self._owner = owner
        self._stage = stage  # a _Stage, or None (not a stage)
        self._inner = None  # Megatron's own timer for this name, when Timers has an inner
        self._inner_waits = False  # whether it makes a barrier when asked (not its dummy timer)
        self._open = -1  # the generation (sampled step) in which this timer opened the stage
        self._started = False
        self._t0 = 0.0
        self._elapsed = 0.0
        self._active = 0.0

    def start(self, barrier=False):
        inner = self._inner
        owner = self._owner
        if inner is not None:
            # Megatron's own timer, as Megatron asked; its barrier is a wait (_waiting)
            if barrier and self._inner_waits and owner._waits_timed():
                owner._waiting(inner.start, barrier=barrier)
            else:
                inner.start(barrier=barrier)
        elif barrier:
            owner.barrier_requests += 1
        if self._stage is not None and owner._analyzer._sampled:
            owner._begin(self)
        if self._started:
            owner._misuse("start", self.name)
        self._started = True
        self._t0 = time.perf_counter()

    def stop(self, barrier=False):
        owner = self._owner
        if self._open >= 0:
            owner._end(self)
        if self._started:
            spent = time.perf_counter() - self._t0
            self._elapsed += spent
            self._active += spent
            self._started = False
        elif self._inner is None:
            owner._misuse("stop", self.name)
        inner = self._inner
        if inner is not None:
            if barrier and self._inner_waits and owner._waits_timed():
                owner._waiting(inner.stop, barrier=barrier)
            else:
                inner.stop(barrier=barrier)
        elif barrier:
            owner.barrier_requests += 1

    def elapsed(self, reset=True, barrier=False):
        """Seconds timed since the last reset: Megatron's own timer's when there is an inner
        one; else this timer's, by the host clock (no device synchronization, so on a GPU it is
        the host's time, not the kernels')."""
        inner = self._inner
        if inner is not None:
            if barrier and self._inner_waits and self._owner._waits_timed():
                return self._owner._waiting(inner.elapsed, reset=reset, barrier=barrier)
            return inner.elapsed(reset=reset, barrier=barrier)
        if barrier:
            self._owner.barrier_requests += 1
        if self._started:  # as Megatron's: stopped, read, started again
            now = time.perf_counter()
            spent = now - self._t0
            self._elapsed += spent
            self._active += spent
            self._t0 = now
        value = self._elapsed
        if reset:
            self._elapsed = 0.0
        return value

    def reset(self):
        if self._inner is not None:
            self._inner.reset()
        self._elapsed = 0.0
        self._started = False

    def active_time(self):
        if self._inner is not None:
            return self._inner.active_time()
        return self._active


class Timers:
    """A drop-in for Megatron's config.timers that records its timers as laggard stages.

    analyzer: a laggard.Analyzer (disabled: every timer still works, nothing is recorded).
    inner:    Megatron's own Timers, or None. When given, every call also reaches it (start,
              stop, elapsed, reset, log, write, and any other attribute), so Megatron's own
              timing and logging go on unchanged.

    Thread-safety: the training thread's, like Megatron's Timers. Cost on a step that is not
    sampled: a dict look-up and two attribute checks per start()/stop() (plus the inner timer's
    own work); on a sampled step, a call into the recorder."""

    def __init__(self, analyzer, inner=None):
        self._analyzer = analyzer
        self._inner = inner
        self._timers = {}
        self._stages = {}
        self._generation = 0
        self.barrier_requests = 0  # barrier=True asked of laggard's own timers (not honoured)
        # Megatron timer name -> laggard stage (None: not a stage), with an enabled analyzer
        self.stage_names = {}
        # The inner Timers' waits (TIMERS_BARRIER_STAGE), with an inner and an enabled analyzer
        self._wait_stage = None
        if analyzer is not None and analyzer.enabled:
            # A new sampled step: entries left open by the last one were dropped by its end_step.
            analyzer._on_sampled_step.append(self._new_sampled_step)
            if inner is not None:
                try:
                    self._wait_stage = self._stage(TIMERS_BARRIER_STAGE, "communication")
                except Exception as e:
                    self._report("timer %r" % (TIMERS_BARRIER_STAGE,), e)

    @property
    def inner(self):
        return self._inner

    def __call__(self, name, log_level=None):
        timer = self._timers.get(name)
        if timer is None:
            timer = self._new_timer(name)
        if self._inner is not None:
            # Megatron's Timers checks the log level and may hand out its dummy timer, which
            # makes no barrier.
            inner = timer._inner = self._inner(name, log_level)
            timer._inner_waits = type(inner).__name__ != "DummyTimer"
        return timer

    def _new_timer(self, name):
        stage = None
        try:
            mapped = stage_for(name)
            an = self._analyzer
            if mapped is not None and an is not None and an.enabled:
                stage = self._stage(*mapped)
            if an is not None and an.enabled:
                self.stage_names[name] = mapped[0] if mapped is not None else None
        except Exception as e:
            self._report("timer %r" % (name,), e)
            stage = None
        timer = self._timers[name] = _Timer(self, name, stage)
        return timer

    def _stage(self, stage_name, kind):
        """The _Stage of laggard stage `stage_name` (registered on first use), or None."""
        stage = self._stages.get(stage_name)
        if stage is None:
            stage_id = self._analyzer.stage_id(stage_name, kind)
            if stage_id >= 0:
                begin, end = self._analyzer._recorder.marks(stage_id)
                stage = self._stages[stage_name] = _Stage(stage_name, begin, end)
        return stage

    # -- the stages' nesting (training thread) -------------------------------------------

    def _new_sampled_step(self):
        self._generation += 1
        for stage in self._stages.values():
            stage.depth = 0
        return 0

    def _begin(self, timer):
        stage = timer._stage
        try:
            if timer._open >= 0:  # started twice without a stop: keep the first entry
                return
            if stage.depth == 0 or stage.generation != self._generation:
                stage.depth = 0
                stage.generation = self._generation
                stage.begin()
            stage.depth += 1
            timer._open = self._generation
        except Exception as e:
            self._report("start", e)

    def _end(self, timer):
        stage = timer._stage
        opened, timer._open = timer._open, -1
        try:
            if opened != self._generation or stage.generation != self._generation:
                return  # opened in an earlier sampled step: its end_step dropped the entry
            stage.depth -= 1
            if stage.depth == 0:
                stage.end()
        except Exception as e:
            self._report("stop", e)

    def _waits_timed(self):
        """Whether a wait inside the inner Timers is timed now (a sampled step, with an inner)."""
        return self._wait_stage is not None and self._analyzer._sampled

    def _waiting(self, call, *args, **kwargs):
        """call(*args, **kwargs): a call into the inner Timers that makes the ranks wait for
        each other, timed as TIMERS_BARRIER_STAGE. The laggard stages open at that moment are
        closed around it (an entry each side), so that the wait is not theirs as well; the
        call's own result and exceptions are the caller's."""
        if not self._waits_timed():
            return call(*args, **kwargs)
        wait = self._wait_stage
        paused = ()
        try:
            generation = self._generation
            paused = [s for s in self._stages.values()
                      if s.depth > 0 and s.generation == generation and s is not wait]
            for stage in paused:
                stage.end()
            wait.begin()
        except Exception as e:
            self._report("barrier", e)
        try:
            return call(*args, **kwargs)
        finally:
            try:
                wait.end()
                for stage in paused:
                    stage.begin()
            except Exception as e:
                self._report("barrier", e)

    def _misuse(self, what, name):
        self._report(what, RuntimeError(
            "laggard.megatron: timer %r: %s() while %s" %
            (name, what, "running" if what == "start" else "not running")))

    def _report(self, where, error):
        an = self._analyzer
        try:
            if an is not None:
                an._errors.report("megatron timers: " + where, error)
        except Exception:
            pass

    # -- Megatron's logging ------------------------------------------------------------------

    def log(self, *args, **kwargs):
        """Megatron's Timers.log when there is an inner Timers; else nothing. It gathers the
        times across ranks: on a sampled step, timed as TIMERS_BARRIER_STAGE."""
        if self._inner is not None:
            return self._waiting(self._inner.log, *args, **kwargs)
        return None

    def write(self, *args, **kwargs):
        """Megatron's Timers.write when there is an inner Timers; else nothing. Timed as log()."""
        if self._inner is not None:
            return self._waiting(self._inner.write, *args, **kwargs)
        return None

    def get_all_timers_string(self, *args, **kwargs):
        """Megatron's Timers.get_all_timers_string (an inner Timers is needed). Timed as
        log()."""
        if self._inner is None:
            raise AttributeError("get_all_timers_string: laggard.megatron.Timers without an "
                                 "inner Timers has no timer strings")
        return self._waiting(self._inner.get_all_timers_string, *args, **kwargs)

    def __getattr__(self, name):
        # Only reached for attributes this class does not have: the inner Timers' others
        # (get_all_timers_string, ...).
        inner = self.__dict__.get("_inner")
        if inner is None or name.startswith("__"):
            raise AttributeError(name)
        return getattr(inner, name)
