"""Resource readings beside each sampled step (the sample's `resources`, docs/reference/formats.md).

Sources, each optional and failing soft (a reading that is not available is left out, never
written as 0):

  host   the process's CPU time (time.process_time), the training thread's
         (time.pthread_getcpuclockid), the busiest other thread's (/proc/self/task/*/stat),
         context switches (getrusage: every thread of the process; /proc/self/status counts the
         main thread's only); Python's garbage-collector pauses (gc.callbacks) and the wait for
         the next batch (laggard.torch.timed_batches, the Lightning callback) in the step.
  gpu    NVML (nvidia-ml-py's `pynvml`, imported when the Analyzer starts, initialised on the
         sampler thread): clocks, throttle reasons, temperature, power, ECC, PCIe, utilisation,
         memory of the rank's device (the training thread's current CUDA device, noted at the
         first sampled step after the program has initialised CUDA; laggard never initialises
         it). No pynvml, no driver, no GPU: no gpu_* readings.
  cuda   PyTorch's caching allocator (torch.cuda.memory_stats) of that device.

Where the work happens: the reads (NVML, /proc, the allocator's statistics) run on one
background thread ("laggard-resources"), which refreshes them about as often as steps are
sampled (the time between sampled steps, kept between 1 s and 5 s) and publishes them as one
tuple. On a sampled step the training thread only adds the GC callback at begin_step, takes it
out at end_step and copies the latest readings, with the step's GC and data-wait figures, into
the sample. Under an Analyzer that is C (laggard._core.StepState, attach_steps): the sampler
thread publishes into it, and the Analyzer's begin_step/end_step builtins do the rest without
a Python frame. A sampler on its own does it in step_begin/step_end (Python), handing the pairs
to a record(pairs) callable. Unsampled steps: nothing.

A read that raises something other than "not supported" is counted (the analyzer's
report_errors, kind "resources <source>"), warned about once, and not tried again in the run;
nothing raises into training.
"""

import gc
import logging
import os
import sys
import threading
import time
import weakref

from ._log import log_once

# NVML's clock throttle (clock event) reason bits (nvml.h).
THROTTLE_SW_POWER_CAP = 0x4
THROTTLE_HW_SLOWDOWN = 0x8
THROTTLE_SW_THERMAL = 0x20
THROTTLE_HW_THERMAL = 0x40
THROTTLE_HW_POWER_BRAKE = 0x80

MIN_PERIOD_S = 1.0  # a read holds the GIL ~0.5 ms (bench/resources_overhead.py): <= 0.05 %
MAX_PERIOD_S = 5.0
DEFAULT_PERIOD_S = 1.0
MiB = 1024.0 * 1024.0
_monotonic = time.monotonic  # the training thread's clock: one global, no attribute


def throttle_flags(mask):
    """The 0/1 flags of a throttle-reason bit mask: thermal (software or hardware), power (the
    software power cap or the hardware power brake), hardware slowdown (any of NVML's hardware
    slowdown bits: HwSlowdown, HwThermalSlowdown, HwPowerBrakeSlowdown)."""
    mask = int(mask)
    return {
        "gpu_throttle_reasons": float(mask),
        "gpu_throttle_thermal": float(bool(mask & (THROTTLE_SW_THERMAL | THROTTLE_HW_THERMAL))),
        "gpu_throttle_power": float(bool(mask & (THROTTLE_SW_POWER_CAP |
                                                 THROTTLE_HW_POWER_BRAKE))),
        "gpu_throttle_hw_slowdown": float(bool(mask & (THROTTLE_HW_SLOWDOWN | THROTTLE_HW_THERMAL |
                                                       THROTTLE_HW_POWER_BRAKE))),
    }


def parse_task_stat(text):
    """utime + stime (clock ticks) from a /proc/<pid>/task/<tid>/stat line. The thread's name
    (field 2) is in parentheses and may hold spaces and parentheses itself: fields are counted
    from the last ')'."""
    rest = text[text.rindex(")") + 2:].split()
    # rest[0] is field 3 (state); utime and stime are fields 14 and 15.
    return int(rest[11]) + int(rest[12])


def parse_status_ctxt(text):
    """(voluntary, involuntary) context switches from /proc/<pid>/status text, or None when the
    lines are missing."""
    vol = invol = None
    for line in text.splitlines():
        if line.startswith("voluntary_ctxt_switches:"):
            vol = int(line.split(":", 1)[1])
        elif line.startswith("nonvoluntary_ctxt_switches:"):
            invol = int(line.split(":", 1)[1])
    if vol is None or invol is None:
        return None
    return vol, invol


def top_other_thread_pct(prev, cur, dt_s, exclude, ticks_per_s):
    """The busiest thread's CPU (% of a core) between two {tid: ticks} readings dt_s apart,
    leaving out the tids in `exclude` and threads not in both readings; None when no thread is
    left or dt_s is not positive."""
    if dt_s <= 0:
        return None
    best = None
    for tid, ticks in cur.items():
        if tid in exclude:
            continue
        before = prev.get(tid)
        if before is None or ticks < before:
            continue
        pct = 100.0 * (ticks - before) / ticks_per_s / dt_s
        if best is None or pct > best:
            best = pct
    return best


def nvml_device_index(cuda_index, visible_devices):
    """The NVML index or UUID ("GPU-...", "MIG-...") of CUDA device `cuda_index` from
    CUDA_VISIBLE_DEVICES (None when it is unset: the index itself), or None when the entry cannot
    be mapped."""
    if visible_devices is None:
        return cuda_index
    entries = [e.strip() for e in visible_devices.split(",")]
    # CUDA stops at the first entry that is not a device.
    usable = []
    for e in entries:
        if not e or e.startswith("-"):
            break
        usable.append(e)
    if not 0 <= cuda_index < len(usable):
        return None
    entry = usable[cuda_index]
    if entry.isdigit():
        return int(entry)
    if entry.startswith(("GPU-", "MIG-")):
        return entry
    return None


class _Disabled(Exception):
    """A reading that is not supported: left out from now on, not counted as a failure."""


class _Source:
    """One group of readings. read() returns {name: value}; each reading is its own callable,
    so that one failing leaves out only itself. `errors` counts failures (kind
    "resources <name>")."""

    name = "source"

    def __init__(self, errors):
        self._errors = errors
        self._off = set()  # readings that failed or are not supported: not tried again

    def _try(self, key, fn, out):
        if key in self._off:
            return
        try:
            got = fn()
        except _Disabled:
            self._off.add(key)
            return
        except Exception as e:
            if self._not_supported(e):
                self._off.add(key)
                log_once("resources-unsupported %s %s" % (self.name, key), logging.INFO,
                         "laggard: resource reading %s not available (%s: %s)", key,
                         type(e).__name__, e)
                return
            self._off.add(key)
            self._errors.report("resources %s" % self.name, RuntimeError(
                "reading %s: %s: %s (left out from now on)" % (key, type(e).__name__, e)))
            return
        if got:
            out.update(got)

    def _not_supported(self, e):
        return isinstance(e, (OSError, NotImplementedError))

    def close(self):
        pass


class HostSource(_Source):
    """CPU of the process, of the training thread and of the busiest other thread; context
    switches. Rates are over the time since the previous read (the first read has none)."""

    name = "host"

    def __init__(self, errors, train_ident, train_tid, task_dir="/proc/self/task",
                 monotonic=time.monotonic):
        super().__init__(errors)
        self._task_dir = task_dir
        self._monotonic = monotonic
        self._train_tid = train_tid
        self._exclude = {train_tid}
        try:
            self._train_clock = time.pthread_getcpuclockid(train_ident)
        except Exception:  # not on this platform
            self._train_clock = None
        try:
            self._ticks_per_s = float(os.sysconf("SC_CLK_TCK"))
        except Exception:
            self._ticks_per_s = 100.0
        self._prev = None  # (t, process cpu s, train cpu s, {tid: ticks}, (vol, invol))

    def read(self):
        out = {}
        now = self._monotonic()
        cur = {"t": now}
        self._try("process_cpu", lambda: cur.__setitem__("proc", time.process_time()), out)
        if self._train_clock is not None:
            self._try("train_thread_cpu", lambda: cur.__setitem__(
                "train", time.clock_gettime(self._train_clock)), out)
        self._try("threads", lambda: cur.__setitem__("tasks", self._task_ticks()), out)
        self._try("ctx", lambda: cur.__setitem__("ctx", self._ctx()), out)
        prev, self._prev = self._prev, cur
        if prev is not None:
            out.update(self.rates(prev, cur))
        return out

    def rates(self, prev, cur):
        dt = cur["t"] - prev["t"]
        out = {}
        if dt <= 0:
            return out
        if "proc" in prev and "proc" in cur:
            out["host_cpu_pct"] = 100.0 * max(0.0, cur["proc"] - prev["proc"]) / dt
        if "train" in prev and "train" in cur:
            out["host_train_thread_cpu_pct"] = 100.0 * max(0.0, cur["train"] - prev["train"]) / dt
        if "tasks" in prev and "tasks" in cur:
            top = top_other_thread_pct(prev["tasks"], cur["tasks"], dt, self._exclude,
                                       self._ticks_per_s)
            if top is not None:
                out["host_top_thread_cpu_pct"] = top
        if prev.get("ctx") is not None and cur.get("ctx") is not None:
            out["host_ctx_voluntary_per_s"] = max(0, cur["ctx"][0] - prev["ctx"][0]) / dt
            out["host_ctx_involuntary_per_s"] = max(0, cur["ctx"][1] - prev["ctx"][1]) / dt
        return out

    def _task_ticks(self):
        ticks = {}
        for name in os.listdir(self._task_dir):
            try:
                with open(os.path.join(self._task_dir, name, "stat")) as f:
                    ticks[int(name)] = parse_task_stat(f.read())
            except (OSError, ValueError, IndexError):  # the thread ended meanwhile
                continue
        return ticks

    @staticmethod
    def _ctx():
        try:
            import resource
        except ImportError:
            resource = None
        if resource is not None:
            usage = resource.getrusage(resource.RUSAGE_SELF)  # every thread of the process
            return int(usage.ru_nvcsw), int(usage.ru_nivcsw)
        with open("/proc/self/status") as f:  # no getrusage: the main thread's counts
            return parse_status_ctxt(f.read())


class NvmlSource(_Source):
    """The rank's GPU through NVML. `nvml`: the pynvml module (or an object with its functions,
    for tests); `device`: an NVML index or a UUID string (nvml_device_index)."""

    name = "gpu"

    def __init__(self, errors, nvml, device):
        super().__init__(errors)
        self._nvml = nvml
        self._device = device
        self._handle = None
        self._init_failed = False

    def _not_supported(self, e):
        nvml = self._nvml
        err = getattr(nvml, "NVMLError", None)
        if err is not None and isinstance(e, err):
            value = getattr(e, "value", None)
            return value in (getattr(nvml, "NVML_ERROR_NOT_SUPPORTED", 3),
                             getattr(nvml, "NVML_ERROR_NO_PERMISSION", 4),
                             getattr(nvml, "NVML_ERROR_FUNCTION_NOT_FOUND", 13))
        return False

    def _open(self):
        if self._handle is not None or self._init_failed:
            return self._handle
        nvml = self._nvml
        try:
            nvml.nvmlInit()
            if isinstance(self._device, str):
                self._handle = nvml.nvmlDeviceGetHandleByUUID(self._device)
            else:
                self._handle = nvml.nvmlDeviceGetHandleByIndex(int(self._device))
        except Exception as e:
            self._init_failed = True
            log_once("resources-nvml", logging.INFO, "laggard: no GPU readings: NVML could not "
                     "open device %r (%s: %s)", self._device, type(e).__name__, e)
            return None
        return self._handle

    def read(self):
        h = self._open()
        if h is None:
            return {}
        n = self._nvml
        out = {}
        sm = getattr(n, "NVML_CLOCK_SM", 1)
        self._try("sm_clock", lambda: {"gpu_sm_clock_mhz": float(n.nvmlDeviceGetClockInfo(h, sm))},
                  out)
        self._try("sm_clock_max", lambda: {
            "gpu_sm_clock_max_mhz": float(n.nvmlDeviceGetMaxClockInfo(h, sm))}, out)
        self._try("throttle", lambda: throttle_flags(self._reasons(h)), out)
        self._try("temperature", lambda: {"gpu_temperature_c": float(n.nvmlDeviceGetTemperature(
            h, getattr(n, "NVML_TEMPERATURE_GPU", 0)))}, out)
        self._try("power", lambda: {"gpu_power_w": n.nvmlDeviceGetPowerUsage(h) / 1000.0}, out)
        self._try("power_limit", lambda: {
            "gpu_power_limit_w": n.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0}, out)
        volatile = getattr(n, "NVML_VOLATILE_ECC", 0)
        self._try("ecc", lambda: {
            "gpu_ecc_corrected": float(n.nvmlDeviceGetTotalEccErrors(
                h, getattr(n, "NVML_MEMORY_ERROR_TYPE_CORRECTED", 0), volatile)),
            "gpu_ecc_uncorrected": float(n.nvmlDeviceGetTotalEccErrors(
                h, getattr(n, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1), volatile))}, out)
        self._try("pcie_gen", lambda: {
            "gpu_pcie_gen": float(n.nvmlDeviceGetCurrPcieLinkGeneration(h))}, out)
        self._try("pcie_gen_max", lambda: {
            "gpu_pcie_gen_max": float(n.nvmlDeviceGetMaxPcieLinkGeneration(h))}, out)
        self._try("pcie_width", lambda: {
            "gpu_pcie_width": float(n.nvmlDeviceGetCurrPcieLinkWidth(h))}, out)
        self._try("pcie_width_max", lambda: {
            "gpu_pcie_width_max": float(n.nvmlDeviceGetMaxPcieLinkWidth(h))}, out)
        self._try("util", lambda: {
            "gpu_util_pct": float(n.nvmlDeviceGetUtilizationRates(h).gpu)}, out)
        self._try("memory", lambda: self._memory(h), out)
        return out

    def _reasons(self, h):
        n = self._nvml
        fn = getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            getattr(n, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
        if fn is None:
            raise _Disabled()
        return fn(h)

    def _memory(self, h):
        info = self._nvml.nvmlDeviceGetMemoryInfo(h)
        return {"gpu_mem_used_mib": info.used / MiB, "gpu_mem_total_mib": info.total / MiB}

    def close(self):
        if self._handle is not None:
            self._handle = None
            try:
                self._nvml.nvmlShutdown()
            except Exception:
                pass


class CudaAllocatorSource(_Source):
    """torch.cuda.memory_stats of the rank's device, once the program has initialised CUDA
    (laggard never initialises it). `torch`: the module (or a stand-in, for tests)."""

    name = "cuda"

    def __init__(self, errors, torch, device):
        super().__init__(errors)
        self._torch = torch
        self._device = device

    def read(self):
        out = {}
        cuda = self._torch.cuda
        if not cuda.is_initialized():
            return out
        self._try("memory_stats", lambda: self.convert(cuda.memory_stats(self._device)), out)
        return out

    @staticmethod
    def convert(stats):
        out = {}
        for key, name, scale in (("allocated_bytes.all.current", "cuda_allocated_mib", MiB),
                                 ("reserved_bytes.all.current", "cuda_reserved_mib", MiB),
                                 ("num_alloc_retries", "cuda_alloc_retries", 1.0)):
            if key in stats:
                out[name] = stats[key] / scale
        return out


class GcWatch:
    """Python's garbage-collector pauses while its callback is in gc.callbacks (sampled steps
    only: ResourceSampler puts it in and takes it out itself, without a method call; under an
    Analyzer, `callback` is the StepState's C callback, attach_steps). A pause that
    starts on another thread also stops the training thread (it holds the GIL), so every
    collection counts. `state`: [pause seconds, collections, start of the running collection]."""

    __slots__ = ("state", "callback")

    def __init__(self, clock=time.perf_counter):
        self.state = state = [0.0, 0, None]

        def callback(phase, info):
            if phase == "start":
                state[2] = clock()
            elif state[2] is not None:
                state[0] += clock() - state[2]
                state[2] = None
                state[1] += 1

        self.callback = callback

    def attach(self):
        state = self.state
        state[0], state[1], state[2] = 0.0, 0, None
        gc.callbacks.append(self.callback)

    def detach(self):
        """Takes the callback out; returns (pause ms, collections) since attach()."""
        try:
            gc.callbacks.remove(self.callback)
        except ValueError:  # someone cleared gc.callbacks
            pass
        return self.state[0] * 1000.0, self.state[1]


class ResourceSampler:
    """The resource readings of one Analyzer: the sources, the sampler thread, the per-step
    GC and data-wait figures. Training thread: step_begin, step_end, add_data_wait; the rest
    belongs to the thread that made it (start, close) or to the sampler thread (refresh).

    sources: the _Source objects to read (make_sampler() builds the usual ones). period_s: how
    often the thread refreshes; None follows the time between sampled steps. cuda_torch: torch,
    where it has CUDA: once the program has initialised CUDA, a sampled step notes the training
    thread's current device, and the sampler thread adds that GPU's sources (gpu_sources, with
    `nvml`, the pynvml module or None)."""

    def __init__(self, errors, sources, period_s=None, gc_pauses=True, cuda_torch=None,
                 nvml=None):
        self._errors = errors
        self._sources = list(sources)
        self._cuda_torch = cuda_torch  # until the training thread's CUDA device is known
        self._torch = cuda_torch
        self._nvml = nvml
        self._cuda_index = None  # that device, for the sampler thread to add its sources
        self._gpu_added = False
        self._fixed_period = period_s
        self._board = None  # laggard._core.StepState, under an Analyzer (attach_steps)
        self._period_s = DEFAULT_PERIOD_S if period_s is None else float(period_s)
        self._latest = None  # (monotonic time, tuple of (name, value)): published whole
        self._gc = GcWatch() if gc_pauses else None
        self._gc_attached = False
        self._wait_before_ms = None  # the latest batch fetch outside a sampled step
        self._wait_in_step_ms = None  # the sum of the fetches during the sampled step
        self._last_sampled = None  # monotonic time of the previous sampled step's end
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = None
        self.refreshes = 0
        self.refresh_cpu_s = 0.0  # the sampler thread's CPU time in refresh()

    @property
    def period_s(self):
        """How often the sampler thread refreshes (it follows the time between sampled steps
        unless period_s was given)."""
        board = self._board
        return self._period_s if board is None else board.period_s

    @period_s.setter
    def period_s(self, value):
        self._period_s = value
        if self._board is not None:
            self._board.period_s = value

    def attach_steps(self, board):
        """Hands the training thread's half to `board` (the Analyzer's laggard._core.StepState):
        its sampled steps put the GC callback in and take it out, take the data-wait figures
        (add_data_wait becomes the board's builtin) and copy the readings published to it;
        refresh() publishes there. step_begin/step_end then go to the board too."""
        watch = self._gc
        find_cuda = None
        if self._cuda_torch is not None:
            ref = weakref.ref(self)  # the board holds no reference back: no cycle

            def find_cuda():
                sampler = ref()
                return True if sampler is None else sampler._find_cuda_device()

        callback = board.set_resources(
            gc.callbacks if watch is not None else None, self._period_s,
            0.0 if self._fixed_period is None else float(self._fixed_period), MIN_PERIOD_S,
            MAX_PERIOD_S, find_cuda)
        if watch is not None:
            # The board's GC callback (C) is the one that goes into gc.callbacks now.
            watch.callback = callback
        if self._wait_in_step_ms is not None:
            board.add_data_wait(self._wait_in_step_ms, True)
        elif self._wait_before_ms is not None:
            board.add_data_wait(self._wait_before_ms, False)
        self._wait_before_ms = self._wait_in_step_ms = None
        self._board = board
        self.add_data_wait = board.add_data_wait  # a builtin: no Python frame per batch
        latest = self._latest
        if latest is not None:
            board.publish(latest[0], latest[1])

    @property
    def gc_attached(self):
        """Whether the GC callback is in gc.callbacks (a sampled step is under way)."""
        board = self._board
        return self._gc_attached if board is None else board.gc_attached

    def detach_gc(self):
        """Takes the GC callback out, if it is in (close, a forked child)."""
        if self._board is not None:
            self._board.release_resources()
        if self._gc_attached:
            self._gc_attached = False
            self._gc.detach()

    # -- the sampler thread ------------------------------------------------------------------

    def start(self):
        if self._thread is not None:
            return
        if self._cuda_torch is not None:
            self._find_cuda_device()
        self._thread = threading.Thread(target=self._run, name="laggard-resources", daemon=True)
        self._thread.start()

    def _run(self):
        try:
            while not self._stop.is_set():
                self.refresh()
                self._wake.wait(self.period_s)
                self._wake.clear()
        except Exception as e:  # never seen; the readings stop, training goes on
            self._errors.report("resources", e)

    def refresh(self):
        """Reads every source and publishes the result (the sampler thread; tests call it)."""
        t0 = time.thread_time()
        if self._cuda_index is not None and not self._gpu_added:
            self._gpu_added = True
            try:
                self._sources = self._sources + gpu_sources(
                    self._errors, self._torch, self._cuda_index, self._nvml)
            except Exception as e:
                self._errors.report("resources gpu", e)
        out = {}
        for source in self._sources:
            try:
                out.update(source.read())
            except Exception as e:  # a source's own bug: that source is dropped
                self._sources = [s for s in self._sources if s is not source]
                self._errors.report("resources %s" % source.name, e)
        self._latest = latest = (time.monotonic(), tuple(out.items()))
        board = self._board
        if board is not None:
            board.publish(latest[0], latest[1])
        self.refreshes += 1
        self.refresh_cpu_s += time.thread_time() - t0
        return out

    def latest(self):
        """The latest published readings as a dict ({} before the first refresh)."""
        latest = self._latest
        return dict(latest[1]) if latest is not None else {}

    # -- the training thread -----------------------------------------------------------------

    def _find_cuda_device(self):
        """The training thread's CUDA device, once CUDA is initialised (one check per sampled
        step until then)."""
        torch = self._cuda_torch
        if torch is None:
            return True
        try:
            if not torch.cuda.is_initialized():
                return False
            self._cuda_index = int(torch.cuda.current_device())
        except Exception as e:
            log_once("resources-cuda", logging.INFO, "laggard: no GPU readings: %s: %s",
                     type(e).__name__, e)
        self._cuda_torch = None
        self._wake.set()  # the sampler thread adds the GPU's sources now
        return True

    def add_data_wait(self, ms, in_sampled_step):
        """A batch fetch of `ms` (laggard.torch.timed_batches, the Lightning callback). A sampled
        step's host_data_wait_ms is the sum of the fetches made during it, or, when it made none,
        the latest fetch before it (the loop fetched its batch, then began the step)."""
        if in_sampled_step:
            self._wait_in_step_ms = (self._wait_in_step_ms or 0.0) + ms
        else:
            self._wait_before_ms = ms

    def step_begin(self):
        """A sampled step begins: the GC callback goes in (GcWatch.attach, inlined: a Python
        call costs a microsecond or more right after a training step)."""
        board = self._board
        if board is not None:
            board.resources_begin()
            return
        watch = self._gc
        if watch is not None and not self._gc_attached:
            state = watch.state
            state[0], state[1], state[2] = 0.0, 0, None
            gc.callbacks.append(watch.callback)
            self._gc_attached = True

    def step_end(self, record):
        """A sampled step ends: `record(pairs)` (the engine's record_resources builtin: one
        call) gets a tuple of (name, value): the step's GC and data-wait figures and the latest
        readings, unless those are stale (the sampler thread has not refreshed for 4 periods and
        at least 5 s). Attached to an Analyzer's StepState: the board records them itself."""
        board = self._board
        if board is not None:
            board.resources_end()
            return
        pairs = ()
        if self._gc_attached:  # GcWatch.detach, inlined
            self._gc_attached = False
            watch = self._gc
            try:
                gc.callbacks.remove(watch.callback)
            except ValueError:  # someone cleared gc.callbacks
                pass
            state = watch.state
            pairs = (("host_gc_pause_ms", state[0] * 1000.0), ("host_gc_collections", state[1]))
        wait = self._wait_in_step_ms
        if wait is None:
            wait = self._wait_before_ms
        if wait is not None:
            pairs += (("host_data_wait_ms", wait),)
            self._wait_before_ms = self._wait_in_step_ms = None
        now = _monotonic()
        latest = self._latest
        # Comparisons, not min()/max() (here and below): right after a training step those
        # builtins are cold code, together ~4 µs of a sampled step (bench/step_cost_ab.py).
        if pairs:
            record(pairs)
        if latest is not None:
            stale_s = 4.0 * self._period_s
            if now - latest[0] <= (stale_s if stale_s > 5.0 else 5.0):
                record(latest[1])  # a second call, warm now, instead of a copy of ~30 pairs
        if self._cuda_torch is not None:
            self._find_cuda_device()
        last, self._last_sampled = self._last_sampled, now
        if last is not None and self._fixed_period is None:
            # The thread refreshes about as often as steps are sampled (read at its next wait).
            period = 0.8 * self._period_s + 0.2 * (now - last)
            self._period_s = (MIN_PERIOD_S if period < MIN_PERIOD_S else
                              MAX_PERIOD_S if period > MAX_PERIOD_S else period)

    def close(self, timeout_s=2.0):
        """Stops the sampler thread (waiting at most timeout_s) and closes the sources (NVML's
        shutdown), unless the thread is still inside a read (a hung driver): then they stay open
        and the daemon thread is left behind."""
        self.detach_gc()
        self._stop.set()
        self._wake.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)
            if thread.is_alive():
                log_once("resources-close", logging.WARNING, "laggard: the resource sampler "
                         "did not stop within %.1f s (a read still running); left behind",
                         timeout_s)
                return
        for source in self._sources:
            try:
                source.close()
            except Exception:
                pass


def _import_pynvml():
    """The pynvml module of nvidia-ml-py, or None (not installed, or it failed to import).
    Where the deprecated `pynvml` package is installed beside nvidia-ml-py, its import hook
    warns (FutureWarning) at the first lookup of the name, find_spec included: both are inside
    the silenced block, so laggard's output carries no third-party deprecation warning."""
    import importlib.util
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            if importlib.util.find_spec("pynvml") is None:
                return None
            import pynvml
        return pynvml
    except Exception as e:
        log_once("resources-pynvml", logging.INFO, "laggard: no GPU readings: pynvml did not "
                 "import (%s: %s)", type(e).__name__, e)
        return None


def _nvml_device(torch, index):
    """The NVML UUID of CUDA device `index` (torch's device properties), else its NVML index or
    UUID from CUDA_VISIBLE_DEVICES (CUDA may order devices otherwise than NVML: the UUID is
    what is sure)."""
    try:
        uuid = str(torch.cuda.get_device_properties(index).uuid)
        if uuid:
            return uuid if uuid.startswith(("GPU-", "MIG-")) else "GPU-" + uuid
    except Exception:  # an older torch
        pass
    return nvml_device_index(index, os.environ.get("CUDA_VISIBLE_DEVICES"))


def gpu_sources(errors, torch, index, nvml):
    """NVML (when `nvml`, the pynvml module, is given and the device maps to it) and the CUDA
    allocator of CUDA device `index`."""
    sources = []
    if nvml is not None:
        device = _nvml_device(torch, index)
        if device is not None:
            sources.append(NvmlSource(errors, nvml, device))
        else:
            log_once("resources-nvml-map", logging.INFO, "laggard: no GPU readings: CUDA device "
                     "%d is not found in CUDA_VISIBLE_DEVICES=%r", index,
                     os.environ.get("CUDA_VISIBLE_DEVICES"))
    sources.append(CudaAllocatorSource(errors, torch, index))
    return sources


def _cuda_available(torch):
    try:
        return torch is not None and bool(torch.cuda.is_available())
    except Exception:
        return False


def make_sampler(errors, period_s=None, torch="auto", nvml="auto"):
    """The ResourceSampler an Analyzer starts, on the training thread: the host source, and
    where torch has CUDA, the GPU's once the program has initialised CUDA (laggard never does
    it). torch: "auto" (the module if the program imported it) or a module; nvml: "auto"
    (import pynvml), None or a module."""
    if torch == "auto":
        torch = sys.modules.get("torch")
    sources = [HostSource(errors, threading.get_ident(), threading.get_native_id())]
    cuda = torch if _cuda_available(torch) else None
    if cuda is not None and nvml == "auto":
        nvml = _import_pynvml()  # here, not on the sampler thread: its import may warn
    return ResourceSampler(errors, sources, period_s=period_s, cuda_torch=cuda,
                           nvml=nvml if cuda is not None else None)
