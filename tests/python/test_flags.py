"""The RFC flags: exact names, defaults and choices."""

import argparse

import pytest

import laggard


def parser():
    p = argparse.ArgumentParser()
    laggard.add_arguments(p)
    return p


def test_exact_names_and_defaults():
    a = parser().parse_args([])
    assert a.straggler_analysis is False
    assert a.straggler_interval == 10
    # Threshold flags left out take the library's defaults (docs/detection.md).
    assert a.straggler_relative_threshold is None
    assert a.straggler_absolute_ms_threshold is None
    assert a.straggler_ref is None
    kwargs = laggard.flags.analyzer_kwargs(a)
    assert kwargs["relative_threshold"] is None and kwargs["ref"] is None
    assert a.straggler_enable_module_stages is False
    assert a.straggler_log_dir is None
    options = {s for action in parser()._actions for s in action.option_strings}
    assert {"--straggler-analysis", "--straggler-interval", "--straggler-relative-threshold",
            "--straggler-absolute-ms-threshold", "--straggler-ref",
            "--straggler-enable-module-stages", "--straggler-log-dir"} <= options


def test_values_parse():
    a = parser().parse_args(["--straggler-analysis", "--straggler-interval", "3",
                             "--straggler-relative-threshold", "1.1",
                             "--straggler-absolute-ms-threshold", "0.5",
                             "--straggler-ref", "median", "--straggler-enable-module-stages",
                             "--straggler-log-dir", "/tmp/x"])
    assert (a.straggler_analysis, a.straggler_interval, a.straggler_relative_threshold,
            a.straggler_absolute_ms_threshold, a.straggler_ref,
            a.straggler_enable_module_stages, a.straggler_log_dir) == \
        (True, 3, 1.1, 0.5, "median", True, "/tmp/x")


def test_ref_choices():
    for ref in ("mean", "median", "robust"):
        assert parser().parse_args(["--straggler-ref", ref]).straggler_ref == ref
    with pytest.raises(SystemExit):
        parser().parse_args(["--straggler-ref", "max"])


def test_store_true_flags_take_no_value():
    with pytest.raises(SystemExit):
        parser().parse_args(["--straggler-analysis", "yes"])


def test_into_an_argument_group():
    p = argparse.ArgumentParser()
    g = p.add_argument_group("mine")
    laggard.add_arguments(g)
    assert p.parse_args(["--straggler-interval", "7"]).straggler_interval == 7


def test_preset_flag():
    parser = argparse.ArgumentParser()
    laggard.add_arguments(parser)
    assert parser.parse_args([]).straggler_preset is None
    args = parser.parse_args(["--straggler-analysis", "--straggler-preset", "recommended"])
    assert laggard.flags.analyzer_kwargs(args)["preset"] == "recommended"
    with pytest.raises(SystemExit):
        parser.parse_args(["--straggler-preset", "fastest"])


def test_defaults_are_the_librarys_and_rfc_is_the_rfcs_rule():
    an = laggard.Analyzer(enabled=True, interval=1, timing="host")
    try:
        o = an.options
        assert (o["method"], o["ref"], o["relative_threshold"]) == ("sequential", "robust", 1.1)
        assert o["absolute_ms_threshold"] == float("inf")
    finally:
        an.close()
    an = laggard.Analyzer(enabled=True, interval=1, timing="host", preset="rfc")
    try:
        o = an.options
        assert (o["method"], o["ref"], o["relative_threshold"], o["absolute_ms_threshold"],
                o["confirm_k"], o["confirm_n"]) == ("threshold", "mean", 1.2, 5.0, 2, 3)
    finally:
        an.close()


def test_recommended_preset_reaches_the_detector(tmp_path):
    an = laggard.Analyzer(enabled=True, interval=1, preset="recommended", timing="host")
    try:
        assert an.options["ref"] == "robust"
        assert an.options["relative_threshold"] == 1.1
        assert an.options["absolute_ms_threshold"] == float("inf")
        assert (an.options["confirm_k"], an.options["confirm_n"]) == (2, 3)
    finally:
        an.close()
