"""Values read from the device without waiting for it (laggard.torch's loss on a GPU).

`.item()` on a CUDA tensor makes the host wait until the device has computed it. Instead, on a
sampled step, DeferredValues.record(name, tensor):

  1. asks the recorder to defer `name` (Recorder::defer: the step's sample will wait for it, a
     bounded while, once its CUDA events have completed) and gets a token;
  2. has the device copy the tensor, as float32 (float64 for a float64 tensor), into a small
     pinned host buffer (non_blocking: queued on the current stream, nothing waits) and record
     a CUDA event after the copy;
  3. keeps (token, slot) in a short ring.

Before each call that lets the recorder emit samples (the Analyzer's begin_step, end_step,
close), resolve_ready() takes every entry whose event has completed (Event.query(): no wait),
reads the pinned buffer (a CPU read) and hands the value to the recorder (Recorder::resolve).
A buffer is reused only after its entry was resolved. With the host clock the recorder defers
nothing (record returns False) and the caller reads the value as before.

Nothing here raises into training: a failure is reported to the Analyzer's error counter (kind
"record <name>"), and the recorder counts the value as lost (deferred_dropped) when its step is
emitted without it. The device side is an object with takes/new_slot/start/ready/read (CudaCopies
here; the unit tests pass a fake with a "ready" flag of its own).
"""

import time
from collections import deque

# Entries in flight at most: more than the recorder's pending steps (max_pending_steps + the
# step being recorded) with room for gradient-accumulation steps that defer a name repeatedly.
RING_SLOTS = 16


class CudaCopies:
    """The CUDA side of a deferred read: a pinned host buffer and an event per slot."""

    __slots__ = ("_torch",)

    def __init__(self, torch):
        self._torch = torch

    @staticmethod
    def takes(t):
        """Whether `t` is read through the device (a CUDA tensor); others are read at once."""
        return t.is_cuda

    @staticmethod
    def new_slot():
        return _CudaSlot()

    def start(self, slot, t):
        """Queues the copy of one-element tensor `t` into the slot's buffer on the current stream
        of its device, and an event after it. Never waits for the device."""
        torch = self._torch
        src = t.detach().reshape(1)
        dtype = torch.float64 if src.dtype == torch.float64 else torch.float32
        buf = slot.buffer
        if buf is None or buf.dtype != dtype:
            buf = slot.buffer = torch.empty(1, dtype=dtype, pin_memory=True)
        if src.dtype != dtype:
            src = src.to(dtype)  # on the device (bf16/fp16 to float32: exact)
        buf.copy_(src, non_blocking=True)
        device = src.device
        if slot.event is None or slot.device != device:
            slot.event = torch.cuda.Event()  # created on its first record, on that device
            slot.device = device
        slot.event.record(torch.cuda.current_stream(device))

    @staticmethod
    def ready(slot):
        return slot.event.query()  # no wait

    @staticmethod
    def read(slot):
        return slot.buffer.item()  # a CPU tensor: no device sync


class _CudaSlot:
    __slots__ = ("buffer", "event", "device")

    def __init__(self):
        self.buffer = None
        self.event = None
        self.device = None


class DeferredValues:
    """The ring of values on their way from the device (see the module doc).

    defer(name) -> token and resolve(token, value) -> bool are the recorder's (the builtins of
    _core.Engine.deferred_calls()); device: CudaCopies or a fake; errors: the Analyzer's error
    counter (report(kind, exception))."""

    def __init__(self, defer, resolve, device, errors, slots=RING_SLOTS):
        self._defer = defer
        self._resolve = resolve
        self.device = device
        self._errors = errors
        self._slots = int(slots)
        self._free = []  # slots whose entry was resolved: free to reuse
        self._made = 0  # slots in use or free (a slot of unknown state is forgotten)
        self.pending = deque()  # (token, slot, name), oldest first
        self.resolved = 0  # values handed to the recorder in time
        self.late = 0  # ... and those whose step had gone without them (counted by the recorder)
        self.ring_full = 0  # values deferred without a slot to copy into (lost, counted there)

    def record(self, name, t):
        """Defers `name` on the recorder's sampled step and starts the copy of `t`. False when
        the recorder defers nothing (host clock, not sampled, no name slot): the caller reads
        the value itself. May raise (the caller reports it); the token is then never resolved
        and the recorder counts the value as lost."""
        token = self._defer(name)
        if not token:
            return False
        slot = self._free.pop() if self._free else None
        if slot is None:
            if self._made >= self._slots:
                # Every slot still waits for the device, far behind: this value is lost, and
                # the recorder counts it when the step goes without it (or drops the step).
                self.ring_full += 1
                return True
            slot = self.device.new_slot()
            self._made += 1
        try:
            self.device.start(slot, t)
        except BaseException:
            self._made -= 1  # a copy may be in flight into it: never reused
            raise
        self.pending.append((token, slot, name))
        return True

    def resolve_ready(self):
        """Hands every value whose copy has completed to the recorder, in order; never waits.
        Never raises (a failure is reported, that value is lost and counted by the recorder)."""
        pending = self.pending
        for _ in range(len(pending)):
            token, slot, name = entry = pending.popleft()
            try:
                if not self.device.ready(slot):
                    pending.append(entry)
                    continue
                value = self.device.read(slot)
            except Exception as e:
                self._made -= 1  # its state is unknown: not reused
                self._errors.report("record " + name, e)
                continue
            self._free.append(slot)
            try:
                if self._resolve(token, value):
                    self.resolved += 1
                else:
                    self.late += 1
            except Exception as e:
                self._errors.report("record " + name, e)

    def drain(self, timeout_s, poll=None):
        """At close: resolve_ready() (and poll(), letting the recorder emit) until nothing is
        pending or `timeout_s` has passed — polling the events, never waiting on the device.
        Returns how many values were left behind (the recorder counts them at its flush)."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.resolve_ready()
            if poll is not None:
                try:
                    poll()
                except Exception as e:
                    self._errors.report("close", e)
            if not self.pending or time.monotonic() >= deadline:
                break
            time.sleep(0.001)
        left = len(self.pending)
        self.pending.clear()
        return left
