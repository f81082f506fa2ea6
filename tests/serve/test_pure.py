"""Pure pieces of serve: origin checks, the validation schema, results as the model sees them."""

from __future__ import annotations

import pytest

from console_bridge import Image, ToolResult
from console_bridge._serve._contract import validation_schema
from console_bridge._serve._http import origin_allowed
from console_bridge._serve._mcp import to_call_result, without_probe


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
    relaxed = validation_schema(schema)
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


def test_transcript_hides_the_probe_call() -> None:
    text = (
        "# MCP Console recording transcript\n\n## Console process\n\n```json\n{}\n```\n\n"
        "## Call 1: Python\n\n```python\nprint('console-bridge-probe:' + '{}')  # /root/.npmrc\n```\n\n"
        "## Session 001 started\n\nok\n\n## Result for call 1\n\n```text\nconsole-bridge-probe:{}\n```\n\n"
        "## Call 2: Python\n\n```python\nx * 2\n```\n\n## Result for call 2\n\n42\n"
    )
    shown = without_probe(text)
    assert "console-bridge-probe" not in shown and ".npmrc" not in shown
    assert "## Call 2: Python" in shown and "x * 2" in shown and "## Console process" in shown
    assert "## Session 001 started" in shown and "## Result for call 2" in shown and "Result for call 1" not in shown
    assert without_probe("## Call 1: Python\nx\n") == "## Call 1: Python\nx\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--transport", "http", "--replica", "a.b"], "--replica 'a.b': use 1-32 letters"),
        (["--transport", "http", "--replica", "x" * 33], "use 1-32 letters"),
        (["--replica", "r1"], "--replica applies to --transport http only"),
    ],
)
def test_replica_names_are_checked(args: list[str], message: str) -> None:
    from click.testing import CliRunner

    from console_bridge.cli import cli

    result = CliRunner().invoke(cli, ["serve", *args])
    assert result.exit_code != 0 and message in result.output, result.output


def test_the_http_socket_disables_nagle_on_every_connection() -> None:
    """asyncio sets TCP_NODELAY only on sockets made with proto IPPROTO_TCP; without it each small
    write of a response (headers, then body) waited for the client's delayed ACK: ~40 ms a request."""
    import asyncio
    import socket

    from console_bridge.cli._serve import _bind_socket

    sock = _bind_socket("127.0.0.1", 0)
    seen: list[int] = []

    async def main() -> None:
        def accepted(transport: asyncio.BaseTransport) -> None:
            seen.append(transport.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))

        class Protocol(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                accepted(transport)
                transport.close()

        server = await asyncio.get_running_loop().create_server(Protocol, sock=sock)
        async with server:
            port = sock.getsockname()[1]
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            await reader.read()  # the server closes once it has seen the connection
            writer.close()

    asyncio.run(main())
    assert seen and seen[0] != 0
