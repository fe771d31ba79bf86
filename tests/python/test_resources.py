"""laggard.resources: each source's parsing and decisions on recorded values (a fake pynvml, a
recorded /proc status text), and real readings (GC pauses, a busy thread, the data wait, the
loss of laggard.torch.instrument) read back from the rank log."""

import gc
import logging
import threading
import time
import types

import pytest

import laggard
from laggard import _core, resources
from laggard._log import ErrorCounter


# -- recorded values -------------------------------------------------------------------------

# /proc/self/status of a training process (Linux 6.1), trimmed.
STATUS_TEXT = """Name:\tpython3
Umask:\t0022
State:\tS (sleeping)
Tgid:\t4242
Pid:\t4242
Threads:\t23
voluntary_ctxt_switches:\t15210
nonvoluntary_ctxt_switches:\t377
"""

# /proc/self/task/<tid>/stat lines: a thread name with a space and a parenthesis in it.
TASK_STAT = ("4250 (pt_autograd) 0) S 1 4242 4242 0 -1 4194368 1041 0 0 0 "
             "731 129 0 0 20 0 23 0 16077 9316352000 232000 18446744073709551615")


def test_task_stat_counts_fields_from_the_last_parenthesis():
    assert resources.parse_task_stat(TASK_STAT) == 731 + 129


def test_status_context_switches_are_parsed_and_missing_lines_give_none():
    assert resources.parse_status_ctxt(STATUS_TEXT) == (15210, 377)
    assert resources.parse_status_ctxt("Name:\tpython3\nvoluntary_ctxt_switches:\t5\n") is None


def test_top_other_thread_leaves_out_the_training_thread_and_new_threads():
    prev = {100: 1000, 101: 50, 102: 10}
    cur = {100: 1200, 101: 80, 102: 90, 103: 5000}  # 103 is new: no delta
    # 100 is the training thread (excluded); 102 used 80 ticks in 2 s at 100 ticks/s: 40 %
    assert resources.top_other_thread_pct(prev, cur, 2.0, {100}, 100.0) == pytest.approx(40.0)
    assert resources.top_other_thread_pct(prev, cur, 0.0, {100}, 100.0) is None
    assert resources.top_other_thread_pct({100: 1}, {100: 2}, 1.0, {100}, 100.0) is None


def test_host_rates_over_the_time_between_reads():
    src = resources.HostSource(ErrorCounter(), threading.get_ident(), threading.get_native_id())
    src._exclude = {7}
    src._ticks_per_s = 100.0
    prev = {"t": 10.0, "proc": 5.0, "train": 2.0, "tasks": {7: 0, 8: 100}, "ctx": (100, 10)}
    cur = {"t": 12.0, "proc": 6.5, "train": 3.0, "tasks": {7: 100, 8: 150}, "ctx": (300, 14)}
    assert src.rates(prev, cur) == {
        "host_cpu_pct": pytest.approx(75.0), "host_train_thread_cpu_pct": pytest.approx(50.0),
        "host_top_thread_cpu_pct": pytest.approx(25.0),
        "host_ctx_voluntary_per_s": pytest.approx(100.0),
        "host_ctx_involuntary_per_s": pytest.approx(2.0)}
    # a reading missing on one side is left out, never written as 0
    del cur["train"]
    cur["ctx"] = None
    out = src.rates(prev, cur)
    assert "host_train_thread_cpu_pct" not in out and "host_ctx_voluntary_per_s" not in out
    assert set(out) == {"host_cpu_pct", "host_top_thread_cpu_pct"}


def test_first_host_read_has_no_rates_the_second_has_them():
    src = resources.HostSource(ErrorCounter(), threading.get_ident(), threading.get_native_id())
    assert src.read() == {}
    time.sleep(0.05)
    out = src.read()
    assert {"host_cpu_pct", "host_train_thread_cpu_pct", "host_ctx_voluntary_per_s",
            "host_ctx_involuntary_per_s"} <= set(out)
    assert all(v >= 0 for v in out.values())


def test_throttle_flags_of_each_bit():
    f = resources.throttle_flags
    assert f(0) == {"gpu_throttle_reasons": 0.0, "gpu_throttle_thermal": 0.0,
                    "gpu_throttle_power": 0.0, "gpu_throttle_hw_slowdown": 0.0}
    assert f(0x1)["gpu_throttle_reasons"] == 1.0  # idle: no flag
    assert sum(v for k, v in f(0x1).items() if k != "gpu_throttle_reasons") == 0
    assert f(0x20)["gpu_throttle_thermal"] == 1.0 and f(0x20)["gpu_throttle_hw_slowdown"] == 0.0
    assert f(0x40)["gpu_throttle_thermal"] == 1.0 and f(0x40)["gpu_throttle_hw_slowdown"] == 1.0
    assert f(0x4)["gpu_throttle_power"] == 1.0 and f(0x4)["gpu_throttle_hw_slowdown"] == 0.0
    assert f(0x80)["gpu_throttle_power"] == 1.0 and f(0x80)["gpu_throttle_hw_slowdown"] == 1.0
    assert f(0x8) == {"gpu_throttle_reasons": 8.0, "gpu_throttle_thermal": 0.0,
                      "gpu_throttle_power": 0.0, "gpu_throttle_hw_slowdown": 1.0}


def test_cuda_visible_devices_maps_to_the_nvml_device():
    m = resources.nvml_device_index
    assert m(1, None) == 1
    assert m(1, "3,5") == 5
    assert m(0, "GPU-8c3f2b1e-aaaa-bbbb-cccc-0123456789ab,1") == \
        "GPU-8c3f2b1e-aaaa-bbbb-cccc-0123456789ab"
    assert m(2, "3,5") is None  # no such device
    assert m(1, "0,-1,2") is None  # CUDA stops at the first invalid entry
    assert m(0, "weird") is None


class FakeNvmlError(Exception):
    def __init__(self, value):
        super().__init__("NVML error %d" % value)
        self.value = value


def fake_nvml(reasons=0x20 | 0x40 | 0x8, broken=(), unsupported=(), init_error=None):
    """A pynvml stand-in with recorded readings of a throttling H100."""
    calls = []

    def fn(name, result):
        def call(*args):
            calls.append(name)
            if name in broken:
                raise RuntimeError("driver went away")
            if name in unsupported:
                raise FakeNvmlError(3)  # NVML_ERROR_NOT_SUPPORTED
            return result(*args) if callable(result) else result
        return call

    def init():
        if init_error is not None:
            raise init_error

    n = types.SimpleNamespace(
        NVMLError=FakeNvmlError, NVML_ERROR_NOT_SUPPORTED=3, NVML_ERROR_NO_PERMISSION=4,
        NVML_CLOCK_SM=1, NVML_TEMPERATURE_GPU=0, NVML_MEMORY_ERROR_TYPE_CORRECTED=0,
        NVML_MEMORY_ERROR_TYPE_UNCORRECTED=1, NVML_VOLATILE_ECC=0, calls=calls,
        nvmlInit=init, nvmlShutdown=lambda: calls.append("shutdown"),
        nvmlDeviceGetHandleByIndex=lambda i: ("handle", i),
        nvmlDeviceGetHandleByUUID=lambda u: ("handle", u),
        nvmlDeviceGetClockInfo=fn("clock", lambda h, c: 1245 if c == 1 else 0),
        nvmlDeviceGetMaxClockInfo=fn("max_clock", lambda h, c: 1980 if c == 1 else 0),
        nvmlDeviceGetCurrentClocksEventReasons=fn("reasons", reasons),
        nvmlDeviceGetTemperature=fn("temperature", 87),
        nvmlDeviceGetPowerUsage=fn("power", 698123),
        nvmlDeviceGetEnforcedPowerLimit=fn("power_limit", 700000),
        nvmlDeviceGetTotalEccErrors=fn("ecc", lambda h, kind, counter: [12, 1][kind]),
        nvmlDeviceGetCurrPcieLinkGeneration=fn("pcie_gen", 4),
        nvmlDeviceGetMaxPcieLinkGeneration=fn("pcie_gen_max", 5),
        nvmlDeviceGetCurrPcieLinkWidth=fn("pcie_width", 8),
        nvmlDeviceGetMaxPcieLinkWidth=fn("pcie_width_max", 16),
        nvmlDeviceGetUtilizationRates=fn("util", types.SimpleNamespace(gpu=97, memory=40)),
        nvmlDeviceGetMemoryInfo=fn("memory", types.SimpleNamespace(
            used=70 * 1024 ** 3, total=80 * 1024 ** 3, free=10 * 1024 ** 3)),
    )
    return n


EXPECTED_GPU = {
    "gpu_sm_clock_mhz": 1245.0, "gpu_sm_clock_max_mhz": 1980.0,
    "gpu_throttle_reasons": float(0x68), "gpu_throttle_thermal": 1.0, "gpu_throttle_power": 0.0,
    "gpu_throttle_hw_slowdown": 1.0, "gpu_temperature_c": 87.0, "gpu_power_w": 698.123,
    "gpu_power_limit_w": 700.0, "gpu_ecc_corrected": 12.0, "gpu_ecc_uncorrected": 1.0,
    "gpu_pcie_gen": 4.0, "gpu_pcie_gen_max": 5.0, "gpu_pcie_width": 8.0,
    "gpu_pcie_width_max": 16.0, "gpu_util_pct": 97.0, "gpu_mem_used_mib": 70 * 1024.0,
    "gpu_mem_total_mib": 80 * 1024.0,
}


def test_nvml_readings_of_a_throttling_gpu():
    errors = ErrorCounter()
    src = resources.NvmlSource(errors, fake_nvml(), "GPU-1234")
    assert src.read() == EXPECTED_GPU
    assert src._handle == ("handle", "GPU-1234")
    assert errors.total == 0
    src.close()
    assert src._nvml.calls[-1] == "shutdown"


def test_older_pynvml_without_event_reasons_uses_throttle_reasons():
    n = fake_nvml(reasons=0x4)
    n.nvmlDeviceGetCurrentClocksThrottleReasons = n.nvmlDeviceGetCurrentClocksEventReasons
    del n.nvmlDeviceGetCurrentClocksEventReasons
    out = resources.NvmlSource(ErrorCounter(), n, 0).read()
    assert out["gpu_throttle_power"] == 1.0 and out["gpu_throttle_thermal"] == 0.0
    del n.nvmlDeviceGetCurrentClocksThrottleReasons
    out = resources.NvmlSource(ErrorCounter(), n, 0).read()
    assert "gpu_throttle_reasons" not in out and "gpu_sm_clock_mhz" in out


def test_unsupported_readings_are_left_out_uncounted_and_not_asked_again():
    n = fake_nvml(unsupported=("ecc", "pcie_gen"))
    errors = ErrorCounter()
    src = resources.NvmlSource(errors, n, 0)
    for _ in range(3):
        out = src.read()
        assert set(EXPECTED_GPU) - set(out) == {"gpu_ecc_corrected", "gpu_ecc_uncorrected",
                                                "gpu_pcie_gen"}
    assert errors.total == 0
    assert n.calls.count("ecc") == 1 and n.calls.count("pcie_gen") == 1
    assert n.calls.count("clock") == 3


def test_a_failing_reading_is_counted_warned_once_and_left_out(caplog):
    n = fake_nvml(broken=("temperature",))
    errors = ErrorCounter()
    src = resources.NvmlSource(errors, n, 0)
    with caplog.at_level(logging.WARNING, logger="laggard"):
        for _ in range(3):
            out = src.read()
            assert "gpu_temperature_c" not in out and "gpu_power_w" in out
    assert errors.total == 1 and errors.by_kind == {"resources gpu": 1}
    assert len([r for r in caplog.records if "temperature" in r.getMessage()]) == 1
    assert n.calls.count("temperature") == 1


def test_nvml_that_cannot_start_gives_no_gpu_readings_and_no_error():
    errors = ErrorCounter()
    src = resources.NvmlSource(errors, fake_nvml(init_error=FakeNvmlError(12)), 0)
    assert src.read() == {} and src.read() == {}
    assert errors.total == 0


def test_no_gpu_here_means_no_gpu_sources():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    s = resources.make_sampler(ErrorCounter(), torch=torch)
    assert [type(x).__name__ for x in s._sources] == ["HostSource"]
    assert s._cuda_torch is None and s._nvml is None
    s.refresh()
    assert [type(x).__name__ for x in s._sources] == ["HostSource"]


class FakeTorch:
    """torch with CUDA, as far as laggard.resources looks at it."""

    def __init__(self, stats):
        self.cuda = FakeCuda(False, stats)
        self.cuda.is_available = lambda: True
        self.cuda.current_device = lambda: 1
        self.cuda.get_device_properties = lambda i: types.SimpleNamespace(
            uuid="8c3f2b1e-aaaa-bbbb-cccc-%012d" % i)


def test_gpu_sources_come_once_the_program_has_initialised_cuda():
    torch = FakeTorch({"allocated_bytes.all.current": 1024 ** 2,
                       "reserved_bytes.all.current": 2 * 1024 ** 2, "num_alloc_retries": 0})
    nvml = fake_nvml()
    s = resources.make_sampler(ErrorCounter(), torch=torch, nvml=nvml)
    s.refresh()
    assert [type(x).__name__ for x in s._sources] == ["HostSource"]  # CUDA not initialised
    s.step_begin()
    s.step_end(collect([]))
    assert s._cuda_index is None and s._cuda_torch is torch  # still waiting, checked again
    torch.cuda._initialized = True  # the program moved its model to the GPU
    s.step_begin()
    s.step_end(collect([]))
    assert s._cuda_index == 1 and s._cuda_torch is None  # no more checks
    out = s.refresh()
    assert [type(x).__name__ for x in s._sources] == ["HostSource", "NvmlSource",
                                                      "CudaAllocatorSource"]
    assert s._sources[1]._handle == ("handle", "GPU-8c3f2b1e-aaaa-bbbb-cccc-000000000001")
    assert {k: out[k] for k in EXPECTED_GPU} == EXPECTED_GPU
    assert (out["cuda_allocated_mib"], out["cuda_reserved_mib"], out["cuda_alloc_retries"]) == \
        (1.0, 2.0, 0.0)
    assert torch.cuda.devices == [1]
    got = []
    s.step_begin()
    s.step_end(collect(got))
    assert dict(got)["gpu_throttle_thermal"] == 1.0
    s.close()
    assert nvml.calls[-1] == "shutdown"


def test_without_pynvml_the_allocator_readings_remain():
    torch = FakeTorch({"num_alloc_retries": 3})
    torch.cuda._initialized = True
    s = resources.make_sampler(ErrorCounter(), torch=torch, nvml=None)
    s._find_cuda_device()
    out = s.refresh()
    assert [type(x).__name__ for x in s._sources] == ["HostSource", "CudaAllocatorSource"]
    assert out["cuda_alloc_retries"] == 3.0 and not any(k.startswith("gpu_") for k in out)


class FakeCuda:
    def __init__(self, initialized, stats):
        self._initialized = initialized
        self._stats = stats
        self.devices = []

    def is_initialized(self):
        return self._initialized

    def memory_stats(self, device):
        self.devices.append(device)
        return self._stats


def test_cuda_allocator_readings_only_once_cuda_is_initialized():
    stats = {"allocated_bytes.all.current": 3 * 1024 ** 3, "reserved_bytes.all.current":
             4 * 1024 ** 3 + 512 * 1024 ** 2, "num_alloc_retries": 7, "num_ooms": 0}
    fake = types.SimpleNamespace(cuda=FakeCuda(False, stats))
    src = resources.CudaAllocatorSource(ErrorCounter(), fake, 1)
    assert src.read() == {}
    fake.cuda._initialized = True
    assert src.read() == {"cuda_allocated_mib": 3072.0, "cuda_reserved_mib": 4608.0,
                          "cuda_alloc_retries": 7.0}
    assert fake.cuda.devices == [1]
    fake.cuda._stats = {}  # a torch whose allocator reports nothing: nothing, not zeros
    assert src.read() == {}


# -- the sampler -----------------------------------------------------------------------------

class Recorded(resources._Source):
    name = "recorded"

    def __init__(self, errors, readings):
        super().__init__(errors)
        self.readings = readings

    def read(self):
        return dict(self.readings)


def collect(pairs_out):
    def record(pairs):
        pairs_out.extend(pairs)
    return record


def test_sampled_step_gets_the_published_readings_and_gc_figures():
    s = resources.ResourceSampler(ErrorCounter(), [Recorded(ErrorCounter(), {"gpu_x": 1.5})],
                                  period_s=1.0)
    got = []
    s.step_begin()
    s.step_end(collect(got))  # before the first refresh: the GC figures only
    assert [n for n, _ in got] == ["host_gc_pause_ms", "host_gc_collections"]
    s.refresh()
    got = []
    s.step_begin()
    s.step_end(collect(got))
    assert dict(got)["gpu_x"] == 1.5
    # stale: the thread has not refreshed for over 4 periods and 5 s
    s._latest = (time.monotonic() - 6.0, s._latest[1])
    got = []
    s.step_begin()
    s.step_end(collect(got))
    assert "gpu_x" not in dict(got)
    s.close()


def test_gc_callback_is_in_place_during_sampled_steps_only():
    s = resources.ResourceSampler(ErrorCounter(), [], period_s=1.0)
    cb = s._gc.callback
    assert cb not in gc.callbacks
    s.step_begin()
    assert cb in gc.callbacks
    s.step_end(collect([]))
    assert cb not in gc.callbacks
    s.step_begin()
    s.close()  # closed inside a sampled step: taken out too
    assert cb not in gc.callbacks


def test_data_wait_of_a_step_is_its_fetches_or_the_latest_before_it():
    s = resources.ResourceSampler(ErrorCounter(), [], period_s=1.0, gc_pauses=False)
    got = []
    s.step_end(collect(got))
    assert got == []  # no fetch timed: left out
    s.add_data_wait(9.0, False)  # an unsampled step's fetch, replaced by the next one
    s.add_data_wait(4.0, False)
    s.step_end(collect(got))
    assert got == [("host_data_wait_ms", 4.0)]
    got = []
    s.add_data_wait(7.0, False)  # fetched before the step ...
    s.add_data_wait(2.0, True)  # ... and twice during it (gradient accumulation)
    s.add_data_wait(3.0, True)
    s.step_end(collect(got))
    assert got == [("host_data_wait_ms", 5.0)]
    got = []
    s.step_end(collect(got))
    assert got == []  # nothing since


def test_sampler_thread_refreshes_and_stops_at_close():
    src = Recorded(ErrorCounter(), {"r": 1.0})
    s = resources.ResourceSampler(ErrorCounter(), [src], period_s=0.05)
    s.start()
    deadline = time.monotonic() + 5
    while s.refreshes < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert s.refreshes >= 3
    thread = s._thread
    assert thread.name == "laggard-resources" and thread.daemon
    s.close()
    assert not thread.is_alive()


def test_period_follows_the_time_between_sampled_steps():
    s = resources.ResourceSampler(ErrorCounter(), [], gc_pauses=False)
    assert s.period_s == resources.DEFAULT_PERIOD_S
    s.step_end(collect([]))
    s._last_sampled -= 30.0  # sampled steps 30 s apart: the period grows, up to 5 s
    for _ in range(40):
        s._last_sampled = time.monotonic() - 30.0
        s.step_end(collect([]))
    assert s.period_s == resources.MAX_PERIOD_S
    for _ in range(60):  # 1 ms apart: down to 1 s
        s._last_sampled = time.monotonic() - 0.001
        s.step_end(collect([]))
    assert s.period_s == resources.MIN_PERIOD_S


# -- through the Analyzer, read back from the rank log ---------------------------------------

def rank_samples(log_dir):
    windows, _ = laggard.read_run(str(log_dir))
    return {step: samples[0] for step, samples in windows}


def test_forced_gc_pauses_reach_the_rank_log(tmp_path):
    an = laggard.Analyzer(enabled=True, interval=2, timing="host", log_dir=str(tmp_path))
    for step in range(4):
        an.begin_step(step)
        if step == 2:
            junk = [[i] for i in range(300000)]  # many tracked objects: a long collection
            t0 = time.perf_counter()
            gc.collect()
            forced_ms = (time.perf_counter() - t0) * 1000.0
            del junk
        an.end_step()
    an.close()
    assert an.counters()["report_errors"] == 0
    samples = rank_samples(tmp_path)
    assert sorted(samples) == [0, 2]
    r = samples[2].resources
    assert r["host_gc_collections"] >= 1
    # the forced collection is in the step's pauses (and pauses are no longer than the step)
    assert r["host_gc_pause_ms"] >= 0.5 * forced_ms > 0
    assert r["host_gc_pause_ms"] <= samples[2].step_ms
    assert samples[0].resources["host_gc_pause_ms"] < r["host_gc_pause_ms"]


def test_a_busy_thread_shows_in_host_top_thread_cpu_pct(tmp_path):
    an = laggard.Analyzer(enabled=True, interval=1, timing="host", log_dir=str(tmp_path),
                          resources_period_s=0.1)
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            sum(range(1000))

    busy = threading.Thread(target=spin)
    busy.start()
    try:
        for step in range(12):
            an.begin_step(step)
            time.sleep(0.1)  # the training thread idles; the other thread spins
            an.end_step()
    finally:
        stop.set()
        busy.join()
    an.close()
    samples = rank_samples(tmp_path)
    top = [s.resources.get("host_top_thread_cpu_pct") for s in samples.values()]
    train = [s.resources.get("host_train_thread_cpu_pct") for s in samples.values()]
    top = [v for v in top if v is not None]
    assert len(top) >= 5
    # a spinning thread shares a busy 2-core machine (and the GIL) with the others: well above
    # the idle training thread, if not at 100 %
    assert max(top) > 30.0
    assert sorted(top)[len(top) // 2] > 3 * max(0.5, sorted(
        v for v in train if v is not None)[len(top) // 2])
    names = set().union(*(s.resources for s in samples.values()))
    assert {"host_cpu_pct", "host_train_thread_cpu_pct", "host_ctx_voluntary_per_s",
            "host_ctx_involuntary_per_s", "host_gc_pause_ms", "host_gc_collections"} <= names
    assert not any(n.startswith(("gpu_", "cuda_")) for n in names)  # no GPU here


def test_resources_off_and_disabled_start_nothing(tmp_path):
    before = {t.name for t in threading.enumerate()}
    assert "laggard-resources" not in before
    off = laggard.Analyzer(enabled=False)
    assert off.resources is None
    an = laggard.Analyzer(enabled=True, interval=1, timing="host", log_dir=str(tmp_path),
                          resources=False)
    assert an.resources is None
    assert "laggard-resources" not in {t.name for t in threading.enumerate()}
    an.begin_step(0)
    an.end_step()
    an.close()
    assert rank_samples(tmp_path)[0].resources == {}
    with pytest.raises(ValueError):
        laggard.Analyzer(enabled=True, resources="yes")
    with pytest.raises(ValueError):
        laggard.Analyzer(enabled=True, resources_period_s=0)


def test_the_sampler_thread_runs_with_the_analyzer_and_stops_at_close():
    an = laggard.Analyzer(enabled=True, interval=1, timing="host")
    thread = an.resources._thread
    assert thread is not None and thread.is_alive()
    an.close()
    assert not thread.is_alive() and an.resources is None


def test_a_source_that_raises_is_counted_and_dropped_training_goes_on(tmp_path):
    an = laggard.Analyzer(enabled=True, interval=1, timing="host", log_dir=str(tmp_path),
                          resources_period_s=0.05)

    class Broken(resources._Source):
        name = "broken"

        def read(self):
            raise ZeroDivisionError("a bug in a source")

    res = an.resources
    res._sources.append(Broken(an._errors))
    res._sources.append(Recorded(an._errors, {"gpu_sm_clock_mhz": 1410.0}))
    deadline = time.monotonic() + 5
    while any(isinstance(s, Broken) for s in res._sources) and time.monotonic() < deadline:
        time.sleep(0.02)
    res.refresh()
    an.begin_step(0)
    an.end_step()
    an.close()
    assert an.counters()["report_errors"] == 1
    assert rank_samples(tmp_path)[0].resources["gpu_sm_clock_mhz"] == 1410.0


def test_unsampled_steps_add_nothing(tmp_path):
    an = laggard.Analyzer(enabled=True, interval=3, timing="host", log_dir=str(tmp_path))
    cb = an.resources._gc.callback
    for step in range(7):
        an.begin_step(step)
        assert (cb in gc.callbacks) == (step % 3 == 0)
        an.end_step()
        assert cb not in gc.callbacks
    an.close()
    assert sorted(rank_samples(tmp_path)) == [0, 3, 6]


def test_record_resource_of_the_users_own(tmp_path):
    an = laggard.Analyzer(enabled=True, interval=1, timing="host", log_dir=str(tmp_path),
                          resources=False)
    an.begin_step(0)
    an.record_resource("nic_rx_gbps", 93.5)
    an.record_resource("nic_rx_gbps", float("nan"))  # the last one is kept, NaN and all
    an.end_step()
    an.close()
    value = rank_samples(tmp_path)[0].resources["nic_rx_gbps"]
    assert value != value


def test_record_resources_builtin_checks_its_pairs():
    rec = _core.Recorder(interval=1)
    call = rec.record_resources_call()
    got = []
    rec.on_sample(got.append)
    rec.begin_step(0)
    call((("a", 1), ("b", 2.5)))
    with pytest.raises(TypeError):
        call((("c", 3.0), ("d",)))
    with pytest.raises(TypeError):
        call(((1, 3.0),))
    with pytest.raises(TypeError):
        call((("e", "x"),))
    call([])
    rec.end_step()
    assert got[0].resources == {"a": 1.0, "b": 2.5, "c": 3.0}


def test_flag_turns_resources_off():
    import argparse

    p = argparse.ArgumentParser()
    laggard.add_arguments(p)
    assert laggard.flags.analyzer_kwargs(p.parse_args([]))["resources"] is True
    args = p.parse_args(["--straggler-resources", "off"])
    assert laggard.flags.analyzer_kwargs(args)["resources"] is False
    with pytest.raises(SystemExit):
        p.parse_args(["--straggler-resources", "maybe"])


# -- laggard.torch: the data wait and the loss -----------------------------------------------

def test_timed_batches_puts_the_fetch_time_into_host_data_wait_ms(tmp_path):
    pytest.importorskip("torch")
    import laggard.torch as lt

    def slow_batches(n):
        for i in range(n):
            time.sleep(0.03 if i % 2 == 0 else 0.001)  # even steps (the sampled ones) wait
            yield i

    an = laggard.Analyzer(enabled=True, interval=2, timing="host", log_dir=str(tmp_path))
    batches = lt.timed_batches(slow_batches(6), an)
    for step, batch in enumerate(batches):
        assert batch == step
        an.begin_step(step)
        an.end_step()
    an.close()
    samples = rank_samples(tmp_path)
    assert sorted(samples) == [0, 2, 4]
    for s in samples.values():
        assert 25.0 <= s.resources["host_data_wait_ms"] < 1000.0
    # disabled: the batches untouched
    off = laggard.Analyzer(enabled=False)
    assert list(lt.timed_batches(range(3), off)) == [0, 1, 2]
    assert len(lt.timed_batches([1, 2], off)) == 2


def test_instrument_records_the_loss_bit_for_bit(tmp_path):
    torch = pytest.importorskip("torch")
    import laggard.torch as lt

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    an = laggard.Analyzer(enabled=True, interval=2, timing="host", log_dir=str(tmp_path))
    lt.instrument(an, model=model, optimizer=opt)
    losses = {}
    for step in range(6):
        an.begin_step(step)
        opt.zero_grad()
        loss = model(torch.randn(4, 8)).pow(2).mean()
        loss.backward()
        losses[step] = loss.item()
        opt.step()
        an.end_step()
    an.close()
    samples = rank_samples(tmp_path)
    assert sorted(samples) == [0, 2, 4]
    for step, s in samples.items():
        assert s.values["loss"] == losses[step]  # the same double
    assert an.counters()["report_errors"] == 0


def test_instrument_without_record_loss_records_no_values(tmp_path):
    torch = pytest.importorskip("torch")
    import laggard.torch as lt

    model = torch.nn.Linear(8, 1)
    an = laggard.Analyzer(enabled=True, interval=1, timing="host", log_dir=str(tmp_path))
    lt.instrument(an, model=model, record_loss=False)
    an.begin_step(0)
    model(torch.randn(4, 8)).pow(2).mean().backward()
    an.end_step()
    an.close()
    assert rank_samples(tmp_path)[0].values == {}


def test_instrument_records_a_hugging_face_style_output_loss_without_the_call_wrapper(
        tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    import laggard.torch as lt

    monkeypatch.setattr(lt, "_BACKWARD_CALL", False)  # the output's gradient hook only

    class WithLoss(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 1)

        def forward(self, x):
            out = self.lin(x)
            return types.SimpleNamespace(logits=out, loss=out.pow(2).mean())

    model = WithLoss()
    an = laggard.Analyzer(enabled=True, interval=1, timing="host", log_dir=str(tmp_path))
    lt.instrument(an, model=model)
    an.begin_step(0)
    out = model(torch.randn(4, 8))
    out.loss.backward()
    expected = out.loss.item()
    an.end_step()
    an.close()
    assert rank_samples(tmp_path)[0].values["loss"] == expected


def test_close_leaves_a_hung_read_behind_without_closing_its_source():
    release = threading.Event()

    class Hung(Recorded):
        closed = False

        def read(self):
            release.wait(10)
            return {}

        def close(self):
            Hung.closed = True

    s = resources.ResourceSampler(ErrorCounter(), [Hung(ErrorCounter(), {})], period_s=0.05)
    s.start()
    time.sleep(0.05)
    t0 = time.monotonic()
    s.close(timeout_s=0.2)
    assert time.monotonic() - t0 < 2.0  # close is bounded
    assert not Hung.closed  # the read is still running: its source stays open
    release.set()


def test_import_pynvml_prints_no_warning_of_the_deprecated_pynvml_package(monkeypatch):
    # The deprecated `pynvml` package (a shim over nvidia-ml-py) installs an import hook that
    # warns at the first lookup of the name, find_spec included; laggard looks it up and
    # imports it with that warning silenced.
    import importlib.abc
    import importlib.util
    import sys
    import warnings

    class Shim(importlib.abc.MetaPathFinder):
        warned = False

        def find_spec(self, name, path, target=None):
            if name.startswith("pynvml") and not self.warned:
                self.warned = True
                warnings.warn("The pynvml package is deprecated. Please install nvidia-ml-py "
                              "instead.", FutureWarning, stacklevel=2)

    shim = Shim()
    monkeypatch.setattr(sys, "meta_path", [shim] + sys.meta_path)
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)  # torch imported it already
    with pytest.warns(FutureWarning, match="pynvml package is deprecated"):
        importlib.util.find_spec("pynvml")  # what the shim does to a plain lookup
    shim.warned = False
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        nvml = resources._import_pynvml()
    assert shim.warned  # it was asked, and said nothing through laggard
    assert not [w for w in seen if "pynvml" in str(w.message)], [str(w.message) for w in seen]
    assert nvml is None or hasattr(nvml, "nvmlInit")
