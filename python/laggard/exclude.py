"""laggard exclude: the hosts to leave out of the next allocation, with the evidence per host.

    laggard exclude RUN_DIR... [--fleet [--store URL] [--since DATE]]
                    [--format slurm|hostfile|k8s|json]
    python -m laggard.exclude ...          (the same, without the C++ program)

A host is named when a rank on it was a *confirmed* straggler of the run (the `stragglers` of
`laggard analyze --json`, which holds only material verdicts; a finding's `material` false
would leave it out too) or the analysis named the host itself (`slow_hosts`: every rank of the
host slow in the same stage). Ranks that merely
waited in communication for a slow rank are evidence, never a verdict: their hosts are not named
unless a verdict names them too. With `--fleet`, hosts the fleet store finds recurring (slow in
more of their runs than the fleet's base rate explains; see laggard.fleet) are added.

Formats (stdout; the evidence goes to stderr, one `# host: ...` line per host, unless -q):
  slurm     one Slurm hostlist expression, compressed (`node[01-04,07],gpu7`): sbatch --exclude=
  hostfile  one host a line (MPI / DeepSpeed hostfiles, scripts building torchrun's node list)
  k8s       one Kubernetes node name a line (lowercase RFC 1123), for kubectl cordon / taint
  json      {"hosts": [{"host", "sources", "ranks", "stages", "evidence": [...]}, ...], ...}

Exit status: 0 (hosts printed, or nothing to exclude: empty stdout and a note on stderr),
2 bad input (the reason on stderr).

Cost: one analysis of each run (as `laggard analyze`) and one read of its rank logs (the hosts
and the run id); nothing is written.
"""

import argparse
import datetime
import glob
import hashlib
import json
import os
import re
import sys

__all__ = ["BadRun", "read_run_record", "exclusions", "compress_hostlist", "expand_hostlist",
           "format_hosts", "main"]

EXIT_OK, EXIT_USAGE = 0, 2

FORMATS = ("slurm", "hostfile", "k8s", "json")


class BadRun(ValueError):
    """A run that cannot be used (missing, unreadable, partial, without hosts): its message says
    what was wrong and where."""


# -- a run's hosts and verdicts -----------------------------------------------------------------

_RANK_FILE = re.compile(r"^rank-(\d+)\.jsonl$")


def _rank_files(run_dir):
    files = {}
    for path in glob.glob(os.path.join(glob.escape(run_dir), "rank-*.jsonl")):
        m = _RANK_FILE.match(os.path.basename(path))
        if not m:
            raise BadRun("%s: %s is not rank-<number>.jsonl" % (run_dir, os.path.basename(path)))
        files[int(m.group(1))] = path
    return files


def _first_sample(path):
    """The first well-formed sample line of a rank log (a dict), or None."""
    with open(path, "rb") as f:
        for raw in f:
            try:
                obj = json.loads(raw)
            except ValueError:
                continue
            if isinstance(obj, dict) and obj.get("schema") == "laggard.sample/1":
                return obj
    return None


def _hash_files(paths):
    """sha256 over the rank logs' names and contents: the run id (the same run added twice, from
    wherever, is the same run)."""
    h = hashlib.sha256()
    for path in paths:
        h.update(os.path.basename(path).encode() + b"\0")
        with open(path, "rb") as f:
            while True:
                chunk = f.read(1 << 20)
                if not chunk:
                    break
                h.update(chunk)
        h.update(b"\0")
    return h.hexdigest()


def _iso(ts):
    return datetime.datetime.fromtimestamp(ts, datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ")


def _number(v):
    return float(v) if isinstance(v, (int, float)) and v == v else None


def _analyze(run_dir):
    """The `laggard analyze --json` object of the run, computed in this process."""
    try:
        from . import _core  # noqa: F401  (the analysis is the C++ core's)
    except ImportError as e:
        raise BadRun("cannot analyse %s: the laggard._core extension is not importable (%s)"
                     % (run_dir, e))
    from . import analyze_run

    try:
        return analyze_run(run_dir, outputs=("json",))["json"]
    except OSError as e:  # _core.InputError
        raise BadRun("%s: %s" % (run_dir, e))


def read_run_record(run_dir, analysis=None, run_id=None):
    """What a run contributes to `exclude` and to the fleet store, as a dict:

      run_id       sha256 of its rank logs (or `run_id` given, e.g. the Slurm job id)
      run_dir      absolute path
      finished_at  the newest rank log's modification time (UTC, ISO 8601)
      world_size, windows
      hosts        {host: [ranks]} of every rank that ran
      verdicts     confirmed, material verdicts: [{host, rank (None for a host-wide one), stage,
                   kind, source ("straggler" or "slow_host"), slowdown, cost_ms, cost_share,
                   windows_flagged, windows_seen, first_flagged_step, confirmed_step,
                   onset_step}]
      waiting      {host: [ranks]} of ranks that only waited (not verdicts)

    Raises BadRun for a run that is missing, has no rank logs, lacks some rank of its world
    size, has a rank log without a well-formed sample or without a host, or that the analysis
    cannot read. `analysis`: an `analyze --json` object already computed for the run."""
    run_dir = os.path.abspath(str(run_dir))
    if not os.path.isdir(run_dir):
        raise BadRun("%s: no such directory" % run_dir)
    files = _rank_files(run_dir)
    if not files:
        raise BadRun("%s: no rank-*.jsonl (a run directory holds one log per rank, "
                     "docs/reference/formats.md)" % run_dir)
    hosts = {}
    world_sizes = set()
    for rank, path in sorted(files.items()):
        try:
            sample = _first_sample(path)
        except OSError as e:
            raise BadRun("%s: cannot read %s: %s" % (run_dir, os.path.basename(path), e))
        if sample is None:
            raise BadRun("%s: %s holds no well-formed sample (a partial run)"
                         % (run_dir, os.path.basename(path)))
        host = sample.get("host")
        if not isinstance(host, str) or not host.strip():
            raise BadRun("%s: %s names no host (the `host` field of each sample, "
                         "docs/reference/formats.md; exclude and the fleet store need it)"
                         % (run_dir, os.path.basename(path)))
        if isinstance(sample.get("world_size"), int):
            world_sizes.add(sample["world_size"])
        hosts.setdefault(host.strip(), []).append(rank)
    world_size = max(world_sizes) if world_sizes else len(files)
    missing = sorted(set(range(world_size)) - set(files))
    if missing:
        raise BadRun("%s: a partial run: no log for rank%s %s of world size %d"
                     % (run_dir, "s" if len(missing) > 1 else "",
                        ",".join(str(r) for r in missing[:20]) + (",..." if len(missing) > 20
                                                                  else ""), world_size))
    if analysis is None:
        analysis = _analyze(run_dir)
    paths = [files[r] for r in sorted(files)]
    rank_host = {r: h for h, ranks in hosts.items() for r in ranks}
    verdicts = []
    for s in analysis.get("stragglers", []):
        if s.get("material") is False:
            continue  # the analysis's materiality gate: confirmed, but too cheap to act on
        host = s.get("host") or rank_host.get(s.get("rank"), "")
        if not host:
            continue
        verdicts.append({
            "host": host, "rank": int(s["rank"]), "stage": s.get("stage", ""),
            "kind": s.get("kind", ""), "source": "straggler",
            "slowdown": _number(s.get("typical_slowdown")),
            "cost_ms": _number(s.get("cost_ms")), "cost_share": _number(s.get("cost_share")),
            "windows_flagged": s.get("windows_flagged"), "windows_seen": s.get("windows_seen"),
            "first_flagged_step": s.get("first_flagged_step"),
            "confirmed_step": s.get("confirmed_step"), "onset_step": s.get("onset_step")})
    for h in analysis.get("slow_hosts", []):
        if h.get("material") is False or not h.get("host"):
            continue
        verdicts.append({
            "host": h["host"], "rank": None, "stage": h.get("stage", ""), "kind": "",
            "source": "slow_host", "slowdown": _number(h.get("typical_slowdown")),
            "cost_ms": _number(h.get("cost_ms")), "cost_share": _number(h.get("cost_share")),
            "windows_flagged": h.get("windows"), "windows_seen": analysis.get("windows"),
            "first_flagged_step": None, "confirmed_step": None, "onset_step": None})
    waiting = {}
    for w in analysis.get("waiting", []):
        host = w.get("host") or rank_host.get(w.get("rank"), "")
        if host:
            waiting.setdefault(host, []).append(int(w["rank"]))
    for v in verdicts:
        if v["host"] not in hosts:
            raise BadRun("%s: the analysis names host %r, which no rank log names"
                         % (run_dir, v["host"]))
    return {
        "run_id": run_id or _hash_files(paths),
        "run_dir": run_dir,
        "finished_at": _iso(max(os.path.getmtime(p) for p in paths)),
        "world_size": world_size,
        "windows": int(analysis.get("windows", 0) or 0),
        "hosts": {h: sorted(r) for h, r in sorted(hosts.items())},
        "verdicts": verdicts,
        "waiting": {h: sorted(r) for h, r in sorted(waiting.items())},
    }


# -- which hosts, and why -----------------------------------------------------------------------

def _describe(v):
    who = "rank %d" % v["rank"] if v["rank"] is not None else "all its ranks"
    parts = ["%s in %s" % (who, v["stage"])]
    if v.get("slowdown"):
        parts.append("%.2fx" % v["slowdown"])
    if v.get("cost_ms") is not None:
        share = (" (%.1f%% of the step)" % (100.0 * v["cost_share"])
                 if v.get("cost_share") is not None else "")
        parts.append("costs %.1f ms a step%s" % (v["cost_ms"], share))
    if v.get("windows_flagged") is not None and v.get("windows_seen"):
        parts.append("slow in %s of %s windows" % (v["windows_flagged"], v["windows_seen"]))
    if v.get("confirmed_step") is not None:
        parts.append("confirmed at step %s" % v["confirmed_step"])
    return ", ".join(parts)


def exclusions(records=(), fleet_hosts=()):
    """The hosts to exclude, sorted by name: [{host, sources, ranks, stages, evidence}].
    `records`: read_run_record dicts (each confirmed verdict names its host); `fleet_hosts`:
    laggard.fleet ranking rows (only those with recurring=True are used)."""
    out = {}

    def entry(host):
        return out.setdefault(host, {"host": host, "sources": [], "ranks": [], "stages": [],
                                     "evidence": []})

    for rec in records:
        for v in rec["verdicts"]:
            e = entry(v["host"])
            if "run" not in e["sources"]:
                e["sources"].append("run")
            if v["rank"] is not None and v["rank"] not in e["ranks"]:
                e["ranks"].append(v["rank"])
            if v["stage"] not in e["stages"]:
                e["stages"].append(v["stage"])
            ev = dict(v)
            ev.update(run_dir=rec["run_dir"], run_id=rec["run_id"], text=_describe(v))
            e["evidence"].append(ev)
    for row in fleet_hosts:
        if not row.get("recurring"):
            continue
        e = entry(row["host"])
        e["sources"].append("fleet")
        for stage in row.get("stages", []):
            if stage not in e["stages"]:
                e["stages"].append(stage)
        e["evidence"].append({
            "source": "fleet", "slow_runs": row["slow_runs"], "runs": row["runs"],
            "base_rate": row["base_rate"], "p_value": row["p_value"],
            "p_adjusted": row["p_adjusted"],
            "text": "fleet: confirmed slow in %d of %d runs (fleet base rate %.1f%%, "
                    "p = %.2g adjusted)" % (row["slow_runs"], row["runs"],
                                            100.0 * row["base_rate"], row["p_adjusted"])})
    for e in out.values():
        e["ranks"].sort()
    return [out[h] for h in sorted(out)]


# -- hostlists ----------------------------------------------------------------------------------

_TRAILING_NUMBER = re.compile(r"^(.*?)(\d+)$")


def compress_hostlist(hosts):
    """A Slurm hostlist expression for `hosts`: names that differ only in a trailing number
    share a bracket (`node[01-04,07]`); zero padding is kept (numbers written with a leading
    zero are grouped by their width, so `node[08-10]` expands to node08, node09, node10 and
    `node[9-10]` to node9, node10); names without a trailing number stay as they are. Groups
    are joined by commas, sorted by prefix."""
    groups = {}  # (prefix, width or 0 for unpadded) -> set of numbers
    plain = set()
    for host in hosts:
        if any(c in host for c in ",[]") or not host or host != host.strip():
            raise ValueError("host %r cannot be written in a Slurm hostlist" % host)
        m = _TRAILING_NUMBER.match(host)
        if not m:
            plain.add(host)
            continue
        prefix, digits = m.groups()
        width = len(digits) if len(digits) > 1 and digits[0] == "0" else 0
        groups.setdefault((prefix, width), set()).add(int(digits))
    # An unpadded number as wide as a padded group of its prefix joins it (node09 and node10
    # make node[09-10]: both expand back with width 2).
    for (prefix, width), numbers in list(groups.items()):
        if width == 0:
            for n in list(numbers):
                if (prefix, len(str(n))) in groups and len(str(n)) > 1:
                    groups[(prefix, len(str(n)))].add(n)
                    numbers.discard(n)
            if not numbers:
                del groups[(prefix, 0)]
    parts = []
    for (prefix, width), numbers in groups.items():
        nums = sorted(numbers)
        fmt = (lambda n: str(n).zfill(width)) if width else str
        if len(nums) == 1:
            parts.append((prefix, width, prefix + fmt(nums[0])))
            continue
        ranges = []
        start = prev = nums[0]
        for n in nums[1:] + [None]:
            if n is not None and n == prev + 1:
                prev = n
                continue
            ranges.append(fmt(start) if start == prev else "%s-%s" % (fmt(start), fmt(prev)))
            if n is not None:
                start = prev = n
        parts.append((prefix, width, "%s[%s]" % (prefix, ",".join(ranges))))
    for host in plain:
        parts.append((host, -1, host))
    parts.sort(key=lambda p: (p[0], p[1]))
    return ",".join(p[2] for p in parts)


def expand_hostlist(expr):
    """The host names of a Slurm hostlist expression (`node[01-03,7],gpu1`), in order: the
    inverse of compress_hostlist (one bracket per name, at its end or in its middle)."""
    hosts = []
    for item in re.findall(r"[^,\[]*(?:\[[^\]]*\][^,\[]*)*", expr):
        if not item:
            continue
        m = re.match(r"^([^\[]*)\[([^\]]*)\](.*)$", item)
        if not m:
            hosts.append(item)
            continue
        prefix, inner, suffix = m.groups()
        for part in inner.split(","):
            lo, _, hi = part.partition("-")
            hi = hi or lo
            width = len(lo) if lo.startswith("0") and len(lo) > 1 else 0
            for n in range(int(lo), int(hi) + 1):
                hosts.extend(expand_hostlist(prefix + str(n).zfill(width) + suffix))
    return hosts


_K8S_NODE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def k8s_node_name(host):
    """The Kubernetes node name of a host: its name in lowercase (the kubelet registers the
    hostname lowercased), which must then be an RFC 1123 subdomain; ValueError otherwise."""
    name = host.lower()
    if len(name) > 253 or not _K8S_NODE.match(name):
        raise ValueError("host %r is not a valid Kubernetes node name (RFC 1123: lowercase "
                         "letters, digits, '-' and '.', at most 253 characters)" % host)
    return name


def format_hosts(entries, fmt, extra=None):
    """stdout's text for the hosts of `entries` (exclusions()) in format `fmt`; "" when none."""
    hosts = [e["host"] for e in entries]
    if fmt == "json":
        obj = {"hosts": entries}
        obj.update(extra or {})
        return json.dumps(obj, indent=2, sort_keys=True) + "\n"
    if not hosts:
        return ""
    if fmt == "slurm":
        return compress_hostlist(hosts) + "\n"
    if fmt == "hostfile":
        return "".join(h + "\n" for h in hosts)
    if fmt == "k8s":
        return "".join(n + "\n" for n in sorted({k8s_node_name(h) for h in hosts}))
    raise ValueError("unknown format %r (one of %s)" % (fmt, ", ".join(FORMATS)))


# -- the command --------------------------------------------------------------------------------

def _read_analysis(path, run_dir):
    """A saved `laggard analyze --json` object, checked to be of `run_dir`."""
    try:
        with open(path) as f:
            analysis = json.load(f)
    except (OSError, ValueError) as e:
        raise ValueError("--analysis %s: not a `laggard analyze --json` output (%s)" % (path, e))
    if not isinstance(analysis, dict) or not isinstance(analysis.get("stragglers"), list) \
            or "run_dir" not in analysis:
        raise ValueError("--analysis %s: not a `laggard analyze --json` output (no run_dir "
                         "and stragglers)" % path)
    if os.path.realpath(str(analysis["run_dir"])) != os.path.realpath(run_dir):
        raise ValueError("--analysis %s is the analysis of %s, not of %s"
                         % (path, analysis["run_dir"], run_dir))
    return analysis


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog=os.environ.get("LAGGARD_EXCLUDE_PROG", "python -m laggard.exclude"),
        description="Print the hosts to leave out of the next allocation: those with a "
                    "confirmed straggler in the run(s), and with --fleet those the fleet store "
                    "finds recurring. Evidence per host on stderr (json: inline).")
    p.add_argument("run_dirs", nargs="*", metavar="RUN_DIR", help="run directories "
                   "(rank-*.jsonl); optional with --fleet")
    p.add_argument("--format", choices=FORMATS, default="slurm",
                   help="slurm: a compressed hostlist for --exclude (default); hostfile: one "
                        "host a line; k8s: node names for kubectl cordon/taint; json: with the "
                        "evidence")
    p.add_argument("--fleet", action="store_true",
                   help="add the hosts the fleet store ranks as recurring (laggard fleet hosts)")
    p.add_argument("--store", default=None, metavar="PATH|URL",
                   help="the fleet store (default $LAGGARD_FLEET, else "
                        "~/.local/share/laggard/fleet.db)")
    p.add_argument("--since", default=None, metavar="DATE",
                   help="with --fleet: only runs finished since DATE (YYYY-MM-DD or ISO 8601, "
                        "UTC; or 30d, 12h)")
    p.add_argument("--analysis", default=None, metavar="FILE",
                   help="the run's `laggard analyze --json` output to use instead of analysing "
                        "it again (one RUN_DIR; keeps the detector settings it was made with)")
    p.add_argument("-q", "--quiet", action="store_true", help="no evidence on stderr")
    return p.parse_args(argv)


def _store_error():
    from .fleet import StoreError  # laggard.fleet imports this module: not at the top

    return StoreError


def main(argv=None):
    args = parse_args(argv)
    prog = os.environ.get("LAGGARD_EXCLUDE_PROG", "laggard exclude")
    if not args.run_dirs and not args.fleet:
        sys.stderr.write("%s: give a RUN_DIR, --fleet, or both\n" % prog)
        return EXIT_USAGE
    if not args.fleet and (args.store is not None or args.since is not None):
        sys.stderr.write("%s: --store and --since are options of --fleet\n" % prog)
        return EXIT_USAGE
    try:
        analysis = None
        if args.analysis is not None:
            if len(args.run_dirs) != 1:
                raise ValueError("--analysis is the analysis of one RUN_DIR; %d given"
                                 % len(args.run_dirs))
            analysis = _read_analysis(args.analysis, args.run_dirs[0])
        records = [read_run_record(d, analysis=analysis) for d in args.run_dirs]
        fleet_rows = []
        extra = {"runs": [{"run_dir": r["run_dir"], "run_id": r["run_id"],
                           "hosts": sorted(r["hosts"]), "waiting": r["waiting"]}
                          for r in records]}
        if args.fleet:
            from . import fleet

            with fleet.open_store(args.store, create=False) as store:
                fleet_rows = store.rank_hosts(since=fleet.parse_since(args.since))
            extra["fleet"] = {"store": fleet.describe_store(args.store),
                              "hosts": [r for r in fleet_rows if r["recurring"]]}
        entries = exclusions(records, fleet_rows)
        text = format_hosts(entries, args.format, extra)
    except (BadRun, ValueError, OSError, _store_error()) as e:
        sys.stderr.write("%s: %s\n" % (prog, e))
        return EXIT_USAGE
    sys.stdout.write(text)
    sys.stdout.flush()
    if not entries:
        waited = sorted({h for r in records for h in r["waiting"]})
        sys.stderr.write("%s: nothing to exclude: no confirmed straggler%s%s\n" % (
            prog, " in " + ", ".join(r["run_dir"] for r in records) if records else "",
            (" and no recurring host in the fleet store" if args.fleet else "") +
            ("; hosts whose ranks only waited (%s) are not named" % ", ".join(waited)
             if waited else "")))
    elif not args.quiet and args.format != "json":
        for e in entries:
            for ev in e["evidence"]:
                sys.stderr.write("# %s: %s%s\n" % (
                    e["host"], ev["text"],
                    " (%s)" % ev["run_dir"] if ev.get("run_dir") and len(records) > 1 else ""))
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
