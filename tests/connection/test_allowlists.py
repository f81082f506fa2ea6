"""Allowlists are fixed at construction: discovery never widens them, and refusals send nothing.

The server log (``--log``) is the proof of what reached the server.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest

from console_bridge import NotAllowed, ServerError, ToolHandle, VerificationFailed
from tests.support.places import server_entry

from .helpers import ProcessWatch, read_log

pytestmark = pytest.mark.anyio

ALL_TOOLS = ["echo", "add", "write_note", "lookup", "slow", "image", "big_text", "fail", "search_web"]


def wellbehaved(log: Path) -> dict[str, object]:
    return server_entry("wellbehaved.py", "--log", str(log))


async def test_discover_returns_one_page_and_echoes_the_cursor(conns: Any, log: Path) -> None:
    conn = conns(wellbehaved(log))
    await conn.connect()
    first = await conn.discover("tools")
    assert [t["name"] for t in first.items] == ALL_TOOLS[:3]
    assert first.cursor is None and first.next_cursor == "3" and first.server == "s"
    assert read_log(log).count("tools/list") == 1  # one page, one request

    second = await conn.discover("tools", cursor=first.next_cursor)
    assert second.cursor == "3"
    assert [t["name"] for t in second.items] == ALL_TOOLS[3:6]

    # walking all pages
    names: list[str] = []
    cursor = None
    pages = 0
    while True:
        page = await conn.discover("tools", cursor=cursor)
        pages += 1
        names += [t["name"] for t in page.items]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert names == ALL_TOOLS and pages == 3
    assert page.items[0]["inputSchema"]["type"] == "object"

    resources = await conn.discover("resources")
    assert [r["uri"] for r in resources.items] == ["note://alpha", "note://beta"]
    more = await conn.discover("resources", cursor=resources.next_cursor)
    assert [r["uri"] for r in more.items] == ["note://secret"] and more.next_cursor is None
    templates = await conn.discover("resource_templates")
    assert [t["uriTemplate"] for t in templates.items] == ["note://{name}"]
    prompts = await conn.discover("prompts")
    assert [p["name"] for p in prompts.items] == ["greet", "summarize"]

    # Discovery authorized nothing.
    assert conn.tools() == [] and conn.capability_tools() == []
    assert conn.status().tools == () and conn.status().resources == ()


async def test_discover_refuses_bad_arguments_without_traffic(conns: Any, log: Path) -> None:
    conn = conns(wellbehaved(log))
    await conn.connect()
    with pytest.raises(NotAllowed, match="kind must be"):
        await conn.discover("everything")  # type: ignore[arg-type]
    with pytest.raises(NotAllowed, match="cursor"):
        await conn.discover("tools", cursor=3)  # type: ignore[arg-type]
    with pytest.raises(ServerError, match="Invalid cursor"):
        await conn.discover("tools", cursor="bogus")
    # only the last one reached the server (after the 2026-07-28 discovery the SDK server answers)
    assert read_log(log) == ["server/discover", "tools/list"]
    assert conn.status().state == "idle"


async def test_discovery_does_not_widen_the_tools_allowlist(conns: Any, log: Path) -> None:
    conn = conns(wellbehaved(log), tools=["echo"])
    await conn.connect()
    cursor = None
    seen: list[str] = []
    while True:
        page = await conn.discover("tools", cursor=cursor)
        seen += [t["name"] for t in page.items]
        if (cursor := page.next_cursor) is None:
            break
    assert "add" in seen
    with pytest.raises(NotAllowed) as info:
        await conn.call_tool("add", {"a": 1, "b": 2})
    assert "'add' is not on the tools allowlist" in str(info.value)
    assert "allowed: echo" in str(info.value) and "nothing was sent" in str(info.value)
    assert [h.name for h in conn.tools()] == ["echo"]
    assert (await conn.call_tool("echo", {"text": "ok"})).text == "ok"
    assert [line for line in read_log(log) if line.startswith("tools/call")] == ["tools/call echo"]


async def test_resources_and_prompts_outside_the_allowlist_send_nothing(conns: Any, log: Path) -> None:
    conn = conns(wellbehaved(log), resources=["note://alpha"], prompts=["greet"])
    await conn.connect()
    await conn.discover("resources")
    await conn.discover("prompts")
    before = read_log(log)
    with pytest.raises(NotAllowed, match="'note://secret' is not on the resources allowlist"):
        await conn.read_resource("note://secret")
    with pytest.raises(NotAllowed, match="not on the resources allowlist"):
        await conn.read_resource("note://alpha/")  # exact URIs only
    with pytest.raises(NotAllowed, match="'secret_prompt' is not on the prompts allowlist"):
        await conn.get_prompt("secret_prompt")
    with pytest.raises(NotAllowed):
        await conn.call_tool("echo", {"text": "x"})  # no tools at all were allowed
    assert (await conn.read_resource("note://alpha")).text == "alpha text"
    assert "Hello, Bo!" in (await conn.get_prompt("greet", {"name": "Bo"})).text
    # the allowed requests are barriers: anything sent before them would be logged before them
    assert read_log(log) == [*before, "resources/read note://alpha", "prompts/get greet"]


async def test_capability_tools_expose_the_allowlists_as_enums(conns: Any, log: Path) -> None:
    conn = conns(wellbehaved(log), resources=["note://alpha", "note://beta"], prompts=["greet"])
    await conn.connect()
    handles = conn.capability_tools("notes")
    assert [h.name for h in handles] == ["notes_read_resource", "notes_get_prompt"]
    read, prompt = handles
    assert all(isinstance(h, ToolHandle) for h in handles)
    assert read.input_schema["properties"]["uri"]["enum"] == ["note://alpha", "note://beta"]
    assert prompt.input_schema["properties"]["name"]["enum"] == ["greet"]
    for handle in handles:
        jsonschema.Draft202012Validator.check_schema(handle.input_schema)
        assert handle.annotations.get("readOnlyHint") is True
        assert handle.owner == conn.owner and handle.server == "s"
    assert [h.name for h in conn.capability_tools()] == ["mcp_read_resource", "mcp_get_prompt"]

    assert (await read({"uri": "note://beta"})).text == "beta text"
    assert "Hello, Ann!" in (await prompt({"name": "greet", "arguments": {"name": "Ann"}})).text
    before = read_log(log)
    with pytest.raises(NotAllowed):
        await read({"uri": "note://secret"})  # outside the enum: refused locally too
    with pytest.raises(NotAllowed):
        await prompt({"name": "secret_prompt"})
    await read({"uri": "note://alpha"})  # a barrier: the server logs requests in order
    assert read_log(log) == [*before, "resources/read note://alpha"]


@pytest.mark.parametrize("prefix", ["", "has space", "a.b", "x" * 51, "ünï", "a/b", "mcp\n", "\nmcp"])
async def test_bad_capability_prefix_is_refused(conns: Any, prefix: str) -> None:
    conn = conns(server_entry("probe.py"), resources=["r://x"])
    await conn.connect()
    with pytest.raises(NotAllowed, match="prefix"):
        conn.capability_tools(prefix)
    with pytest.raises(NotAllowed, match="prefix"):
        conn.tools(prefix)


async def test_good_capability_prefixes(conns: Any) -> None:
    conn = conns(server_entry("probe.py"), tools=["env"], resources=["r://x"])
    await conn.connect()
    for prefix in ("a", "x" * 50, "my_server-2"):
        assert [h.name for h in conn.capability_tools(prefix)] == [f"{prefix}_read_resource"]
    assert [h.name for h in conn.tools("srv")] == ["srv_env"]
    assert conn.tools("srv")[0].tool == "env"


async def test_no_capability_tools_without_allowlists(conns: Any) -> None:
    conn = conns(server_entry("probe.py"))
    await conn.connect()
    assert conn.capability_tools() == []


async def test_missing_allowlisted_tool_fails_verification_and_stops(
    conns: Any, watch: ProcessWatch, log: Path
) -> None:
    conn = conns(wellbehaved(log), tools=["echo", "no_such_tool", "search_web"])
    with pytest.raises(VerificationFailed) as info:
        await conn.connect()
    text = str(info.value)
    assert "no_such_tool" in text
    assert "echo" in text and "write_note" in text  # it says what the server does offer
    assert "stopped before any call" in text
    assert info.value.pid is not None
    assert conn.status().state == "closed"
    watch.assert_gone()
    assert read_log(log).count("tools/list") == 3  # every page was walked before deciding
    assert not [line for line in read_log(log) if line.startswith("tools/call")]


async def test_empty_tools_allowlist_sends_no_listing(conns: Any, log: Path) -> None:
    conn = conns(server_entry("probe.py", "--log", str(log)))
    await conn.connect()
    assert conn.tools() == []
    await conn.close()  # the server has read (and logged) everything by the time it exits
    # the 2026-07-28 probe, answered -32601 by this 2025 server, then its handshake; no listing
    assert read_log(log) == ["server/discover", "initialize", "notifications/initialized"]


async def test_allowlist_names_are_exact(conns: Any, log: Path) -> None:
    conn = conns(server_entry("probe.py", "--log", str(log)), tools=["env"])
    await conn.connect()
    for name in ("Env", "env ", "en", "s_env", "stderr"):
        with pytest.raises(NotAllowed):
            await conn.call_tool(name, {"bytes": 1})
    await conn.call_tool("env", {})
    assert [line for line in read_log(log) if line.startswith("tools/call")] == ["tools/call env"]
