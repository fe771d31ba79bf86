"""python -m laggard.launch -n 4 script.py [args...]   (or -m module [args...])

Starts local ranks of a torch.distributed program with the usual environment (RANK, WORLD_SIZE,
LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT), forwards SIGINT and SIGTERM
to every rank, and exits with the worst exit code. When a rank fails, the others get SIGTERM
after --kill-grace seconds (they would otherwise wait in a collective for the dead rank).
Exists because torchrun of Debian's torch 1.13 fails under Python 3.11.
"""

import argparse
import os
import signal
import socket
import subprocess
import sys
import time


def free_port(host="127.0.0.1"):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _severity(code):
    """Exit status as a shell reports it: killed by signal N → 128 + N."""
    if code is None:
        return 0
    return 128 - code if code < 0 else code


def worst_exit_code(codes):
    """The worst of the ranks' exit codes: 0 only when every rank succeeded."""
    worst = 0
    for code in codes:
        s = _severity(code)
        if s > worst:
            worst = s
    return worst


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="python -m laggard.launch",
        description="Start local ranks of a torch.distributed program.")
    p.add_argument("-n", "--nproc-per-node", "--nproc_per_node", dest="nproc", type=int,
                   required=True, help="ranks to start on this node")
    p.add_argument("--nnodes", type=int, default=1, help="nodes in the job (default 1)")
    p.add_argument("--node-rank", "--node_rank", type=int, default=0,
                   help="this node's index (default 0)")
    p.add_argument("--master-addr", "--master_addr", default="127.0.0.1")
    p.add_argument("--master-port", "--master_port", type=int, default=0,
                   help="0: pick a free port (single node only)")
    p.add_argument("--kill-grace", type=float, default=10.0,
                   help="seconds the other ranks get after one fails (default 10)")
    p.add_argument("-m", dest="module", action="store_true",
                   help="run the target as a module (python -m)")
    p.add_argument("target", help="script (or module with -m)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
    a = p.parse_args(argv)
    if a.nproc < 1:
        p.error("-n must be >= 1")
    if a.master_port == 0 and a.nnodes > 1:
        p.error("--master-port is required with --nnodes > 1")
    return a


def launch(nproc, target, args=(), module=False, nnodes=1, node_rank=0,
           master_addr="127.0.0.1", master_port=0, kill_grace=10.0, env=None,
           python=sys.executable):
    """Runs the ranks to completion; returns the worst exit code."""
    port = master_port or free_port(master_addr)
    world = nproc * nnodes
    base = dict(os.environ if env is None else env)
    cmd = [python] + (["-m", target] if module else [target]) + list(args)
    procs = []
    for local in range(nproc):
        e = dict(base)
        e.update(RANK=str(node_rank * nproc + local), WORLD_SIZE=str(world),
                 LOCAL_RANK=str(local), LOCAL_WORLD_SIZE=str(nproc), GROUP_RANK=str(node_rank),
                 MASTER_ADDR=master_addr, MASTER_PORT=str(port))
        procs.append(subprocess.Popen(cmd, env=e))

    received = []

    def forward(signum, frame):
        received.append(signum)
        for p in procs:
            if p.poll() is None:
                try:
                    p.send_signal(signum)
                except OSError:
                    pass

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        failed_at = None
        while True:
            codes = [p.poll() for p in procs]
            if all(c is not None for c in codes):
                break
            if failed_at is None and any(c not in (None, 0) for c in codes):
                failed_at = time.monotonic()
            if failed_at is not None and time.monotonic() - failed_at > kill_grace:
                for p in procs:
                    if p.poll() is None:
                        p.terminate()
                failed_at = float("inf")  # terminate once; then wait
            time.sleep(0.05)
        return worst_exit_code(p.returncode for p in procs)
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        for p in procs:  # never leave ranks behind
            if p.poll() is None:
                p.kill()
                p.wait()


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    return launch(a.nproc, a.target, a.args, module=a.module, nnodes=a.nnodes,
                  node_rank=a.node_rank, master_addr=a.master_addr, master_port=a.master_port,
                  kill_grace=a.kill_grace)


if __name__ == "__main__":
    sys.exit(main())
