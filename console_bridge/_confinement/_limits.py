"""``Limits``: what one session may consume, and parsing of sizes (pure)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from enum import StrEnum
from typing import Any, Literal

from console_bridge._errors import LaunchRefused

__all__ = ["LIMIT_NAMES", "LimitReport", "Limits", "Mechanism", "limits_from_mapping", "parse_size", "show_size"]

LIMIT_NAMES = ("memory", "processes", "cpu", "tmpdir", "recording", "writes", "files")
_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(value: int | str | None, what: str) -> int | None:
    """``"4GiB"``, ``"512MB"``, ``1_000_000`` -> bytes; None stays None. Raises LaunchRefused."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise LaunchRefused(f"limit {what!r} must be a size such as '4GiB' or a number of bytes, not {value!r}")
    if isinstance(value, int):
        number, unit = float(value), ""
    elif isinstance(value, str) and (match := _SIZE.match(value)):
        number, unit = float(match.group(1)), match.group(2).lower()
    else:
        raise LaunchRefused(f"limit {what!r} must be a size such as '4GiB' or a number of bytes, not {value!r}")
    if unit not in _UNITS:
        raise LaunchRefused(f"limit {what!r}: unknown unit {unit!r} in {value!r}; use B, KiB, MiB, GiB, KB, MB or GB")
    size = int(number * _UNITS[unit])
    if size < 1024 * 1024:
        raise LaunchRefused(f"limit {what!r} is {size} bytes; give at least 1MiB (or None for no limit)")
    return size


#: The smallest process limit: an idle worker runs about 11 tasks (threads included), which the
#: limit counts, so this leaves a cell about 20 more.
MIN_PROCESSES = 32


def show_size(value: int | float | None) -> str:
    """``1073741824`` -> ``"1GiB"`` (as a limit is written); other values as they are."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1024:
        for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
            if value >= size:
                return f"{value / size:g}{unit}"
    return str(value)


@dataclass(frozen=True, slots=True)
class Limits:
    """What one session (the server, the worker and everything a cell starts) may consume.

    ``memory`` (bytes or a size string) and ``processes`` (tasks) bound the whole session
    tree; ``cpu`` is CPUs' worth of time (``1.5``); ``tmpdir`` bounds the bytes a session
    may write to its private TMPDIR (and, apart, to ``/dev/shm``); ``recording`` bounds the
    session's whole recording on disk; ``writes`` the bytes and ``files`` the files and folders
    (inodes) a session may add to its writable workspace and roots (see ``_disk`` for how each
    is held). ``None`` means no limit. ``enforce="required"`` refuses
    to launch (``LaunchRefused``) when a limit cannot be enforced by any mechanism on this
    host and accepts a weaker one (an rlimit per process), reported as such;
    ``"strict"`` also refuses a limit that does not hold for the whole session tree;
    ``"best_effort"`` starts anyway and ``status().limits`` says what holds. Example::

        Console("analysis/", limits=Limits(memory="2GiB", processes=64, cpu=1.0))
    """

    memory: int | str | None = "4GiB"
    processes: int | None = 256
    cpu: float | None = None
    tmpdir: int | str | None = "2GiB"
    recording: int | str | None = "256MiB"
    #: Bytes a session may add to its writable workspace and roots (net: deleting gives budget back).
    writes: int | str | None = "1GiB"
    #: Files and folders a session may add to its writable workspace and roots (empty files cost
    #: the writes limit nothing, yet fill the file system's inodes).
    files: int | None = 100_000
    enforce: Literal["strict", "required", "best_effort"] = "required"

    def __post_init__(self) -> None:
        if self.enforce not in ("strict", "required", "best_effort"):
            raise LaunchRefused(f"Limits.enforce must be 'strict', 'required' or 'best_effort', not {self.enforce!r}")
        for name in ("memory", "tmpdir", "recording", "writes"):
            parse_size(getattr(self, name), name)
        processes = self.processes
        if processes is not None and (
            not isinstance(processes, int) or isinstance(processes, bool) or not MIN_PROCESSES <= processes <= 1 << 22
        ):
            raise LaunchRefused(
                f"limit 'processes' must be an integer from {MIN_PROCESSES} up (or None), not {self.processes!r}: "
                "an idle Python worker alone runs about 11 tasks, and the limit counts them"
            )
        files = self.files
        if files is not None and (not isinstance(files, int) or isinstance(files, bool) or not 1 <= files <= 1 << 31):
            raise LaunchRefused(
                f"limit 'files' must be a whole number of files and folders, 1 or more (or None), not {files!r}"
            )
        if self.cpu is not None and (
            not isinstance(self.cpu, int | float)
            or isinstance(self.cpu, bool)
            or not math.isfinite(self.cpu)
            or not 0.01 <= self.cpu <= 4096
        ):
            raise LaunchRefused(f"limit 'cpu' must be a number of CPUs such as 1.5 (or None), not {self.cpu!r}")

    def bytes(self, name: str) -> int | None:
        """The limit ``name`` in bytes (memory, tmpdir, recording, writes)."""
        return parse_size(getattr(self, name), name)

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def limits_from_mapping(data: Mapping[str, Any], source: str) -> Limits:
    """A profile's ``limits:`` mapping -> Limits (unknown keys refused)."""
    known = {f.name for f in fields(Limits)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise LaunchRefused(
            f"sandbox profile {source!r}: unknown limit(s) {', '.join(unknown)}; allowed: {', '.join(sorted(known))}"
        )
    return replace(Limits(), **dict(data))


class Mechanism(StrEnum):
    """What enforces a limit (``_plan`` chooses it). Each value is the string users see in
    ``status().limits[name]["enforced_by"]`` and ``doctor``; a member equals that string."""

    CGROUP2 = "cgroup2"  # a cgroup v2 subtree of the session's own
    CGROUP1 = "cgroup1"  # writable cgroup v1 hierarchies
    SYSTEMD_SCOPE = "systemd-scope"  # a transient systemd scope of the session's own
    RLIMIT = "rlimit"  # per process (RLIMIT_AS, RLIMIT_FSIZE)
    USERNS_RLIMIT = "userns-rlimit"  # RLIMIT_NPROC counted over the session's user namespace
    TMPFS = "tmpfs"  # a size-capped tmpfs in the session's view
    ACCOUNTING = "accounting"  # the bridge's books of what cells add to writable folders
    READ_ONLY_VIEW = "read-only-view"  # nothing to hold: cells can write nothing but their TMPDIR
    WATCHED = "watched"  # the bridge's sampled watch (memory without a cgroup; hidden names kept hidden)


@dataclass(frozen=True, slots=True)
class LimitReport:
    """One limit as it holds in a running session: its value and what enforces it (None: nothing)."""

    value: int | float | None
    enforced_by: Mechanism | None
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        """What ``status().limits`` shows: the mechanism as its plain string."""
        mechanism = None if self.enforced_by is None else self.enforced_by.value
        return {"value": self.value, "enforced_by": mechanism, "note": self.note}
