"""The limit and view options every face takes (``run``, ``serve``): one definition, one translation."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

import click

from console_bridge._confinement._limits import Limits
from console_bridge._console._profiles import load_profile
from console_bridge.cli._common import ByteSize

__all__ = ["limit_options", "limits_from_options"]

F = TypeVar("F", bound=Callable[..., Any])

_OPTIONS = (
    click.option("--memory", type=ByteSize(), help="Memory limit of the session's whole tree (e.g. 2GiB)."),
    click.option("--processes", type=click.IntRange(min=8), help="Processes and threads the session's tree may hold."),
    click.option("--cpu", type=click.FloatRange(min=0.01, max=4096), help="CPUs' worth of time, e.g. 1.5."),
    click.option("--tmpdir-limit", type=ByteSize(), help="Bytes the session may write to its private TMPDIR."),
    click.option("--recording-limit", type=ByteSize(), help="Raw output kept per recording file."),
    click.option(
        "--writes-limit",
        type=ByteSize(),
        help="Bytes the code may add to a writable workspace and roots (no mechanism holds it yet: refused "
        "unless --best-effort).",
    ),
    click.option(
        "--best-effort",
        is_flag=True,
        help="Start even where a limit cannot be enforced on this host (status and doctor say what holds).",
    ),
    click.option(
        "--strict",
        is_flag=True,
        help="Refuse unless every limit holds for the whole session tree (no per-process rlimit).",
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
    """Add ``--memory --processes --cpu --tmpdir-limit --recording-limit --writes-limit --best-effort --strict
    --read-root``."""
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
    }
    changes: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
    if options.get("best_effort") and options.get("strict"):
        raise click.UsageError("--best-effort and --strict contradict each other; give one")
    if options.get("best_effort"):
        changes["enforce"] = "best_effort"
    elif options.get("strict"):
        changes["enforce"] = "strict"
    if not changes:
        return None
    return dataclasses.replace(load_profile(profile).limits, **changes)
