"""The RFC flags: exact names, defaults and choices; the detector flags from the settings table,
and presets that mean the same in the program, in Python and in C++."""

import argparse
import json
import os
import subprocess

import pytest

import laggard
import testenv


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


def test_help_prints_every_setting():
    # A script's --help formats every help text with %: a setting's text holding "0.5 %" must not
    # break it, in the user's parser or in the demo's.
    text = parser().format_help()
    assert "0.5 %" in text and "--straggler-min-cost-share" in text
    import laggard.demo
    with pytest.raises(SystemExit) as done:
        laggard.demo.parse_args(["--help"])
    assert done.value.code == 0


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


def test_detector_flags_are_the_settings_table():
    from laggard import _core

    options = {s for action in parser()._actions for s in action.option_strings}
    for s in _core.detector_settings():
        flag = "--straggler-" + s["flag"][2:]
        assert flag in options, flag
        assert flag == "--straggler-" + s["name"].replace("_", "-")
    a = parser().parse_args(["--straggler-method", "threshold", "--straggler-confirm-k", "3",
                             "--straggler-confirm-n", "4", "--straggler-mad-z", "2.5",
                             "--straggler-false-alarm-budget", "0.05"])
    kwargs = laggard.flags.analyzer_kwargs(a)
    assert (kwargs["method"], kwargs["confirm_k"], kwargs["confirm_n"], kwargs["mad_z"],
            kwargs["false_alarm_budget"]) == ("threshold", 3, 4, 2.5, 0.05)
    with pytest.raises(SystemExit):
        parser().parse_args(["--straggler-confirm-k", "2.5"])
    with pytest.raises(SystemExit):
        parser().parse_args(["--straggler-method", "fastest"])


# (preset, settings given): each combination is resolved by the program's flags, by the Python
# flags and by _core.detector_options (C++), and must give the same options.
CASES = [
    (None, {}),
    ("default", {}),
    ("recommended", {}),
    ("rfc", {}),
    ("rfc", {"confirm_k": 3, "confirm_n": 5}),
    ("rfc", {"ref": "median", "relative_threshold": 1.3}),
    ("default", {"method": "threshold", "absolute_ms_threshold": 2.5}),
    (None, {"ref": "mean", "mad_z": 2.0, "false_alarm_budget": 0.05}),
]

OPTION_NAMES = ("method", "ref", "relative_threshold", "absolute_ms_threshold", "mad_z",
                "confirm_k", "confirm_n", "false_alarm_budget")


def _options_of(o):
    return {"method": o.method.name, "ref": o.ref.name,
            "relative_threshold": o.relative_threshold,
            "absolute_ms_threshold": o.absolute_ms_threshold, "mad_z": o.mad_z,
            "confirm_k": o.confirm_k, "confirm_n": o.confirm_n,
            "false_alarm_budget": o.false_alarm_budget}


def _flags(prefix, preset, given):
    out = ["--" + prefix + "preset", preset] if preset else []
    for k, v in given.items():
        out += ["--" + prefix + k.replace("_", "-"), str(v)]
    return out


@pytest.mark.parametrize("preset,given", CASES)
def test_presets_mean_the_same_in_the_program_python_and_cpp(preset, given):
    from laggard import _core

    world = 4  # examples/run-slow-forward has 4 ranks
    expected = _options_of(_core.detector_options(preset, world, **given))
    # The preset's own values under the settings given.
    base = _options_of(_core.DetectorOptions.preset(preset, world) if preset
                       else _core.DetectorOptions())
    for k in OPTION_NAMES:
        assert expected[k] == given.get(k, base[k]), k

    args = parser().parse_args(_flags("straggler-", preset, given))
    kw = laggard.flags.detector_kwargs(args)
    assert _options_of(_core.detector_options(args.straggler_preset, world, **kw)) == expected

    cli = testenv.cli()
    if cli is None:
        pytest.skip("the laggard program is not built")
    run = os.path.join(testenv.ROOT, "examples", "run-slow-forward")
    out = subprocess.run([cli, "analyze", "--json", "-q", run] + _flags("", preset, given),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)["options"]
    if got["absolute_ms_threshold"] is None:  # JSON has no infinity: "off" is written as null
        got["absolute_ms_threshold"] = float("inf")
    assert {k: got[k] for k in OPTION_NAMES} == expected


def test_the_analyzer_takes_a_preset_or_settings_as_the_program_does():
    # A preset, settings, or a preset with settings on top: the Analyzer's options are the
    # program's (the settings given win over the preset).
    from laggard import _core

    for preset, given in CASES:
        an = laggard.Analyzer(enabled=True, interval=1, timing="host", preset=preset, **given)
        try:
            expected = _options_of(_core.detector_options(preset, an.world_size, **given))
            assert {k: an.options[k] for k in OPTION_NAMES if k in an.options} == \
                {k: expected[k] for k in OPTION_NAMES if k in an.options}
            assert _options_of(an.detector_options) == expected
        finally:
            an.close()


def test_the_analyzer_from_flags_lets_a_flag_win_over_the_preset():
    from laggard import _core

    args = parser().parse_args(["--straggler-analysis", "--straggler-interval", "1",
                                "--straggler-preset", "rfc", "--straggler-confirm-k", "3",
                                "--straggler-confirm-n", "5", "--straggler-ref", "median"])
    an = laggard.Analyzer.from_args(args, timing="host")
    try:
        assert _options_of(an.detector_options) == _options_of(
            _core.detector_options("rfc", 4, confirm_k=3, confirm_n=5, ref="median"))
        assert _options_of(an.detector_options)["method"] == "threshold"
    finally:
        an.close()


OFF = "laggard: straggler analysis is off; pass --straggler-analysis to enable"

FROM_ARGS = """
import argparse, logging, sys, laggard
if "--configured" in sys.argv:
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="LOG %(levelname)s %(message)s")
    sys.argv.remove("--configured")
p = argparse.ArgumentParser()
laggard.add_arguments(p)
an = laggard.Analyzer.from_args(p.parse_args(), rank=0, world_size=1)
an2 = laggard.Analyzer.from_args(p.parse_args(), rank=0, world_size=1)
print("enabled", an.enabled)
an.close(); an2.close()
"""


def _from_args(*argv, rank=None):
    env = testenv.subprocess_env(OMP_NUM_THREADS="1")
    env.pop("RANK", None)
    if rank is not None:
        env["RANK"] = str(rank)
    import sys
    return subprocess.run([sys.executable, "-c", FROM_ARGS] + list(argv), env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=120)


def test_from_args_without_the_flag_says_once_that_laggard_is_off():
    r = _from_args()
    assert r.returncode == 0, r.stderr
    assert "enabled False" in r.stdout
    assert r.stderr.count(OFF) == 1, r.stderr  # two analyzers, one line
    r = _from_args(rank=0)
    assert r.stderr.count(OFF) == 1, r.stderr


def test_from_args_off_is_said_by_the_first_rank_only():
    r = _from_args(rank=3)
    assert r.returncode == 0, r.stderr
    assert OFF not in r.stderr + r.stdout


def test_from_args_off_goes_through_logging_at_info_where_configured():
    r = _from_args("--configured")
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("LOG INFO " + OFF) == 1, r.stdout + r.stderr
    assert OFF not in r.stderr


def test_from_args_with_the_flag_is_on_and_says_nothing_about_it(tmp_path):
    r = _from_args("--straggler-analysis", "--straggler-resources", "off")
    assert r.returncode == 0, r.stderr
    assert "enabled True" in r.stdout
    assert OFF not in r.stderr + r.stdout
