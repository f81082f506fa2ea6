"""Cells import from the environments' own compiled bytecode, and nothing writes a bytecode cache."""

from __future__ import annotations

from pathlib import Path

import pytest

from console_bridge import AsyncConsole

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_leaks")]

# colorsys is never imported by the worker or the bridge: importing it shows whether Python
# compiled its source (no usable bytecode) or read the standard library's own __pycache__.
_COMPILES = """
import importlib.machinery as m, sys
calls = []
original = m.SourceFileLoader.source_to_code
def counting(self, *args, **kwargs):
    calls.append(self.name)
    return original(self, *args, **kwargs)
m.SourceFileLoader.source_to_code = counting
try:
    import colorsys
finally:
    m.SourceFileLoader.source_to_code = original
print(calls, sys.pycache_prefix, sys.dont_write_bytecode)
"""


async def test_imports_read_the_environments_bytecode(mcp_console, workspace, recordings):
    _, binary = mcp_console
    async with AsyncConsole(workspace, command=binary, recordings_dir=recordings) as console:
        result = await console.run(python=_COMPILES)
        assert result.text.strip() == "[] None True", result.text
        env = await console.run(
            python="import os; print(os.environ.get('PYTHONPYCACHEPREFIX'), os.environ.get('PYTHONDONTWRITEBYTECODE'))"
        )
        assert env.text.strip() == "None 1"


async def test_nothing_writes_bytecode_into_a_writable_workspace(mcp_console, workspace: Path, recordings):
    _, binary = mcp_console
    (workspace / "helper_mod.py").write_text("VALUE = 7\n")
    async with AsyncConsole(workspace, profile="workspace", command=binary, recordings_dir=recordings) as console:
        result = await console.run(
            python=f"import sys; sys.path.insert(0, {str(workspace)!r})\nimport helper_mod; print(helper_mod.VALUE)"
        )
        assert result.text.strip() == "7"
    assert not (workspace / "__pycache__").exists()
