"""The `laggard` command of a pip-installed package: the C++ program shipped inside the package
(laggard/bin/laggard), started by the console script pip puts on PATH (or `python -m laggard`).

main() replaces this Python process with the program (os.execv): signals reach it directly and
its exit status is the command's; what Python adds is one interpreter start and `import laggard`
before the C++ program runs (0.07 s for `laggard --version` on a quiet 2-core machine, of which
the program itself takes 0.01 s). `laggard demo` runs the demo with this same
interpreter, the one the package is installed in.
"""

import os
import sys

__all__ = ["path", "main"]


def path():
    """The `laggard` program inside this package, or None (a source tree, where it is built into
    build/tools/laggard instead)."""
    p = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "laggard")
    return p if os.path.isfile(p) and os.access(p, os.X_OK) else None


def main(argv=None):
    program = path()
    if program is None:
        sys.stderr.write("laggard: the program laggard/bin/laggard is not in this package (%s); "
                         "install the package with pip, or run build/tools/laggard of a source "
                         "build\n" % os.path.dirname(os.path.abspath(__file__)))
        return 2
    args = sys.argv[1:] if argv is None else list(argv)
    os.environ.setdefault("LAGGARD_PYTHON", sys.executable)  # `laggard demo`'s interpreter
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(program, [program] + args)


if __name__ == "__main__":
    sys.exit(main())
