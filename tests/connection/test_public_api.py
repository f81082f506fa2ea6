"""The public surface: ``__all__`` holds the contract's names, each documented; the error tree is the contract's."""

from __future__ import annotations

import inspect
import subprocess

import pytest

import console_bridge
from console_bridge import (
    ApprovalDenied,
    BridgeError,
    Busy,
    CallTimeout,
    CellError,
    CellTimeout,
    ConnectionClosed,
    DependenciesRefused,
    Desynchronized,
    LaunchRefused,
    NotAllowed,
    OwnerMismatch,
    SandboxMismatch,
    SchemaDrift,
    ServerError,
    VerificationFailed,
    VersionRefused,
)
from tests.support.places import PYTHON

#: The error tree of api-contract.md: class -> its direct parent.
TREE: dict[type[BaseException], type[BaseException]] = {
    BridgeError: Exception,
    LaunchRefused: BridgeError,
    VersionRefused: LaunchRefused,
    VerificationFailed: BridgeError,
    SandboxMismatch: VerificationFailed,
    DependenciesRefused: VerificationFailed,
    NotAllowed: BridgeError,
    ApprovalDenied: NotAllowed,
    OwnerMismatch: NotAllowed,
    Busy: BridgeError,
    ConnectionClosed: BridgeError,
    CallTimeout: ConnectionClosed,
    Desynchronized: ConnectionClosed,
    CellTimeout: BridgeError,
    CellError: BridgeError,
    SchemaDrift: BridgeError,
    ServerError: BridgeError,
}

#: Names of api-contract.md that exist so far (the console and recordings arrive separately).
CONTRACT = [
    *(cls.__name__ for cls in TREE),
    "Owner",
    "run_context",
    "Policy",
    "ApprovalRequest",
    "AuditLog",
    "ToolResult",
    "Image",
    "ToolHandle",
    "AsyncMcpConnection",
    "McpConnection",
    "CellResult",
    "CellFailure",
    "CellError",
]
#: Contract names that later issues add; checked whenever they exist.
LATER = ["AsyncConsole", "Console", "Recordings", "Recording", "AsyncSessionManager", "SessionManager", "SessionInfo"]


def test_all_holds_every_contract_name() -> None:
    missing = [name for name in CONTRACT if name not in console_bridge.__all__]
    assert not missing
    for name in LATER:
        if hasattr(console_bridge, name):
            assert name in console_bridge.__all__


def test_all_is_importable_and_unique() -> None:
    names = console_bridge.__all__
    assert len(names) == len(set(names))
    for name in names:
        assert hasattr(console_bridge, name), name
    exported = {n for n in dir(console_bridge) if not n.startswith("_")}
    # every public attribute that is a class or function of ours is exported on purpose
    ours = {
        n
        for n in exported
        if (inspect.isclass(obj := getattr(console_bridge, n)) or inspect.isfunction(obj))
        and getattr(obj, "__module__", "").startswith("console_bridge")
    }
    hooks = {"load_ipython_extension", "unload_ipython_extension"}  # IPython's protocol, found by name
    assert ours - hooks <= set(names)


@pytest.mark.parametrize("name", [n for n in console_bridge.__all__ if not n.startswith("__")])
def test_every_public_name_has_its_own_docstring(name: str) -> None:
    obj = getattr(console_bridge, name)
    doc = obj.__dict__.get("__doc__") if inspect.isclass(obj) else obj.__doc__
    assert doc and doc.strip(), f"{name} has no docstring of its own"
    if inspect.isclass(obj) and not issubclass(obj, BaseException):
        # not the dataclass-generated signature line
        assert not doc.startswith(f"{name}("), f"{name} only has the generated docstring"


def test_public_methods_of_connections_are_documented() -> None:
    for cls in (console_bridge.AsyncMcpConnection, console_bridge.McpConnection):
        for method in (
            "connect",
            "close",
            "cancel",
            "status",
            "discover",
            "read_resource",
            "get_prompt",
            "call_tool",
            "tools",
            "capability_tools",
        ):
            assert inspect.getdoc(getattr(cls, method)), f"{cls.__name__}.{method}"


@pytest.mark.parametrize(("cls", "parent"), list(TREE.items()), ids=[c.__name__ for c in TREE])
def test_error_tree_matches_the_contract(cls: type[BaseException], parent: type[BaseException]) -> None:
    assert cls.__bases__ == (parent,)
    assert cls.__module__.startswith("console_bridge")


def test_a_bad_argument_is_a_bridge_error_and_python_s_own_kind() -> None:
    """Beyond the contract's tree: one class for a value a public class does not take, so every
    public call raises a BridgeError, and code catching Python's ValueError/TypeError still works."""
    from console_bridge import AuditLog, InvalidArgument, Owner, Policy

    assert InvalidArgument.__bases__ == (BridgeError, ValueError, TypeError)
    for make, kind, named in [
        (lambda: Policy(mode="read_everything"), ValueError, "Policy.mode"),  # type: ignore[arg-type]
        (lambda: Policy(approve=3), TypeError, "Policy.approve"),  # type: ignore[arg-type]
        (lambda: Policy(max_bytes=10), ValueError, "Policy.max_bytes"),
        (lambda: Owner(""), TypeError, "agent_id"),
        (lambda: AuditLog("/tmp/never-written.jsonl", backups=-1), ValueError, "backups"),
    ]:
        with pytest.raises(InvalidArgument) as caught:
            make()
        assert isinstance(caught.value, kind) and isinstance(caught.value, BridgeError)
        assert named in caught.value.message


def test_errors_carry_context() -> None:
    error = ConnectionClosed("boom; do this", server="s", pid=42, stderr_tail="last words\n", details={"k": 1})
    assert (error.server, error.pid, error.details) == ("s", 42, {"k": 1})
    assert "last words" in str(error) and str(error).startswith("boom; do this")
    assert str(BridgeError("plain")) == "plain"


def test_import_is_light() -> None:
    code = (
        "import sys, console_bridge\n"
        "heavy = ['IPython', 'agents', 'langchain_core', 'pydantic_ai', 'anthropic', 'rich', 'ray']\n"
        "print(','.join(m for m in heavy if m in sys.modules))"
    )
    out = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == ""


def test_import_changes_no_global_state() -> None:
    code = (
        "import logging, warnings\n"
        "filters, handlers = list(warnings.filters), list(logging.getLogger().handlers)\n"
        "import console_bridge\n"
        "assert warnings.filters == filters and logging.getLogger().handlers == handlers\n"
    )
    subprocess.run([PYTHON, "-c", code], timeout=60, check=True)
