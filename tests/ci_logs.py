"""Log parsers that read a CI log the way each runner does, to find the commands it would obey.

- GitHub Actions (the runner's ``ActionCommandManager``): a line whose text, leading spaces
  trimmed, starts with ``::`` is a command (v2), and so is ``##[name ...]`` anywhere in a line
  (v1); ``::stop-commands::TOKEN`` stops all processing until a line that is exactly
  ``::TOKEN::``.
- Azure Pipelines: ``##vso[`` anywhere in a line, ``##[`` at its start.
- TeamCity: ``##teamcity[`` anywhere in a line.
- Buildkite: a line starting a group (``--- ``, ``+++ ``, ``~~~ ``) or expanding one (``^^^ +++``).

Each returns the commands found, as ``(runner, line)``; the fence's own stop/resume lines are
not counted (they are what makes the rest inert).
"""

from __future__ import annotations

import re

__all__ = ["live_commands"]

_V1 = re.compile(r"##\[[A-Za-z-]+[ \]]")
_BUILDKITE = re.compile(r"(?:---|\+\+\+|~~~)(?:\s|$)|\^\^\^ \+\+\+")


def github(log: str) -> list[str]:
    found: list[str] = []
    stopped: str | None = None
    for line in log.splitlines():
        if stopped is not None:
            if line.strip() == f"::{stopped}::":
                stopped = None
            continue
        text = line.lstrip()
        if text.startswith("::stop-commands::"):
            stopped = text[len("::stop-commands::") :].strip()
            continue
        if text.startswith("::") or _V1.search(line):
            found.append(line)
    return found


def azure(log: str) -> list[str]:
    return [line for line in log.splitlines() if "##vso[" in line.lower() or line.lstrip().startswith("##[")]


def teamcity(log: str) -> list[str]:
    return [line for line in log.splitlines() if "##teamcity[" in line.lower()]


def buildkite(log: str) -> list[str]:
    return [line for line in log.splitlines() if _BUILDKITE.match(line.lstrip())]


def live_commands(log: str) -> list[tuple[str, str]]:
    """Every command any of the four runners would obey in ``log``."""
    parsers = {"github": github, "azure": azure, "teamcity": teamcity, "buildkite": buildkite}
    return [(name, line) for name, parse in parsers.items() for line in parse(log)]
