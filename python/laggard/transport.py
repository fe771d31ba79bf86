"""The side channel over torch.distributed: laggard's messages between ranks, gloo point to point.

The engine (C++, laggard._core.Engine) gathers samples up a tree — the ranks of a host to their
leader, leaders in a tree to the analysis rank (docs/design.md) — in binary batches with
acknowledgements and timeouts of its own. It needs a transport only to carry byte messages to
and from the few ranks it talks to: its parent and its children. GlooTransport does that with
torch.distributed.send/recv over a gloo group of its own (never the training communicator),
created with gloo's lazy connections (TORCH_GLOO_LAZY_INIT, torch >= 2.7; set for that one
new_group call only): a rank connects only to those ranks, never in a full mesh. Creating it is collective in the way new_group is: every rank creates its
Analyzer at the same point of its program. Each rank then greets its children and its parent
(children first, up the tree), so every link is connected before training goes on: a peer that
hangs later blocks only its own link, never the connection of another.

torch's gloo point-to-point operations complete only in a blocking wait(), so each link has a
thread of its own that waits (with the GIL released) for the next message from that peer, and
one that sends to it: a hung or dead peer blocks only its own link. The engine's background
thread calls send() and receive() below, which only queue and dequeue.

Any object with the same methods (name, rank, world_size, links, send, receive, healthy, fail,
shutdown, and optionally attach) can be given to laggard.Analyzer(transport=...).
"""

import collections
import datetime
import os
import queue
import threading

from ._log import logger

_TAG_HEADER = 7301
_TAG_PAYLOAD = 7302
_TAG_HELLO = 7303
_MAX_QUEUED = 64  # messages waiting to be sent to one peer before send() refuses


def host_groups(world_size, local_world_size=None):
    """The host of each rank as the launcher placed them: consecutive blocks of LOCAL_WORLD_SIZE
    ranks (torchrun, and most launchers, number the ranks of a node together); [] (each rank a
    host of its own) when that is unknown."""
    if local_world_size is None:
        try:
            local_world_size = int(os.environ.get("LOCAL_WORLD_SIZE", "0"))
        except ValueError:
            local_world_size = 0
    if local_world_size <= 1 or world_size % local_world_size:
        return []
    return [r // local_world_size for r in range(world_size)]


class GlooTransport:
    """Messages over a lazily connected gloo group of every rank (torch.distributed must be
    initialized). Thread-safe where the engine needs it: send/receive from its thread, the
    link threads on their own."""

    name = "gloo"

    def __init__(self, rank, world_size, analysis_rank, timeout_s, fan_out=32, hosts=None):
        import torch
        import torch.distributed as dist

        from . import _core

        self._torch = torch
        self._dist = dist
        self.rank = int(rank)
        self.world_size = int(world_size)
        hosts = host_groups(self.world_size) if hosts is None else hosts
        self._links = _core.gather_tree(self.rank, self.world_size, int(analysis_rank),
                                        list(hosts), int(fan_out))
        # gloo connects a new group's ranks in a full mesh at creation unless told to connect
        # each pair at its first message; torch reads the switch when the group is made.
        before = os.environ.get("TORCH_GLOO_LAZY_INIT")
        os.environ["TORCH_GLOO_LAZY_INIT"] = "1"
        try:
            self._group = dist.new_group(backend="gloo",
                                         timeout=datetime.timedelta(seconds=float(timeout_s)))
        finally:
            if before is None:
                os.environ.pop("TORCH_GLOO_LAZY_INIT", None)
            else:
                os.environ["TORCH_GLOO_LAZY_INIT"] = before
        # The receiving threads wait in a blocking recv() for a peer's next message, which no
        # call can cancel (goodbyes at shutdown end them, but a hung peer's never comes). So
        # the group is never destroyed under a waiting thread: it lives as long as the process
        # (one group per Analyzer; its sockets close when the process ends).
        _core._keep_forever(self._group)
        self._lock = threading.Lock()
        self._inbox = collections.deque()
        self._broken = set()
        self._goodbye = set()  # peers this rank said goodbye to
        self._failed = False
        self._closed = False
        self._warn = None
        self._link_broken = None
        self.sent = 0  # messages handed to gloo, for tests and counters
        self._outboxes = {}
        self._threads = []
        parent, children = self._links
        self._peers = ([parent] if parent >= 0 else []) + list(children)
        hello = torch.zeros(1, dtype=torch.int64)
        for child in children:
            dist.recv(hello, src=child, group=self._group, tag=_TAG_HELLO)
        if parent >= 0:
            dist.send(torch.tensor([self.rank], dtype=torch.int64), dst=parent,
                      group=self._group, tag=_TAG_HELLO)
        for peer in self._peers:
            box = queue.Queue(_MAX_QUEUED)
            self._outboxes[peer] = box
            for target, kind in ((self._receive_loop, "recv"), (self._send_loop, "send")):
                t = threading.Thread(target=target, args=(peer, box), daemon=True,
                                     name="laggard-gloo-%s-%d" % (kind, peer))
                self._threads.append(t)
        for t in self._threads:
            t.start()

    # -- the engine's calls (its background thread) -----------------------------------------

    def attach(self, warn, link_broken=None):
        """warn(kind, message): counts and logs a failure (the engine's error counter);
        link_broken(peer, reason): a link broke (the engine decides whether that is a failure:
        not for a peer that had sent its last batch)."""
        self._warn = warn
        self._link_broken = link_broken

    def links(self):
        return self._links

    def send(self, peer, data):
        if self._failed or self._closed or peer in self._broken or peer in self._goodbye:
            return False
        box = self._outboxes.get(peer)
        if box is None:
            return False
        try:
            box.put_nowait(data)
        except queue.Full:
            return False
        return True

    def receive(self):
        out = []
        with self._lock:
            while self._inbox:
                out.append(self._inbox.popleft())
        return out

    def healthy(self):
        return not self._failed

    def fail(self):
        self._failed = True

    def shutdown(self, drain_s=1.0):
        """Sends what is queued (the last acknowledgements, say), then a goodbye on each link,
        and waits up to drain_s for the peers' goodbyes: a link's receiving thread ends on its
        peer's goodbye (it answers one with its own), so none is left waiting in recv() when
        the interpreter exits (a thread woken there then would end the process). A peer that
        hangs keeps its link's thread waiting, as a daemon."""
        import time

        for box in self._outboxes.values():
            try:
                box.put_nowait(None)
            except queue.Full:
                pass
        deadline = time.monotonic() + drain_s
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        self._closed = True

    # -- link threads --------------------------------------------------------------------------

    def _report(self, peer, what, error):
        with self._lock:
            if peer in self._broken:
                return
            self._broken.add(peer)
        message = "the link to rank %d broke (%s: %s: %s); laggard's messages to and from it " \
                  "are dropped" % (peer, what, type(error).__name__, error)
        report = self._link_broken
        if report is not None and not self._closed:
            try:
                report(peer, message)
                return
            except Exception:
                pass
        if not self._closed:
            logger.warning("laggard: %s", message)

    def _receive_loop(self, peer, _box):
        torch, dist = self._torch, self._dist
        header = torch.zeros(1, dtype=torch.int64)
        while not self._closed and not self._failed:
            try:
                dist.recv(header, src=peer, group=self._group, tag=_TAG_HEADER)
                n = int(header[0])
                if n < 0:  # the peer's goodbye: it sends nothing more; answer it, and end
                    self._say_goodbye(peer)
                    return
                payload = torch.empty(max(0, n), dtype=torch.uint8)
                if n > 0:
                    dist.recv(payload, src=peer, group=self._group, tag=_TAG_PAYLOAD)
            except Exception as e:
                if not self._closed:
                    self._report(peer, "receive", e)
                return
            if self._failed:
                return
            with self._lock:
                self._inbox.append((peer, payload.numpy().tobytes()))

    def _say_goodbye(self, peer):
        with self._lock:
            if peer in self._goodbye:
                return
            self._goodbye.add(peer)
        try:
            self._outboxes[peer].put_nowait(None)
        except (KeyError, queue.Full):
            pass

    def _send_loop(self, peer, box):
        torch, dist = self._torch, self._dist
        while True:
            data = box.get()
            if self._failed:
                return
            if data is None:  # goodbye: nothing more goes to this peer
                with self._lock:
                    self._goodbye.add(peer)
                    broken = peer in self._broken
                if not broken:
                    try:
                        dist.send(torch.tensor([-1], dtype=torch.int64), dst=peer,
                                  group=self._group, tag=_TAG_HEADER)
                    except Exception:
                        pass  # the peer is gone already
                return
            try:
                payload = torch.frombuffer(bytearray(data), dtype=torch.uint8)
                dist.send(torch.tensor([len(data)], dtype=torch.int64), dst=peer,
                          group=self._group, tag=_TAG_HEADER)
                if len(data) > 0:
                    dist.send(payload, dst=peer, group=self._group, tag=_TAG_PAYLOAD)
                self.sent += 1
            except Exception as e:
                if not self._closed:
                    self._report(peer, "send", e)
                return
