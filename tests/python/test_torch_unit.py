"""laggard.torch.instrument in one process (no DDP): stages, module stages, undo."""

import time
import types
import warnings

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402

import laggard  # noqa: E402
import laggard.torch as lt  # noqa: E402
from laggard import _core  # noqa: E402
from backward_delay import Delay  # noqa: E402


class InnerAttention(nn.Module):
    def forward(self, x):
        return x * 1.0


class SelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = InnerAttention()  # nested match: only the outer one is timed
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        return self.proj(self.inner(x))


class MoELayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.experts = nn.ModuleList([nn.Linear(8, 8) for _ in range(2)])

    def forward(self, x):
        return sum(e(x) for e in self.experts)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([SelfAttention(), SelfAttention()])
        self.moe = MoELayer()
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.head(Delay.apply(self.moe(x), 10.0))


def samples_of(log_dir):
    return [_core.StepSample.from_json(line)
            for line in (log_dir / "rank-0.jsonl").read_text().splitlines()]


def run(an, model, opt, steps=4, micro=1):
    for step in range(steps):
        an.begin_step(step)
        opt.zero_grad()
        for _ in range(micro):
            loss = model(torch.randn(4, 8)).pow(2).mean()
            loss.backward()
        opt.step()
        an.end_step()


# Interval 2: hooks attached on sampled steps; interval 1: attached for good. Both start the
# backward at torch.autograd.backward (no DDP).
@pytest.mark.parametrize("interval", [2, 1])
def test_forward_backward_optimizer_stages(tmp_path, interval):
    an = laggard.Analyzer(enabled=True, interval=interval, log_dir=str(tmp_path))
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    inst = lt.instrument(an, model=model, optimizer=opt)
    assert inst.stages == ["forward", "backward", "optimizer"]  # no DDP: no communication
    run(an, model, opt, steps=4, micro=2)
    an.close()
    samples = samples_of(tmp_path)
    assert [s.step for s in samples] == list(range(0, 4, interval))
    for s in samples:
        assert [t.name for t in s.stages] == ["forward", "backward", "optimizer"]
        assert s.find("forward").calls == 2 and s.find("backward").calls == 2
        assert s.find("optimizer").calls == 1
        assert s.find("backward").ms >= 2 * 10 * 0.9  # two backwards, each sleeping 10 ms
    c = an.counters()
    assert c["unbalanced"] == 0


@pytest.mark.parametrize("interval", [2, 1])
def test_optimizer_subclass_calling_its_base_step_is_one_entry_per_step(tmp_path, interval):
    # torch >= 2.0 runs the step hooks in a wrapper around the step of each optimizer class it
    # has instantiated: once the base class has been instantiated too, a subclass whose step
    # calls the base's runs them twice, nested. The stage is still one whole entry per step.
    class SlowSGD(torch.optim.SGD):
        def step(self, closure=None):
            time.sleep(0.005)
            return super().step(closure)

    model = nn.Linear(8, 1)
    torch.optim.SGD(model.parameters(), lr=0.01)  # the base class's step is wrapped from now on
    opt = SlowSGD(model.parameters(), lr=0.01)
    an = laggard.Analyzer(enabled=True, interval=interval, log_dir=str(tmp_path))
    assert lt.instrument(an, model=model, optimizer=opt).stages[-1] == "optimizer"
    run(an, model, opt, steps=4)
    an.close()
    samples = samples_of(tmp_path)
    assert [s.step for s in samples] == list(range(0, 4, interval))
    for s in samples:
        assert s.find("optimizer").calls == 1
        assert s.find("optimizer").ms >= 5 * 0.9  # the subclass's own part is inside
    c = an.counters()
    assert c["unbalanced"] == 0 and c["report_errors"] == 0
    assert "step" not in opt.__dict__


def test_module_stages(tmp_path):
    an = laggard.Analyzer(enabled=True, interval=1, log_dir=str(tmp_path), module_stages=True)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    inst = lt.instrument(an, model=model, optimizer=opt)
    assert "attention" in inst.stages and "moe" in inst.stages
    run(an, model, opt, steps=2)
    an.close()
    s = samples_of(tmp_path)[0]
    assert s.find("attention").calls == 2  # two outer SelfAttention blocks, inner not counted
    assert s.find("moe").calls == 1
    assert an.counters()["unbalanced"] == 0


def test_custom_module_stage_patterns(tmp_path):
    an = laggard.Analyzer(enabled=True, interval=1, log_dir=str(tmp_path))
    model = Net()
    lt.instrument(an, model=model, module_stages=True,
                  module_stage_patterns={"head": r"^Linear$"})
    run(an, model, torch.optim.SGD(model.parameters(), lr=0.01), steps=1)
    an.close()
    # every Linear: two projections, two experts and the head, each entered once
    assert samples_of(tmp_path)[0].find("head").calls == 5


def test_remove_undoes_everything():
    an = laggard.Analyzer(enabled=True, interval=1)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    step = opt.step
    backward = torch.autograd.backward
    inst = lt.instrument(an, model=model, optimizer=opt)
    assert torch.autograd.backward is not backward  # interval 1: the backward call is wrapped
    assert model.head.bias._backward_hooks  # ... and the anchor parameter has its hook
    inst.remove()
    an.close()
    assert not model._forward_hooks and not model._forward_pre_hooks
    assert "forward" not in model.__dict__
    assert opt.step == step
    assert torch.autograd.backward is backward
    assert model.head.bias._backward_hooks is None  # torch's node hook is gone too


@pytest.mark.parametrize("interval", [1, 10])
def test_analyzer_close_takes_the_instrumentation_out(interval):
    # Without remove(): close() does it, so that no wrapper of torch.autograd.backward (interval
    # 1) outlives the analyzer it times for.
    backward = torch.autograd.backward
    an = laggard.Analyzer(enabled=True, interval=interval)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    step = opt.step
    inst = lt.instrument(an, model=model, optimizer=opt)
    run(an, model, opt, steps=2)
    an.close()
    assert torch.autograd.backward is backward
    assert "forward" not in model.__dict__ and opt.step == step
    assert model.head.bias._backward_hooks is None
    assert inst.stages == []
    assert an.counters()["report_errors"] == 0
    run(an, model, opt, steps=2)  # a closed analyzer: training goes on untimed


def test_remove_keeps_the_users_own_parameter_hooks():
    an = laggard.Analyzer(enabled=True, interval=1)
    model = Net()
    seen = []
    model.head.bias.register_hook(lambda g: seen.append(1))
    inst = lt.instrument(an, model=model)
    inst.remove()
    an.close()
    model(torch.randn(2, 8)).sum().backward()
    assert seen == [1]


@pytest.mark.parametrize("interval", [2, 1])
def test_backward_stage_counts_the_models_backward_only(tmp_path, interval):
    # Each step: a backward of something else (40 ms, never reaching the model), then the
    # model's (a 20 ms loss backward, then the model's own 10 ms). The stage is timed from the
    # backward call (the loss's part included) and never counts the other backward: for the
    # first 3 sampled steps the anchor's hook tells the two apart, then the anchor's gradient
    # (the hook is gone by then).
    an = laggard.Analyzer(enabled=True, interval=interval, log_dir=str(tmp_path))
    model = Net()
    lt.instrument(an, model=model)
    for step in range(6):
        an.begin_step(step)
        z = torch.randn(3, requires_grad=True)
        Delay.apply(z, 40.0).sum().backward()
        Delay.apply(model(torch.randn(4, 8)), 20.0).pow(2).mean().backward()
        an.end_step()
        assert bool(model.head.bias._backward_hooks) == (step < 2 * interval), step
    c = an.counters()
    an.close()
    samples = samples_of(tmp_path)
    assert len(samples) == 6 // interval
    for s in samples:
        b = s.find("backward")
        assert b.calls == 1
        assert 30 * 0.9 <= b.ms < 60, b.ms
    assert c["unbalanced"] == 0 and c["report_errors"] == 0


def test_backward_called_from_another_thread_is_not_timed(tmp_path):
    # The recorder belongs to the training thread: a backward another thread runs meanwhile
    # (here during a sampled step, through the same wrapped torch.autograd.backward) passes
    # straight through.
    import threading

    an = laggard.Analyzer(enabled=True, interval=1, log_dir=str(tmp_path))
    model = Net()
    lt.instrument(an, model=model)
    other = Net()
    for step in range(3):
        an.begin_step(step)
        if step == 0:  # three backward calls of another model, on another thread
            for _ in range(3):
                t = threading.Thread(target=lambda: other(torch.randn(2, 8)).sum().backward())
                t.start()
                t.join()
        model(torch.randn(2, 8)).sum().backward()
        an.end_step()
    c = an.counters()
    an.close()
    # Had they counted (as calls that never reached the model), the third would have switched
    # laggard to the output hook, and step 0's backward would not have been timed.
    for s in samples_of(tmp_path):
        assert s.find("backward").calls == 1 and s.find("forward").calls == 1
    assert c["unbalanced"] == 0 and c["report_errors"] == 0


def test_backward_that_never_reaches_the_anchor_switches_to_the_output_hook(tmp_path):
    # The anchor parameter (the model's last) frozen after instrument(): the backward calls
    # never reach it, so their entries are dropped; after 3 such calls in a row the start is
    # taken from the output's gradient instead.
    an = laggard.Analyzer(enabled=True, interval=1, log_dir=str(tmp_path))
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    lt.instrument(an, model=model, optimizer=opt)
    model.head.bias.requires_grad_(False)
    run(an, model, opt, steps=6)
    c = an.counters()
    an.close()
    samples = samples_of(tmp_path)
    assert [s.find("backward") is not None for s in samples] == [False] * 3 + [True] * 3
    assert all(s.find("backward").ms >= 10 * 0.9 for s in samples[3:])
    assert c["unbalanced"] == 0 and c["report_errors"] == 0


def test_anchor_that_stops_getting_gradients_later_switches_to_the_output_hook(tmp_path):
    # The same once the anchor's hook is gone (after 3 confirmed backward calls): the anchor's
    # gradient no longer changes, so the calls are dropped, and after 3 of them the output's
    # gradient marks the start.
    an = laggard.Analyzer(enabled=True, interval=1, log_dir=str(tmp_path))
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    lt.instrument(an, model=model, optimizer=opt)
    run(an, model, opt, steps=4)
    assert model.head.bias._backward_hooks is None  # the hook is gone
    model.head.bias.requires_grad_(False)
    run(an, model, opt, steps=6)
    c = an.counters()
    an.close()
    samples = samples_of(tmp_path)
    assert [s.find("backward") is not None for s in samples] == \
        [True] * 4 + [False] * 3 + [True] * 3
    assert all(s.find("backward").ms >= 10 * 0.9 for s in samples if s.find("backward"))
    assert c["unbalanced"] == 0 and c["report_errors"] == 0


def test_backward_started_without_autograd_backward_switches_to_the_output_hook(tmp_path):
    # A training loop that calls the engine through a reference taken before instrument()
    # bypasses the wrapped torch.autograd.backward: that first backward is not timed (its
    # start is unknown), the next ones start at the output's gradient.
    raw_backward = torch.autograd.backward
    an = laggard.Analyzer(enabled=True, interval=1, log_dir=str(tmp_path))
    model = Net()
    lt.instrument(an, model=model)
    for step in range(4):
        an.begin_step(step)
        raw_backward(model(torch.randn(4, 8)).pow(2).mean())
        an.end_step()
    # the anchor's hook, of no use from then on, went with the next sampled forward
    assert model.head.bias._backward_hooks is None
    c = an.counters()
    an.close()
    samples = samples_of(tmp_path)
    assert [s.find("backward") is not None for s in samples] == [False, True, True, True]
    assert all(s.find("backward").calls == 1 for s in samples[1:])
    assert c["unbalanced"] == 0 and c["report_errors"] == 0


def test_reentrant_checkpointing_keeps_one_backward_entry(tmp_path):
    # torch.utils.checkpoint (reentrant) calls torch.autograd.backward inside the backward:
    # that nested call passes through.
    from torch.utils.checkpoint import checkpoint

    class Checkpointed(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8))
            self.head = nn.Linear(8, 1)

        def forward(self, x):
            x = checkpoint(self.body, x.requires_grad_())
            return self.head(Delay.apply(x, 10.0))

    an = laggard.Analyzer(enabled=True, interval=1, log_dir=str(tmp_path))
    model = Checkpointed()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    lt.instrument(an, model=model, optimizer=opt)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch 2.x asks for use_reentrant explicitly
        run(an, model, opt, steps=3)
    c = an.counters()
    an.close()
    samples = samples_of(tmp_path)
    assert len(samples) == 3
    for s in samples:
        assert s.find("backward").calls == 1 and s.find("backward").ms >= 10 * 0.9
    assert c["unbalanced"] == 0 and c["report_errors"] == 0


def test_hooks_are_attached_only_during_sampled_steps():
    # Unsampled steps run the model and optimizer untouched (torch's fast path, no laggard
    # call); a sampled step attaches the hooks at begin_step and removes them at end_step.
    an = laggard.Analyzer(enabled=True, interval=2)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    step = opt.step
    inst = lt.instrument(an, model=model, optimizer=opt)

    step_hooks = hasattr(opt, "_optimizer_step_pre_hooks")  # torch >= 2.0

    def hooked():
        return bool(model._forward_hooks or model._forward_pre_hooks or
                    model.moe._forward_hooks or "step" in opt.__dict__ or
                    "forward" in model.__dict__ or
                    (step_hooks and (opt._optimizer_step_pre_hooks or
                                     opt._optimizer_step_post_hooks)))

    backward = torch.autograd.backward
    assert not hooked()
    an.begin_step(0)  # sampled: the model's forward is wrapped through the instance, and the
    # optimizer's step gets step hooks (torch >= 2.0) or, torch 1.13, a wrapper; no forward
    # hooks (torch keeps its hook-free path); and torch.autograd.backward is wrapped
    assert torch.autograd.backward is not backward
    assert "forward" in model.__dict__
    assert type(model.__dict__["forward"]) is _core.MethodWrapper  # a C type: no Python frame
    if step_hooks:
        assert "step" not in opt.__dict__
        assert len(opt._optimizer_step_pre_hooks) == len(opt._optimizer_step_post_hooks) == 1
    else:
        assert type(opt.__dict__["step"]) is _core.MethodWrapper
    assert not model._forward_hooks and not model._forward_pre_hooks
    model(torch.randn(2, 8)).sum().backward()
    opt.step()
    an.end_step()
    assert not hooked() and opt.step == step and torch.autograd.backward is backward
    an.begin_step(1)  # not sampled
    assert not hooked()
    model(torch.randn(2, 8)).sum().backward()
    opt.step()
    an.end_step()
    an.begin_step(2)
    assert hooked()
    inst.remove()  # inside a sampled step: detached now, and never attached again
    assert not hooked() and opt.step == step
    an.end_step()
    an.begin_step(4)
    assert not hooked()
    an.end_step()
    an.close()
    assert an.counters()["report_errors"] == 0


class MayFail(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 1)
        self.error = None  # raised by the next forward when set

    def forward(self, x, scale=1.0):
        if self.error is not None:
            raise self.error
        return self.lin(x) * scale


def test_forward_wrapper_passes_arguments_and_exceptions_through(tmp_path):
    # Interval 1: the forward wrapper stays in place. A forward that raises: the exception
    # reaches the caller unchanged, that step's forward entry is left open (counted as
    # unbalanced, not emitted), and the next steps are timed as usual.
    an = laggard.Analyzer(enabled=True, interval=1, log_dir=str(tmp_path))
    model = MayFail()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    lt.instrument(an, model=model, optimizer=opt)
    wrapper = model.__dict__["forward"]
    assert type(wrapper) is _core.MethodWrapper
    # what code inspecting model.forward sees is the method it wraps
    assert model.forward.__name__ == "forward" and model.forward.__self__ is model
    assert model.forward.__func__ is MayFail.forward
    x = torch.randn(2, 8)
    error = ValueError("a bad batch")
    for step in range(3):
        an.begin_step(step)
        model.error = error if step == 1 else None
        if step == 1:
            with pytest.raises(ValueError) as info:
                model(x, scale=2.0)
            assert info.value is error
        else:
            out = model(x, scale=2.0)  # keyword arguments reach forward()
            assert torch.allclose(out, model.lin(x) * 2.0)
            out.sum().backward()
            opt.step()
        an.end_step()
    an.close()
    assert model.__dict__.get("forward") is None  # taken out at close
    samples = samples_of(tmp_path)
    assert [[t.name for t in s.stages] for s in samples] == [
        ["forward", "backward", "optimizer"], [], ["forward", "backward", "optimizer"]]
    c = an.counters()
    assert c["unbalanced"] == 1 and c["report_errors"] == 0


def test_optimizer_step_wrapper_passes_arguments_and_exceptions_through(tmp_path):
    # The step wrapper (torch 1.13; with torch >= 2.0 for an optimizer whose step calls its base
    # class's, SubSGD): its closure argument reaches step(); when the step raises, the stage is
    # still ended (the post hook runs in a finally) and the exception reaches the caller
    # unchanged.
    an = laggard.Analyzer(enabled=True, interval=1, log_dir=str(tmp_path))
    model = MayFail()
    opt = SubSGD(model.parameters(), lr=0.1)
    lt.instrument(an, model=model, optimizer=opt)
    assert type(opt.__dict__["step"]) is _core.MethodWrapper
    assert opt.step.__self__ is opt and opt.step.__func__ is type(opt).step
    assert not hasattr(opt.step, "_with_counter")
    x = torch.randn(2, 8)
    error = RuntimeError("the closure failed")
    closures = []

    def closure():
        closures.append(1)
        loss = model(x).pow(2).mean()
        loss.backward()
        return loss

    def failing_closure():
        raise error

    for step in range(2):
        an.begin_step(step)
        opt.zero_grad()
        if step == 0:
            loss = opt.step(closure=closure)  # the closure's loss comes back
            assert closures == [1] and loss.item() >= 0.0
        else:
            with pytest.raises(RuntimeError) as info:
                opt.step(failing_closure)
            assert info.value is error
        an.end_step()
    an.close()
    assert "step" not in opt.__dict__
    samples = samples_of(tmp_path)
    assert [s.find("optimizer").calls for s in samples] == [1, 1]
    assert samples[0].find("forward").calls == 1 and samples[1].find("forward") is None
    c = an.counters()
    assert c["unbalanced"] == 0 and c["report_errors"] == 0


def scheduler_counted(opt, steps):
    """Whether the scheduler's own wrapper of optimizer.step ran: torch 1.13's counts the steps
    (opt._step_count), torch 2.x's marks that one ran (opt._opt_called)."""
    if hasattr(opt, "_step_count"):
        return opt._step_count == steps
    return getattr(opt, "_opt_called", False) is True


def train_with_scheduler(an, model, opt, steps, sched=None):
    """`steps` training steps that step an lr_scheduler after the optimizer, with warnings as
    errors ("lr_scheduler.step() before optimizer.step()", "optimizer.step() has been
    overridden", ...); with no scheduler given, a StepLR is made inside the first step. Closes
    the analyzer."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for step in range(steps):
            an.begin_step(step)
            if sched is None:
                sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
            model(torch.randn(2, 8)).sum().backward()
            opt.step()
            sched.step()
            an.end_step()
    an.close()


def test_lr_scheduler_keeps_working():
    an = laggard.Analyzer(enabled=True, interval=1)
    model = nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    lt.instrument(an, model=model, optimizer=opt)
    train_with_scheduler(an, model, opt, 2, sched)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.025)


def test_no_grad_forward_is_timed_without_backward_hooks(tmp_path):
    an = laggard.Analyzer(enabled=True, interval=1, log_dir=str(tmp_path))
    model = Net()
    lt.instrument(an, model=model)
    an.begin_step(0)
    with torch.no_grad():
        model(torch.randn(2, 8))
    an.end_step()
    an.close()
    s = samples_of(tmp_path)[0]
    assert s.find("forward").calls == 1 and s.find("backward") is None


def test_backward_hook_registrar_runs_when_the_outputs_gradient_arrives():
    seen = []
    add = lt._tensor_hook_registrar(torch, lambda grad: seen.append(tuple(grad.shape)))
    model = nn.Sequential(nn.Linear(8, 4), nn.ReLU(), nn.Linear(4, 3))
    first = model[0].weight
    first.register_hook(lambda g: seen.append("first layer"))  # computed last in backward
    out = model(torch.randn(5, 8))
    out.register_hook(lambda g: seen.append("user hook"))  # a hook the user had already
    add(out)
    add(out)  # the same output twice: still one hook
    out.sum().backward()
    assert seen == ["user hook", (5, 3), "first layer"]

    class Sub(torch.Tensor):  # a tensor subclass takes torch's public register_hook
        pass

    seen.clear()
    x = torch.randn(3, requires_grad=True)
    y = (x * 2).as_subclass(Sub)
    add(y)
    y.sum().backward()
    seen_leaf = []
    leaf = torch.randn(3, requires_grad=True)  # a leaf too (no grad_fn)
    lt._tensor_hook_registrar(torch, lambda g: seen_leaf.append(1))(leaf)
    (leaf * 3).sum().backward()
    assert seen == [(3,)] and seen_leaf == [1]


def test_user_hooks_stay_and_run_with_lazily_attached_hooks(tmp_path):
    an = laggard.Analyzer(enabled=True, interval=2, log_dir=str(tmp_path))
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    lt.instrument(an, model=model, optimizer=opt)
    calls = []
    model.register_forward_hook(lambda m, i, o: calls.append("forward"))
    model.register_forward_pre_hook(lambda m, i: calls.append("pre"))
    run(an, model, opt, steps=4)
    an.close()
    assert calls == ["pre", "forward"] * 4  # on sampled steps and the others
    assert len(model._forward_hooks) == 1 and len(model._forward_pre_hooks) == 1
    samples = samples_of(tmp_path)
    assert [s.step for s in samples] == [0, 2]
    assert all(s.find(n).calls == 1 for s in samples for n in ("forward", "backward",
                                                                   "optimizer"))
    assert an.counters()["report_errors"] == 0


class SubSGD(torch.optim.SGD):
    """An optimizer whose step calls its base class's: laggard wraps its step (see
    _step_hooks_run_once), with any torch."""

    def step(self, closure=None):
        return super().step(closure)


# SGD: step hooks (torch >= 2.0) or the step wrapper (torch 1.13); SubSGD: the step wrapper.
@pytest.mark.parametrize("optimizer", [torch.optim.SGD, SubSGD])
def test_lr_scheduler_made_after_instrument_keeps_counting(optimizer):
    # The step wrapper calls what optimizer.step was before each sampled step put it in place:
    # a scheduler's counter made later stays in the chain.
    an = laggard.Analyzer(enabled=True, interval=2)
    model = nn.Linear(8, 1)
    opt = optimizer(model.parameters(), lr=0.1)
    lt.instrument(an, model=model, optimizer=opt)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    train_with_scheduler(an, model, opt, 4, sched)
    assert scheduler_counted(opt, 4)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.1 * 0.5 ** 4)


def test_hooks_that_cannot_be_attached_are_counted_and_training_goes_on(tmp_path):
    class Refusing(dict):  # an instance dict that refuses a new "forward" when armed
        armed = False

        def __setitem__(self, key, value):
            if self.armed and key == "forward":
                raise RuntimeError("refused")
            super().__setitem__(key, value)

    model = nn.Linear(8, 1)
    model.__dict__ = Refusing(model.__dict__)
    an = laggard.Analyzer(enabled=True, interval=1, log_dir=str(tmp_path))
    an2 = laggard.Analyzer(enabled=True, interval=2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    lt.instrument(an2, model=model)  # interval 2: attached at each sampled step's begin_step
    model.__dict__.armed = True
    lt.instrument(an, model=model)  # interval 1: attached now, and that fails
    assert an.counters()["report_errors"] == 1
    for step in range(4):  # the forward wrapper fails to go in on each sampled step of an2
        an2.begin_step(step)
        model(torch.randn(2, 8)).sum().backward()
        opt.step()
        an2.end_step()
    an.close()
    an2.close()
    assert an2.counters()["report_errors"] == 2
    assert an2.counters()["samples_emitted"] == 2  # the steps are still sampled
    assert "forward" not in model.__dict__


def test_hooks_whose_dict_is_unknown_fall_back_to_torchs_calls():
    class Handle:
        def __init__(self, hooks, key):
            self.hooks, self.key = hooks, key

        def remove(self):
            self.hooks.pop(self.key, None)

    class Owner:  # registers like torch, but the handle says nothing of where
        def __init__(self):
            self.hooks = {}

        def register(self, fn):
            key = len(self.hooks) + 100
            self.hooks[key] = fn
            return Handle(self.hooks, key)

    owner = Owner()
    inst = lt.Instrumentation()
    inst.hooks["h"] = print
    inst._pending.append((owner, owner.register, "hooks", "h"))
    lt._build_switch(inst, _core)
    assert inst._switch is None and len(inst._fallbacks) == 1 and owner.hooks == {}
    assert inst._attach() == 0 and list(owner.hooks.values()) == [print]
    assert inst._detach() == 0 and owner.hooks == {}


@pytest.mark.parametrize("optimizer", [torch.optim.SGD, SubSGD])
def test_lr_scheduler_made_during_a_sampled_step_wraps_the_inner_step(optimizer):
    # While the step wrapper is in place, optimizer.step shows the attributes of the step it
    # wraps, so a scheduler created then wraps the class's step and keeps counting.
    an = laggard.Analyzer(enabled=True, interval=2)
    model = nn.Linear(8, 1)
    opt = optimizer(model.parameters(), lr=0.1)
    lt.instrument(an, model=model, optimizer=opt)
    train_with_scheduler(an, model, opt, 4)  # the StepLR is made inside sampled step 0
    assert scheduler_counted(opt, 4) and an.counters()["report_errors"] == 0
    assert opt.param_groups[0]["lr"] == pytest.approx(0.1 * 0.5 ** 4)


def test_a_script_module_gets_forward_hooks_or_a_counted_error():
    # A ScriptModule's forward cannot be wrapped through the instance: instrument() uses
    # forward hooks, which torch 1.13 refuses on ScriptModules — counted, nothing installed,
    # and training goes on.
    an = laggard.Analyzer(enabled=True, interval=1)
    model = torch.jit.script(nn.Linear(8, 1))
    inst = lt.instrument(an, model=model)
    for step in range(2):
        an.begin_step(step)
        model(torch.randn(2, 8)).sum().backward()
        an.end_step()
    an.close()
    c = an.counters()
    assert c["samples_emitted"] == 2
    if inst.stages:  # a torch that takes hooks on ScriptModules
        assert c["report_errors"] == 0
    else:
        assert c["report_errors"] == 1


class BrokenEngine:
    def queue_callback(self, fn):
        raise RuntimeError("queue_callback broke")


@pytest.mark.parametrize("interval", [1, 2])
def test_a_failure_inside_the_forward_or_backward_hooks_never_reaches_training(
        monkeypatch, tmp_path, interval):
    # DDP on one rank. Interval 2: the output's gradient hook, which confirms the backward
    # call and queues the end of the compute, cannot be registered (in the forward), so the
    # calls are dropped; interval 1: the anchor parameter's hook cannot queue the end of the
    # backward compute (in the backward); the stage then ends when the backward call returns.
    import torch.distributed as dist

    ddp = True
    if ddp:
        if dist.is_initialized():
            pytest.skip("a process group is already initialized")
        dist.init_process_group("gloo", init_method="file://" + str(tmp_path / "store"), rank=0,
                                world_size=1)
    try:
        an = laggard.Analyzer(enabled=True, interval=interval)
        model = nn.parallel.DistributedDataParallel(Net()) if ddp else Net()
        opt = torch.optim.SGD(model.parameters(), lr=0.01)

        def broken_registrar(torch_module, fn):
            def add(t):
                raise RuntimeError("hook registration broke")
            return add

        monkeypatch.setattr(lt, "_tensor_hook_registrar", broken_registrar)
        monkeypatch.setattr(torch.autograd.Variable, "_execution_engine", BrokenEngine())
        inst = lt.instrument(an, model=model, optimizer=opt)
        monkeypatch.undo()  # the instrumentation holds the broken ones; training needs the engine
        assert "communication" in inst.stages
        run(an, model, opt, steps=3 * interval)  # forward, backward and step as usual
        if interval == 1:  # under DDP the anchor's hook stays: it queues the end of the compute
            assert model.module.head.bias._backward_hooks
        else:  # ... so with hooks on sampled steps only, the output's hook does that instead
            assert not model.module.head.bias._backward_hooks
        c = an.counters()
        an.close()
        assert c["report_errors"] == 3 and c["samples_emitted"] == 3
        assert c["unbalanced"] == 0
    finally:
        if ddp:
            dist.destroy_process_group()


def test_without_ddp_the_backward_ends_when_its_call_returns(monkeypatch, tmp_path):
    # Interval 1, no DDP: the anchor's hook queues no final callback (the engine's queue_callback
    # would raise here); the wrapped torch.autograd.backward ends the stage when it returns.
    an = laggard.Analyzer(enabled=True, interval=1, log_dir=str(tmp_path))
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    monkeypatch.setattr(torch.autograd.Variable, "_execution_engine", BrokenEngine())
    lt.instrument(an, model=model, optimizer=opt)
    monkeypatch.undo()
    run(an, model, opt, steps=3)
    c = an.counters()
    an.close()
    assert c["report_errors"] == 0 and c["unbalanced"] == 0
    samples = samples_of(tmp_path)
    assert len(samples) == 3
    for s in samples:
        b = s.find("backward")
        assert b.calls == 1 and b.ms >= 10 * 0.9, b.ms  # the model's backward sleeps 10 ms


@pytest.fixture
def one_rank_group(tmp_path):
    """A one-rank gloo process group (DDP on one process), destroyed afterwards."""
    import torch.distributed as dist

    if dist.is_initialized():
        pytest.skip("a process group is already initialized")
    dist.init_process_group("gloo", init_method="file://" + str(tmp_path / "store"), rank=0,
                            world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


LOSS_MS = 40.0  # the slow autograd op between the model output and the loss


def ddp_steps(an, model, opt, steps, other_backward_ms=0.0, backward=None):
    for step in range(steps):
        an.begin_step(step)
        opt.zero_grad()
        if other_backward_ms:  # a backward of something else, never reaching the model
            z = torch.randn(3, requires_grad=True)
            Delay.apply(z, other_backward_ms).sum().backward()
        loss = Delay.apply(model(torch.randn(4, 8)), LOSS_MS).pow(2).mean()
        if backward is None:
            loss.backward()
        else:
            backward(loss)
        opt.step()
        an.end_step()


# Under DDP at every interval (1: the anchor parameter's hook confirms the call; above 1: the
# output's gradient hook does), the backward stage starts at the torch.autograd.backward call:
# a slow autograd op applied to the model output before the loss is inside it, not in the
# untimed gap before the output's gradient, and not in communication. A backward of something
# else in the same step is not counted.
@pytest.mark.parametrize("interval", [1, 3])
def test_ddp_backward_stage_includes_the_loss_backward(tmp_path, one_rank_group, interval):
    an = laggard.Analyzer(enabled=True, interval=interval, log_dir=str(tmp_path))
    model = nn.parallel.DistributedDataParallel(Net())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    inst = lt.instrument(an, model=model, optimizer=opt)
    assert inst.stages == ["forward", "backward", "communication", "optimizer"]
    assert any("from torch.autograd.backward" in n for n in inst.notes), inst.notes
    backward = torch.autograd.backward
    ddp_steps(an, model, opt, 3 * interval, other_backward_ms=30.0)
    if interval > 1:  # no anchor hook that torch would call in every backward
        assert not model.module.head.bias._backward_hooks
        assert torch.autograd.backward is backward  # the wrapper only on sampled steps
    c = an.counters()
    an.close()
    samples = samples_of(tmp_path)
    assert [s.step for s in samples] == list(range(0, 3 * interval, interval))
    for s in samples:
        b, comm = s.find("backward"), s.find("communication")
        assert b.calls == 1 and comm.calls == 1
        # the loss's 40 ms op and the model's own 10 ms, not the other backward's 30 ms
        assert (LOSS_MS + 10) * 0.9 <= b.ms < LOSS_MS + 10 + 30, b.ms
        assert comm.ms < LOSS_MS * 0.5, comm.ms
    assert c["unbalanced"] == 0 and c["report_errors"] == 0


def test_ddp_backward_started_without_autograd_backward_is_timed_from_the_output(
        tmp_path, one_rank_group):
    # Interval 2 under DDP: a backward that bypasses the wrapped torch.autograd.backward (a
    # reference taken before instrument()) cannot be timed from its call; the output's hook
    # begins the stage, so the loss's op is left out but the model's own backward is there.
    raw_backward = torch.autograd.backward
    an = laggard.Analyzer(enabled=True, interval=2, log_dir=str(tmp_path))
    model = nn.parallel.DistributedDataParallel(Net())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    lt.instrument(an, model=model, optimizer=opt)
    ddp_steps(an, model, opt, 4, backward=raw_backward)
    c = an.counters()
    an.close()
    samples = samples_of(tmp_path)
    assert len(samples) == 2
    for s in samples:
        b = s.find("backward")
        assert b.calls == 1 and 10 * 0.9 <= b.ms < LOSS_MS, b.ms
        assert s.find("communication").calls == 1
    assert c["unbalanced"] == 0 and c["report_errors"] == 0


def test_ddp_calls_that_never_reach_the_output_switch_to_the_output_hook(
        tmp_path, one_rank_group, caplog):
    # Interval 2 under DDP: a sampled step whose backward call never reaches the model output
    # (the output detached before the loss) is dropped; after 3 such calls in a row, the output's
    # hook alone marks the start (logged), which then times the model's backward again.
    an = laggard.Analyzer(enabled=True, interval=2, log_dir=str(tmp_path))
    model = nn.parallel.DistributedDataParallel(Net())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    lt.instrument(an, model=model, optimizer=opt)
    with caplog.at_level("INFO", logger="laggard"):
        for step in range(10):
            an.begin_step(step)
            out = model(torch.randn(4, 8))
            z = torch.randn(3, requires_grad=True)
            (z.sum() + out.detach().sum()).backward()  # not the model's
            if step >= 6:
                Delay.apply(out, LOSS_MS).pow(2).mean().backward()
            an.end_step()
    c = an.counters()
    an.close()
    assert "did not reach the model's output" in caplog.text
    samples = samples_of(tmp_path)
    assert [s.find("backward") is not None for s in samples] == [False] * 3 + [True] * 2
    for s in samples[3:]:  # from the output's gradient: the loss's op is not in it
        assert 10 * 0.9 <= s.find("backward").ms < LOSS_MS, s.find("backward").ms
    assert c["unbalanced"] == 0 and c["report_errors"] == 0


# -- the loss on a device: copied without waiting, attached once it has arrived ---------------
# laggard._deferred on the CPU: the engine's timing="manual" device (its marks complete when
# the test says so) and a fake copying side whose copies "arrive" when the test says so.

from laggard._deferred import DeferredValues  # noqa: E402


class FakeCopies:
    """CudaCopies' stand-in: start() copies the tensor as float32 (float64 for float64) into
    the slot's buffer; ready() is the slot's own flag, set by arrive() (or at once, `auto`)."""

    def __init__(self, auto=False, fail=None):
        self.auto = auto
        self.fail = fail
        self.slots = []
        self.started = 0

    @staticmethod
    def takes(t):
        return True

    def new_slot(self):
        slot = {"buf": None, "ready": False}
        self.slots.append(slot)
        return slot

    def start(self, slot, t):
        if self.fail is not None:
            raise self.fail
        src = t.detach().reshape(1)
        slot["buf"] = src.to(torch.float64 if src.dtype == torch.float64 else torch.float32,
                             copy=True)
        slot["ready"] = self.auto
        self.started += 1

    @staticmethod
    def ready(slot):
        return slot["ready"]

    @staticmethod
    def read(slot):
        return slot["buf"].tolist()[0]  # (not .item(): the tests count those)

    def arrive(self):
        for slot in self.slots:
            slot["ready"] = True


class FakeRecorder:
    """defer/resolve of a recorder: tokens 1, 2, ...; `gone` tokens resolve nothing."""

    def __init__(self, defers=True):
        self.defers = defers
        self.n = 0
        self.values = {}
        self.gone = set()

    def defer(self, name):
        if not self.defers:
            return 0
        self.n += 1
        return self.n

    def resolve(self, token, value):
        if token in self.gone:
            return False
        self.values[token] = value
        return True


class Errors:
    def __init__(self):
        self.reported = []

    def report(self, kind, e):
        self.reported.append((kind, e))


def test_deferred_values_resolve_only_what_has_arrived_and_reuse_only_resolved_slots():
    rec, dev, errors = FakeRecorder(), FakeCopies(), Errors()
    d = DeferredValues(rec.defer, rec.resolve, dev, errors, slots=4)
    for v in (1.5, 2.5, 3.5):
        assert d.record("loss", torch.tensor(v))
    assert len(d.pending) == 3 and rec.values == {}
    d.resolve_ready()  # nothing has arrived: nothing resolved, nothing waited for
    assert len(d.pending) == 3 and rec.values == {}
    second = dev.slots[1]
    second["ready"] = True
    d.resolve_ready()
    assert rec.values == {2: 2.5}
    assert [token for token, _, _ in d.pending] == [1, 3]  # still in order
    d.record("loss", torch.tensor(4.5))  # reuses the resolved slot, not a pending one
    assert len(dev.slots) == 3 and d.pending[-1][1] is second
    dev.arrive()
    rec.gone.add(1)  # its step went without it (the recorder counted it)
    d.resolve_ready()
    assert rec.values == {2: 2.5, 3: 3.5, 4: 4.5}
    assert (d.resolved, d.late) == (3, 1) and not d.pending and errors.reported == []


def test_deferred_values_full_ring_and_host_clock():
    rec, dev, errors = FakeRecorder(), FakeCopies(), Errors()
    d = DeferredValues(rec.defer, rec.resolve, dev, errors, slots=2)
    assert d.record("loss", torch.tensor(1.0)) and d.record("loss", torch.tensor(2.0))
    # Every slot still waits for the device: deferred without a copy (the recorder counts it
    # when the step goes without it), never a blocking read.
    assert d.record("loss", torch.tensor(3.0))
    assert rec.n == 3 and dev.started == 2 and d.ring_full == 1 and len(d.pending) == 2
    # A recorder that defers nothing (host clock): the caller reads the value itself.
    d2 = DeferredValues(FakeRecorder(defers=False).defer, rec.resolve, dev, errors)
    assert d2.record("loss", torch.tensor(1.0)) is False and not d2.pending


def test_deferred_values_failures_are_reported_and_their_slots_not_reused():
    rec, dev, errors = FakeRecorder(), FakeCopies(), Errors()
    d = DeferredValues(rec.defer, rec.resolve, dev, errors, slots=4)
    d.record("loss", torch.tensor(1.0))
    dev.ready = lambda slot: (_ for _ in ()).throw(RuntimeError("event query failed"))
    d.resolve_ready()  # never raises
    assert [k for k, _ in errors.reported] == ["record loss"] and not d.pending
    assert d._free == [] and d._made == 0  # the slot's state is unknown: forgotten
    dev.fail = RuntimeError("copy failed")
    with pytest.raises(RuntimeError):  # record() raises to its caller, which reports it
        d.record("loss", torch.tensor(2.0))
    assert d._made == 0 and not d.pending


def test_deferred_values_drain_polls_until_arrived_or_timeout():
    rec, dev, errors = FakeRecorder(), FakeCopies(), Errors()
    d = DeferredValues(rec.defer, rec.resolve, dev, errors)
    d.record("loss", torch.tensor(1.0))
    polls = []

    def poll():
        polls.append(1)
        if len(polls) == 3:
            dev.arrive()

    assert d.drain(5.0, poll) == 0
    assert rec.values == {1: 1.0} and len(polls) == 4
    d.record("loss", torch.tensor(2.0))  # never arrives
    t0 = time.monotonic()
    assert d.drain(0.05, poll) == 1
    assert 0.04 <= time.monotonic() - t0 < 2.0 and not d.pending


def manual_analyzer(monkeypatch, tmp_path, **kwargs):
    """An Analyzer on the engine's timing="manual" device: its marks complete once
    an._engine.debug_complete_marks(True) says so."""
    monkeypatch.setattr(laggard.Analyzer, "_choose_timing",
                        staticmethod(lambda timing, torch: ("manual", -1)))
    kwargs.setdefault("interval", 1)
    an = laggard.Analyzer(enabled=True, log_dir=str(tmp_path), resources=False, **kwargs)
    assert an.backend_name == "manual"
    an._stream = None  # no CUDA stream to set
    return an


def deferred_setup(monkeypatch, tmp_path, dev, **kwargs):
    """A manual-device analyzer, a model instrumented with record_loss, and `dev` as the loss's
    copying side (every tensor taken as a device one)."""
    monkeypatch.setattr(lt, "_is_cuda", lambda t: True)
    an = manual_analyzer(monkeypatch, tmp_path, **kwargs)
    assert an._defer_values(dev) is an._deferred
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    lt.instrument(an, model=model, optimizer=opt)
    return an, model, opt


def train_step(an, model, opt, step, losses):
    an.begin_step(step)
    opt.zero_grad()
    loss = model(torch.randn(4, 8)).pow(2).mean()
    loss.backward()
    losses[step] = loss.detach().clone()  # read after training, not here
    opt.step()
    an.end_step()


def test_instrument_attaches_a_device_loss_without_item_once_it_has_arrived(
        monkeypatch, tmp_path):
    dev = FakeCopies()
    an, model, opt = deferred_setup(monkeypatch, tmp_path, dev)
    items = []
    item = torch.Tensor.item
    monkeypatch.setattr(torch.Tensor, "item", lambda t: items.append(t) or item(t))
    losses = {}
    order = []
    begin_step = an._rec_begin_step
    an._rec_begin_step = lambda step: order.append(len(an._deferred.pending)) or begin_step(step)
    for step in range(2):  # neither the marks nor the copies are there yet
        train_step(an, model, opt, step, losses)
    assert an.counters()["samples_emitted"] == 0 and len(an._deferred.pending) == 2
    dev.arrive()
    dev.auto = True  # from now on a copy has arrived by the next poll
    an._engine.debug_complete_marks(True)
    train_step(an, model, opt, 2, losses)  # begin_step resolves both, then the recorder polls
    assert order[2] == 0  # resolved before the recorder's begin_step
    assert an.counters()["samples_emitted"] == 3  # and step 2's at its own end_step
    for step in range(3, 6):
        train_step(an, model, opt, step, losses)
    an.close()
    monkeypatch.undo()
    assert items == []  # laggard read no tensor with .item()
    samples = samples_of(tmp_path)
    assert [s.step for s in samples] == list(range(6))
    for s in samples:
        assert s.values["loss"] == losses[s.step].item(), s.step  # float32, exactly
        assert s.find("forward") is not None and s.find("optimizer") is not None
    c = an.counters()
    assert c["deferred_dropped"] == 0 and c["dropped_steps"] == 0
    assert c["report_errors"] == 0


def test_a_device_loss_that_arrives_after_the_marks_is_still_attached(monkeypatch, tmp_path):
    # Interval 2: the device backend polls in every begin_step; a complete step waits a few
    # polls for its loss.
    dev = FakeCopies()
    an, model, opt = deferred_setup(monkeypatch, tmp_path, dev, interval=2)
    an._engine.debug_complete_marks(True)
    losses = {}
    for step in range(3):
        train_step(an, model, opt, step, losses)
    assert an.counters()["samples_emitted"] == 0  # step 0 complete, waiting for its loss
    dev.arrive()
    train_step(an, model, opt, 3, losses)  # begin_step resolves, then the recorder polls
    assert an.counters()["samples_emitted"] == 2
    an.close()
    samples = samples_of(tmp_path)
    assert [s.step for s in samples] == [0, 2]
    for s in samples:
        assert s.values["loss"] == losses[s.step].item()
    assert an.counters()["deferred_dropped"] == 0


def test_a_device_loss_that_never_arrives_is_counted_and_its_sample_kept(monkeypatch, tmp_path):
    dev = FakeCopies()
    an, model, opt = deferred_setup(monkeypatch, tmp_path, dev, close_timeout_s=1.0)
    an._engine.debug_complete_marks(True)
    losses = {}
    train_step(an, model, opt, 0, losses)
    t0 = time.monotonic()
    an.close()  # polls the copy for a quarter of the bound, then the step goes without it
    assert time.monotonic() - t0 < 1.5
    assert an._deferred is not None and not an._deferred.pending
    samples = samples_of(tmp_path)
    assert len(samples) == 1 and "loss" not in samples[0].values
    assert samples[0].find("forward") is not None
    c = an.counters()
    assert c["deferred_dropped"] == 1 and c["samples_emitted"] == 1 and c["report_errors"] == 0


def test_a_device_loss_arriving_during_close_is_attached(monkeypatch, tmp_path):
    dev = FakeCopies()
    an, model, opt = deferred_setup(monkeypatch, tmp_path, dev)
    an._engine.debug_complete_marks(True)
    train_step(an, model, opt, 0, losses := {})
    calls = []
    ready = dev.ready
    dev.ready = lambda slot: calls.append(1) or len(calls) > 3 or ready(slot)
    an.close()
    assert samples_of(tmp_path)[0].values["loss"] == losses[0].item()
    assert an.counters()["deferred_dropped"] == 0


def test_a_failing_device_copy_is_counted_never_raised(monkeypatch, tmp_path):
    dev = FakeCopies(fail=RuntimeError("copy failed"))
    an, model, opt = deferred_setup(monkeypatch, tmp_path, dev)
    an._engine.debug_complete_marks(True)
    losses = {}
    for step in range(2):
        train_step(an, model, opt, step, losses)
    an.close()
    samples = samples_of(tmp_path)
    assert len(samples) == 2 and all("loss" not in s.values for s in samples)
    c = an.counters()
    assert c["report_errors"] == 2 and c["deferred_dropped"] == 2


def test_host_clock_reads_a_device_loss_with_item_as_before(monkeypatch, tmp_path):
    # The host clock's sample is emitted at end_step: nothing is deferred, the loss is read at
    # once (on a GPU, .item() syncs, as before).
    monkeypatch.setattr(lt, "_is_cuda", lambda t: True)
    an = laggard.Analyzer(enabled=True, interval=1, timing="host", log_dir=str(tmp_path),
                          resources=False)
    assert an._defer_values(FakeCopies()) is None
    model = nn.Linear(8, 1)
    lt.instrument(an, model=model)
    losses = {}
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    train_step(an, model, opt, 0, losses)
    an.close()
    assert an._deferred is None
    assert samples_of(tmp_path)[0].values["loss"] == losses[0].item()
    assert an.counters()["deferred_dropped"] == 0


def test_cuda_copies_queue_a_non_blocking_copy_then_an_event_and_reuse_their_buffer(
        monkeypatch):
    # CudaCopies over a stand-in for torch.cuda (no GPU here): what it asks of torch, in order.
    from laggard._deferred import CudaCopies

    log = []

    class Event:
        def record(self, stream):
            log.append(("record", stream))

        def query(self):
            log.append("query")
            return True

    cuda = types.SimpleNamespace(Event=Event, current_stream=lambda device: ("stream", device))

    def empty(*shape, dtype, pin_memory):
        log.append(("pinned", dtype, pin_memory))
        return torch.empty(*shape, dtype=dtype)

    fake_torch = types.SimpleNamespace(float32=torch.float32, float64=torch.float64,
                                       empty=empty, cuda=cuda)
    copy_ = torch.Tensor.copy_
    monkeypatch.setattr(torch.Tensor, "copy_", lambda self, src, non_blocking=False: (
        log.append(("copy", non_blocking)), copy_(self, src, non_blocking))[1])
    cc = CudaCopies(fake_torch)
    slot = cc.new_slot()
    w = torch.tensor(1.5, dtype=torch.bfloat16, requires_grad=True)
    cc.start(slot, w * 2)  # a bf16 loss with a graph: copied as float32
    assert log == [("pinned", torch.float32, True), ("copy", True),
                   ("record", ("stream", torch.device("cpu")))]
    assert cc.ready(slot) and cc.read(slot) == 3.0
    buffer, event = slot.buffer, slot.event
    log.clear()
    cc.start(slot, torch.tensor([[0.1]]))  # float32, shape (1, 1): the same buffer and event
    assert log == [("copy", True), ("record", ("stream", torch.device("cpu")))]
    assert slot.buffer is buffer and slot.event is event
    assert cc.read(slot) == torch.tensor(0.1).item()
    cc.start(slot, torch.tensor(0.1, dtype=torch.float64))  # float64: a float64 buffer
    assert slot.buffer.dtype == torch.float64 and cc.read(slot) == 0.1
