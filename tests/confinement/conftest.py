from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest

from console_bridge._confinement._host import HostKind
from tests.support.sessions import mcp_console, no_leaks, recordings, state_dir, workspace

__all__ = ["host_kind", "mcp_console", "no_leaks", "plant_home", "recordings", "state_dir", "workspace"]


def host_kind(**changes: object) -> HostKind:
    """A simulated host: a normal user on cgroup v2 with user namespaces, changed by ``changes``."""
    facts: dict[str, object] = {
        "platform": "linux",
        "uid": 1000,
        "privileged": False,
        "userns_problem": None,
        "cgroup_v2": True,
        "systemd": None,
    }
    facts.update(changes)
    return HostKind(**facts)  # type: ignore[arg-type]


def plant_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, places: Iterable[str], canary: str) -> Path:
    """A temporary HOME whose ``places`` each hold ``canary``; HOME points at it."""
    path = tmp_path / "home"
    for name in places:
        target = path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(f"{canary} {name}\n")
    monkeypatch.setenv("HOME", str(path))
    return path
