"""Which laggard the tests run against, and how their subprocesses and the `laggard` program
find it.

Source tree (the default; scripts/test.sh): python/ of this checkout, with the module built into
it, and the program of a build tree (build/tools/laggard).
Installed package (LAGGARD_TEST_INSTALLED=1; scripts/wheel-test.sh): python/ is never put on
sys.path or PYTHONPATH, `import laggard` must find the installed package, and the program is
the `laggard` console script beside the interpreter (which runs the package's own binary).
"""

import glob
import os
import subprocess
import sys

TESTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(TESTS))
INSTALLED = os.environ.get("LAGGARD_TEST_INSTALLED") == "1"
PYDIR = None if INSTALLED else os.path.join(ROOT, "python")


def subprocess_env(**extra):
    """os.environ for a Python subprocess that imports the same laggard as the tests (plus
    `extra`)."""
    env = dict(os.environ)
    if PYDIR is not None:
        env["PYTHONPATH"] = PYDIR + (os.pathsep + env["PYTHONPATH"]
                                     if env.get("PYTHONPATH") else "")
    env.update(extra)
    return env


def _has_demo(program):
    try:
        help_text = subprocess.run([program, "--help"], stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, universal_newlines=True,
                                   timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return "\n  demo " in help_text


def cli():
    """The `laggard` program, or None: installed, the console script beside sys.executable;
    else $LAGGARD_CLI, else build/tools/laggard, else the newest build*/tools/laggard (one with
    the demo subcommand)."""
    if INSTALLED:
        p = os.path.join(os.path.dirname(sys.executable), "laggard")
        return p if os.access(p, os.X_OK) else None
    env = os.environ.get("LAGGARD_CLI")
    if env:
        return env if os.access(env, os.X_OK) else None
    found = [p for p in glob.glob(os.path.join(ROOT, "build*", "tools", "laggard"))
             if os.access(p, os.X_OK)]
    preferred = os.path.join(ROOT, "build", "tools", "laggard")
    found.sort(key=lambda p: (p != preferred, -os.path.getmtime(p)))
    for p in found:
        if _has_demo(p):
            return p
    return None
