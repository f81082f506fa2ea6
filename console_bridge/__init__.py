"""console_bridge: governed sessions on MCP Console and governed clients for any MCP server.

Quick start::

    from console_bridge import Console

    with Console("analysis/") as console:
        print(console.run(python="import sys; print(sys.version)").text)

Every error raised on purpose is a :class:`BridgeError`; see ``console_bridge._errors``
for the tree.
"""

from console_bridge._connection._async import AsyncMcpConnection, ConnectionStatus, Page
from console_bridge._connection._blocking import McpConnection
from console_bridge._connection._handles import ToolHandle
from console_bridge._console._blocking import Console
from console_bridge._console._recordings import Recording, Recordings
from console_bridge._console._session import AsyncConsole, ConsoleStatus
from console_bridge._errors import (
    ApprovalDenied,
    BridgeError,
    Busy,
    CallTimeout,
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
from console_bridge._governance._audit import AuditLog
from console_bridge._governance._policy import ApprovalRequest, Policy
from console_bridge._identity import Owner, current_owner, run_context
from console_bridge._results import CellResult, Image, ToolResult

__version__ = "0.1.0"

__all__ = [
    "ApprovalDenied",
    "ApprovalRequest",
    "AsyncConsole",
    "AsyncMcpConnection",
    "AuditLog",
    "BridgeError",
    "Busy",
    "CallTimeout",
    "CellResult",
    "CellTimeout",
    "ConnectionClosed",
    "ConnectionStatus",
    "Console",
    "ConsoleStatus",
    "DependenciesRefused",
    "Desynchronized",
    "Image",
    "LaunchRefused",
    "McpConnection",
    "NotAllowed",
    "Owner",
    "OwnerMismatch",
    "Page",
    "Policy",
    "Recording",
    "Recordings",
    "SandboxMismatch",
    "SchemaDrift",
    "ServerError",
    "ToolHandle",
    "ToolResult",
    "VerificationFailed",
    "VersionRefused",
    "__version__",
    "current_owner",
    "run_context",
]
