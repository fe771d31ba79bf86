"""The side channel over torch.distributed: laggard's messages between ranks, gloo point to point.

The engine (C++, laggard._core.Engine) gathers samples up a tree — the ranks of a host to their
leader, leaders in a tree to the analysis rank (docs/design.md) — in binary batches with
acknowledgements and timeouts of its own. It needs a transport only to carry byte messages to
and from the few ranks it talks to: its parent and its children. GlooTransport does that with
gloo send/recv over a gloo process group of its own (never the training communicator), made
with gloo's lazy connections (TORCH_GLOO_LAZY_INIT, set for that one construction only): a rank
connects only to those ranks, never in a full mesh.

Setup never blocks the training thread and never touches the training's own groups. The group
is a ProcessGroupGloo made directly over a PrefixStore of the default store, not with
torch.distributed.new_group: new_group is collective over every rank (a rank that never made an
Analyzer would hold the others forever), and it advances torch's group counter on the ranks that
call it only, so the user's later new_group calls would pair different groups across ranks.
Constructing it with lazy connections talks to nobody. The ranks then meet in the store, under
a prefix of their own for each GlooTransport a process makes (the n-th on one rank pairs with
the n-th on the others), on a thread of the transport's: each rank announces itself and waits,
at most setup_timeout_s from its construction, until every rank has. All or nothing: when every
rank has joined, each starts its links' threads (a link connects at its first message); when one
has not, the first rank whose time is up records "timed out" and the
ranks missing in the store, every rank that joined (and any that joins later, at once) warns
once naming them, and this transport fails: the engine then keeps the rank log and its counters
and sends nothing. close() gives up a setup still under way at once (the others learn it from
the store) instead of waiting for the timeout. Samples the engine hands over while the setup
runs wait in the links' queues: sent once it is done, else dropped and counted by the engine.

torch's gloo point-to-point operations complete only in a blocking wait(), so each link has a
thread of its own that waits (with the GIL released) for the next message from that peer, and
one that sends to it: a hung or dead peer blocks only its own link. The engine's background
thread calls send() and receive() below, which only queue and dequeue; a message that arrives
wakes it (attach's wake), so it sleeps while nothing comes.

A link's sending thread first says hello (an empty message, never handed to the engine), so each
side knows when the link is up. A peer that dies after that breaks the link at once (gloo sees
the socket close). One that dies before can go unnoticed: of each pair gloo lets one side
connect and the other wait, without a time limit, for the connection, so the waiting side never
learns of a peer that died before it connected (killed right after the setup, say, before its
links' threads ran). So at close (the engine's closing()) a link that has not said hello gets
_UNHEARD_AT_CLOSE_S more, then counts as broken: the engine does not wait for its last batch,
which would never come. A live peer says hello within a fraction of a second of the setup's end.

Any object with the same methods (name, rank, world_size, links, send, receive, healthy, fail,
shutdown, and optionally attach and closing) can be given to laggard.Analyzer(transport=...).
One whose attach takes `wake` is looked at only when it calls wake(); any other every
transport_poll_s.
"""

import collections
import datetime
import itertools
import os
import queue
import threading
import time

from ._log import logger

_TAG_FRAME = 7301
_TAG_REST = 7302
# Every message goes as one frame of _FRAME bytes: its length (int64, little-endian; 0 a hello,
# -1 a goodbye) and its first _FRAME - 8 bytes. Only a longer one takes a second operation, the
# rest of it at its exact size. Verdicts, acknowledgements and a rank's batch at the default
# interval fit one frame: one gloo operation, one wake-up of each side's link thread, per message.
_FRAME = 1024
_INLINE = _FRAME - 8
_MAX_QUEUED = 64  # messages waiting to be sent to one peer before send() refuses
_STORE_PREFIX = "laggard/side_channel/"
_SETUP_POLL_S = (0.01, 0.5)  # the setup thread's first and longest pause between store checks
# At close, how long a link that never said hello is still waited for (module doc).
_UNHEARD_AT_CLOSE_S = 1.5

# The n-th GlooTransport of a process meets the n-th of every other rank in the store.
_instances = itertools.count()
_instances_lock = threading.Lock()


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


def rank_ranges(ranks):
    """"0-3, 7, 9-12": sorted ranks as compact ranges (a long list stays readable)."""
    out = []
    ranks = sorted(set(int(r) for r in ranks))
    i = 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        out.append(str(ranks[i]) if i == j else "%d-%d" % (ranks[i], ranks[j]))
        i = j + 1
    return ", ".join(out)


def parse_rank_ranges(text):
    """The ranks of rank_ranges(ranks) (malformed parts are skipped)."""
    out = []
    for part in text.split(","):
        part = part.strip()
        try:
            if "-" in part:
                a, b = part.split("-", 1)
                out.extend(range(int(a), int(b) + 1))
            elif part:
                out.append(int(part))
        except ValueError:
            continue
    return out


class GlooTransport:
    """Messages over a lazily connected gloo group of every rank (torch.distributed must be
    initialized). Construction returns at once; the ranks join in the background (see the
    module doc). Thread-safe where the engine needs it: send/receive from its thread, the link
    threads and the setup thread on their own.

    setup_state: "joining", then "joined", "timed out" (a rank had not joined within
    setup_timeout_s), "closed" (this or another rank closed before every rank joined) or
    "failed" (an error; the engine counts it). missing_ranks: the ranks that had not joined."""

    name = "gloo"

    def __init__(self, rank, world_size, analysis_rank, timeout_s, fan_out=32, hosts=None,
                 setup_timeout_s=30.0, store=None):
        import torch
        import torch.distributed as dist

        from . import _core

        self._torch = torch
        self.rank = int(rank)
        self.world_size = int(world_size)
        self.setup_timeout_s = float(setup_timeout_s)
        hosts = host_groups(self.world_size) if hosts is None else hosts
        self._links = _core.gather_tree(self.rank, self.world_size, int(analysis_rank),
                                        list(hosts), int(fan_out))
        self._created = time.monotonic()
        with _instances_lock:
            self.instance = next(_instances)
        if store is None:
            store = dist.distributed_c10d._get_default_store()
        self._store = dist.PrefixStore("%s%d/" % (_STORE_PREFIX, self.instance), store)
        # gloo connects a new group's ranks in a full mesh at construction (a collective that
        # waits for every rank) unless told to connect each pair at its first message; torch
        # reads the switch when the group is made.
        before = os.environ.get("TORCH_GLOO_LAZY_INIT")
        os.environ["TORCH_GLOO_LAZY_INIT"] = "1"
        try:
            self._group = dist.ProcessGroupGloo(
                dist.PrefixStore("gloo/", self._store), self.rank, self.world_size,
                datetime.timedelta(seconds=float(timeout_s)))
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
        self._heard = set()  # peers whose hello (or any message) arrived: the link is up
        self._closing_at = None  # monotonic time of closing(), or None
        self._joined_at = None
        self._wake = None
        self._failed = False
        self._closed = False
        self._give_up = False  # close() before the setup finished: stop waiting for the others
        self._engine_failed = False
        self._warn = None
        self._link_broken = None
        self.sent = 0  # messages handed to gloo, for tests and counters
        self.setup_state = "joining"
        self.missing_ranks = []
        self.setup_s = None  # seconds from construction to the end of the setup
        parent, children = self._links
        self._peers = ([parent] if parent >= 0 else []) + list(children)
        # Queues from the start: what the engine sends while the setup runs waits here.
        self._outboxes = {peer: queue.Queue(_MAX_QUEUED) for peer in self._peers}
        self._threads = []
        self._setup_thread = threading.Thread(target=self._setup, daemon=True,
                                              name="laggard-gloo-setup")
        self._setup_started = False

    # -- setup: the engine's attach, close() ---------------------------------------------------

    def attach(self, warn, link_broken=None, wake=None):
        """warn(kind, message): counts and logs a failure (the engine's error counter);
        link_broken(peer, reason): a link broke (the engine decides whether that is a failure:
        not for a peer that had sent its last batch); wake(): something arrived, a link broke or
        the setup ended (the engine looks at once; it takes no lock and never waits). Starts
        the setup thread (its warning goes through warn), which start() does for a transport
        used without an engine."""
        self._warn = warn
        self._link_broken = link_broken
        self._wake = wake
        self.start()

    def _poke(self):
        wake = self._wake
        if wake is not None:
            try:
                wake()
            except Exception:
                pass

    def start(self):
        """Starts joining the other ranks in the background (once)."""
        with self._lock:
            if self._setup_started:
                return
            self._setup_started = True
        self._setup_thread.start()

    def give_up_setup(self, wait_s=2.0):
        """close(): a setup still under way ends now (the others learn it from the store and go
        on alone) rather than at its timeout; waits up to wait_s for the setup thread to say so
        (a fraction of a second: it looks at the store about twice a second at most)."""
        if self.setup_state != "joining":
            return
        self._give_up = True
        with self._lock:
            started = self._setup_started
            self._setup_started = True  # never started from now on
        if started:
            self._setup_thread.join(wait_s)
        else:  # never announced: nobody counts on this rank
            self.setup_state = "closed"
            self._failed = True

    # -- the engine's calls (its background thread) -----------------------------------------

    def links(self):
        return self._links

    def send(self, peer, data):
        if (self._failed or self._closed or peer in self._broken or peer in self._goodbye
                or not data):  # an empty message is a link's hello
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
        if self._closing_at is not None:
            self._check_unheard()
        return out

    def closing(self):
        """The engine is closing: a setup still under way is given up now (give_up_setup), and
        a link that has not said hello is waited for _UNHEARD_AT_CLOSE_S more, then reported
        broken (module doc). Returns the seconds until then, or None when nothing is waited
        for (the engine looks again by then)."""
        if self._closing_at is None:
            self._closing_at = time.monotonic()
        self.give_up_setup()
        return self._check_unheard()

    def _check_unheard(self):
        if self.setup_state != "joined" or self._failed:
            return None
        due = max(self._closing_at, self._joined_at or 0.0) + _UNHEARD_AT_CLOSE_S
        now = time.monotonic()
        with self._lock:
            unheard = [p for p in self._peers
                       if p not in self._heard and p not in self._broken and p not in self._goodbye]
        if not unheard:
            return None
        if now < due:
            return due - now
        for peer in unheard:
            self._report(peer, "close", RuntimeError(
                "nothing arrived from it since the setup ended %.1f s ago, not even its hello: "
                "presumed gone before its link connected; not waited for" %
                (now - (self._joined_at or now))))
        return None

    def healthy(self):
        return not self._failed

    def fail(self):
        self._engine_failed = True  # the engine says why; the setup thread adds no warning
        self._failed = True

    def shutdown(self, drain_s=1.0):
        """Sends what is queued (the last acknowledgements, say), then a goodbye on each link,
        and waits up to drain_s for the peers' goodbyes: a link's receiving thread ends on its
        peer's goodbye (it answers one with its own), so none is left waiting in recv() when
        the interpreter exits (a thread woken there then would end the process). A peer that
        hangs keeps its link's thread waiting, as a daemon. A setup still under way is given
        up first (give_up_setup)."""
        self.give_up_setup(wait_s=min(2.0, drain_s + 1.0))
        for box in self._outboxes.values():
            try:
                box.put_nowait(None)
            except queue.Full:
                pass
        deadline = time.monotonic() + drain_s
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        self._closed = True

    # -- setup (its own thread) ----------------------------------------------------------------

    def _setup(self):
        try:
            outcome = self._meet()
        except Exception as e:
            self._fail_setup("failed", [], "the side channel could not be set up (%s: %s); "
                             "this rank carries on alone: its rank log and counters, no live "
                             "cross-rank analysis" % (type(e).__name__, e))
            return
        if outcome == "ok":
            self._connect()
            return
        state, _, ranks = outcome.partition(":")
        missing = parse_rank_ranges(ranks)
        names = rank_ranges(missing)
        plural = "s" if len(missing) != 1 else ""
        alone = ("this rank carries on alone: its rank log and counters, no live cross-rank "
                 "analysis, and it waits on nobody (docs/reference/failure-contract.md)")
        if state == "closed":
            state = "closed"
            text = ("a rank closed its Analyzer before rank%s %s created one, so the side channel "
                    "was never set up; %s" % (plural, names, alone))
        elif self.rank in missing:
            state = "timed out"
            text = ("this rank created its Analyzer after the side channel's setup had timed out "
                    "(rank%s %s had not joined within setup_timeout_s = %g s of the first); %s" %
                    (plural, names, self.setup_timeout_s, alone))
        else:
            state = "timed out"
            text = ("rank%s %s did not create an Analyzer within setup_timeout_s = %g s, so the "
                    "side channel was not set up; %s" % (plural, names, self.setup_timeout_s,
                                                         alone))
        self._fail_setup(state, missing, text)

    def _meet(self):
        """Announces this rank in the store and waits, at most until setup_timeout_s after
        construction, for every rank's announcement or the outcome another rank recorded.
        Returns "ok", "timed out:<ranges>" or "closed:<ranges>" (the ranks missing)."""
        store = self._store
        # The list first, then the count: when the count is complete, so is the list.
        store.append("ranks", "%d," % self.rank)
        if store.add("joined", 1) >= self.world_size:
            return self._decide("ok")
        deadline = self._created + self.setup_timeout_s
        pause = _SETUP_POLL_S[0]
        # Short, non-blocking looks: a blocking store.wait would hold the store client's lock,
        # which the training's own store operations share, and a timed out one logs c10d
        # warnings; a gloo operation timed out closes its pair.
        while not store.check(["outcome"]):
            now = time.monotonic()
            if self._give_up or self._failed:
                return self._decide("closed")
            # Every rank joined, but the last one has not recorded it (killed right after it
            # joined, say): "ok", as it would have recorded.
            if store.add("joined", 0) >= self.world_size:
                return self._decide("ok")
            if now >= deadline:
                return self._decide("timed out")
            time.sleep(min(pause, deadline - now))
            pause = min(pause * 1.5, _SETUP_POLL_S[1])
        return _text(store.get("outcome"))

    def _decide(self, outcome):
        """Records the outcome unless a rank did first (compare_set: the first one wins, so
        every rank reads the same); returns the one recorded."""
        store = self._store
        if outcome != "ok":
            joined = set(parse_rank_ranges(_text(store.get("ranks"))))
            missing = [r for r in range(self.world_size) if r not in joined]
            if not missing:  # the last rank joined meanwhile: it records "ok"
                outcome = "ok"
            else:
                outcome = "%s:%s" % (outcome, rank_ranges(missing))
        return _text(store.compare_set("outcome", "", outcome))

    def _fail_setup(self, state, missing, text):
        self.missing_ranks = list(missing)
        self.setup_state = state
        self.setup_s = time.monotonic() - self._created
        self._failed = True  # the engine stops sending here and waits on nobody at close
        self._poke()
        if self._engine_failed:
            return
        warn = self._warn
        try:
            if warn is not None:
                # The engine's counter: counted (report_errors) and logged on the "laggard"
                # logger. A kind of its own: the engine logs one warning per kind a minute, and
                # samples dropped while the setup ran (a long one) may have used "side channel".
                warn("side channel setup", text)
                return
        except Exception:
            pass
        logger.warning("laggard: rank %d: side channel setup: %s", self.rank, text)

    def _connect(self):
        """Every rank joined: starts the links' threads. Each link connects at its first
        message, on its own threads: a peer that hangs from here on (even before its first
        message) holds up its own link only, never the setup of another."""
        self._joined_at = time.monotonic()
        self.setup_s = self._joined_at - self._created
        self.setup_state = "joined"
        for peer in self._peers:
            if peer in self._broken:
                continue
            box = self._outboxes[peer]
            for target, kind in ((self._receive_loop, "recv"), (self._send_loop, "send")):
                t = threading.Thread(target=target, args=(peer, box), daemon=True,
                                     name="laggard-gloo-%s-%d" % (kind, peer))
                self._threads.append(t)
                t.start()

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
                self._poke()
                return
            except Exception:
                pass
        if not self._closed:
            logger.warning("laggard: %s", message)

    def _receive_loop(self, peer, _box):
        torch, group = self._torch, self._group
        frame = torch.empty(_FRAME, dtype=torch.uint8)
        while not self._closed and not self._failed:
            try:
                group.recv([frame], peer, _TAG_FRAME).wait()
                head = frame.numpy()
                n = int.from_bytes(head[:8].tobytes(), "little", signed=True)
                if n < 0:  # the peer's goodbye: it sends nothing more; answer it, and end
                    self._say_goodbye(peer)
                    return
                if n == 0:  # its hello: the link is up
                    with self._lock:
                        self._heard.add(peer)
                    continue
                data = head[8:8 + min(n, _INLINE)].tobytes()
                if n > _INLINE:
                    rest = torch.empty(n - _INLINE, dtype=torch.uint8)
                    group.recv([rest], peer, _TAG_REST).wait()
                    data += rest.numpy().tobytes()
            except Exception as e:
                if not self._closed:
                    self._report(peer, "receive", e)
                return
            if self._failed:
                return
            with self._lock:
                self._heard.add(peer)
                if peer in self._broken:  # given up on at close: what it says is not wanted
                    continue
                self._inbox.append((peer, data))
            self._poke()

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
        torch, group = self._torch, self._group

        def frame(n, data=b""):
            buf = bytearray(_FRAME)
            buf[:8] = n.to_bytes(8, "little", signed=True)
            buf[8:8 + len(data)] = data
            return torch.frombuffer(buf, dtype=torch.uint8)

        try:  # hello: connects the link now, and tells the peer it is up
            group.send([frame(0)], peer, _TAG_FRAME).wait()
        except Exception as e:
            if not self._closed:
                self._report(peer, "send", e)
            return
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
                        group.send([frame(-1)], peer, _TAG_FRAME).wait()
                    except Exception:
                        pass  # the peer is gone already
                return
            try:
                group.send([frame(len(data), data[:_INLINE])], peer, _TAG_FRAME).wait()
                if len(data) > _INLINE:
                    rest = torch.frombuffer(bytearray(data[_INLINE:]), dtype=torch.uint8)
                    group.send([rest], peer, _TAG_REST).wait()
                self.sent += 1
            except Exception as e:
                if not self._closed:
                    self._report(peer, "send", e)
                return


def _text(value):
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
