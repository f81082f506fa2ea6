"""Issue 35: the CPU one session start costs on this machine, the bridge and raw side by side.

K sessions (Python + SQL) are started one after another to the first result of ``1+1``, as the
density bench does, first through ``AsyncConsole`` and then through ``mcp_console.AsyncMCPConsole``
with the bridge server's exact arguments (taken from a live bridge server). Printed for each: the
whole machine's busy CPU per start (``psutil.cpu_times``, less the idle background measured just
before), the host process's share, and the start rate the machine's cores allow if starts were
bound by CPU alone. Run it on a quiet machine: other load counts as the starts' CPU.

    python scripts/measure_start_cpu.py --starts 12
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import psutil
from mcp_console import AsyncMCPConsole

from console_bridge import AsyncConsole


def _busy() -> float:
    t = psutil.cpu_times()
    return t.user + t.nice + t.system + t.irq + t.softirq + getattr(t, "steal", 0.0)


def _idle_rate() -> float:
    time.sleep(1)
    start = _busy()
    time.sleep(2)
    return (_busy() - start) / 2


async def _measure(kind: str, starts: int, open_one: Any) -> None:
    idle = _idle_rate()
    me = psutil.Process()
    busy, host, began = _busy(), sum(me.cpu_times()[:2]), time.perf_counter()
    sessions = [await open_one() for _ in range(starts)]
    wall = time.perf_counter() - began
    total = (_busy() - busy) - idle * wall
    host_cpu = sum(me.cpu_times()[:2]) - host
    for session in reversed(sessions):
        await session.close()
    per_start = total / starts
    cores = psutil.cpu_count() or 1
    print(
        f"{kind:6} {starts} starts in {wall:.2f} s ({starts / wall:.2f}/s one after another); busy CPU per start "
        f"{per_start * 1000:.0f} ms (host process {host_cpu / starts * 1000:.0f} ms); CPU-bound ceiling on "
        f"{cores} cores: {cores / per_start:.2f} starts/s"
    )


class _Opened:
    def __init__(self, close: Any) -> None:
        self.close = close


async def main(starts: int) -> None:
    root = Path(tempfile.mkdtemp(prefix="start-cpu-"))
    workspace, recordings, home = root / "ws", root / "rec", root / "home"
    for folder in (workspace, recordings, home):
        folder.mkdir()
    options: dict[str, Any] = {"recordings_dir": recordings, "languages": ("python", "sql")}

    async def bridge() -> _Opened:
        console = AsyncConsole(workspace, **options)
        await console.start()
        assert "2" in (await console.run(python="1+1")).combined
        return _Opened(console.close)

    async with AsyncConsole(workspace, **options) as console:
        await console.run(python="1+1")
        server = next(p for p in psutil.Process().children(recursive=True) if p.cmdline()[1:2] == ["serve"])
        binary, args, path = server.cmdline()[0], server.cmdline()[1:], server.environ().get("PATH", "")

    async def raw() -> _Opened:
        tmp = tempfile.mkdtemp(dir=root)
        env = {"PATH": path, "HOME": os.environ["HOME"], "TMPDIR": tmp, "MCP_CONSOLE_HOME": str(home)}
        client = AsyncMCPConsole(command=binary, args=list(args), server_parameters={"env": env, "cwd": str(workspace)})
        await client.connect()
        assert "2" in await client.send(python="1+1")
        return _Opened(client.close)

    for kind, open_one in (("bridge", bridge), ("raw", raw)):
        await (await open_one()).close()  # the first start pays one-off costs (imports, caches)
        await _measure(kind, starts, open_one)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=12)
    anyio.run(main, parser.parse_args().starts)
