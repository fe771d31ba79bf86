"""python -m laggard ARGS...: the `laggard` command (laggard.cli)."""

import sys

from .cli import main

sys.exit(main())
