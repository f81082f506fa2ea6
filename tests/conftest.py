"""Shared test helpers: paths and the interpreter that runs the fixture servers."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SERVERS = ROOT / "tests" / "servers"
PYTHON = sys.executable


def server_entry(script: str, *args: str, **extra: object) -> dict[str, object]:
    """An mcpServers entry that runs ``tests/servers/<script>`` with this interpreter."""
    return {"command": PYTHON, "args": [str(SERVERS / script), *args], **extra}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
