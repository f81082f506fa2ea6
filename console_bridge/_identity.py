"""Owner identity and the run context that scopes it.

The host assigns an :class:`Owner` to every connection. While a :func:`run_context`
is active (an agent's turn, say), using a connection or tool handle that belongs to
a different owner raises :class:`~console_bridge.OwnerMismatch`. Outside any run
context, calls are host calls and are allowed.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from console_bridge._errors import InvalidArgument, OwnerMismatch

__all__ = ["Owner", "check_owner", "current_owner", "run_context"]


@dataclass(frozen=True, slots=True)
class Owner:
    """Who a connection belongs to; assigned by the host, never by a model.

    Example::

        owner = Owner("analyst-agent", session_id="conv-42")
        with run_context(owner):
            result = conn.call_tool("search", {"q": "x"})
    """

    agent_id: str
    session_id: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.agent_id, str) or not self.agent_id:
            raise InvalidArgument("Owner.agent_id must be a non-empty string")
        if self.session_id is not None and not isinstance(self.session_id, str):
            raise InvalidArgument("Owner.session_id must be a string or None")

    def __str__(self) -> str:
        return self.agent_id if self.session_id is None else f"{self.agent_id}/{self.session_id}"


_current: contextvars.ContextVar[Owner | None] = contextvars.ContextVar("console_bridge_owner", default=None)


def current_owner() -> Owner | None:
    """The owner of the active run context, or ``None`` for host calls."""
    return _current.get()


@contextmanager
def run_context(owner: Owner) -> Iterator[Owner]:
    """Mark the enclosed code (across ``await``) as running on behalf of ``owner``."""
    if not isinstance(owner, Owner):
        raise InvalidArgument(f"run_context() needs an Owner, got {type(owner).__name__}")
    token = _current.set(owner)
    try:
        yield owner
    finally:
        _current.reset(token)


def check_owner(owner: Owner, what: str) -> None:
    """Raise :class:`OwnerMismatch` when a run context of another owner is active."""
    active = _current.get()
    if active is not None and active != owner:
        raise OwnerMismatch(
            f"{what} belongs to owner {owner!s} but was used under the run context of {active!s}; "
            "hand each agent only the handles created for its own Owner.",
            details={"owner": str(owner), "caller": str(active)},
        )
