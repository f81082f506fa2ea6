"""The one exception tree of console_bridge.

::

    BridgeError                  every error the package raises on purpose
    ├─ LaunchRefused             nothing was started
    │  └─ VersionRefused         binary missing, unparseable or not a qualified version
    ├─ VerificationFailed        the server started but did not prove what was required;
    │  │                         it was stopped before any call
    │  ├─ SandboxMismatch        advertised sandbox differs from the requested one
    │  └─ DependenciesRefused    dependencies="deny" and installs are offered or asked for
    ├─ NotAllowed                outside an allowlist or policy
    │  ├─ ApprovalDenied         the approval gate said no (or no gate exists)
    │  └─ OwnerMismatch          used under another owner's run context
    ├─ Busy                      another call is active on this connection; nothing sent
    ├─ ConnectionClosed          closed, cancelled, crashed or revoked; every handle now raises it
    │  ├─ CallTimeout            a request passed its deadline; the connection was closed
    │  └─ Desynchronized         a reply did not match its request; the connection was closed
    ├─ CellTimeout               a cell outlived run(timeout=...); it was interrupted, the session lives on
    ├─ CellError                 the cell's code failed (raised, SQL/R error, killed at a limit);
    │                            raised only by raise_for_error() or run(check=True); carries .result
    ├─ SchemaDrift               a pinned tool changed or could not be re-verified (fails closed)
    └─ ServerError               an MCP error or tool error result; message carries the server text

Every message says what happened and what the caller can do about it. Errors carry
the context a user needs as attributes (``server``, ``pid``, ``stderr_tail``, ...),
all optional, all keyword-only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from console_bridge._results import CellResult, ToolResult

__all__ = [
    "ApprovalDenied",
    "BridgeError",
    "Busy",
    "CallTimeout",
    "CellError",
    "CellTimeout",
    "ConnectionClosed",
    "DependenciesRefused",
    "Desynchronized",
    "InvalidArgument",
    "LaunchRefused",
    "NotAllowed",
    "OwnerMismatch",
    "SandboxMismatch",
    "SchemaDrift",
    "ServerError",
    "VerificationFailed",
    "VersionRefused",
]


def _rebuild(cls: type[BridgeError], message: str, state: dict[str, Any]) -> BridgeError:
    error = cls.__new__(cls)
    Exception.__init__(error, message)
    error.__dict__.update(state)
    return error


class BridgeError(Exception):
    """Every error console_bridge raises on purpose.

    Attributes (all may be ``None``): ``server`` (config entry name), ``pid`` of the
    server process, ``stderr_tail`` (last lines the server wrote on stderr),
    ``details`` (a dict of anything else worth knowing).
    """

    def __init__(
        self,
        message: str,
        *,
        server: str | None = None,
        pid: int | None = None,
        stderr_tail: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.server = server
        self.pid = pid
        self.stderr_tail = stderr_tail
        self.details: dict[str, Any] = dict(details or {})

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickle by state, whatever a subclass's __init__ requires (errors cross process
        # boundaries, e.g. from a Ray node back to the driver, with every field).
        return (_rebuild, (type(self), self.message, dict(self.__dict__)))

    def __str__(self) -> str:
        text = self.message
        if self.stderr_tail:
            tail = self.stderr_tail.strip()[-2000:]
            if tail:
                text += f"\n--- server stderr (tail) ---\n{tail}"
        return text


class LaunchRefused(BridgeError):
    """Nothing was started: the configuration, arguments or environment were refused."""


class VersionRefused(LaunchRefused):
    """The server binary is missing, its version unparseable, or not a qualified version."""


class VerificationFailed(BridgeError):
    """The server started but did not prove what was required; it was stopped before any call."""


class SandboxMismatch(VerificationFailed):
    """The sandbox the server advertises differs from the one requested."""


class DependenciesRefused(VerificationFailed):
    """``dependencies="deny"`` and the server offers or asks for package installs."""


class InvalidArgument(BridgeError, ValueError, TypeError):
    """A value given to a public class or function is not one it takes (the message names the
    argument and what it takes); nothing was done. Also a ``ValueError`` and a ``TypeError``, as
    Python's own argument errors are. Arguments that would start a session or a connection are
    refused as :class:`LaunchRefused`, which says that nothing was started."""


class NotAllowed(BridgeError):
    """The request is outside an allowlist or the policy; nothing was sent."""


class ApprovalDenied(NotAllowed):
    """The approval gate said no, or no approval gate is configured."""


class OwnerMismatch(NotAllowed):
    """Used under another owner's run context."""


class Busy(BridgeError):
    """Another call is active on this connection; nothing was sent."""


class ConnectionClosed(BridgeError):
    """The connection is closed, cancelled, crashed or revoked; every handle now raises this."""


class CallTimeout(ConnectionClosed):
    """A request passed its deadline; the connection was closed."""


class Desynchronized(ConnectionClosed):
    """A reply did not match its request; the connection was closed."""


class CellTimeout(BridgeError):
    """A cell outlived ``run(timeout=...)``: it was interrupted and the session lives on.

    ``result`` holds the output seen before the deadline.
    """

    def __init__(self, message: str, *, result: CellResult | None = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.result = result


class CellError(BridgeError):
    """The cell's code failed: it raised, a SQL or R error, the worker exited, or a limit killed it.

    Raised only by :meth:`CellResult.raise_for_error` and ``run(..., check=True)``; a
    failed cell is otherwise an ordinary result with ``error`` set. ``result`` is the
    whole :class:`CellResult`, ``error`` its :class:`CellFailure`.
    """

    def __init__(self, message: str, *, result: CellResult, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.result = result
        self.error = result.error


class SchemaDrift(BridgeError):
    """A pinned tool changed or could not be re-verified; the tool is revoked (fails closed)."""


class ServerError(BridgeError):
    """An MCP error response or a tool error result; the message carries the server's text.

    ``result`` holds the tool result when the error was a tool error result.
    ``code`` holds the JSON-RPC error code when it was an error response.
    """

    def __init__(
        self,
        message: str,
        *,
        result: ToolResult | None = None,
        code: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(message, **kwargs)
        self.result = result
        self.code = code
