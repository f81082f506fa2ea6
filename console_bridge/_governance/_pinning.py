"""Schema pinning: a canonical fingerprint of a tool's full definition."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

__all__ = ["PINNED_FIELDS", "canonical_json", "tool_fingerprint"]

#: The parts of a tool definition that are pinned.
PINNED_FIELDS = ("name", "title", "description", "inputSchema", "outputSchema", "annotations")


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no insignificant whitespace: equal values, equal text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def tool_fingerprint(tool: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of the canonical JSON of a tool's pinned fields (wire names)."""
    pinned = {key: tool.get(key) for key in PINNED_FIELDS}
    return hashlib.sha256(canonical_json(pinned).encode("utf-8")).hexdigest()
