"""One rank of test_sink_delivery.py's real runs: the trackers how-to's job
(examples/docs/trackers.py) at interval 2, with tracker sinks on every rank (TensorBoard,
W&B offline, MLflow on SQLite, Prometheus on a free port; cfg["sinks"] names them, with "jsonl"
a JSONL file and "record" a plain function): a small DDP model over gloo, 10 ms of data loading
per step (cfg["slow_rank"]'s cfg["slow_dataloader_ms"] instead).

run(rank, world, port, cfg) writes OUT/result-<rank>.json: the counters, and on the analysis
rank the reports the "record" sink received (step, straggler/confirmed).
"""

import datetime
import json
import os
import time


def run(rank, world, port, cfg):
    import torch
    import torch.distributed as dist
    import torch.nn as nn

    import laggard
    import laggard.torch
    from laggard import sinks

    torch.set_num_threads(1)
    os.environ.update(WANDB_MODE="offline", WANDB_SILENT="true")
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=120))
    out = cfg["out"]
    seen = []
    make = {
        "tensorboard": lambda: sinks.TensorBoardSink(os.path.join(out, "tb")),
        "wandb": lambda: sinks.WandbSink(dir=out, project="laggard-test"),
        "mlflow": lambda: sinks.MLflowSink(
            tracking_uri="sqlite:///" + os.path.join(out, "mlflow.db")),
        "prometheus": lambda: sinks.PrometheusSink(port=0),
        "jsonl": lambda: sinks.JsonlReportSink(os.path.join(out, "reports-sink.jsonl")),
        "record": lambda: lambda step, m: seen.append(
            {"step": int(step), "confirmed": m.get("straggler/confirmed", "")}),
    }
    trackers = [make[name]() for name in cfg["sinks"]]
    an = laggard.Analyzer(interval=cfg["interval"], log_dir=cfg["log_dir"], sinks=trackers)
    model = nn.parallel.DistributedDataParallel(nn.Linear(32, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    laggard.torch.instrument(an, model=model, optimizer=optimizer)
    x, y = torch.randn(16, 32), torch.randn(16, 1)
    load_s = (cfg["slow_dataloader_ms"] if rank == cfg["slow_rank"] else 10.0) / 1000.0
    for step in range(cfg["steps"]):
        an.begin_step(step)
        with an.section("dataloader"):
            time.sleep(load_s)
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        an.end_step()
    dist.barrier()
    an.close()
    counters = {k: v for k, v in an.counters().items() if isinstance(v, (int, float))}
    with open(os.path.join(out, "result-%d.json" % rank), "w") as f:
        json.dump({"counters": counters, "seen": seen}, f)
    dist.destroy_process_group()
    return 0
