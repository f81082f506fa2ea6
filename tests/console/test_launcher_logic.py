"""The launcher on its own, before anything starts: the launch arguments it builds, and the
lifecycle state the console reads from it."""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.version import Version

from console_bridge import AsyncConsole, ConnectionClosed
from console_bridge._vetting._version import Binary


def test_the_launch_arguments_follow_the_options(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "out").mkdir()
    console = AsyncConsole(tmp_path / "ws", languages=("python", "sql"), writable_roots=[tmp_path / "out"])
    launcher = console._launcher
    assert launcher.state == "new" and launcher.conn is None
    argv, expected = launcher._serve_args(Binary(Path("/bin/mcp-console"), Version("0.0.6")), Path("/venv"))
    assert argv[:2] == ["serve", "--no-config"] and "python=/venv" in argv
    assert "languages=[python, sql]" in argv and "tool.parameters.requirements.enabled=false" in argv
    assert argv[-2:] == ["--writable-root", str((tmp_path / "out").resolve())]
    assert expected.network == "restricted"
    launcher.sql_withheld = "SQL is withheld: no duckdb"
    assert console.server_languages == ("python",)
    argv, _ = launcher._serve_args(Binary(Path("/bin/mcp-console"), Version("0.0.6")), Path("/venv"))
    assert "languages=[python]" in argv


@pytest.mark.anyio
async def test_a_console_closed_before_start_never_starts(tmp_path: Path) -> None:
    console = AsyncConsole(tmp_path)
    await console.close()
    assert console._launcher.state == "closed"
    with pytest.raises(ConnectionClosed, match="create a new AsyncConsole"):
        await console.start()
