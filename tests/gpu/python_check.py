"""GPU check of the Python layer: CUDA-event sections through laggard.Analyzer, on a real GPU.

    PYTHONPATH=python python3 tests/gpu/python_check.py      # exit 0 ok, 1 failed, 77 skipped

Needs PyTorch with CUDA. Checks that the Analyzer picks the "cuda-event" backend, that sections
around known GPU work report device time in the expected ratio, that laggard.torch.instrument
yields forward/backward/optimizer on a CUDA model, and that nothing in laggard calls
torch.cuda.synchronize / Event.synchronize / Stream.synchronize (counted; the script's own final
synchronize happens after the count stops; the loss's .item() that instrument makes on sampled
steps is not such a call). Also that the samples carry the loss and the resource readings of
the GPU (laggard.resources: the allocator's, and NVML's where pynvml imports).
"""

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
                 torch.cuda.Stream.synchronize)
    torch.cuda.synchronize = counting("torch.cuda.synchronize", originals[0])
    torch.cuda.Event.synchronize = counting("Event.synchronize", originals[1])
    torch.cuda.Stream.synchronize = counting("Stream.synchronize", originals[2])
    try:
        for step in range(20):
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
    finally:
        counted = list(syncs)
        torch.cuda.synchronize, torch.cuda.Event.synchronize, torch.cuda.Stream.synchronize = \
            originals
    torch.cuda.synchronize()  # ours, after counting: the samples can complete now
    an.close()
    if counted:
        failures.append("synchronizing calls during training: %s" % counted)

    windows, stats = laggard.read_run(log_dir)
    print("samples:", stats["samples"], "counters:", an.counters())
    if stats["samples"] < 15:
        failures.append("only %d of 20 samples arrived" % stats["samples"])
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
