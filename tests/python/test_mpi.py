"""laggard's MPI side channel from Python (laggard.mpi, the C++ "mpi" transport): real ranks under
mpirun, no torch.distributed (mpi_worker.py). Every window reaches the analysis rank, the slow
rank is named, a healthy run names nobody; without the MPI module the Analyzer warns, counts it
and still writes each rank's own log under the launcher's rank."""

import json
import os
import shutil
import subprocess
import sys

import pytest

import laggard
import laggard.mpi
import testenv

MPIEXEC = shutil.which("mpiexec") or shutil.which("mpirun")
needs_mpi = pytest.mark.skipif(not (MPIEXEC and laggard.mpi.available()),
                               reason="needs mpiexec and laggard built with MPI (laggard._mpi)")
WORLD, STEPS = 4, 30


def mpirun(out, *args):
    env = testenv.subprocess_env(OMPI_MCA_rmaps_base_oversubscribe="1",
                                 OMPI_MCA_btl_vader_single_copy_mechanism="none",
                                 OMPI_MCA_mpi_yield_when_idle="1", OMP_NUM_THREADS="1")
    cmd = [MPIEXEC, "-n", str(WORLD), "--allow-run-as-root", "--oversubscribe", "--bind-to",
           "none", sys.executable, os.path.join(testenv.TESTS, "mpi_worker.py"), "--out",
           str(out), "--steps", str(STEPS)] + list(args)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, env=env, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    results = []
    for rank in range(WORLD):
        with open(os.path.join(str(out), "result-%d.json" % rank)) as f:
            results.append(json.load(f))
    return results, r.stderr


@needs_mpi
@pytest.mark.multiproc
def test_mpi_ranks_deliver_every_window_and_name_the_slow_rank(tmp_path):
    results, stderr = mpirun(tmp_path, "--slow-rank", "3", "--slow-ms", "10")
    assert [r["rank"] for r in results] == list(range(WORLD))
    assert all(r["world_size"] == WORLD for r in results)
    c = results[0]["counters"]
    assert c["windows"] == STEPS and c["incomplete_windows"] == 0, c
    assert c["samples_received"] == STEPS * (WORLD - 1), c
    assert results[0]["latest_metrics"]["straggler/confirmed"] == "3:forward"
    for r in results:
        assert r["counters"]["report_errors"] == 0, r["counters"]
        assert r["counters"]["rank_log_written"] == STEPS
    assert "warning" not in stderr.lower(), stderr
    assert sorted(os.listdir(str(tmp_path))).count("reports.jsonl") == 1


@needs_mpi
@pytest.mark.multiproc
def test_a_healthy_mpi_run_names_nobody(tmp_path):
    results, _ = mpirun(tmp_path)
    m = results[0]["latest_metrics"]
    assert m["straggler/confirmed"] == "" and m["straggler/ranks"] == WORLD


@pytest.mark.multiproc
def test_without_the_mpi_module_the_rank_still_logs_under_the_launchers_rank(tmp_path,
                                                                             monkeypatch):
    def unavailable():
        raise RuntimeError("laggard was built without its MPI side channel (test)")

    monkeypatch.setattr(laggard.mpi, "setup", unavailable)
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "1")
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")
    an = laggard.Analyzer(enabled=True, interval=1, transport="mpi", log_dir=str(tmp_path))
    for step in range(3):
        an.begin_step(step)
        an.add("forward", 5.0)
        an.end_step()
    an.close()
    assert (an.rank, an.world_size) == (1, 2)
    assert an.counters()["report_errors"] == 1
    assert os.path.exists(str(tmp_path / "rank-1.jsonl"))
