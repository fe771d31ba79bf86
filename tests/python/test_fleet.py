"""The fleet store (laggard.fleet, `laggard fleet`), each test against SQLite and against a real
PostgreSQL server this module starts (initdb into a temporary directory, pg_ctl on 127.0.0.1 and
a socket in that directory, as the `postgres` user when the tests run as root: the server refuses
root; stopped at the end). Runs are rank logs in the documented format (fleet_runs.py), analysed
by the real analysis.

What is checked: 200 runs added by 8 concurrent processes (with runs added twice) lose nothing
and count nothing twice; the ranking on a constructed history (a host slow in 5 of 20 runs
ranks above one slow in 1 of 1, which ranks above healthy hosts, and only the first is
recurring); a store of the first schema migrates with its data; a bad run in an `add` writes
nothing, and a write that fails half-way leaves nothing behind."""

import datetime
import glob
import itertools
import os
import pwd
import shutil
import subprocess
import sys
import tempfile

import pytest

import fleet_runs
import testenv
from laggard import exclude, fleet
from laggard.launch import free_port


def _pg_binary(name):
    """A PostgreSQL server program: on PATH, else Debian's /usr/lib/postgresql/<v>/bin."""
    found = shutil.which(name)
    if found:
        return found
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/" + name),
                      key=lambda p: int(p.split("/")[4]) if p.split("/")[4].isdigit() else 0)
    return versions[-1] if versions else None


@pytest.fixture(scope="module")
def postgres_server():
    """postgresql://... of a server started for this module (a database per test is made from
    it by the `store` fixture)."""
    initdb, pg_ctl = _pg_binary("initdb"), _pg_binary("pg_ctl")
    if not initdb or not pg_ctl:
        pytest.skip("PostgreSQL's initdb and pg_ctl are not installed (Debian package "
                    "postgresql, which scripts/install-deps.sh installs)")
    base = tempfile.mkdtemp(prefix="laggard-pg-")  # short: the socket path must fit 107 bytes
    as_user = []
    if os.geteuid() == 0:
        # the server refuses to run as root: run it as Debian's postgres user, else nobody
        try:
            user = pwd.getpwnam("postgres")
        except KeyError:
            user = pwd.getpwnam("nobody")
        os.chown(base, user.pw_uid, user.pw_gid)
        as_user = ["runuser", "-u", user.pw_name, "--"]
    data, log = os.path.join(base, "data"), os.path.join(base, "server.log")
    port = free_port()

    def run(args):
        p = subprocess.run(as_user + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           universal_newlines=True, timeout=120, cwd=base)
        if p.returncode != 0:
            tail = open(log).read()[-2000:] if os.path.exists(log) else ""
            raise RuntimeError("%s failed (%d): %s\n%s" % (args[0], p.returncode, p.stdout,
                                                          tail))

    run([initdb, "-D", data, "-A", "trust", "-U", "laggard", "-E", "UTF8", "--no-sync"])
    run([pg_ctl, "-D", data, "-l", log, "-w", "-t", "60", "-o",
         "-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=50"
         % (port, base), "start"])
    try:
        yield "postgresql://laggard@127.0.0.1:%d" % port
    finally:
        run([pg_ctl, "-D", data, "-m", "fast", "-w", "-t", "60", "stop"])
        shutil.rmtree(base, ignore_errors=True)


_databases = itertools.count()


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request, tmp_path):
    """A fresh, empty store: an SQLite file, or a new database on the PostgreSQL server."""
    if request.param == "sqlite":
        return str(tmp_path / "fleet.db")
    server = request.getfixturevalue("postgres_server")
    import psycopg

    name = "fleet_%d_%d" % (os.getpid(), next(_databases))
    with psycopg.connect(server + "/postgres", autocommit=True) as conn:
        conn.execute("CREATE DATABASE " + name)
    return "%s/%s" % (server, name)


def _fleet_cli(args, env=None):
    p = subprocess.run([sys.executable, "-m", "laggard.fleet"] + list(args),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                       env=testenv.subprocess_env(**(env or {})), timeout=300)
    return p.returncode, p.stdout, p.stderr


def _count(spec, table):
    with fleet.open_store(spec) as s:
        return s.execute("SELECT COUNT(*) FROM " + table).fetchone()[0]


def _set_finished(run_dir, when):
    ts = when.replace(tzinfo=datetime.timezone.utc).timestamp()
    for path in glob.glob(os.path.join(run_dir, "rank-*.jsonl")):
        os.utime(path, (ts, ts))


# -- adding runs --------------------------------------------------------------------------------

def test_add_is_idempotent_and_records_hosts_and_verdicts(store, tmp_path):
    run = fleet_runs.write_run(str(tmp_path / "r"), fleet_runs.hosts_of(
        ["node01", "node02", "node03"]), slow_ranks={3}, seed=1)
    first = fleet.add_run(run, store=store)
    assert first["added"] and first["hosts"] == ["node01", "node02", "node03"]
    assert first["slow_hosts"] == ["node02"]
    again = fleet.add_run(run, store=store)
    assert again == dict(first, added=False)  # the same run id: nothing added twice
    code, out, err = _fleet_cli(["add", "--store", store, run])
    assert code == 0 and "already in the store" in out, err
    with fleet.open_store(store) as s:
        (r,) = s.runs()
        assert r["run_id"] == first["run_id"] and r["world_size"] == 6
        assert r["hosts"] == ["node01", "node02", "node03"] and r["slow_hosts"] == ["node02"]
        (v,) = s.verdicts()
        assert (v["host"], v["rank"], v["stage"], v["source"]) == ("node02", 3, "forward",
                                                                    "straggler")
        assert 1.35 < v["slowdown"] < 1.65 and v["windows_seen"] == 30
    assert _count(store, "run_hosts") == 3
    code, out, err = _fleet_cli(["runs", "--store", store])
    assert code == 0 and first["run_id"][:12] in out and "node02" in out, err


def test_200_runs_from_8_concurrent_processes_lose_nothing(store, tmp_path):
    hosts = ["node%02d" % i for i in range(1, 9)]
    runs = []
    for i in range(200):
        slow = {i % 8} if i % 4 == 0 else set()  # a quarter of the runs with a straggler
        runs.append(fleet_runs.write_run(str(tmp_path / ("run%03d" % i)), hosts,
                                         slow_ranks=slow, seed=1000 + i, steps=150,
                                         slow_from=30))
    expected_verdicts = sum(len(exclude.read_run_record(r)["verdicts"]) for r in runs)
    assert expected_verdicts >= 45  # the analysis confirms (nearly) every injected straggler
    # 8 processes, 25 runs each, one transaction per run, plus 3 runs of the next process's
    # share added again: concurrent duplicates must be added once.
    code = ("import sys, laggard.fleet as f\n"
            "for d in sys.argv[2:]:\n"
            "    f.add_run(d, store=sys.argv[1])\n")
    procs = []
    for p in range(8):
        share = runs[p * 25:(p + 1) * 25] + runs[((p + 1) % 8) * 25:((p + 1) % 8) * 25 + 3]
        procs.append(subprocess.Popen([sys.executable, "-c", code, store] + share,
                                      env=testenv.subprocess_env(), stderr=subprocess.PIPE,
                                      universal_newlines=True))
    errors = [(p.wait(timeout=600), p.stderr.read()) for p in procs]
    assert all(rc == 0 for rc, _ in errors), errors
    assert _count(store, "runs") == 200
    assert _count(store, "run_hosts") == 200 * 8
    assert _count(store, "verdicts") == expected_verdicts
    with fleet.open_store(store) as s:
        assert s.version() == fleet.SCHEMA_VERSION
        assert sorted(r["run_dir"] for r in s.runs()) == sorted(os.path.abspath(r)
                                                                 for r in runs)


# -- the ranking ----------------------------------------------------------------------------------

def _history(tmp_path):
    """21 runs of 4 hosts x 2 ranks: node07 is slow in 5 of its 20 runs, node05 in 1 of its
    runs, node99 ran once and was slow; node01-04, 06, 08 are healthy. Run i finished on
    2026-01-01 + i days."""
    healthy = ["node01", "node02", "node03", "node04", "node05", "node06", "node08"]
    runs = []
    for i in range(21):
        if i < 20:
            others = [healthy[(i + j) % len(healthy)] for j in range(3)]
            names = ["node07"] + others
            slow = {1} if i in (2, 5, 9, 13, 17) else set()  # node07's second rank
            if i == 11:
                slow = {2 * names.index("node05") + 1} if "node05" in names else slow
        else:
            names = ["node99"] + healthy[:3]
            slow = {0}
        run = fleet_runs.write_run(str(tmp_path / ("h%02d" % i)), fleet_runs.hosts_of(names),
                                   slow_ranks=slow, seed=500 + i)
        _set_finished(run, datetime.datetime(2026, 1, 1) + datetime.timedelta(days=i))
        runs.append(run)
    return runs


def test_ranking_on_a_constructed_history(store, tmp_path):
    runs = _history(tmp_path)
    code, out, err = _fleet_cli(["add", "--store", store] + runs)
    assert code == 0, err
    with fleet.open_store(store) as s:
        rows = s.rank_hosts()
    by = {r["host"]: r for r in rows}
    order = [r["host"] for r in rows]
    assert (by["node07"]["runs"], by["node07"]["slow_runs"]) == (20, 5)
    assert (by["node99"]["runs"], by["node99"]["slow_runs"]) == (1, 1)
    assert by["node05"]["slow_runs"] == 1
    # 5 of 20 above 1 of 1, above the healthy hosts; only 5 of 20 is recurring
    assert order[0] == "node07" and by["node07"]["recurring"]
    healthy = ["node01", "node02", "node03", "node04", "node06", "node08"]
    assert all(order.index("node99") < order.index(h) for h in healthy)
    assert not by["node99"]["recurring"] and not by["node05"]["recurring"]
    assert all(not by[h]["recurring"] and by[h]["p_value"] == 1.0 for h in healthy)
    assert by["node07"]["stages"] == ["forward"]
    assert by["node07"]["last_slow"] == "2026-01-18T00:00:00Z"  # run 17
    # the command's table and JSON say the same
    code, out, err = _fleet_cli(["hosts", "--store", store])
    assert code == 0, err
    lines = out.splitlines()
    assert lines[1].split()[:3] == ["host", "runs", "slow"]
    assert lines[2].split()[:3] == ["node07", "20", "5"] and "recurring" in lines[2]
    # --since: from 2026-01-12 on, node07 ran 9 times and was slow in runs 13 and 17
    code, out, err = _fleet_cli(["hosts", "--store", store, "--since", "2026-01-12",
                                 "--format", "json"])
    assert code == 0, err
    import json

    obj = json.loads(out)
    row = [r for r in obj["hosts"] if r["host"] == "node07"][0]
    assert (row["runs"], row["slow_runs"]) == (9, 2) and obj["runs"] == 10
    # exclude --fleet names the recurring host, with the fleet's evidence
    code, out, err = _fleet_cli([])  # (argparse: a subcommand is required)
    assert code == 2
    p = subprocess.run([sys.executable, "-m", "laggard.exclude", "--fleet", "--store", store,
                        "--format", "hostfile"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, env=testenv.subprocess_env(), timeout=120)
    assert p.returncode == 0 and p.stdout == "node07\n", p.stderr
    assert "confirmed slow in 5 of 20 runs" in p.stderr
    # with a run of its own: the run's hosts and the fleet's together
    p = subprocess.run([sys.executable, "-m", "laggard.exclude", runs[20], "--fleet",
                        "--store", store], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, env=testenv.subprocess_env(), timeout=120)
    assert p.returncode == 0 and p.stdout == "node[07,99]\n", p.stderr


def test_rank_rows_statistics():
    # the binomial tail against an exact sum
    from math import comb

    for n, k, p in ((20, 5, 0.03), (1, 1, 0.2), (50, 0, 0.1), (30, 30, 0.5)):
        exact = sum(comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(k, n + 1))
        assert abs(fleet.binomial_sf(k, n, p) - exact) < 1e-12
    assert fleet.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    # one bad job does not condemn a host, however small the fleet's base rate
    rows = fleet.rank_rows({"a": (1, 1), **{"h%d" % i: (100, 0) for i in range(50)}})
    assert rows[0]["host"] == "a" and not rows[0]["recurring"]
    # a high base rate: 5 of 20 is then ordinary
    rows = fleet.rank_rows({"a": (20, 5), "b": (20, 6), "c": (20, 4), "d": (20, 5)})
    assert not any(r["recurring"] for r in rows)


# -- schema and failures ----------------------------------------------------------------------------

def test_migration_from_the_first_schema(store, tmp_path):
    with fleet.Store(store, target_version=1) as s:
        assert s.version() == 1
        with s.transaction():
            s.execute("INSERT INTO runs (run_id, run_dir, finished_at, added_at, world_size) "
                      "VALUES ('old', '/runs/old', '2025-12-01T00:00:00Z', "
                      "'2025-12-02T00:00:00Z', 4)")
            for host, slow in (("node01", 1), ("node02", 0)):
                s.execute("INSERT INTO run_hosts (run_id, host, ranks, slow) VALUES "
                          "('old', ?, '0,1', ?)", (host, slow))
            s.execute("INSERT INTO verdicts (run_id, host, rank, stage, slowdown, "
                      "windows_flagged, windows_seen, confirmed_step) VALUES "
                      "('old', 'node01', 1, 'backward', 1.8, 12, 20, 60)")
    with fleet.open_store(store) as s:  # migrates to the current version
        assert s.version() == fleet.SCHEMA_VERSION == 2
        (v,) = s.verdicts()
        assert (v["host"], v["stage"], v["slowdown"], v["source"], v["cost_ms"]) == \
            ("node01", "backward", 1.8, "straggler", None)
        (r,) = s.runs()
        assert r["label"] is None and r["slow_hosts"] == ["node01"]
        rows = {row["host"]: row for row in s.rank_hosts()}
        assert rows["node01"]["slow_runs"] == 1 and rows["node02"]["runs"] == 1
    run = fleet_runs.write_run(str(tmp_path / "new"), fleet_runs.hosts_of(["node01", "node02"]),
                               slow_ranks={3}, seed=9)
    assert fleet.add_run(run, store=store, label="job-42")["added"]
    with fleet.open_store(store) as s:
        assert s.migrate() == []  # nothing left to apply
        assert len(s.runs()) == 2 and s.runs()[0]["label"] == "job-42"
        # a store newer than this laggard is refused, not written
        with s.transaction():
            s.execute("UPDATE schema_version SET version = 99")
    with pytest.raises(fleet.StoreError, match="schema version 99, newer than"):
        fleet.open_store(store)


def test_a_bad_run_is_rejected_whole(store, tmp_path):
    good = [fleet_runs.write_run(str(tmp_path / ("g%d" % i)), fleet_runs.hosts_of(
        ["node01", "node02"]), slow_ranks={1}, seed=70 + i) for i in range(2)]
    partial = fleet_runs.write_run(str(tmp_path / "partial"), fleet_runs.hosts_of(
        ["node01", "node02"]), seed=80, drop_ranks={3})
    code, out, err = _fleet_cli(["add", "--store", store, good[0], partial, good[1]])
    assert code == 2 and out == ""
    assert "partial: a partial run: no log for rank 3 of world size 4" in err
    assert _count(store, "runs") == 0 and _count(store, "run_hosts") == 0
    # a failure in the middle of the write (the second record names a host none of its ranks
    # ran on: a foreign key) rolls the first record back too
    recs = [exclude.read_run_record(g) for g in good]
    recs[1]["verdicts"][0]["host"] = "elsewhere"
    with fleet.open_store(store) as s:
        with pytest.raises(fleet.StoreError, match="nothing written"):
            s.add_records(recs)
    assert _count(store, "runs") == 0 and _count(store, "verdicts") == 0
    # and the good runs go in afterwards
    code, out, err = _fleet_cli(["add", "--store", store] + good)
    assert code == 0 and out.count("added ") == 2, err


def test_store_location_and_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("LAGGARD_FLEET", str(tmp_path / "env.db"))
    assert fleet.default_store() == str(tmp_path / "env.db")
    monkeypatch.delenv("LAGGARD_FLEET")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert fleet.default_store() == str(tmp_path / "xdg" / "laggard" / "fleet.db")
    # reading a store that does not exist is an error, not a new empty store
    env = {"LAGGARD_FLEET": str(tmp_path / "env.db")}
    code, out, err = _fleet_cli(["runs"], env=env)
    assert code == 2 and "no fleet store at %s" % (tmp_path / "env.db") in err, err
    assert not (tmp_path / "env.db").exists()
    run = fleet_runs.write_run(str(tmp_path / "r"), fleet_runs.hosts_of(["node01", "node02"]),
                               seed=6)
    code, out, err = _fleet_cli(["add", run], env=env)  # $LAGGARD_FLEET: created by add
    assert code == 0, err
    code, out, err = _fleet_cli(["runs"], env=env)
    assert code == 0 and "1 run in %s" % (tmp_path / "env.db") in out, err
    assert fleet.describe_store("postgresql://u:secret@db/x") == "postgresql://u:***@db/x"
    code, out, err = _fleet_cli(["hosts", "--store", str(tmp_path)])
    assert code == 2 and "is a directory" in err
    code, out, err = _fleet_cli(["hosts", "--store", str(tmp_path / "f.db"), "--since", "soon"])
    assert code == 2 and "--since 'soon'" in err
    code, out, err = _fleet_cli(["hosts", "--store", "postgresql://nobody@127.0.0.1:1/x"])
    assert code == 2 and "cannot connect" in err


def test_the_laggard_program_runs_fleet(tmp_path):
    cli = testenv.cli()
    if cli is None:
        pytest.skip("the laggard program is not built")
    run = fleet_runs.write_run(str(tmp_path / "r"), fleet_runs.hosts_of(["node01", "node02"]),
                               slow_ranks={2}, seed=4)
    db = str(tmp_path / "f.db")
    p = subprocess.run([cli, "fleet", "add", "--store", db, run], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True, timeout=120)
    assert p.returncode == 0 and "added" in p.stdout and "node02" in p.stdout, p.stderr
    p = subprocess.run([cli, "fleet", "hosts", "--store", db, "--format", "prometheus"],
                       stdout=subprocess.PIPE, universal_newlines=True, timeout=120)
    assert 'laggard_fleet_host_slow_runs{host="node02"} 1.0' in p.stdout
    p = subprocess.run([cli, "fleet", "add", "--store", db, str(tmp_path / "none")],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                       timeout=120)
    assert p.returncode == 2 and p.stderr.startswith("laggard fleet: ") and \
        "no such directory" in p.stderr
