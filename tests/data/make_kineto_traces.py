#!/usr/bin/env python3
"""Writes a directory of per-rank PyTorch profiler (Kineto) traces of a simulated DDP job on GPUs.

Deterministic (the same arguments give the same bytes). Each rank's trace has what a real one
has: ProfilerStep#N annotations, the DataLoader's and the optimizer's annotations, DDP's forward,
backward ops on an autograd thread, cudaLaunchKernel / cudaMemcpyAsync calls with their
correlation ids and ac2g flows, kernels on a compute stream, a host-to-device copy per step, and
NCCL all-reduce kernels on a communication stream with their collective args. The ranks are
simulated together, so that a collective's kernels end at the same moment on every rank: a rank
that arrives late makes the others' NCCL kernels long (they wait inside them).

Faults: --slow-rank R --slow-stage forward|backward|optimizer --slowdown X (that rank's kernels of
the stage run X times longer), --data-stall-rank R --data-stall-ms MS (its DataLoader takes MS
more), --launch-bound-rank R (its host takes 0.6 ms per launch call, longer than a kernel
runs), each from --fault-from-step on.

Format variants: --variant kineto (PyTorch 2.x: cat kernel/gpu_memcpy/cuda_runtime, ts in us as
numbers with 3 decimals, pretty-printed), legacy (PyTorch 1.x names: Kernel/Memcpy/Runtime,
async_gpu flows, integer ts, no gpu_user_annotation), strings (ts, dur, pid and tid as strings,
one event per line); --no-distributed-info (rank from the file name only); --gzip;
--nccl-kernel legacy (ncclKernel_* names of NCCL before 2.19).

  python3 tests/data/make_kineto_traces.py OUT_DIR [--ranks 4] [--steps 12] [--ranks-per-host 8]
"""
import argparse
import gzip
import json
import os
import random

KERNELS = {
    "forward": [
        "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>("
        "cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4::Params)",
        "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl("
        "at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::"
        "{lambda()#2}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2> >"
        "(int, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)"
        "::{lambda()#2}::operator()() const::{lambda()#2}::operator()() const::{lambda(float)#1}"
        ", at::detail::Array<char*, 2>)",
        "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>"
        "(int, float, float const*, float const*, float const*, float*, float*, float*)",
    ],
    "backward": [
        "ampere_sgemm_128x64_nt",
        "void at::native::vectorized_elementwise_kernel<4, at::native::GeluBackwardCUDAKernelImpl"
        "(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::"
        "{lambda()#2}::operator()() const::{lambda(float, float)#1}, at::detail::Array<char*, 3> >"
        "(int, at::native::GeluBackwardCUDAKernelImpl(at::TensorIteratorBase&, "
        "at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#2}::operator()() const"
        "::{lambda(float, float)#1}, at::detail::Array<char*, 3>)",
        "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, "
        "at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::"
        "operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4> >"
        "(at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor"
        "<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, "
        "unsigned int, float, 4>)",
    ],
    "optimizer": [
        "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::"
        "(anonymous namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::"
        "FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, float*, double, double, "
        "double, double, double, bool, float*, float*>(at::native::(anonymous namespace)::"
        "TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, "
        "(at::native::ADAM_MODE)1, false>, float*, double, double, double, double, double, bool, "
        "float*, float*)",
    ],
}
NCCL_KERNELS = {
    "dev": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",  # >= 2.19
    "legacy": "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
}
CPU_OPS = {"forward": ["aten::linear", "aten::gelu", "aten::layer_norm"],
           "optimizer": ["aten::_fused_adamw_"]}
BACKWARD_OPS = ["MmBackward0", "GeluBackward0", "SumBackward0"]


class Rank:
    def __init__(self, rank, args, rng):
        self.rank = rank
        self.args = args
        self.rng = rng
        self.pid = 4000 + rank
        self.main = self.pid
        self.autograd = self.pid + 17
        host = rank // args.ranks_per_host
        self.host = "node-%d" % host
        # Every host has its own clock: laggard must not compare timestamps across ranks.
        self.clock = 1700000000000000.0 + host * 1234.567
        self.t = self.clock  # the host's time (us)
        self.gpu = self.clock  # compute stream free from
        self.comm = self.clock  # communication stream free from
        self.corr = 1000
        self.ext = 1
        self.host_events = []
        self.gpu_events = []  # (launch thread, [events]) in launch order
        self.gpu_annotations = []

    def jitter(self, us):
        return us * (1.0 + self.rng.uniform(-0.02, 0.02))

    def faulty(self, step, what):
        a = self.args
        if step < a.fault_from_step:
            return False
        return getattr(a, what) == self.rank

    def span(self, cat, name, tid, ts, dur, args=None):
        e = {"ph": "X", "cat": cat, "name": name, "pid": self.pid, "tid": tid, "ts": ts,
             "dur": dur}
        a = {"External id": self.ext}
        self.ext += 1
        if args:
            a.update(args)
        e["args"] = a
        self.host_events.append(e)
        return e

    def launch(self, tid, kind, name, dur, stream=7, earliest=None, nccl_args=None, step=0):
        """A launch call on host thread tid now, and its device activity."""
        legacy = self.args.variant == "legacy"
        cost = 5.0 if kind != "memcpy" else 9.0
        if self.faulty(step, "launch_bound_rank"):
            cost = 600.0  # a starved host: longer per launch than a kernel runs
        cost = self.jitter(cost)
        self.corr += 1
        corr = self.corr
        api = {"kernel": "cudaLaunchKernel", "memcpy": "cudaMemcpyAsync",
               "nccl": "cudaLaunchKernelExC"}[kind]
        rt = {"ph": "X", "cat": "Runtime" if legacy else "cuda_runtime", "name": api,
              "pid": self.pid, "tid": tid, "ts": self.t, "dur": cost,
              "args": {"External id": self.ext, "cbid": 211, "correlation": corr}}
        launch_end = self.t + cost
        self.t = launch_end + self.jitter(3.0)  # the host's own overhead between ops
        free = self.comm if stream == 20 else self.gpu
        start = max(free, launch_end + 2.0, earliest or 0.0)
        dev_cat = {"kernel": "kernel", "nccl": "kernel", "memcpy": "gpu_memcpy"}[kind]
        if legacy:
            dev_cat = {"kernel": "Kernel", "gpu_memcpy": "Memcpy"}[dev_cat]
        dev = {"ph": "X", "cat": dev_cat, "name": name, "pid": 0, "tid": stream, "ts": start,
               "dur": dur, "args": {"External id": self.ext, "queued": 0, "device": 0,
                                    "context": 1, "stream": stream, "correlation": corr}}
        if kind == "memcpy":
            dev["args"]["bytes"] = 4 << 20
        if nccl_args:
            dev["args"].update(nccl_args)
        flow_cat = "async_gpu" if legacy else "ac2g"
        flows = [{"ph": "f", "id": corr, "pid": 0, "tid": stream, "ts": start, "cat": flow_cat,
                  "name": flow_cat, "bp": "e"},
                 {"ph": "s", "id": corr, "pid": self.pid, "tid": tid, "ts": rt["ts"],
                  "cat": flow_cat, "name": flow_cat}]
        # Kineto writes the device record, its flow end, the runtime call, its flow start.
        self.gpu_events.append((tid, [dev, flows[0], rt, flows[1]]))
        if stream == 20:
            self.comm = start + dur
        else:
            self.gpu = start + dur
        return dev

    def kernels(self, stage, count, base_us, step, tid, ops):
        slow = self.args.slowdown if (self.faulty(step, "slow_rank") and
                                      self.args.slow_stage == stage) else 1.0
        names = KERNELS[stage]
        for i in range(count):
            op_start = self.t
            self.t += self.jitter(2.0)
            self.launch(tid, "kernel", names[i % len(names)], self.jitter(base_us * slow),
                        step=step)
            self.span("cpu_op", ops[i % len(ops)], tid, op_start, self.t - op_start)


def simulate(args, after_step):
    """Runs the job; after_step(ranks) takes (and clears) each step's events."""
    rng = random.Random(args.seed)
    ranks = [Rank(r, args, random.Random(args.seed * 1000 + r)) for r in range(args.ranks)]
    first = args.first_step
    for i in range(args.steps):
        step = first + i
        starts = {}
        for r in ranks:
            starts[r.rank] = r.t
            d = r.jitter(1500.0)
            if r.faulty(i, "data_stall_rank"):
                d += args.data_stall_ms * 1000.0
            r.span("user_annotation",
                   "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", r.main, r.t, d)
            r.t += d + r.jitter(6.0)
            op = r.t
            r.launch(r.main, "memcpy", "Memcpy HtoD (Pinned -> Device)", r.jitter(300.0), step=i)
            r.span("cpu_op", "aten::copy_", r.main, op, r.t - op)
            f0, g0 = r.t, max(r.gpu, r.t)
            r.kernels("forward", args.kernels, 400.0, i, r.main, CPU_OPS["forward"])
            r.span("user_annotation", "DistributedDataParallel.forward", r.main, f0, r.t - f0)
            r.gpu_annotations.append(("DistributedDataParallel.forward", g0, r.gpu))
            r.b0 = r.t
            r.t += 20.0  # the autograd thread takes over
        # Backward in two halves, each ending with a gradient bucket's all-reduce.
        for bucket in range(2):
            arrivals = {}
            for r in ranks:
                for k in range(args.kernels):
                    ev = r.t
                    r.t += r.jitter(3.0)
                    op = BACKWARD_OPS[k % len(BACKWARD_OPS)]
                    r.launch(r.autograd, "kernel", KERNELS["backward"][k % 3],
                             r.jitter(500.0 * (args.slowdown if (r.faulty(i, "slow_rank") and
                                                                 args.slow_stage == "backward")
                                               else 1.0)), step=i)
                    r.span("cpu_op", "autograd::engine::evaluate_function: " + op, r.autograd,
                           ev, r.t - ev)
                a0 = r.t
                # The all-reduce cannot start before the bucket's gradients are computed.
                r.pending = r.launch(
                    r.autograd, "nccl", NCCL_KERNELS[args.nccl_kernel], 0.0, stream=20, earliest=r.gpu, step=i,
                    nccl_args={"Collective name": "allreduce", "In msg nelems": 6637568 - bucket,
                               "Out msg nelems": 6637568 - bucket, "Group size": args.ranks,
                               "dtype": "Float", "In split size": "[]", "Out split size": "[]",
                               "Process Group Name": "0",
                               "Process Group Description": "default_pg",
                               "Process Group Ranks": str(list(range(args.ranks)))})
                r.span("user_annotation", "nccl:all_reduce", r.autograd, a0, r.t - a0)
                # Arrival measured from this rank's own step start: clocks differ across hosts.
                arrivals[r.rank] = r.pending["ts"] - starts[r.rank]
            transfer = 2500.0 * rng.uniform(0.99, 1.01)
            latest = max(arrivals.values())
            for r in ranks:
                end = starts[r.rank] + latest + transfer
                r.pending["dur"] = end - r.pending["ts"]
                r.comm = end
        for r in ranks:
            r.span("user_annotation", "## backward ##", r.main, r.b0, r.t - r.b0)
            r.t = max(r.t, r.b0) + 10.0
            o0 = r.t
            # The optimizer waits for the all-reduce (stream wait event).
            r.gpu = max(r.gpu, r.comm)
            r.kernels("optimizer", max(1, args.kernels // 4), 300.0, i, r.main,
                      CPU_OPS["optimizer"])
            r.span("user_annotation", "Optimizer.step#AdamW.step", r.main, o0, r.t - o0)
            z0 = r.t
            r.t += r.jitter(30.0)
            r.span("user_annotation", "Optimizer.zero_grad#AdamW.zero_grad", r.main, z0,
                   r.t - z0)
            # loss.item(): the host waits for the device.
            r.t = max(r.t, r.gpu) + 50.0
            r.span("user_annotation", "ProfilerStep#%d" % step, r.main, starts[r.rank],
                   r.t - starts[r.rank])
            r.t += 40.0  # prof.step()
        after_step(ranks)
    return ranks


def fmt(v, variant):
    if isinstance(v, float):
        if variant == "legacy":
            return str(int(round(v)))
        text = "%.3f" % v
        return '"%s"' % text if variant == "strings" else text
    return json.dumps(v)


def event_text(e, variant):
    e = dict(e)
    for k in ("ts", "dur"):
        if k in e and not isinstance(e[k], float):
            e[k] = float(e[k])
    if variant == "strings":
        e["pid"] = str(e["pid"])
        e["tid"] = str(e["tid"])
    parts = []
    for k, v in e.items():
        if k == "args":
            continue
        parts.append('"%s": %s' % (k, fmt(v, variant) if k in ("ts", "dur") else json.dumps(v)))
    if variant == "strings":
        body = ", ".join(parts)
        if "args" in e:
            body += ', "args": ' + json.dumps(e["args"])
        return "{" + body + "}"
    text = "  {\n    " + ", ".join(parts)
    if "args" in e:
        text += ",\n    \"args\": {\n      " + ",\n      ".join(
            '"%s": %s' % (k, json.dumps(v)) for k, v in e["args"].items()) + "\n    }"
    return text + "\n  }"


class Writer:
    """Streams one rank's trace in Kineto's layout: every host event, then the device records
    (the main thread's launches, then the autograd thread's), then the device-side annotations
    and metadata. The parts go to temporary files as the steps are simulated, so that memory
    does not grow with the trace."""

    def __init__(self, r, args, out_dir):
        self.r, self.args, self.out_dir = r, args, out_dir
        self.parts = [open(os.path.join(out_dir, ".rank-%d.%s" % (r.rank, n)), "w+")
                      for n in ("host", "main", "autograd")]
        self.first = [True, True, True]

    def put(self, i, events):
        v = self.args.variant
        for e in events:
            if not self.first[i]:
                self.parts[i].write(",\n")
            self.first[i] = False
            self.parts[i].write(event_text(e, v))

    def step(self):
        r = self.r
        events = sorted(r.host_events, key=lambda e: (e["ts"], -e["dur"]))
        if self.args.variant == "legacy":
            for e in events:
                if e["cat"] == "cpu_op":
                    e["cat"] = "Operator"
        self.put(0, events)
        for tid, group in r.gpu_events:
            self.put(1 if tid == r.main else 2, group)
        r.host_events, r.gpu_events = [], []

    def close(self):
        r, args = self.r, self.args
        variant = args.variant
        tail = []
        if variant != "legacy":
            for name, s, e in r.gpu_annotations:
                tail.append({"ph": "X", "cat": "gpu_user_annotation", "name": name, "pid": 0,
                             "tid": 7, "ts": s, "dur": e - s, "args": {"External id": 0}})
        tail.append({"name": "process_name", "ph": "M", "ts": r.clock, "pid": r.pid, "tid": 0,
                     "args": {"name": "python"}})
        tail.append({"name": "thread_name", "ph": "M", "ts": r.clock, "pid": r.pid,
                     "tid": r.autograd,
                     "args": {"name": "thread %d (pt_autograd_0)" % r.autograd}})
        head = ['"schemaVersion": 1',
                '"deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", '
                '"totalGlobalMem": 85045315584, "computeMajor": 9, "computeMinor": 0, '
                '"numSms": 132}]']
        if not args.no_distributed_info:
            head.append('"distributedInfo": ' + json.dumps(
                {"backend": "nccl", "rank": r.rank, "world_size": args.ranks, "pg_count": 1,
                 "pg_config": [{"pg_name": "0", "pg_desc": "default_pg",
                                "backend_config": "cuda:nccl", "pg_size": args.ranks,
                                "ranks": list(range(args.ranks))}],
                 "nccl_version": "2.21.5"}))
        head.append('"host_name": "%s"' % r.host)
        name = "rank-%d.json" % r.rank
        path = os.path.join(self.out_dir, name)
        if args.gzip:
            raw = open(path + ".gz", "wb")
            # mtime 0: the same bytes every time.
            out = gzip.GzipFile(filename=name, mode="wb", fileobj=raw, mtime=0)
            write = lambda text: out.write(text.encode())  # noqa: E731
        else:
            raw = out = open(path, "w")
            write = out.write
        write("{\n  " + ",\n  ".join(head) + ',\n  "traceEvents": [\n')
        wrote = False
        for f in self.parts:
            f.flush()
            f.seek(0)
            chunk = f.read(1 << 20)
            if chunk and wrote:
                write(",\n")
            while chunk:
                write(chunk)
                wrote = True
                chunk = f.read(1 << 20)
            f.close()
            os.unlink(f.name)
        for e in tail:
            write((",\n" if wrote else "") + event_text(e, variant))
            wrote = True
        write('\n  ],\n  "traceName": "rank-%d.json", "displayTimeUnit": "ms", '
              '"baseTimeNanoseconds": 1700000000000000000\n}\n' % r.rank)
        out.close()
        if raw is not out:
            raw.close()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out_dir")
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--first-step", type=int, default=10)
    p.add_argument("--kernels", type=int, default=12, help="kernels per stage half")
    p.add_argument("--ranks-per-host", type=int, default=8)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--slow-stage", default="forward", choices=["forward", "backward", "optimizer"])
    p.add_argument("--slowdown", type=float, default=1.3)
    p.add_argument("--data-stall-rank", type=int, default=-1)
    p.add_argument("--data-stall-ms", type=float, default=8.0)
    p.add_argument("--launch-bound-rank", type=int, default=-1)
    p.add_argument("--fault-from-step", type=int, default=0, help="index of the first faulty step")
    p.add_argument("--variant", default="kineto", choices=["kineto", "legacy", "strings"])
    p.add_argument("--no-distributed-info", action="store_true")
    p.add_argument("--gzip", action="store_true")
    p.add_argument("--nccl-kernel", default="dev", choices=sorted(NCCL_KERNELS),
                   help="NCCL's kernel names: dev (ncclDevKernel_*, NCCL >= 2.19) or legacy")
    args = p.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    writers = {}

    def after_step(ranks):
        for r in ranks:
            if r.rank not in writers:
                writers[r.rank] = Writer(r, args, args.out_dir)
            writers[r.rank].step()

    simulate(args, after_step)
    for w in writers.values():
        w.close()


if __name__ == "__main__":
    main()
