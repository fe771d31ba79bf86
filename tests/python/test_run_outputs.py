"""laggard.analyze_run: the offline outputs rendered in this process by the library the `laggard`
program renders them with — the same bytes as `laggard analyze`, `diagnose` and `report`."""

import os
import subprocess

import pytest

import laggard
from laggard import _core
import testenv

ROOT = testenv.ROOT


def program(*args):
    cli = testenv.cli()
    if cli is None:
        pytest.skip("the laggard program is not built (build/tools/laggard; or set LAGGARD_CLI)")
    out = subprocess.run([cli] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         universal_newlines=True, cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.parametrize("run", ["examples/run-slow-forward", "examples/diagnose/thermal",
                                 "examples/trace-slow-rank"])
def test_the_outputs_are_the_programs_byte_for_byte(run, monkeypatch):
    # The program names the run as it was given: give the library the same (relative) path.
    monkeypatch.chdir(ROOT)
    got = laggard.analyze_run(run, outputs=("text", "json", "diagnosis_text", "diagnosis_json"))
    assert got["windows"] > 0
    assert got["text"] == program("analyze", "-q", run)
    assert got["diagnosis_text"] == program("diagnose", "-q", run)
    assert got["json"]["stragglers"], got["json"]
    assert got["diagnosis_json"]["layers"][3]["name"] == "stragglers"


def test_with_a_baseline_the_chain_has_its_regression_layer(monkeypatch):
    monkeypatch.chdir(ROOT)
    got = laggard.analyze_run("examples/run-slow-forward", baseline_dir="examples/run-healthy",
                              outputs=("diagnosis_json",))
    regression = got["diagnosis_json"]["layers"][4]
    assert regression["name"] == "regression" and regression["status"] == "fail"
    assert regression["findings"][0]["kind"] == "first_regression"


def test_the_html_report_has_the_triage_chain_first():
    got = laggard.analyze_run(os.path.join(ROOT, "examples/diagnose/nan-loss"), outputs=("html",))
    html = got["html"]
    assert html.startswith("<!DOCTYPE html>")
    assert 0 < html.index('id="triage"') < html.index('id="stragglers"')
    assert "Look first at <b>correctness</b>" in html


def test_options_are_the_detectors(monkeypatch):
    monkeypatch.chdir(ROOT)
    rfc = _core.detector_options("rfc", 4)
    got = laggard.analyze_run("examples/run-slow-forward", options=rfc, outputs=("text",))
    assert got["text"] == program("analyze", "-q", "--preset", "rfc", "examples/run-slow-forward")


def test_bad_input_is_an_error_that_names_it(tmp_path):
    with pytest.raises(OSError, match="does not exist"):
        laggard.analyze_run(str(tmp_path / "nope"))
    with pytest.raises(ValueError, match="unknown output 'pdf'"):
        laggard.analyze_run(os.path.join(ROOT, "examples/run-healthy"), outputs=("pdf",))
    # No well-formed sample: an error naming the file and line, as the CLI's exit 2 (it was
    # a result of "0 ranks").
    (tmp_path / "rank-0.jsonl").write_text("not json\n")
    with pytest.raises(OSError, match=r"no well-formed samples .*rank-0\.jsonl:1"):
        laggard.analyze_run(str(tmp_path))
