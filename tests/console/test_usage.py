"""Usage figures: per cell (CellResult.usage) and per session (status().usage), from a real worker."""

from __future__ import annotations

import pytest

from console_bridge import AsyncConsole, CellUsage, SessionUsage
from console_bridge._console._usage import CellMeter, WorkerMeter

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_leaks")]

MiB = 2**20


def burn(mib: int, seconds: float) -> str:
    return (
        "import time\n"
        "start = time.process_time()\n"
        f"block = bytearray({mib} * 2**20)\n"
        "for i in range(0, len(block), 4096):\n    block[i] = 1\n"
        "began = time.process_time()\n"
        f"while time.process_time() - began < {seconds}:\n    pass\n"
        "print(time.process_time() - start)\n"  # what the cell's own process counted, allocation included
    )


async def test_a_cell_reports_its_cpu_and_memory_within_ten_percent(workspace, recordings):
    async with AsyncConsole(workspace, recordings_dir=recordings) as console:
        small = await console.run(python="x = 1")
        assert isinstance(small.usage, CellUsage) and small.usage.wall_seconds > 0
        result = await console.run(python=burn(500, 2.0))
        usage = result.usage
        assert usage is not None and usage.cpu_seconds is not None and usage.memory_peak is not None, usage
        own = float(result.text)
        assert own >= 2.0 and abs(usage.cpu_seconds - own) <= 0.1 * own, (usage, own)
        assert 500 * MiB * 0.95 <= usage.memory_peak <= 500 * MiB * 1.1, usage
        assert usage.wall_seconds >= usage.cpu_seconds * 0.5
        polls = await console.send(python="import time; time.sleep(0.3)", timeout_ms=0)
        assert polls.running and polls.usage is None  # only the observation that ends a cell carries it
        while polls.running:
            polls = await console.poll()
        assert polls.usage is not None and polls.usage.wall_seconds >= 0.3
        session = console.status().usage
        assert isinstance(session, SessionUsage)
        assert session.cpu_seconds is not None and session.cpu_seconds >= 2.0
        assert session.memory is not None and session.memory_peak is not None and session.memory_peak >= 500 * MiB
        assert session.processes is not None and session.processes >= 2
        assert session.recording_bytes is not None and session.recording_bytes > 0
    assert console.status().usage is None


async def test_without_a_cgroup_the_worker_accounts_for_the_cell(workspace, recordings):
    async with AsyncConsole(workspace, recordings_dir=recordings) as console:
        await console.run(python="x = 1")
        _, supervisor = console._confined.usage_sources()
        console._calls.meter = CellMeter(None, WorkerMeter(supervisor))  # as on a host without session cgroups
        result = await console.run(python=burn(200, 0.5))
        usage, own = result.usage, float(result.text)
        assert usage is not None and usage.cpu_seconds is not None and usage.memory_peak is not None, usage
        assert abs(usage.cpu_seconds - own) <= 0.1 * own, (usage, own)
        assert 200 * MiB * 0.95 <= usage.memory_peak <= 200 * MiB * 1.1, usage
