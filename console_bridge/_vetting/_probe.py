"""The start-time probe: canaries planted inside and outside a session's view, and a cell that
must fail to read or write every one of them before any user cell runs.

The advertised sandbox text cannot show the view or the deny rules, so they are proven: a
probe that reads a canary (or writes where it must not) stops the session with
``SandboxMismatch``.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from pathlib import Path

from console_bridge._confinement._deny import parse_probe, probe_code_for
from console_bridge._confinement._registry import bridge_cache_dir
from console_bridge._errors import SandboxMismatch

__all__ = ["StartProbe"]

_CANARY = "console-bridge-canary"


class StartProbe:
    """One session's canaries and the probe cell that must not reach them."""

    def __init__(self) -> None:
        self._canaries: list[Path] = []
        self._renamed: Path | None = None

    def _plant(self, folder: Path) -> Path | None:
        """A canary file in one of the bridge's own denied folders."""
        try:
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f".{_CANARY}-{os.getpid()}-{time.monotonic_ns()}"
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            os.write(fd, b"console-bridge canary: a cell must never read this\n")
            os.close(fd)
        except OSError:
            return None
        self._canaries.append(path)
        return path

    def plant_early(self, private: Path) -> None:
        """Before the server starts: a canary that will be replaced by rename once the view exists
        (the view is built by path, so the replacement must stay as hidden as the original)."""
        self._renamed = self._plant(private)

    def cell(
        self,
        *,
        private: Path,
        recording_base: Path,
        workspace: Path,
        writable_workspace: bool,
        deny: list[str],
        language: str,
    ) -> str:
        """Plant canaries inside and outside the view and return the probe cell (blocking).

        Outside the view: the session's private folder, the bridge's cache folder (under the
        home folder by default), the host's /tmp, a canary replaced by rename after the server
        started, and one created after it started. Inside the view, denied: the recordings
        folder and every denied path that exists."""
        reads: list[str] = []
        for item in (private, recording_base, bridge_cache_dir()):
            canary = self._plant(item)
            if canary is not None:
                reads.append(str(canary))
        with contextlib.suppress(OSError):
            fd, name = tempfile.mkstemp(prefix=f".{_CANARY}-", dir="/tmp")
            os.write(fd, b"console-bridge canary in the host's /tmp\n")
            os.close(fd)
            self._canaries.append(Path(name))
            reads.append(name)
        renamed = self._renamed
        if renamed is not None:
            with contextlib.suppress(OSError):
                fresh = renamed.with_name(renamed.name + ".new")
                fresh.write_bytes(b"console-bridge canary, replaced by rename after the server started\n")
                os.rename(fresh, renamed)
                reads.append(str(renamed))
        reads += [path for path in deny if os.path.lexists(path)]
        writes = [str(private / f"{_CANARY}-write"), str(recording_base / f"{_CANARY}-write")]
        if not writable_workspace:
            writes.append(str(workspace / f".{_CANARY}-write"))
        return probe_code_for(language, list(dict.fromkeys(reads)), writes)

    def check(self, text: str, *, server: str, pid: int | None) -> int:
        """Raise SandboxMismatch unless the probe ran and every attempt failed; return the count."""
        self.clear()
        result = parse_probe(text)
        if result is None:
            raise SandboxMismatch(
                "the confinement probe did not report (its output was: "
                f"{text[:300]!r}); the deny rules cannot be proven, so the bridge fails closed. The server was "
                "stopped before any user cell.",
                server=server,
                pid=pid,
            )
        if result.readable or result.writable:
            raise SandboxMismatch(
                "the sandbox does not hold what the bridge asked for: a probe cell could read "
                f"{result.readable or 'nothing denied'} and write {result.writable or 'nothing outside its set'}. "
                "The server was stopped before any user cell; check the mcp-console version and any project "
                "config.",
                server=server,
                pid=pid,
                details={"readable": result.readable, "writable": result.writable},
            )
        return result.checked

    def clear(self) -> None:
        """Remove every canary planted (the probe ran, or the session ends)."""
        for canary in self._canaries:
            with contextlib.suppress(OSError):
                canary.unlink()
        self._canaries.clear()
