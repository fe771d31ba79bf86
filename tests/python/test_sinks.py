"""Sinks: JSONL reports, TensorBoard behind a clean import check."""

import json
import math

import pytest

import laggard
from laggard import sinks


def test_jsonl_report_sink_writes_one_object_per_line(tmp_path):
    path = tmp_path / "sub" / "reports.jsonl"
    s = sinks.JsonlReportSink(path)
    s(10, {"straggler/forward/max_ms": 3.5, "straggler/hints": "x", "straggler/bad": math.nan})
    s(20, {"straggler/forward/max_ms": 4.0})
    s.close()
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert rows[0] == {"step": 10, "straggler/forward/max_ms": 3.5, "straggler/hints": "x",
                       "straggler/bad": None}
    assert rows[1]["step"] == 20


def test_callable_sink_rejects_non_callables():
    with pytest.raises(TypeError):
        sinks.CallableSink(42)


def test_tensorboard_unavailable_is_clean():
    if laggard.tensorboard_available():
        pytest.skip("TensorBoard is installed here; see test_tensorboard_sink_writes")
    with pytest.raises(ImportError, match="tensorboard"):
        laggard.TensorBoardSink("/tmp/never-created")
    assert sinks.tensorboard_sink("/tmp/never-created") is None


def test_tensorboard_sink_writes(tmp_path):
    pytest.importorskip("torch.utils.tensorboard")
    s = laggard.TensorBoardSink(tmp_path)
    s(10, {"straggler/forward/max_ms": 3.0, "straggler/likely_bottleneck": "forward"})
    s.close()
    assert any(p.name.startswith("events.") for p in tmp_path.iterdir())
