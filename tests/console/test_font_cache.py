"""matplotlib's font cache is built once per environment on the host and shown read-only to sessions
(issue 31): a session's first ``import matplotlib.pyplot`` no longer scans every font."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from console_bridge import AsyncConsole
from console_bridge._console import _worker_boot

#: the worker's backend: IPython's inline one, as ipykernel's (the venv has IPython and matplotlib-inline)
_BACKEND = "module://matplotlib_inline.backend_inline"

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_leaks")]

_SEEN = """
import glob, os
import matplotlib  # (MPLCONFIGDIR and its links are made as matplotlib is first imported)
config, cache = os.environ["MPLCONFIGDIR"], os.environ["MCP_CONSOLE_CACHE_DIR"]
found = sorted(glob.glob(os.path.join(config, "fontlist-v*.json")))
real = [os.path.realpath(path) for path in found]
print(len(found), all(os.path.islink(path) for path in found))
print(all(path.startswith(os.path.dirname(cache) + os.sep) for path in real))
print(any(os.access(path, os.W_OK) for path in real))
for path in real:
    try:
        open(path, "a").close()
        print("written", path)
    except OSError as exc:
        print("refused", type(exc).__name__)
built = os.path.join(os.path.dirname(cache), "matplotlib")
print(os.listdir(built) if os.path.isdir(built) else "no font lists")
print(os.listdir(config) if os.path.isdir(config) else "no MPLCONFIGDIR")
"""
_IMPORT = "import matplotlib.pyplot as plt\nprint(plt.get_backend())"


async def _check_session(workspace: Path, binary: Path, recordings: Path) -> None:
    async with AsyncConsole(workspace, command=binary, recordings_dir=recordings, languages=["python"]) as console:
        before = await console.run(python="import os\nprint(os.path.lexists(os.environ['MPLCONFIGDIR']))")
        assert before.text == "False\n", before.text  # a session that never imports matplotlib gets no folder
        seen = await console.run(python=_SEEN)
        lines = seen.text.splitlines()
        assert lines[:3] == ["1 True", "True", "False"], seen.text
        assert lines[3].startswith("refused"), seen.text
        imported = await console.run(python=_IMPORT)
        assert imported.error is None and imported.text.strip().lower() == _BACKEND, imported.combined
        assert "building the font cache" not in imported.combined, imported.combined


async def test_the_font_cache_is_built_once_and_read_only_in_the_session(
    mcp_console, workspace, recordings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, binary = mcp_console
    cache = tmp_path / "bridge-cache"
    monkeypatch.setenv("CONSOLE_BRIDGE_CACHE_DIR", str(cache))
    for _ in range(2):  # the first session's start builds it, the second uses it
        await _check_session(workspace, binary, recordings)
    built = list((cache / "matplotlib-fonts").glob("*/fontlist-v*.json"))
    assert len(built) == 1, built  # once for the environment
    assert not list((cache / "matplotlib-fonts").glob(".build-*")), "a build's scratch folder was left"


async def test_a_slow_build_is_there_before_the_worker_starts(
    mcp_console, workspace, recordings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mcp-console boots the worker, and runs the startup code, as soon as the server starts: a
    build that takes longer than that (a loaded host, a big font folder) must still be there when
    it looks. (With the lists linked as the startup code ran, not at the first import, the old order,
    waiting only before the probe, failed this test every time, and the session test 3 runs of 14.)"""
    _, binary = mcp_console
    monkeypatch.setenv("CONSOLE_BRIDGE_CACHE_DIR", str(tmp_path / "bridge-cache"))
    real = _worker_boot.built_font_cache

    def slow(cache: Path, python: Path, search_path: Sequence[str], *, timeout: float) -> Path | None:
        time.sleep(2.0)  # a slower build than the server's start to the worker's startup code (0.3-0.9 s)
        return real(cache, python, search_path, timeout=timeout)

    monkeypatch.setattr(_worker_boot, "built_font_cache", slow)
    await _check_session(workspace, binary, recordings)


async def test_a_failed_build_costs_only_speed(
    mcp_console, workspace, recordings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A build that fails (here: the cache folder cannot be made) leaves the session without the
    lists: it starts, and its first import builds matplotlib's own, as before."""
    _, binary = mcp_console
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv("CONSOLE_BRIDGE_CACHE_DIR", str(blocker / "cache"))
    async with AsyncConsole(workspace, command=binary, recordings_dir=recordings, languages=["python"]) as console:
        seen = await console.run(python=_SEEN)
        assert seen.text.splitlines()[0] == "0 True", seen.text
        imported = await console.run(python=_IMPORT)
        assert imported.error is None and imported.text.strip().lower() == _BACKEND, imported.combined
