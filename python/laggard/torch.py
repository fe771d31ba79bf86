"""Automatic stages for PyTorch: laggard.torch.instrument(analyzer, model=..., optimizer=...).

Stages (all measured on sampled steps only, by the C++ recorder: host clock, or CUDA events on
the current stream; nothing here synchronizes the device or calls a collective):

  forward        module forward pre-hook → forward hook of the top model.
  backward       this rank's own backward compute: from the moment the gradient reaches the
                 model output (a tensor hook, i.e. the start of the model's backward) to the end
                 of the autograd graph's work (a final callback of the autograd engine, queued at
                 that start, which runs once every gradient has been computed and, for DDP,
                 handed to the all-reduce — before DDP waits for it).
  communication  DistributedDataParallel only: from that moment until DDP has waited for its
                 gradient all-reduce (a second final callback, queued by the first, so it runs
                 after DDP's own finalize). This is the rank's *wait for its peers* (plus the
                 transfer not hidden behind compute), measured apart from its own compute: a
                 slow backward on one rank shows as that rank's long backward, and as long
                 communication — evidence, never a verdict — on the ranks waiting for it.
  optimizer      optimizer.step (step hooks where torch has them, else a wrapper).
  attention, moe with module stages on: forward pre/post hooks on modules whose class names
                 match the patterns (outermost match only).

Works with torch 1.13 and 2.x; uses no API 2.x removed.
"""

import re

from ._log import logger

_LAZY_HOOKS = True  # attach on sampled steps only (False: always; bench/overhead.py --always-attached)

DEFAULT_MODULE_STAGE_PATTERNS = {
    "attention": r"attention|attn",
    "moe": r"moe|mixture_?of_?experts",
}


class Instrumentation:
    """What instrument() installed; remove() takes it all out again.

    Hooks are attached only for the duration of a sampled step (begin_step of a sampled step
    attaches them, its end_step detaches them): on the other steps the model runs without
    hooks, so torch takes its fast path and laggard costs nothing there. With interval 1 every
    step is sampled and the hooks stay attached. `hooks` holds the hook
    functions by name, as they are registered at each attach (bench/overhead.py wraps them to
    account their time)."""

    def __init__(self):
        self._undo = []
        self._attachers = []  # functions registering this step's hooks; each returns handles
        self._attached = []  # handles of the hooks attached for the current sampled step
        self.hooks = {}
        self.stages = []
        self.notes = []

    def _attach(self):
        if self._attached:
            return
        for attach in self._attachers:
            self._attached.extend(attach())

    def _detach(self):
        attached, self._attached = self._attached, []
        for h in attached:
            try:
                h.remove()
            except Exception:
                pass

    def remove(self):
        self._detach()
        for undo in self._undo:
            try:
                undo()
            except Exception:
                pass
        self._undo = []
        self._attachers = []


class _Restore:
    """A handle that puts back an instance attribute replaced for one sampled step."""

    __slots__ = ("obj", "name", "value", "previous")
    _MISSING = object()

    def __init__(self, obj, name, value, previous):
        self.obj, self.name, self.value, self.previous = obj, name, value, previous

    def remove(self):
        if self.obj.__dict__.get(self.name) is not self.value:
            return  # replaced again by someone else meanwhile: leave theirs
        if self.previous is _Restore._MISSING:
            delattr(self.obj, self.name)
        else:
            setattr(self.obj, self.name, self.previous)


def _is_ddp(model):
    try:
        from torch.nn.parallel import DistributedDataParallel

        return isinstance(model, DistributedDataParallel)
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


def instrument(analyzer, model=None, optimizer=None, *, forward=True, backward=True,
               optimizer_stage=True, module_stages=None, module_stage_patterns=None):
    """Times forward, backward (and, for DDP, communication), optimizer and optionally module
    stages without hand-written sections. Returns an Instrumentation (call .remove() to undo).

    On a disabled analyzer nothing is installed. Call it once per model and optimizer, before
    training. Never raises into training: a failure to install a hook is logged and skipped.
    """
    inst = Instrumentation()
    if analyzer is None or not analyzer.enabled:
        return inst
    try:
        _install(inst, analyzer, model, optimizer, forward, backward, optimizer_stage,
                 module_stages, module_stage_patterns)
    except Exception as e:
        analyzer._errors.report("instrument", e)
        return inst

    def attach():
        try:
            inst._attach()
        except Exception as e:
            inst._detach()
            analyzer._errors.report("instrument", e)

    if analyzer.options.get("interval") == 1 or not _LAZY_HOOKS:
        # Every step is sampled: attaching and detaching each step would only add work (a
        # training step evicts the caches, so each call costs tens of microseconds).
        attach()
        inst._undo.append(inst._detach)
        return inst
    analyzer._on_sampled_step.append(attach)
    analyzer._on_step_end.append(inst._detach)

    def undo():
        for hooks, fn in ((analyzer._on_sampled_step, attach), (analyzer._on_step_end,
                                                                 inst._detach)):
            if fn in hooks:
                hooks.remove(fn)

    inst._undo.append(undo)
    if analyzer.sampled:  # instrumented inside a sampled step: from now on
        attach()
    return inst


def _install(inst, an, model, optimizer, forward, backward, optimizer_stage, module_stages,
             module_stage_patterns):
    import torch

    rec = an._recorder
    begin, end = rec.begin, rec.end

    if model is not None and (forward or backward):
        ddp = _is_ddp(model)
        fwd_id = rec.stage("forward") if forward else -1
        bwd_id = rec.stage("backward") if backward else -1
        comm_id = rec.stage("communication", "communication") if (backward and ddp) else -1
        queue_callback = torch.autograd.Variable._execution_engine.queue_callback
        state = {"in_backward": False}

        def reset():
            state["in_backward"] = False

        an._on_sampled_step.append(reset)
        inst._undo.append(lambda: reset in an._on_sampled_step and
                          an._on_sampled_step.remove(reset))

        def comm_done():
            end(comm_id)

        def compute_done():
            # Every gradient of this backward is computed (and, under DDP, handed to the
            # all-reduce); DDP's finalize — the wait — was queued after us and runs next.
            end(bwd_id)
            state["in_backward"] = False
            if comm_id >= 0:
                begin(comm_id)
                queue_callback(comm_done)

        def on_output_grad(grad):
            if an._sampled and not state["in_backward"]:
                state["in_backward"] = True
                begin(bwd_id)
                queue_callback(compute_done)
            return None

        def pre_forward(module, inputs):
            if an._sampled and fwd_id >= 0:
                begin(fwd_id)

        def post_forward(module, inputs, output):
            if not an._sampled:
                return None
            if fwd_id >= 0:
                end(fwd_id)
            if bwd_id >= 0 and torch.is_grad_enabled():
                for t in _tensors(output, []):
                    if t.requires_grad:
                        t.register_hook(on_output_grad)
            return None

        inst.hooks["forward_pre"] = pre_forward
        inst.hooks["forward"] = post_forward
        inst._attachers.append(lambda: [
            model.register_forward_pre_hook(inst.hooks["forward_pre"]),
            model.register_forward_hook(inst.hooks["forward"])])
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
    opt_id = rec.stage("optimizer")
    begin, end = rec.begin, rec.end

    def pre(*args):
        if an._sampled:
            begin(opt_id)

    def post(*args):
        if an._sampled:
            end(opt_id)

    inst.hooks["optimizer_pre"] = pre
    inst.hooks["optimizer_post"] = post
    if hasattr(optimizer, "register_step_pre_hook") and \
            hasattr(optimizer, "register_step_post_hook"):  # torch >= 2.0
        inst._attachers.append(lambda: [
            optimizer.register_step_pre_hook(inst.hooks["optimizer_pre"]),
            optimizer.register_step_post_hook(inst.hooks["optimizer_post"])])
    else:  # torch 1.13: wrap the instance's step, keeping its attributes (lr_scheduler's marker)
        import functools

        def attach():
            previous = optimizer.__dict__.get("step", _Restore._MISSING)
            original = optimizer.step

            @functools.wraps(original)
            def step(*args, **kwargs):
                inst.hooks["optimizer_pre"](optimizer, args, kwargs)
                try:
                    return original(*args, **kwargs)
                finally:
                    inst.hooks["optimizer_post"](optimizer, args, kwargs)

            optimizer.step = step
            return [_Restore(optimizer, "step", step, previous)]

        inst._attachers.append(attach)
    inst.stages.append("optimizer")


def _instrument_modules(inst, an, model, patterns):
    rec = an._recorder
    begin, end = rec.begin, rec.end
    compiled = [(stage, re.compile(p, re.IGNORECASE)) for stage, p in patterns.items()]
    for stage, regex in compiled:
        stage_id = rec.stage(stage)
        matched = []  # module names; descendants of a match are skipped (outermost only)
        for name, module in model.named_modules():
            if not regex.search(type(module).__name__):
                continue
            if any(name.startswith(m + ".") for m in matched if m):
                continue
            if "" in matched:
                continue
            matched.append(name)

            def pre(mod, inputs, _id=stage_id):
                if an._sampled:
                    begin(_id)

            def post(mod, inputs, output, _id=stage_id):
                if an._sampled:
                    end(_id)

            inst._attachers.append(lambda module=module, pre=pre, post=post: [
                module.register_forward_pre_hook(pre), module.register_forward_hook(post)])
        if matched:
            inst.stages.append(stage)
            inst.notes.append("%s: %d modules" % (stage, len(matched)))
        else:
            logger.info("laggard: no module class matches %r for stage %r", regex.pattern, stage)
