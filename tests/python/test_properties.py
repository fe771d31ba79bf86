"""Property-based tests of the Python API (hypothesis): arbitrary names, values and bytes get a
result or the documented error, never a crash or another exception (docs/reference/python.md,
docs/reference/failure-contract.md)."""

import json
import math
import os

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import laggard  # noqa: E402
from laggard import _core  # noqa: E402

KINDS = [_core.StageKind.compute, _core.StageKind.communication, _core.StageKind.data,
         _core.StageKind.other]
names = st.text(max_size=40)  # any Unicode scalar values, control characters and NUL included
ms = st.floats(min_value=0.0, max_value=1e300, allow_nan=False, allow_infinity=False)
int64 = st.integers(min_value=0, max_value=2**63 - 1)

# Each example is cheap, but on a shared 2-core machine the first ones can be slow. No example
# database: nothing is written into the working tree.
FAST = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=150,
                database=None)


@st.composite
def samples(draw):
    s = _core.StepSample()
    s.world_size = draw(st.integers(min_value=1, max_value=2**31 - 1))
    s.rank = draw(st.integers(min_value=0, max_value=s.world_size - 1))
    s.step = draw(int64)
    s.host = draw(names)
    s.cohort = draw(names)
    s.step_ms = draw(ms)
    s.stages = [_core.StageTime(n, k, ms=v, calls=c) for n, k, v, c in draw(st.lists(
        st.tuples(names, st.sampled_from(KINDS), ms, st.integers(0, 2**32 - 1)), max_size=8))]
    return s


@FAST
@given(samples())
def test_step_sample_json_round_trip(s):
    line = s.to_json()
    assert "\n" not in line
    json.loads(line)  # valid JSON, whatever the names hold
    back = _core.StepSample.from_json(line)
    assert (back.rank, back.world_size, back.step, back.host, back.cohort) == \
        (s.rank, s.world_size, s.step, s.host, s.cohort)
    assert back.step_ms == s.step_ms
    assert [(t.name, t.kind, t.ms, t.calls) for t in back.stages] == \
        [(t.name, t.kind, t.ms, t.calls) for t in s.stages]


@FAST
@given(st.binary(max_size=300))
def test_from_json_of_arbitrary_bytes_is_a_sample_or_a_value_error(data):
    try:
        line = data.decode("utf-8")
    except UnicodeDecodeError:
        return  # the binding takes str
    try:
        s = _core.StepSample.from_json(line)
    except ValueError as e:
        assert str(e)
        return
    # Accepted: what laggard writes for it parses to the same sample.
    assert _core.StepSample.from_json(s.to_json()).to_json() == s.to_json()


anything = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(),
                     names, st.binary(max_size=8), st.lists(st.integers(), max_size=2))
calls = st.lists(st.one_of(
    st.tuples(st.just("begin_step"), st.one_of(int64, anything)),
    st.tuples(st.just("section"), st.one_of(names, anything), st.one_of(
        st.none(), st.sampled_from(["compute", "communication", "data", "other"]), anything)),
    st.tuples(st.just("add"), st.one_of(names, anything), st.one_of(ms, st.floats(), anything),
              st.one_of(st.integers(0, 100), anything)),
    st.tuples(st.just("end_step"))), max_size=30)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                HealthCheck.function_scoped_fixture],
          max_examples=60, database=None)
@given(calls)
def test_analyzer_calls_never_raise_and_every_logged_line_reads_back(tmp_path, ops):
    log_dir = tmp_path / ("run-%d" % len(os.listdir(tmp_path)))
    an = laggard.Analyzer(interval=1, log_dir=str(log_dir), close_timeout_s=5.0)
    try:
        for op in ops:
            if op[0] == "begin_step":
                an.begin_step(op[1])
            elif op[0] == "section":
                with an.section(op[1], op[2]):
                    pass
            elif op[0] == "add":
                an.add(op[1], op[2], op[3])
            else:
                an.end_step()
    finally:
        an.close()
    c = an.counters()
    assert c["queue_dropped"] == 0 and c["rank_log_lost"] == 0
    assert c["rank_log_written"] == c["queue_pushed"] == c["samples_emitted"]
    if c["queue_pushed"]:
        windows, stats = laggard.read_run(str(log_dir))
        assert stats["malformed"] == 0, stats["errors"]
        # A step given twice (or going backwards) is logged each time and read once.
        assert stats["samples"] + stats["duplicates"] + stats["out_of_order"] == \
            c["queue_pushed"]
        for _, ss in windows:
            for s in ss:
                assert all(math.isfinite(t.ms) and t.ms >= 0 for t in s.stages)


@FAST
@given(st.lists(st.binary(max_size=200), min_size=1, max_size=3))
def test_read_run_of_arbitrary_bytes_reads_or_refuses_clearly(tmp_path_factory, files):
    d = tmp_path_factory.mktemp("run")
    for i, data in enumerate(files):
        (d / ("rank-%d.jsonl" % i)).write_bytes(data)
    try:
        windows, stats = laggard.read_run(str(d))
    except (ValueError, OSError) as e:
        assert str(e)
        return
    assert stats["files"] == len(files)
    assert stats["samples"] == sum(len(ss) for _, ss in windows)
    assert stats["malformed"] >= len(stats["errors"])
    steps = [step for step, _ in windows]
    assert steps == sorted(set(steps))


# -- what the properties above found (fixed), as plain tests ---------------------------------

def test_a_negative_step_is_refused_and_counted_not_logged(tmp_path):
    # It was sampled and logged, and the reader then dropped the line as malformed.
    an = laggard.Analyzer(interval=1, log_dir=str(tmp_path))
    an.begin_step(-1)
    an.end_step()
    an.begin_step(0)
    an.end_step()
    an.close()
    c = an.counters()
    assert c["report_errors"] == 1 and c["queue_pushed"] == 1, c
    windows, stats = laggard.read_run(str(tmp_path))
    assert stats["malformed"] == 0 and [step for step, _ in windows] == [0]


def test_a_section_with_an_unhashable_name_is_counted_not_raised(tmp_path):
    # section([]) raised TypeError (unhashable type: 'list') into the training loop.
    an = laggard.Analyzer(interval=1, log_dir=str(tmp_path))
    an.begin_step(0)
    with an.section([]):
        pass
    with an.section("forward"):
        pass
    an.end_step()
    an.close()
    assert an.counters()["report_errors"] >= 1
    windows, _ = laggard.read_run(str(tmp_path))
    assert [t.name for t in windows[0][1][0].stages] == ["forward"]
