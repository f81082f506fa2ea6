"""console_bridge: governed sessions on MCP Console and governed clients for any MCP server.

Quick start::

    from console_bridge import Console

    with Console("analysis/") as console:
        print(console.run(python="import sys; print(sys.version)").text)

Every error raised on purpose is a :class:`BridgeError`; see ``console_bridge._errors``
for the tree.
"""

from typing import TYPE_CHECKING, Any

from console_bridge._cells._recordings import Recording, Recordings
from console_bridge._confinement._limits import Limits
from console_bridge._console._usage import SessionUsage
from console_bridge._errors import (
    ApprovalDenied,
    BridgeError,
    Busy,
    CallTimeout,
    CellError,
    CellTimeout,
    ConnectionClosed,
    DependenciesRefused,
    Desynchronized,
    InvalidArgument,
    LaunchRefused,
    NotAllowed,
    OwnerMismatch,
    SandboxMismatch,
    SchemaDrift,
    ServerError,
    VerificationFailed,
    VersionRefused,
)
from console_bridge._governance._audit import AuditLog
from console_bridge._governance._policy import ApprovalRequest, Policy
from console_bridge._handles import ToolHandle
from console_bridge._identity import Owner, current_owner, run_context
from console_bridge._results import CellFailure, CellResult, CellUsage, Image, Output, Table, ToolResult

if TYPE_CHECKING:
    from console_bridge._connection._async import AsyncMcpConnection
    from console_bridge._connection._blocking import McpConnection
    from console_bridge._connection._status import ConnectionStatus, Page
    from console_bridge._console._blocking import Console
    from console_bridge._console._session import AsyncConsole, ConsoleStatus
    from console_bridge._manager._async import AsyncSessionManager
    from console_bridge._manager._blocking import SessionManager
    from console_bridge._manager._info import LatencySummary, ManagerStats, SessionInfo

from console_bridge._about import __version__

# The connection and console classes pull in the MCP SDK (about a second to import):
# they load on first use, so `import console_bridge` and the CLI's --help stay fast.
_LAZY = {
    "AsyncMcpConnection": "console_bridge._connection._async",
    "ConnectionStatus": "console_bridge._connection._status",
    "Page": "console_bridge._connection._status",
    "McpConnection": "console_bridge._connection._blocking",
    "Console": "console_bridge._console._blocking",
    "AsyncConsole": "console_bridge._console._session",
    "ConsoleStatus": "console_bridge._console._session",
    "AsyncSessionManager": "console_bridge._manager._async",
    "SessionManager": "console_bridge._manager._blocking",
    "SessionInfo": "console_bridge._manager._info",
    "ManagerStats": "console_bridge._manager._info",
    "LatencySummary": "console_bridge._manager._info",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'console_bridge' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext console_bridge``: the ``%%console`` magics (see ``console_bridge.jupyter``)."""
    from console_bridge.jupyter import load_ipython_extension as load

    load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    """``%unload_ext console_bridge``: close the kernel's console session and remove the magics."""
    from console_bridge.jupyter import unload_ipython_extension as unload

    unload(ipython)


__all__ = [
    "ApprovalDenied",
    "ApprovalRequest",
    "AsyncConsole",
    "AsyncMcpConnection",
    "AsyncSessionManager",
    "AuditLog",
    "BridgeError",
    "Busy",
    "CallTimeout",
    "CellError",
    "CellFailure",
    "CellResult",
    "CellTimeout",
    "CellUsage",
    "ConnectionClosed",
    "ConnectionStatus",
    "Console",
    "ConsoleStatus",
    "DependenciesRefused",
    "Desynchronized",
    "Image",
    "InvalidArgument",
    "LatencySummary",
    "LaunchRefused",
    "Limits",
    "ManagerStats",
    "McpConnection",
    "NotAllowed",
    "Output",
    "Owner",
    "OwnerMismatch",
    "Page",
    "Policy",
    "Recording",
    "Recordings",
    "SandboxMismatch",
    "SchemaDrift",
    "ServerError",
    "SessionInfo",
    "SessionManager",
    "SessionUsage",
    "Table",
    "ToolHandle",
    "ToolResult",
    "VerificationFailed",
    "VersionRefused",
    "__version__",
    "current_owner",
    "run_context",
]
