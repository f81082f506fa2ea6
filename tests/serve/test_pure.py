"""Pure pieces of serve: origin checks, the validation schema, results as the model sees them."""

from __future__ import annotations

import pytest

from console_bridge import Image, ToolResult
from console_bridge.cli._serve_http import origin_allowed
from console_bridge.cli._serve_mcp import _validation_schema, to_call_result


@pytest.mark.parametrize(
    ("origin", "allowed"),
    [
        (None, True),
        ("http://localhost:3000", True),
        ("https://127.0.0.1", True),
        ("http://[::1]:6274", True),
        ("http://evil.example", False),
        ("http://localhost.evil.example", False),
        ("null", False),
        ("file://localhost", False),
        ("https://app.example", False),
    ],
)
def test_origin_allowed(origin: str | None, allowed: bool) -> None:
    assert origin_allowed(origin, ()) is allowed


def test_listed_origin_allowed() -> None:
    assert origin_allowed("https://app.example", ("https://app.example/",))
    assert not origin_allowed("https://app.example:8443", ("https://app.example",))


def test_validation_schema_drops_only_the_timeout_maximum() -> None:
    schema = {
        "type": "object",
        "additionalProperties": False,
        "properties": {"timeout_ms": {"type": "integer", "minimum": 0, "maximum": 30000}, "python": {"type": "string"}},
    }
    relaxed = _validation_schema(schema)
    assert relaxed["properties"]["timeout_ms"] == {"type": "integer", "minimum": 0}
    assert relaxed["additionalProperties"] is False
    assert schema["properties"]["timeout_ms"]["maximum"] == 30000  # the advertised schema is untouched


def test_call_result_keeps_text_and_images() -> None:
    png = b"\x89PNG\r\n\x1a\nxx"
    result = ToolResult(
        text="done\n[running; poll with an empty send]\n",
        content=[],
        images=[Image(mime_type="image/png", data=png)],
        structured=None,
        is_error=False,
        truncated=False,
        server="mcp-console",
        tool="send",
    )
    call = to_call_result(result)
    assert call.content[0].text.endswith("[running; poll with an empty send]\n")  # type: ignore[union-attr]
    assert call.content[1].mime_type == "image/png"  # type: ignore[union-attr]
    assert call.is_error is False
