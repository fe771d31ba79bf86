"""Logging helpers: one logger ("laggard"), rate-limited warnings, error counters.

Nothing in laggard raises into a training loop; what fails becomes a warning here (at most one
per kind and interval, so a failing sink cannot flood the log) and a count the metrics report.

The engine's (C++) messages come to the same logger through the log bridge (python/src/engine.cc)
at their own level, as "laggard: <message>". Among them, on the analysis rank, the verdict's
console lines ("laggard: straggler confirmed: ...", "laggard: straggler cleared: ...") at
WARNING, so that Python prints them to stderr with no logging configured (its last-resort
handler); they are neither rate-limited nor counted as failures.
"""

import logging
import threading
import time

logger = logging.getLogger("laggard")

_once_lock = threading.Lock()
_once_seen = set()


def log_once(key, level, message, *args):
    """Logs `message` the first time `key` is seen in this process."""
    with _once_lock:
        if key in _once_seen:
            return False
        _once_seen.add(key)
    logger.log(level, message, *args)
    return True


class ErrorCounter:
    """Counts failures by kind and logs a warning per kind at most every `interval_s` seconds.

    Thread-safe (the training thread and the side-channel thread both report here).
    """

    def __init__(self, interval_s=60.0):
        self._interval_s = interval_s
        self._lock = threading.Lock()
        self._last = {}
        self._suppressed = {}
        self.total = 0
        self.by_kind = {}

    def report(self, kind, error, count=1):
        """Counts `count` failures of `kind` (one warning for them all), `error` the latest."""
        try:
            now = time.monotonic()
            with self._lock:
                self.total += count
                self.by_kind[kind] = self.by_kind.get(kind, 0) + count
                last = self._last.get(kind)
                if last is not None and now - last < self._interval_s:
                    self._suppressed[kind] = self._suppressed.get(kind, 0) + 1
                    return
                self._last[kind] = now
                suppressed = self._suppressed.pop(kind, 0)
            more = " (%d similar warnings suppressed)" % suppressed if suppressed else ""
            logger.warning("laggard: %s failed: %s: %s%s; training continues", kind,
                           type(error).__name__, error, more)
        except Exception:  # a broken logging setup must not reach the caller either
            pass


class EngineErrors:
    """The Analyzer's failures once its engine runs: counted by the engine (C++), which also
    counts its own (a sink, the side channel, the rank log), rate-limits the warnings per kind
    and puts the total into straggler/report_errors. `before`: what was counted before the
    engine existed. Thread-safe."""

    def __init__(self, engine, before):
        self.engine = engine
        self.local = before

    def report(self, kind, error, count=1):
        try:
            message = "%s: %s; training continues" % (type(error).__name__, error)
            for _ in range(max(1, int(count))):
                self.engine.count_error(str(kind), message)
        except Exception:  # a broken engine must not reach the caller either
            self.local.report(kind, error, count)

    @property
    def total(self):
        try:
            return self.local.total + int(self.engine.counters["report_errors"])
        except Exception:
            return self.local.total
