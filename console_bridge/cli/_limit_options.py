"""The limit and view options every face takes (``run``, ``serve``): one definition, one translation."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from console_bridge._confinement._limits import MIN_PROCESSES, Limits
from console_bridge._vetting._profiles import load_profile
from console_bridge.cli._common import ByteSize, FiniteFloat

__all__ = ["NO_LIMIT", "LimitSize", "OrNone", "limit_options", "limits_from_options"]

F = TypeVar("F", bound=Callable[..., Any])

#: What a limit option takes for "no limit" (the profile's value is dropped, ``Limits(name=None)``).
NO_LIMIT = "none"


if TYPE_CHECKING:
    _AnyParam = click.ParamType[Any]
else:  # click < 8.2 has no generic ParamType
    _AnyParam = click.ParamType


class OrNone(_AnyParam):
    """A limit's value, or ``none`` for no limit."""

    def __init__(self, inner: _AnyParam) -> None:
        self.inner = inner
        self.name = f"{inner.name}|none"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and value.strip().lower() == NO_LIMIT:
            return NO_LIMIT
        try:
            return self.inner.convert(value, param, ctx)
        except click.BadParameter as exc:
            self.fail(f"{exc.message.rstrip('.')}, or none for no limit", param, ctx)


class LimitSize(ByteSize):
    """A size limit: at least 1 MiB (as ``Limits`` takes it)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        size = super().convert(value, param, ctx)
        if size < 1 << 20:
            self.fail(f"{value!r} is {size} bytes; give at least 1MiB", param, ctx)
        return size


def _limit(flag: str, kind: _AnyParam, text: str) -> Callable[[F], F]:
    return click.option(flag, type=OrNone(kind), help=text)


_OPTIONS = (
    _limit("--memory", LimitSize(), "Memory limit of the session's whole tree (e.g. 2GiB; none: no limit)."),
    _limit(
        "--processes",
        click.IntRange(min=MIN_PROCESSES),
        "Processes and threads the session's tree may hold (none: no limit).",
    ),
    _limit("--cpu", FiniteFloat(min=0.01, max=4096), "CPUs' worth of time, e.g. 1.5 (none: no cap)."),
    _limit("--tmpdir-limit", LimitSize(), "Bytes the session may write to its private TMPDIR (none: no cap)."),
    _limit(
        "--recording-limit",
        LimitSize(),
        "Bytes the session's whole recording may hold on disk; past it a cell's raw output is not kept (none: no "
        "cap; --strict needs none, since only an rlimit holds it).",
    ),
    _limit(
        "--writes-limit",
        LimitSize(),
        "Bytes the code may add to a writable workspace and roots: the bridge's accounting stops the cells past "
        "it; nothing to hold under a read-only profile (none: no limit).",
    ),
    _limit(
        "--files-limit",
        click.IntRange(min=1),
        "Files and folders the code may add to a writable workspace and roots (default 100000; none: no limit).",
    ),
    click.option(
        "--best-effort",
        is_flag=True,
        help="Start even where a limit cannot be enforced on this host (status and doctor say what holds).",
    ),
    click.option(
        "--strict",
        is_flag=True,
        help="Refuse unless a cgroup or a file system cap holds every limit (no rlimit, no accounting).",
    ),
    click.option(
        "--read-root",
        "read_roots",
        multiple=True,
        metavar="DIR",
        help="A host folder the code may read (repeatable; added to the session's view read-only).",
    ),
)


def limit_options(func: F) -> F:
    """Add ``--memory --processes --cpu --tmpdir-limit --recording-limit --writes-limit --files-limit
    --best-effort --strict --read-root``."""
    for option in reversed(_OPTIONS):
        func = option(func)
    return func


def limits_from_options(profile: str, options: dict[str, Any]) -> Limits | None:
    """The session's ``Limits`` from the command line over the profile's (None: the profile's as they are)."""
    given = {
        "memory": options.get("memory"),
        "processes": options.get("processes"),
        "cpu": options.get("cpu"),
        "tmpdir": options.get("tmpdir_limit"),
        "recording": options.get("recording_limit"),
        "writes": options.get("writes_limit"),
        "files": options.get("files_limit"),
    }
    changes: dict[str, Any] = {k: None if v == NO_LIMIT else v for k, v in given.items() if v is not None}
    if options.get("best_effort") and options.get("strict"):
        raise click.UsageError("--best-effort and --strict contradict each other; give one")
    if options.get("best_effort"):
        changes["enforce"] = "best_effort"
    elif options.get("strict"):
        changes["enforce"] = "strict"
    if not changes:
        return None
    return dataclasses.replace(load_profile(profile).limits, **changes)
