"""What one call costs on a training thread, right after a training step has evicted the caches.

    PYTHONPATH=python OMP_NUM_THREADS=1 /usr/bin/python3 bench/cold_calls.py [--rounds 300]

A call that takes 0.1-0.5 µs in a loop (bench/python_overhead.py) takes microseconds when it
comes right after a training step: the step's tensors have pushed the interpreter's and the
extension's code and data out of the CPU caches. The sampled step of laggard makes about ten such
calls, so this is the cost that decides its overhead (bench/overhead.py). For each kind of call
below, every round runs one small training step (bench/cold_timing.py) and then times one call;
kinds take turns round by round, in an order shuffled every round, so that drift of a shared
machine and what the previous call left warm hit all of them alike. Printed: the median over
rounds, and that median minus the empty Python call's (the timer and a call of a Python
function, cold).

The tensor-hook kinds are timed between the forward and the backward (on the step's output,
as laggard.torch's forward hook does), all others after the optimizer step.
"""

import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
sys.path.insert(0, HERE)
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

import cold_timing  # noqa: E402
from laggard import _core  # noqa: E402
import laggard.torch as ltorch  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=300, help="timed calls per kind (300)")
    p.add_argument("--dims", default=cold_timing.DIMS, help="MLP layer sizes (%s)" %
                   cold_timing.DIMS)
    a = p.parse_args(argv)
    train = cold_timing.training_step(a.dims)
    model, opt, x, y, mse = train.model, train.opt, train.x, train.y, train.loss
    nn = torch.nn

    # The Analyzer's engine (no side channel): its recorder, whose samples go into its ring.
    rec = _core.Engine(interval=1, transport="", queue_capacity=64)
    sid = rec.stage("forward")
    mark_begin, mark_end = rec.marks(sid)
    begin_step, end_step, _ = rec.step_calls()
    scope = rec.section(sid)
    step_no = [0]

    def grad_hook(grad):
        return None

    add_hook = ltorch._tensor_hook_registrar(torch, grad_hook)

    def empty():
        pass

    # Attaching two hooks to the model for a sampled step and detaching them after it: through
    # torch's public calls, and with laggard's HookSwitch (dict stores; keys from one public
    # registration, as laggard.torch makes them).
    def hook_fn(*args):
        return None

    def public_attach_detach():
        a = model.register_forward_pre_hook(hook_fn)
        b = model.register_forward_hook(hook_fn)
        a.remove()
        b.remove()

    entries = []
    for register, attr in ((model.register_forward_pre_hook, "_forward_pre_hooks"),
                           (model.register_forward_hook, "_forward_hooks")):
        entry = ltorch._switch_entry(model, register, attr, hook_fn)
        assert entry is not None, "this torch's hook dicts are not where laggard expects them"
        entries.append(entry)
    switch = _core.HookSwitch(entries)

    def switch_on_off():
        switch.on()
        switch.off()

    # Module.__call__ of a module whose forward does nothing: without hooks (torch's fast path),
    # with a forward pre-hook and a forward hook (its hook loops), and with laggard.torch's
    # forward wrapper in the instance instead (the hooks' work: a mark before and a Python
    # function after, as laggard.torch does it).
    class Tiny(nn.Module):
        def forward(self, t):
            return t

    plain, hooked, wrapped = Tiny(), Tiny(), Tiny()
    wrap_hooks = {"forward_pre": mark_begin, "forward": lambda output: mark_end()}
    hooked.register_forward_pre_hook(wrap_hooks["forward_pre"])
    hooked.register_forward_hook(lambda module, inputs, output: wrap_hooks["forward"](output))
    d, key, value, bind = ltorch._ForwardCall(wrapped, "forward", wrap_hooks).entry()
    d[key] = value  # in place for good, as with interval 1

    def with_scope():
        with scope:
            pass

    def pybind_step():
        rec.begin_step(step_no[0])
        rec.end_step()

    def builtin_step():
        begin_step(step_no[0])
        end_step()

    # (name, call, takes the step's output)
    kinds = [
        ("empty Python function call (reference)", empty, False),
        ("pybind11 method: Recorder.begin(id)", lambda: rec.begin(sid), False),
        ("builtin mark: Recorder.marks(id)[0]()", mark_begin, False),
        ("section: with Recorder.section(id)", with_scope, False),
        ("pybind11: Recorder.begin_step + end_step", pybind_step, False),
        ("builtins: Recorder.step_calls()", builtin_step, False),
        ("torch: 2 module hooks registered + removed", public_attach_detach, False),
        ("HookSwitch: on() + off() of the same 2", switch_on_off, False),
        ("Module call, no hooks (torch's fast path)", lambda: plain(x), False),
        ("Module call with a forward pre-hook + hook", lambda: hooked(x), False),
        ("Module call with laggard's forward wrapper", lambda: wrapped(x), False),
        ("grad_fn of the output (its Python object)", lambda out: out.grad_fn, True),
        ("Tensor.register_hook on the output", lambda out: out.register_hook(grad_hook), True),
        ("laggard.torch's hook registrar", add_hook, True),
    ]
    times = {name: [] for name, _, _ in kinds}
    pc = time.perf_counter_ns
    for counted, (name, call, on_output) in cold_timing.shuffled_rounds(kinds, a.rounds, 10):
        step_no[0] += 1
        opt.zero_grad(set_to_none=True)
        out = model(x)
        if on_output:
            t0 = pc()
            call(out)
            t = pc() - t0
        mse(out, y).backward()
        opt.step()
        if not on_output:
            t0 = pc()
            call()
            t = pc() - t0
        if counted:  # warm-up rounds not counted
            times[name].append(t)
    base = statistics.median(times[kinds[0][0]])
    print("cold calls after a training step (bench/cold_calls.py): %d rounds, MLP %s, "
          "torch %s, load %s" % (a.rounds, a.dims, torch.__version__, cold_timing.load()))
    print("%-44s %12s %14s" % ("call", "median ns", "minus empty"))
    for name, _, _ in kinds:
        m = statistics.median(times[name])
        print("%-44s %12.0f %14s" % (name, m, "-" if name == kinds[0][0] else "%+.0f" % (m - base)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
