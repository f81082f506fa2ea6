"""Schema pinning: a canonical fingerprint of a tool's full definition.

A tool is pinned when it is first listed; before a call (``strict``) or after a
``tools/list_changed`` notification (``on_change``) the connection re-lists and
compares fingerprints. Equal definitions give equal fingerprints whatever the key
order; any change to a pinned field gives a different one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

__all__ = ["PINNED_FIELDS", "canonical_json", "tool_fingerprint"]

#: The parts of a tool definition that are pinned (wire names).
PINNED_FIELDS = ("name", "title", "description", "inputSchema", "outputSchema", "annotations")


def canonical_json(value: Any) -> str:
    """JSON with sorted keys, no insignificant whitespace and no escaping: equal values, equal text.

    Never raises for JSON-like values: NaN and infinities are written as JSON5 does
    (``NaN``, ``Infinity``), anything that is not JSON as its ``repr``.
    """
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=repr)


def tool_fingerprint(tool: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of the canonical JSON of a tool's pinned fields.

    A field that is absent and a field that is ``null`` pin the same way; every other
    field (``_meta``, ``icons``, vendor extensions) is ignored.
    """
    pinned = {key: tool.get(key) for key in PINNED_FIELDS}
    return hashlib.sha256(canonical_json(pinned).encode("utf-8", "surrogatepass")).hexdigest()
