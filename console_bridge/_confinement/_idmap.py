"""Which host ids root's sessions run as: an unprivileged range no account uses, checked at start.

Started by root, a session's user namespace maps its ids 0..65535 to a block of host ids
(``_namespaces.make_user_namespace``); each live session holds a block of its own
(``_namespaces.claim_ids``: a lock file per block, held while the session lives), so sessions
are apart by uid too. The range the blocks come from is, first found:

1. ``CONSOLE_BRIDGE_ID_RANGE=START:COUNT`` (both decimal);
2. root's own entries in ``/etc/subuid`` and ``/etc/subgid`` (the same START:COUNT in both);
3. the default, :data:`DEFAULT_RANGE`: 1879048192 (0x70000000) to 2147352575, the block
   systemd leaves unused between its container range (524288-1879048191) and its "foreign"
   range (0x7FFE0000), below the ids some tools read as negative (2^31 and up).

Before a session starts the range is checked free (:func:`session_ids`): no account or group
of the host's database has an id in it, and no other entry of ``/etc/subuid``/``/etc/subgid``
(another user's rootless containers) overlaps it; otherwise the start is refused, naming the
account and the fix. A normal user's sessions map the user to itself: nothing to choose.
"""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from console_bridge._errors import LaunchRefused

__all__ = [
    "BLOCK",
    "DEFAULT_RANGE",
    "ENV",
    "IdRange",
    "choose_range",
    "locks_dir",
    "range_problem",
    "session_ids",
    "session_mapping",
]

#: Ids per session: 0..65535 inside (root, the usual accounts and nobody, 65534).
BLOCK = 65536
#: (start, count) used when neither the environment nor /etc/subuid names a range: 4,094 blocks.
DEFAULT_RANGE = (0x70000000, 0x7FFE0000 - 0x70000000)
ENV = "CONSOLE_BRIDGE_ID_RANGE"
_SUBID_FILES = ("/etc/subuid", "/etc/subgid")
_CACHE: dict[tuple[object, ...], IdRange] = {}


@dataclass(frozen=True, slots=True)
class IdRange:
    """Host ids root's sessions take their blocks from, and where that range was set."""

    start: int
    count: int
    source: str  # "CONSOLE_BRIDGE_ID_RANGE" | "/etc/subuid" | "default"

    @property
    def end(self) -> int:
        """The last id of the range."""
        return self.start + self.count - 1

    @property
    def blocks(self) -> int:
        return self.count // BLOCK

    def text(self) -> str:
        return f"{self.start}-{self.end} ({self.blocks} blocks of {BLOCK}, from {self.source})"

    def config(self) -> dict[str, int | str]:
        """What the supervisor needs to claim a block and map it (the view's ``ids``)."""
        return {"start": self.start, "count": self.count, "size": BLOCK, "locks": str(locks_dir())}


def locks_dir() -> Path:
    """Where the blocks' lock files live: one folder for every root session on the host (``/run``
    is emptied at boot, as the locks' holders are)."""
    run = Path("/run")
    if os.geteuid() == 0 and run.is_dir() and os.access(run, os.W_OK):
        return run / "console-bridge" / "ids"
    from console_bridge._confinement._registry import state_dir

    return state_dir() / "ids"


def _parse_range(text: str, where: str) -> tuple[int, int]:
    start_text, sep, count_text = text.strip().partition(":")
    try:
        if not sep:
            raise ValueError
        start, count = int(start_text), int(count_text)
    except ValueError:
        raise LaunchRefused(
            f"{where} is {text!r}, not START:COUNT (two decimal numbers, e.g. {DEFAULT_RANGE[0]}:{DEFAULT_RANGE[1]}). "
            f"Fix: set it to a range of host ids no account uses, or unset it for the default. Nothing was started."
        ) from None
    return start, count


def _subid_entries(path: str) -> list[tuple[str, int, int]]:
    entries: list[tuple[str, int, int]] = []
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return entries
    for line in text.splitlines():
        parts = line.strip().split(":")
        if len(parts) == 3 and not parts[0].startswith("#"):
            try:
                entries.append((parts[0], int(parts[1]), int(parts[2])))
            except ValueError:
                continue
    return entries


#: What the host's files say: ``/etc/subuid`` and ``/etc/subgid`` entries (name, start, count).
SubIds = dict[str, list[tuple[str, int, int]]]


def choose_range(env: str | None, subids: SubIds, who: tuple[str, ...]) -> IdRange:
    """The range from ``CONSOLE_BRIDGE_ID_RANGE`` (``env``), else the invoking user's (``who``: its
    name and uid) entries in both subid files, else the default (pure)."""
    if env:
        return IdRange(*_parse_range(env, ENV), source=ENV)
    found = []
    for path in _SUBID_FILES:
        mine = [(start, count) for name, start, count in subids.get(path, []) if name in who]
        found.append(mine[0] if mine else None)
    if found[0] is not None and found[0] == found[1]:
        return IdRange(found[0][0], found[0][1], source="/etc/subuid")
    return IdRange(*DEFAULT_RANGE, source="default")


def range_problem(
    ids: IdRange,
    who: tuple[str, ...],
    accounts: Iterable[tuple[str, int]],
    groups: Iterable[tuple[str, int]],
    subids: SubIds,
) -> str | None:
    """Why ``ids`` is not a range of unused, unprivileged host ids (None: it is; pure)."""
    if ids.start < BLOCK:
        return f"it starts at {ids.start}, among the ids of the host's own accounts (below {BLOCK})"
    if ids.end >= 1 << 31:
        return "it reaches 2^31, ids some tools read as negative"
    if ids.count < BLOCK:
        return f"it holds {ids.count} ids, fewer than one session's block of {BLOCK}"
    for kind, entries in (("account", accounts), ("group", groups)):
        for name, number in entries:
            if ids.start <= number <= ids.end:
                return f"the {kind} {name!r} has {'uid' if kind == 'account' else 'gid'} {number}, inside it"
    for path in _SUBID_FILES:
        for name, start, count in subids.get(path, []):
            if ids.source == "/etc/subuid" and name in who:
                continue
            if start <= ids.end and ids.start <= start + count - 1:
                return f"{path} gives {name!r} the ids {start}-{start + count - 1}, which overlap it"
    return None


def _stamp() -> tuple[object, ...]:
    marks: list[object] = [os.environ.get(ENV)]
    for path in ("/etc/passwd", "/etc/group", *_SUBID_FILES):
        try:
            info = os.stat(path)
            marks.append((info.st_mtime_ns, info.st_size))
        except OSError:
            marks.append(None)
    return tuple(marks)


def session_ids() -> IdRange:
    """The range root's sessions take their ids from, checked free; ``LaunchRefused`` naming the
    account or entry in the way, and the fix, when it is not (cached until those files change)."""
    key = _stamp()
    cached = _CACHE.get(key)
    if cached is not None:
        return cached
    who = ("root", "0")
    with contextlib.suppress(KeyError):
        who = (pwd.getpwuid(os.geteuid()).pw_name, str(os.geteuid()))
    subids = {path: _subid_entries(path) for path in _SUBID_FILES}
    ids = choose_range(os.environ.get(ENV), subids, who)
    accounts = ((entry.pw_name, entry.pw_uid) for entry in pwd.getpwall())
    groups = ((entry.gr_name, entry.gr_gid) for entry in grp.getgrall())
    problem = range_problem(ids, who, accounts, groups, subids)
    if problem is not None:
        raise LaunchRefused(
            f"started by root, a session runs as an unprivileged block of host ids, and the range {ids.text()} is "
            f"not free: {problem}. Fix: set {ENV}=START:COUNT to host ids no account, group or /etc/subuid entry "
            f"uses (at least {BLOCK}, below 2^31), or give root its own range in /etc/subuid and /etc/subgid; or "
            "run console-bridge as a normal user. Nothing was started.",
            details={"ids": ids.text(), "problem": problem},
        )
    _CACHE.clear()
    _CACHE[key] = ids
    return ids


def session_mapping(server_pid: int | None) -> dict[str, object] | None:
    """How a running session's ids map to the host's, read from its server's ``uid_map``/``gid_map``
    (``status().extra["ids"]``): {"uid": "0 1879048192 65536", "gid": ..., "root_is": host id}."""
    if server_pid is None:
        return None
    out: dict[str, object] = {}
    for name in ("uid", "gid"):
        try:
            lines = Path(f"/proc/{server_pid}/{name}_map").read_text(encoding="ascii").split("\n")
        except OSError:
            return None
        out[name] = " ".join(" ".join(line.split()) for line in lines if line.strip())
    first = str(out["uid"]).split()
    out["root_is"] = int(first[1]) if len(first) >= 3 and first[0] == "0" else None
    return out
