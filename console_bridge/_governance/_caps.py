"""Output caps: bound a result's text plus encoded binary content, visibly.

Sizes are what a model or a log would carry: UTF-8 bytes of text, the base64
characters of images, audio and blobs, and the JSON of anything else. A capped
result never exceeds the cap, and whenever something was cut or withheld the last
content block is a text marker that says what and how much.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

__all__ = ["MARKER_RESERVE", "CappedResult", "block_size", "cap_content", "cap_result", "json_size"]

#: Bytes of every cap kept free for the marker that reports a cut.
MARKER_RESERVE = 320
_MARKER_PREFIX = "[console-bridge: output truncated"


def json_size(value: Any) -> int:
    """UTF-8 bytes of ``value`` as compact JSON (``repr`` for anything that is not JSON)."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=repr)
    return len(text.encode("utf-8", "surrogatepass"))


def _text_size(text: Any) -> int:
    return len(str(text).encode("utf-8", "surrogatepass"))


def block_size(block: dict[str, Any]) -> int:
    """The size a content block counts against the cap."""
    kind = block.get("type")
    if kind == "text":
        return _text_size(block.get("text", ""))
    if kind in ("image", "audio"):
        return _text_size(block.get("data", ""))
    if kind == "resource":
        resource = block.get("resource")
        if isinstance(resource, dict):
            return _text_size(resource.get("text", "")) + _text_size(resource.get("blob", ""))
    return json_size(block)


def _cut_utf8(text: str, budget: int) -> str:
    """The longest prefix of ``text`` whose UTF-8 encoding fits ``budget`` bytes."""
    return text.encode("utf-8", "surrogatepass")[: max(budget, 0)].decode("utf-8", "ignore")


def _describe(block: dict[str, Any], size: int) -> str:
    kind = str(block.get("type", "unknown"))
    mime = block.get("mimeType")
    if mime is None and isinstance(block.get("resource"), dict):
        mime = block["resource"].get("mimeType")
    return f"{kind} ({mime}, {size} bytes)" if mime else f"{kind} ({size} bytes)"


def _marker(limit: int, cut_bytes: int, withheld: list[str]) -> str:
    parts = []
    if cut_bytes:
        parts.append(f"{cut_bytes} bytes of text cut")
    if withheld:
        shown = ", ".join(withheld[:3])
        more = f" and {len(withheld) - 3} more" if len(withheld) > 3 else ""
        parts.append(f"withheld {len(withheld)} block(s): {shown}{more}")
    text = f"{_MARKER_PREFIX} to the {limit}-byte cap; {'; '.join(parts)}]"
    if len(text.encode("utf-8")) > MARKER_RESERVE:
        text = _cut_utf8(text, MARKER_RESERVE - 4) + "...]"
    return text


def cap_content(
    content: list[dict[str, Any]], max_bytes: int, *, reserve: int = 0
) -> tuple[list[dict[str, Any]], bool]:
    """Keep blocks in order within ``max_bytes``; cut text, withhold binary; mark any loss.

    Returns the new blocks and whether anything was cut or withheld. When nothing
    was, the input list is returned as it is. Otherwise the result (marker
    included) has a total :func:`block_size` of at most ``max_bytes``, and the marker
    is its last block; a result that was only an oversized image becomes the marker
    alone. ``reserve`` bytes are kept free for the caller. ``max_bytes - reserve``
    must be at least ``2 * MARKER_RESERVE``.
    """
    if max_bytes - reserve < 2 * MARKER_RESERVE:
        raise ValueError(f"max_bytes - reserve must be at least {2 * MARKER_RESERVE}, not {max_bytes - reserve}")
    sizes = [block_size(block) for block in content]
    if sum(sizes) <= max_bytes - reserve:
        return content, False
    budget = max_bytes - reserve - MARKER_RESERVE
    kept: list[dict[str, Any]] = []
    cut_bytes = 0
    withheld: list[str] = []
    for block, size in zip(content, sizes, strict=True):
        if size <= budget:
            kept.append(block)
            budget -= size
        elif block.get("type") == "text" and budget > 0:
            text = _cut_utf8(str(block.get("text", "")), budget)
            kept.append({**block, "text": text})
            cut_bytes += size - _text_size(text)
            budget -= _text_size(text)
        elif block.get("type") == "text":
            cut_bytes += size
        else:
            withheld.append(_describe(block, size))
    kept.append({"type": "text", "text": _marker(max_bytes, cut_bytes, withheld)})
    return kept, True


@dataclass(frozen=True, slots=True)
class CappedResult:
    """A tool result after the cap: what a model gets to see."""

    content: list[dict[str, Any]]
    structured: dict[str, Any] | None
    truncated: bool


def cap_result(content: list[dict[str, Any]], structured: dict[str, Any] | None, max_bytes: int) -> CappedResult:
    """Cap the content blocks (see :func:`cap_content`) and, separately, the structured content.

    Structured content larger than ``max_bytes`` as JSON is withheld (``None``), and a
    marker block says so: it cannot be cut without breaking its schema.
    """
    if structured is None or json_size(structured) <= max_bytes:
        capped, truncated = cap_content(content, max_bytes)
        return CappedResult(capped, structured, truncated)
    note = {
        "type": "text",
        "text": f"[console-bridge: structured content of {json_size(structured)} bytes withheld: "
        f"over the {max_bytes}-byte cap]",
    }
    capped, _ = cap_content(content, max_bytes, reserve=block_size(note))
    return CappedResult([*capped, note], None, True)
