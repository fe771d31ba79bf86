"""laggard._core: the bindings behave as the C++ API says."""

import json
import math
import time

import pytest

from laggard import _core


def make_sample(rank, step, forward_ms, comm_ms=1.0, world=4):
    s = _core.StepSample()
    s.rank, s.world_size, s.step, s.host, s.step_ms = rank, world, step, "h%d" % rank, 50.0
    s.stages = [_core.StageTime("forward", ms=forward_ms),
                _core.StageTime("communication", "communication", ms=comm_ms, calls=2)]
    return s


def recorder_with_samples(interval):
    """A host-clock Recorder whose finished samples go to a list: (recorder, list of JSON
    lines). (The Analyzer's samples go to the live engine, tested in tests/cpp.)"""
    rec = _core.Recorder(interval=interval)
    lines = []
    rec.on_sample(lambda s: lines.append(s.to_json()))
    return rec, lines


def test_stage_kinds():
    assert _core.StageKind.communication.name == "communication"
    assert _core.default_stage_kind("dataloader") == _core.StageKind.data
    assert _core.default_stage_kind("forward") == _core.StageKind.compute
    with pytest.raises(ValueError, match="unknown stage kind 'gpu'"):
        _core.StageTime("x", "gpu")


def test_sample_json_round_trip_is_exact():
    s = make_sample(3, 120, 0.1 + 0.2)
    line = s.to_json()
    assert "\n" not in line
    doc = json.loads(line)
    assert doc["schema"] == "laggard.sample/1" == _core.SAMPLE_SCHEMA
    assert doc["rank"] == 3 and doc["step"] == 120
    back = _core.StepSample.from_json(line)
    assert back.stages[0].ms == 0.1 + 0.2  # shortest round-trip form: bit for bit
    assert back.stages[1].kind == _core.StageKind.communication and back.stages[1].calls == 2
    assert back.find("forward").ms == s.find("forward").ms
    assert back.find("nope") is None


def test_sample_values_and_resources_round_trip_bit_for_bit():
    s = make_sample(1, 40, 2.0)
    assert s.values == {} and s.resources == {}
    s.values = {"loss": float("nan"), "grad_norm": float("inf"), "low": float("-inf"),
                "zero": -0.0, "third": 1.0 / 3.0, "tokens": 4096.0}
    s.resources = {"gpu_sm_clock_mhz": 1410.0}
    line = s.to_json()
    doc = json.loads(line)  # Python's json module reads the strings and the numbers
    assert doc["values"]["loss"] == "NaN" and doc["values"]["grad_norm"] == "Infinity"
    assert doc["values"]["low"] == "-Infinity"
    back = _core.StepSample.from_json(line).values
    assert list(back) == ["loss", "grad_norm", "low", "zero", "third", "tokens"]
    assert math.isnan(back["loss"]) and back["grad_norm"] == math.inf
    assert back["low"] == -math.inf
    assert math.copysign(1.0, back["zero"]) == -1.0
    assert back["third"] == 1.0 / 3.0 and back["tokens"] == 4096.0
    assert _core.StepSample.from_json(line).resources == {"gpu_sm_clock_mhz": 1410.0}
    doc["values"]["loss"] = None
    with pytest.raises(ValueError, match="'loss' of field 'values' is not a number"):
        _core.StepSample.from_json(json.dumps(doc))


def test_parser_names_what_is_wrong():
    with pytest.raises(ValueError, match="bad sample line"):
        _core.StepSample.from_json('{"schema":"laggard.sample/1","rank":0}')
    bad = json.loads(make_sample(0, 0, 1.0).to_json())
    bad["stages"][0]["ms"] = -1
    with pytest.raises(ValueError, match="ms"):
        _core.SampleParser().parse(json.dumps(bad))


def test_recorder_samples_every_interval_and_counts():
    rec = _core.Recorder(interval=3, rank=1, world_size=2)
    items = []
    rec.on_sample(lambda s: items.append((s.step, s.to_json())))
    fwd = rec.stage("forward")
    assert rec.stage("forward") == fwd
    comm = rec.stage("allreduce", "communication")
    sampled = []
    for step in range(7):
        sampled.append(rec.begin_step(step))
        rec.begin(fwd)
        time.sleep(0.001)
        rec.end(fwd)
        rec.add(comm, 2.5)
        rec.end_step()
    assert sampled == [True, False, False, True, False, False, True]
    assert [step for step, _ in items] == [0, 3, 6]
    s = _core.StepSample.from_json(items[0][1])
    assert s.rank == 1 and s.world_size == 2
    assert s.find("forward").ms >= 0.9
    assert s.find("allreduce").ms == 2.5
    assert s.find("allreduce").kind == _core.StageKind.communication
    c = rec.counters
    assert c["sampled_steps"] == 3 and c["samples_emitted"] == 3 and c["unbalanced"] == 0
    assert rec.backend_name == "host-clock"


def test_recorder_record_attaches_values_to_sampled_steps_bit_for_bit():
    rec = _core.Recorder(interval=2, rank=0, world_size=1)
    lines = []
    rec.on_sample(lambda s: lines.append(s.to_json()))
    for step in range(4):
        rec.begin_step(step)
        rec.record("loss", float("nan") if step == 2 else 0.1 + 0.2)
        rec.record_resource("host_gc_pause_ms", 1.5)
        rec.end_step()
    samples = [_core.StepSample.from_json(line) for line in lines]
    assert [s.step for s in samples] == [0, 2]
    assert json.loads(lines[0])["values"] == {"loss": 0.1 + 0.2}
    assert json.loads(lines[1])["values"] == {"loss": "NaN"}
    assert json.loads(lines[1])["resources"] == {"host_gc_pause_ms": 1.5}


def test_recorder_rejects_bad_settings():
    with pytest.raises(ValueError, match="interval"):
        _core.Recorder(interval=-1)
    with pytest.raises(ValueError, match="backend"):
        _core.Recorder(backend="tpu")


def test_cuda_backend_falls_back_with_a_reason():
    rec = _core.Recorder(backend="cuda", device=0)
    # No GPU or driver here: the host clock, and one line saying why.
    if rec.backend_name == "host-clock":
        assert rec.backend_reason
    rec.set_stream(0)  # a no-op on the host clock


def test_detector_reports_metrics_and_confirms():
    det = _core.Detector(_core.DetectorOptions(ref="mean"))
    report = None
    # The default (sequential) test needs 4 windows at 4 ranks x 1 stage: ln(4 x 1000 / 0.01)
    # + ln(5 shifts) = 14.5 of evidence, at most ln(100) = 4.6 a window.
    for step in (0, 10, 20, 30):
        samples = [make_sample(r, step, 40.0 if r == 2 else 10.0) for r in range(4)]
        report = det.observe(samples, local_rank=0)
    m = report["metrics"]
    assert m["straggler/forward/top_rank"] == 2.0
    assert m["straggler/forward/local_ms"] == 10.0
    assert m["straggler/forward/max_ms"] == 40.0
    assert m["straggler/likely_bottleneck"] == "forward"
    assert isinstance(m["straggler/hints"], str)
    assert [(f["rank"], f["stage"], f["confirmed"]) for f in report["stragglers"]] == \
        [(2, "forward", True)]
    assert det.windows == 4
    assert det.confirmed()[0]["rank"] == 2


def test_detector_on_json_lines_lists_bad_lines():
    det = _core.Detector()
    lines = [make_sample(r, 5, 10.0).to_json() for r in range(3)] + ["{not json"]
    report = det.observe_lines(lines, step=5)
    assert report["ranks_seen"] == 3
    assert len(report["parse_errors"]) == 1


def test_detector_options_validate():
    with pytest.raises(ValueError):
        _core.DetectorOptions(ref="biggest")
    with pytest.raises(ValueError):
        _core.DetectorOptions(relative_threshold=-1)


def test_first_regression():
    import laggard

    assert laggard.first_regression([10, 10, 10], [10, 12, 20], 0.1) == (1, 2.0)
    assert laggard.first_regression([10, 10], [10, 10]) is None
    assert laggard.first_regression([0.0], [0.5], 0.1) == (0, 0.5)  # absolute when before == 0
    with pytest.raises(ValueError):
        laggard.first_regression([1.0], [1.0, 2.0])


def test_read_run_of_missing_dir_is_a_clear_error(tmp_path):
    import laggard

    with pytest.raises(OSError):
        laggard.read_run(str(tmp_path / "missing"))


def test_metric_values_are_float_or_str():
    det = _core.Detector()
    m = det.observe([make_sample(r, 0, 10.0) for r in range(2)])["metrics"]
    assert m and all(isinstance(v, (float, str)) for v in m.values())
    assert all(k.startswith("straggler/") for k in m)
    assert not any(isinstance(v, float) and math.isnan(v) for v in m.values())


def test_section_scope_times_and_survives_exceptions():
    rec, lines = recorder_with_samples(interval=1)
    scope = rec.section(rec.stage("forward"))
    rec.begin_step(0)
    with scope:
        time.sleep(0.002)
    with pytest.raises(KeyError):
        with scope:  # the user's exception passes through; the entry is still ended
            raise KeyError("boom")
    rec.end_step()
    del rec  # the scope keeps the recorder alive
    with scope:
        pass
    s = _core.StepSample.from_json(lines[0])
    assert s.find("forward").calls == 2 and s.find("forward").ms >= 1.8


def test_marks_and_step_calls_are_the_training_thread_forms():
    rec, lines = recorder_with_samples(interval=2)
    fwd = rec.stage("forward")
    begin, end = rec.marks(fwd)
    begin_step, end_step, set_stream = rec.step_calls()
    assert begin_step(0) is True
    begin(object(), (1, 2))  # arguments are ignored: a mark can be a hook itself
    time.sleep(0.002)
    end()
    set_stream(0)  # host clock: nothing to do
    end_step()
    assert begin_step(1) is False
    begin()  # not sampled: no-ops
    end()
    end_step()
    c = rec.counters
    assert c["samples_emitted"] == 1 and c["unbalanced"] == 0 and c["dropped_stages"] == 0
    with pytest.raises(TypeError):
        begin_step("two")
    assert len(lines) == 1  # one sampled step: one sample
    s = _core.StepSample.from_json(lines[0])
    assert s.step == 0 and s.find("forward").calls == 1 and s.find("forward").ms >= 1.5
    del rec  # the builtins keep the recorder alive
    assert begin_step(2) is True
    end_step()


def test_cancel_mark_drops_the_open_entry():
    rec, lines = recorder_with_samples(interval=1)
    bwd = rec.stage("backward")
    begin, end = rec.marks(bwd)
    cancel = rec.cancel_mark(bwd)
    begin_step, end_step, _ = rec.step_calls()
    begin_step(0)
    begin()
    time.sleep(0.02)
    cancel(object())  # arguments are ignored, as for the marks
    begin()
    end()
    end_step()
    begin_step(1)
    begin()
    cancel()  # the only entry: the stage is left out of the sample
    end_step()
    assert rec.counters["unbalanced"] == 0
    first, second = (_core.StepSample.from_json(line) for line in lines)
    assert first.find("backward").calls == 1 and first.find("backward").ms < 10
    assert second.find("backward") is None


def test_marks_of_a_stage_that_has_no_slot_count_a_dropped_stage():
    rec = _core.Recorder(interval=1)
    begin, end = rec.marks(-1)
    begin_step, end_step, _ = rec.step_calls()
    begin_step(0)
    begin()
    end()
    end_step()
    assert rec.counters["dropped_stages"] == 1 and rec.counters["unbalanced"] == 0


def test_hook_switch_puts_values_in_and_takes_them_out():
    from collections import OrderedDict

    class Owner:
        pass

    hooks = OrderedDict([(1, "theirs")])
    o = Owner()
    o.step = "original"

    def fn():
        return None

    sw = _core.HookSwitch([(hooks, 7, fn), (o.__dict__, "step", "wrapped")])
    assert not sw.is_on and sw.off() == 0
    assert sw.on() == 0 and sw.is_on
    assert list(hooks.items()) == [(1, "theirs"), (7, fn)] and o.step == "wrapped"
    assert sw.on() == 0  # already on: nothing happens
    assert sw.off() == 0
    assert list(hooks.items()) == [(1, "theirs")] and o.step == "original"
    hooks[2] = "later"
    sw.on()
    assert list(hooks) == [1, 2, 7]  # an OrderedDict keeps its order bookkeeping
    hooks[7] = "replaced by someone else"
    del o.step
    assert sw.off() == 0
    assert hooks[7] == "replaced by someone else" and "step" not in o.__dict__  # left alone
    with pytest.raises(TypeError, match="entry 0 must be a tuple"):
        _core.HookSwitch([("not", "a dict", 1)])


def test_hook_switch_counts_what_fails_and_is_collected_in_a_cycle():
    import gc
    import weakref

    class Refuses(dict):
        armed = False

        def __setitem__(self, key, value):
            if self.armed:
                raise RuntimeError("no")
            super().__setitem__(key, value)

    bad, good = Refuses(), {}
    sw = _core.HookSwitch([(bad, "k", 1), (good, "k", 2)])
    bad.armed = True
    assert sw.on() == 1 and good == {"k": 2} and "k" not in bad
    assert sw.off() == 0 and good == {}  # what never went in is not taken out

    class Holder:
        pass

    h = Holder()
    h.sw = _core.HookSwitch([(h.__dict__, "x", h)])  # a cycle through the switch
    h.sw.on()
    ref = weakref.ref(h)
    del h
    gc.collect()
    assert ref() is None



class Owner:
    """An object with a method, as the model or optimizer whose method a MethodWrapper stands
    in for."""

    def __init__(self, log):
        self.log = log

    def step(self, x=None, y=0):
        self.log.append(("step", x, y))
        return ("out", x, y)


def method_wrapper(kind, log, owner=None):
    """(owner, wrapper, hooks) with hooks that log their arguments under "pre" and "post"."""
    owner = owner or Owner(log)
    hooks = {"pre": lambda *a: log.append(("pre",) + a),
             "post": lambda *a: log.append(("post",) + a)}
    return owner, _core.MethodWrapper(owner, owner.step, hooks, "pre", "post", kind), hooks


def test_method_wrapper_forward_calls_pre_method_post():
    log = []
    owner, w, hooks = method_wrapper("forward", log)
    out = w(1, y=2)
    assert out == ("out", 1, 2)
    assert log == [("pre",), ("step", 1, 2), ("post", out)]
    assert log[2][1] is out  # the post hook gets the very output
    log.clear()
    assert w(*[3], **{"y": 4}) == ("out", 3, 4)  # through tp_call (a tuple and a dict)
    assert log == [("pre",), ("step", 3, 4), ("post", ("out", 3, 4))]
    log.clear()
    hooks["post"] = lambda output: log.append("replaced")  # looked up at each call
    w(5)
    assert log == [("pre",), ("step", 5, 0), "replaced"]
    del hooks["pre"]
    log.clear()
    with pytest.raises(KeyError, match="pre"):
        w(6)
    assert log == []  # a missing hook: nothing called
    with pytest.raises(ValueError, match="kind"):
        _core.MethodWrapper(owner, owner.step, hooks, "pre", "post", "backward")
    with pytest.raises(TypeError):
        _core.MethodWrapper(owner, None, hooks, "pre", "post", "forward")


def test_method_wrapper_optimizer_passes_obj_args_kwargs_to_both_hooks():
    log = []
    owner, w, _ = method_wrapper("optimizer", log)
    assert w(1, y=2) == ("out", 1, 2)
    assert log == [("pre", owner, (1,), {"y": 2}), ("step", 1, 2),
                   ("post", owner, (1,), {"y": 2})]
    assert type(log[0][2]) is tuple and type(log[0][3]) is dict
    log.clear()
    assert w() == ("out", None, 0)  # an optimizer's usual step()
    assert log == [("pre", owner, (), {}), ("step", None, 0), ("post", owner, (), {})]


def test_method_wrapper_calls_what_its_switch_entry_replaced_else_the_bound_method():
    log = []
    owner, w, _ = method_wrapper("forward", log)
    sw = _core.HookSwitch([(owner.__dict__, "step", w)])
    w.bind(sw, 0)
    assert w(1) == ("out", 1, 0)  # switch off: the bound method
    sw.on()  # nothing was in the instance dict: still the bound method
    assert owner.step is w and owner.step(2) == ("out", 2, 0)
    assert [e[0] for e in log] == ["pre", "step", "post"] * 2
    sw.off()
    log.clear()

    def users_step(*args, **kwargs):  # e.g. an lr_scheduler's counting wrapper
        log.append("user")
        return "user's"

    owner.step = users_step
    sw.on()
    assert owner.step is w and owner.step(3) == "user's"
    assert log == [("pre",), "user", ("post", "user's")]
    sw.off()
    assert owner.step is users_step
    log.clear()
    assert w(4) == ("out", 4, 0)  # off again: what it replaced is forgotten
    with pytest.raises(TypeError, match="HookSwitch"):
        w.bind(object(), 0)
    with pytest.raises(IndexError):
        w.bind(sw, 1)

    class Sticky(dict):  # off() cannot take the wrapper out: the next on() finds it there
        def __delitem__(self, key):
            raise RuntimeError("no")

    sticky = Sticky()
    sw = _core.HookSwitch([(sticky, "step", w)])
    w.bind(sw, 0)
    sw.on()
    assert sw.off() == 1 and sticky["step"] is w
    sw.on()
    assert sw.previous(0) is w
    log.clear()
    assert w(5) == ("out", 5, 0)  # the bound method, not itself again
    assert log == [("pre",), ("step", 5, 0), ("post", ("out", 5, 0))]

    # Wrappers that end up calling each other: a RecursionError, as Python callables would get
    hooks = {"pre": lambda: None, "post": lambda out: None}
    first = _core.MethodWrapper(owner, owner.step, hooks, "pre", "post", "forward")
    second = _core.MethodWrapper(owner, first, hooks, "pre", "post", "forward")
    d = {"step": second}
    loop = _core.HookSwitch([(d, "step", first)])
    first.bind(loop, 0)
    loop.on()
    with pytest.raises(RecursionError):
        first(1)


def test_method_wrapper_attributes_are_the_inner_callables():
    log = []
    owner, w, _ = method_wrapper("optimizer", log)
    assert w.__name__ == "step" and w.__self__ is owner and w.__func__ is Owner.step
    assert callable(w.bind)  # the wrapper's own
    with pytest.raises(AttributeError, match="nothing_here"):
        w.nothing_here

    def counted(*args, **kwargs):
        return None

    counted._with_counter = True  # lr_scheduler's marker on its wrapper
    owner.step = counted
    sw = _core.HookSwitch([(owner.__dict__, "step", w)])
    w.bind(sw, 0)
    assert not hasattr(w, "_with_counter")
    sw.on()
    assert owner.step._with_counter is True and owner.step.__name__ == "counted"
    sw.off()
    assert not hasattr(w, "_with_counter") and w.__name__ == "step"


class Boom(Exception):
    pass


def test_method_wrapper_forward_exceptions_propagate_and_skip_what_follows():
    log = []
    owner = Owner(log)
    error = Boom("in the forward")

    def raises(*args, **kwargs):
        log.append("inner")
        raise error

    hooks = {"pre": lambda: log.append("pre"), "post": lambda out: log.append("post")}
    w = _core.MethodWrapper(owner, raises, hooks, "pre", "post", "forward")
    with pytest.raises(Boom) as info:
        w(1)
    assert info.value is error and log == ["pre", "inner"]  # post not called
    log.clear()

    def pre_raises():
        raise Boom("in the pre hook")

    hooks["pre"] = pre_raises
    with pytest.raises(Boom, match="pre hook"):
        w(1)
    assert log == []  # the method is not called


def test_method_wrapper_optimizer_post_runs_in_a_finally():
    import sys

    log = []
    owner = Owner(log)
    error = Boom("in the step")

    def raises(*args, **kwargs):
        log.append("inner")
        raise error

    def post(obj, args, kwargs):
        log.append("post")

    hooks = {"pre": lambda *a: log.append("pre"), "post": post}
    w = _core.MethodWrapper(owner, raises, hooks, "pre", "post", "optimizer")
    with pytest.raises(Boom) as info:
        w(closure=None)
    assert info.value is error  # unchanged
    assert info.value.__context__ is None and info.value.__traceback__ is not None
    assert log == ["pre", "inner", "post"]
    assert sys.exc_info() == (None, None, None)
    try:
        raise KeyError("handled by the caller")
    except KeyError as outer:
        with pytest.raises(Boom):
            w()
        assert sys.exc_info()[1] is outer  # the caller's handled exception is left alone

    # A post hook that raises: its exception propagates, with the step's as its context (as
    # an exception raised in a finally block).
    late = Boom("in the post hook")

    def post_raises(obj, args, kwargs):
        raise late

    hooks["post"] = post_raises
    with pytest.raises(Boom) as info:
        w()
    assert info.value is late and info.value.__context__ is error
    ok = _core.MethodWrapper(owner, owner.step, hooks, "pre", "post", "optimizer")
    with pytest.raises(Boom) as info:  # after a step that returned, too
        ok(1)
    assert info.value is late


def test_method_wrapper_reference_counts_are_stable():
    import gc
    import sys

    log = []
    owner = Owner(log)
    arg, kwarg = object(), object()
    out = object()

    def step(*args, **kwargs):
        return out

    def raises(*args, **kwargs):
        raise Boom()

    def pre(*args):
        return None

    def post(*args):
        return None

    hooks = {"pre": pre, "post": post}
    for kind in ("forward", "optimizer"):
        w = _core.MethodWrapper(owner, step, hooks, "pre", "post", kind)
        bad = _core.MethodWrapper(owner, raises, hooks, "pre", "post", kind)
        sw = _core.HookSwitch([(owner.__dict__, "step", w)])
        w.bind(sw, 0)
        watched = (owner, step, hooks, pre, post, arg, kwarg, out, w, bad, sw)
        for round_ in range(2):
            if round_ == 1:
                owner.step = step  # the inner callable from the switch
                sw.on()
            gc.collect()  # the previous kind's wrapper and switch (a cycle)
            before = [sys.getrefcount(o) for o in watched]
            for _ in range(1000):
                assert w(arg, k=kwarg) is out
                assert w.__name__ == "step"
                try:
                    bad(arg, k=kwarg)
                except Boom:
                    pass
            gc.collect()
            assert [sys.getrefcount(o) for o in watched] == before, kind
            sw.off()
            owner.__dict__.pop("step", None)

    # In place, the wrapper is in a cycle (owner -> __dict__ -> wrapper -> owner, and through
    # its switch): the collector frees it.
    import weakref

    class Model:
        def forward(self):
            return 1

    m = Model()
    hooks = {"pre": pre, "post": post}
    w = _core.MethodWrapper(m, m.forward, hooks, "pre", "post", "forward")
    sw = _core.HookSwitch([(m.__dict__, "forward", w)])
    w.bind(sw, 0)
    sw.on()
    assert m.forward() == 1
    ref = weakref.ref(m)
    del m, w, sw
    gc.collect()
    assert ref() is None
