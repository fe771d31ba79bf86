"""The Python API under libFuzzer (atheris): laggard._core.StepSample.from_json, laggard.read_run
and the Analyzer's calls, on arbitrary input. Properties (docs/notes/fuzzing.md):

  from_json   a sample or ValueError; an accepted line, written back with to_json, reads back
              to the same line.
  read_run    rank files made of the input (split at each 0x1e byte, up to 8): a result or
              ValueError/OSError; every window's steps ascend, each sample is one of its step.
  analyzer    begin_step / section / add / end_step with names, steps and values from the input
              (infinities, NaN, huge numbers, control characters, non-integer steps): nothing
              raises; after close() every sample emitted is in the rank log, and every line
              reads back with finite, non-negative stage times.

The first byte picks the mode (its value modulo 3, in the order above); from_json takes the rest
as text (UTF-8, a bad byte as U+FFFD), read_run the rest as files, so the seeds in
fuzz/corpus/python_api_fuzzer/ are lines and runs behind a byte 0 or 1. Coverage guidance is of the Python code (laggard's modules are
instrumented); the C++ parser behind from_json and read_run is fuzzed with coverage by the
libFuzzer targets in fuzz/. Run by scripts/fuzz.sh (FUZZ_TARGETS=python_api_fuzzer); by hand:

    PYTHONPATH=python .venv/bin/python fuzz/python/api_fuzzer.py -max_total_time=60 CORPUS_DIR
"""

import math
import os
import shutil
import sys
import tempfile

import atheris

with atheris.instrument_imports():
    import laggard
    from laggard import _core

_SCRATCH = tempfile.mkdtemp(prefix="laggard-api-fuzz-")
_ODD_FLOATS = (float("inf"), float("-inf"), float("nan"), 1e308, -0.0, 5e-324, 1e12)


def _text(fdp, n):
    return fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, n))


def check_from_json(data):
    line = data.decode("utf-8", "replace")
    try:
        s = _core.StepSample.from_json(line)
    except ValueError as e:
        assert str(e), "a ValueError without a message"
        return
    out = s.to_json()
    assert "\n" not in out
    assert _core.StepSample.from_json(out).to_json() == out, (line, out)


def _run_dir():
    d = os.path.join(_SCRATCH, "run")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def check_read_run(data):
    d = _run_dir()
    for i, part in enumerate(data.split(b"\x1e")[:8]):
        with open(os.path.join(d, "rank-%d.jsonl" % i), "wb") as f:
            f.write(part)
    try:
        windows, stats = laggard.read_run(d)
    except (ValueError, OSError) as e:
        assert str(e), "an error without a message"
        return
    steps = [step for step, _ in windows]
    assert steps == sorted(set(steps)), steps
    for step, samples in windows:
        assert all(s.step == step for s in samples)
    assert stats["samples"] == sum(len(ss) for _, ss in windows)


def _value(fdp):
    pick = fdp.ConsumeIntInRange(0, 9)
    if pick < len(_ODD_FLOATS):
        return _ODD_FLOATS[pick]
    return fdp.ConsumeRegularFloat()


def _anything(fdp):
    pick = fdp.ConsumeIntInRange(0, 5)
    if pick == 0:
        return None
    if pick == 1:
        return fdp.ConsumeInt(9)  # up to 2^71: beyond int64
    if pick == 2:
        return _value(fdp)
    if pick == 3:
        return fdp.ConsumeBytes(4)
    if pick == 4:
        return [fdp.ConsumeInt(1)]
    return _text(fdp, 8)


def check_analyzer(data):
    fdp = atheris.FuzzedDataProvider(data)
    d = _run_dir()
    an = laggard.Analyzer(enabled=True, interval=1, log_dir=d, close_timeout_s=5.0)
    try:
        for _ in range(fdp.ConsumeIntInRange(0, 24)):
            op = fdp.ConsumeIntInRange(0, 3)
            odd = fdp.ConsumeIntInRange(0, 7) == 0
            if op == 0:
                an.begin_step(_anything(fdp) if odd else fdp.ConsumeIntInRange(0, 2**63 - 1))
            elif op == 1:
                name = _anything(fdp) if odd else _text(fdp, 16)
                kind = fdp.PickValueInList([None, "compute", "communication", "data", "other",
                                            "bogus"])
                with an.section(name, kind):
                    pass
            elif op == 2:
                an.add(_anything(fdp) if odd else _text(fdp, 16), _value(fdp),
                       fdp.ConsumeIntInRange(0, 3) if not odd else _anything(fdp))
            else:
                an.end_step()
    finally:
        an.close()
    c = an.counters()
    assert c["queue_dropped"] == 0 and c["rank_log_lost"] == 0, c
    assert c["rank_log_written"] == c["queue_pushed"] == c["samples_emitted"], c
    if c["queue_pushed"]:
        windows, stats = laggard.read_run(d)
        assert stats["malformed"] == 0, stats["errors"]
        assert stats["samples"] + stats["duplicates"] + stats["out_of_order"] == \
            c["queue_pushed"], (stats, c)
        for _, samples in windows:
            for s in samples:
                assert all(math.isfinite(t.ms) and t.ms >= 0 for t in s.stages), s.to_json()


MODES = (check_from_json, check_read_run, check_analyzer)


def test_one_input(data):
    if data:
        MODES[data[0] % len(MODES)](data[1:])


def main():
    import logging

    logging.getLogger("laggard").setLevel(logging.CRITICAL)  # its counted warnings, by the million
    atheris.Setup(sys.argv, test_one_input)
    try:
        atheris.Fuzz()
    finally:
        shutil.rmtree(_SCRATCH, ignore_errors=True)


if __name__ == "__main__":
    main()
