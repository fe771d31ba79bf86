"""The alerting rules and the dashboard in deploy/: `promtool check rules`, the rules' unit tests
(`promtool test rules`, and that a wrong expectation fails them), the Grafana dashboard's
structure and queries (each query parsed by promtool, each metric one that laggard exports), and
the straggler rule evaluated on a live run's scrape.

The live run: 3 gloo ranks train a small DDP model (alerts_worker.py) with rank 2's forward
slower; the analysis rank serves a PrometheusSink on 127.0.0.1 and scrapes its own endpoint over
HTTP once a straggler is confirmed. The scraped samples become promtool unit-test input series
(each held for the test's minutes, labelled as a scrape job would label them), and promtool
evaluates the shipped rules on them: LaggardStragglerConfirmed must fire for rank 2 in forward on
its host (and any other stage the endpoint serves as confirmed), never for the waiting ranks,
and no other rule may fire. That is Prometheus's own rule engine on the real exposition of a
real run, with no Prometheus server to start."""

import json
import math
import os
import re
import shutil
import subprocess
import time

import pytest

import testenv

DEPLOY = os.path.join(testenv.ROOT, "deploy")
RULES = os.path.join(DEPLOY, "prometheus", "laggard-rules.yml")
RULES_TEST = os.path.join(DEPLOY, "prometheus", "laggard-rules.test.yml")
DASHBOARD = os.path.join(DEPLOY, "grafana", "laggard-dashboard.json")

ALERTS = ["LaggardStragglerConfirmed", "LaggardRecurringSlowHost", "LaggardHostSlowInSeveralJobs",
          "LaggardSideChannelFailing", "LaggardReportsStalled", "LaggardReportErrors",
          "LaggardSamplesDropped"]


def _promtool():
    p = shutil.which("promtool")
    if p is None:
        pytest.skip("promtool is not installed (Debian package prometheus, which "
                    "scripts/install-deps.sh installs)")
    return p


def _run(args, cwd=None):
    p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True, timeout=120, cwd=cwd)
    return p.returncode, p.stdout


def test_rules_pass_promtool_check():
    code, out = _run([_promtool(), "check", "rules", RULES])
    assert code == 0 and "SUCCESS: 7 rules found" in out, out
    text = open(RULES).read()
    assert re.findall(r"- alert: (\w+)", text) == ALERTS


def test_rules_unit_tests_pass_and_a_wrong_expectation_fails(tmp_path):
    code, out = _run([_promtool(), "test", "rules", RULES_TEST])
    assert code == 0 and "SUCCESS" in out, out
    # the same tests with the straggler's rank changed must fail: the tests can fail
    shutil.copy(RULES, str(tmp_path / "laggard-rules.yml"))
    text = open(RULES_TEST).read()
    assert 'rank: "3"' in text
    (tmp_path / "wrong.test.yml").write_text(text.replace('rank: "3"', 'rank: "4"', 1))
    code, out = _run([_promtool(), "test", "rules", "wrong.test.yml"], cwd=str(tmp_path))
    assert code != 0 and "LaggardStragglerConfirmed" in out, out


# -- what laggard exports -----------------------------------------------------------------------

def _exported_metric_names():
    """The metric names laggard exports: a PrometheusSink fed by a real in-process analysis
    (3 Analyzers over the "local" side channel, rank 2 slow, the full report attached), and the
    fleet store's ranking (laggard.fleet.prometheus_text). The C++ textfile sink writes the
    same names as the PrometheusSink (src/sinks/prometheus_textfile.cc) minus the two of the
    full report."""
    import prometheus_client
    from prometheus_client.parser import text_string_to_metric_families

    import laggard
    from laggard import fleet
    from laggard.sinks import PrometheusSink

    registry = prometheus_client.CollectorRegistry()
    sink = PrometheusSink(port=None, registry=registry, host="node-01")
    ranks = [laggard.Analyzer(interval=1, rank=r, world_size=3, transport="local",
                              channel="test-alerts-%d" % os.getpid(), host="node-%02d" % (r + 1),
                              sinks=[sink] if r == 0 else (), close_timeout_s=10.0)
             for r in range(3)]
    try:
        for w in range(12):
            for r, an in enumerate(ranks):
                an.begin_step(w)
                forward = 30.0 if r == 2 else 10.0
                an.add("forward", forward)
                an.add("communication", 32.0 - forward, kind="communication")
                an.end_step()
        deadline = time.monotonic() + 30
        while ranks[0].counters()["reports"] < 12 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        for an in reversed(ranks):
            an.close()
    body = prometheus_client.generate_latest(registry).decode()
    names = {s.name for fam in text_string_to_metric_families(body) for s in fam.samples}
    rows = fleet.rank_rows({"node01": (10, 4), "node02": (10, 0)})
    names |= {s.name for fam in text_string_to_metric_families(fleet.prometheus_text(rows, 10))
              for s in fam.samples}
    return names, body


def _metric_names_in(expr):
    names = set(re.findall(r"\b(laggard_[a-z_]+)\b", expr))
    return {n for n in names if not n.startswith("laggard:")}


def test_rules_use_only_metrics_laggard_exports():
    exported, body = _exported_metric_names()
    for needed in ("laggard_confirmed_straggler", "laggard_straggler_slowdown",
                   "laggard_report_errors", "laggard_dropped_samples",
                   "laggard_incomplete_windows", "laggard_report_step",
                   "laggard_fleet_host_recurring"):
        assert needed in exported, (needed, body)
    exprs = re.findall(r"^\s+expr: (.*)$", open(RULES).read(), re.M)
    assert len(exprs) == len(ALERTS)
    used = set().union(*(_metric_names_in(e) for e in exprs))
    assert used and used <= exported, used - exported


def test_dashboard_json_is_valid():
    with open(DASHBOARD) as f:
        dash = json.load(f)
    assert dash["title"] and dash["uid"] and isinstance(dash["schemaVersion"], int)
    variables = {v["name"] for v in dash["templating"]["list"]}
    assert {"datasource", "instance", "stage"} <= variables
    panels = dash["panels"]
    assert len(panels) >= 8
    ids = [p["id"] for p in panels]
    assert len(set(ids)) == len(ids)
    cells = set()
    exprs = []
    for p in panels:
        assert p["type"] in ("stat", "table", "timeseries") and p["title"]
        g = p["gridPos"]
        assert g["x"] >= 0 and g["w"] > 0 and g["x"] + g["w"] <= 24 and g["h"] > 0
        for x in range(g["x"], g["x"] + g["w"]):  # no two panels overlap
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, p["title"]
                cells.add((x, y))
        assert p["datasource"]["uid"] == "${datasource}"
        assert p["targets"]
        ref_ids = [t["refId"] for t in p["targets"]]
        assert len(set(ref_ids)) == len(ref_ids)
        for t in p["targets"]:
            for var in re.findall(r"\$(\w+)", t["expr"]):
                assert var in variables, (p["title"], var)
            exprs.append((p["title"], t["expr"]))
    exported, _ = _exported_metric_names()
    for title, expr in exprs:
        used = _metric_names_in(expr)
        assert used and used <= exported, (title, used - exported)
    # every query parses: promtool checks them as recording rules (variables as Grafana would
    # substitute an "All" selection)
    promtool = _promtool()
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        lines = ["groups:", "  - name: dashboard", "    rules:"]
        for i, (_, expr) in enumerate(exprs):
            e = expr.replace("$instance", ".*").replace("$stage", ".*")
            lines += ["      - record: laggard:dashboard_%d" % i,
                      "        expr: %s" % json.dumps(e)]
        path = os.path.join(d, "dashboard-rules.yml")
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        code, out = _run([promtool, "check", "rules", path])
        assert code == 0 and "SUCCESS: %d rules found" % len(exprs) in out, out


# -- the straggler rule on a live run's scrape ----------------------------------------------------

def _series_line(name, labels):
    inner = ",".join("%s=%s" % (k, json.dumps(v)) for k, v in sorted(labels.items()))
    return "%s{%s}" % (name, inner)


@pytest.mark.multiproc
def test_straggler_rule_fires_on_a_live_runs_scrape(tmp_path):
    promtool = _promtool()
    pytest.importorskip("torch")
    from prometheus_client.parser import text_string_to_metric_families

    from ranks import run_worker

    out = tmp_path / "run"
    out.mkdir()
    cfg = {"out": str(out), "slow_rank": 2, "slow_ms": 15.0, "interval": 2, "steps": 120}
    results = run_worker("alerts_worker", 3, cfg, str(out), timeout_s=180)
    assert all(r["counters"]["report_errors"] == 0 for r in results)
    body = (out / "scrape.txt").read_text()
    samples = [s for fam in text_string_to_metric_families(body) for s in fam.samples
               if s.name.startswith("laggard_")]
    confirmed = {(s.labels["rank"], s.labels["stage"], s.labels["host"])
                 for s in samples if s.name == "laggard_confirmed_straggler"}
    assert ("2", "forward", "node-03") in confirmed, body
    # The rule must fire for every (rank, stage) the endpoint serves as confirmed (the injected
    # one; on a loaded machine the analysis may rightly confirm a small second stage of the
    # same rank too) and for nothing else: not for the ranks that wait for it, which the same
    # scrape names in laggard_straggler_slowdown{role="waiting"}.
    waiting = {s.labels["rank"] for s in samples if s.name == "laggard_straggler_slowdown"
               and s.labels.get("role") == "waiting"}
    assert waiting and not waiting & {rank for rank, _, _ in confirmed}, body
    # Each scraped sample, held for 10 minutes, as a scrape job labels it.
    scrape_labels = {"job": "training", "instance": "node-01:9400"}
    series = []
    for s in samples:
        if not math.isfinite(s.value):
            continue
        labels = dict(s.labels, **scrape_labels)
        series.append("      - series: '%s'\n        values: '%r+0x10'"
                      % (_series_line(s.name, labels), float(s.value)))
    shutil.copy(RULES, str(tmp_path / "laggard-rules.yml"))
    expected = "\n".join(
        "          - exp_labels: {severity: warning, job: training, instance: \"node-01:9400\", "
        "rank: \"%s\", stage: %s, host: %s}\n"
        "            exp_annotations:\n"
        "              summary: %s\n"
        "              description: %s" % (
            rank, stage, host,
            json.dumps("laggard: rank %s (%s) is a confirmed straggler in %s"
                       % (rank, host, stage)),
            json.dumps("The analysis rank of node-01:9400 has confirmed rank %s on host %s as "
                       "slow in stage %s (laggard_straggler_slowdown gives its time over the "
                       "reference). After the run: laggard exclude RUN_DIR names the host for "
                       "the next allocation." % (rank, host, stage)))
        for rank, stage, host in sorted(confirmed))
    test_yml = "\n".join([
        "rule_files:", "  - laggard-rules.yml", "evaluation_interval: 1m", "tests:",
        "  - interval: 1m", "    input_series:"] + series + [
        "    alert_rule_test:",
        "      - eval_time: 4m", "        alertname: LaggardStragglerConfirmed",
        "        exp_alerts:", expected] + [
        "      - eval_time: 4m\n        alertname: %s\n        exp_alerts: []" % a
        for a in ALERTS[1:] if a != "LaggardHostSlowInSeveralJobs"]) + "\n"
    (tmp_path / "live.test.yml").write_text(test_yml)
    code, text = _run([promtool, "test", "rules", "live.test.yml"], cwd=str(tmp_path))
    assert code == 0 and "SUCCESS" in text, text + "\n" + body
