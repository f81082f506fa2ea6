"""The usage part on its own (no session): cgroup counters first, walks cached for ``refresh``."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from console_bridge._console._usage import UsageReader


class Tree:
    def __init__(self) -> None:
        self.walks = 0

    def read(self) -> tuple[float, int, int, int]:
        self.walks += 1
        return 1.5, 100, 200, 3


def _reader(refresh: float, recording: Any = None) -> UsageReader:
    return UsageReader(
        refresh=lambda: refresh, tmpdir_bytes=lambda: 7, writes_bytes=lambda: None, recording=lambda: recording
    )


def test_nothing_before_the_session_runs() -> None:
    assert _reader(2.0).read(None, None) is None


def test_the_tree_is_walked_where_no_cgroup_counts_and_the_walk_is_kept_for_refresh() -> None:
    tree, meter = Tree(), SimpleNamespace(group=None)
    reader = _reader(60.0, recording=SimpleNamespace(size_bytes=42))
    first = reader.read(meter, tree)  # type: ignore[arg-type]
    assert first is not None
    assert (first.cpu_seconds, first.memory, first.memory_peak, first.processes) == (1.5, 100, 200, 3)
    assert (first.tmpdir_bytes, first.writes_bytes, first.recording_bytes) == (7, None, 42)
    reader.read(meter, tree)  # type: ignore[arg-type]
    assert tree.walks == 1
    _reader(0.0).read(meter, tree)  # type: ignore[arg-type]
    assert tree.walks == 2


def test_cgroup_counters_leave_the_tree_alone() -> None:
    group = SimpleNamespace(
        cpu_seconds=lambda: 9.0, memory_now=lambda: 10, session_peak=lambda: 11, processes=lambda: 2
    )
    tree = Tree()
    usage = _reader(2.0).read(SimpleNamespace(group=group), tree)  # type: ignore[arg-type]
    assert usage is not None and (usage.cpu_seconds, usage.memory, usage.memory_peak, usage.processes) == (
        9.0,
        10,
        11,
        2,
    )
    assert tree.walks == 0
