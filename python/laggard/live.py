"""The live analysis on the analysis rank: windows from gathered samples, the C++ Detector,
reports to sinks.

Runs on the side-channel thread of the analysis rank. Samples arrive per round as
(rank, [(step, json_line)], dropped, errors) payloads; a step's window is analysed once every
rank's sample is in, or `late_rounds` rounds after its first sample arrived (then with the ranks
that made it), always in step order so persistence counts windows in order.
"""

import time

from . import _core
from ._log import logger


class LiveAnalysis:
    def __init__(self, options, world_size, local_rank, sinks, errors, report_log=None,
                 late_rounds=2):
        # report_log: the path of reports.jsonl, appended by the C++ side without the GIL.
        self.detector = _core.LiveDetector(options, int(local_rank), report_log or "")
        self.world_size = int(world_size)
        self.local_rank = int(local_rank)
        self.sinks = list(sinks)
        self.report_log = report_log
        self.errors = errors
        self.late_rounds = int(late_rounds)
        self.reports = 0
        self.incomplete_windows = 0
        self.late_samples = 0
        self.parse_errors = 0
        self._round = 0
        self._pending = {}  # step -> {rank: line}
        self._first_round = {}
        self._last_step = None
        self._dropped = {}  # rank -> samples that rank dropped (its queue was full)
        self._remote_errors = {}  # rank -> failures counted on that rank
        self._gil_free_cpu_ns = 0  # this thread's CPU time inside observe_batch (GIL released)

    # -- read from any thread ----------------------------------------------------------------

    def latest_metrics(self):
        return self.detector.latest_metrics()

    def latest_report(self):
        """The latest report as a dict (built on request: the analysis does not need it)."""
        return self.detector.latest_report()

    # -- side-channel thread -------------------------------------------------------------------

    def take_gil_free_cpu_ns(self):
        """CPU time of this thread in the detector's GIL-free calls since the last call."""
        ns, self._gil_free_cpu_ns = self._gil_free_cpu_ns, 0
        return ns

    def add_round(self, payloads):
        self._round += 1
        for payload in payloads:
            if not payload:
                continue
            rank, samples, dropped, errors = payload
            if rank != self.local_rank:  # our own errors are counted in self.errors already
                self._remote_errors[rank] = errors
            self._dropped[rank] = dropped
            for step, line in samples:
                if self._last_step is not None and step <= self._last_step:
                    self.late_samples += 1  # its window was analysed without it
                    continue
                self._pending.setdefault(step, {})[rank] = line
                self._first_round.setdefault(step, self._round)
        self._evaluate(final=False)

    def finish(self):
        """Analyses what is left (close) and closes the sinks."""
        try:
            self._evaluate(final=True)
        finally:
            for sink in self.sinks:
                close = getattr(sink, "close", None)
                if callable(close):
                    try:
                        close()
                    except Exception as e:
                        self.errors.report("sink close", e)
            if self.report_log is not None:
                try:
                    self.detector.close_log()
                except Exception as e:
                    self.errors.report("report log", e)

    def _evaluate(self, final):
        batch = []  # (step, lines in rank order, incomplete windows so far)
        for step in sorted(self._pending):  # in step order; one sort for the whole batch
            ranks = self._pending[step]
            complete = len(ranks) >= self.world_size
            if not (complete or final or self._round - self._first_round[step] >= self.late_rounds):
                break
            del self._pending[step]
            del self._first_round[step]
            if not complete:
                self.incomplete_windows += 1
            self._last_step = step
            batch.append((step, [ranks[r] for r in sorted(ranks)],
                          float(self.incomplete_windows)))
        if batch:
            self._report(batch)

    def _report(self, batch):
        # Parsing, the detector, the live metrics and the reports.jsonl lines of every window
        # ready: one C++ call, without the GIL, so that the training thread does not wait for
        # this thread (one call per window took the GIL back once per window). The metrics
        # become dicts only for sinks (latest_metrics() converts on request).
        c0 = time.thread_time_ns()
        metrics, parse_errors, log_failures, log_error = self.detector.observe_batch(
            batch, report_errors=float(self.errors.total + sum(self._remote_errors.values())),
            dropped_samples=float(sum(self._dropped.values()) + self.late_samples),
            metrics=bool(self.sinks))
        self._gil_free_cpu_ns += time.thread_time_ns() - c0
        self.parse_errors += parse_errors
        self.reports += len(batch)
        if log_failures:
            self.errors.report("report log", OSError(log_error), count=log_failures)
        for (step, _, _), m in zip(batch, metrics or ()):
            for sink in self.sinks:
                try:
                    sink(step, dict(m))
                except Exception as e:
                    self.errors.report("sink %s" % _name(sink), e)
        if parse_errors:
            logger.debug("laggard: steps %d-%d: %d malformed samples", batch[0][0],
                         batch[-1][0], parse_errors)


def _name(sink):
    fn = getattr(sink, "fn", sink)
    return getattr(fn, "__qualname__", None) or type(fn).__name__
