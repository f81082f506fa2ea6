"""What every adapter shares: lazy framework imports, handle checks, owner scoping, the error mapping."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from console_bridge import (
    ApprovalDenied,
    BridgeError,
    CallTimeout,
    ConnectionClosed,
    Owner,
    OwnerMismatch,
    ServerError,
    ToolHandle,
    ToolResult,
    current_owner,
    run_context,
)
from console_bridge.adapters import _common
from tests.support.places import ROOT

pytestmark = pytest.mark.anyio

FRAMEWORKS = ("agents", "langchain_core", "pydantic_ai", "anthropic", "openai", "langsmith")


def test_importing_console_bridge_imports_no_framework() -> None:
    code = (
        "import sys, console_bridge, console_bridge.adapters\n"
        f"loaded = sorted(m for m in {FRAMEWORKS!r} if m in sys.modules)\n"
        "print(','.join(loaded))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == ""


HOST = Owner("a")


def handle(invoke: Any, name: str = "t", owner: Owner = HOST) -> ToolHandle:
    return ToolHandle(
        name=name,
        tool=name,
        server="s",
        description="d",
        input_schema={"type": "object"},
        annotations={},
        requires_approval=False,
        owner=owner,
        invoke=invoke,
    )


async def echo_owner(arguments: dict[str, Any]) -> ToolResult:
    return ToolResult(text=str(current_owner()))


def test_handles_are_checked() -> None:
    one = handle(echo_owner)
    with pytest.raises(TypeError, match="sequence of ToolHandles"):
        _common.as_handles(one)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="got dict"):
        _common.as_handles([{"name": "t"}])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="two handles are named 't'"):
        _common.as_handles([one, handle(echo_owner)])
    assert _common.as_handles(iter([one])) == [one]


async def test_calls_run_under_the_handle_owner_unless_a_context_is_active() -> None:
    owner = Owner("a", session_id="s1")
    tool = handle(echo_owner, owner=owner)
    assert (await _common.invoke(tool, {})).text == "a/s1"  # host call: scoped to the handle's owner
    assert current_owner() is None
    with run_context(owner):
        assert (await _common.invoke(tool, {})).text == "a/s1"
    with run_context(Owner("b")), pytest.raises(OwnerMismatch):  # never overridden
        await _common.invoke(tool, {})


@pytest.mark.parametrize(
    ("error", "fatal"),
    [
        (ConnectionClosed("gone"), True),
        (CallTimeout("too slow"), True),
        (OwnerMismatch("not yours"), True),
        (ApprovalDenied("no"), False),
        (ServerError("boom", stderr_tail="secret server noise"), False),
        (BridgeError("odd"), False),
    ],
)
async def test_error_mapping(error: BridgeError, fatal: bool) -> None:
    async def fail(arguments: dict[str, Any]) -> ToolResult:
        raise error

    if fatal:
        with pytest.raises(type(error)):
            await _common.invoke(handle(fail), {})
        return
    outcome = await _common.invoke(handle(fail), {})
    assert outcome.is_error and outcome.result is None and outcome.error is error
    assert outcome.text == f"{type(error).__name__}: {error.message}"
    assert "secret" not in outcome.text, "the server's stderr is not the model's business"


async def test_tool_error_results_are_results() -> None:
    async def worker_died(arguments: dict[str, Any]) -> ToolResult:
        return ToolResult(text="the worker exited", is_error=True)

    outcome = await _common.invoke(handle(worker_died), {})
    assert outcome.is_error and outcome.result is not None and outcome.text == "the worker exited"
    refused = await _common.invoke(handle(worker_died), ["not", "a", "dict"])
    assert refused.is_error and refused.result is None and "must be a JSON object, not list" in refused.text


def test_a_missing_framework_names_the_extra_to_install() -> None:
    code = (
        "import importlib, sys\n"
        "for module, framework in [('openai_agents', 'agents'), ('langchain', 'langchain_core'),\n"
        "                          ('pydantic_ai', 'pydantic_ai'), ('anthropic', 'anthropic')]:\n"
        "    sys.modules[framework] = None  # as if not installed\n"
        "    try:\n"
        "        importlib.import_module('console_bridge.adapters.' + module)\n"
        "    except ImportError as exc:\n"
        "        print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True)
    lines = out.stdout.splitlines()
    assert [line.split(" needs ")[0] for line in lines] == [
        f"console_bridge.adapters.{module}" for module in ("openai_agents", "langchain", "pydantic_ai", "anthropic")
    ]
    # the extra's own packages, never `pip install console-bridge[...]`: console-bridge is on no index, so
    # that would install whatever an index serves under the name
    assert [line.split("pip install ")[-1] for line in lines] == [
        f"'{requirement}' (console-bridge's [{extra}] extra)"
        for requirement, extra in (
            ("openai-agents<1,>=0.24", "openai-agents"),
            ("langchain-core<2,>=1.8", "langchain"),
            ("pydantic-ai-slim<3,>=2.68", "pydantic-ai"),
            ("anthropic<3,>=2.14", "anthropic"),
        )
    ]
    assert not any("console-bridge[" in line for line in lines)
