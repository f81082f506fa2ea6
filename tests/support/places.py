"""The repository's paths and the test MCP servers (``tests/servers``), run by this interpreter."""

from __future__ import annotations

import sys
from pathlib import Path

__all__ = ["PYTHON", "ROOT", "SERVERS", "server_entry"]

ROOT = Path(__file__).resolve().parent.parent.parent
SERVERS = ROOT / "tests" / "servers"
PYTHON = sys.executable


def server_entry(script: str, *args: str, **extra: object) -> dict[str, object]:
    """An mcpServers entry that runs ``tests/servers/<script>`` with this interpreter."""
    return {"command": PYTHON, "args": [str(SERVERS / script), *args], **extra}
