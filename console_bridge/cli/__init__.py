"""The ``console-bridge`` command line: ``run``, ``doctor``, ``profiles``, ``recordings``.

Installed as the ``console-bridge`` script (``console_bridge.cli:main``). Exit statuses:
0 success, 1 the code raised or returned an error, 2 usage error, 3 launch refused or
verification failed, 4 timeout. Plain output only; click is the only dependency here.
"""

from __future__ import annotations

from console_bridge.cli._main import cli, main

__all__ = ["cli", "main"]
