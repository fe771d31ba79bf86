"""The side channel: per-rank samples to the analysis rank, off the training thread.

Each rank runs one background thread. It drains the C++ sample queue (the recorder pushes
finished samples there without touching Python), appends them to the rank's JSONL log, and takes
part in exactly one gather per sampled step, in step order, over a dedicated gloo group created
at start — never the training communicator. A rank with nothing to send (its sample was dropped,
or a device backend has not finished timing it yet) sends an empty payload, so the collectives of
all ranks stay matched. The analysis rank feeds what it gathers to the live analysis.
"""

import os
import threading

from ._log import logger


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
    """The background thread of one rank.

    queue:    the _core.SampleQueue the rank's Recorder pushes into.
    exchange: LocalExchange or GlooExchange.
    analysis: a LiveAnalysis on the analysis rank, else None.
    log_path: rank-<r>.jsonl, or None.
    """

    # After the first sampled step of a batch, the thread waits this long for more before it
    # works (log, gathers, analysis): one wake-up for several sampled steps at small intervals.
    # Every time this thread takes the GIL the training thread may have to wait for it, so few
    # long turns cost training less than many short ones (bench/overhead.py).
    BATCH_S = 0.05

    def __init__(self, queue, rank, exchange, analysis, log_path, errors):
        self.queue = queue
        self.rank = rank
        self.exchange = exchange
        self.analysis = analysis
        self.log_path = log_path
        self.errors = errors
        self.broken = False
        self.rounds = 0
        self._log_file = None
        self._log_torn = False  # a failed write may have left half a line behind
        self._buffer = []
        self._thread = threading.Thread(target=self._run, name="laggard-side-channel",
                                        daemon=True)

    def start(self):
        self._thread.start()

    def close(self, timeout_s):
        """Stops after the rounds already marked; True when the thread finished in time."""
        self.queue.close()
        self._thread.join(timeout_s)
        done = not self._thread.is_alive()
        if not done:
            logger.warning("laggard: side channel did not finish within %.1f s (a rank may have "
                           "stopped early); leaving it behind", timeout_s)
        else:
            self.exchange.close()
        return done

    # -- background thread ----------------------------------------------------------------

    def _run(self):
        try:
            while True:
                rounds, items, closed = self.queue.take(0.5, self.BATCH_S)
                if items:
                    self._write_log(items)
                    self._buffer.extend(items)
                for _ in range(rounds):
                    self._round()
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
            if self._log_file is not None:
                try:
                    self._log_file.close()
                except Exception:
                    pass

    def _round(self):
        self.rounds += 1
        samples, self._buffer = self._buffer, []
        if self.broken:
            return
        payload = (self.rank, samples, int(self.queue.dropped), int(self.errors.total))
        try:
            gathered = self.exchange.exchange(payload)
        except Exception as e:
            # A failed collective leaves the group unusable: stop exchanging, keep the logs.
            self.broken = True
            self.errors.report("side channel", e)
            logger.warning("laggard: the side channel stopped; samples are still written to "
                           "the rank logs when a log dir is set")
            return
        if self.analysis is not None and gathered is not None:
            try:
                self.analysis.add_round(gathered)
            except Exception as e:
                self.errors.report("live analysis", e)

    def _write_log(self, items):
        if self.log_path is None:
            return
        try:
            if self._log_file is None:
                os.makedirs(os.path.dirname(self.log_path) or ".", exist_ok=True)
                self._log_file = open(self.log_path, "a", encoding="utf-8")
            text = "".join(line + "\n" for _, line in items)
            if self._log_torn:
                text = "\n" + text  # end the torn line: only it is lost, not the next one
            self._log_file.write(text)
            self._log_file.flush()
            self._log_torn = False
        except Exception as e:  # a full disk, a removed directory: count it, keep going
            self.errors.report("rank log", e)
            self._log_torn = True
            try:
                if self._log_file is not None:
                    self._log_file.close()
            except Exception:
                pass
            self._log_file = None
