"""pytest setup for the Python layer: the package from python/ (or the installed one, see
testenv.py), the built extension, markers.

Run:  PYTHONPATH=python OMP_NUM_THREADS=1 .venv/bin/python -m pytest tests/python -q
Installed package:  LAGGARD_TEST_INSTALLED=1 python -m pytest <checkout>/tests/python -q
Only the multi-process tests:   ... -m multiproc        Skip them:   ... -m "not multiproc"
Skip the long ones (repeated real runs under load):   ... -m "not long"
A repeated test (a `repetition`, `repeat` or `rep` parameter) runs its first repetition in every
job; the others are marked `long` (scripts/long-tests.sh runs them).
"""

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import testenv  # noqa: E402

if testenv.PYDIR is not None and testenv.PYDIR not in sys.path:
    sys.path.insert(0, testenv.PYDIR)


def pytest_configure(config):
    config.addinivalue_line("markers", "multiproc: starts several real rank processes (gloo)")
    config.addinivalue_line("markers", "needs_torch: needs PyTorch")
    config.addinivalue_line("markers", "long: repeated real runs, minutes (test_loaded_healthy: "
                                       "LAGGARD_LOADED_REPS, 10 by default; the repetitions "
                                       "after the first of a repeated test)")


REPEAT_PARAMS = ("repetition", "repeat", "rep")


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(config, items):
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if any(params.get(p, 0) for p in REPEAT_PARAMS):
            item.add_marker(pytest.mark.long)
    if testenv.INSTALLED:
        import laggard  # an installed package that does not import is an error, not a skip

        src = os.path.join(testenv.ROOT, "python") + os.sep
        if os.path.abspath(laggard.__file__).startswith(src):
            raise pytest.UsageError("LAGGARD_TEST_INSTALLED=1, but laggard was imported from "
                                    "the source tree (%s)" % laggard.__file__)
        return
    try:
        import laggard._core  # noqa: F401
    except ImportError as e:
        skip = pytest.mark.skip(reason="laggard._core is not built (%s); build the _core target "
                                       "with -DLAGGARD_BUILD_PYTHON=ON" % e)
        for item in items:
            item.add_marker(skip)
