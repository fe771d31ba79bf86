"""The side channel: per-rank samples to the analysis rank, off the training thread.

Each rank runs two background threads. The C++ sample queue's writer thread (it never takes the
GIL) appends every finished sample to the rank's JSONL log, whatever the rest does; this module's
thread takes the samples from the queue after that and takes part in one gather per `rounds_per_gather` sampled steps (a round is a sampled step; every rank
counts the same ones, so every rank makes the same gathers; the last gather at close takes what
is left), in step order, over a dedicated gloo group created at start — never the training
communicator. A rank with nothing to send (its sample was dropped, or a device backend has not
finished timing it yet) sends an empty payload, so the collectives of all ranks stay matched.
The analysis rank feeds what it gathers to the live analysis. With one rank nothing needs to
stay matched: each turn's rounds go to the analysis at once.
"""

import os
import threading
import time

from ._log import logger


# Several ranks gather at most once per this many training steps: at interval 1 a gather per
# step would cost the background thread (and through the GIL, the training thread) a Python
# gather_object each step; reports then come in batches, up to this many steps late.
GATHER_EVERY_STEPS = 10


def rounds_per_gather(interval):
    """Sampled steps per gather for a sampling interval: 1 at interval >= 10."""
    return max(1, -(-GATHER_EVERY_STEPS // max(1, int(interval))))


class LocalExchange:
    """Single process: the analysis sees one rank."""

    world_size = 1

    def exchange(self, payload):
        return [payload]

    def close(self):
        pass


class GlooExchange:
    """gather_object over a dedicated gloo group to `dst` (a global rank)."""

    def __init__(self, group, rank, world_size, dst):
        self.group = group
        self.rank = rank
        self.world_size = world_size
        self.dst = dst

    def exchange(self, payload):
        import torch.distributed as dist

        out = [None] * self.world_size if self.rank == self.dst else None
        dist.gather_object(payload, out, dst=self.dst, group=self.group)
        return out

    def close(self):
        try:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group(self.group)
        except Exception:  # best effort at shutdown
            pass


def new_gloo_group(timeout_s):
    """The dedicated side-channel group: every rank, gloo, its own timeout.

    Collective over the default group's store: every rank must create its Analyzer (at the
    same point of its program), as with any new_group call.
    """
    import datetime

    import torch.distributed as dist

    return dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=timeout_s))


class SideChannel:
    """The background (Python) thread of one rank; the rank log is the queue's writer thread's.

    queue:    the _core.SampleQueue the rank's Recorder pushes into.
    exchange: LocalExchange or GlooExchange.
    analysis: a LiveAnalysis on the analysis rank, else None.
    log_path: rank-<r>.jsonl, or None.
    """

    # After the first sampled step of a batch, the thread waits this long for more before it
    # works (log, gathers, analysis): one wake-up for several sampled steps. Every time this
    # thread takes the GIL the training thread may have to wait for it, so few long turns cost
    # training less than many short ones (the "background thread" column of bench/overhead.py:
    # its GIL-held time per step, from Analyzer.counters()["background_gil_ms"]). Reports come
    # up to this much later; a queue half full or close() ends the wait early.
    BATCH_S = 0.25

    def __init__(self, queue, rank, exchange, analysis, log_path, errors, rounds_per_gather=1):
        self.queue = queue
        self.rank = rank
        self.exchange = exchange
        self.analysis = analysis
        self.log_path = log_path
        self.errors = errors
        self.broken = False
        self.rounds = 0  # rounds (sampled steps) exchanged so far
        self.rounds_per_gather = max(1, int(rounds_per_gather))
        self._due = 0  # rounds marked, not yet exchanged
        self._alone = exchange.world_size == 1  # no other rank to keep in step with
        # This thread's CPU time, and the part spent in calls that release the GIL (take(): the
        # wait, formatting and the rank log; the detector's observe_batch). The rest held the
        # GIL, i.e. could keep the training thread waiting (approximately: converting results
        # to Python objects inside those calls holds it too).
        self.cpu_ns = 0
        self.gil_free_cpu_ns = 0
        self._log_errors = 0
        self._log_lock = threading.Lock()
        self._left_out = 0
        # Samples taken from the queue but never sent (the side channel broke): in the rank log,
        # not in the analysis; counted with the queue's gather_dropped.
        self.unsent = 0
        self.sent = 0  # samples this rank gave to a gather that succeeded
        self.abandoned = False  # close() left this thread behind
        self.abandoned_unsent = 0
        if log_path is not None:
            # Written by the queue's writer thread, in C++ without the GIL: a gather, the
            # analysis or a sink that blocks this thread does not hold up the log.
            queue.set_log(os.fspath(log_path))
        self._buffer = []
        self._thread = threading.Thread(target=self._run, name="laggard-side-channel",
                                        daemon=True)

    def start(self):
        self.queue.start_writer()
        self._thread.start()

    def close(self, timeout_s):
        """Stops after the rounds already marked; True when the thread finished in time.

        The rank log first: the writer logs what is queued (it waits on nothing but the disk).
        Then this thread, for what is left of `timeout_s`; if it is stuck (a hung peer, a sink
        that blocks) it is left behind, and what it has not taken is counted as gather_dropped.
        """
        deadline = time.monotonic() + timeout_s
        self.queue.close()
        if not self.queue.wait_writer(timeout_s):
            self.errors.report("rank log", TimeoutError(
                "the rank log writer did not finish within %.1f s (the disk may hang); %d "
                "samples still queued are not written" % (timeout_s, len(self.queue))))
        self._thread.join(max(0.0, deadline - time.monotonic()))
        done = not self._thread.is_alive()
        if not done:
            self._count_log_errors(self.queue.log_errors)  # this thread may never look again
            self.queue.abandon()
            # What was not sent by now (in the queue, taken but not sent, or in a gather that
            # never ended) is in the rank log only: counted, and this thread sends no more.
            self.abandoned = True
            self.abandoned_unsent = max(0, int(self.queue.pushed) - self.sent)
            self.errors.report("side channel", TimeoutError(
                "the side channel did not finish within %.1f s (a rank may have stopped early, "
                "or a sink blocks); leaving it behind: %d samples of this rank did not reach "
                "the live analysis (they are in the rank log; counters()['gather_dropped'])" %
                (timeout_s, self.abandoned_unsent)))
        else:
            self.exchange.close()
        return done

    # -- background thread ----------------------------------------------------------------

    def _run(self):
        cpu = time.thread_time_ns
        start = cpu()
        try:
            while True:
                c0 = cpu()
                # One call into the extension per turn: the counts come with the samples.
                rounds, items, closed, dropped, log_errors = self.queue.take(2.0, self.BATCH_S)
                self.gil_free_cpu_ns += cpu() - c0
                self._count_log_errors(log_errors)
                if items:
                    self._buffer.extend(items)
                    left_out = self.queue.left_out
                    if left_out != self._left_out:  # a non-finite time that reached the writer
                        self.errors.report("non-finite value", ValueError(
                            "%d non-finite stage time(s) left out of the samples written" %
                            (left_out - self._left_out)), count=left_out - self._left_out)
                        self._left_out = left_out
                self._due += rounds
                self._exchange_due(dropped, closed)
                if self.analysis is not None:
                    self.gil_free_cpu_ns += self.analysis.take_gil_free_cpu_ns()
                self.cpu_ns = cpu() - start
                if closed:
                    break
        except Exception as e:  # never let the thread die silently
            self.errors.report("side channel", e)
        finally:
            if self.analysis is not None:
                try:
                    self.analysis.finish()
                except Exception as e:
                    self.errors.report("live analysis", e)

    def gather_dropped(self):
        """Samples of this rank in its log (or lost with a failed write) that the live analysis
        did not get: the queue's slots for this thread were full, the side channel broke, or
        close() left this thread behind."""
        if self.abandoned:
            return self.abandoned_unsent
        return int(self.queue.gather_dropped) + self.unsent

    def _count_log_errors(self, log_errors):
        """Counts the rank-log writes that failed since the last look (a full disk, a removed
        dir); from this thread, or from close() when this thread is left behind."""
        with self._log_lock:
            if log_errors != self._log_errors:
                self.errors.report("rank log", OSError(self.queue.log_error),
                                   count=log_errors - self._log_errors)
                self._log_errors = log_errors

    def _exchange_due(self, dropped, closed):
        if not self._due:
            return
        if self._alone:  # all at once
            self._gather(self._due, dropped)
            return
        per = self.rounds_per_gather
        while self._due >= per:
            self._gather(per, dropped)
        if closed and self._due:  # every rank has the same remainder (the same sampled steps)
            self._gather(self._due, dropped)

    def _gather(self, rounds, dropped):
        self._due -= rounds
        self.rounds += rounds
        samples, self._buffer = self._buffer, []
        if self.abandoned:
            return  # counted by close()
        if self.broken:
            self.unsent += len(samples)
            return
        payload = (self.rank, samples, dropped + self.unsent, int(self.errors.total))
        try:
            gathered = self.exchange.exchange(payload)
        except Exception as e:
            # A failed collective leaves the group unusable: stop exchanging, keep the logs.
            self.broken = True
            self.unsent += len(samples)
            self.errors.report("side channel", e)
            logger.warning("laggard: the side channel stopped; samples are still written to "
                           "the rank logs when a log dir is set")
            return
        if not self.abandoned:
            self.sent += len(samples)
        if self.analysis is not None and gathered is not None:
            try:
                self.analysis.add_round(gathered)
            except Exception as e:
                self.errors.report("live analysis", e)
