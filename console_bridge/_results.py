"""Results of tool calls and console cells, and the images they carry."""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "CellFailure",
    "CellResult",
    "CellUsage",
    "FailureKind",
    "Image",
    "Output",
    "Table",
    "ToolResult",
    "block_text",
    "result_from_content",
]

FailureKind = Literal["exception", "limit", "worker_exited", "tampered"]

_PNG = "image/png"


@dataclass(frozen=True, slots=True)
class Image:
    """An image returned by a tool (a plot, say). Renders inline in Jupyter when PNG."""

    mime_type: str
    data: bytes

    def _repr_png_(self) -> bytes | None:
        return self.data if self.mime_type == _PNG else None

    def __repr__(self) -> str:
        return f"Image(mime_type={self.mime_type!r}, {len(self.data)} bytes)"


_BINARY = ("image/png", "image/jpeg", "image/gif", "image/webp")


@dataclass(frozen=True, slots=True)
class Table:
    """The result of a SQL cell as rows: ``columns`` (names in order), ``rows`` (each a tuple, one
    value per column) and ``truncated`` (the query has more rows than the preview holds).

    The rows are the preview the worker fetched (20 rows in mcp-console 0.0.5 and 0.0.6), all
    columns, for SQL run on the session's own DuckDB connection (a connection a cell selected
    with ``_console.sql_connection(...)`` gives text only). Numbers, strings, booleans and NULL
    (None) keep their type; other values (dates, decimals, lists) come as their ``str()``; a
    string longer than 10,000 characters is cut.
    With mcp-console 0.0.6 the rest of a truncated result is one Python cell away:
    ``_console.sql_last_result()`` (mcp-console's own call). Example::

        result = console.run(sql="select 42 as answer")
        result.table.columns   # ('answer',)
        result.table.rows      # [(42,)]
    """

    columns: tuple[str, ...]
    rows: list[tuple[Any, ...]]
    truncated: bool = False

    def __repr__(self) -> str:
        more = ", truncated" if self.truncated else ""
        return f"Table(columns={list(self.columns)!r}, {len(self.rows)} rows{more})"


def table_from_record(record: object) -> Table | None:
    """A :class:`Table` from the worker's JSON record (None when it is not one)."""
    if not isinstance(record, dict):
        return None
    columns, rows = record.get("columns"), record.get("rows")
    if not isinstance(columns, list) or not isinstance(rows, list):
        return None
    width = len(columns)
    kept = [tuple(row[:width]) for row in rows if isinstance(row, list)]
    return Table(tuple(str(name) for name in columns), kept, bool(record.get("truncated")))


@dataclass(frozen=True, slots=True)
class Output:
    """One rich result of a cell: a ``display()`` (``kind="display"``) or the cell's final value
    (``kind="result"``), as a MIME bundle the way IPython's display formatter builds it.

    ``data`` maps MIME types to content: ``text/plain`` always; ``text/html``, ``image/png``,
    ``image/svg+xml``, ``application/json`` (as JSON text), ``text/markdown``, ``text/latex``
    where the object offers them. Binary images are ``bytes``. A plot the worker captured
    comes as a ``"display"`` with ``image/png``. Renders in Jupyter as itself. Example::

        result = console.run(python="import pandas as pd; pd.DataFrame({'a': [1, 2]})")
        result.outputs[-1].data["text/html"]   # '<div>...<table ...'
    """

    kind: Literal["display", "result"]
    data: dict[str, str | bytes]
    #: a SQL cell's result as rows (see :class:`Table`); None for other outputs
    table: Table | None = field(default=None, compare=False)

    @property
    def text(self) -> str:
        """The ``text/plain`` form."""
        value = self.data.get("text/plain", "")
        return value if isinstance(value, str) else value.decode("utf-8", "replace")

    def jupyter_bundle(self) -> dict[str, Any]:
        """``data`` as Jupyter's messages carry it (binary images base64, JSON parsed)."""
        import json

        bundle: dict[str, Any] = {}
        for mime, value in self.data.items():
            if isinstance(value, bytes):
                bundle[mime] = base64.b64encode(value).decode("ascii")
            elif mime == "application/json" or mime.endswith("+json"):
                try:
                    bundle[mime] = json.loads(value)
                except ValueError:
                    continue
            else:
                bundle[mime] = value
        return bundle

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        return self.jupyter_bundle()

    def __repr__(self) -> str:
        return f"Output(kind={self.kind!r}, {sorted(self.data)})"


def output_from_record(kind: object, data: object, table: object = None) -> Output | None:
    """An :class:`Output` from the worker's JSON record (None when it is not one)."""
    if not isinstance(data, dict):
        return None
    out: dict[str, str | bytes] = {}
    for mime, value in data.items():
        mime = str(mime)
        if mime in _BINARY and isinstance(value, str):
            try:
                out[mime] = base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError):
                continue
        elif mime == "application/json" or mime.endswith("+json"):
            import json

            out[mime] = json.dumps(value)
        elif isinstance(value, str):
            out[mime] = value
    out.setdefault("text/plain", "")
    return Output("result" if kind == "result" else "display", out, table_from_record(table))


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What a tool call returned.

    ``text`` joins the text blocks, the text of embedded resources and a line naming
    each binary resource and resource link; ``content`` holds every MCP content block as a
    JSON-ready dict; ``images`` the decoded images; ``structured`` the structured
    content, if any; ``truncated`` is true when the output cap cut something (a
    visible marker says so in ``text``).
    """

    text: str
    content: list[dict[str, Any]] = field(default_factory=list)
    images: list[Image] = field(default_factory=list)
    structured: dict[str, Any] | None = None
    is_error: bool = False
    truncated: bool = False
    server: str = ""
    tool: str = ""

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True, slots=True)
class CellFailure:
    """Why a cell's code failed, as the worker reported it (never read from the cell's printed text).

    ``name`` is the exception or error class (``"ValueError"``, ``"Catalog Error"``,
    ``"simpleError"``); ``kind`` is ``"exception"`` (the code raised or a query failed),
    ``"limit"`` (killed at a resource limit; ``name`` says which), ``"worker_exited"``
    (the worker process ended, its in-memory state is lost) or ``"tampered"`` (the session's
    outcome log was tampered with, in this cell or an earlier one: the outcome cannot be known,
    so the cell counts as failed, and every later one until ``restart()``).
    """

    language: str
    name: str
    message: str
    traceback: str = ""
    kind: FailureKind = "exception"

    def __str__(self) -> str:
        return f"{self.name}: {self.message}" if self.message else self.name


@dataclass(frozen=True, slots=True)
class CellUsage:
    """What one cell used: ``cpu_seconds`` (CPU time of the session's processes while it ran, the
    threads and processes it started included), ``wall_seconds`` (from submission to its end) and
    ``memory_peak`` (bytes: the most memory the session used during the cell above what it used
    when the cell began). From the session's cgroup where it has one, else from the worker process
    (``/proc``); a figure this host cannot measure is None. Example::

        result = console.run(python="x = bytearray(500 * 2**20)")
        result.usage.memory_peak / 2**20   # about 500
    """

    cpu_seconds: float | None
    wall_seconds: float
    memory_peak: int | None


@dataclass(frozen=True, slots=True)
class CellResult(ToolResult):
    """One observation of a console cell.

    ``running`` is true when the observation window ended before the cell finished
    (poll again); ``elapsed`` is the wall time of this observation in seconds.
    ``waiting_for_input``/``prompt`` are set when the cell asks for stdin; ``idle`` when
    a poll found no cell running. ``error`` is a :class:`CellFailure` when the cell's code failed, else None;
    ``is_error`` is true exactly when ``error`` is set or the server returned a tool error.
    Output that merely mentions an error (a logged, handled exception; ``Error:`` in
    data; an R warning) is not a failure.

    ``text`` is what the cell wrote to stdout, ``stderr`` what it wrote to ``sys.stderr``
    (warnings, tracebacks, logging); ``segments`` holds both as ``(stream, text)`` pairs in
    the order they were written and :attr:`combined` joins them. A chunk passed to
    ``run(on_output=...)`` holds one stream, named by ``stream`` (``"stdout"`` or
    ``"stderr"``). Output written to file descriptor 2 directly (a subprocess, C code) and
    R's messages count as stdout. ``outputs`` holds the rich results (:class:`Output`: each
    ``display()``, the final value, each plot) in order; their ``text/plain`` is part of
    ``text`` (a chunk showing one has ``stream == "stdout"`` and the one segment
    ``("display", text)``). ``run()``'s result holds the cell's whole output, read from the
    recording past mcp-console's per-poll window, up to the session's ``max_output``; past it the
    head and the tail, ``truncated`` true and ``omitted_bytes`` saying how much was dropped.
    Example::

        result = console.run(python="1 / 0")
        result.error.name          # 'ZeroDivisionError'
        result.raise_for_error()   # raises CellError
    """

    running: bool = False
    elapsed: float = 0.0
    waiting_for_input: bool = False
    prompt: str | None = None
    worker_exited: bool = False
    error: CellFailure | None = None
    idle: bool = False
    stderr: str = ""
    stream: str = "stdout"
    segments: tuple[tuple[str, str], ...] = ()
    outputs: list[Output] = field(default_factory=list)
    #: what the cell used (set on the result that ends a cell; None on other observations)
    usage: CellUsage | None = None
    #: bytes of the cell's output dropped past ``max_output`` (head and tail kept; ``truncated`` is then true)
    omitted_bytes: int = 0

    def __post_init__(self) -> None:
        if self.error is not None and not self.is_error:
            object.__setattr__(self, "is_error", True)

    @property
    def table(self) -> Table | None:
        """A SQL cell's result as rows (:class:`Table`: ``columns``, ``rows``, ``truncated``), else None."""
        tables = [output.table for output in self.outputs if output.table is not None]
        return tables[-1] if tables else None

    @property
    def combined(self) -> str:
        """stdout and stderr interleaved as the cell wrote them (what a terminal would show)."""
        if not self.segments:
            return self.text + self.stderr
        return "".join(part for _, part in self.segments)

    def raise_for_error(self) -> CellResult:
        """Return this result, or raise :class:`CellError` when the cell's code failed."""
        if self.error is None:
            return self
        from console_bridge._errors import CellError

        error = self.error
        where = f"a {error.language} cell" if error.language else "the cell"
        if error.kind == "limit":
            why = f"was stopped at the {error.name} limit: {error.message}"
            fix = "raise the limit (Limits(...)) or make the code use less"
        elif error.kind == "worker_exited":
            why = f"ended its worker ({error.message}); in-memory state was lost"
            fix = "fix the code; the next cell starts a fresh worker"
        elif error.kind == "tampered":
            why = f"has no trustworthy outcome: {error.message}"
            fix = "restart() the session (its in-memory state is lost) and do not touch the outcome log"
        else:
            why = f"raised {error}"
            fix = "fix the code (the traceback is on .error.traceback, the output on .result.text)"
        raise CellError(f"{where} {why}; {fix}", result=self, server=self.server or None)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        bundle: dict[str, Any] = {"text/plain": self.combined}
        pngs = [image.data for image in self.images if image.mime_type == _PNG]
        if pngs:
            bundle["image/png"] = base64.b64encode(pngs[0]).decode("ascii")
        if any(set(output.data) - {"text/plain", _PNG} for output in self.outputs):
            # The output in order, each rich result as its richest HTML form.
            html: list[str] = []
            displays = iter(self.outputs)
            for stream, part in self.segments or (("stdout", self.combined),):
                if stream == "display":
                    output = next(displays, None)
                    html.append(_html_of(output) if output is not None else f"<pre>{_html_escape(part)}</pre>")
                elif part:
                    style = ' style="color:#a00"' if stream == "stderr" else ""
                    html.append(f"<pre{style}>{_html_escape(part)}</pre>")
            html.extend(_html_of(output) for output in displays)
            bundle["text/html"] = "".join(html)
            return bundle
        if len(pngs) > 1:
            # One PNG per bundle is the Jupyter convention; the rest are in the HTML.
            imgs = "".join(f'<img src="data:image/png;base64,{base64.b64encode(p).decode("ascii")}"/>' for p in pngs)
            bundle["text/html"] = f"<pre>{_html_escape(self.combined)}</pre>{imgs}"
        return bundle


def _html_of(output: Output) -> str:
    data = output.data
    html = data.get("text/html")
    if isinstance(html, str):
        return html
    for mime in ("image/png", "image/jpeg"):
        value = data.get(mime)
        if isinstance(value, bytes):
            return f'<img src="data:{mime};base64,{base64.b64encode(value).decode("ascii")}"/>'
    svg = data.get("image/svg+xml")
    if isinstance(svg, str):
        return svg
    return f"<pre>{_html_escape(output.text)}</pre>"


def _html_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def decode_image(block: dict[str, Any]) -> Image | None:
    """The :class:`Image` of an MCP image block, or None when its data is not base64."""
    try:
        data = base64.b64decode(str(block.get("data", "")), validate=True)
    except (binascii.Error, ValueError):
        return None
    return Image(mime_type=str(block.get("mimeType", "application/octet-stream")), data=data)


def block_text(block: dict[str, Any]) -> str | None:
    """What a content block contributes to ``ToolResult.text`` (None: nothing, an image say).

    Text blocks give their text; an embedded resource its text, or a line naming it when
    it is binary; a ``resource_link`` a line naming the link (nothing is fetched).
    """
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text", ""))
    if kind == "resource":
        resource = block.get("resource")
        if not isinstance(resource, dict):
            return None
        if "text" in resource:
            return str(resource.get("text", ""))
        uri, mime = resource.get("uri", "?"), resource.get("mimeType") or "binary"
        size = len(str(resource.get("blob", ""))) * 3 // 4
        return f"[embedded resource {uri} ({mime}, about {size} bytes)]"
    if kind == "resource_link":
        name, uri = block.get("name") or block.get("title") or "", block.get("uri", "?")
        mime = block.get("mimeType")
        return f"[resource link {name + ': ' if name else ''}{uri}{f' ({mime})' if mime else ''}]"
    return None


def result_from_content(
    content: list[dict[str, Any]],
    *,
    structured: dict[str, Any] | None,
    is_error: bool,
    truncated: bool,
    server: str,
    tool: str,
) -> ToolResult:
    """Build a :class:`ToolResult` from JSON content blocks."""
    texts = [text for block in content if (text := block_text(block)) is not None]
    images = [img for block in content if block.get("type") == "image" if (img := decode_image(block))]
    return ToolResult(
        text="\n".join(texts),
        content=content,
        images=images,
        structured=structured,
        is_error=is_error,
        truncated=truncated,
        server=server,
        tool=tool,
    )
