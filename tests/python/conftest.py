"""pytest setup for the Python layer: the package from python/, the built extension, markers.

Run:  PYTHONPATH=python OMP_NUM_THREADS=1 /usr/bin/python3 -m pytest tests/python -q
Only the multi-process tests:   ... -m multiproc        Skip them:   ... -m "not multiproc"
"""

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYDIR = os.path.join(ROOT, "python")
if PYDIR not in sys.path:
    sys.path.insert(0, PYDIR)
HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)


def pytest_configure(config):
    config.addinivalue_line("markers", "multiproc: starts several real rank processes (gloo)")
    config.addinivalue_line("markers", "needs_torch: needs PyTorch")


def pytest_collection_modifyitems(config, items):
    try:
        import laggard._core  # noqa: F401
    except ImportError as e:
        skip = pytest.mark.skip(reason="laggard._core is not built (%s); build the _core target "
                                       "with -DLAGGARD_BUILD_PYTHON=ON" % e)
        for item in items:
            item.add_marker(skip)
