"""laggard exclude: the hosts of a run's confirmed stragglers in every format (Slurm hostlist with
compression, hostfile, Kubernetes node names, JSON with evidence), a run whose only findings are
waiting ranks (nothing to exclude), and bad input (exit 2). The runs are rank logs in the
documented format (fleet_runs.py) analysed by the real analysis; the command is run both as the
`laggard` program (its C++ dispatch to the package) and as `python -m laggard.exclude`."""

import json
import os
import subprocess
import sys

import pytest

import fleet_runs
import testenv
from laggard import exclude

# 16 hosts, one rank each; the ranks on node01-04 and node07 are 1.5x slow in forward.
HOSTS16 = ["node%02d" % i for i in range(1, 17)]
SLOW16 = {0, 1, 2, 3, 6}


@pytest.fixture(scope="module")
def slow_run(tmp_path_factory):
    return fleet_runs.write_run(str(tmp_path_factory.mktemp("exclude") / "slow16"), HOSTS16,
                                slow_ranks=SLOW16, seed=21)


def _run(args, program=True):
    """(exit status, stdout, stderr) of `laggard exclude ARGS` (program=True: the C++ program;
    else python -m laggard.exclude)."""
    if program:
        cli = testenv.cli()
        if cli is None:
            pytest.skip("the laggard program is not built (build/tools/laggard; or set "
                        "LAGGARD_CLI)")
        cmd = [cli, "exclude"] + list(args)
    else:
        cmd = [sys.executable, "-m", "laggard.exclude"] + list(args)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, env=testenv.subprocess_env(), timeout=120)
    return p.returncode, p.stdout, p.stderr


def test_slurm_hostlist_is_compressed_and_names_only_confirmed_hosts(slow_run):
    code, out, err = _run([slow_run])  # slurm is the default format
    assert code == 0, err
    assert out == "node[01-04,07]\n"
    # the evidence, one line per host on stderr: rank, stage, slowdown, cost, windows
    for host, rank in (("node01", 0), ("node07", 6)):
        line = [l for l in err.splitlines() if l.startswith("# %s:" % host)]
        assert len(line) == 1, err
        assert "rank %d in forward, 1.4" % rank in line[0] or \
            "rank %d in forward, 1.5" % rank in line[0], line[0]
        assert "ms a step" in line[0] and "windows" in line[0]
    assert "node05" not in err  # waited for the slow ranks: never named


def test_hostfile_and_k8s_formats(slow_run, tmp_path):
    code, out, _ = _run([slow_run, "--format", "hostfile", "-q"])
    assert code == 0
    assert out.splitlines() == ["node01", "node02", "node03", "node04", "node07"]
    # Kubernetes node names are the hostnames in lowercase (the kubelet registers them so)
    hosts = ["GPU-Node%d.Cluster" % i for i in range(4)]
    run = fleet_runs.write_run(str(tmp_path / "upper"), fleet_runs.hosts_of(hosts, 1),
                               slow_ranks={2}, seed=5)
    code, out, err = _run([run, "--format", "k8s"], program=False)
    assert code == 0, err
    assert out == "gpu-node2.cluster\n"


def test_json_has_the_evidence_per_host(slow_run):
    code, out, err = _run([slow_run, "--format", "json"], program=False)
    assert code == 0, err
    obj = json.loads(out)
    assert [h["host"] for h in obj["hosts"]] == ["node01", "node02", "node03", "node04", "node07"]
    by_host = {h["host"]: h for h in obj["hosts"]}
    e = by_host["node07"]
    assert e["ranks"] == [6] and e["stages"] == ["forward"] and e["sources"] == ["run"]
    (ev,) = e["evidence"]
    assert ev["source"] == "straggler" and ev["rank"] == 6 and ev["stage"] == "forward"
    assert 1.35 < ev["slowdown"] < 1.65  # the injected 1.5x
    assert ev["windows_seen"] == 30 and 15 <= ev["windows_flagged"] <= 20
    assert ev["confirmed_step"] >= 100 and ev["onset_step"] is not None
    assert ev["cost_ms"] is None or ev["cost_ms"] > 0
    (run,) = obj["runs"]
    assert run["hosts"] == HOSTS16 and len(run["run_id"]) == 64
    assert "node05" in run["waiting"]  # evidence of the run, not an exclusion


def test_a_slow_host_is_named_once_with_its_ranks(tmp_path):
    # both ranks of node03 slow: two confirmed stragglers and the analysis's slow host
    run = fleet_runs.write_run(str(tmp_path / "host"), fleet_runs.hosts_of(
        ["node01", "node02", "node03", "node04"]), slow_ranks={4, 5}, seed=5)
    rec = exclude.read_run_record(run)
    entries = exclude.exclusions([rec])
    assert [e["host"] for e in entries] == ["node03"]
    assert entries[0]["ranks"] == [4, 5]
    assert {ev["source"] for ev in entries[0]["evidence"]} == {"straggler", "slow_host"}
    assert exclude.format_hosts(entries, "slurm") == "node03\n"


def test_a_run_whose_only_findings_are_waiting_ranks_excludes_nothing(tmp_path):
    # Rank 0 alone spends 30 ms more in communication from step 100: under the threshold
    # detector the analysis lists it (and others) as waiting, and confirms no straggler.
    run = fleet_runs.write_run(str(tmp_path / "waiting"), fleet_runs.hosts_of(
        ["node01", "node02"]), comm_extra={0: 30.0}, seed=3)
    cli = testenv.cli()
    if cli is None:
        pytest.skip("the laggard program is not built")
    analysis = tmp_path / "analysis.json"
    with open(str(analysis), "w") as f:
        subprocess.run([cli, "analyze", run, "--method", "threshold", "--json"], stdout=f,
                       check=True, timeout=60)
    obj = json.loads(analysis.read_text())
    assert obj["waiting"] and not obj["stragglers"] and not obj["slow_hosts"]
    for fmt in exclude.FORMATS[:3]:
        code, out, err = _run([run, "--analysis", str(analysis), "--format", fmt])
        assert code == 0 and out == ""
        assert "nothing to exclude" in err and "only waited (node01" in err
    code, out, err = _run([run, "--analysis", str(analysis), "--format", "json"])
    assert code == 0 and json.loads(out)["hosts"] == []
    # and under the default detector the same run has no finding at all
    code, out, err = _run([run])
    assert code == 0 and out == "" and "nothing to exclude" in err


def test_a_healthy_run_excludes_nothing():
    run = os.path.join(testenv.ROOT, "examples", "run-healthy")
    code, out, err = _run([run, "--format", "hostfile"])
    assert (code, out) == (0, "")
    assert "nothing to exclude" in err


@pytest.mark.parametrize("case", ["missing", "partial", "no-host", "not-a-run", "bad-analysis",
                                  "k8s-name", "no-args", "since-without-fleet",
                                  "fleet-without-store"])
def test_bad_input_is_exit_2_with_the_reason(tmp_path, case):
    args, want = None, None
    if case == "missing":
        args, want = [str(tmp_path / "nope")], "no such directory"
    elif case == "partial":
        run = fleet_runs.write_run(str(tmp_path / "p"), HOSTS16[:4], slow_ranks={1}, seed=2,
                                   drop_ranks={2})
        args, want = [run], "a partial run: no log for rank 2 of world size 4"
    elif case == "no-host":
        run = fleet_runs.write_run(str(tmp_path / "h"), HOSTS16[:4], seed=2, host_field=False)
        args, want = [run], "rank-0.jsonl names no host"
    elif case == "not-a-run":
        args, want = [str(tmp_path)], "no rank-*.jsonl"
    elif case == "bad-analysis":
        run = fleet_runs.write_run(str(tmp_path / "a"), HOSTS16[:4], seed=2)
        (tmp_path / "x.json").write_text("{not json")
        args, want = [run, "--analysis", str(tmp_path / "x.json")], "not a `laggard analyze"
    elif case == "k8s-name":
        run = fleet_runs.write_run(str(tmp_path / "k"), ["n_1", "n_2", "n_3", "n_4"],
                                   slow_ranks={1}, seed=2)
        args, want = [run, "--format", "k8s"], "'n_2' is not a valid Kubernetes node name"
    elif case == "no-args":
        args, want = [], "give a RUN_DIR, --fleet, or both"
    elif case == "since-without-fleet":
        run = fleet_runs.write_run(str(tmp_path / "s"), HOSTS16[:4], seed=2)
        args, want = [run, "--since", "30d"], "--store and --since are options of --fleet"
    elif case == "fleet-without-store":
        args, want = ["--fleet", "--store", str(tmp_path / "none.db")], "no fleet store at"
    code, out, err = _run(args)
    assert code == 2 and out == ""
    assert err.startswith("laggard exclude: ") and want in err, err


def test_compress_hostlist():
    c = exclude.compress_hostlist
    assert c(["node01", "node02", "node03", "node04", "node07"]) == "node[01-04,07]"
    assert c(["node9", "node10", "node11"]) == "node[9-11]"         # no padding: widths vary
    assert c(["node08", "node09", "node10"]) == "node[08-10]"       # padding kept past 09
    assert c(["n001", "n002", "n010"]) == "n[001-002,010]"
    assert c(["gpu-b7", "login", "gpu-a01", "gpu-a02", "node5"]) == \
        "gpu-a[01-02],gpu-b7,login,node5"                           # mixed prefixes
    assert c(["n1", "n01"]) == "n1,n01"                             # two names, two widths
    assert c(["rack1-node3", "rack1-node4"]) == "rack1-node[3-4]"
    assert c(["a"]) == "a" and c([]) == ""
    with pytest.raises(ValueError):
        c(["bad,name"])


def test_hostlist_round_trips():
    import random

    rng = random.Random(3)
    for _ in range(300):
        names = set()
        for _ in range(rng.randint(1, 30)):
            prefix = rng.choice(["node", "gpu-a", "n", "rack2-n", "login"])
            width = rng.choice([0, 2, 3])
            n = rng.randint(0, 120)
            names.add(prefix + (str(n).zfill(width) if width else str(n))
                      if prefix != "login" else "login")
        expr = exclude.compress_hostlist(sorted(names))
        back = exclude.expand_hostlist(expr)
        assert sorted(back) == sorted(names), (sorted(names), expr)
        assert len(back) == len(names)  # each name once
