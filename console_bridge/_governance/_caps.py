"""Output caps: bound a result's text plus encoded binary content, visibly."""

from __future__ import annotations

from typing import Any

__all__ = ["cap_content"]


def _marker(dropped: int, limit: int) -> str:
    return f"\n[console-bridge: output truncated, {dropped} bytes over the {limit}-byte cap were dropped]"


def _block_size(block: dict[str, Any]) -> int:
    kind = block.get("type")
    if kind == "text":
        return len(str(block.get("text", "")).encode("utf-8"))
    if kind in ("image", "audio"):
        return len(str(block.get("data", "")))
    if kind == "resource":
        resource = block.get("resource") or {}
        return len(str(resource.get("text", ""))) + len(str(resource.get("blob", "")))
    return len(str(block))


def cap_content(content: list[dict[str, Any]], max_bytes: int) -> tuple[list[dict[str, Any]], bool]:
    """Keep blocks in order until ``max_bytes``; cut a text block, replace a binary one by a notice.

    Returns the new blocks and whether anything was dropped. Never fails silently:
    every cut leaves a text marker saying how much went.
    """
    total = sum(_block_size(block) for block in content)
    if total <= max_bytes:
        return content, False
    kept: list[dict[str, Any]] = []
    budget = max_bytes
    for block in content:
        size = _block_size(block)
        if size <= budget:
            kept.append(block)
            budget -= size
            continue
        kind = block.get("type")
        if kind == "text" and budget > 0:
            raw = str(block.get("text", "")).encode("utf-8")[:budget]
            text = raw.decode("utf-8", errors="ignore")
            kept.append({**block, "text": text + _marker(size - len(text.encode("utf-8")), max_bytes)})
            budget = 0
        else:
            mime = block.get("mimeType", kind)
            kept.append(
                {
                    "type": "text",
                    "text": f"[console-bridge: a {mime} {kind} block of {size} encoded bytes was withheld: "
                    f"it exceeds the {max_bytes}-byte output cap]",
                }
            )
    return kept, True
