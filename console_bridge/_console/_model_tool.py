"""A part of :class:`AsyncConsole`: the model-facing ``send`` tool. Its schema and description
come from the one definition in ``_model_schema`` (serve's too); every refusal, approval and
audit record goes through the governance ``Gate``, which hands the approver a deep copy: what it
approves is what runs. The host's own calls go through the session's connection, which asks no
approval.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

from console_bridge._cells._observe import for_model
from console_bridge._console._model_schema import consistent_text, model_schema, without_nulls
from console_bridge._console._status import SERVER
from console_bridge._errors import Busy, ConnectionClosed, DependenciesRefused, NotAllowed
from console_bridge._governance._gate import Gate
from console_bridge._governance._policy import Exposure, Policy
from console_bridge._handles import ToolHandle
from console_bridge._identity import Owner
from console_bridge._results import CellResult

__all__ = ["ModelTool"]

_BRIDGE_NOTE = (
    "\n\nconsole-bridge: `timeout_ms` is capped at {cap} ms per call; a field sent as null is a field "
    "not given. A response that ends with `[running; poll with an empty send]` means the cell is still "
    "running: call `send` again with no code (`{{}}`) to keep watching it, or with "
    '`control: "interrupt"` to stop it. `control: "restart"` is reserved for the host.{deps}'
)


class ModelTool:
    """The governed ``send`` a model gets (``AsyncConsole.tools()``): no restart, clamped windows,
    no installs under ``dependencies="deny"``, approval through ``policy.approve`` when set, audited.

    ``owner`` gives the session's owner (reassigned at hand-over), ``poll_window`` its window and
    ``window_ms`` the clamp of a ``timeout_ms``; ``call`` is the call path's ``send`` and
    ``interrupt`` the cell loop's. The launcher sets :attr:`schema` and :attr:`description` from the
    server's verified ``send`` tool.
    """

    def __init__(
        self,
        policy: Policy,
        *,
        owner: Callable[[], Owner],
        installs: bool,
        poll_window: Callable[[], float],
        window_ms: Callable[[int | None], int],
        call: Callable[[dict[str, Any]], Awaitable[CellResult]],
        interrupt: Callable[[int], Awaitable[CellResult]],
    ) -> None:
        self._policy = policy
        self._owner = owner
        self._installs = installs
        self._poll_window = poll_window
        self._window_ms = window_ms
        self._call = call
        self._interrupt = interrupt
        #: the server's verified ``send`` input schema
        self.schema: dict[str, Any] = {}
        #: the server's verified ``send`` description (its sandbox sentence)
        self.description = ""

    def handles(self) -> list[ToolHandle]:
        """The tool, as handed to the model (the gate governs it from now on)."""
        cap = int(self._poll_window() * 1000)
        installs = self._installs
        schema = model_schema(self.schema, cap, installs=installs)  # one definition, serve's too
        deps = "" if installs else " Package installs (`requirements`) are disabled."
        note = _BRIDGE_NOTE.format(cap=cap, deps=deps)
        description = consistent_text(self.description, cap, installs=installs) + note
        approval = self._policy.approve is not None
        self.gate.govern(
            {"name": "send", "description": description, "inputSchema": schema, "annotations": {}},
            Exposure(exposed=True, needs_approval=approval, reasons=("runs code",)),
        )
        return [
            ToolHandle(
                name="send",
                tool="send",
                server=SERVER,
                description=description,
                input_schema=schema,
                annotations={},
                requires_approval=approval,
                owner=self._owner(),
                invoke=self.send,
            )
        ]

    @functools.cached_property
    def gate(self) -> Gate:
        """The governance gate of the model's ``send``: its refusals, approval and their audit records
        are a connection's (host calls go through the session's connection, which asks no approval)."""
        return Gate(
            self._policy,
            SERVER,
            owner=self._owner,
            tools=("send",),
            resources=(),
            prompts=(),
            note_error=lambda text: None,  # the status's last_error is the session connection's
            closed_error=lambda what: ConnectionClosed(f"{what}: the model's send was never handed out", server=SERVER),
        )

    async def send(self, arguments: dict[str, Any]) -> CellResult:
        """One model call: refused, approved and audited by the gate, then run on the call path."""
        arguments = without_nulls(arguments)  # every field is nullable: null means not given
        gate = self.gate
        pinned = gate.authorize("send")
        if arguments.get("control") == "restart":
            gate.refuse("tool 'send'", "restart is host-only", tool="send")
            raise NotAllowed('control: "restart" is reserved for the host; send control: "interrupt" to stop a cell')
        if "requirements" in arguments and not self._installs:
            gate.refuse("tool 'send'", "requirements under dependencies='deny'", tool="send")
            raise DependenciesRefused(
                "package installs (`requirements`) are disabled for this console; use the packages already installed",
                server=SERVER,
            )
        props = set((self.schema.get("properties") or {}).keys())
        unknown = sorted(set(arguments) - props)
        if unknown:
            raise NotAllowed(f"send does not take {', '.join(unknown)}; allowed fields: {', '.join(sorted(props))}")
        args = dict(arguments)
        args["timeout_ms"] = self._window_ms(args.get("timeout_ms"))
        # The gate hands the approver a deep copy: what it approves is what runs.
        await gate.approve(pinned, args, gate.next_call_id())
        try:
            if args.get("control") == "interrupt" and not any(k in args for k in ("python", "r", "sql", "stdin")):
                return for_model(await self._interrupt(args["timeout_ms"]))
            return for_model(await self._call(args))
        except Busy:
            # The model drives the cell through send alone: say it in send's terms, not the Python API's.
            raise Busy(
                "a cell is still running; call send({}) to keep watching it, or send with "
                'control: "interrupt" to stop it (nothing was queued)',
                server=SERVER,
            ) from None
