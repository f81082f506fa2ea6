"""serve's model-facing contract (pure): one set of numbers, strict-safe schemas, handles."""

from __future__ import annotations

import re
from typing import Any

import pytest

from console_bridge._console._model_schema import consistent_text, model_schema
from console_bridge._serve._contract import (
    CONSOLE_ID,
    CONSOLE_ID_HEADER,
    Lifetimes,
    console_tools,
    strip_nulls,
)
from console_bridge._serve._mcp import header_mismatch

# What mcp-console 0.0.6 gives (abridged to the sentences that used to contradict serve's caps).
DESCRIPTION = (
    "Persistent Python and SQL REPL.\n\n"
    'Run one cell at a time. You can interrupt a pending call with `send(control="interrupt")`. If work is '
    "still running, poll with an empty `send`; do not resubmit the cell. When waiting for completion, use "
    "`timeout_ms=300000` for a long poll; it returns early when work finishes or needs input. Avoid repeated "
    'short polls such as `timeout_ms=1000`. Defaults: `timeout_ms=60000` (60 seconds), `requirements.action="add"`.'
    '\n\nconsole-bridge: `timeout_ms` is capped at 30000 ms per call. `control: "restart"` is reserved for the host.'
)
SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "additionalProperties": False,
    "type": "object",
    "properties": {
        "python": {"description": "A Python cell.", "type": ["string", "null"]},
        "sql": {"description": "A SQL cell.", "type": ["string", "null"]},
        "timeout_ms": {
            "description": "Wait for output for up to this many milliseconds (default 60,000). When waiting for "
            "completion, use `timeout_ms=300000` for a long poll. `0` returns without waiting.",
            "type": "integer",
            "format": "uint64",
            "minimum": 0,
            "default": 60000,
            "maximum": 30000,
        },
        "control": {
            "description": "Apply control before same-call stdin/code. `interrupt` requests a cooperative interrupt. "
            "`restart` discards live state, including debugger and unread input.",
            "type": "string",
            "enum": ["interrupt"],
        },
        "stdin": {"description": "Text for an active read.", "type": ["string", "null"]},
    },
}


def library_send(cap: int = 30000, installs: bool = False) -> tuple[str, dict[str, Any]]:
    """What ``console.tools()`` hands serve: the description and schema from the one definition."""
    return consistent_text(DESCRIPTION, cap, installs=installs), model_schema(SCHEMA, cap, installs=installs)


def tools(lifetimes: Lifetimes | None = None) -> tuple[list[Any], dict[str, Any]]:
    description, schema = library_send()
    return console_tools("send", description, schema, languages=("python", "sql"), lifetimes=lifetimes or Lifetimes())


def all_texts(tool: Any) -> list[str]:
    texts = [tool.description or ""]
    texts += [p.get("description", "") for p in tool.input_schema["properties"].values()]
    return texts


def test_every_number_agrees_with_the_cap() -> None:
    [send, *_], _ = tools()
    timeout = send.input_schema["properties"]["timeout_ms"]
    [number, null] = timeout["anyOf"]
    assert null == {"type": "null"} and number["maximum"] == 30000 and timeout["default"] <= number["maximum"]
    assert "format" not in number
    for text in all_texts(send):
        for number in re.findall(r"timeout_ms\s*=\s*`?([0-9][0-9,]*)", text):
            assert int(number.replace(",", "")) <= 30000, text
        assert "60,000" not in text and "300000" not in text
        assert "requirements.action" not in text
        assert "restart" not in text or "reserved for the host" in text
    assert "(default and maximum 30000)" in send.input_schema["properties"]["timeout_ms"]["description"]


def test_control_lists_only_interrupt_and_null() -> None:
    [send, *_], _ = tools()
    control = send.input_schema["properties"]["control"]
    assert control["anyOf"] == [{"type": "string", "enum": ["interrupt"]}, {"type": "null"}]


def test_no_type_arrays_for_portability() -> None:
    """Nullable fields are ``anyOf`` with ``{"type": "null"}``: several schema converters (and the MCP
    Inspector's strict check) refuse a ``type`` array."""
    [send, opener, *_], _ = tools()
    for tool in (send, opener):
        for schema in [tool.input_schema, tool.output_schema or {}]:
            for name, prop in (schema.get("properties") or {}).items():
                assert not isinstance(prop.get("type"), list), (tool.name, name, prop)


def test_strict_conversion_keeps_every_field_optional_in_effect() -> None:
    """OpenAI strict mode (the Agents SDK's conversion) makes every field required: each must take null."""
    strict_schema = pytest.importorskip("agents.strict_schema")
    [send, opener, closer, lister], _ = tools()
    for tool in (send, opener, closer, lister):
        strict = strict_schema.ensure_strict_json_schema(dict(tool.input_schema))
        assert strict["additionalProperties"] is False
        assert set(strict.get("required", [])) == set(strict["properties"])
    strict = strict_schema.ensure_strict_json_schema(dict(send.input_schema))
    for name, prop in strict["properties"].items():
        if name == CONSOLE_ID:  # x-mcp-header needs a plain string type: "" is "not given"
            assert prop["type"] == "string" and '""' in prop["description"]
            continue
        kinds = prop.get("type")
        assert (
            "null" in kinds if isinstance(kinds, list) else any(a.get("type") == "null" for a in prop.get("anyOf", []))
        ), name
    # what a strict model sends to run a cell: every field, the unused ones null -> no interrupt reaches the console
    call = {"python": "1", "sql": None, "timeout_ms": None, "control": None, "stdin": None, CONSOLE_ID: ""}
    assert strip_nulls(call) == {"python": "1"}
    assert strip_nulls({**call, CONSOLE_ID: None}) == {"python": "1"}


def test_console_id_is_routable_by_header() -> None:
    """SEP-2243: console_id carries a valid x-mcp-header (the MCP SDK drops a tool with an invalid one,
    e.g. on a nullable type), so 2026-07-28 clients mirror it into Mcp-Param-Console-Id."""
    from mcp.shared.inbound import find_invalid_x_mcp_header, mcp_param_headers, x_mcp_header_map

    [send, _opener, closer, _lister], validation = tools()
    for tool in (send, closer):
        assert find_invalid_x_mcp_header(tool.input_schema) is None
        assert x_mcp_header_map(tool.input_schema) == {(CONSOLE_ID,): CONSOLE_ID_HEADER}
    headers = mcp_param_headers(x_mcp_header_map(send.input_schema), {CONSOLE_ID: "abc", "python": "1"})
    assert headers == {"Mcp-Param-Console-Id": "abc"}
    assert mcp_param_headers(x_mcp_header_map(send.input_schema), {CONSOLE_ID: None}) == {}
    assert validation["properties"][CONSOLE_ID]["type"] == ["string", "null"]  # a null is still accepted


def test_header_and_argument_must_agree() -> None:
    assert header_mismatch(None, "abc") is None  # 2025-era clients do not mirror
    assert header_mismatch("abc", "abc") is None
    assert header_mismatch("", None) is None and header_mismatch("", "") is None
    assert header_mismatch("=?base64?YWJj?=", "abc") is None
    wrong = header_mismatch("abd", "abc")
    assert wrong is not None and "Mcp-Param-Console-Id" in wrong and "'abd'" in wrong and "'abc'" in wrong
    assert header_mismatch("abc", None) is not None  # a header naming a console the body does not
    malformed = header_mismatch("=?base64?***?=", "abc")
    assert malformed is not None and "malformed" in malformed


def test_validation_accepts_nulls_and_clamps_rather_than_refuses() -> None:
    import jsonschema

    [send, *_], validation = tools()
    validator = jsonschema.Draft202012Validator(validation)
    assert not list(validator.iter_errors({"python": "1", "control": None, CONSOLE_ID: None, "timeout_ms": 10**9}))
    assert list(validator.iter_errors({"control": "restart"}))
    assert list(validator.iter_errors({"shell": "rm -rf /"}))
    assert list(validator.iter_errors({"timeout_ms": -1}))
    assert CONSOLE_ID in send.input_schema["properties"]


def test_handle_tools_state_the_lifetimes() -> None:
    lifetimes = Lifetimes(idle_timeout=600, max_lifetime=3600, max_cell_time=120)
    [send, opener, closer, lister], _ = tools(lifetimes)
    for tool in (send, opener):
        assert "600 s without use" in (tool.description or "")
        assert "3600 s after it opened" in (tool.description or "")
        assert "120 s is interrupted" in (tool.description or "")
    assert opener.output_schema is not None and CONSOLE_ID in opener.output_schema["required"]
    assert closer.input_schema["required"] == [CONSOLE_ID]
    assert lister.annotations is not None and lister.annotations.read_only_hint is True


def test_consistent_text_keeps_what_agrees() -> None:
    text = "Use `timeout_ms=20000`. Use `timeout_ms=90000` for long ones. Plain sentence."
    assert consistent_text(text, 30000, installs=True) == "Use `timeout_ms=20000`. Plain sentence."
    assert "requirements.python" in consistent_text("Set `requirements.python`.", 30000, installs=True)
    assert consistent_text("Set `requirements.python`. Other.", 30000, installs=False) == "Other."


@pytest.mark.anyio
@pytest.mark.console
@pytest.mark.parametrize("dependencies", ["deny", "allow"])
async def test_serve_and_the_library_give_the_model_one_schema(tmp_path: Any, dependencies: str) -> None:
    """Issue 32/33: serve's ``send`` is the console's own model tool (one definition,
    ``_console._model_schema``) with ``console_id`` added; nothing else differs."""
    from console_bridge import AsyncConsole
    from console_bridge._serve._mcp import learn
    from tests.support.binaries import binary_for

    async with AsyncConsole(tmp_path, command=str(binary_for("0.0.6")), dependencies=dependencies) as console:
        [handle] = console.tools()
        served = learn(console, Lifetimes()).send
    schema = dict(served.input_schema)
    props = dict(schema.pop("properties"))
    assert props.pop(CONSOLE_ID)["x-mcp-header"] == CONSOLE_ID_HEADER
    assert {**schema, "properties": props} == handle.input_schema
    assert (served.description or "").startswith(handle.description)
    assert ("requirements" in props) == (dependencies == "allow")
    assert all("anyOf" in prop for prop in props.values())  # every field the model may leave null
