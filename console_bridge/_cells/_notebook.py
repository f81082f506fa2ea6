"""A session's cells as a Jupyter notebook: the log the session keeps, and the ``.ipynb`` built from it.

While a session runs, each cell that ended is appended as one JSON line to a file next to its
recording (``<run-id>.console-bridge-cells.jsonl``, 0600, in the recordings folder, which cells
cannot see): its language, code, and outputs already in nbformat's shape (stdout and stderr
streams, ``display_data``, the ``execute_result``, the failure as an ``error`` output). The
file is kept open, so a cell costs one write. :func:`notebook` turns it into an nbformat 4
notebook that Jupyter opens and ``nbformat.validate`` accepts.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from console_bridge._cells._notices import cut_segments, read_notices, split_streams
from console_bridge._results import CellResult, Output

__all__ = ["CellLog", "cells_from_events", "cells_path", "nb_outputs", "notebook", "read_cells"]

CELLS_SUFFIX = ".console-bridge-cells.jsonl"
#: Bounds on the log: one cell's record and the whole file (the rest of a session is not logged).
MAX_RECORD = 16 * 1024 * 1024
MAX_LOG = 256 * 1024 * 1024
_MAGIC = {"python": "%%console", "sql": "%%console sql", "r": "%%console r"}
_PROBE = "console-bridge-canary"  # in the code of the bridge's confinement probe (see _confined)


def cells_path(recording_path: Path) -> Path:
    """Where a session's cells are logged: next to its recording folder."""
    return recording_path.parent / f"{recording_path.name}{CELLS_SUFFIX}"


def _bundle(output: Output, count: int) -> dict[str, Any]:
    data = output.jupyter_bundle()
    data.setdefault("text/plain", output.text)
    if output.kind == "result":
        return {"output_type": "execute_result", "execution_count": count, "data": data, "metadata": {}}
    return {"output_type": "display_data", "data": data, "metadata": {}}


def nb_outputs(result: CellResult, count: int) -> list[dict[str, Any]]:
    """A whole cell's outputs in nbformat 4 shape, in the order the cell wrote them."""
    outputs: list[dict[str, Any]] = []

    def stream(name: str, text: str) -> None:
        _add_stream(outputs, name, text)

    shown = iter(result.outputs)
    segments = result.segments or (("stdout", result.text), ("stderr", result.stderr))
    error = result.error
    trace = error.traceback.strip() if error is not None else ""
    moved = False
    if trace:
        # The traceback the cell printed on stderr is the error output's, as Jupyter shows it: once, there.
        kept = []
        for name, text in segments:
            if not moved and name == "stderr" and trace in text:
                text, moved = text.replace(trace, "", 1).strip("\n"), True
                if not text:
                    continue
                text += "\n"
            kept.append((name, text))
        segments = tuple(kept)
    for name, text in segments:
        if name == "display":
            output = next(shown, None)
            if output is None:
                stream("stdout", text)
            else:
                outputs.append(_bundle(output, count))
        else:
            stream(name, text)
    outputs.extend(_bundle(output, count) for output in shown)  # the plots, after the text
    if error is not None:
        # The traceback is shown once: here, or as the cell printed it when it is not the whole of it.
        lines = [] if not moved and trace and trace in result.combined else trace.splitlines()
        outputs.append({"output_type": "error", "ename": error.name, "evalue": error.message, "traceback": lines})
    return outputs


class CellLog:
    """Appends the session's cells to their log (see the module docstring); never raises."""

    def __init__(self) -> None:
        self.count = 0
        self._fd: int | None = None
        self._path: Path | None = None
        self._written = 0
        self.full = False

    def write(self, recording_path: Path | None, language: str, code: str, result: CellResult) -> None:
        if recording_path is None or self.full:
            return
        self.count += 1
        record = {
            "execution_count": self.count,
            "language": language,
            "code": code,
            "outputs": nb_outputs(result, self.count),
            "error": None
            if result.error is None
            else {"name": result.error.name, "message": result.error.message, "kind": result.error.kind},
            "elapsed": round(result.elapsed, 3),
        }
        try:
            line = json.dumps(record, ensure_ascii=False).encode("utf-8", "replace") + b"\n"
        except (TypeError, ValueError):
            return
        if len(line) > MAX_RECORD:
            record["outputs"] = [
                {"output_type": "stream", "name": "stderr", "text": "[console-bridge: output too large to keep]\n"}
            ]
            line = json.dumps(record, ensure_ascii=False).encode("utf-8", "replace") + b"\n"
        if self._written + len(line) > MAX_LOG:
            self.full = True
            return
        try:
            if self._fd is None or self._path != recording_path:
                self.close()
                flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
                self._fd = os.open(cells_path(recording_path), flags, 0o600)
                self._path = recording_path
            os.write(self._fd, line)
            self._written += len(line)
        except OSError:
            self.full = True

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None


def read_cells(recording_path: Path, max_bytes: int = MAX_LOG) -> list[dict[str, Any]] | None:
    """The logged cells of a recording (None: the session logged none, e.g. it predates the log)."""
    try:
        fd = os.open(cells_path(recording_path), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        chunks = []
        total = 0
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:
                break
    finally:
        os.close(fd)
    cells = []
    for raw in b"".join(chunks).split(b"\n"):
        if not raw.strip():
            continue
        with contextlib.suppress(ValueError):
            entry = json.loads(raw.decode("utf-8", "replace"))
            if isinstance(entry, dict) and isinstance(entry.get("code"), str):
                cells.append(entry)
    return cells


def cells_from_events(
    events: Iterable[dict[str, Any]], read_image: Callable[[str], bytes | None] = lambda path: None
) -> list[dict[str, Any]]:
    """The cells of a recording that has no cell log, from the server's own events (both layouts
    record each ``send`` call and result): code in order, its text as stdout/stderr streams (status
    notices removed) and its images. Failures are not known there; rich results are their text.
    The bridge's confinement probe is left out. ``read_image`` reads an image the recording keeps as
    a file (0.0.6 records ``{"type": "image", "path": ...}``), given its path inside the recording."""
    cells: list[dict[str, Any]] = []
    by_call: dict[object, dict[str, Any]] = {}
    current: dict[str, Any] | None = None
    for event in events:
        kind = event.get("event")
        if kind == "tool_call":
            arguments = _dict(_dict(event.get("request")).get("arguments"))
            language = next((lang for lang in ("python", "sql", "r") if isinstance(arguments.get(lang), str)), None)
            if language is not None:
                code = str(arguments[language])
                current = None
                if _PROBE not in code:
                    current = {"language": language, "code": code, "outputs": [], "execution_count": len(cells) + 1}
                    cells.append(current)
            if current is not None:
                by_call[event.get("call_id")] = current
        elif kind == "tool_result":
            cell = by_call.get(event.get("call_id"))
            content = _dict(event.get("result")).get("content")
            if cell is not None and isinstance(content, list):
                _add_blocks(cell["outputs"], content, read_image)
    return cells


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _add_blocks(outputs: list[dict[str, Any]], content: list[Any], read_image: Callable[[str], bytes | None]) -> None:
    for block in content:
        block = _dict(block)
        if block.get("type") == "text":
            plain, segments, _ids = split_streams(str(block.get("text", "")))
            kept = read_notices(plain).output
            for stream, text in cut_segments(segments, plain, kept):
                _add_stream(outputs, "stderr" if stream == "stderr" else "stdout", text)
        elif block.get("type") == "image":
            mime = str(block.get("mimeType") or "image/png")
            data = block.get("data")
            if not isinstance(data, str) and isinstance(block.get("path"), str):
                raw = read_image(block["path"])
                data = base64.b64encode(raw).decode("ascii") if raw is not None else None
            if not isinstance(data, str):
                continue
            outputs.append({"output_type": "display_data", "data": {mime: data, "text/plain": mime}, "metadata": {}})


def _add_stream(outputs: list[dict[str, Any]], name: str, text: str) -> None:
    if not text:
        return
    if outputs and outputs[-1].get("output_type") == "stream" and outputs[-1]["name"] == name:
        outputs[-1]["text"] += text
    else:
        outputs.append({"output_type": "stream", "name": name, "text": text})


def notebook(cells: list[dict[str, Any]], *, title: str, info: dict[str, Any], note: str = "") -> dict[str, Any]:
    """An nbformat 4 notebook of ``cells``: a heading, ``%load_ext console_bridge``, then each cell as
    a ``%%console`` cell (its language named) with its outputs, so it can also be run again."""
    keys = ("workspace", "profile", "owner", "mcp_console")
    described = ", ".join(f"{key} {info[key]}" for key in keys if info.get(key))
    heading = f"# console-bridge session {title}\n\n{described}\n\n{note}".rstrip()
    nb_cells: list[dict[str, Any]] = [
        {"cell_type": "markdown", "id": "session", "metadata": {}, "source": heading},
        {
            "cell_type": "code",
            "id": "load-extension",
            "execution_count": None,
            "metadata": {},
            "outputs": [],
            "source": "%load_ext console_bridge",
        },
    ]
    for index, cell in enumerate(cells, start=1):
        language = str(cell.get("language") or "python")
        outputs = cell.get("outputs") if isinstance(cell.get("outputs"), list) else []
        count = cell.get("execution_count") if isinstance(cell.get("execution_count"), int) else None
        metadata: dict[str, Any] = {"console_bridge": {"language": language}}
        if cell.get("error"):
            metadata["console_bridge"]["error"] = cell["error"]
        nb_cells.append(
            {
                "cell_type": "code",
                "id": f"cell-{index}",
                "execution_count": count,
                "metadata": metadata,
                "outputs": outputs,
                # (code that begins with a blank line stands in for a magic line: `run x.ipynb` sends a
                # cell so, its line numbers kept; the magic takes that line again)
                "source": f"{_MAGIC.get(language, '%%console')}\n{cell['code'].removeprefix(chr(10))}",
            }
        )
    return {
        "cells": nb_cells,
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
            "console_bridge": {"run_id": title, **{k: v for k, v in info.items() if isinstance(v, str | int)}},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }
