"""A training loop whose rank log goes to a slow or hung disk, or that a signal ends
(tests/python/test_disk_faults.py). One process, interval 1, host clock.

  disk_worker.py LOG_DIR STEPS CLOSE_TIMEOUT_S   a run of STEPS steps, then close(); prints the
                                                 counters as JSON, then "closed"
  disk_worker.py LOG_DIR forever                 steps until a signal ends it; prints each
                                                 finished step's number
"""

import json
import signal
import sys
import time

import laggard


def main():
    log_dir, steps = sys.argv[1], sys.argv[2]
    close_timeout_s = float(sys.argv[3]) if len(sys.argv) > 3 else 30.0
    if steps == "forever":
        # A job's process starts with SIGHUP and SIGTERM at their default action; one started
        # under nohup (or by a parent that ignores them) would not end by them at all.
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    an = laggard.Analyzer(interval=1, log_dir=log_dir, close_timeout_s=close_timeout_s,
                          resources=False, timing="host")
    step = 0
    while steps == "forever" or step < int(steps):
        an.begin_step(step)
        with an.section("forward"):
            time.sleep(0.001)  # a step of ~1 ms: the writer keeps up (no queue_dropped)
        an.end_step()
        if steps == "forever":
            print(step, flush=True)
        step += 1
    t0 = time.monotonic()
    an.close()
    counters = an.counters()
    counters["close_s"] = time.monotonic() - t0
    print(json.dumps(counters), flush=True)
    print("closed", flush=True)


if __name__ == "__main__":
    main()
