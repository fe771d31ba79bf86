"""laggard demo: watch laggard find an injected straggler in a real DDP training job.

    python -m laggard.demo [--ranks 4] [--steps 200] [--slow-rank 1] [--slow-stage backward]
                           [--slowdown 2.0] [--out DIR]
    laggard demo ...                       (the same, through the C++ command-line program)

Starts N local rank processes that train a small MLP with DistributedDataParallel over gloo on
the CPU, with the analyzer on (log_dir = the run directory), and makes one rank's work in one
stage FACTOR times slower. Every stage is the model's real work plus a stand-in of a few
milliseconds (a sleep, as a GPU kernel would be a wait for the host), so that stage times are
milliseconds as on a real job rather than scheduler noise of a busy CPU: the slowdown multiplies
the stand-in. While the ranks train, a step counter runs on stderr (only on a terminal) and the
analysis rank's live verdicts are printed as they arrive; at the end the demo prints the
`laggard analyze` summary of the run directory it wrote, rendered in this process by the library
the program renders it with (laggard.analyze_run: the same text, byte for byte).

`--slowdown 1` is a healthy run: the demo then says that no straggler was found. Ctrl-C stops
every rank at the same step (they close the analyzer, so every log line is complete) and prints
the summary of what was recorded; a second Ctrl-C kills the ranks at once.

Exit status: 0 the run finished (whatever the verdict), 1 a rank failed, 2 bad usage,
130 interrupted.
"""

import argparse
import datetime
import glob
import logging
import os
import signal
import sys
import time

STAGES = ("dataloader", "forward", "backward", "optimizer")
# The stand-in of each stage on a healthy rank, in ms (the model's own compute adds a little).
STAGE_MS = {"dataloader": 10.0, "forward": 20.0, "backward": 20.0, "optimizer": 10.0}

WARMUP_STEPS = 3  # before step 0, not timed

# The detector settings of the demo are the library's own defaults (docs/detection.md): every
# setting left None here takes them, in the Analyzer and in `laggard analyze`. Their flags are
# the settings table's (laggard._core.detector_settings()), as the program's are.
def _detector_settings():
    from . import _core

    return _core.detector_settings()


EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


# -- arguments ---------------------------------------------------------------------------------

def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog=os.environ.get("LAGGARD_DEMO_PROG", "python -m laggard.demo"),
        description="Train a small DDP model on N local CPU ranks with one rank made slow in "
                    "one stage, and watch laggard find it.")
    p.add_argument("--ranks", type=int, default=4, help="rank processes to start (default 4)")
    p.add_argument("--steps", type=int, default=200, help="training steps (default 200)")
    p.add_argument("--slow-rank", type=int, default=1,
                   help="the rank made slow (default 1)")
    p.add_argument("--slow-stage", choices=STAGES, default="backward",
                   help="the stage made slow (default backward)")
    p.add_argument("--slowdown", type=float, default=2.0, metavar="FACTOR",
                   help="how many times slower that rank's stage runs; 1 = a healthy run "
                        "(default 2.0)")
    p.add_argument("--slow-from", type=int, default=50, metavar="STEP",
                   help="the step from which the slow rank is slow (default 50)")
    p.add_argument("--stage-ms", type=float, default=None, metavar="MS",
                   help="stand-in of the forward and backward stages in ms (dataloader and "
                        "optimizer: half) (default 20)")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="run directory for the rank logs (default: a new "
                        "/tmp/laggard-demo-<time> directory); must be empty or new")
    g = p.add_argument_group(
        "detector settings (default: the library's own, docs/detection.md; a setting left out "
        "takes it)")
    g.add_argument("--interval", type=int, default=10,
                   help="sample every N-th step (%(default)s)")
    settings = _detector_settings()
    g.add_argument("--preset", choices=tuple(settings[0]["presets"]), default=None,
                   help="settings by name, under any setting given; rfc: the RFC's rule exactly "
                        "(mean, 1.2x, 5 ms, 2 of 3)")
    for st in settings:
        kind = {"number": float, "integer": int, "choice": str}[st["type"]]
        g.add_argument(st["flag"], type=kind, default=None, choices=tuple(st["choices"]) or None,
                       help=("%s (default %s)" % (st["help"], st["default"])).replace("%", "%%"))
    p.add_argument("--progress", choices=("auto", "always", "never"), default="auto",
                   help="step counter on stderr: auto = only when stderr is a terminal")
    a = p.parse_args(argv)
    if a.ranks < 2:
        p.error("--ranks must be >= 2 (a straggler is slow compared with other ranks)")
    if a.ranks > 64:
        p.error("--ranks must be <= 64 (every rank is a local process)")
    if a.steps < 1:
        p.error("--steps must be >= 1")
    if not 0 <= a.slow_rank < a.ranks:
        p.error("--slow-rank must be in [0, %d)" % a.ranks)
    if not a.slowdown >= 1.0 or a.slowdown > 100:
        p.error("--slowdown must be in [1, 100] (1 = healthy)")
    if a.interval < 1:
        p.error("--interval must be >= 1")
    if a.stage_ms is not None and not 0 <= a.stage_ms <= 1000:
        p.error("--stage-ms must be in [0, 1000]")
    try:
        detector_options(a)
    except ValueError as e:
        p.error("detector settings: %s" % e)
    return a


def detector_settings_given(args):
    """The detector settings given as flags, by name (None where left out)."""
    return {st["name"]: getattr(args, st["name"]) for st in _detector_settings()}


def detector_options(args):
    """The _core.DetectorOptions of the demo's settings: the preset (or the library's defaults)
    with the settings given on top, as `laggard analyze` resolves its flags."""
    from . import _core

    return _core.detector_options(args.preset, args.ranks, **detector_settings_given(args))


def resolved_settings(args):
    """Every detector setting's value as the demo runs it, for the ranks' Analyzer (explicit, so
    that the live analysis and `laggard analyze` resolve the preset the same way)."""
    o = detector_options(args)
    return {st["name"]: getattr(o, st["name"]).name if st["type"] == "choice"
            else getattr(o, st["name"]) for st in _detector_settings()}


def describe_detector(args):
    rule = "interval %d, %s" % (args.interval, detector_options(args).describe())
    if args.preset is None and all(v is None for v in detector_settings_given(args).values()):
        rule += "\n    (the library's defaults)"
    return rule


def stage_ms(args):
    if args.stage_ms is None:
        return dict(STAGE_MS)
    return {"dataloader": args.stage_ms / 2, "forward": args.stage_ms,
            "backward": args.stage_ms, "optimizer": args.stage_ms / 2}


def default_out_dir():
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    base = os.path.join(os.environ.get("TMPDIR") or "/tmp", "laggard-demo-" + stamp)
    path, n = base, 1
    while os.path.exists(path):
        n += 1
        path = "%s-%d" % (base, n)
    return path


def prepare_out_dir(path):
    """Creates the run directory; refuses one that holds files (rank logs are appended)."""
    if os.path.exists(path):
        if not os.path.isdir(path):
            raise ValueError("--out %s exists and is not a directory" % path)
        if os.listdir(path):
            raise ValueError("--out %s is not empty (rank logs are appended: use a new "
                             "directory)" % path)
    else:
        os.makedirs(path)


# -- one rank (a forked process) ---------------------------------------------------------------

def _die_with_parent():
    """Linux: the rank gets SIGKILL when the demo process dies (no orphans left in a gather)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def _rank_main(rank, world, port, cfg, shared, queue):
    """Trains one rank; reports progress and the analysis rank's verdicts through `queue`."""
    import datetime as _dt
    import random

    import torch
    import torch.distributed as dist
    import torch.nn as nn

    import laggard
    import laggard.torch

    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                      LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank,
                            world_size=world, timeout=_dt.timedelta(seconds=120))
    torch.manual_seed(0)

    base = cfg["stage_ms"]
    slow = rank == cfg["slow_rank"] and cfg["slowdown"] != 1.0
    rng = random.Random(1000 + rank)

    def stand_in(stage, step):
        ms = base[stage]
        if slow and stage == cfg["slow_stage"] and step >= cfg["slow_from"]:
            ms *= cfg["slowdown"]
        if ms > 0:
            time.sleep(ms * (1.0 + rng.uniform(-0.02, 0.02)) / 1000.0)  # 2 % jitter

    state = {"step": 0}

    class StandIn(torch.autograd.Function):
        """Identity; its backward runs the backward stage's stand-in."""

        @staticmethod
        def forward(ctx, x):
            return x.view_as(x)

        @staticmethod
        def backward(ctx, grad):
            stand_in("backward", state["step"])
            return grad

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.l1 = nn.Linear(64, 128)
            self.l2 = nn.Linear(128, 128)
            self.l3 = nn.Linear(128, 8)

        def forward(self, x):
            stand_in("forward", state["step"])
            h = torch.relu(self.l1(x))
            h = StandIn.apply(torch.relu(self.l2(h)))
            return self.l3(h)

    class SGD(torch.optim.SGD):
        def step(self, closure=None):
            stand_in("optimizer", state["step"])
            return super().step(closure)

    holder = {}

    def verdicts(step, metrics):
        # The analysis rank, on laggard's thread: the full report of this step's window.
        report = holder["an"].latest_report() or {}
        queue.put(("report", int(step), [
            {k: f.get(k) for k in ("rank", "stage", "ms", "ref_ms", "slowdown",
                                   "windows_flagged", "confirmed")}
            for f in report.get("stragglers", ())], [
            {k: f.get(k) for k in ("rank", "stage", "ms", "ref_ms")}
            for f in report.get("waiting", ())], metrics.get("straggler/likely_bottleneck", "")))

    # The demo prints the live verdicts itself, with their step, between its progress lines: the
    # analysis rank's own console lines of them would say each twice.
    logging.getLogger("laggard").addFilter(
        lambda record: not record.getMessage().startswith(("laggard: straggler confirmed",
                                                           "laggard: straggler cleared")))
    an = laggard.Analyzer(
        enabled=True, interval=cfg["interval"], log_dir=cfg["out"],
        sinks=[verdicts] if rank == 0 else (), timing="host", **cfg["detector"],
        side_channel_timeout_s=60.0, close_timeout_s=15.0, host="localhost", cohort="dp")
    holder["an"] = an
    model = nn.parallel.DistributedDataParallel(MLP())
    opt = SGD(model.parameters(), lr=0.01)
    laggard.torch.instrument(an, model=model, optimizer=opt)

    gen = torch.Generator().manual_seed(rank)
    w_true = torch.randn(64, 8, generator=torch.Generator().manual_seed(7))
    # Warm-up, not timed: DDP's first iterations (bucket set-up) and the first wake-ups of
    # freshly forked processes are slower on every rank; a trainer's warm-up is no verdict.
    for _ in range(cfg["warmup"]):
        x = torch.randn(32, 64, generator=gen)
        opt.zero_grad(set_to_none=True)
        nn.functional.mse_loss(model(x), x @ w_true).backward()
        opt.step()
    steps_done = 0
    loss = None
    for step in range(cfg["steps"]):
        with shared["lock"]:  # every rank stops at the same step (see _interrupt)
            if step > shared["max_started"].value:
                shared["max_started"].value = step
            stop = step >= shared["stop_at"].value
        if stop:
            break
        state["step"] = step
        an.begin_step(step)
        with an.section("dataloader"):
            x = torch.randn(32, 64, generator=gen)
            y = x @ w_true
            stand_in("dataloader", step)
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        an.end_step()
        steps_done = step + 1
        if rank == 0:
            shared["progress"].value = steps_done
    an.close()  # the last gather and reports; every rank calls it
    queue.put(("done", rank, steps_done, float(loss.item()) if loss is not None else None))
    dist.destroy_process_group()
    return 0


def _child(rank, world, port, cfg, shared, queue):
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the demo process decides when ranks stop
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _die_with_parent()
    code = 1
    try:
        code = _rank_main(rank, world, port, cfg, shared, queue)
    except BaseException as e:  # noqa: BLE001 — reported, then the exit status says it
        try:
            queue.put(("error", rank, "%s: %s" % (type(e).__name__, e)))
        except Exception:
            pass
    finally:
        try:
            queue.close()
            queue.join_thread()
        except Exception:
            pass
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


# -- the demo process --------------------------------------------------------------------------

class Progress:
    """A one-line step counter on stderr (only when enabled)."""

    def __init__(self, enabled, total):
        self.enabled = enabled
        self.total = total
        self.shown = False
        self.t0 = time.monotonic()

    def update(self, step, note=""):
        if not self.enabled:
            return
        sys.stderr.write("\r\x1b[K  step %d/%d  %.1f s%s" % (
            step, self.total, time.monotonic() - self.t0, note))
        sys.stderr.flush()
        self.shown = True

    def clear(self):
        if self.enabled and self.shown:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()
            self.shown = False


def say(progress, text=""):
    progress.clear()
    print(text, flush=True)


def detector_cli_args(args):
    """`laggard analyze` flags for the settings given (none: the same defaults)."""
    out = ["--preset", args.preset] if args.preset is not None else []
    for k, v in detector_settings_given(args).items():
        if v is not None:
            out += ["--" + k.replace("_", "-"), repr(float(v)) if isinstance(v, float) else str(v)]
    return out


def analyze(args, out):
    """Prints the `laggard analyze` summary of `out` (laggard.analyze_run: the library's own
    rendering, as the program prints it); returns the confirmed (rank, stage, x), or None when
    the run could not be analysed."""
    from . import analyze_run

    try:
        result = analyze_run(out, detector_options(args))
    except Exception as e:  # an unreadable run directory: said, not raised
        print("laggard analyze failed: %s" % e, flush=True)
        return None
    if result["windows"] == 0:
        print("laggard analyze: no well-formed samples in %s" % out, flush=True)
        return None
    print("$ laggard analyze %s" % " ".join([out] + detector_cli_args(args)))
    print(result["text"].rstrip("\n"), flush=True)
    return [(s["rank"], s["stage"], s.get("typical_slowdown") or float("nan"))
            for s in result["json"]["stragglers"]]


def main(argv=None):
    t_start = time.monotonic()
    args = parse_args(argv)
    out = os.path.abspath(args.out) if args.out else default_out_dir()
    try:
        prepare_out_dir(out)
    except (OSError, ValueError) as e:
        print("laggard demo: %s" % e, file=sys.stderr)
        return EXIT_USAGE
    base = stage_ms(args)
    healthy = args.slowdown == 1.0
    show_progress = {"always": True, "never": False}.get(args.progress, sys.stderr.isatty())

    print("laggard demo: %d ranks train a small MLP with DDP over gloo on the CPU, %d steps" % (
        args.ranks, args.steps))
    print("  stages: %s; each = the model's work + a stand-in of %s ms" % (
        ", ".join(STAGES), "/".join("%g" % base[s] for s in STAGES)))
    if healthy:
        print("  injected: nothing (--slowdown 1: a healthy run)")
    else:
        print("  injected: rank %d's %s runs %gx slower from step %d" % (
            args.slow_rank, args.slow_stage, args.slowdown, args.slow_from))
    print("  detector: %s" % describe_detector(args))
    print("  run directory: %s" % out, flush=True)

    import multiprocessing

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    # torch imports `pynvml`; where the deprecated `pynvml` package (a shim over nvidia-ml-py
    # that some packages still pull in) is installed, its import hook prints a FutureWarning
    # into the demo's output. Only that warning, only for this import.
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The pynvml package is deprecated",
                                category=FutureWarning)
        import torch  # noqa: F401 — imported once here; every forked rank inherits it

    import laggard.torch  # noqa: F401
    from . import _core  # noqa: F401 — loaded before the fork, so every rank shares it
    from .launch import free_port

    ctx = multiprocessing.get_context("fork")
    lock = ctx.Lock()
    shared = {"lock": lock, "max_started": ctx.Value("q", -1, lock=False),
              "stop_at": ctx.Value("q", 1 << 62, lock=False),
              "progress": ctx.Value("q", 0, lock=False)}
    queue = ctx.Queue()
    cfg = dict(stage_ms=base, slow_rank=args.slow_rank, slow_stage=args.slow_stage,
               slowdown=args.slowdown, slow_from=args.slow_from, steps=args.steps,
               interval=args.interval, detector=resolved_settings(args), out=out,
               warmup=WARMUP_STEPS)
    port = free_port()

    previous_int = signal.signal(signal.SIGINT, signal.SIG_IGN)  # inherited by the ranks
    procs = [ctx.Process(target=_child, args=(r, args.ranks, port, cfg, shared, queue),
                         daemon=False) for r in range(args.ranks)]
    for p in procs:
        p.start()
    interrupts = []
    signal.signal(signal.SIGINT, lambda signum, frame: interrupts.append(time.monotonic()))
    t_train = time.monotonic()
    print("  started %d ranks (%.1f s since the demo began); live verdicts of the analysis "
          "rank (rank 0):" % (args.ranks, t_train - t_start), flush=True)

    progress = Progress(show_progress, args.steps)
    announced = set()
    errors = []
    done = {}
    reports = 0
    last_report = None
    failed_at = None
    interrupted_at = None
    killed = False
    try:
        while True:
            try:
                msg = queue.get(timeout=0.1)
            except Exception:  # queue.Empty
                msg = None
            if msg is not None:
                kind = msg[0]
                if kind == "report":
                    reports += 1
                    _, step, stragglers, waiting, bottleneck = msg
                    last_report = (step, stragglers, waiting, bottleneck)
                    for f in stragglers:
                        key = (f["rank"], f["stage"])
                        if f["confirmed"] and key not in announced:
                            announced.add(key)
                            waits = sorted({w["rank"] for w in waiting})
                            say(progress, "  step %4d: straggler confirmed: rank %d in %s, "
                                "%.2fx the reference (%.1f ms vs %.1f ms)%s" % (
                                    step, f["rank"], f["stage"], f["slowdown"], f["ms"],
                                    f["ref_ms"],
                                    "; ranks %s wait for it in communication" %
                                    ",".join(map(str, waits)) if waits else ""))
                elif kind == "done":
                    done[msg[1]] = msg[2]
                elif kind == "error":
                    errors.append((msg[1], msg[2]))
                continue  # drain the queue before anything else
            codes = [p.exitcode for p in procs]
            if all(c is not None for c in codes):
                break
            now = time.monotonic()
            if interrupts and interrupted_at is None:
                interrupted_at = now
                with lock:
                    stop = shared["max_started"].value + 2
                    shared["stop_at"].value = stop
                say(progress, "  interrupted: stopping every rank at step %d "
                    "(Ctrl-C again to kill them)" % stop)
            if (len(interrupts) > 1 or (interrupted_at is not None and
                                         now - interrupted_at > 30)) and not killed:
                say(progress, "  killing the ranks")
                for p in procs:
                    if p.exitcode is None:
                        p.kill()
                killed = True
            if failed_at is None and any(c not in (None, 0) for c in codes):
                failed_at = now
            if failed_at is not None and now - failed_at > 5 and not killed:
                for p in procs:  # the others wait in a collective for the failed rank
                    if p.exitcode is None:
                        p.kill()
                killed = True
            progress.update(shared["progress"].value)
    finally:
        for p in procs:
            if p.exitcode is None:
                p.kill()
            p.join()
        signal.signal(signal.SIGINT, previous_int)
        progress.clear()
    t_end = time.monotonic()
    codes = [p.exitcode for p in procs]
    failed = [(r, c) for r, c in enumerate(codes) if c != 0]
    steps_done = max(done.values()) if done else shared["progress"].value
    print("  %s after %d steps in %.1f s (%d live reports)%s" % (
        "stopped" if interrupts else ("ranks failed" if failed else "finished"), steps_done,
        t_end - t_train, reports, "" if announced else "; no straggler confirmed live"),
        flush=True)
    for rank, what in errors:
        print("  rank %d failed: %s" % (rank, what), flush=True)
    if failed and not interrupts:
        print("  exit codes: %s" % ", ".join("rank %d: %s" % (r, c) for r, c in failed),
              flush=True)

    print()
    if not glob.glob(os.path.join(out, "rank-*.jsonl")):
        print("No samples were recorded in %s (stopped before the first sampled step)." % out)
        return EXIT_INTERRUPTED if interrupts else EXIT_FAILED
    confirmed = analyze(args, out)
    print()
    print(verdict_line(args, confirmed))
    print("(%.1f s in all; the run directory stays: laggard analyze %s)" % (
        time.monotonic() - t_start, out), flush=True)
    if interrupts:
        return EXIT_INTERRUPTED
    return EXIT_FAILED if failed else EXIT_OK


def verdict_line(args, confirmed):
    healthy = args.slowdown == 1.0
    if confirmed is None:
        return "Verdict: unknown (the analysis failed)."
    injected = (args.slow_rank, args.slow_stage)
    if not confirmed:
        if healthy:
            return "Verdict: no straggler found: every rank ran every stage within the " \
                   "detector's thresholds (this run was healthy)."
        return "Verdict: no straggler found; the injected one (rank %d, %s, %gx) was not " \
               "confirmed (too few steps or sampled windows after step %d?)." % (
                   args.slow_rank, args.slow_stage, args.slowdown, args.slow_from)
    named = "; ".join("rank %d in %s (%.2fx typical)" % c for c in confirmed)
    if healthy:
        return "Verdict: straggler(s) named in a healthy run: %s — noise of this busy machine " \
               "(try --stage-ms 20 or --ref robust)." % named
    if [(r, s) for r, s, _ in confirmed] == [injected]:
        return "Verdict: the straggler is rank %d, in %s (%.2fx typical) — the injected %gx " \
               "slowdown, found." % (confirmed[0][0], confirmed[0][1], confirmed[0][2],
                                     args.slowdown)
    found = injected in [(r, s) for r, s, _ in confirmed]
    return "Verdict: named %s; the injected slowdown (rank %d, %s, %gx) was %s." % (
        named, args.slow_rank, args.slow_stage, args.slowdown,
        "among them" if found else "not found")


if __name__ == "__main__":
    sys.exit(main())
