"""Automatic stages for PyTorch: laggard.torch.instrument(analyzer, model=..., optimizer=...).

Stages (all measured on sampled steps only, by the C++ recorder: host clock, or CUDA events on
the current stream; nothing here calls a collective or synchronizes the device; with the host
clock, the loss's .item() on sampled steps does, see Values below):

  forward        the top model's forward() (on sampled steps the instance's forward is a
                 wrapper: torch keeps its hook-free path; forward hooks for a ScriptModule).
  backward       this rank's own backward compute: from the start of the model's backward to
                 the end of the autograd graph's work (a final callback of the autograd engine,
                 queued once the backward is under way, which runs once every gradient has been
                 computed and, for DDP, handed to the all-reduce — before DDP waits for it;
                 where the backward is timed from its call, below, and the model is not DDP,
                 the return of that call, which comes right after the final callbacks).
                 The start, at every interval and with or without DDP: the call of
                 torch.autograd.backward (what Tensor.backward calls) whose graph reaches the
                 model, so the stage includes the loss's backward and any autograd work
                 between the loss and the model output. A hook on one parameter confirms that
                 the call reaches the model (without DDP only for the first 3 calls, then that
                 parameter's gradient; under DDP where hooks are attached on sampled steps
                 only (interval > 1), a gradient hook on each sampled step's output tensor,
                 which also queues the end), and a call that never reaches it is dropped.
                 Where the call does not work (a backward started some other way, a
                 parameter that never gets a gradient), the start is the moment the gradient
                 reaches the model output (that output hook alone; see _install).
  communication  DistributedDataParallel only: from that moment until DDP has waited for its
                 gradient all-reduce (a second final callback, queued by the first, so it runs
                 after DDP's own finalize). This is the rank's *wait for its peers* (plus the
                 transfer not hidden behind compute), measured apart from its own compute: a
                 slow backward on one rank shows as that rank's long backward, and as long
                 communication — evidence, never a verdict — on the ranks waiting for it.
  optimizer      optimizer.step (step hooks where torch has them and runs them once per step,
                 else a wrapper).
  attention, moe with module stages on: forward pre/post hooks on modules whose class names
                 match the patterns (outermost match only).

Values: on sampled steps, the loss (values["loss"]): the one-element floating tensor that the
model's torch.autograd.backward call starts from (loss.backward()); where that call is not
wrapped (FSDP2, hooks only), the forward output's `loss` (an attribute, as Hugging Face model
outputs have, or a dict key), taken on sampled steps only, before the backward is started
(record_loss=False: never). With CUDA event timing a CUDA loss is not read with `.item()`
(which would wait for the device): it is copied into a pinned host buffer without waiting, a
CUDA event recorded after the copy, and the value attached to the step's sample once that event
has completed (laggard._deferred; the sample waits for it a bounded while after its own events,
else goes without it, counted in counters()["deferred_dropped"]). A CPU loss, or any loss under
the host clock, is read with `.item()` (on a GPU, a sync, as a training loop's own).

Batches: timed_batches(loader, analyzer) times each fetch for the resource host_data_wait_ms.

Works with torch 1.13 and 2.x; uses no API 2.x removed.
"""

import re
import time
from collections import OrderedDict
from threading import get_ident

from ._log import logger

_LAZY_HOOKS = True  # attach on sampled steps only (False: always; bench/overhead.py --always-attached)
_FORWARD_WRAPPER = True  # False: forward hooks instead (bench/overhead.py --forward-hooks)
_BACKWARD_CALL = True  # False: the output's gradient hook alone marks the start, without the
#                        torch.autograd.backward wrapper (bench/overhead.py --output-hook)
_MISSES_BEFORE_OUTPUT_HOOK = 3  # backward calls in a row that never reach the model
_ANCHOR_HOOK_BACKWARDS = 3  # without DDP: backward calls the anchor's hook confirms before the
#                             gradient's version takes its place

DEFAULT_MODULE_STAGE_PATTERNS = {
    "attention": r"attention|attn",
    "moe": r"moe|mixture_?of_?experts",
}


class Instrumentation:
    """What instrument() installed; remove() takes it all out again.

    Hooks are attached only for the duration of a sampled step (begin_step of a sampled step
    attaches them, its end_step detaches them): on the other steps the model runs without
    hooks, so torch takes its fast path and laggard costs nothing there. With interval 1 every
    step is sampled and the hooks stay attached. `hooks` holds the hook functions by name.

    Attaching is one call of a _core.HookSwitch, which stores the hooks straight into torch's
    hook dicts (the dict and key of each come from registering it once through torch's public
    call at install). Where that is not possible — torch 1.13's optimizer has no step hooks, so
    its step is wrapped; a hook dict this does not know — a Python fallback attaches and
    detaches the hook at every sampled step."""

    def __init__(self):
        self._undo = []
        self._pending = []  # (obj, register, attr, hook name), made into the switch at install
        self._direct = []  # (dict, key, value, bind(switch, index)): switch entries as they are
        self._switch = None  # _core.HookSwitch of the hooks whose dicts are known
        self._fallbacks = []  # (attach, detach) Python functions; each returns its failures
        self._tensor_hooks = []  # (tensor, hook name): registered for good at install
        self._tensor_handles = {}  # hook name -> (tensor, handle) of those, once registered
        self.hooks = {}
        self.stages = []
        self.notes = []

    def _on_calls(self):
        """What attaches everything, and what detaches it: lists of calls without arguments,
        each returning a true value when something failed."""
        on = [self._switch.on] if self._switch is not None else []
        off = [self._switch.off] if self._switch is not None else []
        on += [attach for attach, _ in self._fallbacks]
        off += [detach for _, detach in self._fallbacks]
        return on, off

    def _attach(self):
        return sum(int(bool(call())) for call in self._on_calls()[0])

    def _detach(self):
        failed = 0
        for call in self._on_calls()[1]:
            try:
                failed += int(bool(call()))
            except Exception:
                failed += 1
        return failed

    def remove(self):
        self._detach()
        for undo in self._undo:
            try:
                undo()
            except Exception:
                pass
        self._undo = []
        self._fallbacks = []
        self._switch = None
        self.stages = []  # nothing is timed any more


class _HookSlot:
    """Fallback for a hook whose dict is unknown: registered through torch's public call at
    every attach, removed through its handle at detach."""

    __slots__ = ("_register", "_hooks", "_name", "_handle")

    def __init__(self, register, hooks, name):
        self._register = register  # e.g. model.register_forward_hook
        self._hooks = hooks  # Instrumentation.hooks
        self._name = name
        self._handle = None

    def attach(self):
        if self._handle is None:
            self._handle = self._register(self._hooks[self._name])
        return 0

    def detach(self):
        handle, self._handle = self._handle, None
        if handle is not None:
            handle.remove()
        return 0


def _switch_entry(obj, register, attr, fn):
    """(dict, key, fn) for a HookSwitch when torch's register call puts `fn` into the dict
    getattr(obj, attr) (it has from 1.13 to 2.x: _forward_pre_hooks, _forward_hooks,
    _optimizer_step_pre_hooks, _optimizer_step_post_hooks); else None. Registers and removes
    the hook once, for its key. On sampled steps the hook then goes back in at the end of its
    dict, so it runs after hooks registered later than instrument(). (torch makes these dicts
    once per module or optimizer and never replaces them.)"""
    handle = register(fn)
    try:
        ref = getattr(handle, "hooks_dict_ref", None)
        key = getattr(handle, "id", None)
        hooks = getattr(obj, attr, None)
        if callable(ref) and key is not None and hooks is not None and ref() is hooks:
            return (hooks, key, fn)
        return None
    finally:
        handle.remove()


def _build_switch(inst, core):
    for tensor, name in inst._tensor_hooks:
        handle = tensor.register_hook(inst.hooks[name])
        inst._tensor_handles[name] = (tensor, handle)
        inst._undo.append(lambda tensor=tensor, handle=handle: _remove_tensor_hook(tensor, handle))
    inst._tensor_hooks = []
    entries = []
    for obj, register, attr, name in inst._pending:
        entry = _switch_entry(obj, register, attr, inst.hooks[name])
        if entry is not None:
            entries.append(entry)
        else:
            slot = _HookSlot(register, inst.hooks, name)
            inst._fallbacks.append((slot.attach, slot.detach))
    inst._pending = []
    binds = []
    for d, key, value, bind in inst._direct:
        binds.append((bind, len(entries)))
        entries.append((d, key, value))
    inst._direct = []
    if entries:
        inst._switch = core.HookSwitch(entries)
        for bind, index in binds:
            bind(inst._switch, index)


def _nothing(*args):
    return None


def _is_ddp(model):
    try:
        from torch.nn.parallel import DistributedDataParallel

        return isinstance(model, DistributedDataParallel)
    except Exception:
        return False


def _is_fsdp2(model):
    """Whether the model or a submodule is sharded by FSDP2 (torch.distributed.fsdp.fully_shard,
    torch >= 2.6)."""
    try:
        from torch.distributed.fsdp import FSDPModule
    except Exception:
        return False
    try:
        return any(isinstance(m, FSDPModule) for m in model.modules())
    except Exception:
        return False


def _tensors(obj, out, depth=0):
    """Tensors in a forward output (tensor, tuple/list, dict, nested a little)."""
    import torch

    if isinstance(obj, torch.Tensor):
        out.append(obj)
    elif depth < 3 and isinstance(obj, (list, tuple)):
        for x in obj:
            _tensors(x, out, depth + 1)
    elif depth < 3 and isinstance(obj, dict):
        for x in obj.values():
            _tensors(x, out, depth + 1)
    return out


_HOOK_KEY = "laggard.backward"  # our key in a tensor's hook dict (torch's own keys are ints)


def _tensor_hook_registrar(torch, fn):
    """A function that adds `fn` as a gradient hook of a tensor: on a step's model output, run
    when that output's gradient arrives, i.e. when the model's backward starts.

    It does what Tensor.register_hook does, minus the RemovableHandle (which nothing here would
    use: the hook lives and dies with the output tensor of one step). Creating that handle is
    about half of register_hook's cost on a training thread whose caches the step has just
    evicted (bench/cold_calls.py: "Tensor.register_hook" against "hook registrar"). It relies
    on two attributes torch has kept from 0.4 to 2.x (Tensor._backward_hooks,
    grad_fn._register_hook_dict); where they are missing, or for a tensor subclass or under a
    __torch_function__ mode, it calls register_hook."""
    tensor_type = torch.Tensor
    has_torch_function = getattr(torch._C, "_has_torch_function_unary", None)
    fast = has_torch_function is not None and hasattr(tensor_type, "_backward_hooks")

    def public(t):
        t.register_hook(fn)

    def add_hook(t):
        if type(t) is not tensor_type or has_torch_function(t):
            return public(t)
        hooks = t._backward_hooks
        if hooks is None:
            grad_fn = t.grad_fn
            if grad_fn is None or not hasattr(grad_fn, "_register_hook_dict"):
                return public(t)  # a leaf, or a node type without the dict (never seen)
            t._backward_hooks = hooks = OrderedDict()
            grad_fn._register_hook_dict(t)
        hooks[_HOOK_KEY] = fn
        return None

    return add_hook if fast else public


def instrument(analyzer, model=None, optimizer=None, *, forward=True, backward=True,
               optimizer_stage=True, module_stages=None, module_stage_patterns=None,
               record_loss=True, _wrap=None):
    """Times forward, backward (and, for DDP, communication), optimizer and optionally module
    stages without hand-written sections. Returns an Instrumentation (call .remove() to undo).

    record_loss: on sampled steps, the loss goes into the sample's values ("loss"; see the module
    doc: with CUDA event timing a CUDA loss is copied without a device sync and attached once it
    has arrived; under the host clock `.item()` syncs a GPU, once per sampled step).

    On a disabled analyzer nothing is installed. Call it once per model and optimizer, before
    training. Never raises into training: a failure to install a hook is logged and skipped.
    (_wrap(name, fn) -> fn: replaces each hook function before it is installed;
    bench/overhead.py times them with it.)
    """
    inst = Instrumentation()
    if analyzer is None or not analyzer.enabled:
        return inst
    try:
        from . import _core

        always = analyzer.options.get("interval") == 1 or not _LAZY_HOOKS
        _install(inst, analyzer, model, optimizer, forward, backward, optimizer_stage,
                 module_stages, module_stage_patterns, always, record_loss)
        if _wrap is not None:
            for name in list(inst.hooks):  # in place: the optimizer wrapper reads this dict
                inst.hooks[name] = _wrap(name, inst.hooks[name])
        _build_switch(inst, _core)
        analyzer._on_close.append(inst.remove)  # Analyzer.close() takes it all out
    except Exception as e:
        analyzer._errors.report("instrument", e)
        inst.remove()
        return inst

    def attach_now():
        try:
            if inst._attach():
                raise RuntimeError("some hooks could not be attached")
        except Exception as e:
            analyzer._errors.report("instrument", e)

    if always:
        # Every step is sampled: attaching and detaching each step would only add work.
        attach_now()
        return inst
    # The analyzer calls these directly at the start and end of each sampled step (with the
    # switch alone, i.e. from torch 2.0 on: one builtin call each, no Python frame).
    on, off = inst._on_calls()
    analyzer._on_sampled_step.extend(on)
    analyzer._on_step_end.extend(off)

    def undo():
        for hooks, fns in ((analyzer._on_sampled_step, on), (analyzer._on_step_end, off)):
            for fn in fns:
                if fn in hooks:
                    hooks.remove(fn)

    inst._undo.append(undo)
    if analyzer.sampled:  # instrumented inside a sampled step: from now on
        attach_now()
    return inst


def _loss_recorder(torch, an, device=None):
    """record(t): the loss into the sampled step's values when `t` is a one-element floating
    tensor (or a sequence of one); anything else is left alone. A CUDA tensor under a device
    backend is copied to the host without waiting and attached once it has arrived
    (laggard._deferred: no device sync); a CPU tensor, or any tensor under the host clock, is
    read with .item() at once. `device`: the copying side (default _deferred.CudaCopies; tests
    pass a fake, whose takes(t) says which tensors it copies)."""
    tensor_type = torch.Tensor
    errors = an._errors
    takes = device.takes if device is not None else _is_cuda

    def record(t):
        if not an._sampled:  # (its callers call it on sampled steps only)
            return
        try:
            if isinstance(t, (list, tuple)):
                if len(t) != 1:
                    return
                t = t[0]
            if isinstance(t, tensor_type) and t.numel() == 1 and t.is_floating_point():
                if takes(t):
                    deferred = an._deferred
                    if deferred is None:
                        if device is None:
                            from ._deferred import CudaCopies

                            deferred = an._defer_values(CudaCopies(torch))
                        else:
                            deferred = an._defer_values(device)
                    if deferred is not None and deferred.record("loss", t):
                        return
                an.record("loss", t.detach().item())
        except Exception as e:
            errors.report("record loss", e)

    return record


def _is_cuda(t):
    return t.is_cuda


def _output_loss(output):
    """The forward output's loss: its `loss` attribute (Hugging Face's ModelOutput) or key."""
    if isinstance(output, dict):
        return output.get("loss")
    return getattr(output, "loss", None)


def _install(inst, an, model, optimizer, forward, backward, optimizer_stage, module_stages,
             module_stage_patterns, always_attached, record_loss=True):
    import torch

    rec = an._recorder

    if model is not None and (forward or backward):
        ddp = _is_ddp(model)
        fwd_id = rec.stage("forward") if forward else -1
        bwd_id = rec.stage("backward") if backward else -1
        comm_id = rec.stage("communication", "communication") if (backward and ddp) else -1
        # Recorder marks: builtins that begin/end one stage (no-ops unless the step is sampled)
        # and ignore their arguments, so a mark can be a hook itself.
        fwd_begin, fwd_end = rec.marks(fwd_id)
        bwd_begin, bwd_end = rec.marks(bwd_id)
        bwd_cancel = rec.cancel_mark(bwd_id)
        comm_begin, comm_end = rec.marks(comm_id)
        queue_callback = torch.autograd.Variable._execution_engine.queue_callback
        is_grad_enabled = torch.is_grad_enabled
        tensor_type = torch.Tensor
        # How the start of the backward is found (see the module's docstring). The call of
        # torch.autograd.backward begins the stage, and a hook on one parameter (the anchor)
        # confirms it; without DDP that hook goes after 3 confirmations, and the anchor's
        # gradient confirms instead (_BackwardCall). The output's gradient hook is registered
        # anew on each sampled step's output, and that costs more than the rest of a sampled
        # step's hooks together (bench/cold_calls.py: the output's grad_fn object alone is
        # 6-8 µs right after a step). Under DDP the anchor's hook would have to stay (it queues
        # the end of the compute), so where hooks are attached on sampled steps only, the
        # output's hook takes its place there (cheaper than a Python hook torch calls in every
        # backward): the call of torch.autograd.backward still begins the stage — so that it
        # includes the loss's backward and any autograd work between the loss and the model
        # output — and the output's hook confirms the call and queues the end of the compute
        # (output_confirms).
        # FSDP2 (fully_shard) gives its sharded parameters their gradients itself, after its
        # reduce-scatter and outside autograd: an anchor's gradient hook would never run, so the
        # output's gradient marks the start from the first step (not after 3 missed calls).
        fsdp2 = backward and _is_fsdp2(model)
        anchor = _anchor_parameter(model) if (
            backward and _BACKWARD_CALL and (always_attached or not ddp) and not fsdp2) else None
        output_confirms = bool(backward and _BACKWARD_CALL and ddp and not always_attached)
        # in_backward: between the start of the model's backward and its final callback;
        # called: a torch.autograd.backward call began the stage, not yet confirmed;
        # misses: such calls in a row that never reached the anchor.
        # thread: the training thread's id (instrument() is called there): a backward called
        # from another thread passes straight through the wrapper (the recorder belongs to one
        # thread).
        # confirmed: calls the anchor's hook confirmed; hooked: that hook is still in place
        # (without DDP it is taken out after _ANCHOR_HOOK_BACKWARDS of them, see _BackwardCall).
        # output_hook: the output's gradient hook begins the stage itself (no call wrapper, or
        # the call did not work); output_confirms: it confirms a call that began the stage.
        state = {"in_backward": False, "called": False, "misses": 0, "confirmed": 0,
                 "hooked": True, "output_hook": anchor is None and not output_confirms,
                 "thread": get_ident()}

        # These run inside the user's forward and backward: nothing may raise out of them (a
        # failure is counted and warned about, as everywhere in laggard).
        errors = an._errors
        loss = _loss_recorder(torch, an) if record_loss else None
        # Without the backward call's wrapper (below), the forward output's loss is recorded.
        output_loss = loss if (loss is not None and backward and not (
            anchor is not None or output_confirms)) else None

        def compute_done():
            # Every gradient of this backward is computed (and, under DDP, handed to the
            # all-reduce); DDP's finalize — the wait — was queued after us and runs next.
            try:
                bwd_end()
                state["in_backward"] = False
                if comm_id >= 0:
                    comm_begin()
                    queue_callback(comm_end)
            except Exception as e:
                errors.report("backward hook", e)

        def on_output_grad(grad):
            try:
                if state["called"]:  # DDP, hooks on sampled steps: the call that began the
                    # stage reaches the model; its compute ends at the engine's final callback
                    state["called"] = False
                    state["in_backward"] = True
                    state["misses"] = 0
                    state["confirmed"] += 1
                    queue_callback(compute_done)
                elif an._sampled and not state["in_backward"]:
                    # the output hook alone, or (DDP) a backward begun without
                    # torch.autograd.backward: timed from here
                    state["in_backward"] = True
                    bwd_begin()
                    queue_callback(compute_done)
            except Exception as e:
                errors.report("backward hook", e)
            return None

        hook_tensor = _tensor_hook_registrar(torch, on_output_grad)

        def forward_done(output):
            if not an._sampled:
                return None
            if output_loss is not None:
                output_loss(_output_loss(output))
            try:
                if state["hooked"] and anchor is not None:
                    # The output's hook has taken over (use_output_hook): the anchor's hook, which
                    # torch would go on calling in every backward, goes (not from inside the
                    # backward, where torch is going through the hook dict).
                    drop_anchor_hook()
                fwd_end()  # without a forward stage (id -1) a no-op
                # A new output: its backward is still to come (also after a backward that never
                # finished, e.g. one that raised).
                state["in_backward"] = False
                if bwd_id >= 0 and is_grad_enabled():
                    if type(output) is tensor_type:  # the common case, without a list
                        if output.requires_grad:
                            hook_tensor(output)
                        return None
                    for t in _tensors(output, []):
                        if t.requires_grad:
                            hook_tensor(t)
            except Exception as e:
                errors.report("forward hook", e)
            return None

        def use_output_hook(why):
            # From the next sampled step on, the output's gradient hook marks the start.
            if not state["output_hook"]:
                state["output_hook"] = True
                inst.hooks["forward"] = forward_done
                logger.info("laggard: the backward stage now starts at the model output's "
                            "gradient (%s)", why)

        def on_anchor_grad(grad):
            try:
                if state["called"]:  # the backward begun at its call reaches the model
                    state["called"] = False
                    state["in_backward"] = True
                    state["misses"] = 0
                    state["confirmed"] += 1
                    if comm_id >= 0:  # DDP: compute ends where its wait for the all-reduce begins
                        queue_callback(compute_done)
                    # else the stage ends when the call returns (backward_returned): the same
                    # moment (nothing runs between the engine's final callbacks and the return),
                    # without a callback for the engine to call on every step
                elif an._sampled and not state["in_backward"]:
                    # A backward that did not start with torch.autograd.backward (the engine
                    # called from elsewhere): its start is unknown, so it is not timed.
                    use_output_hook("a backward started without torch.autograd.backward")
            except Exception as e:
                errors.report("backward hook", e)
            return None

        def missed():
            # A torch.autograd.backward call that never reached the anchor (or, under DDP with
            # hooks on sampled steps, the model output): not the model's.
            state["misses"] += 1
            if state["misses"] >= _MISSES_BEFORE_OUTPUT_HOOK:
                use_output_hook("%d backward calls in a row did not reach the model's %s" % (
                    state["misses"], "parameter " + anchor[0] if anchor is not None
                    else "output"))

        def drop_anchor_hook():
            # Without DDP, once the anchor's hook has confirmed a few backward calls, whether a
            # call reached the model is read from the anchor's gradient after it (_BackwardCall):
            # cheaper than a Python hook that torch calls inside every backward.
            state["hooked"] = False
            registered = inst._tensor_handles.pop("backward_anchor", None)
            if registered is not None:
                _remove_tensor_hook(*registered)

        def backward_returned():
            # After a torch.autograd.backward call that began the stage while the anchor's hook
            # is in place (sampled steps only).
            try:
                if state["called"]:  # it never reached the anchor: not the model's backward
                    state["called"] = False
                    bwd_cancel()
                    missed()
                elif state["in_backward"]:  # without DDP the end; with it, the backward raised
                    state["in_backward"] = False  # before its final callback
                    bwd_end()
                if comm_id < 0 and state["confirmed"] >= _ANCHOR_HOOK_BACKWARDS:
                    drop_anchor_hook()
            except Exception as e:
                errors.report("backward hook", e)

        if fsdp2:
            inst.notes.append("backward: from the model output's gradient (FSDP2)")
        if anchor is not None or output_confirms:
            inst.hooks["backward_call"] = bwd_begin
            inst.hooks["backward_return"] = backward_returned
            inst.hooks["backward_end"] = bwd_end
            inst.hooks["backward_cancel"] = bwd_cancel
            if anchor is not None:
                inst.hooks["backward_anchor"] = on_anchor_grad
                inst._tensor_hooks.append((anchor[1], "backward_anchor"))  # registered at install
            inst._direct.append(_BackwardCall(torch.autograd, "backward", inst.hooks,
                                              torch.autograd.backward, an, state,
                                              anchor[1] if anchor is not None else None,
                                              missed, errors, loss).entry())
            inst.notes.append(
                "backward: from torch.autograd.backward (anchor parameter %s)" % anchor[0]
                if anchor is not None else
                "backward: from torch.autograd.backward (confirmed by the model output's "
                "gradient)")

        # the forward mark itself (a builtin); without a forward stage, nothing
        inst.hooks["forward_pre"] = fwd_begin if forward else _nothing
        # with the output hook (or the output's loss to record), forward_done; else the forward
        # mark alone (a builtin)
        inst.hooks["forward"] = forward_done if (state["output_hook"] or output_confirms or
                                                 output_loss is not None) \
            else (fwd_end if forward else _nothing)
        if _FORWARD_WRAPPER and not isinstance(model, torch.jit.ScriptModule) \
                and hasattr(model, "__dict__") and callable(getattr(type(model), "forward", None)):
            # The usual case: the model's forward is wrapped on sampled steps (_ForwardCall).
            inst._direct.append(_ForwardCall(model, "forward", inst.hooks).entry())
        else:  # forward hooks, on sampled steps
            inst.hooks["forward_hook"] = lambda module, inputs, output: \
                inst.hooks["forward"](output)
            inst._pending += [
                (model, model.register_forward_pre_hook, "_forward_pre_hooks", "forward_pre"),
                (model, model.register_forward_hook, "_forward_hooks", "forward_hook")]
        inst.stages += [s for s, i in (("forward", fwd_id), ("backward", bwd_id),
                                       ("communication", comm_id)) if i >= 0]

    if optimizer is not None and optimizer_stage:
        _instrument_optimizer(inst, an, optimizer)

    if module_stages is None:
        module_stages = an.module_stages
    if model is not None and module_stages:
        patterns = module_stage_patterns or an.module_stage_patterns or \
            DEFAULT_MODULE_STAGE_PATTERNS
        _instrument_modules(inst, an, model, patterns)


def _instrument_optimizer(inst, an, optimizer):
    rec = an._recorder
    # The step hooks are the optimizer stage's marks (see _install).
    inst.hooks["optimizer_pre"], inst.hooks["optimizer_post"] = rec.marks(rec.stage("optimizer"))
    if hasattr(optimizer, "register_step_pre_hook") and \
            hasattr(optimizer, "register_step_post_hook") and \
            _step_hooks_run_once(optimizer):  # torch >= 2.0
        inst._pending += [
            (optimizer, optimizer.register_step_pre_hook, "_optimizer_step_pre_hooks",
             "optimizer_pre"),
            (optimizer, optimizer.register_step_post_hook, "_optimizer_step_post_hooks",
             "optimizer_post")]
    else:  # wrap the instance's step, keeping its attributes (lr_scheduler's marker)
        inst._direct.append(_OptimizerStep(optimizer, "step", inst.hooks).entry())
    inst.stages.append("optimizer")


def _step_hooks_run_once(optimizer):
    """Whether torch runs the optimizer's step hooks once per step. torch wraps the step of each
    optimizer class it instantiates in a function that runs them, so an optimizer whose class's
    step calls a base class's own step (class SlowSGD(SGD) ... super().step()) runs them once
    per level as soon as the base class has been instantiated too, now or later: nested, the
    inner pair would end the stage early. Such an optimizer gets the step wrapper instead."""
    import torch

    steps = [c for c in type(optimizer).__mro__
             if "step" in vars(c) and c is not torch.optim.Optimizer]
    return len(steps) <= 1


class _MethodCall:
    """A Python callable that a HookSwitch puts into obj.__dict__[name] (torch.autograd's
    backward: _BackwardCall) on sampled steps, in place of the method: instance attributes come
    first, so obj.name() calls it. (The model's forward and a torch 1.13 optimizer's step get a
    _core.MethodWrapper instead, which does the same without a Python frame: _WrappedMethod.)

    It calls whatever obj.__dict__[name] held before the switch put it there (a wrapper of the
    user's, also one made after instrument(): the switch remembers it), else `bound` (for
    torch.autograd, the module's function). Made once. Every other attribute (`__name__`,
    `__doc__`, ...) is that inner function's, so code that inspects obj.name while this is in
    place sees the function it wraps."""

    __slots__ = ("_obj", "_name", "_hooks", "_where", "_bound")

    def __init__(self, obj, name, hooks, bound):
        self._obj = obj
        self._name = name
        self._hooks = hooks  # Instrumentation.hooks: looked up at each call
        self._where = None  # (switch.previous, this entry's index), set by bind()
        self._bound = bound

    def bind(self, switch, index):
        self._where = (switch.previous, index)

    def entry(self):
        """(dict, key, value, bind) for Instrumentation._direct."""
        return self._obj.__dict__, self._name, self, self.bind

    def _inner(self):
        where = self._where
        previous = where[0](where[1]) if where is not None else None
        return previous if previous is not None else self._bound

    def __getattr__(self, name):
        return getattr(self._inner(), name)


class _WrappedMethod:
    """Makes the _core.MethodWrapper that a HookSwitch puts into obj.__dict__[name] on sampled
    steps, in place of the method: instance attributes come first, so obj.name() — and torch's
    Module.__call__ — call it. The wrapper is a C type: calling it runs no Python frame of its
    own, only the hooks and the method.

    Like _MethodCall, the wrapper calls whatever obj.__dict__[name] held before the switch put it
    there (a wrapper of the user's or of an lr_scheduler, also one made after instrument(): the
    switch remembers it; bind()), else the class's method, and every attribute it does not have
    itself (`__self__`, `__func__`, `__name__`, lr_scheduler's `_with_counter` marker, ...) is
    that inner method's. It reads its two hooks from `hooks` (Instrumentation.hooks) at every
    call. Made once; the subclasses say which hooks and how they are called."""

    __slots__ = ("_obj", "_name", "wrapper")
    KIND = PRE = POST = None

    def __init__(self, obj, name, hooks, bound=None):
        from . import _core

        if bound is None:
            cls = type(obj)
            bound = getattr(cls, name).__get__(obj, cls)  # the class's method
        self._obj = obj
        self._name = name
        self.wrapper = _core.MethodWrapper(obj, bound, hooks, self.PRE, self.POST, self.KIND)

    def entry(self):
        """(dict, key, value, bind) for Instrumentation._direct."""
        return self._obj.__dict__, self._name, self.wrapper, self.wrapper.bind


class _ForwardCall(_WrappedMethod):
    """The model's forward on sampled steps: hooks["forward_pre"]() before it, then
    hooks["forward"](output) (not called when the forward raises). Unlike forward hooks,
    torch's Module.__call__ keeps its hook-free fast path, whose hook loops cost more right
    after a training step (bench/cold_calls.py: "Module call with a forward pre-hook + hook"
    against "... laggard's forward wrapper"); the stage then covers forward() itself, not the
    user's own forward hooks around it."""

    __slots__ = ()
    KIND, PRE, POST = "forward", "forward_pre", "forward"


class _OptimizerStep(_WrappedMethod):
    """Where step hooks do not serve (torch 1.13 has none; a subclass's step calling its base's
    runs them twice, _step_hooks_run_once): optimizer.step on sampled steps, between
    hooks["optimizer_pre"](optimizer, args, kwargs) and, in a finally,
    hooks["optimizer_post"](optimizer, args, kwargs) (the arguments of torch's step hooks)."""

    __slots__ = ()
    KIND, PRE, POST = "optimizer", "optimizer_pre", "optimizer_post"


class _BackwardCall(_MethodCall):
    """torch.autograd.backward while the hooks are attached (Tensor.backward calls it through
    the module, so both are covered): on a sampled step, when no backward of the model is under
    way, it begins the backward stage before the call; a nested call (reentrant checkpointing)
    passes straight through.

    Whether the call was the model's backward: at first the anchor parameter's gradient hook
    confirms it (and, under DDP, queues the end of the stage; under DDP with hooks on sampled
    steps only, the model output's gradient hook does both, and there is no anchor), and after
    the call the entry is dropped if it never did (a backward of something else), or ended
    (without DDP, or if the backward raised). Without DDP, after _ANCHOR_HOOK_BACKWARDS confirmed calls that hook is
    taken out, and the anchor's gradient answers instead: a call reached the model if, when it
    returns, the anchor's .grad is another tensor than before or the same one written to (its
    version counter moved). Reading that costs less than the Python hook torch would call in
    every backward; a backward run without this call is then no longer noticed."""

    __slots__ = ("_an", "_state", "_anchor", "_missed", "_errors", "_loss")

    def __init__(self, obj, name, hooks, bound, an, state, anchor, missed, errors, loss=None):
        super().__init__(obj, name, hooks, bound)
        self._loss = loss  # _loss_recorder's record, or None
        self._an = an  # the Analyzer: its _sampled
        self._state = state  # _install's state of the backward stage
        self._anchor = anchor  # the anchor parameter
        self._missed = missed  # _install's count of a call that did not reach the model
        self._errors = errors

    def __call__(self, *args, **kwargs):
        where = self._where  # _inner(), inlined: this runs on every step at interval 1
        inner = where[0](where[1]) if where is not None else None
        if inner is None:
            inner = self._bound
        state = self._state
        if not self._an._sampled or state["called"] or state["in_backward"] or \
                get_ident() != state["thread"]:
            return inner(*args, **kwargs)
        if self._loss is not None:  # before the backward starts (.item() on the host clock only)
            self._loss(args[0] if args else kwargs.get("tensors"))
        if state["output_hook"]:
            return inner(*args, **kwargs)
        hooks = self._hooks
        state["called"] = True
        hooks["backward_call"]()
        if state["hooked"]:
            try:
                return inner(*args, **kwargs)
            finally:
                hooks["backward_return"]()
        anchor = self._anchor
        before = anchor.grad
        version = -1 if before is None else before._version
        try:
            return inner(*args, **kwargs)
        finally:
            try:
                state["called"] = False
                after = anchor.grad
                if after is not before or (after is not None and after._version != version):
                    state["misses"] = 0
                    hooks["backward_end"]()
                else:
                    hooks["backward_cancel"]()
                    self._missed()
            except Exception as e:
                self._errors.report("backward hook", e)


def _anchor_parameter(model):
    """(name, parameter): the model's last parameter that takes a gradient — usually one of the
    first to get it in the backward — or None."""
    anchor = None
    for name, p in model.named_parameters():
        if p.requires_grad:
            anchor = (name, p)
    return anchor


def _remove_tensor_hook(tensor, handle):
    """Removes a hook added with register_hook; when none is left, also torch's hook on the
    tensor's autograd node that would still run (with an empty dict) in every backward."""
    handle.remove()
    try:
        if tensor._backward_hooks is not None and not tensor._backward_hooks:
            tensor._backward_hooks = None
    except Exception:  # an attribute this torch does not have: the empty dict stays
        pass


def _instrument_modules(inst, an, model, patterns):
    rec = an._recorder
    compiled = [(stage, re.compile(p, re.IGNORECASE)) for stage, p in patterns.items()]
    for stage, regex in compiled:
        stage_id = rec.stage(stage)
        pre, post = rec.marks(stage_id)  # the module hooks (see _install)
        matched = []  # module names; descendants of a match are skipped (outermost only)
        for name, module in model.named_modules():
            if not regex.search(type(module).__name__):
                continue
            if any(name.startswith(m + ".") for m in matched if m):
                continue
            if "" in matched:
                continue
            matched.append(name)
            key = "%s %s" % (stage, name or "(model)")
            inst.hooks[key + " pre"], inst.hooks[key] = pre, post
            inst._pending += [
                (module, module.register_forward_pre_hook, "_forward_pre_hooks", key + " pre"),
                (module, module.register_forward_hook, "_forward_hooks", key)]
        if matched:
            inst.stages.append(stage)
            inst.notes.append("%s: %d modules" % (stage, len(matched)))
        else:
            logger.info("laggard: no module class matches %r for stage %r", regex.pattern, stage)


class timed_batches:
    """Iterates over `iterable` (a DataLoader, any iterable) and times each fetch of the next
    batch for the resource host_data_wait_ms of the sampled step it feeds:

        for step, batch in enumerate(laggard.torch.timed_batches(loader, an)):
            an.begin_step(step)
            ...
            an.end_step()

    A fetch made between steps (as above) counts for the next sampled step, one made during a
    sampled step (gradient accumulation fetching inside the step) for that step; a sampled
    step records the sum. Costs two clock reads per batch on every step (~0.2 µs), nothing else;
    with the analyzer disabled or its resources off, it yields the batches untouched.
    len() and other attributes are the iterable's."""

    def __init__(self, iterable, analyzer):
        self.iterable = iterable
        self.analyzer = analyzer

    def __len__(self):
        return len(self.iterable)

    def __getattr__(self, name):
        if name in ("iterable", "analyzer"):
            raise AttributeError(name)
        return getattr(self.iterable, name)

    def __iter__(self):
        an = self.analyzer
        res = an.resources if an is not None and an.enabled else None
        if res is None:
            yield from self.iterable
            return
        it = iter(self.iterable)
        clock = time.perf_counter
        add = res.add_data_wait
        while True:
            t0 = clock()
            try:
                batch = next(it)
            except StopIteration:
                return
            try:
                add((clock() - t0) * 1000.0, an._sampled)
            except Exception as e:  # never seen: the batch is yielded all the same
                an._errors.report("timed_batches", e)
            yield batch
