"""Analyzer: the section API of the training loop.

    an = laggard.Analyzer(enabled=True, interval=10)
    for step in range(n):
        an.begin_step(step)
        with an.section("forward"): ...
        an.end_step()
    an.close()

Costs on the training thread: disabled, every call is one attribute check. With the host clock
(and no verdict callbacks or stop policy), begin_step, section and end_step are C builtins of a
laggard._core.StepState in the instance: no Python frame of laggard's on any step. On a step
that is not sampled they touch that one object (section() returns one shared no-op context
manager whose __enter__/__exit__ are C callables). On a sampled step a section is two calls into
the C++ recorder (host clock or CUDA event), and end_step, one C call, puts the step's resource
figures in and copies the sample into the live engine's ring (laggard._core.Engine, the C++
laggard::Analyzer): the rank log, the side channel, window assembly, the detector and the sinks
run on the engine's two C++ threads (docs/design.md). Otherwise the methods below do the same
in Python. Nothing here synchronizes the device or
waits on a collective, and nothing raises into the training loop: failures become rate-limited
warnings and the straggler/report_errors count.

Thread-safety: begin_step/section/end_step/add belong to the training thread;
latest_metrics/latest_report may be called from any thread, on any rank.
"""

import atexit
import logging
import math
import numbers
import os
import socket
import sys
import threading
import time
import weakref

from ._log import EngineErrors, ErrorCounter, log_once, logger

_REFS = ("mean", "median", "robust")

# The largest duration add() takes (about 31.7 years): any real duration is far below, and sums
# of such values cannot overflow to infinity.
MAX_ADD_MS = 1e12


class _NoopSection:
    """The one context manager every unsampled section() returns.

    Its __enter__ and __exit__ are C callables, so that `with` makes no Python frame (right
    after a training step a cold frame costs a microsecond; bench/step_cost_ab.py). Neither binds
    to the instance: `with` calls __enter__() (NoneType(): None) and __exit__(type, value, tb)
    ("".format ignores them: "", false, so an exception of the body passes through)."""

    __slots__ = ()

    __enter__ = type(None)
    __exit__ = "".format


NOOP_SECTION = _NoopSection()


def _torch_if_imported():
    """torch when the program already imported it; laggard never imports torch itself here."""
    return sys.modules.get("torch")


class SettingTypeError(TypeError, ValueError):
    """A constructor argument of the wrong type: a TypeError, and a ValueError as docs/reference/python.md
    promises for every bad setting."""


def _int_setting(name, value, low=None):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise SettingTypeError("%s must be an integer, got %r (%s)" %
                               (name, value, type(value).__name__))
    value = int(value)
    if low is not None and value < low:
        raise ValueError("%s must be >= %d, got %d" % (name, low, value))
    return value


def _seconds_setting(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise SettingTypeError("%s must be a number of seconds, got %r (%s)" %
                               (name, value, type(value).__name__))
    value = float(value)
    if not (math.isfinite(value) and value > 0):
        raise ValueError("%s must be a finite number of seconds > 0, got %r" % (name, value))
    return value


def _mpi_env_rank():
    """(rank, size) from an MPI launcher's environment (Open MPI, MPICH/PMI, PMIx), or None."""
    for r, n in (("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("PMI_RANK", "PMI_SIZE"),
                 ("PMIX_RANK", "PMIX_SIZE")):
        try:
            rank, size = int(os.environ[r]), int(os.environ[n])
        except (KeyError, ValueError):
            continue
        if 0 <= rank < size:
            return rank, size
    return None


def _env_rank():
    """(rank, world_size) from the launcher's RANK and WORLD_SIZE (torchrun, Slurm wrappers), or
    None when they are absent or unusable (then a warning says why)."""
    rank, world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
    if rank is None or world is None:
        return None
    try:
        rank, world = int(rank), int(world)
    except ValueError:
        rank = world = -1
    if not 0 <= rank < world:
        log_once("envrank", logging.WARNING, "laggard: ignoring RANK=%r WORLD_SIZE=%r from the "
                 "environment (not 0 <= RANK < WORLD_SIZE)", os.environ.get("RANK"),
                 os.environ.get("WORLD_SIZE"))
        return None
    return rank, world


def _dist_info(torch):
    if torch is None:
        return None
    try:
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
    except Exception:
        pass
    return None


OFF_MESSAGE = "laggard: straggler analysis is off; pass --straggler-analysis to enable"


def _say_off():
    """Analyzer.from_args without --straggler-analysis: one line on the first rank, once per
    process; on stderr when logging is not configured (Python would not print INFO), else
    through the `laggard` logger at INFO."""
    try:
        if os.environ.get("RANK", "0").strip() not in ("", "0"):
            return
        with _off_lock:
            if _off_said:
                return
            _off_said.append(True)
        if logging.getLogger().hasHandlers() or logger.handlers:
            logger.info(OFF_MESSAGE)
        else:
            sys.stderr.write(OFF_MESSAGE + "\n")
            sys.stderr.flush()
    except Exception:  # nothing here may stop the training script
        pass


_off_lock = threading.Lock()
_off_said = []


class Analyzer:
    """Finds straggler ranks and stages while training. See the module doc and docs/reference/python.md.

    enabled, interval, relative_threshold, absolute_ms_threshold, ref, log_dir, sinks: as the
    RFC flags (ref: "mean", "median" or "robust").
    analysis_rank: the rank that analyses and calls the sinks (default 0).
    module_stages / module_stage_patterns: attention/moe stages from module hooks (used by
      laggard.torch.instrument).
    timing: "auto" (CUDA events when torch has a GPU, else host clock), "host" or "cuda".
    confirm_k / confirm_n: a finding is confirmed when slow in k of the last n windows.
    Detector settings left None take the library's defaults, the detector the benchmark measured
    best (docs/detection.md): method "sequential", ref "robust", relative_threshold 1.1, no
    absolute rule, false_alarm_budget 0.01 (per 500 sampled windows), healthy_spread 1.03 and
    min_cost_share 0.005 (a verdict is typically above 1.03x and costs >= 0.5 % of the step).
    method: "sequential" (evidence over windows against a false-alarm budget) or "threshold"
      (the RFC's per-window rule with confirm_k of confirm_n persistence).
    preset: None (the defaults, with any setting given on top), "default"/"recommended" (the
      same) or "rfc" (the RFC's rule exactly: threshold, mean, 1.2x, 5 ms, 2 of 3); the settings
      given win over the preset's (as with `laggard analyze --preset P --FLAG V`).
    queue_capacity: samples waiting for the rank log (and again for the side channel) before
      new ones are dropped.
    side_channel_timeout_s: silence after which a rank presumes its parent in the gather tree
      down, and the timeout of the gloo side channel's operations.
    close_timeout_s: how long close() waits for outstanding samples and reports.
    setup_timeout_s: how long the ranks' side channel setup may take (gloo, in the background:
      the constructor returns at once). A rank that has not created its Analyzer by then leaves
      every rank without the side channel (all or nothing): each warns once naming the missing
      ranks and keeps its rank log and counters (docs/reference/failure-contract.md).
    rank, world_size: override what torch.distributed says (the gloo side channel still needs
      torch.distributed initialized to span several ranks).
    transport: the side channel. None: gloo over torch.distributed when it is initialized with
      several ranks (laggard.transport.GlooTransport), else none; "local" (ranks that are
      threads of this process, with `channel`), "mpi" (laggard.mpi: MPI_COMM_WORLD under
      mpirun, rank and size from it), or an object with GlooTransport's methods.
    fan_out: host leaders per leader in the gather tree (docs/design.md).
    resources: resource readings beside each sampled step (the sample's `resources`: host CPU,
      GC pauses, data wait, the GPU through NVML, the CUDA allocator; laggard.resources,
      docs/reference/formats.md). True (the default): a background thread reads them; False: none.
    resources_period_s: how often that thread reads; None follows the time between sampled
      steps (1 s to 5 s).
    policy: what every rank does with the verdict (laggard.policy, docs/reference/python.md "Acting on a
      verdict"): "warn" (the default: the analysis rank's console lines), "stop" (every rank
      stops cleanly before the same step once a confirmed straggler has held for
      stop_after_windows windows: should_stop, stop_reason, check_stop()), a callable
      fn(verdict) called for every event, or a laggard.policy.Policy.
    stop_after_windows: windows a confirmed straggler must hold before "stop" stops (3).
    stop_lead_s: how far ahead of the analysis rank's step the stop step is put, in step time, so
      that the verdict carrying it reaches every rank first (2.0; at least 2 intervals).
    fleet_store: the fleet store (laggard.fleet: a path or a postgresql:// URL; True: the default
      store) the analysis rank adds this run to when it closes; None: $LAGGARD_FLEET when set,
      else none. Needs log_dir. A failure is a counted warning.
    """

    def __init__(self, enabled=True, interval=10, relative_threshold=None,
                 absolute_ms_threshold=None, ref=None, log_dir=None, sinks=(), *,
                 analysis_rank=0, module_stages=False, module_stage_patterns=None,
                 timing="auto", confirm_k=None, confirm_n=None, mad_z=None, queue_capacity=256,
                 side_channel_timeout_s=300.0, close_timeout_s=30.0, cohort="", host=None,
                 rank=None, world_size=None, preset=None, method=None,
                 false_alarm_budget=None, healthy_spread=None, min_cost_share=None,
                 transport=None, channel="", fan_out=32,
                 resources=True, resources_period_s=None, setup_timeout_s=30.0,
                 policy="warn", stop_after_windows=3, stop_lead_s=2.0, fleet_store=None):
        self._enabled = False
        self._init_policy(policy, stop_after_windows, fleet_store, log_dir)
        self._sampled = False
        self._closed = False
        self._skip_every = None  # host clock: steps begin_step need not pass to the recorder
        self._forked_steps = None  # in a child forked after the start: its steps (not recorded)
        self.rank = 0
        self.world_size = 1
        self._step = None  # `step` (a property: while the builtins are in place, theirs)
        self.module_stages = bool(module_stages)
        self.module_stage_patterns = module_stage_patterns
        self._sections = {}
        self._section_off = self._section_on = None  # the section() builtins, once enabled
        self._step_state = None  # laggard._core.StepState: begin_step/end_step as builtins
        self._steps = None  # the same while its builtins are in the instance dict
        self._on_sampled_step = []  # instrument(): attach hooks (a true result is a failure)
        self._on_step_end = []  # instrument(): detach the sampled step's hooks
        self._on_close = []  # instrument(): take its hooks and wrappers out (Instrumentation.remove)
        self._errors = ErrorCounter()
        self._res = None  # laggard.resources.ResourceSampler, with resources on
        self._recorder = None
        self._engine = None  # laggard._core.Engine: the live engine (also self._recorder)
        self._stream = None
        self._deferred = None  # laggard._deferred.DeferredValues, made on first use
        self._gloo = None  # laggard.transport.GlooTransport, the default side channel
        self._delivery = None  # laggard.sinks.SinkDelivery: the sinks' thread
        self.backend_name = None
        self.analysis_rank = int(analysis_rank)
        self.is_analysis_rank = False
        self.options = dict(enabled=bool(enabled), interval=interval,
                            relative_threshold=relative_threshold,
                            absolute_ms_threshold=absolute_ms_threshold, ref=ref,
                            log_dir=log_dir, analysis_rank=analysis_rank,
                            module_stages=bool(module_stages), timing=timing,
                            confirm_k=confirm_k, confirm_n=confirm_n, preset=preset,
                            resources=bool(resources))
        if not enabled:
            return  # nothing created: no thread, no group, no file

        interval = _int_setting("interval", interval)
        if interval < 0:
            raise ValueError("interval must be >= 0 (0 = never sample), got %d" % interval)
        if ref is not None and ref not in _REFS:
            raise ValueError("ref must be one of %s, got %r" % (", ".join(_REFS), ref))
        if timing not in ("auto", "host", "cuda"):
            raise ValueError("timing must be 'auto', 'host' or 'cuda', got %r" % (timing,))
        queue_capacity = _int_setting("queue_capacity", queue_capacity, low=1)
        side_channel_timeout_s = _seconds_setting("side_channel_timeout_s",
                                                  side_channel_timeout_s)
        close_timeout_s = _seconds_setting("close_timeout_s", close_timeout_s)
        setup_timeout_s = _seconds_setting("setup_timeout_s", setup_timeout_s)
        if not isinstance(resources, bool):
            raise SettingTypeError("resources must be True or False, got %r (%s)" %
                                   (resources, type(resources).__name__))
        if resources_period_s is not None:
            resources_period_s = _seconds_setting("resources_period_s", resources_period_s)
        if host is not None and not isinstance(host, str):
            raise SettingTypeError("host must be a string or None, got %r (%s)" %
                                   (host, type(host).__name__))
        if not isinstance(cohort, str):
            raise SettingTypeError("cohort must be a string, got %r (%s)" %
                                   (cohort, type(cohort).__name__))
        analysis_rank = _int_setting("analysis_rank", analysis_rank)
        if rank is not None:
            rank = _int_setting("rank", rank, low=0)
        if world_size is not None:
            world_size = _int_setting("world_size", world_size, low=1)
        if log_dir is not None and not isinstance(log_dir, (str, bytes, os.PathLike)):
            raise SettingTypeError("log_dir must be a path or None, got %r (%s)" %
                                   (log_dir, type(log_dir).__name__))
        try:
            from . import _core  # the extension is needed only when enabled
        except ImportError as e:
            raise ImportError("laggard._core is not built (configure with "
                              "-DLAGGARD_BUILD_PYTHON=ON and build the _core target): %s" % e) \
                from e
        from .sinks import as_sink

        def opt(value, kind):
            return None if value is None else kind(value)

        # The settings given, resolved after the world size is known: a preset, then these on
        # top of it, as `laggard analyze --preset P --FLAG V` resolves them.
        settings = {name: value for name, value in (
            ("method", method), ("ref", ref),
            ("relative_threshold", opt(relative_threshold, float)),
            ("absolute_ms_threshold", opt(absolute_ms_threshold, float)),
            ("mad_z", opt(mad_z, float)), ("confirm_k", opt(confirm_k, int)),
            ("confirm_n", opt(confirm_n, int)),
            ("false_alarm_budget", opt(false_alarm_budget, float)),
            ("healthy_spread", opt(healthy_spread, float)),
            ("min_cost_share", opt(min_cost_share, float))) if value is not None}
        sink_list = [as_sink(s) for s in (sinks or ())]

        if transport == "mpi":
            # The MPI side channel (laggard.mpi): rank and size from MPI_COMM_WORLD.
            try:
                from . import mpi as _mpi

                mpi_rank, mpi_size = _mpi.setup()
                rank = mpi_rank if rank is None else rank
                world_size = mpi_size if world_size is None else world_size
            except Exception as e:
                self._errors.report("side channel setup", e)
                transport = "none"
                # Still each rank its own log: the launcher's rank and size.
                env = _mpi_env_rank()
                if env is not None and rank is None and world_size is None:
                    rank, world_size = env
        torch = _torch_if_imported()
        info = None if transport == "mpi" else _dist_info(torch)
        if info is not None:
            self.rank, self.world_size = info
        elif rank is None and world_size is None:
            # Under a launcher, before init_process_group: every rank would otherwise call itself
            # rank 0 of 1 and append to the same rank-0.jsonl. The launcher's RANK/WORLD_SIZE
            # name the rank (its log is complete and `laggard analyze` reads all ranks); without
            # torch.distributed there is no side channel, so no live cross-rank analysis.
            env = _env_rank()
            if env is not None:
                self.rank, self.world_size = env
                if self.world_size > 1:
                    log_once("envrank-used", logging.WARNING,
                             "laggard: torch.distributed is not initialized yet: using RANK=%d "
                             "and WORLD_SIZE=%d from the environment; each rank writes its own "
                             "log, but there is no live cross-rank analysis (create the Analyzer "
                             "after init_process_group for that)", self.rank, self.world_size)
        if rank is not None:
            self.rank = int(rank)
        if world_size is not None:
            self.world_size = int(world_size)
        self.analysis_rank = int(analysis_rank)
        options = _core.detector_options(None if preset is None else str(preset),
                                         int(self.world_size), **settings)
        self.detector_options = options
        self.options.update(method=options.method.name, ref=options.ref.name,
                            relative_threshold=options.relative_threshold,
                            absolute_ms_threshold=options.absolute_ms_threshold,
                            confirm_k=options.confirm_k, confirm_n=options.confirm_n,
                            false_alarm_budget=options.false_alarm_budget,
                            healthy_spread=options.healthy_spread,
                            min_cost_share=options.min_cost_share)
        if not 0 <= self.analysis_rank < self.world_size:
            raise ValueError("analysis_rank must be in [0, %d), got %d" %
                             (self.world_size, self.analysis_rank))
        if not 0 <= self.rank < self.world_size:
            raise ValueError("rank must be in [0, world_size=%d), got %d" %
                             (self.world_size, self.rank))
        self.is_analysis_rank = self.rank == self.analysis_rank
        for sink in sink_list:  # a sink that reads full reports (laggard.sinks.PrometheusSink)
            attach = getattr(sink, "attach", None)
            if callable(attach):
                try:
                    attach(self)
                except Exception as e:
                    self._errors.report("sink attach", e)
        local_rank = int(os.environ.get("LOCAL_RANK", "0") or 0)

        backend, device = self._choose_timing(timing, torch)
        if log_dir is not None:
            log_dir = os.fspath(log_dir)
            if isinstance(log_dir, bytes):
                log_dir = os.fsdecode(log_dir)

        # The side channel: gloo over torch.distributed when several ranks train (a group of
        # laggard's own, lazily connected: a rank talks to its parent and children only).
        side_channel = transport
        if side_channel is None and self.world_size > 1:
            if info is not None:
                try:
                    from .transport import GlooTransport

                    # Returns at once: the ranks join in the background, for at most
                    # setup_timeout_s; a rank that never creates its Analyzer costs the others
                    # that timeout on a thread of laggard's, never a wait of the training.
                    side_channel = GlooTransport(self.rank, self.world_size, self.analysis_rank,
                                                 float(side_channel_timeout_s),
                                                 fan_out=int(fan_out),
                                                 setup_timeout_s=setup_timeout_s)
                    self._gloo = side_channel
                    # close() gives up a setup still under way (before the engine's close,
                    # which would otherwise wait for ranks that never joined).
                    self._on_close.append(side_channel.give_up_setup)
                except Exception as e:
                    self._errors.report("side channel setup", e)
                    side_channel = "none"
            else:
                log_once("nodist", logging.WARNING, "laggard: world_size %d but "
                         "torch.distributed is not initialized: analysing this rank alone",
                         self.world_size)
                side_channel = "none"
        if side_channel == "none":  # no side channel: the rank log only, no live analysis
            side_channel = ""
        try:
            engine = _core.Engine(
                interval=interval, rank=self.rank, world_size=self.world_size,
                local_rank=local_rank, host=host if host is not None else socket.gethostname(),
                cohort=str(cohort), timing=backend, cuda_device=device, max_pending_steps=4,
                detector=options, log_dir=log_dir, analysis_rank=self.analysis_rank,
                queue_capacity=queue_capacity, close_timeout_s=close_timeout_s,
                side_channel_timeout_s=side_channel_timeout_s, transport=side_channel,
                stop_after_windows=self._stop_after_windows if self.policy.stop else 0,
                stop_lead_s=_seconds_setting("stop_lead_s", stop_lead_s),
                channel=str(channel), fan_out=int(fan_out),
                # Python's turns cost the GIL: few, larger batches, looked for a few times a
                # second (bench/overhead.py); C++ work alone needs no such care.
                batch_period_s=0.25, poll_interval_s=0.1, transport_poll_s=0.1,
                # A peer's 0.25 s batch can hold many windows (interval 1, fast steps): room for
                # them, so that no window is released before this rank's own sample is in.
                max_pending_windows=128)
        except ValueError:
            raise
        except Exception as e:
            raise ValueError("laggard: the live engine could not start: %s" % e) from e
        self._recorder = self._engine = engine
        self._errors = EngineErrors(engine, self._errors)
        self.backend_name = engine.backend_name
        self.is_analysis_rank = self.rank == self.analysis_rank
        # The training thread's calls into the recorder: CPython builtins, not pybind11 methods
        # (after a training step has evicted the caches, a pybind11 call costs ~8 µs more;
        # bench/cold_calls.py).
        self._rec_begin_step, self._rec_end_step, self._rec_set_stream = engine.step_calls()
        # section() as builtins in the instance, swapped at each sampled step's begin and end:
        # not sampled, one returning NOOP_SECTION; sampled, one returning the name's
        # SectionScope. A new name (or other arguments) goes to the class's section(), reached
        # through a weak reference (the builtins are in this object's __dict__).
        section_calls = getattr(_core, "section_calls", None)
        if section_calls is not None:
            ref = weakref.ref(self)

            def fallback(name, kind=None):
                an = ref()
                return NOOP_SECTION if an is None else Analyzer.section(an, name, kind)

            self._section_off, self._section_on = section_calls(NOOP_SECTION, self._sections,
                                                                fallback)
            self.section = self._section_off
        if backend == "cuda" and self.backend_name == "host-clock":
            level = logging.WARNING if timing == "cuda" else logging.INFO
            log_once("timing", level, "laggard: CUDA event timing unavailable; using the host "
                     "clock")
        else:
            log_once("timing", logging.INFO, "laggard: stage timing with %s", self.backend_name)
        if self.backend_name != "host-clock":
            self._stream = lambda: torch.cuda.current_stream().cuda_stream
        if sink_list:
            # The engine only queues each report; the sinks run on a thread of their own
            # (laggard.sinks.SinkDelivery). On the analysis rank it starts now with the sinks'
            # setup (an MLflow store, a W&B run), waited for here, before the first step, so that
            # it does not compete with the training thread's first windows.
            from .sinks import SinkDelivery

            # The engine holds the delivery: its way to the error counter is a weak reference,
            # else the engine would hold itself (through EngineErrors) and never be freed.
            errors = weakref.ref(self._errors)

            def report_error(kind, error):
                target = errors()
                if target is not None:
                    target.report(kind, error)

            self._delivery = SinkDelivery(sink_list, report_error=report_error,
                                          close_timeout_s=float(close_timeout_s) / 2)
            engine.add_sink(self._delivery, "delivery")
            if self.is_analysis_rank:
                self._delivery.start(wait_s=SinkDelivery.PREPARE_WAIT_S)
        self._close_timeout_s = float(close_timeout_s)
        if self.backend_name == "host-clock":  # device backends poll in every begin_step
            self._skip_every = interval
        self._enabled = True
        self._make_step_calls(_core, engine)
        if resources:
            self._start_resources(engine, resources_period_s)
        self._update_step_calls()
        ref_self = weakref.ref(self)
        self._atexit = lambda: _close_at_exit(ref_self)
        atexit.register(self._atexit)
        self._pid = os.getpid()
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=lambda: _after_fork_in_child(ref_self))

    def _make_step_calls(self, _core, engine):
        """begin_step and end_step as builtins of a laggard._core.StepState, which do in one C
        call what the methods below do in Python (no Python frame of laggard's on a step: right
        after a training step each costs microseconds; bench/step_cost_ab.py). They stand in
        the instance dict while _update_step_calls() allows; a step that is not an exact
        non-negative int goes to the method."""
        step_state = getattr(_core, "step_state", None)
        if step_state is None or self._section_on is None:
            return
        ref = weakref.ref(self)

        def report(kind, error):
            an = ref()
            if an is not None:
                an._errors.report(kind, error)

        try:
            self._step_state = step_state(self._rec_begin_step, self, Analyzer.begin_step,
                                     Analyzer.end_step, report, self._section_on,
                                     self._section_off, self._on_sampled_step, self._on_step_end,
                                     -1 if self._skip_every is None else self._skip_every)
        except Exception as e:  # the methods do it all
            self._errors.report("begin_step", e)

    def _update_step_calls(self):
        """The builtins in the instance dict where they do all that the methods would: enabled,
        the host clock (no device marks, no deferred values), no verdict to act on, the class's
        own begin_step/end_step; else the methods."""
        steps = self._step_state
        if steps is None:
            return
        cls = type(self)
        if (self._steps is None and self._enabled and self._forked_steps is None and
                not self._acts_on_verdicts and self._skip_every is not None and
                cls.begin_step is Analyzer.begin_step and cls.end_step is Analyzer.end_step):
            self._sampled = steps.sampled
            steps.step = self._step
            self._steps = steps
            self.begin_step, self.end_step, self.section = steps.calls
        elif not (self._enabled and self._forked_steps is None and not self._acts_on_verdicts):
            # For good (closed, forked, or a verdict to act on): the methods from now on.
            self.__dict__.pop("begin_step", None)
            self.__dict__.pop("end_step", None)
            if self._steps is not None:
                self._steps = None
                self._step = steps.step
                self.section = self._section_on if self._sampled else self._section_off

    def _start_resources(self, engine, period_s):
        try:
            from .resources import make_sampler

            res = make_sampler(self._errors, period_s)
            self._record_resources = engine.record_resources_call()
            if self._step_state is not None:
                res.attach_steps(self._step_state)
            res.start()
            self._res = res
        except Exception as e:  # the run goes on without readings
            self._errors.report("resources", e)

    @property
    def resources(self):
        """The resource sampler (laggard.resources.ResourceSampler), or None with resources
        off."""
        return self._res

    @classmethod
    def from_args(cls, args, **overrides):
        """An Analyzer configured by the --straggler-* flags (see laggard.add_arguments).

        Without --straggler-analysis (the flag's default is off) the Analyzer is disabled: every
        call is a no-op. The first rank (RANK unset or 0) then says so once, on stderr, or
        through the `laggard` logger at INFO where logging is configured:
        "laggard: straggler analysis is off; pass --straggler-analysis to enable". (Analyzer()
        itself is enabled by default: the flag is an opt-in for scripts that take flags.)
        """
        from .flags import analyzer_kwargs

        kwargs = analyzer_kwargs(args)
        kwargs.update(overrides)
        if not kwargs.get("enabled", True):
            _say_off()
        return cls(**kwargs)

    @staticmethod
    def _choose_timing(timing, torch):
        if timing == "host":
            return "host", -1
        if torch is None:
            if timing == "cuda":
                log_once("timing-notorch", logging.WARNING,
                         "laggard: timing='cuda' but torch is not imported; using the host clock")
            return "host", -1
        try:
            if timing == "cuda" or torch.cuda.is_available():
                if torch.cuda.is_available():
                    return "cuda", int(torch.cuda.current_device())
                return "cuda", -1  # the C++ backend says why it cannot
        except Exception as e:
            log_once("timing-error", logging.INFO, "laggard: CUDA check failed (%s); using the "
                     "host clock", e)
        return "host", -1

    # -- the training loop -------------------------------------------------------------------

    @property
    def enabled(self):
        return self._enabled

    @property
    def step(self):
        """The step begun last (None before the first)."""
        steps = self._steps
        return self._step if steps is None else steps.step

    @property
    def sampled(self):
        """Whether the current step is sampled."""
        return self._sampled

    def begin_step(self, step):
        """Starts step `step`; decides whether it is sampled (step % interval == 0)."""
        if not self._enabled:
            return
        try:
            self._step = step
            every = self._skip_every
            if every is not None and not self._sampled and (not every or step % every):
                # Not sampled and nothing open: the recorder has nothing to do, and the call
                # into the extension costs microseconds when training has just evicted the
                # CPU caches (bench/overhead.py).
                return
            deferred = self._deferred
            if deferred is not None and deferred.pending:
                deferred.resolve_ready()  # values whose copy has arrived, before the recorder polls
            self._sampled = sampled = self._rec_begin_step(step)
            if self._section_on is not None:
                self.section = self._section_on if sampled else self._section_off
            if sampled and self._stream is not None:
                self._rec_set_stream(self._stream())
        except Exception as e:
            self._sampled = False
            if self._section_off is not None:
                self.section = self._section_off
            if isinstance(step, numbers.Integral):
                self._errors.report("begin_step", e)
            else:  # "seven" % 10 would say "not all arguments converted during formatting"
                self._errors.report("begin_step", TypeError(
                    "begin_step(%r): the step must be an integer (got %s); this step is not "
                    "sampled" % (step, type(step).__name__)))
            return
        if sampled:
            if self._res is not None:
                try:
                    self._res.step_begin()
                except Exception as e:
                    self._errors.report("resources", e)
            if self._on_sampled_step:  # (empty where hooks stay attached)
                self._call_hooks(self._on_sampled_step, "begin_step", "attached")

    def _begin_step_in_forked_child(self, step):
        self._step = step
        self._forked_steps += 1
        if self._forked_steps == 1:
            self._errors.report("fork", RuntimeError(
                "this process (pid %d) was forked from pid %d after its Analyzer started: the "
                "Analyzer records nothing here (its steps are counted in "
                "counters()['forked_steps_dropped']); create a new Analyzer in the child" %
                (os.getpid(), self._pid)))

    def section(self, name, kind=None):
        """A context manager timing one entry of stage `name` in this step.

        Not sampled (or disabled): one shared no-op object. `kind` ("compute",
        "communication", "data", "other") counts at the first use of a name; by default it
        follows the name (DESIGN.md)."""
        if not self._sampled:
            return NOOP_SECTION
        try:
            section = self._sections.get(name)
        except TypeError:  # an unhashable name (a list): counted by _new_section, never raised
            section = None
        if section is None:
            section = self._new_section(name, kind)
        return section

    def _new_section(self, name, kind):
        try:
            stage_id = self._recorder.stage(str(name), kind)
            # A context manager written against the CPython API (_core.SectionScope): `with`
            # calls Recorder::begin/end by stage id directly, without pybind11's dispatcher.
            # One per name, reused every sampled step.
            section = self._recorder.section(stage_id)
            self._sections[name] = section
            return section
        except Exception as e:
            self._errors.report("section", e)
            return NOOP_SECTION

    def stage_id(self, name, kind=None):
        """The recorder's id of stage `name` (registered on first use), or -1."""
        if not self._enabled:
            return -1
        try:
            return self._recorder.stage(str(name), kind)
        except Exception as e:
            self._errors.report("stage", e)
            return -1

    def add(self, name, ms, calls=1, kind=None):
        """Adds a duration measured elsewhere to stage `name` of this (sampled) step."""
        if not self._sampled:
            return
        try:
            ms = float(ms)
            # Infinity would reach the log as a stage without a time, NaN and negatives would be
            # dropped by the recorder without a word, and a huge value would overflow the stage's
            # sum to infinity: each is refused here and counted (report_errors, kind "add").
            if not 0.0 <= ms <= MAX_ADD_MS:
                raise ValueError("laggard: add(%r, %r): ms must be a finite number in [0, %g]; "
                                 "the value was not added" % (name, ms, MAX_ADD_MS))
            self._recorder.add(self._recorder.stage(str(name), kind), ms, int(calls))
        except Exception as e:
            self._errors.report("add", e)

    def record(self, name, value):
        """Attaches a scalar (loss, grad norm, tokens) to this sampled step's `values`, bit for
        bit (NaN and infinities kept). Not sampled or disabled: one check, nothing else."""
        if not self._sampled:
            return
        try:
            self._recorder.record(str(name), float(value))
        except Exception as e:
            self._errors.report("record", e)

    def record_resource(self, name, value):
        """Attaches a reading of your own to this sampled step's `resources` (beside those of
        laggard.resources; docs/reference/formats.md). Not sampled or disabled: one check."""
        if not self._sampled:
            return
        try:
            self._recorder.record_resource(str(name), float(value))
        except Exception as e:
            self._errors.report("record_resource", e)

    def _defer_values(self, device):
        """The ring of values read from the device without waiting for it (laggard.torch's
        loss on a GPU; laggard._deferred), made on first use with `device` (CudaCopies). None
        with the host clock: its sample is emitted at end_step and cannot wait for a value, which
        is then read at once, as before."""
        deferred = self._deferred
        if deferred is None and self._enabled and self.backend_name != "host-clock":
            from ._deferred import DeferredValues

            defer, resolve = self._engine.deferred_calls()
            deferred = self._deferred = DeferredValues(defer, resolve, device, self._errors)
        return deferred

    def end_step(self):
        """Ends the step. A sampled step's sample goes to the background thread; its report
        appears at a later step (see latest_metrics)."""
        if self._stop_step is not None and not self._should_stop:
            self._reach_stop()
        if not self._sampled:
            return
        if self._res is not None:
            try:
                self._res.step_end(self._record_resources)
            except Exception as e:
                self._errors.report("resources", e)
        try:
            self._sampled = False
            if self._section_off is not None:
                self.section = self._section_off
            deferred = self._deferred
            if deferred is not None and deferred.pending:
                deferred.resolve_ready()
            self._rec_end_step()
        except Exception as e:
            self._errors.report("end_step", e)
        if self._on_step_end:
            self._call_hooks(self._on_step_end, "end_step", "detached")
        if self._acts_on_verdicts:
            self._poll_verdict()

    def _call_hooks(self, hooks, where, done):
        """Calls instrument()'s attach (or detach) calls of a sampled step; a true result or an
        exception is counted as an error of `where`, never raised."""
        for hook in hooks:
            try:
                if hook():  # a true result: something could not be attached (detached)
                    self._errors.report(where, RuntimeError(
                        "laggard.torch: some hooks could not be %s" % done))
            except Exception as e:
                self._errors.report(where, e)

    # -- acting on the verdict (laggard.policy) ----------------------------------------------

    def _init_policy(self, policy, stop_after_windows, fleet_store, log_dir):
        from .policy import WarnPolicy, make_policy

        self.policy = make_policy(policy)
        # The default ("warn", no callbacks) needs no look at the verdict: no cost at all.
        self._acts_on_verdicts = type(self.policy) is not WarnPolicy
        self._stop_after_windows = _int_setting("stop_after_windows", stop_after_windows, low=1)
        self._straggler_callbacks = []
        self._clear_callbacks = []
        self._verdict_events = None  # laggard.policy.VerdictEvents, made at the first verdict
        self._verdict_seq = 0
        self._stop_step = None
        self._should_stop = False
        self.stop_reason = None
        self._stop_verdict = None
        if fleet_store is None:
            fleet_store = os.environ.get("LAGGARD_FLEET") or None
        elif fleet_store is False:
            fleet_store = None
        if fleet_store is not None and not isinstance(fleet_store, (bool, str, os.PathLike)):
            raise SettingTypeError("fleet_store must be a path, a URL, True or None, got %r (%s)"
                                   % (fleet_store, type(fleet_store).__name__))
        self._fleet_store = fleet_store
        self._fleet_log_dir = log_dir
        self.fleet_run = None  # what the fleet store got at close (laggard.fleet.add_run's)

    def on_straggler(self, fn):
        """Registers fn(verdict) (a laggard.policy.Verdict), called on every rank when a
        straggler is first confirmed; returns fn (usable as a decorator). See laggard.policy
        for where and when it is called; an exception it raises is counted, never raised."""
        self._straggler_callbacks.append(fn)
        self._acts_on_verdicts = True
        self._update_step_calls()
        return fn

    def on_clear(self, fn):
        """Registers fn(verdict), called on every rank when a confirmed straggler clears (absent
        from 3 verdicts in a row); returns fn."""
        self._clear_callbacks.append(fn)
        self._acts_on_verdicts = True
        self._update_step_calls()
        return fn

    @property
    def should_stop(self):
        """True (on every rank at the same step boundary) once the stop policy's step is reached:
        the loop should begin no further step. stop_reason says why."""
        return self._should_stop

    @property
    def stop_step(self):
        """The step every rank stops before (policy "stop"), once agreed; else None."""
        return self._stop_step

    def check_stop(self):
        """Raises laggard.policy.StopTraining when should_stop (for loops that prefer it)."""
        if self._should_stop:
            from .policy import StopTraining

            raise StopTraining(self.stop_reason, self._stop_step)

    def _poll_verdict(self):
        """A sampled step's end: a new verdict raises its events (one call into the engine)."""
        try:
            engine = self._engine
            if engine is None or engine.verdict_seq() == self._verdict_seq:
                return
            verdict = engine.latest_verdict()
            if verdict is None or verdict["seq"] == self._verdict_seq:
                return
            self._verdict_seq = verdict["seq"]
            if self._verdict_events is None:
                from .policy import VerdictEvents

                self._verdict_events = VerdictEvents()
            events = self._verdict_events.update(verdict)
            if verdict.get("stop_step") is not None and self._stop_step is None:
                from .policy import stop_reason

                self._stop_step = int(verdict["stop_step"])
                self.stop_reason = stop_reason(verdict, self._stop_after_windows)
        except Exception as e:
            self._errors.report("verdict", e)
            return
        policy = self.policy
        for v in events:
            if v.event == "straggler":
                fns = [policy.on_straggler] + self._straggler_callbacks
            else:
                fns = [policy.on_clear] + self._clear_callbacks
            for fn in fns:
                try:
                    fn(v)
                except Exception as e:
                    self._errors.report("verdict callback", e)
        if self._stop_step is not None and not self._should_stop:
            self._reach_stop()

    def _reach_stop(self):
        """At a step's end: should_stop once the next step is the stop step (or past it: the
        verdict came too late here, counted)."""
        step = self.step
        if step is None or step + 1 < self._stop_step:
            return
        self._should_stop = True
        if step + 1 > self._stop_step:
            self._errors.report("stop", RuntimeError(
                "the stop step %d reached this rank after its step %d: it stops there, later "
                "than the ranks that learned it in time (raise stop_lead_s)" %
                (self._stop_step, step)))
        try:
            self.policy.on_stop(self.stop_reason, step + 1)
        except Exception as e:
            self._errors.report("verdict callback", e)

    def _add_to_fleet(self):
        """Closed, on the analysis rank, with fleet_store: the run goes into the fleet store. The
        other ranks' logs may still be finishing: a run that does not read whole yet is tried
        again for a few seconds; any failure is a counted warning."""
        store = self._fleet_store
        if store is None or not self.is_analysis_rank or self._forked_steps is not None:
            return
        self._fleet_store = None  # once
        try:
            if self._fleet_log_dir is None:
                raise ValueError("fleet_store needs log_dir (the fleet store reads the run's "
                                 "rank logs)")
            from . import fleet
            from .exclude import BadRun

            deadline = time.monotonic() + 10.0
            while True:
                try:
                    added = fleet.add_run(os.fspath(self._fleet_log_dir),
                                          None if store is True else os.fspath(store))
                    break
                except BadRun:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.25)
            self.fleet_run = added
        except Exception as e:
            self._errors.report("fleet store", e)

    # -- results -----------------------------------------------------------------------------

    def latest_metrics(self):
        """A copy of the latest straggler/* metrics, on every rank; {} before the first verdict.

        The analysis rank has the latest report's metrics (what its sinks get). Every other rank
        has the latest verdict the analysis rank sent down the gather tree (at most one per
        0.25 s, and at once one whose confirmed set or stop step changed; it arrives a few
        background turns later):
        straggler/num_confirmed, straggler/confirmed ("rank:stage,...", the 16 costliest),
        straggler/likely_bottleneck, straggler/whatif_step_saving_ms, straggler/ranks and
        straggler/step_ms. Every rank also gets its own part: straggler/verdict_step (the step
        of the window the verdict is about), straggler/local_score (this rank's worst relative
        score ref / t over its compute, data and other stages, in (0, 1], 1 = nowhere slower
        than the reference; NaN until its samples reached the analysis) and
        straggler/local_confirmed (1.0 when this rank is a confirmed straggler itself), so that
        every rank can log the verdict or act on it together."""
        try:
            if self._engine is None or self._forked_steps is not None:
                return {}
            return self._engine.latest_metrics()
        except Exception as e:
            self._errors.report("latest_metrics", e)
            return {}

    def latest_report(self):
        """The latest report as a dict, on every rank; None before the first verdict.

        On the analysis rank: the whole report (stages, stragglers, waiting, slow_hosts, hints,
        metrics). On every other rank it is made from the verdict: step, ranks_seen,
        world_size, stragglers (the confirmed ones, with cost_ms and cost_share), hints (one per
        straggler with its reason), likely_bottleneck, whatif_step_saving_ms, metrics (as
        latest_metrics()); stages, waiting and slow_hosts are empty. On every rank "verdict"
        holds the verdict itself: step, num_confirmed, confirmed (each with rank, host, stage,
        slowdown, cost_ms, cost_share and reason), and this rank's "score" and
        "self_confirmed"."""
        try:
            if self._engine is None or self._forked_steps is not None:
                return None
            return self._engine.latest_report()
        except Exception as e:
            self._errors.report("latest_report", e)
            return None

    def counters(self):
        """What was sampled, emitted, logged, sent and dropped, and how many failures were
        counted (docs/reference/failure-contract.md has the sums they obey)."""
        out = {"report_errors": 0}
        if self._forked_steps is not None:
            # A forked child: the parent's C++ objects may hold locks taken by threads that do
            # not exist here, so they are not touched.
            out["forked_steps_dropped"] = self._forked_steps
            out["report_errors"] = self._errors.total
            return out
        try:
            if self._engine is not None:
                out.update(self._engine.counters)
        except Exception as e:
            self._errors.report("counters", e)
        if self._gloo is not None:
            out.update(self._side_channel_setup_counters())
        if self._delivery is not None:
            out.update(self._delivery.counters())
        out["report_errors"] = self._errors.total
        return out

    def _side_channel_setup_counters(self):
        """The gloo side channel's setup: still joining, failed (timed out, or closed before
        every rank joined), and how many ranks had not joined."""
        gloo = self._gloo
        state = gloo.setup_state
        return {"side_channel_joining": state == "joining",
                "side_channel_setup_failed": int(state not in ("joining", "joined")),
                "side_channel_missing_ranks": len(gloo.missing_ranks)}

    # -- shutdown ----------------------------------------------------------------------------

    def close(self, timeout_s=None):
        """Flushes outstanding samples and reports (bounded wait), then stops. Idempotent.
        Every rank should call it: the analysis rank waits for the others' last samples."""
        if not self._enabled or self._closed:
            return
        self._closed = True
        try:
            try:
                atexit.unregister(self._atexit)
            except Exception:
                pass
            timeout_s = self._close_timeout_s if timeout_s is None else float(timeout_s)
            if self._sampled:
                self.end_step()
            # Nothing is timed from here on: laggard.torch's hooks and wrappers come out (one of
            # them, at interval 1, wraps torch.autograd.backward for the whole process).
            for remove in self._on_close:
                try:
                    remove()
                except Exception as e:
                    self._errors.report("close", e)
            self._on_close = []
            if self._res is not None:
                res, self._res = self._res, None
                try:
                    res.close()
                except Exception as e:
                    self._errors.report("close", e)
            spent = 0.0
            deferred = self._deferred
            if deferred is not None and deferred.pending:
                # Values still on their way from the device (laggard.torch's loss): their events
                # are polled (never waited on) for a part of the bound; the rest go unresolved,
                # and the engine's drain emits their steps without them (deferred_dropped).
                t0 = time.monotonic()
                deferred.drain(min(1.0, timeout_s / 4), self._engine.poll)
                spent = time.monotonic() - t0
            # device timing drains first, within the bound
            self._engine.close(max(timeout_s - spent, timeout_s * 0.75))
        except Exception as e:
            self._errors.report("close", e)
        finally:
            self._enabled = False
            self._sampled = False
            if self._section_off is not None:
                self.section = self._section_off
            self._update_step_calls()
            if self._step_state is not None:
                self._step_state.release()
        self._add_to_fleet()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def _after_fork_in_child(ref):
    """os.fork() copied a started Analyzer: the child has no background thread, and the
    parent's rank log and side channel are not the child's. It records nothing; its
    begin_step() warns once and counts its steps (counters()["forked_steps_dropped"])."""
    an = ref()
    if an is None or not an._enabled:
        return
    an._enabled = False
    an._sampled = False
    if an._section_off is not None:
        an.section = an._section_off
    an._deferred = None  # the parent's CUDA events and buffers: not the child's
    an._forked_steps = 0
    if an._step_state is not None:  # the builtins reach the parent's engine
        an._step_state.release()
        an.__dict__.pop("end_step", None)
        an._update_step_calls()
    an.begin_step = an._begin_step_in_forked_child  # only this object, only in the child
    res, an._res = an._res, None  # its thread is the parent's: not joined, not touched
    if res is not None:
        res.detach_gc()
    # The engine's locks may have been held by its threads at the fork: the child never touches
    # it, not even to destroy it, and counts its own failures.
    an._errors = ErrorCounter()
    if an._engine is not None:
        an._engine.forget()


def _close_at_exit(ref):
    an = ref()
    if an is not None:
        try:
            an.close(timeout_s=min(5.0, an._close_timeout_s))
        except Exception:
            pass
