"""Output hygiene for everything the host writes: the code's output is shown, never obeyed.

What the cell prints reaches a terminal and, in CI, a log that the runner scans for commands.
Unless ``--raw`` is given, every chunk passes through :class:`CellOutput`:

- control characters other than ``\\n`` and ``\\t`` are escaped visibly (``\\x07``, ``\\x00``,
  ``\\x7f``, ``\\x9b``, ...), and so are the bidi controls (U+061C, U+200E/F, U+202A-E,
  U+2066-9) and the line/paragraph separators (U+2028/9): ``\\u202e``. A cell cannot ring the
  bell, move the cursor back over the status line (``\\r``) or reorder what the reader sees;
- a line that looks like one of the CLI's own status lines (``[console-bridge] ...`` or
  ``console-bridge: ...``, invisible characters and spaces in front ignored) gets ``[cell] ``
  in front, so it cannot pass for one where stdout and stderr share a screen or a log;
- under GitHub Actions (``GITHUB_ACTIONS=true``) the output is fenced with
  ``::stop-commands::TOKEN`` ... ``::TOKEN::`` (TOKEN random per run, unknown to the code), so
  ``::add-mask::``, ``::error::``, ``::set-output::`` and friends in it are inert;
- under Azure Pipelines (``TF_BUILD=True``) every ``##vso[`` and a ``##[`` that starts a line
  become ``##vso\\x5b`` and ``##\\x5b``, which the agent does not parse;
- under TeamCity (``TEAMCITY_VERSION`` set) every ``##teamcity[`` becomes ``##teamcity\\x5b``;
- under Buildkite (``BUILDKITE=true``) a line that starts a log group (``--- ``, ``+++ ``,
  ``~~~ ``, ``^^^ +++``) gets ``[cell] `` in front.

The host's own lines (:func:`host_line`: errors, notices, tracebacks, on stderr and stdout
alike) carry text that came from a cell too: an exception's name and message, a prompt, a
file name. Each is written as exactly one line that starts with the host's own prefix, so
nothing in it can start a line: newlines and every other control are escaped, and ``##[``,
``##vso[`` and ``##teamcity[`` become ``...\\x5b`` anywhere in it, under every CI and
outside any. They are deliberately *not* fenced with a second ``::stop-commands::``: the
runner reads stdout and stderr as two pipes in no fixed order, and a fence opened on one
stream can swallow or end the fence of the other; a line no command can start in needs no
fence.
"""

from __future__ import annotations

import re
import secrets
import unicodedata
from collections.abc import Mapping

__all__ = ["CellOutput", "escape_controls", "host_block", "host_line"]

_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_OWN_MARKERS = ("[console-bridge]", "console-bridge:")
_CELL_TAG = "[cell] "
_VSO = "##vso["
_TEAMCITY = "##teamcity["
_BUILDKITE_MARKERS = ("--- ", "+++ ", "~~~ ", "^^^ +++")
_BUILDKITE = re.compile(r"(?:---|\+\+\+|~~~)(?:\s|$)|\^\^\^ \+\+\+")
_HOST_CONTROLS = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_HOST_COMMANDS = re.compile(r"##(?:vso|teamcity)?\[", re.IGNORECASE)
_AZURE_LINE = "##["
_INVISIBLE = ("Cc", "Cf", "Zs", "Zl", "Zp")
_MAX_HELD = 4096  # characters of a line start held back at most (then shown, tagged if it imitates a status line)


def _code(match: re.Match[str]) -> str:
    point = ord(match.group())
    return f"\\x{point:02x}" if point < 0x100 else f"\\u{point:04x}"


def escape_controls(text: str) -> str:
    """``text`` with every control character except ``\\n`` and ``\\t`` (and every bidi control) escaped."""
    return _CONTROLS.sub(_code, text)


def host_line(message: str) -> str:
    """One of the host's own messages as one inert line (no newline at its end).

    Every control character (newline and carriage return included, tab kept) and every bidi
    control is escaped visibly, and ``##[``, ``##vso[``, ``##teamcity[`` become
    ``##\\x5b``, ``##vso\\x5b``, ``##teamcity\\x5b``: written after the host's prefix, no CI
    runner (GitHub Actions, Azure Pipelines, TeamCity, Buildkite) can find a command in it.
    """
    text = _HOST_CONTROLS.sub(_code, message)
    return _HOST_COMMANDS.sub(lambda match: match.group()[:-1] + "\\x5b", text)


def host_block(text: str, prefix: str) -> str:
    """A multi-line text of the host's (a traceback) as lines that each start with ``prefix``."""
    return "".join(f"{prefix}{host_line(line)}\n" for line in text.rstrip("\n").split("\n"))


def _lead(text: str) -> str:
    """``text`` without the invisible characters in front of it."""
    index = 0
    while index < len(text) and unicodedata.category(text[index]) in _INVISIBLE:
        index += 1
    return text[index:]


def _visible_start(text: str) -> str:
    """``text`` without the characters a reader cannot see (spaces, controls, format characters), lowercased."""
    return "".join(ch for ch in text if unicodedata.category(ch) not in _INVISIBLE).lower()


class CellOutput:
    """Turns the cell's output chunks into what ``run`` shows (stateful: lines may span chunks).

    ``feed()`` returns what can be shown now; the start of a line that could still become a
    status-line imitation (or an Azure command) is held back until it cannot, or until
    ``flush()``. ``opening()``/``closing()`` are the GitHub Actions fence lines ("" elsewhere).
    """

    def __init__(self, *, raw: bool, environ: Mapping[str, str]) -> None:
        self.raw = raw
        self.github = not raw and environ.get("GITHUB_ACTIONS", "").lower() == "true"
        self.azure = not raw and environ.get("TF_BUILD", "").lower() == "true"
        self.teamcity = not raw and bool(environ.get("TEAMCITY_VERSION"))
        self.buildkite = not raw and environ.get("BUILDKITE", "").lower() == "true"
        self._anywhere = ((_VSO,) if self.azure else ()) + ((_TEAMCITY,) if self.teamcity else ())
        self.token = secrets.token_hex(16) if self.github else ""
        self._held = ""
        self._line_start = True
        self._opened = False

    # ------------------------------------------------------------ the GitHub Actions fence
    def opening(self) -> str:
        """The line that stops workflow commands (once, before the first output), else ""."""
        if not self.github or self._opened:
            return ""
        self._opened = True
        return f"::stop-commands::{self.token}\n"

    def closing(self) -> str:
        """The line that resumes workflow commands, when the fence was opened, else ""."""
        if not self._opened:
            return ""
        self._opened = False
        return f"::{self.token}::\n"

    # ------------------------------------------------------------ chunks
    def feed(self, text: str) -> str:
        if self.raw:
            return text
        buffer, self._held = self._held + text, ""
        shown: list[str] = []
        while buffer:
            end = buffer.find("\n")
            if end >= 0:
                shown.append(self._piece(buffer[: end + 1]))
                buffer = buffer[end + 1 :]
                continue
            hold = self._hold_back(buffer)
            if hold:
                self._held, buffer = buffer[-hold:], buffer[:-hold]
            if buffer:
                shown.append(self._piece(buffer))
            break
        return "".join(shown)

    def flush(self) -> str:
        """What is still held back (the end of the output, or of one file's output)."""
        held, self._held = self._held, ""
        return self._piece(held) if held else ""

    def _hold_back(self, partial: str) -> int:
        """How many trailing characters of an unfinished line to keep until more arrives."""
        if self._line_start and len(partial) <= _MAX_HELD:
            start = _visible_start(partial)
            markers = _OWN_MARKERS + ((_AZURE_LINE, _VSO) if self.azure else ())
            if any(marker.startswith(start) for marker in markers):
                return len(partial)
            if self.buildkite:
                lead = _lead(partial)
                if any(marker.startswith(lead) for marker in _BUILDKITE_MARKERS):
                    return len(partial)
        held = 0
        for marker in self._anywhere:  # '##vso[' or '##teamcity[' split across chunks
            for size in range(min(len(marker) - 1, len(partial)), 0, -1):
                if marker.startswith(partial[-size:]):
                    held = max(held, size)
                    break
        return held

    def _piece(self, piece: str) -> str:
        """One piece of a line (ending with its newline when complete): escaped and neutralised."""
        prefix = ""
        if self._line_start:
            start = _visible_start(piece)
            if start.startswith(_OWN_MARKERS) or (self.buildkite and _BUILDKITE.match(_lead(piece))):
                prefix = _CELL_TAG
            if self.azure and piece.lstrip().startswith(_AZURE_LINE):
                piece = piece.replace(_AZURE_LINE, "##\\x5b", 1)
        text = escape_controls(piece)
        if self.azure:
            text = text.replace(_VSO, "##vso\\x5b")
        if self.teamcity:
            text = text.replace(_TEAMCITY, "##teamcity\\x5b")
        self._line_start = piece.endswith("\n")
        return prefix + text
