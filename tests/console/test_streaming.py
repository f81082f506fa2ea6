"""``run(on_output=...)`` streams: chunks arrive as the output does, whatever ``poll_window`` is."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from console_bridge import AsyncConsole, CellResult

pytestmark = [pytest.mark.anyio, pytest.mark.console]

TICKS = "import time\nfor i in range(15):\n    print(f'tick {i} {time.time():.3f}', flush=True)\n    time.sleep(0.2)\n"
NOTICE = re.compile(r"\[(running|elapsed|idle|done|waiting for stdin|input requested)")


async def test_on_output_streams_under_a_long_poll_window(mcp_console, workspace: Path, recordings: Path) -> None:
    async with AsyncConsole(workspace, command=mcp_console[1], recordings_dir=recordings, poll_window=30) as console:
        await console.run(python="'warm up the worker'")
        chunks: list[tuple[float, CellResult]] = []
        result = await console.run(python=TICKS, on_output=lambda chunk: chunks.append((time.time(), chunk)))
    assert result.error is None and result.text.count("tick ") == 15
    assert len(chunks) >= 5
    assert not any(NOTICE.search(chunk.text) for _, chunk in chunks)
    assert "".join(chunk.text for _, chunk in chunks) == result.text
    lags = [
        arrived - float(stamp) for arrived, chunk in chunks for stamp in re.findall(r"tick \d+ (\d+\.\d+)", chunk.text)
    ]
    assert len(lags) == 15
    # Output reaches on_output about 0.5 s after the cell printed it, long before the cell's
    # 3 s end (bounds with room for a loaded CI machine; a poll-window wait would be 3 s).
    assert sorted(lags)[len(lags) // 2] < 1.0 and max(lags) < 2.0, sorted(lags)
    print(f"streaming lag: median {sorted(lags)[len(lags) // 2]:.3f}s, max {max(lags):.3f}s")
