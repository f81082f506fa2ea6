"""What the model reads at ``console-bridge serve``: four tools and one set of numbers.

Pure (no I/O): built from a console's own governed ``send`` tool (``console.tools()``, which
stays as it is for the library) and serve's settings. The rules it keeps:

- the description, the schema and the notes state the same caps: no sentence advises a
  ``timeout_ms`` above the cap, installs when they are disabled, or ``restart`` (host-only);
  ``default`` never exceeds ``maximum``; ``control`` lists only what is allowed;
- the schema survives strict conversions (OpenAI strict mode makes every field required):
  every optional field is nullable, ``null`` means "not given", so a strict client never has
  to send an interrupt or a code cell it did not mean;
- a console is an explicit handle (``console_open`` -> ``console_id``); ``send`` takes it. It is
  mirrored into the ``Mcp-Param-Console-Id`` HTTP header (``x-mcp-header``, SEP-2243, MCP
  2026-07-28), so a load balancer can pin a console's calls to the replica that holds it; that
  annotation needs a plain ``"type": "string"``, so ``console_id`` is the one field that is not
  nullable: an empty string means "not given" (what a strict client sends for none).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import mcp_types as types

__all__ = [
    "CONSOLE_ID",
    "CONSOLE_ID_HEADER",
    "Lifetimes",
    "consistent_text",
    "console_tools",
    "model_send_schema",
    "strip_nulls",
    "validation_schema",
]

CONSOLE_ID = "console_id"
#: The ``x-mcp-header`` name of ``console_id``: clients send it as the ``Mcp-Param-Console-Id`` header.
CONSOLE_ID_HEADER = "Console-Id"
OPEN, CLOSE, LIST = "console_open", "console_close", "console_list"

_TIMEOUT_ADVICE = re.compile(r"timeout_ms\s*=\s*`?([0-9][0-9_,]*)")
_DEFAULT_NOTE = re.compile(r"\(default [0-9][0-9,_]*\)")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z`(])")


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


def _sentence_ok(sentence: str, cap: int, installs: bool) -> bool:
    for match in _TIMEOUT_ADVICE.finditer(sentence):
        if int(re.sub(r"[_,]", "", match.group(1))) > cap:
            return False
    if not installs and "requirements." in sentence:
        return False
    return not ("restart" in sentence and "reserved for the host" not in sentence)


def consistent_text(text: str, cap: int, *, installs: bool) -> str:
    """``text`` without the sentences that contradict serve's contract (a wait above ``cap`` ms,
    installs when they are disabled, ``restart``), and with "(default N)" stating the cap."""
    paragraphs = []
    for paragraph in text.split("\n\n"):
        kept = [s for s in _SENTENCE_END.split(paragraph) if _sentence_ok(s, cap, installs)]
        if kept:
            paragraphs.append(" ".join(kept))
    return _DEFAULT_NOTE.sub(f"(default and maximum {cap})", "\n\n".join(paragraphs))


def _nullable(prop: dict[str, Any]) -> dict[str, Any]:
    out = dict(prop)
    kind = out.get("type")
    if isinstance(kind, str) and kind != "null":
        out["type"] = [kind, "null"]
    elif isinstance(kind, list) and "null" not in kind:
        out["type"] = [*kind, "null"]
    if isinstance(out.get("enum"), list) and None not in out["enum"]:
        out["enum"] = [*out["enum"], None]
    return out


def model_send_schema(schema: Mapping[str, Any], cap: int, *, installs: bool, handle_note: str) -> dict[str, Any]:
    """serve's ``send`` schema from the console's: every field nullable (null = not given),
    ``timeout_ms`` defaulting to and capped at ``cap``, ``console_id`` added."""
    out = copy.deepcopy(dict(schema))
    props: dict[str, Any] = {}
    for name, prop in (out.get("properties") or {}).items():
        if not isinstance(prop, dict):
            props[name] = prop
            continue
        prop = _nullable(prop)
        if isinstance(prop.get("description"), str):
            prop["description"] = consistent_text(prop["description"], cap, installs=installs)
        if name == "timeout_ms":
            prop["maximum"] = cap
            if not isinstance(prop.get("default"), int) or prop["default"] > cap:
                prop["default"] = cap
            prop.pop("format", None)  # "uint64": not a JSON Schema format; strict converters refuse it
        if name == "control":
            prop.pop("oneOf", None)
        props[name] = prop
    props[CONSOLE_ID] = {"type": "string", "description": handle_note, "x-mcp-header": CONSOLE_ID_HEADER}
    out["properties"] = props
    out["additionalProperties"] = False
    out.pop("required", None)
    return out


def validation_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The advertised schema, except ``timeout_ms``'s maximum: a longer wait is clamped to the
    cap (mcp-console's own habit is to ask for 300000 ms), not refused; and ``console_id`` may
    also be null (as every other field)."""
    props = dict(schema.get("properties") or {})
    if isinstance(props.get("timeout_ms"), dict):
        props["timeout_ms"] = {k: v for k, v in props["timeout_ms"].items() if k != "maximum"}
    if isinstance(props.get(CONSOLE_ID), dict):
        props[CONSOLE_ID] = {**props[CONSOLE_ID], "type": ["string", "null"]}
    return {**schema, "properties": props}


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
    cap: int,
    installs: bool,
    languages: tuple[str, ...],
    lifetimes: Lifetimes,
    session_consoles: bool = True,
) -> tuple[list[types.Tool], dict[str, Any]]:
    """The four tools the model sees, and the schema ``send`` arguments are validated against."""
    note = _handle_note(session_consoles)
    schema = model_send_schema(send_schema, cap, installs=installs, handle_note=note)
    limits = lifetimes.describe()
    description = (
        consistent_text(send_description, cap, installs=installs)
        + f"\n\nconsole-bridge serve: omitted fields may be null (null means not given). {note} "
        f"A console is {limits}."
    )
    handle_props = {
        CONSOLE_ID: {
            "type": "string",
            "description": "A console_id from console_open.",
            "x-mcp-header": CONSOLE_ID_HEADER,
        }
    }
    number = {"type": ["number", "null"]}
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
