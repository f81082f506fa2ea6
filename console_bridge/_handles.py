"""Tool handles: what a host hands to a model framework, one per exposed tool."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from console_bridge._errors import NotAllowed
from console_bridge._identity import Owner, check_owner
from console_bridge._results import ToolResult

if TYPE_CHECKING:
    from console_bridge._governance._gate import ToolView

__all__ = ["NotCopyable", "ToolHandle", "capability_handles", "check_prefix", "refuse_copy", "tool_handles"]

_PREFIX = re.compile(r"\A[A-Za-z0-9_-]{1,50}\Z")

Invoke = Callable[[dict[str, Any]], Awaitable[ToolResult]]
BlockingInvoke = Callable[[dict[str, Any]], ToolResult]


def check_prefix(prefix: object, *, optional: bool = False) -> None:
    """A tool-name prefix is 1-50 letters, digits, ``_`` or ``-`` (None too when ``optional``), else
    :class:`NotAllowed`."""
    if optional and prefix is None:
        return
    if not isinstance(prefix, str) or not _PREFIX.match(prefix):
        raise NotAllowed(f"prefix {prefix!r} must be 1-50 letters, digits, '_' or '-'")


def refuse_copy(obj: object) -> NoReturn:
    raise TypeError(
        f"{type(obj).__name__} is live process state and cannot be pickled or copied; "
        "create a new one from its configuration instead"
    )


class NotCopyable:
    """Live process state: pickling and copying raise ``TypeError`` instead of cloning a handle."""

    __slots__ = ()

    def __reduce_ex__(self, protocol: Any) -> NoReturn:
        refuse_copy(self)

    def __deepcopy__(self, memo: Any) -> NoReturn:
        refuse_copy(self)

    def __copy__(self) -> NoReturn:
        refuse_copy(self)


class ToolHandle(NotCopyable):
    """One exposed tool, bound to its connection and owner.

    ``name`` is what the model sees (prefixed when a prefix was asked for); ``tool``
    the server's name; ``description`` the sanitized description. Call it with
    ``await handle({"arg": ...})``; handles from blocking classes also offer
    ``handle.call({...})``.
    """

    __slots__ = (
        "_blocking",
        "_invoke",
        "annotations",
        "description",
        "input_schema",
        "name",
        "owner",
        "requires_approval",
        "server",
        "tool",
    )

    def __init__(
        self,
        *,
        name: str,
        tool: str,
        server: str,
        description: str,
        input_schema: Mapping[str, Any],
        annotations: Mapping[str, Any],
        requires_approval: bool,
        owner: Owner,
        invoke: Invoke,
        blocking: BlockingInvoke | None = None,
    ) -> None:
        self.name = name
        self.tool = tool
        self.server = server
        self.description = description
        self.input_schema: dict[str, Any] = dict(input_schema)
        self.annotations: dict[str, Any] = dict(annotations)
        self.requires_approval = requires_approval
        self.owner = owner
        self._invoke = invoke
        self._blocking = blocking

    def __repr__(self) -> str:
        return f"<ToolHandle {self.name!r} server={self.server!r} owner={self.owner!s}>"

    async def __call__(self, arguments: Mapping[str, Any] | None = None) -> ToolResult:
        check_owner(self.owner, f"tool {self.name!r}")
        return await self._invoke(dict(arguments or {}))

    @property
    def blocking(self) -> bool:
        """True for handles from blocking classes (``handle.call`` works)."""
        return self._blocking is not None

    def call(self, arguments: Mapping[str, Any] | None = None) -> ToolResult:
        """Blocking call; only for handles from blocking classes (``McpConnection``, ``Console``)."""
        if self._blocking is None:
            raise TypeError(f"{self!r} comes from an async class: use `await handle(arguments)`")
        check_owner(self.owner, f"tool {self.name!r}")
        return self._blocking(dict(arguments or {}))

    def with_blocking(self, blocking: BlockingInvoke, invoke: Invoke) -> ToolHandle:
        """A copy whose calls go through a blocking portal."""
        return ToolHandle(
            name=self.name,
            tool=self.tool,
            server=self.server,
            description=self.description,
            input_schema=self.input_schema,
            annotations=self.annotations,
            requires_approval=self.requires_approval,
            owner=self.owner,
            invoke=invoke,
            blocking=blocking,
        )


def tool_handles(
    views: Sequence[ToolView],
    prefix: str | None,
    server: str,
    owner: Owner,
    call_tool: Callable[[str, dict[str, Any]], Awaitable[ToolResult]],
) -> list[ToolHandle]:
    """One handle per exposed tool (as the governance gate shows it), named ``<prefix>_<tool>`` with a prefix."""
    return [
        ToolHandle(
            name=f"{prefix}_{view.tool}" if prefix else view.tool,
            tool=view.tool,
            server=server,
            description=view.description,
            input_schema=view.input_schema,
            annotations=view.annotations,
            requires_approval=view.requires_approval,
            owner=owner,
            invoke=_bind_call(call_tool, view.tool),
        )
        for view in views
    ]


def _bind_call(call_tool: Callable[[str, dict[str, Any]], Awaitable[ToolResult]], name: str) -> Invoke:
    async def invoke(arguments: dict[str, Any]) -> ToolResult:
        return await call_tool(name, arguments)

    return invoke


def capability_handles(
    prefix: str,
    server: str,
    owner: Owner,
    *,
    resources: Sequence[str],
    prompts: Sequence[str],
    read: Invoke,
    get: Invoke,
) -> list[ToolHandle]:
    """Read-resource and get-prompt handles whose argument is an enum of the allowlist (none when it is empty)."""
    handles = []
    read_only = {"readOnlyHint": True}
    if resources:
        handles.append(
            ToolHandle(
                name=f"{prefix}_read_resource",
                tool="resources/read",
                server=server,
                description=f"Read one resource of server '{server}'. Allowed URIs: " + ", ".join(resources),
                input_schema={
                    "type": "object",
                    "properties": {"uri": {"type": "string", "enum": list(resources)}},
                    "required": ["uri"],
                    "additionalProperties": False,
                },
                annotations=read_only,
                requires_approval=False,
                owner=owner,
                invoke=read,
            )
        )
    if prompts:
        handles.append(
            ToolHandle(
                name=f"{prefix}_get_prompt",
                tool="prompts/get",
                server=server,
                description=f"Get one prompt of server '{server}'. Allowed names: " + ", ".join(prompts),
                input_schema={
                    "type": "object",
                    "properties": {
                        "name": {"type": "string", "enum": list(prompts)},
                        "arguments": {"type": "object", "additionalProperties": {"type": "string"}},
                    },
                    "required": ["name"],
                    "additionalProperties": False,
                },
                annotations=read_only,
                requires_approval=False,
                owner=owner,
                invoke=get,
            )
        )
    return handles
