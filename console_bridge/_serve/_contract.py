"""What the model reads at ``console-bridge serve``: four tools and one set of numbers.

Pure (no I/O): built from a console's own governed ``send`` tool (``console.tools()``: its schema
and description come from the one definition in ``_console._model_schema``, caps stated, every
field nullable) and serve's settings, which add:

- a console is an explicit handle (``console_open`` -> ``console_id``); ``send`` takes it. It is
  mirrored into the ``Mcp-Param-Console-Id`` HTTP header (``x-mcp-header``, SEP-2243, MCP
  2026-07-28), so a load balancer can pin a console's calls to the replica that holds it; that
  annotation needs a plain ``"type": "string"``, so ``console_id`` is the one field that is not
  nullable: an empty string means "not given" (what a strict client sends for none).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import mcp_types as types

from console_bridge._console._model_schema import nullable

__all__ = [
    "CONSOLE_ID",
    "CONSOLE_ID_HEADER",
    "Lifetimes",
    "console_tools",
    "model_send_schema",
    "strip_nulls",
    "validation_schema",
]

CONSOLE_ID = "console_id"
#: The ``x-mcp-header`` name of ``console_id``: clients send it as the ``Mcp-Param-Console-Id`` header.
CONSOLE_ID_HEADER = "Console-Id"
OPEN, CLOSE, LIST = "console_open", "console_close", "console_list"


@dataclass(frozen=True, slots=True)
class Lifetimes:
    """The bounds a console lives under (seconds; None: no bound), as the model is told them."""

    idle_timeout: float | None = 600.0
    max_lifetime: float | None = 3600.0
    max_cell_time: float | None = None
    #: an MCP session's own console (no handle) is closed after its session made no request this long
    session_idle_timeout: float | None = 180.0

    def describe(self) -> str:
        parts = []
        if self.idle_timeout is not None:
            parts.append(f"closed after {self.idle_timeout:g} s without use (a running cell counts as use)")
        if self.max_lifetime is not None:
            parts.append(f"closed {self.max_lifetime:g} s after it opened")
        if self.max_cell_time is not None:
            parts.append(f"a cell running longer than {self.max_cell_time:g} s is interrupted (state kept)")
        if self.session_idle_timeout is not None:
            parts.append(
                f"a session's own console (no console_id) is closed {self.session_idle_timeout:g} s after the "
                "session's last request"
            )
        return "; ".join(parts) if parts else "no time limits"


def model_send_schema(schema: Mapping[str, Any], *, handle_note: str) -> dict[str, Any]:
    """serve's ``send`` schema: the console's own (``console.tools()``, from the one definition in
    ``_console._model_schema``) with ``console_id`` added."""
    out = copy.deepcopy(dict(schema))
    props = dict(out.get("properties") or {})
    props[CONSOLE_ID] = {"type": "string", "description": handle_note, "x-mcp-header": CONSOLE_ID_HEADER}
    out["properties"] = props
    return out


def validation_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The advertised schema, except ``timeout_ms``'s maximum: a longer wait is clamped to the
    cap (mcp-console's own habit is to ask for 300000 ms), not refused; and ``console_id`` may
    also be null (as every other field)."""
    props = dict(schema.get("properties") or {})
    timeout = props.get("timeout_ms")
    if isinstance(timeout, dict):
        props["timeout_ms"] = _without_maximum(timeout)
    if isinstance(props.get(CONSOLE_ID), dict):
        props[CONSOLE_ID] = {**props[CONSOLE_ID], "type": ["string", "null"]}
    return {**schema, "properties": props}


def _without_maximum(prop: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in prop.items() if k != "maximum"}
    if isinstance(out.get("anyOf"), list):
        out["anyOf"] = [_without_maximum(arm) if isinstance(arm, dict) else arm for arm in out["anyOf"]]
    return out


def strip_nulls(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """Arguments as the console takes them: ``null`` (and an empty ``console_id``) means not given."""
    return {k: v for k, v in arguments.items() if v is not None and not (k == CONSOLE_ID and v == "")}


def _handle_note(session_consoles: bool) -> str:
    note = "The console to run in: a `console_id` from `console_open`."
    if session_consoles:
        note += (
            ' Without one (omitted or ""), this MCP session\'s own console is used (opened at the first send); '
            "a client without an MCP session (protocol 2026-07-28 over HTTP) must pass one."
        )
    else:
        note += " Required (call `console_open` first)."
    return note


def console_tools(
    send_name: str,
    send_description: str,
    send_schema: Mapping[str, Any],
    *,
    languages: tuple[str, ...],
    lifetimes: Lifetimes,
    session_consoles: bool = True,
) -> tuple[list[types.Tool], dict[str, Any]]:
    """The four tools the model sees, and the schema ``send`` arguments are validated against."""
    note = _handle_note(session_consoles)
    schema = model_send_schema(send_schema, handle_note=note)
    limits = lifetimes.describe()
    description = f"{send_description}\n\nconsole-bridge serve: {note} A console is {limits}."
    handle_props = {
        CONSOLE_ID: {
            "type": "string",
            "description": "A console_id from console_open.",
            "x-mcp-header": CONSOLE_ID_HEADER,
        }
    }
    number = nullable({"type": "number"})
    opened = {
        "type": "object",
        "properties": {
            CONSOLE_ID: {"type": "string"},
            "idle_timeout_s": number,
            "max_lifetime_s": number,
            "max_cell_time_s": number,
            "languages": {"type": "array", "items": {"type": "string"}},
        },
        "required": [CONSOLE_ID, "idle_timeout_s", "max_lifetime_s", "max_cell_time_s", "languages"],
    }
    listed = {
        "type": "object",
        "properties": {
            "consoles": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        CONSOLE_ID: {"type": "string"},
                        "state": {"type": "string", "enum": ["idle", "running"]},
                        "age_s": {"type": "number"},
                        "idle_s": {"type": "number"},
                        "session_console": {"type": "boolean"},
                    },
                    "required": [CONSOLE_ID, "state", "age_s", "idle_s", "session_console"],
                },
            }
        },
        "required": ["consoles"],
    }
    empty = {"type": "object", "properties": {}, "additionalProperties": False}
    tools = [
        types.Tool(name=send_name, description=description, input_schema=schema),
        types.Tool(
            name=OPEN,
            description=(
                f"Open a fresh, confined console ({', '.join(languages)}); returns its `console_id` "
                f"(structured content) to pass to `{send_name}`. State persists between calls with the same "
                f"console_id. The console is {limits}; then its id is refused and you call {OPEN} again."
            ),
            input_schema=empty,
            output_schema=opened,
        ),
        types.Tool(
            name=CLOSE,
            description=f"Close a console opened with {OPEN} (its state is discarded, its recording kept).",
            input_schema={
                "type": "object",
                "properties": handle_props,
                "required": [CONSOLE_ID],
                "additionalProperties": False,
            },
        ),
        types.Tool(
            name=LIST,
            description="The consoles this client holds: console_id, whether a cell is running, age and idle time.",
            input_schema=empty,
            output_schema=listed,
            annotations=types.ToolAnnotations(read_only_hint=True),
        ),
    ]
    return tools, validation_schema(schema)
