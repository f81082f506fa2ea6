#!/usr/bin/env python3
"""Side-by-side benchmark of ``console_bridge.AsyncConsole`` against the raw client: ``--help``.

The bench is the package beside this file, scripts/bench/ (its ``__init__`` says what is measured
and names its modules); this file runs it.
"""

import sys

from bench.cli import main  # the package scripts/bench/ (a package wins over a module of the same name)

if __name__ == "__main__":
    sys.exit(main())
