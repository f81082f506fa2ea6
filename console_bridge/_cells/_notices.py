"""Reading mcp-console's response notices (pure): running, idle, input prompts, worker exits."""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "LOST_MARK",
    "CellNotice",
    "Segments",
    "bridge_hint",
    "cut_segments",
    "join_segments",
    "read_notices",
    "split_response",
    "split_streams",
]

#: Frames of each write to the worker's sys.stderr (see ``_outcome``; noncharacters, never text).
STDERR_START = "\ufdd0"
STDERR_END = "\ufdd1"
#: Frames of a rich result's text/plain on stdout: START id SEP text END (the bundle is in outputs.jsonl).
DISPLAY_START = "\ufdd2"
DISPLAY_SEP = "\ufdd3"
DISPLAY_END = "\ufdd4"
#: A frame whose id starts with this carries a failure record the worker could not append to the
#: outcome log (its TMPDIR full, an I/O error): the record itself, in the output stream instead.
LOST_MARK = "!"
_MARKERS = re.compile("[\ufdd0-\ufdd4]")

Segments = tuple[tuple[str, str], ...]  # (stream, text) in the order the cell wrote them

RUNNING = "[running; poll with an empty send]"
IDLE = "[idle]"
DONE = "[done]"
WAITING = "[waiting for stdin]"
BUSY = "[worker is already evaluating a cell"
BEING_POLLED = "[worker evaluation is already being polled"
RESTART_REQUIRED = "explicit restart required]"
_ELAPSED = re.compile(r"^\[elapsed: [^\]]*\]$")
_PROMPT = re.compile(r'^\[input requested: "(?P<prompt>.*)"\]$')
_EXITED = re.compile(r"^\[worker exited with status (?P<status>-?\d+)\]$")
#: a worker killed by a signal (a memory kill, a limit's stop, a kill from outside): status -N
_SIGNALED = re.compile(r"^\[worker terminated by signal (?P<signal>\d+)\]$")


@dataclass(frozen=True, slots=True)
class CellNotice:
    """What the notices in one response say, and the output with the status notices removed."""

    output: str
    running: bool
    idle: bool
    waiting_for_input: bool
    prompt: str | None
    worker_exited: bool
    exit_status: int | None
    restart_required: bool
    starting: bool = False  # the server still prepares the worker ("phase: startup", ...)
    #: The recording says the cell ended, yet the response closes with the server's running notice:
    #: the server answered "running" as the cell finished, and holds the rest until an empty send.
    held: bool = False


def read_notices(text: str) -> CellNotice:
    """Split one ``send`` response into output and state notices."""
    lines = text.split("\n")
    kept: list[str] = []
    running = idle = waiting = exited = restart = False
    prompt: str | None = None
    status: int | None = None
    for line in lines:
        stripped = line.strip()
        if stripped == RUNNING:
            running = True
        elif stripped == IDLE:
            idle = True
        elif stripped == DONE:
            pass
        elif stripped == WAITING:
            waiting = True
        elif _ELAPSED.match(stripped):
            pass
        elif match := _PROMPT.match(stripped):
            prompt = match.group("prompt")
            waiting = True
        else:
            if match := _EXITED.match(stripped):
                exited, status = True, int(match.group("status"))
            elif match := _SIGNALED.match(stripped):
                exited, status = True, -int(match.group("signal"))
            if stripped.endswith(RESTART_REQUIRED):
                restart = True
            kept.append(line)
    output = "\n".join(kept)
    if running or idle or waiting or DONE in lines:
        output = output.rstrip("\n")
        if output and text.startswith(output) and not output.endswith("\n") and "\n" in text[len(output) :]:
            output += "\n"
    return CellNotice(output, running, idle, waiting, prompt, exited, status, restart)


def split_response(text: str, *, ended: bool | None, is_error: bool = False) -> CellNotice:
    """Split one ``send`` response into the cell's output and the server's status.

    ``ended`` comes from the server's recording (see ``_events``): True when the cell
    finished during this call. The server appends status notices only at the very end
    of a response, and only while a cell has not finished (``[elapsed ...]`` +
    ``[running; ...]``, ``[input requested: ...]`` + ``[waiting for stdin]``, ``[idle]``),
    or ``[done]`` alone; so only that trailing block is read, and when the cell ended only
    the running notice the server may still write as the cell ends (``held``): a cell that
    prints any other notice-like line prints output, not status.
    Worker-exit notices are read only from an error result (``is_error``, a protocol
    field). ``ended=None`` (no recording) reads the trailing block alone.
    """
    lines = text.split("\n")
    trailing_newline = bool(lines) and lines[-1] == ""
    if trailing_newline:
        lines.pop()
    running = idle = waiting = starting = held = False
    prompt: str | None = None
    if not ended:
        last = lines[-1].strip() if lines else ""
        if last == RUNNING:
            running = True
            lines.pop()
            if lines and _ELAPSED.match(lines[-1].strip()):
                starting = "; phase: " in lines[-1]
                lines.pop()
                if lines and lines[-1] == "":
                    lines.pop()
                    trailing_newline = True
        elif last == WAITING:
            waiting = True
            lines.pop()
            if lines and (match := _PROMPT.match(lines[-1].strip())):
                prompt = match.group("prompt")
                lines.pop()
            trailing_newline = bool(lines)
        elif last == IDLE:
            idle = True
            lines.pop()
        elif last == DONE and len(lines) == 1:
            lines.pop()
    elif lines and lines[-1].strip() == DONE and len(lines) == 1:
        lines.pop()
    elif not trailing_newline and len(lines) >= 2 and lines[-1] == RUNNING and _ELAPSED.match(lines[-2]):
        # The server wrote "running" as the cell ended (the recording logs the end first): it refuses
        # the next cell as Busy until an empty send collects it. A cell that prints these two lines
        # last loses them and costs one empty send: the two cannot be told apart.
        held = True
        del lines[-2:]
        if lines and lines[-1] == "":
            lines.pop()
            trailing_newline = True
    exited = restart = False
    status: int | None = None
    if is_error:
        for line in lines:
            stripped = line.strip()
            if match := _EXITED.match(stripped):
                exited, status = True, int(match.group("status"))
            elif match := _SIGNALED.match(stripped):
                exited, status = True, -int(match.group("signal"))
            if stripped.endswith(RESTART_REQUIRED):
                restart = True
    output = "\n".join(lines)
    if output and trailing_newline:
        output += "\n"
    return CellNotice(output, running, idle, waiting, prompt, exited, status, restart, starting, held)


#: Errors R's reticulate prints when it is too old for mcp-console's Python<->R bridge.
_OLD_RETICULATE = (
    'no binding for "install_interrupt_handlers"',
    "unused argument (delay_load = TRUE)",
    "unused argument (numpy_load_error)",
)
BRIDGE_HINT = (
    "[console-bridge: the Python<->R bridge (`py$name` in R, `r.name` in Python) failed because R's "
    "reticulate package is too old for this mcp-console (Debian 12 ships 1.28). Install a current reticulate "
    "from CRAN on the host, or pass values between languages through files in TMPDIR or SQL tables.]"
)


def bridge_hint(text: str) -> str | None:
    """A clear notice when ``text`` shows the cross-language bridge failing for an old reticulate."""
    return BRIDGE_HINT if any(sign in text for sign in _OLD_RETICULATE) else None


def split_streams(text: str) -> tuple[str, Segments, tuple[str, ...]]:
    """Remove the worker's frames from one response: the plain text, its (stream, text) segments
    and the ids of the rich results shown in it, in order.

    ``stream`` is ``"stdout"``, ``"stderr"`` or ``"display"`` (the text/plain of a rich result,
    one segment each). Each response is read on its own: a frame cut by the server's output
    cap ends at the end of the response; stray frames are dropped.
    """
    if _MARKERS.search(text) is None:
        return text, ((("stdout", text),) if text else ()), ()
    segments: list[tuple[str, str]] = []
    displays: list[str] = []
    stream = outside = "stdout"
    reading_id = False
    ident: list[str] = []
    position = 0
    for match in _MARKERS.finditer(text):
        piece = text[position : match.start()]
        if reading_id:
            ident.append(piece)
        elif stream == "display":
            segments[-1] = ("display", segments[-1][1] + piece)
        elif piece:
            segments.append((stream, piece))
        position = match.end()
        marker = match.group()
        if marker == STDERR_START and stream != "display":
            stream = outside = "stderr"
        elif marker == STDERR_END and stream != "display":
            stream = outside = "stdout"
        elif marker == DISPLAY_START:
            reading_id, ident = True, []
        elif marker == DISPLAY_SEP and reading_id:
            reading_id = False
            displays.append("".join(ident))
            if displays[-1].startswith(LOST_MARK):
                continue  # (a record the worker could not write: no text of its own)
            segments.append(("display", ""))  # filled by the text up to DISPLAY_END
            stream = "display"
        elif marker == DISPLAY_END and stream == "display":
            stream = outside
    if position < len(text) and not reading_id:
        if stream == "display":
            segments[-1] = ("display", segments[-1][1] + text[position:])
        else:
            segments.append((stream, text[position:]))
    merged = join_segments(segments)
    return "".join(part for _, part in merged), merged, tuple(displays)


def join_segments(segments: list[tuple[str, str]] | Segments) -> Segments:
    """Adjacent segments of one stream joined; empty ones dropped."""
    out: list[tuple[str, str]] = []
    for stream, part in segments:
        if stream == "display":  # one segment per rich result, never joined
            out.append((stream, part))
            continue
        if not part:
            continue
        if out and out[-1][0] == stream:
            out[-1] = (stream, out[-1][1] + part)
        else:
            out.append((stream, part))
    return tuple(out)


def cut_segments(segments: Segments, plain: str, kept: str) -> Segments:
    """The segments of ``kept``, the part of ``plain`` that is the cell's output (notices removed).

    ``kept`` is normally a prefix of ``plain``; otherwise it counts as stdout.
    """
    if kept == plain:
        return segments
    if not plain.startswith(kept):
        return (("stdout", kept),) if kept else ()
    out: list[tuple[str, str]] = []
    remaining = len(kept)
    for stream, part in segments:
        if remaining <= 0:
            break
        out.append((stream, part[:remaining]))
        remaining -= len(part)
    return join_segments(out)
