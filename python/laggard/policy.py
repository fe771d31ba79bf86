"""Acting on a verdict, in the job: the verdict object, the on_straggler / on_clear events every
rank raises from the verdicts it receives, and the policies the integrations offer (docs/reference/python.md,
"Acting on a verdict").

    an = laggard.Analyzer(policy="stop", stop_after_windows=3)   # or "warn" (default), or fn
    an.on_straggler(lambda v: print(v.rank, v.host, v.stage, v.slowdown, v.reason))
    for step in range(steps):
        if an.should_stop:        # every rank: True at the same step boundary
            break                 # an.stop_reason says why
        an.begin_step(step); ...; an.end_step()

Where the callbacks run: on the training thread, inside Analyzer.end_step() of a sampled step at
which a new verdict has arrived (the check is one call into the engine on sampled steps, nothing
on the others), never on laggard's threads. A callback that raises is a counted error
(counters()['report_errors'], warned, rate-limited); training goes on.

Events: on_straggler(v) once per (rank, cohort, stage) when it first appears among a verdict's
confirmed stragglers; on_clear(v) when it has been absent from CLEAR_VERDICTS verdicts in a row
(counted by the verdicts' seq, so a verdict that this rank did not look at still counts), with
the finding as last confirmed. Every rank raises the same events, at its own sampled steps.

The stop policy: the analysis rank picks the step every rank stops before, once a confirmed
straggler has held for stop_after_windows windows (it says so on its console), and every verdict
it sends down carries that step. The step is ahead of its latest sampled step by stop_lead_s of
step time and at least two sampling intervals, far enough for the verdict to reach every rank
first; a rank that learns it too late (already past it) stops at its next step end and counts a
"stop" error. Every rank's Analyzer.should_stop becomes True at the end of step stop_step - 1, so
all ranks complete the same steps.
"""

from ._log import logger

__all__ = ["Verdict", "StopTraining", "VerdictEvents", "Policy", "WarnPolicy", "StopPolicy",
           "CallablePolicy", "make_policy", "CLEAR_VERDICTS"]

CLEAR_VERDICTS = 3  # as the analysis rank's "straggler cleared" line: 3 windows without it


class StopTraining(Exception):
    """Raised by Analyzer.check_stop() (a loop that prefers an exception to polling should_stop):
    the stop policy's step is reached. `reason` says why, `step` is the step not begun."""

    def __init__(self, reason, step=None):
        super().__init__(reason)
        self.reason = reason
        self.step = step


class Verdict:
    """One confirmed straggler as every rank learns it (an event's argument).

    event: "straggler" or "clear"; rank, host, cohort, stage, kind; slowdown (ms / ref_ms);
    ms and ref_ms (this window's time in the stage and the reference); cost_ms and cost_share
    (what it costs every step, and as a share of the step time); reason (why, in words: its own
    work, who waits for it, the measured resource reason); evidence (windows_flagged,
    windows_held, ms, ref_ms, score of the receiving rank); onset_step (first window of its run
    of flagged windows), confirmed_step (the window that confirmed it), step (the window of the
    verdict that raised the event), seq (that verdict's), stop_step (the stop policy's step, or
    None), self (True when the receiving rank is the straggler)."""

    __slots__ = ("event", "rank", "host", "cohort", "stage", "kind", "slowdown", "ms", "ref_ms",
                 "cost_ms", "cost_share", "reason", "evidence", "onset_step", "confirmed_step",
                 "windows_held", "step", "seq", "stop_step", "self")

    def __init__(self, event, finding, verdict):
        self.event = event
        self.rank = int(finding["rank"])
        self.host = finding.get("host", "")
        self.cohort = finding.get("cohort", "")
        self.stage = finding["stage"]
        self.kind = finding.get("kind", "")
        self.slowdown = float(finding["slowdown"])
        self.ms = float(finding.get("ms", 0.0))
        self.ref_ms = float(finding.get("ref_ms", 0.0))
        self.cost_ms = float(finding.get("cost_ms", 0.0))
        self.cost_share = float(finding.get("cost_share", 0.0))
        self.reason = finding.get("reason", "")
        self.onset_step = int(finding.get("onset_step", 0))
        self.confirmed_step = int(finding.get("confirmed_step", 0))
        self.windows_held = int(finding.get("windows_held", 0))
        self.evidence = {"windows_flagged": int(finding.get("windows_flagged", 0)),
                         "windows_held": self.windows_held, "ms": self.ms,
                         "ref_ms": self.ref_ms, "score": verdict.get("score")}
        self.step = int(verdict["step"])
        self.seq = int(verdict["seq"])
        self.stop_step = verdict.get("stop_step")
        self.self = self.rank == verdict.get("rank", -1)

    def as_dict(self):
        return {k: getattr(self, k) for k in self.__slots__}

    def __str__(self):
        where = " (host %s)" % self.host if self.host else ""
        return ("rank %d%s in '%s', %.2fx the reference; it costs every step %.1f ms (%.0f%% of "
                "the step time); why: %s [onset step %d, confirmed at step %d]" %
                (self.rank, where, self.stage, self.slowdown, self.cost_ms,
                 100.0 * self.cost_share, self.reason, self.onset_step, self.confirmed_step))

    __repr__ = __str__


class VerdictEvents:
    """Turns the verdicts a rank receives into on_straggler / on_clear events (see the module
    doc). Not thread-safe: the training thread's."""

    def __init__(self):
        self._active = {}  # (rank, cohort, stage) -> (finding, verdict, last seq confirmed)

    def update(self, verdict):
        """The events of a new verdict: a list of Verdict, stragglers first."""
        seq = int(verdict["seq"])
        out = []
        for f in verdict.get("confirmed", ()):
            key = (f["rank"], f.get("cohort", ""), f["stage"])
            if key not in self._active:
                out.append(Verdict("straggler", f, verdict))
            self._active[key] = (f, verdict, seq)
        for key, (f, v, last) in list(self._active.items()):
            if seq >= last + CLEAR_VERDICTS:
                del self._active[key]
                out.append(Verdict("clear", f, dict(v, seq=seq, step=verdict["step"],
                                                     stop_step=verdict.get("stop_step"))))
        return out


class Policy:
    """What a rank does with the events. Subclass and override; every method is called on the
    training thread (see the module doc), and an exception is counted, never raised."""

    stop = False  # True: the analysis rank agrees a stop step once a verdict has held

    def on_straggler(self, verdict):
        pass

    def on_clear(self, verdict):
        pass

    def on_stop(self, reason, step):
        """Every rank, once, at the end of step `step - 1` when the stop step `step` is reached."""


class WarnPolicy(Policy):
    """The default: the analysis rank's console lines (confirmed, cleared) say it; nothing stops.
    The events still reach the callbacks registered with on_straggler / on_clear."""


class StopPolicy(Policy):
    """Every rank stops cleanly at the same step boundary once a confirmed straggler has held for
    stop_after_windows windows (the integrations use their trainer's own stop; plain loops read
    Analyzer.should_stop). The reason is logged on every rank (the laggard logger, WARNING)."""

    stop = True

    def on_stop(self, reason, step):
        logger.warning("laggard: stopping before step %d: %s", step, reason)


class CallablePolicy(Policy):
    """A user callable fn(verdict), called for every event (verdict.event says which)."""

    def __init__(self, fn):
        self.fn = fn

    def on_straggler(self, verdict):
        self.fn(verdict)

    def on_clear(self, verdict):
        self.fn(verdict)


def make_policy(policy):
    """A Policy from the `policy=` option: "warn" (or None), "stop", a Policy, or a callable."""
    if policy is None or policy == "warn":
        return WarnPolicy()
    if policy == "stop":
        return StopPolicy()
    if isinstance(policy, Policy):
        return policy
    if callable(policy) and not isinstance(policy, str):
        return CallablePolicy(policy)
    raise ValueError("policy must be 'warn', 'stop', a laggard.policy.Policy or a callable "
                     "fn(verdict), got %r" % (policy,))


def stop_reason(verdict, stop_after_windows):
    """The stop's reason in words, from the verdict that carried the stop step."""
    held = [f for f in verdict.get("confirmed", ())
            if f.get("windows_held", 0) >= stop_after_windows] or list(verdict.get("confirmed", ()))
    if not held:
        return "laggard stop policy: a confirmed straggler held for %d windows" % \
            stop_after_windows
    return "laggard stop policy: straggler %s; confirmed in %d windows or more" % (
        Verdict("straggler", held[0], verdict), stop_after_windows)

