"""The governance policy and its pure decisions: which tools are exposed, which need approval."""

from __future__ import annotations

import inspect
import math
import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import anyio

from console_bridge._errors import InvalidArgument
from console_bridge._identity import Owner

if TYPE_CHECKING:
    from console_bridge._governance._audit import AuditLog

__all__ = ["ApprovalRequest", "Exposure", "Policy", "exposure", "is_positively_read_only", "run_approver"]

Mode = Literal["read_only", "read_write"]
PinMode = Literal["strict", "on_change", "off"]


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """What the approval gate is asked about.

    ``reason`` is one or more of ``"write-like"`` (annotated, but not positively read-only:
    ``readOnlyHint`` false, destructive or open-world), ``"unannotated"`` (no
    ``readOnlyHint`` at all) and ``"flagged description"`` (the description or a
    parameter description matched injection patterns; ``flags`` says which), joined
    with ``", "``. ``owner`` is the run context's owner, else the connection's.

    Example::

        def approve(request: ApprovalRequest) -> bool:
            print(f"{request.owner} wants {request.server}/{request.tool}({request.arguments}): {request.reason}")
            return input("allow? [y/N] ").strip().lower() == "y"
    """

    tool: str
    arguments: Mapping[str, Any]
    annotations: Mapping[str, Any]
    reason: str
    owner: Owner | None
    server: str
    flags: tuple[str, ...] = ()


Approver = Callable[[ApprovalRequest], bool | Awaitable[bool]]


@dataclass(frozen=True)
class Policy:
    """Governance for every tool reached through a connection.

    Example::

        policy = Policy(mode="read_write", approve=lambda req: req.tool == "write_note",
                        audit="audit.jsonl")

    - ``mode="read_only"`` (default) exposes only tools annotated ``readOnlyHint: true``
      (and not destructive or open-world).
    - ``read_write`` with ``approve_writes`` sends every call of a tool that is not
      positively read-only through ``approve``; without ``approve`` those calls raise
      ``ApprovalDenied``. ``approve`` may be sync or async; only ``True`` approves, and
      an exception or a verdict later than ``approval_timeout`` seconds counts as a
      denial (audited). A sync callable runs on the connection's event loop and cannot
      be interrupted (the timeout bounds async gates only): keep it quick, or make it async.
    - ``pin_schemas``: ``strict`` re-lists before every call, ``on_change`` after a
      ``tools/list_changed`` notification, ``off`` never; a change raises ``SchemaDrift``.
    - ``sanitize_descriptions``: descriptions, titles and schema texts are scanned
      against ``patterns.yaml``; a flagged tool needs approval (in every mode) and models
      see a neutral description and a schema with the flagged texts withheld. Text
      longer than ``max_description_chars`` is flagged too.
    - ``audit``: an :class:`AuditLog` or a path for one.
    - ``max_bytes``: cap on a result's text plus encoded binary content (structured
      content is capped separately by the same number).
    """

    mode: Mode = "read_only"
    approve: Approver | None = None
    approve_writes: bool = True
    pin_schemas: PinMode = "strict"
    sanitize_descriptions: bool = True
    audit: AuditLog | str | os.PathLike[str] | None = None
    max_bytes: int = 1_000_000
    max_description_chars: int = 4000
    approval_timeout: float = 600.0
    _audit_log: AuditLog | None = field(init=False, repr=False, compare=False, default=None)

    def __post_init__(self) -> None:
        if self.mode not in ("read_only", "read_write"):
            raise InvalidArgument(f"Policy.mode must be 'read_only' or 'read_write', not {self.mode!r}")
        if self.pin_schemas not in ("strict", "on_change", "off"):
            raise InvalidArgument(
                f"Policy.pin_schemas must be 'strict', 'on_change' or 'off', not {self.pin_schemas!r}"
            )
        if self.approve is not None and not callable(self.approve):
            raise InvalidArgument("Policy.approve must be a callable taking an ApprovalRequest")
        if not isinstance(self.approve_writes, bool) or not isinstance(self.sanitize_descriptions, bool):
            raise InvalidArgument("Policy.approve_writes and Policy.sanitize_descriptions must be True or False")
        if isinstance(self.max_bytes, bool) or not isinstance(self.max_bytes, int) or self.max_bytes < 1024:
            raise InvalidArgument(f"Policy.max_bytes must be an int of at least 1024, not {self.max_bytes!r}")
        chars = self.max_description_chars
        if isinstance(chars, bool) or not isinstance(chars, int) or chars < 1:
            raise InvalidArgument(f"Policy.max_description_chars must be a positive int, not {chars!r}")
        timeout = self.approval_timeout
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise InvalidArgument(f"Policy.approval_timeout must be a positive number of seconds, not {timeout!r}")
        from console_bridge._governance._audit import AuditLog

        log = self.audit
        if log is not None and not isinstance(log, AuditLog):
            if not isinstance(log, str | os.PathLike):
                raise InvalidArgument("Policy.audit must be an AuditLog, a path, or None")
            log = AuditLog(log)
        object.__setattr__(self, "_audit_log", log)

    @property
    def audit_log(self) -> AuditLog | None:
        """The :class:`AuditLog` records go to, or None."""
        return self._audit_log


def is_positively_read_only(annotations: Mapping[str, Any] | None) -> bool:
    """True only when the tool says ``readOnlyHint: true`` and nothing write-like."""
    if not annotations:
        return False
    return (
        annotations.get("readOnlyHint") is True
        and annotations.get("destructiveHint") is not True
        and annotations.get("openWorldHint") is not True
    )


@dataclass(frozen=True, slots=True)
class Exposure:
    """The policy's decision about one tool."""

    exposed: bool
    needs_approval: bool
    reasons: tuple[str, ...]  # why it is not read-only / why it needs approval


TASK_REQUIRED = "requires task-augmented calls"


def exposure(
    policy: Policy,
    annotations: Mapping[str, Any] | None,
    flags: tuple[str, ...],
    execution: Mapping[str, Any] | None = None,
) -> Exposure:
    """Decide whether a tool is exposed and whether each call needs approval.

    ============  =====================  ==========================================
    mode          not positively r/o     flagged description
    ============  =====================  ==========================================
    read_only     hidden, NotAllowed     approval (when exposed)
    read_write    approval if            approval, always
                  approve_writes
    ============  =====================  ==========================================

    A tool whose ``execution.taskSupport`` is ``"required"`` is never exposed.
    """
    if isinstance(execution, Mapping) and execution.get("taskSupport") == "required":
        # Every plain tools/call of it fails; the bridge does not make task-augmented calls.
        return Exposure(False, False, (TASK_REQUIRED,))
    reasons: list[str] = []
    read_only = is_positively_read_only(annotations)
    if not read_only:
        hints = annotations or {}
        says_something = "readOnlyHint" in hints or any(
            hints.get(key) is True for key in ("destructiveHint", "openWorldHint")
        )
        reasons.append("write-like" if says_something else "unannotated")
    if flags:
        reasons.append("flagged description")
    if policy.mode == "read_only" and not read_only:
        return Exposure(False, False, tuple(reasons))
    needs = bool(flags) or (not read_only and policy.approve_writes)
    return Exposure(True, needs, tuple(reasons))


async def run_approver(
    approve: Approver | None, request: ApprovalRequest, *, timeout: float = math.inf
) -> tuple[bool, str | None]:
    """Ask the gate; returns (approved, error text).

    Only a verdict of exactly ``True`` approves. No gate, an exception, or no verdict
    within ``timeout`` seconds is a denial (the error text says which).
    """
    if approve is None:
        return False, None
    verdict: object = None
    with anyio.move_on_after(timeout) as scope:
        try:
            verdict = approve(request)
            if inspect.isawaitable(verdict):
                verdict = await verdict
        except Exception as exc:  # a failing gate must deny, never allow
            return False, f"{type(exc).__name__}: {exc}"
    if scope.cancelled_caught:
        return False, f"no verdict within approval_timeout={timeout:g}s"
    return verdict is True, None
