"""The one definition of what a model reads of ``send``: its schema and description, the same for the
library (``console.tools()``, every adapter) and ``console-bridge serve`` (which adds ``console_id``).

Pure (no I/O), from mcp-console's own ``send`` and the session's settings. The rules it keeps:

- the description, the schema and the notes state the same caps: no sentence advises a
  ``timeout_ms`` above the cap, installs when they are disabled, or ``restart`` (host-only);
  ``default`` never exceeds ``maximum``; ``control`` lists only ``interrupt``;
- the schema survives strict conversions (OpenAI strict mode makes every field required): every
  optional field is nullable, ``null`` means "not given", so a strict client never has to send an
  interrupt or a code cell it did not mean. A nullable field is ``anyOf: [<the field>, {"type":
  "null"}]`` (JSON Schema 2020-12, OpenAI strict mode, Gemini and the MCP Inspector's strict check
  all read it), not a ``type`` array, which several converters refuse;
- no field a session does not take (``requirements`` under ``dependencies="deny"``) and no other
  field (``additionalProperties: false``).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["consistent_text", "model_schema", "nullable", "without_nulls"]

_TIMEOUT_ADVICE = re.compile(r"timeout_ms\s*=\s*`?([0-9][0-9_,]*)")
_DEFAULT_NOTE = re.compile(r"\(default [0-9][0-9,_]*\)")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z`(])")
_NULL = {"type": "null"}


def _sentence_ok(sentence: str, cap: int, installs: bool) -> bool:
    for match in _TIMEOUT_ADVICE.finditer(sentence):
        if int(re.sub(r"[_,]", "", match.group(1))) > cap:
            return False
    if not installs and "requirements." in sentence:
        return False
    return not ("restart" in sentence and "reserved for the host" not in sentence)


def consistent_text(text: str, cap: int, *, installs: bool) -> str:
    """``text`` without the sentences that contradict the contract (a wait above ``cap`` ms,
    installs when they are disabled, ``restart``), and with "(default N)" stating the cap."""
    paragraphs = []
    for paragraph in text.split("\n\n"):
        kept = [s for s in _SENTENCE_END.split(paragraph) if _sentence_ok(s, cap, installs)]
        if kept:
            paragraphs.append(" ".join(kept))
    return _DEFAULT_NOTE.sub(f"(default and maximum {cap})", "\n\n".join(paragraphs))


def nullable(prop: Mapping[str, Any]) -> dict[str, Any]:
    """``prop`` or null: ``anyOf`` the field and ``{"type": "null"}``, its description and default on
    the outside (where readers look for them)."""
    inner = dict(prop)
    if inner.get("type") == "null" or _NULL in (inner.get("anyOf") or []):
        return inner
    outer: dict[str, Any] = {key: inner.pop(key) for key in ("description", "default", "title") if key in inner}
    return {"anyOf": [inner, dict(_NULL)], **outer}


def model_schema(schema: Mapping[str, Any], cap: int, *, installs: bool) -> dict[str, Any]:
    """The model's ``send`` schema from mcp-console's: ``timeout_ms`` defaulting to and capped at
    ``cap``, ``control`` only ``interrupt``, ``requirements`` gone when installs are off, every field
    nullable (null = not given), descriptions consistent with the caps."""
    out = copy.deepcopy(dict(schema))
    props: dict[str, Any] = {}
    for name, prop in (out.get("properties") or {}).items():
        if name == "requirements" and not installs:
            continue
        if not isinstance(prop, dict):
            props[name] = prop
            continue
        prop = dict(prop)
        if isinstance(prop.get("description"), str):
            prop["description"] = consistent_text(prop["description"], cap, installs=installs)
        if name == "timeout_ms":
            prop["maximum"] = cap
            if not isinstance(prop.get("default"), int) or prop["default"] > cap:
                prop["default"] = cap
            prop.pop("format", None)  # "uint64": not a JSON Schema format; strict converters refuse it
        if name == "control":
            prop.pop("oneOf", None)
            prop["type"], prop["enum"] = "string", ["interrupt"]
        props[name] = nullable(prop)
    out["properties"] = props
    out["additionalProperties"] = False
    out.pop("required", None)
    return out


def without_nulls(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """Arguments as the console takes them: a ``null`` field is a field not given."""
    return {key: value for key, value in arguments.items() if value is not None}
