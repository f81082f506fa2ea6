"""A benchmark client in a long-lived child process of its own (one per checkout or client kind):
the driver sends one JSON request a line and reads one JSON reply a line (``bench_view.py``,
``bench_imports.py``; each script's ``--child`` mode is the other end)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

__all__ = ["Child"]


class Child:
    def __init__(self, script: Path, kind: str, pythonpath: str | None, binary: str, scratch: str) -> None:
        env = dict(os.environ)
        if pythonpath:
            env["PYTHONPATH"] = pythonpath
        else:
            env.pop("PYTHONPATH", None)
        self.kind = kind
        self.proc = subprocess.Popen(
            [sys.executable, str(script), "--child", kind, "--binary", binary, "--scratch", scratch],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd="/",
        )

    def run(self, **request: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.kind}: the child exited ({self.proc.wait()})")
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"{self.kind}: {reply['error']}")
        return reply

    def stop(self) -> None:
        with contextlib.suppress(RuntimeError, BrokenPipeError, ValueError):
            self.run(quit=True)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
