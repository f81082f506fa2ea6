#!/usr/bin/env python3
"""Chaos soak for ``console_bridge.AsyncConsole`` against a real ``mcp-console`` binary: ``--help``.

The soak is the package beside this file, scripts/chaos/ (its ``__init__`` says what it does and
names its modules); this file runs it, as ``python -m scripts.chaos`` does.
"""

import sys

from chaos.cli import main  # the package scripts/chaos/ (a package wins over a module of the same name)

if __name__ == "__main__":
    sys.exit(main())
