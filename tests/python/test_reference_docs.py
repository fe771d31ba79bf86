"""The generated reference pages equal what the code gives now: docs/reference/cli.md (the
programs' --help) and docs/reference/metrics.md (the metric names a live Analyzer emits). After a
change to a program's flags or to a metric, tools/docs/cli_metrics_reference.py rewrites them."""

import importlib.util
import os

import pytest

import testenv

ROOT = testenv.ROOT


def _tool():
    path = os.path.join(ROOT, "tools", "docs", "cli_metrics_reference.py")
    spec = importlib.util.spec_from_file_location("cli_metrics_reference", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


FIX = "run: PYTHONPATH=python .venv/bin/python tools/docs/cli_metrics_reference.py"


def test_cli_page_is_the_programs_help():
    cli = testenv.cli()
    if cli is None:
        pytest.skip("no laggard program built")
    tool = _tool()
    assert _read(tool.CLI_PAGE) == tool.cli_markdown(cli), FIX


def test_cli_page_lists_every_subcommand():
    cli = testenv.cli()
    if cli is None:
        pytest.skip("no laggard program built")
    tool = _tool()
    top = tool.help_text(cli, ())
    lines = top.split("Subcommands:", 1)[1].splitlines()
    subcommands = {line.split()[0] for line in lines if line.strip()}
    assert subcommands and subcommands <= {args[0] for args in tool.HELP_PAGES if args}


def test_metrics_page_lists_what_the_analyzer_emits():
    tool = _tool()
    emitted = tool.emitted_metrics()
    described = {name: on for name, on, _ in tool.METRICS}
    assert emitted - set(described) == set(), "metrics without a line in METRICS"
    seen_here = {n for n, on in described.items() if on in ("window", "every rank", "values")}
    assert seen_here - emitted == set(), "described, but a one-rank Analyzer did not emit them"
    # The others need other ranks or resource readings: the live engine writes their names.
    source = _read(os.path.join(ROOT, "src", "live", "analyzer.cc"))
    for name, on in described.items():
        if on not in ("window", "every rank", "values"):
            literal = '"%s"' % name if "{" not in name else '"/%s"' % name.rsplit("/", 1)[1]
            assert literal in source, name
    assert _read(tool.METRICS_PAGE) == tool.metrics_markdown(), FIX
