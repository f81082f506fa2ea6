"""Parsing ``%%console`` lines and deciding when the kernel's session must change (pure, no IPython)."""

from __future__ import annotations

import argparse
import math
import os
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

__all__ = [
    "DEFAULT_POLL_WINDOW",
    "CellOptions",
    "LanguageMissing",
    "OptionsError",
    "SessionSpec",
    "describe_change",
    "parse_cell_line",
    "plan_session",
]

#: Seconds per observation window of the magic's session: output reaches the cell at least this often.
DEFAULT_POLL_WINDOW = 1.0
LANGUAGES = ("python", "sql", "r")
USAGE = (
    "%%console [python|sql|r] [--profile NAME_OR_FILE] [--workspace DIR] [--timeout SECONDS] "
    "[--poll-window SECONDS] [--recordings-dir DIR] [--python VENV] [--languages python,sql,r] "
    "[--read-root DIR] [--memory SIZE] [--processes N] [--cpu CPUS] [--tmpdir-limit SIZE] [--recording-limit SIZE] "
    "[--writes-limit SIZE] [--files-limit N] [--best-effort|--strict] (a limit given as none: no limit)"
)


class OptionsError(ValueError):
    """A ``%%console`` line that cannot be parsed; the message says what to change."""


class LanguageMissing(OptionsError):
    """A cell in a language the open session lacks: reopening would lose its state, so it is refused."""


@dataclass(frozen=True, slots=True)
class CellOptions:
    """One ``%%console`` line. ``None`` means "not given": keep what the open session has."""

    language: str = "python"
    timeout: float | None = None
    profile: str | None = None
    workspace: str | None = None
    poll_window: float | None = None
    recordings_dir: str | None = None
    python: str | None = None
    languages: tuple[str, ...] | None = None
    #: ``Limits`` fields the line changes (``memory``, ``processes``, ``cpu``, ``tmpdir``, ``recording``,
    #: ``writes``, ``enforce``; None for a limit given as ``none``)
    limits: tuple[tuple[str, Any], ...] | None = None
    read_roots: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class SessionSpec:
    """What the kernel's one session was opened with; a cell asking for something else reopens it."""

    workspace: Path
    profile: str = "read-only"
    poll_window: float = DEFAULT_POLL_WINDOW
    recordings_dir: Path | None = None
    languages: tuple[str, ...] = ("python", "sql")
    python: Path | None = None
    limits: tuple[tuple[str, Any], ...] = ()  # changes to the profile's Limits
    read_roots: tuple[Path, ...] = ()


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise OptionsError(f"{message}\nusage: {USAGE}")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        raise OptionsError(message or f"usage: {USAGE}")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive, finite number of seconds")
    return value


def _parser() -> _Parser:
    parser = _Parser(prog="%%console", add_help=False, allow_abbrev=False)
    parser.add_argument("language", nargs="?", default="python", choices=LANGUAGES)
    parser.add_argument("--profile")
    parser.add_argument("--workspace")
    parser.add_argument("--timeout", type=_seconds)
    parser.add_argument("--poll-window", type=_seconds)
    parser.add_argument("--recordings-dir")
    parser.add_argument("--python")
    parser.add_argument("--languages", type=_languages)
    parser.add_argument("--memory", type=_or_none(str))
    parser.add_argument("--processes", type=_or_none(int))
    parser.add_argument("--cpu", type=_or_none(float))
    parser.add_argument("--tmpdir-limit", type=_or_none(str))
    parser.add_argument("--recording-limit", type=_or_none(str))
    parser.add_argument("--writes-limit", type=_or_none(str))
    parser.add_argument("--files-limit", type=_or_none(int))
    parser.add_argument("--best-effort", action="store_true")
    parser.add_argument("--strict", action="store_true")
    parser.add_argument("--read-root", action="append", dest="read_roots")
    return parser


#: What a limit option takes for "no limit" (as on the command line).
NO_LIMIT = "none"


def _or_none(kind: Callable[[str], Any]) -> Callable[[str], Any]:
    """A limit's value read by ``kind``, or ``none`` for no limit."""

    def read(text: str) -> Any:
        if text.strip().lower() == NO_LIMIT:
            return NO_LIMIT
        try:
            return kind(text)
        except ValueError:
            what = {"int": "a whole number", "float": "a number"}.get(kind.__name__, "a value")
            raise argparse.ArgumentTypeError(f"{text!r} is not {what} (or none for no limit)") from None

    read.__name__ = kind.__name__  # (argparse names the type in its messages)
    return read


def _languages(text: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(name.strip().lower() for name in text.split(",") if name.strip()))
    wrong = [name for name in names if name not in LANGUAGES]
    if not names or wrong:
        raise argparse.ArgumentTypeError(f"{text!r} must list languages from {', '.join(LANGUAGES)}, e.g. python,sql,r")
    return names


def parse_cell_line(line: str) -> CellOptions:
    """Parse the text after ``%%console``; raise :class:`OptionsError` with the usage on a bad line."""
    try:
        words = shlex.split(line)
    except ValueError as exc:
        raise OptionsError(f"{exc} in {line!r}\nusage: {USAGE}") from None
    ns = _parser().parse_args(words)
    if ns.best_effort and ns.strict:
        raise OptionsError(f"--best-effort and --strict contradict each other; give one\nusage: {USAGE}")
    given = {
        "memory": ns.memory,
        "processes": ns.processes,
        "cpu": ns.cpu,
        "tmpdir": ns.tmpdir_limit,
        "recording": ns.recording_limit,
        "writes": ns.writes_limit,
        "files": ns.files_limit,
    }
    changes: dict[str, Any] = {
        key: None if value == NO_LIMIT else value for key, value in given.items() if value is not None
    }
    if ns.best_effort or ns.strict:
        changes["enforce"] = "best_effort" if ns.best_effort else "strict"
    return CellOptions(
        language=ns.language,
        timeout=ns.timeout,
        profile=ns.profile,
        workspace=ns.workspace,
        poll_window=ns.poll_window,
        recordings_dir=ns.recordings_dir,
        python=ns.python,
        languages=ns.languages,
        limits=tuple(sorted(changes.items())) if changes else None,
        read_roots=tuple(ns.read_roots) if ns.read_roots else None,
    )


def _path(text: str, cwd: Path) -> Path:
    path = Path(text).expanduser()
    return Path(os.path.normpath(path if path.is_absolute() else cwd / path))


def plan_session(
    current: SessionSpec | None,
    options: CellOptions,
    *,
    cwd: Path,
    default_languages: tuple[str, ...] = ("python", "sql"),
) -> SessionSpec:
    """The session a cell needs: the current one with what the cell asks for changed.

    Relative paths resolve against ``cwd`` (the kernel's working folder). The first session
    opens with ``--languages`` if given, else ``default_languages`` (the magic passes R too when
    R is installed), plus the cell's language. A later cell in a language the open session lacks
    raises :class:`LanguageMissing` (reopening would lose its state) unless it names
    ``--languages``: an explicit request to reopen.
    """
    if options.languages is not None and options.language not in options.languages:
        raise OptionsError(
            f"--languages {','.join(options.languages)} does not include this cell's language ({options.language}); "
            "add it"
        )
    spec = (
        current
        if current is not None
        else SessionSpec(workspace=_path(".", cwd), languages=options.languages or default_languages)
    )
    if options.languages is not None:
        languages = options.languages
    elif options.language in spec.languages:
        languages = spec.languages
    elif current is None:
        languages = (*spec.languages, options.language)
    else:
        wanted = ",".join((*spec.languages, options.language))
        raise LanguageMissing(
            f"the open session has no {options.language} (languages: {', '.join(spec.languages)}), and opening "
            f"another would lose its state. Start this cell with `%%console {options.language} --languages "
            f"{wanted}` to reopen the session with it (state lost), or put `--languages {wanted}` on the "
            "first %%console cell"
        )
    workspace, recordings = options.workspace, options.recordings_dir
    return SessionSpec(
        workspace=_path(workspace, cwd) if workspace is not None else spec.workspace,
        profile=options.profile if options.profile is not None else spec.profile,
        poll_window=options.poll_window if options.poll_window is not None else spec.poll_window,
        recordings_dir=_path(recordings, cwd) if recordings is not None else spec.recordings_dir,
        languages=languages,
        python=_path(options.python, cwd) if options.python is not None else spec.python,
        limits=options.limits if options.limits is not None else spec.limits,
        read_roots=(
            tuple(_path(root, cwd) for root in options.read_roots)
            if options.read_roots is not None
            else spec.read_roots
        ),
    )


def describe_change(old: SessionSpec, new: SessionSpec) -> str:
    """What differs between two specs, for the "closing and reopening" notice."""
    parts = []
    for label, before, after in (
        ("workspace", old.workspace, new.workspace),
        ("profile", old.profile, new.profile),
        ("poll window", old.poll_window, new.poll_window),
        ("recordings dir", old.recordings_dir, new.recordings_dir),
        ("languages", ", ".join(old.languages), ", ".join(new.languages)),
        ("python", old.python, new.python),
        ("limits", dict(old.limits), dict(new.limits)),
        ("read roots", [str(p) for p in old.read_roots], [str(p) for p in new.read_roots]),
    ):
        if before != after:
            parts.append(f"{label} {str(before)!r} -> {str(after)!r}")
    return "; ".join(parts)
