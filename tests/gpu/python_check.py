"""GPU check of the Python layer: CUDA-event sections through laggard.Analyzer, on a real GPU.

    PYTHONPATH=python python3 tests/gpu/python_check.py      # exit 0 ok, 1 failed, 77 skipped

Needs PyTorch with CUDA. Checks that the Analyzer picks the "cuda-event" backend, that sections
around known GPU work report device time in the expected ratio, that laggard.torch.instrument
yields forward/backward/optimizer on a CUDA model, and that nothing in laggard calls
torch.cuda.synchronize / Event.synchronize / Stream.synchronize, nor Tensor.item on a CUDA
tensor (counted; the script's own final synchronize and its reads of the losses happen after
the count stops). Also that at interval 1 every sample carries the loss (instrument copies it to
the host without a sync and attaches it once its event has completed), equal to float32
precision to the loss the script computed, none of them lost (deferred_dropped 0), and the
resource readings of the GPU (laggard.resources: the allocator's, and NVML's where pynvml
imports).

The loop keeps the host at most AHEAD steps ahead of the device, as a training loop's own reads
or data loading do: it polls an event of its own (Event.query, no synchronize) before starting
a step. Without any such wait the host would queue all 20 steps while the device is on the first
and the recorder, which keeps max_pending_steps (4) steps waiting for their events, would drop
the oldest (counted, dropped_steps).
"""

import math
import os
import sys
import tempfile

try:
    import torch
except ImportError:
    print("skip: no torch")
    sys.exit(77)
if not torch.cuda.is_available():
    print("skip: torch.cuda.is_available() is False")
    sys.exit(77)

import laggard  # noqa: E402
import laggard.resources  # noqa: E402
import laggard.torch  # noqa: E402

syncs = []
AHEAD = 2  # steps the host may run ahead of the device (the script's own pacing, see above)
STEPS = 20


def counting(name, fn):
    def wrapped(*a, **k):
        syncs.append(name)
        return fn(*a, **k)
    return wrapped


def main():
    torch.cuda.set_device(0)
    failures = []
    log_dir = tempfile.mkdtemp(prefix="laggard-gpu-")
    # resources read every 50 ms: the 20 steps take well under the automatic period's 1 s
    an = laggard.Analyzer(enabled=True, interval=1, timing="cuda", log_dir=log_dir,
                          resources_period_s=0.05)
    print("backend:", an.backend_name)
    if an.backend_name != "cuda-event":
        failures.append("backend is %r, expected 'cuda-event'" % an.backend_name)

    model = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.ReLU(),
                                torch.nn.Linear(4096, 4096)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    laggard.torch.instrument(an, model=model, optimizer=opt)
    a = torch.randn(4096, 4096, device="cuda")
    x = torch.randn(256, 4096, device="cuda")

    originals = (torch.cuda.synchronize, torch.cuda.Event.synchronize,
                 torch.cuda.Stream.synchronize, torch.Tensor.item)
    torch.cuda.synchronize = counting("torch.cuda.synchronize", originals[0])
    torch.cuda.Event.synchronize = counting("Event.synchronize", originals[1])
    torch.cuda.Stream.synchronize = counting("Stream.synchronize", originals[2])
    plain_item = originals[3]

    def item(t):
        if t.is_cuda:  # a device sync: laggard's if a laggard frame is on the stack
            f = sys._getframe(1)
            while f is not None and not f.f_globals.get("__name__", "").startswith("laggard"):
                f = f.f_back
            if f is not None:
                syncs.append("Tensor.item on a CUDA tensor (%s:%d)" % (f.f_code.co_filename,
                                                                       f.f_lineno))
            else:
                print("note: Tensor.item on a CUDA tensor outside laggard (not counted)")
        return plain_item(t)

    torch.Tensor.item = item
    losses = []  # the script's own: the loss tensors, read after training
    done = []  # the script's own event after each step (its pacing)
    try:
        for step in range(STEPS):
            while step >= AHEAD and not done[step - AHEAD].query():
                pass  # polls its own event: no synchronize
            an.begin_step(step)
            with an.section("matmul_x8"):
                for _ in range(8):
                    a @ a
            with an.section("matmul_x2"):
                for _ in range(2):
                    a @ a
            loss = model(x).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            an.end_step()
            losses.append(loss.detach())
            done.append(torch.cuda.Event())
            done[-1].record()
    finally:
        counted = list(syncs)
        (torch.cuda.synchronize, torch.cuda.Event.synchronize, torch.cuda.Stream.synchronize,
         torch.Tensor.item) = originals
    torch.cuda.synchronize()  # ours, after counting: the samples can complete now
    an.close()
    want = [l.item() for l in losses]  # float32 losses, read after training
    if counted:
        failures.append("synchronizing calls during training: %s" % counted)

    windows, stats = laggard.read_run(log_dir)
    counters = an.counters()
    print("samples:", stats["samples"], "counters:", counters)
    if stats["samples"] < 15:
        failures.append("only %d of %d samples arrived" % (stats["samples"], STEPS))
    if counters.get("deferred_dropped") != 0:  # (a failure of the copy: report_errors too)
        failures.append("counters()['deferred_dropped'] is %r, expected 0: losses lost" %
                        counters.get("deferred_dropped"))
    if counters.get("samples_emitted", 0) + counters.get("dropped_steps", 0) != STEPS:
        failures.append("samples_emitted + dropped_steps = %r, expected %d" % (
            counters.get("samples_emitted", 0) + counters.get("dropped_steps", 0), STEPS))
    # the loss of every sample: instrument's copy without a sync, the script's own value
    missing_loss, wrong_loss = [], []
    for step, samples in windows:
        got = samples[0].values.get("loss")
        if got is None:
            missing_loss.append(step)
        elif not math.isclose(got, want[step], rel_tol=2.0 ** -22, abs_tol=1e-30):
            wrong_loss.append((step, got, want[step]))
    print("losses: %d samples, %d without the loss, %d different from the script's" % (
        len(windows), len(missing_loss), len(wrong_loss)))
    if missing_loss:
        failures.append("samples without the loss at steps %s" % missing_loss)
    if wrong_loss:
        failures.append("losses differ from the script's (step, sample, script): %s" %
                        wrong_loss[:5])
    ratios = []
    for step, samples in windows:
        s = samples[0]
        big, small = s.find("matmul_x8"), s.find("matmul_x2")
        names = [t.name for t in s.stages]
        print(step, " ".join("%s=%.3f" % (t.name, t.ms) for t in s.stages))
        if big and small and small.ms > 0:
            ratios.append(big.ms / small.ms)
        for stage in ("forward", "backward", "optimizer"):
            if stage not in names:
                failures.append("step %d: no %s stage" % (step, stage))
    # the loss (instrument) and the GPU's resource readings (laggard.resources)
    nvml = laggard.resources._import_pynvml() is not None
    last = windows[-1][1][0] if windows else None
    if last is not None:
        print("values:", last.values)
        print("resources:", last.resources)
        if "loss" not in last.values:
            failures.append("no loss in the last sample's values")
        want = ["cuda_allocated_mib", "cuda_reserved_mib", "host_gc_pause_ms"]
        if nvml:
            want += ["gpu_sm_clock_mhz", "gpu_sm_clock_max_mhz", "gpu_throttle_reasons",
                     "gpu_mem_used_mib", "gpu_mem_total_mib"]
        missing = [n for n in want if n not in last.resources]
        if missing:
            failures.append("resource readings missing from the last sample: %s" % missing)
        elif last.resources["cuda_allocated_mib"] <= 0:
            failures.append("cuda_allocated_mib %r with a model on the GPU" %
                            last.resources["cuda_allocated_mib"])
        if nvml and last.resources.get("gpu_mem_total_mib", 0) <= 0:
            failures.append("gpu_mem_total_mib is not positive")
    ratios.sort()
    median = ratios[len(ratios) // 2] if ratios else 0.0
    print("matmul_x8 / matmul_x2 median ratio: %.2f" % median)
    if not 3.0 <= median <= 5.0:
        failures.append("device-time ratio %.2f, expected about 4" % median)
    for f in failures:
        print("FAILED:", f)
    print("OK" if not failures else "FAILED")
    return 1 if failures else 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
