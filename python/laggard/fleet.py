"""The fleet store: every run's hosts and confirmed verdicts, kept across jobs, and the hosts that
are slow more often than the fleet's base rate explains.

    laggard fleet add RUN_DIR... [--run-id ID] [--label TEXT]
    laggard fleet hosts [--since DATE] [--alpha 0.05] [--format text|json|prometheus]
    laggard fleet runs [--since DATE] [--format text|json]
    (every command takes --store PATH|URL; python -m laggard.fleet ... is the same)

    import laggard.fleet
    laggard.fleet.add_run("runs/job-1234")          # the default store
    with laggard.fleet.open_store("postgresql://laggard@db/fleet") as store:
        store.rank_hosts(since="2026-11-01")

Where: `--store`, else $LAGGARD_FLEET, else $XDG_DATA_HOME/laggard/fleet.db (default
~/.local/share/laggard/fleet.db). A path is an SQLite file (Python's sqlite3, WAL journal, a
60 s busy timeout: many jobs finishing at once each wait their turn); a `postgresql://` (or
`postgres://`) URL is a PostgreSQL database (psycopg 3) that every job of a cluster can share.

What is stored, per run: its id (sha256 of its rank logs unless given: adding the same run twice
adds it once), directory, finish time (its newest rank log's mtime), world size, every host with
its ranks and whether it was confirmed slow, and each confirmed, material verdict (host, rank,
stage, slowdown, cost, windows, steps). Ranks that only waited are not verdicts. A run is checked
whole before anything is written (a missing, partial or unreadable run is an error naming it),
and all runs of one `add` are written in one transaction: all or nothing.

The ranking (rank_hosts, `fleet hosts`): for each host, n = runs it ran in, k = those in which it
was confirmed slow. The fleet's base rate p0 is the share of (host, run) pairs confirmed slow
among the *other* hosts (with half a pseudo-count: (k_other + 0.5) / (n_other + 1)). The host's
p-value is the one-sided binomial tail P(X >= k | n, p0): how surprising k slow runs in n are
for a host no worse than the fleet. Hosts are ranked by that p-value (smallest first); a host is
`recurring` when it was slow in at least 2 runs and its Holm-adjusted p-value (over every host
ranked) is below alpha (0.05). So one bad job does not condemn a host (k = 1 is never
recurring), and 1 slow run in 1 (p = p0) ranks below 5 in 20 (p far smaller at any p0 that is
not itself high).

Schema: versioned (table schema_version); an older store is migrated in place when opened,
inside one transaction under a lock (SQLite: BEGIN IMMEDIATE; PostgreSQL: an advisory lock), so
concurrent openers migrate it once. A store newer than this laggard is refused.

Thread-safety: a Store is one connection, for one thread; processes each open their own.
"""

import argparse
import contextlib
import datetime
import json
import math
import os
import re
import sys

from .exclude import BadRun, read_run_record

__all__ = ["SCHEMA_VERSION", "default_store", "describe_store", "open_store", "add_run",
           "Store", "StoreError", "binomial_sf", "holm", "parse_since", "main"]

EXIT_OK, EXIT_USAGE = 0, 2

# The migrations: MIGRATIONS[v - 1] takes a store from version v - 1 to v. Never edit one that
# shipped; append a new one.
MIGRATIONS = [
    # 1: runs, the hosts of each run, the confirmed verdicts.
    [
        """CREATE TABLE runs (
             run_id TEXT PRIMARY KEY,
             run_dir TEXT NOT NULL,
             finished_at TEXT NOT NULL,
             added_at TEXT NOT NULL,
             world_size INTEGER NOT NULL)""",
        """CREATE TABLE run_hosts (
             run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
             host TEXT NOT NULL,
             ranks TEXT NOT NULL,
             slow INTEGER NOT NULL,
             PRIMARY KEY (run_id, host))""",
        """CREATE TABLE verdicts (
             run_id TEXT NOT NULL,
             host TEXT NOT NULL,
             rank INTEGER,
             stage TEXT NOT NULL,
             slowdown DOUBLE PRECISION,
             windows_flagged INTEGER,
             windows_seen INTEGER,
             confirmed_step BIGINT,
             FOREIGN KEY (run_id, host) REFERENCES run_hosts(run_id, host) ON DELETE CASCADE)""",
    ],
    # 2: a verdict's cost, kind, source and steps; a run's windows and label; indexes for
    # --since and per-host queries.
    [
        "ALTER TABLE verdicts ADD COLUMN source TEXT NOT NULL DEFAULT 'straggler'",
        "ALTER TABLE verdicts ADD COLUMN kind TEXT",
        "ALTER TABLE verdicts ADD COLUMN cost_ms DOUBLE PRECISION",
        "ALTER TABLE verdicts ADD COLUMN cost_share DOUBLE PRECISION",
        "ALTER TABLE verdicts ADD COLUMN first_flagged_step BIGINT",
        "ALTER TABLE verdicts ADD COLUMN onset_step BIGINT",
        "ALTER TABLE runs ADD COLUMN windows INTEGER",
        "ALTER TABLE runs ADD COLUMN label TEXT",
        "CREATE INDEX run_hosts_host ON run_hosts(host)",
        "CREATE INDEX runs_finished_at ON runs(finished_at)",
        "CREATE INDEX verdicts_run_host ON verdicts(run_id, host)",
    ],
]
SCHEMA_VERSION = len(MIGRATIONS)

_PG_LOCK_KEY = 0x6C616767  # 'lagg': the advisory lock that serialises migrations


class StoreError(RuntimeError):
    """The store cannot be opened or used (its message names it)."""


def default_store():
    """$LAGGARD_FLEET, else $XDG_DATA_HOME/laggard/fleet.db (~/.local/share/laggard/fleet.db)."""
    env = os.environ.get("LAGGARD_FLEET")
    if env:
        return env
    data = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local",
                                                           "share")
    return os.path.join(data, "laggard", "fleet.db")


def _is_url(spec):
    return spec.startswith(("postgresql://", "postgres://"))


def describe_store(spec=None):
    """The store's location for messages, without a URL's password."""
    spec = spec or default_store()
    return re.sub(r"(://[^:/@]*):[^@/]*@", r"\1:***@", spec) if _is_url(spec) else spec


def _now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_since(text):
    """An ISO 8601 UTC time string for --since: YYYY-MM-DD, an ISO date-time, or a span back
    from now (30d, 12h, 2w); None for None. ValueError names what it cannot read."""
    if text is None or text == "":
        return None
    m = re.match(r"^(\d+)([hdw])$", text.strip())
    if m:
        hours = int(m.group(1)) * {"h": 1, "d": 24, "w": 168}[m.group(2)]
        t = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(hours=hours)
        return t.strftime("%Y-%m-%dT%H:%M:%SZ")
    try:
        t = datetime.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError("--since %r: expected YYYY-MM-DD, an ISO 8601 time or a span such as "
                         "30d, 12h, 2w" % text)
    if t.tzinfo is not None:
        t = t.astimezone(datetime.timezone.utc).replace(tzinfo=None)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


# -- statistics ---------------------------------------------------------------------------------

def binomial_sf(k, n, p):
    """P(X >= k) for X ~ Binomial(n, p), summed in log space (exact for the n of a fleet)."""
    if k <= 0:
        return 1.0
    if k > n:
        return 0.0
    if p <= 0.0:
        return 0.0
    if p >= 1.0:
        return 1.0
    lp, lq = math.log(p), math.log1p(-p)
    base = math.lgamma(n + 1)
    terms = [base - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * lp + (n - i) * lq
             for i in range(k, n + 1)]
    top = max(terms)
    return min(1.0, math.exp(top) * sum(math.exp(t - top) for t in terms))


def holm(p_values):
    """Holm's step-down adjustment of a list of p-values (same order)."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [1.0] * m
    running = 0.0
    for j, i in enumerate(order):
        running = max(running, min(1.0, (m - j) * p_values[i]))
        adjusted[i] = running
    return adjusted


def rank_rows(counts, alpha=0.05, min_slow_runs=2):
    """The ranking from {host: (runs, slow_runs)}: a list of dicts (host, runs, slow_runs, rate,
    base_rate, p_value, p_adjusted, recurring), most suspicious first. See the module doc."""
    total_n = sum(n for n, _ in counts.values())
    total_k = sum(k for _, k in counts.values())
    rows = []
    for host, (n, k) in counts.items():
        p0 = (total_k - k + 0.5) / (total_n - n + 1.0)
        rows.append({"host": host, "runs": n, "slow_runs": k,
                     "rate": k / float(n) if n else 0.0, "base_rate": p0,
                     "p_value": binomial_sf(k, n, p0)})
    for row, adj in zip(rows, holm([r["p_value"] for r in rows])):
        row["p_adjusted"] = adj
        row["recurring"] = row["slow_runs"] >= min_slow_runs and adj < alpha
    rows.sort(key=lambda r: (r["p_value"], -r["slow_runs"], -r["rate"], r["host"]))
    return rows


# -- the store ----------------------------------------------------------------------------------

class Store:
    """One connection to a fleet store (SQLite file or PostgreSQL URL), migrated to
    SCHEMA_VERSION when opened (open_store; `migrate=False` leaves it as it is)."""

    def __init__(self, spec=None, migrate=True, target_version=SCHEMA_VERSION, create=True):
        self.spec = spec or default_store()
        self.postgres = _is_url(self.spec)
        self._conn = self._connect(create)
        if migrate:
            self.migrate(target_version)

    # connection and transactions

    def _connect(self, create):
        if self.postgres:
            try:
                import psycopg
            except ImportError:
                raise StoreError("fleet store %s: PostgreSQL needs psycopg 3 (pip install "
                                 "'psycopg[binary]')" % describe_store(self.spec))
            try:
                return psycopg.connect(self.spec, autocommit=True, connect_timeout=30)
            except psycopg.Error as e:
                raise StoreError("fleet store %s: cannot connect: %s"
                                 % (describe_store(self.spec), str(e).strip()))
        import sqlite3

        path = self.spec[len("sqlite:"):] if self.spec.startswith("sqlite:") else self.spec
        if os.path.isdir(path):
            raise StoreError("fleet store %s is a directory (give the database file)" % path)
        if not create and not os.path.exists(path):
            raise StoreError("no fleet store at %s (laggard fleet add RUN_DIR creates it; "
                             "--store or $LAGGARD_FLEET name another)" % path)
        parent = os.path.dirname(os.path.abspath(path))
        try:
            os.makedirs(parent, exist_ok=True)
            conn = sqlite3.connect(path, timeout=60.0, isolation_level=None)
            conn.execute("PRAGMA busy_timeout = 60000")
            conn.execute("PRAGMA foreign_keys = ON")
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":  # e.g. a file system without shared memory
                conn.execute("PRAGMA journal_mode = DELETE")
        except (OSError, sqlite3.Error) as e:
            raise StoreError("fleet store %s: %s" % (path, e))
        return conn

    def close(self):
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _sql(self, sql):
        return sql.replace("?", "%s") if self.postgres else sql

    def execute(self, sql, params=()):
        """Runs one statement ('?' placeholders on both backends); returns the cursor."""
        cur = self._conn.cursor()
        cur.execute(self._sql(sql), tuple(params))
        return cur

    def _errors(self):
        if self.postgres:
            import psycopg

            return psycopg.Error
        import sqlite3

        return sqlite3.Error

    @contextlib.contextmanager
    def transaction(self, lock=False):
        """BEGIN ... COMMIT, ROLLBACK on any exception. SQLite takes the write lock at BEGIN
        (IMMEDIATE: writers queue on the busy timeout instead of failing at their first write);
        PostgreSQL takes the migration lock when `lock`."""
        self.execute("BEGIN IMMEDIATE" if not self.postgres else "BEGIN")
        try:
            if lock and self.postgres:
                self.execute("SELECT pg_advisory_xact_lock(%d)" % _PG_LOCK_KEY)
            yield
        except BaseException:
            try:
                self.execute("ROLLBACK")
            except self._errors():
                pass
            raise
        self.execute("COMMIT")

    # schema

    def _has_table(self, name):
        if self.postgres:
            return self.execute("SELECT to_regclass(?)", (name,)).fetchone()[0] is not None
        return self.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                            (name,)).fetchone() is not None

    def version(self):
        """The store's schema version (0: empty)."""
        if not self._has_table("schema_version"):
            return 0
        row = self.execute("SELECT version FROM schema_version").fetchone()
        return int(row[0]) if row else 0

    def migrate(self, target=SCHEMA_VERSION):
        """Brings the schema to `target` in one transaction; returns the versions applied."""
        try:
            with self.transaction(lock=True):
                current = self.version()
                if current > SCHEMA_VERSION:
                    raise StoreError("fleet store %s has schema version %d, newer than this "
                                     "laggard's %d: upgrade laggard"
                                     % (describe_store(self.spec), current, SCHEMA_VERSION))
                if current == 0:
                    self.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
                    self.execute("INSERT INTO schema_version (version) VALUES (0)")
                applied = []
                for v in range(current + 1, target + 1):
                    for statement in MIGRATIONS[v - 1]:
                        self.execute(statement)
                    applied.append(v)
                if applied:
                    self.execute("UPDATE schema_version SET version = ?", (applied[-1],))
                return applied
        except self._errors() as e:
            raise StoreError("fleet store %s: %s" % (describe_store(self.spec), e))

    # writing

    def add_records(self, records, label=None):
        """Writes run records (laggard.exclude.read_run_record) in one transaction: all or
        nothing. Returns [(run_id, added)]: added False for a run already in the store."""
        if self.version() != SCHEMA_VERSION:
            raise StoreError("fleet store %s has schema version %d; this laggard writes %d"
                             % (describe_store(self.spec), self.version(), SCHEMA_VERSION))
        out = []
        now = _now()
        try:
            with self.transaction():
                for rec in records:
                    cur = self.execute(
                        "INSERT INTO runs (run_id, run_dir, finished_at, added_at, world_size, "
                        "windows, label) VALUES (?, ?, ?, ?, ?, ?, ?) "
                        "ON CONFLICT (run_id) DO NOTHING",
                        (rec["run_id"], rec["run_dir"], rec["finished_at"], now,
                         rec["world_size"], rec.get("windows"), label))
                    if cur.rowcount == 0:
                        out.append((rec["run_id"], False))
                        continue
                    slow = {v["host"] for v in rec["verdicts"]}
                    for host, ranks in sorted(rec["hosts"].items()):
                        self.execute("INSERT INTO run_hosts (run_id, host, ranks, slow) "
                                     "VALUES (?, ?, ?, ?)",
                                     (rec["run_id"], host, ",".join(str(r) for r in ranks),
                                      1 if host in slow else 0))
                    for v in rec["verdicts"]:
                        self.execute(
                            "INSERT INTO verdicts (run_id, host, rank, stage, slowdown, "
                            "windows_flagged, windows_seen, confirmed_step, source, kind, "
                            "cost_ms, cost_share, first_flagged_step, onset_step) "
                            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                            (rec["run_id"], v["host"], v["rank"], v["stage"], v["slowdown"],
                             v["windows_flagged"], v["windows_seen"], v["confirmed_step"],
                             v["source"], v["kind"], v["cost_ms"], v["cost_share"],
                             v["first_flagged_step"], v["onset_step"]))
                    out.append((rec["run_id"], True))
        except self._errors() as e:
            raise StoreError("fleet store %s: nothing written: %s"
                             % (describe_store(self.spec), e))
        return out

    # reading

    def runs(self, since=None):
        """The runs (newest first): [{run_id, run_dir, finished_at, added_at, world_size,
        windows, label, hosts, slow_hosts}]."""
        where, params = ("WHERE finished_at >= ?", (since,)) if since else ("", ())
        rows = self.execute("SELECT run_id, run_dir, finished_at, added_at, world_size, windows, "
                            "label FROM runs %s ORDER BY finished_at DESC, run_id" % where,
                            params).fetchall()
        hosts = {}
        for run_id, host, slow in self.execute(
                "SELECT h.run_id, h.host, h.slow FROM run_hosts h JOIN runs r ON "
                "r.run_id = h.run_id %s ORDER BY h.host" % where.replace("finished_at",
                                                                        "r.finished_at"),
                params).fetchall():
            entry = hosts.setdefault(run_id, ([], []))
            entry[0].append(host)
            if slow:
                entry[1].append(host)
        keys = ("run_id", "run_dir", "finished_at", "added_at", "world_size", "windows", "label")
        out = []
        for row in rows:
            d = dict(zip(keys, row))
            d["hosts"], d["slow_hosts"] = hosts.get(d["run_id"], ([], []))
            out.append(d)
        return out

    def verdicts(self, host=None, since=None):
        """The stored verdicts (optionally of one host, of runs finished since `since`)."""
        cond, params = [], []
        if host is not None:
            cond.append("v.host = ?")
            params.append(host)
        if since:
            cond.append("r.finished_at >= ?")
            params.append(since)
        keys = ("run_id", "finished_at", "host", "rank", "stage", "source", "kind", "slowdown",
                "cost_ms", "cost_share", "windows_flagged", "windows_seen", "confirmed_step")
        rows = self.execute(
            "SELECT v.run_id, r.finished_at, v.host, v.rank, v.stage, v.source, v.kind, "
            "v.slowdown, v.cost_ms, v.cost_share, v.windows_flagged, v.windows_seen, "
            "v.confirmed_step FROM verdicts v JOIN runs r ON r.run_id = v.run_id %s "
            "ORDER BY r.finished_at, v.host, v.rank" % ("WHERE " + " AND ".join(cond)
                                                         if cond else ""),
            params).fetchall()
        return [dict(zip(keys, row)) for row in rows]

    def rank_hosts(self, since=None, alpha=0.05):
        """Every host of the runs finished since `since`, ranked (rank_rows), each with the
        stages it was slow in, its last slow run's time and its median slowdown."""
        where, params = ("WHERE r.finished_at >= ?", (since,)) if since else ("", ())
        counts = {}
        last_slow = {}
        for host, n, k, last in self.execute(
                "SELECT h.host, COUNT(*), SUM(h.slow), MAX(CASE WHEN h.slow = 1 THEN "
                "r.finished_at END) FROM run_hosts h JOIN runs r ON r.run_id = h.run_id %s "
                "GROUP BY h.host" % where, params).fetchall():
            counts[host] = (int(n), int(k or 0))
            last_slow[host] = last
        stages, slowdowns = {}, {}
        for v in self.verdicts(since=since):
            if v["stage"] not in stages.setdefault(v["host"], []):
                stages[v["host"]].append(v["stage"])
            if v["slowdown"] is not None:
                slowdowns.setdefault(v["host"], []).append(v["slowdown"])
        rows = rank_rows(counts, alpha=alpha)
        for row in rows:
            row["stages"] = stages.get(row["host"], [])
            row["last_slow"] = last_slow.get(row["host"])
            s = sorted(slowdowns.get(row["host"], []))
            row["median_slowdown"] = s[len(s) // 2] if s else None
        return rows


def open_store(spec=None, migrate=True, create=True):
    """A Store for `spec` (a path, a postgresql:// URL, or None: default_store()), migrated to
    the current schema unless `migrate` is False. create=False: an SQLite file that does not
    exist is an error instead of a new, empty store (for commands that only read). Raises
    StoreError."""
    return Store(spec, migrate=migrate, create=create)


def add_run(run_dir, store=None, run_id=None, label=None):
    """Adds one run directory to the fleet store (`store`: a Store, a path or URL, or None: the
    default). Returns {"run_id", "added" (False: it was there already), "hosts", "slow_hosts"}.
    Raises laggard.exclude.BadRun for a run that cannot be used (nothing is written) and
    StoreError for a store that cannot be written."""
    rec = read_run_record(run_dir, run_id=run_id)
    if isinstance(store, Store):
        ((rid, added),) = store.add_records([rec], label=label)
    else:
        with open_store(store) as s:
            ((rid, added),) = s.add_records([rec], label=label)
    return {"run_id": rid, "added": added, "hosts": sorted(rec["hosts"]),
            "slow_hosts": sorted({v["host"] for v in rec["verdicts"]})}


# -- output -------------------------------------------------------------------------------------

def _table(header, rows):
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    lines = ["  ".join(str(x).ljust(w) for x, w in zip(r, widths)).rstrip()
             for r in [header] + rows]
    return "\n".join(lines) + "\n"


def _label_value(v):
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def prometheus_text(rows, runs):
    """The ranking in Prometheus's text format (for node-exporter's textfile collector)."""
    out = []

    def family(name, doc, samples):
        out.append("# HELP %s %s\n# TYPE %s gauge\n" % (name, doc, name))
        for labels, value in samples:
            lab = ",".join('%s="%s"' % (k, _label_value(v)) for k, v in labels)
            out.append("%s%s %r\n" % (name, "{%s}" % lab if lab else "", float(value)))

    hosts = [(("host", r["host"]),) for r in rows]
    family("laggard_fleet_runs", "runs in the fleet store (in the --since window)",
           [((), runs)])
    family("laggard_fleet_host_runs", "runs the host ran in",
           [(h, r["runs"]) for h, r in zip(hosts, rows)])
    family("laggard_fleet_host_slow_runs", "runs in which the host was confirmed slow",
           [(h, r["slow_runs"]) for h, r in zip(hosts, rows)])
    family("laggard_fleet_host_p_value", "Holm-adjusted p-value of the host's slow runs against "
           "the fleet's base rate", [(h, r["p_adjusted"]) for h, r in zip(hosts, rows)])
    family("laggard_fleet_host_recurring", "1 when the host is slow more often than the fleet's "
           "base rate explains", [(h, 1 if r["recurring"] else 0) for h, r in zip(hosts, rows)])
    return "".join(out)


def _fmt_p(p):
    return "%.2g" % p if p >= 1e-4 or p == 0 else "%.1e" % p


# -- the command --------------------------------------------------------------------------------

def parse_args(argv=None):
    prog = os.environ.get("LAGGARD_FLEET_PROG", "python -m laggard.fleet")
    p = argparse.ArgumentParser(
        prog=prog, description="The fleet store: runs' hosts and confirmed verdicts across "
                               "jobs, and the hosts slow more often than the fleet's base rate.")
    store = argparse.ArgumentParser(add_help=False)
    store.add_argument("--store", default=None, metavar="PATH|URL",
                       help="an SQLite file or a postgresql:// URL (default $LAGGARD_FLEET, "
                            "else ~/.local/share/laggard/fleet.db)")
    sub = p.add_subparsers(dest="command", metavar="{add,hosts,runs}")
    sub.required = True
    a = sub.add_parser("add", parents=[store], help="add run directories (all or nothing)")
    a.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    a.add_argument("--run-id", default=None,
                   help="the run's id (one RUN_DIR only; default: sha256 of its rank logs)")
    a.add_argument("--label", default=None, help="a label kept with the runs (a job name)")
    h = sub.add_parser("hosts", parents=[store], help="hosts ranked by how often they were "
                       "confirmed slow against how often they ran")
    h.add_argument("--since", default=None, metavar="DATE",
                   help="runs finished since DATE (YYYY-MM-DD, ISO 8601 UTC, or 30d, 12h, 2w)")
    h.add_argument("--alpha", type=float, default=0.05,
                   help="the Holm-adjusted p-value under which a host is recurring (0.05)")
    h.add_argument("--format", choices=("text", "json", "prometheus"), default="text")
    r = sub.add_parser("runs", parents=[store], help="list the runs in the store")
    r.add_argument("--since", default=None, metavar="DATE")
    r.add_argument("--format", choices=("text", "json"), default="text")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    prog = os.environ.get("LAGGARD_FLEET_PROG", "laggard fleet")
    try:
        if args.command == "add":
            if args.run_id and len(args.run_dirs) > 1:
                raise ValueError("--run-id names one run; %d given" % len(args.run_dirs))
            # Every run is read and checked before anything is written.
            records = [read_run_record(d, run_id=args.run_id) for d in args.run_dirs]
            with open_store(args.store) as store:
                done = store.add_records(records, label=args.label)
            for rec, (rid, added) in zip(records, done):
                slow = sorted({v["host"] for v in rec["verdicts"]})
                print("%s %s (run id %s, %d host%s, confirmed slow: %s)" % (
                    "added" if added else "already in the store:", rec["run_dir"], rid[:12],
                    len(rec["hosts"]), "" if len(rec["hosts"]) == 1 else "s",
                    ", ".join(slow) if slow else "none"))
            return EXIT_OK
        since = parse_since(args.since)
        if not 0.0 < getattr(args, "alpha", 0.05) < 1.0:
            raise ValueError("--alpha must be in (0, 1)")
        with open_store(args.store, create=False) as store:
            if args.command == "runs":
                runs = store.runs(since=since)
                if args.format == "json":
                    print(json.dumps({"store": describe_store(args.store), "runs": runs},
                                     indent=2))
                    return EXIT_OK
                print("laggard fleet runs: %d run%s in %s%s" % (
                    len(runs), "" if len(runs) == 1 else "s", describe_store(args.store),
                    " since " + since if since else ""))
                if runs:
                    sys.stdout.write(_table(
                        ["finished", "run id", "ranks", "hosts", "confirmed slow", "run dir"],
                        [[r["finished_at"], r["run_id"][:12], r["world_size"], len(r["hosts"]),
                          ",".join(r["slow_hosts"]) or "-", r["run_dir"]] for r in runs]))
                return EXIT_OK
            rows = store.rank_hosts(since=since, alpha=args.alpha)
            nruns = len(store.runs(since=since))
        if args.format == "json":
            print(json.dumps({"store": describe_store(args.store), "since": since,
                              "alpha": args.alpha, "runs": nruns, "hosts": rows}, indent=2))
        elif args.format == "prometheus":
            sys.stdout.write(prometheus_text(rows, nruns))
        else:
            pairs = sum(r["runs"] for r in rows)
            slow = sum(r["slow_runs"] for r in rows)
            print("laggard fleet hosts: %d host%s in %d run%s (%s%s); %d of %d host-runs "
                  "confirmed slow (%.1f%%)" % (
                      len(rows), "" if len(rows) == 1 else "s", nruns,
                      "" if nruns == 1 else "s", describe_store(args.store),
                      ", since " + since if since else "", slow, pairs,
                      100.0 * slow / pairs if pairs else 0.0))
            if rows:
                sys.stdout.write(_table(
                    ["host", "runs", "slow", "rate", "base rate", "p", "p adjusted", "verdict",
                     "stages", "last slow"],
                    [[r["host"], r["runs"], r["slow_runs"], "%.0f%%" % (100 * r["rate"]),
                      "%.1f%%" % (100 * r["base_rate"]), _fmt_p(r["p_value"]),
                      _fmt_p(r["p_adjusted"]),
                      "recurring" if r["recurring"] else ("slow once" if r["slow_runs"] == 1
                                                          else ("-" if r["slow_runs"] == 0
                                                                else "not significant")),
                      ",".join(r["stages"]) or "-", r["last_slow"] or "-"] for r in rows]))
                print("p: the chance of at least this many slow runs for a host no worse "
                      "than the rest of the fleet (binomial, at the base rate of the other "
                      "hosts); recurring: slow in 2 runs or more and p adjusted (Holm, over "
                      "%d hosts) < %g" % (len(rows), args.alpha))
        return EXIT_OK
    except (BadRun, StoreError, ValueError, OSError) as e:
        sys.stderr.write("%s: %s\n" % (prog, e))
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
