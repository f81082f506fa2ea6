"""``console-bridge run``: what to run. Every file is read up front, and what happened to each is kept."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from console_bridge._results import CellResult
from console_bridge.cli._detect import language_for

__all__ = ["FileRun", "Source", "load_sources"]


@dataclass
class Source:
    """One file (or stdin) to run as one cell."""

    name: str
    path: str | None
    language: str
    code: str
    notebook_cell: int | None = None  # a notebook's cell: its index among the notebook's cells


@dataclass
class FileRun:
    """What happened to one source."""

    source: Source
    status: str = "not run"  # ok | error | timeout | stopped (a stop signal) | interrupted | not run
    chunks: list[str] = field(default_factory=list)  # what was shown, image markers included
    streamed: list[str] = field(default_factory=list)  # each chunk's output as the library merges it
    images: list[str] = field(default_factory=list)
    elapsed: float | None = None
    error: str | None = None
    result: CellResult | None = None  # the whole cell (a notebook's cell gets its outputs from it)

    @property
    def output(self) -> str:
        return "".join(self.chunks)

    def as_dict(self, *, with_output: bool) -> dict[str, Any]:
        data: dict[str, Any] = {
            "file": self.source.name,
            "path": self.source.path,
            "language": self.source.language,
            "status": self.status,
            "elapsed_s": None if self.elapsed is None else round(self.elapsed, 3),
            "images": list(self.images),
            "error": self.error,
            "failure": self._failure(),
            "usage": self._usage(),
            "truncated": self.result is not None and self.result.truncated,  # past --max-output: head and tail
            "omitted_bytes": self.result.omitted_bytes if self.result is not None else 0,
        }
        if with_output:
            data["output"] = self.output
        return data

    def _failure(self) -> dict[str, str] | None:
        """The code's failure as the worker reported it (name, message, kind, traceback), else None."""
        error = self.result.error if self.result is not None else None
        if error is None:
            return None
        return {"name": error.name, "message": error.message, "kind": error.kind, "traceback": error.traceback}

    def _usage(self) -> dict[str, float | int | None] | None:
        """What the cell used (CPU and wall seconds, the memory it added at most), where measured."""
        usage = self.result.usage if self.result is not None else None
        if usage is None:
            return None
        return {
            "cpu_seconds": round(usage.cpu_seconds, 3) if usage.cpu_seconds is not None else None,
            "wall_seconds": round(usage.wall_seconds, 3) if usage.wall_seconds is not None else None,
            "memory_peak": usage.memory_peak,
        }


def load_sources(files: tuple[str, ...], language: str | None) -> list[Source]:
    """Read every file up front (a usage error, exit 2, when one cannot be read or has no language)."""
    sources: list[Source] = []
    if files.count("-") > 1:
        raise click.UsageError("'-' (stdin) can be given only once")
    for name in files:
        lang = language or ("python" if name == "-" else language_for(name))
        if lang is None:
            raise click.UsageError(
                f"cannot tell the language of {name!r} from its extension (known: .py, .R/.r, .sql, .ipynb); pass "
                "--language"
            )
        if name == "-":
            code = sys.stdin.read()
            sources.append(Source("<stdin>", None, lang, code))
            continue
        path = Path(name)
        try:
            code = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise click.BadParameter(f"{name!r} is not UTF-8 text", param_hint="FILE") from None
        except OSError as exc:
            raise click.BadParameter(f"{name!r} cannot be read ({exc.strerror or exc})", param_hint="FILE") from None
        sources.append(Source(name, str(path.absolute()), lang, code))
    return sources
