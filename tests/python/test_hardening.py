"""Hostile input, odd values and odd process setups (issue 14): nothing crashes, nothing is lost
without being counted."""

import json
import logging
import os
import subprocess
import sys
import time

import pytest

import laggard
from laggard import _core

import testenv

GOOD = ('{"schema":"laggard.sample/1","rank":0,"world_size":1,"step":%d,"step_ms":1,'
        '"stages":[{"name":"forward","ms":1}]}')


def nested_line(depth=100000):
    return ('{"schema":"laggard.sample/1","rank":0,"world_size":1,"step":0,"step_ms":1,'
            '"stages":[],"x":' + "[" * depth + "]" * depth + "}")


def run_python(code, **env):
    """Runs `code` in a fresh interpreter (a crash there fails the test, not the test run)."""
    e = testenv.subprocess_env(OMP_NUM_THREADS="1")
    e.update(env)
    return subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True,
                          timeout=120)


# -- 1. deeply nested brackets -------------------------------------------------------------------

def test_from_json_refuses_deep_nesting_with_a_value_error(tmp_path):
    path = tmp_path / "line.json"
    path.write_text(nested_line())
    r = run_python(
        "import sys\nfrom laggard import _core\n"
        "try:\n    _core.StepSample.from_json(open(sys.argv[-1]).read())\n"
        "except ValueError as e:\n    print('ValueError:', e)\n".replace("sys.argv[-1]",
                                                                      repr(str(path))))
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    assert "nested more than 1000 levels" in r.stdout


def test_read_run_skips_a_deeply_nested_line(tmp_path):
    (tmp_path / "rank-0.jsonl").write_text(nested_line() + "\n" + GOOD % 10 + "\n")
    r = run_python("import laggard, sys\nrun = laggard.read_run(%r)\nprint('ok')\n"
                   % str(tmp_path))
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])


# -- 3. non-finite values ------------------------------------------------------------------------

@pytest.mark.parametrize("values", [[float("inf")], [float("nan")], [-1.0], [1e308, 1e308]])
def test_add_of_a_non_finite_or_huge_value_is_counted_and_the_sample_kept(tmp_path, values):
    an = laggard.Analyzer(enabled=True, interval=1, log_dir=str(tmp_path))
    an.begin_step(0)
    with an.section("forward"):
        pass
    for v in values:
        an.add("x", v)
    an.end_step()
    c = an.counters()
    an.close()
    assert c["report_errors"] >= 1
    line = (tmp_path / "rank-0.jsonl").read_text().strip()
    assert "null" not in line
    s = _core.StepSample.from_json(line)
    assert s.find("forward") is not None


# -- 4. launcher environment before init_process_group; fork -------------------------------------

def test_launcher_rank_is_used_before_init_process_group(tmp_path):
    code = ("import laggard\n"
            "an = laggard.Analyzer(enabled=True, interval=1, log_dir=%r)\n"
            "print(an.rank, an.world_size)\n"
            "an.begin_step(0)\nan.end_step()\nan.close()\n" % str(tmp_path))
    for rank in (0, 1):
        r = run_python(code, RANK=str(rank), WORLD_SIZE="2")
        assert r.returncode == 0, r.stderr[-2000:]
        assert r.stdout.split() == [str(rank), "2"]
    assert sorted(os.listdir(tmp_path)) == ["rank-0.jsonl", "rank-1.jsonl", "reports.jsonl"]


def test_bad_launcher_environment_is_ignored_with_a_warning(tmp_path):
    r = run_python("import laggard\nan = laggard.Analyzer(enabled=True)\n"
                   "print(an.rank, an.world_size)\nan.close()\n", RANK="5", WORLD_SIZE="2")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["0", "1"]
    assert "ignoring RANK" in r.stderr


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_a_forked_child_warns_once_and_counts_its_steps(tmp_path):
    code = ("import laggard, os, logging\nlogging.basicConfig()\n"
            "an = laggard.Analyzer(enabled=True, interval=1, log_dir=%r)\n"
            "pid = os.fork()\n"
            "if pid == 0:\n"
            "    for i in range(5):\n"
            "        an.begin_step(i)\n        an.end_step()\n"
            "    print('child', an.counters()['forked_steps_dropped'], an.counters()['report_errors'])\n"
            "    os._exit(0)\n"
            "os.waitpid(pid, 0)\n"
            "for i in range(3):\n    an.begin_step(i)\n    an.end_step()\n"
            "an.close()\nprint('parent', an.counters()['report_errors'])\n" % str(tmp_path))
    r = run_python(code)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "child 5 1" in r.stdout
    assert "parent 0" in r.stdout
    assert r.stderr.count("was forked from pid") == 1
    assert len((tmp_path / "rank-0.jsonl").read_text().splitlines()) == 3


# -- 8. constructor types, begin_step("seven") ---------------------------------------------------

@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(queue_capacity=-1), ValueError, "queue_capacity must be >= 1"),
    (dict(queue_capacity="8"), TypeError, "queue_capacity must be an integer"),
    (dict(host=123), TypeError, "host must be a string"),
    (dict(cohort=None), TypeError, "cohort must be a string"),
    (dict(interval=2.5), TypeError, "interval must be an integer"),
    (dict(side_channel_timeout_s=float("nan")), ValueError, "side_channel_timeout_s"),
    (dict(close_timeout_s="soon"), TypeError, "close_timeout_s"),
    (dict(rank=3, world_size=2), ValueError, "rank must be in"),
    (dict(world_size=0), ValueError, "world_size must be >= 1"),
])
def test_bad_constructor_arguments_raise_a_clear_error(kwargs, exc, match):
    with pytest.raises(exc, match=match) as info:
        laggard.Analyzer(enabled=True, **kwargs)
    assert isinstance(info.value, ValueError)  # docs/reference/python.md: bad settings are ValueErrors
    assert "(self:" not in str(info.value)  # no pybind11 signature dump


def test_begin_step_with_a_string_warns_clearly(caplog):
    an = laggard.Analyzer(enabled=True, interval=1)
    with caplog.at_level(logging.WARNING, logger="laggard"):
        an.begin_step("seven")
    assert not an.sampled
    assert an.counters()["report_errors"] == 1
    an.close()
    text = caplog.text
    assert "the step must be an integer" in text and "'seven'" in text, text
    assert "not all arguments converted" not in text


# -- issue 30: analyze_run of a run without a sample, PrometheusSink's address ---------------------

def test_analyze_run_without_a_well_formed_sample_raises_as_the_cli_exits_2(tmp_path):
    # It returned {'windows': 0, 'text': '... 0 ranks ...'} where `laggard analyze` exits 2.
    (tmp_path / "rank-0.jsonl").write_text('{"schema":"laggard.sample/1","rank":0}\nnot json\n')
    with pytest.raises(_core.InputError, match=r"no well-formed samples in .* \(1 files, 2 "
                                               r"malformed lines\); first: .*rank-0.jsonl:1"):
        laggard.analyze_run(tmp_path, outputs=("text", "html"))
    assert issubclass(_core.InputError, OSError)
    with pytest.raises(_core.InputError, match="no well-formed samples"):
        laggard.analyze_run(os.path.join(os.path.dirname(__file__), "..", "data",
                                         "run-empty-files"))


def test_prometheus_sink_listens_on_loopback_unless_told_otherwise():
    # It bound 0.0.0.0 by default: every host reaching the node read the metrics, unauthenticated.
    import inspect
    import urllib.request

    from prometheus_client import CollectorRegistry

    from laggard.sinks import PrometheusSink

    assert inspect.signature(PrometheusSink).parameters["addr"].default == "127.0.0.1"
    sink = PrometheusSink(port=0, registry=CollectorRegistry())
    try:
        sink(5, {"whatif_step_saving_ms": 1.5})
        assert sink.port > 0
        assert sink._server.server_address[0] == "127.0.0.1"
        body = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % sink.port,
                                      timeout=10).read().decode()
        assert "laggard_report_step 5.0" in body
    finally:
        sink.close()
    # Every interface, when asked for.
    anywhere = PrometheusSink(port=0, addr="0.0.0.0", registry=CollectorRegistry())
    try:
        anywhere(5, {"whatif_step_saving_ms": 1.5})
        assert anywhere._server.server_address[0] == "0.0.0.0"
    finally:
        anywhere.close()
