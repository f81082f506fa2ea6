"""Shared pieces of the command line: exit codes, one-paragraph errors, parameter types, tables.

Everything here is pure (no processes) apart from writing to the given streams.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Sequence
from enum import IntEnum
from typing import TYPE_CHECKING, Any, NoReturn

import click

from console_bridge._errors import (
    BridgeError,
    CallTimeout,
    CellTimeout,
    LaunchRefused,
    VerificationFailed,
)
from console_bridge.cli._output import host_line

__all__ = [
    "PREFIX",
    "ByteSize",
    "Duration",
    "ExitCode",
    "FiniteFloat",
    "error_text",
    "exit_code_for",
    "fail",
    "human_size",
    "iso",
    "parse_duration",
    "parse_size",
    "table",
]

PREFIX = "console-bridge"


class FiniteFloat(click.FloatRange):
    """A ``click.FloatRange`` that refuses ``nan`` and ``inf`` (click's own passes ``nan``: no comparison
    with it is true, so ``--timeout nan`` was taken)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


class ExitCode(IntEnum):
    """The command line's exit statuses (api-contract.md, Command line)."""

    OK = 0
    CODE_ERROR = 1  # the code raised or returned an error (also: any other failure)
    USAGE = 2  # click's own status for usage errors
    LAUNCH = 3  # launch refused or verification failed
    TIMEOUT = 4  # a cell or a request passed its deadline
    HANGUP = 129  # SIGHUP (the terminal closed): stopped, the evidence kept
    INTERRUPTED = 130  # Ctrl-C (128 + SIGINT), the shell convention
    TERMINATED = 143  # SIGTERM (a CI job's timeout, docker stop): stopped, the evidence kept


def exit_code_for(exc: BaseException) -> ExitCode:
    """The exit status for an error raised by the library."""
    if isinstance(exc, LaunchRefused | VerificationFailed):
        return ExitCode.LAUNCH
    if isinstance(exc, CellTimeout | CallTimeout):
        return ExitCode.TIMEOUT
    return ExitCode.CODE_ERROR


def error_text(exc: BaseException, *, debug: bool = False) -> str:
    """One readable paragraph for ``exc``; with ``debug``, the server's stderr tail too."""
    text = str(exc) or type(exc).__name__
    if isinstance(exc, BridgeError) and not debug:
        text = exc.message
    if not debug:
        text = " ".join(part.strip() for part in text.strip().splitlines() if part.strip())
    return text


def fail(message: str, code: int = ExitCode.CODE_ERROR) -> NoReturn:
    """Print ``console-bridge: MESSAGE`` on stderr and exit with ``code``."""
    click.echo(f"{PREFIX}: {host_line(message)}", err=True)
    raise click.exceptions.Exit(int(code))


# ------------------------------------------------------------------ durations and sizes
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$", re.IGNORECASE)
_DURATION_UNITS = {"": 86400.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}


def parse_duration(text: str) -> dt.timedelta:
    """``"7d"``, ``"12h"``, ``"30m"``, ``"45s"``, ``"2w"`` (a bare number means days)."""
    match = _DURATION.match(text)
    if not match:
        raise ValueError(f"{text!r} is not a duration; use a number with s, m, h, d or w, like 7d or 12h")
    return dt.timedelta(seconds=float(match.group(1)) * _DURATION_UNITS[match.group(2).lower()])


def parse_size(text: str) -> int:
    """``"1G"``, ``"500M"``, ``"10k"``, ``"2GiB"``, ``"4096"`` (bytes; powers of 1024)."""
    match = _SIZE.match(text)
    if not match:
        raise ValueError(f"{text!r} is not a size; use a number with K, M, G or T, like 500M or 1G")
    return int(float(match.group(1)) * _SIZE_UNITS[match.group(2).lower()])


def human_size(size: int) -> str:
    """``1536`` -> ``"1.5 KiB"`` (powers of 1024, named as such)."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


if TYPE_CHECKING:
    _DurationBase = click.ParamType[dt.timedelta]
    _SizeBase = click.ParamType[int]
else:  # click < 8.2 has no generic ParamType
    _DurationBase = _SizeBase = click.ParamType


class Duration(_DurationBase):
    name = "DURATION"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> dt.timedelta:
        if isinstance(value, dt.timedelta):
            return value
        try:
            return parse_duration(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


class ByteSize(_SizeBase):
    name = "SIZE"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        try:
            return parse_size(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


# ------------------------------------------------------------------ presentation
def iso(moment: dt.datetime | None) -> str | None:
    """ISO 8601 in UTC with a ``Z``, or None."""
    if moment is None:
        return None
    return moment.astimezone(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain left-aligned table; the last column is not padded."""
    widths = [len(h) for h in headers]
    for row in rows:
        for index, cell in enumerate(row):
            widths[index] = max(widths[index], len(cell))
    lines = []
    for row in [list(headers), *[list(r) for r in rows]]:
        cells = [cell.ljust(widths[i]) if i < len(row) - 1 else cell for i, cell in enumerate(row)]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)
