"""laggard's reports in TensorBoard, MLflow and Prometheus: sinks on the Analyzer. 2 ranks under
torchrun (gloo, CPU); LAGGARD_EXAMPLE_SLOW_RANK=1 makes rank 1's data loading slower. Afterwards
rank 0 reads the verdict back from each tracker.

    LAGGARD_EXAMPLE_SLOW_RANK=1 torchrun --nproc-per-node 2 examples/docs/trackers.py --out DIR
"""
import argparse
import os
import time
import urllib.request

import torch
import torch.distributed as dist
import torch.nn as nn

import laggard
import laggard.torch
from laggard.sinks import MLflowSink, PrometheusSink, TensorBoardSink

parser = argparse.ArgumentParser()
parser.add_argument("--out", required=True)
args = parser.parse_args()
dist.init_process_group("gloo")
rank = dist.get_rank()
slow = os.environ.get("LAGGARD_EXAMPLE_SLOW_RANK") == str(rank)

tensorboard = TensorBoardSink(os.path.join(args.out, "tb"))
mlflow = MLflowSink(tracking_uri="sqlite:///" + os.path.join(args.out, "mlflow.db"))
prometheus = PrometheusSink(port=0)  # a free port on 127.0.0.1; port=9400 in a real job
an = laggard.Analyzer(sinks=[tensorboard, mlflow, prometheus])

model = nn.parallel.DistributedDataParallel(nn.Linear(32, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
laggard.torch.instrument(an, model=model, optimizer=optimizer)
x, y = torch.randn(16, 32), torch.randn(16, 1)
for step in range(120):
    an.begin_step(step)
    with an.section("dataloader"):
        time.sleep(0.060 if slow else 0.010)  # a stand-in for loading this rank's batch
    optimizer.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
    an.end_step()
if rank == 0:  # Prometheus serves the latest report while the job runs
    deadline, found = time.monotonic() + 30, []
    while not found and time.monotonic() < deadline:
        time.sleep(0.5)
        if prometheus.port:  # the server starts at the first report; port=0 took a free one
            url = "http://127.0.0.1:%d/metrics" % prometheus.port
            page = urllib.request.urlopen(url, timeout=10).read().decode()
            found = [s for s in page.splitlines() if s.startswith("laggard_confirmed_straggler{")]
    print("prometheus:", found)
dist.barrier()
an.close()

if rank == 0:
    from mlflow.tracking import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(os.path.join(args.out, "tb"))
    events.Reload()
    num = events.Scalars("straggler/num_confirmed")
    print("tensorboard: straggler/num_confirmed at step %d = %g" % (num[-1].step, num[-1].value))
    client = MlflowClient(tracking_uri="sqlite:///" + os.path.join(args.out, "mlflow.db"))
    run = client.search_runs([client.get_experiment_by_name("laggard").experiment_id])[0]
    print("mlflow: straggler/confirmed =", run.data.tags.get("straggler/confirmed"))
dist.destroy_process_group()
