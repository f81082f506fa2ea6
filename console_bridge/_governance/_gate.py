"""The governance gate: every policy decision a governed connection's calls pass through.

One :class:`Gate` per connection. It holds the allowlists, the pinned tool
definitions and what was revoked, and it writes every audit record. The
connection owns the transport, the lifecycle and the one-request-at-a-time slot,
and holds no policy logic: it calls the gate at the points a call passes through.

============================  ================================================================
connection step               the gate's part
============================  ================================================================
``connect`` (tools listed)    :meth:`Gate.admit`: every allowlisted tool is offered (else
                              ``VerificationFailed``); each is pinned and its exposure decided
``call_tool``                 :meth:`Gate.authorize` (allowlist, revoked, task support,
                              read-only floor), :meth:`Gate.approve` (the approval gate),
                              :meth:`Gate.pins_due` / :meth:`Gate.check_pins` (schema pinning,
                              fails closed), :meth:`Gate.tool_result` (output schema, caps, audit)
``read_resource``,            :meth:`Gate.allow_resource`, :meth:`Gate.allow_prompt`, then
``get_prompt``                :meth:`Gate.finish_result`
``tools()``                   :meth:`Gate.exposed_tools`: what a model may see of each tool
a facade's own tool           :meth:`Gate.govern` (exposure decided by the facade), then
                              :meth:`Gate.authorize`, :meth:`Gate.refuse`, :meth:`Gate.approve`
lifecycle, busy, discovery    :meth:`Gate.audit`, :meth:`Gate.refuse`
============================  ================================================================

Nothing here does I/O except the audit log's append; nothing here knows the
transport: the connection hands the gate listings and replies as wire dicts.
"""

from __future__ import annotations

import copy
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jsonschema

from console_bridge._errors import (
    ApprovalDenied,
    BridgeError,
    LaunchRefused,
    NotAllowed,
    SchemaDrift,
    ServerError,
    VerificationFailed,
)
from console_bridge._governance._audit import sha256_json
from console_bridge._governance._caps import cap_result, json_size
from console_bridge._governance._pinning import tool_fingerprint
from console_bridge._governance._policy import TASK_REQUIRED, ApprovalRequest, Exposure, Policy, exposure, run_approver
from console_bridge._governance._sanitize import neutral_description, sanitize_schema, scan_tool
from console_bridge._identity import Owner, current_owner
from console_bridge._results import ToolResult, result_from_content

__all__ = ["Gate", "Pinned", "ToolView", "allowlist"]


def allowlist(values: Sequence[str], what: str) -> tuple[str, ...]:
    """An allowlist as exact names, duplicates dropped; :class:`LaunchRefused` for anything else."""
    if isinstance(values, str) or not all(isinstance(v, str) and v for v in values):
        raise LaunchRefused(f"{what} must be a sequence of exact names (strings), e.g. {what}=['echo']")
    return tuple(dict.fromkeys(values))


@dataclass
class Pinned:
    """One allowlisted tool as first listed: its definition, fingerprint, flags and exposure."""

    name: str
    wire: dict[str, Any]
    fingerprint: str
    flags: tuple[str, ...]
    exposure: Exposure


@dataclass(frozen=True, slots=True)
class ToolView:
    """What a model may see of one exposed tool (flagged texts already withheld)."""

    tool: str
    description: str
    input_schema: dict[str, Any]
    annotations: dict[str, Any]
    requires_approval: bool


class Gate:
    """The policy applied to one connection to ``server`` (see the module docstring).

    ``owner`` returns the connection's owner (it can be reassigned at hand-over);
    ``note_error`` records a refusal as the connection's last error; ``closed_error``
    builds the error for a connection that closed under a call.
    """

    def __init__(
        self,
        policy: Policy,
        server: str,
        *,
        owner: Callable[[], Owner],
        tools: Sequence[str],
        resources: Sequence[str],
        prompts: Sequence[str],
        note_error: Callable[[str], None],
        closed_error: Callable[[str], BridgeError],
    ) -> None:
        self.policy = policy
        self.server = server
        self.tools = allowlist(tools, "tools")
        self.resources = allowlist(resources, "resources")
        self.prompts = allowlist(prompts, "prompts")
        self._owner = owner
        self._note_error = note_error
        self._closed_error = closed_error
        self._pinned: dict[str, Pinned] = {}
        self._revoked: dict[str, str] = {}
        self._tools_changed = False
        self._audit_id = uuid.uuid4().hex[:12]  # tells this connection's audit records apart
        self._call_seq = 0

    # ------------------------------------------------------------------ state
    @property
    def revoked(self) -> dict[str, str]:
        """Revoked tools and why (a copy)."""
        return dict(self._revoked)

    def notices(self) -> tuple[str, ...]:
        """What the status should tell about tools the policy keeps from the model."""
        return tuple(
            f"tool {name!r} is not exposed: it declares execution.taskSupport 'required' (every plain call "
            "would fail; the bridge does not make task-augmented calls)"
            for name, pinned in self._pinned.items()
            if TASK_REQUIRED in pinned.exposure.reasons
        )

    def next_call_id(self) -> str:
        """The id that joins one call's approval, call_start and call_end records."""
        self._call_seq += 1
        return f"{self._audit_id}-{self._call_seq}"

    # ------------------------------------------------------------------ audit
    def audit(self, event: str, **fields: Any) -> None:
        """Write one audit record (nothing without an audit log); a failed write raises :class:`BridgeError`."""
        log = self.policy.audit_log
        if log is None:
            return
        owner = current_owner() or self._owner()
        try:
            log.write(
                event,
                owner=str(owner),
                agent_id=owner.agent_id,
                session_id=owner.session_id,
                server=self.server,
                connection=self._audit_id,
                **fields,
            )
        except OSError as exc:  # an audit failure must be visible, never silent
            raise BridgeError(f"could not write the audit log {str(log.path)!r}: {exc}") from None

    def refuse(self, target: str, reason: str, **extra: Any) -> None:
        """Record a refusal (last error and audit); the caller raises."""
        self._note_error(f"{target}: {reason}")
        self.audit("refusal", target=target, reason=reason, **extra)

    # ---------------------------------------------------------------- connect
    def admit(self, listing: Sequence[dict[str, Any]], context: Callable[[], Mapping[str, Any]]) -> None:
        """Check the first tools listing offers every allowlisted tool, then pin each.

        Raises :class:`VerificationFailed` (with ``context()``: server, pid, stderr tail).
        """
        by_name = {str(tool.get("name")): tool for tool in listing}
        missing = [name for name in self.tools if name not in by_name]
        if missing:
            error = VerificationFailed(
                f"server {self.server!r} does not offer the allowlisted tool(s) {', '.join(missing)} "
                f"(it offers: {', '.join(sorted(by_name)) or 'none'}); it was stopped before any call. "
                "Fix the allowlist or the server.",
                **context(),
            )
            self.audit("refusal", reason="allowlisted tool missing", missing=missing)
            raise error
        for name in self.tools:
            self._pin(by_name[name])

    def _pin(self, wire: dict[str, Any]) -> Pinned:
        name = str(wire["name"])
        policy = self.policy
        flags = tuple(scan_tool(wire, max_chars=policy.max_description_chars)) if policy.sanitize_descriptions else ()
        pinned = Pinned(
            name=name,
            wire=wire,
            fingerprint=tool_fingerprint(wire),
            flags=flags,
            exposure=exposure(policy, wire.get("annotations"), flags, wire.get("execution")),
        )
        self._pinned[name] = pinned
        self.audit(
            "schema",
            tool=name,
            sha256=pinned.fingerprint,
            flags=list(flags) or None,
            exposed=pinned.exposure.exposed,
            requires_approval=pinned.exposure.needs_approval,
        )
        return pinned

    def govern(self, wire: dict[str, Any], exposure: Exposure) -> None:
        """Govern a tool the gate's owner defines itself instead of listing it from a server (a
        console's model ``send``, whose exposure is the console's decision, not the annotations').

        Its calls then pass :meth:`authorize` and :meth:`approve` like a listed tool's. Nothing is
        audited: no server's schema was seen. Raises ``ValueError`` for a tool off the allowlist.
        """
        name = str(wire["name"])
        if name not in self.tools:
            raise ValueError(f"tool {name!r} is not on the tools allowlist of this gate")
        self._pinned[name] = Pinned(name, wire, tool_fingerprint(wire), (), exposure)

    # ------------------------------------------------------------- tool calls
    def authorize(self, name: str) -> Pinned:
        """Allowlist, revocation, task support and the read-only floor; raises before anything is sent."""
        if name not in self.tools:
            self.refuse(f"tool {name!r}", "not on the tools allowlist", tool=name)
            raise NotAllowed(
                f"tool {name!r} is not on the tools allowlist of {self.server!r} "
                f"(allowed: {', '.join(self.tools) or 'none'}); nothing was sent",
                server=self.server,
            )
        if name in self._revoked:
            self.refuse(f"tool {name!r}", "revoked after schema drift", tool=name)
            raise SchemaDrift(
                f"tool {name!r} of {self.server!r} was revoked: {self._revoked[name]}. It stays revoked on this "
                "connection; review the server, then open a new connection.",
                server=self.server,
            )
        pinned = self._pinned.get(name)
        if pinned is None:
            raise self._closed_error(f"tool {name!r}")
        if TASK_REQUIRED in pinned.exposure.reasons:
            self.refuse(f"tool {name!r}", TASK_REQUIRED, tool=name)
            raise NotAllowed(
                f"tool {name!r} of {self.server!r} declares execution.taskSupport 'required': it only runs as a "
                "task-augmented call, which the bridge does not make; nothing was sent",
                server=self.server,
            )
        if not pinned.exposure.exposed:
            self.refuse(f"tool {name!r}", "read-only floor", tool=name, reasons=list(pinned.exposure.reasons))
            raise NotAllowed(
                f"tool {name!r} of {self.server!r} is not positively read-only "
                f"({', '.join(pinned.exposure.reasons)}) and the policy is read_only; nothing was sent. "
                "Use Policy(mode='read_write', approve=...) to allow it with approval.",
                server=self.server,
            )
        return pinned

    async def approve(self, pinned: Pinned, args: dict[str, Any], call_id: str) -> None:
        """Ask the approval gate when the tool's exposure needs it; :class:`ApprovalDenied` unless it says yes."""
        if not pinned.exposure.needs_approval:
            return
        name = pinned.name
        request = ApprovalRequest(
            tool=name,
            arguments=copy.deepcopy(args),  # the gate cannot change what is sent
            annotations=dict(pinned.wire.get("annotations") or {}),
            reason=", ".join(pinned.exposure.reasons) or "policy",
            owner=current_owner() or self._owner(),
            server=self.server,
            flags=pinned.flags,
        )
        approved, error = await run_approver(self.policy.approve, request, timeout=self.policy.approval_timeout)
        self.audit(
            "approval",
            tool=name,
            call=call_id,
            args_sha256=sha256_json(args),
            approved=approved,
            reason=request.reason,
            flags=list(pinned.flags) or None,
            error=error,
            gate=self.policy.approve is not None,
            content_arguments=args,
        )
        if not approved:
            self._note_error(f"tool {name!r}: approval denied")
            if self.policy.approve is None:
                why = "no approval gate is configured (Policy(approve=...))"
            elif error is not None:
                why = f"the approval gate failed ({error}), which counts as a denial"
            else:
                why = "the approval gate said no"
            raise ApprovalDenied(
                f"tool {name!r} of {self.server!r} needs approval ({request.reason}) and {why}; nothing was sent",
                server=self.server,
            )

    def call_started(self, name: str, call_id: str, args: dict[str, Any]) -> None:
        """Audit a call about to be sent."""
        if self.policy.audit_log is not None:  # hashing a large argument costs: only for the log
            self.audit(
                "call_start",
                tool=name,
                call=call_id,
                args_sha256=sha256_json(args),
                args_bytes=json_size(args),
                content_arguments=args,
            )

    def call_failed(self, name: str, call_id: str, exc: BridgeError, started: float) -> None:
        """Audit a call that ended in ``exc`` (refused, timed out, drifted, closed)."""
        self.audit(
            "call_end",
            tool=name,
            call=call_id,
            outcome=type(exc).__name__,
            reason=exc.message,
            duration_ms=_since(started),
        )

    # ---------------------------------------------------------------- pinning
    def tools_changed(self) -> None:
        """The server sent ``tools/list_changed``: ``on_change`` pinning re-lists before the next call."""
        self._tools_changed = True

    def pins_due(self) -> bool:
        """Whether the policy wants the tools re-listed and compared before this call."""
        pin = self.policy.pin_schemas
        if pin == "strict" or (pin == "on_change" and self._tools_changed):
            self._tools_changed = False
            return True
        return False

    def relisting_failed(self, name: str, why: str) -> SchemaDrift:
        """The re-listing that verifies the pins ``why`` (timed out, failed): revoke ``name`` (fails closed)."""
        self._tools_changed = True  # nothing was verified: the next call re-lists again
        self._revoke(name, f"the re-listing that verifies its pinned schema {why}")
        return SchemaDrift(
            f"tool {name!r} of {self.server!r} could not be re-verified: the tools/list re-listing {why}; "
            "the tool is revoked (fails closed).",
            server=self.server,
        )

    def check_pins(self, listing: Sequence[dict[str, Any]], name: str) -> None:
        """Compare every pinned tool with ``listing``; revoke what changed. Raises :class:`SchemaDrift` for ``name``."""
        by_name = {str(tool.get("name")): tool for tool in listing}
        for pinned_name, pinned in self._pinned.items():
            if pinned_name in self._revoked:
                continue
            current = by_name.get(pinned_name)
            if current is None:
                self._revoke(pinned_name, "it vanished from the server's tool list")
            elif tool_fingerprint(current) != pinned.fingerprint:
                self._revoke(pinned_name, "its definition changed after it was pinned")
        if name in self._revoked:
            raise SchemaDrift(
                f"tool {name!r} of {self.server!r} is revoked: {self._revoked[name]}. A tool revoked for drift "
                "never comes back on this connection; review the server and reconnect.",
                server=self.server,
            )

    def _revoke(self, name: str, reason: str) -> None:
        if name not in self._revoked:
            self._revoked[name] = reason
            self.audit("drift", tool=name, reason=reason)

    # ---------------------------------------------------------------- results
    def tool_result(
        self,
        name: str,
        args: Mapping[str, Any],
        content: list[dict[str, Any]],
        structured: dict[str, Any] | None,
        *,
        is_error: bool,
        started: float,
        call_id: str,
    ) -> ToolResult:
        """A tool's reply as a capped, audited :class:`ToolResult`.

        Raises :class:`ServerError` for a tool error result (carrying it) and for
        structured content that violates the tool's output schema.
        """
        if is_error:
            out = self.finish_result(content, structured, name, args, started, is_error=True, call=call_id)
            raise ServerError(
                f"tool {name!r} of {self.server!r} returned an error: {out.text[:2000]}",
                result=out,
                server=self.server,
            )
        schema = self._pinned[name].wire.get("outputSchema")
        if schema is not None:
            problem = _structured_problem(schema, structured)
            if problem is not None:
                raw = {"content": content, "structured": structured}
                self.audit(
                    "call_end",
                    tool=name,
                    call=call_id,
                    outcome="output_schema_violation",
                    reason=problem,
                    result_sha256=sha256_json(raw),
                    result_bytes=json_size(raw),
                    duration_ms=_since(started),
                )
                raise ServerError(
                    f"tool {name!r} of {self.server!r} returned structured content that violates its "
                    f"output schema: {problem}",
                    server=self.server,
                )
        return self.finish_result(content, structured, name, args, started, call=call_id)

    def finish_result(
        self,
        content: list[dict[str, Any]],
        structured: dict[str, Any] | None,
        tool: str,
        args: Mapping[str, Any],
        started: float,
        *,
        is_error: bool = False,
        call: str | None = None,
    ) -> ToolResult:
        """Cap a reply at ``Policy.max_bytes`` and audit its end (hashes of what came, not what was kept)."""
        raw = {"content": content, "structured": structured}
        capped = cap_result(content, structured, self.policy.max_bytes)
        result = result_from_content(
            capped.content,
            structured=capped.structured,
            is_error=is_error,
            truncated=capped.truncated,
            server=self.server,
            tool=tool,
        )
        if self.policy.audit_log is not None:  # hashing a 1 MiB image costs ms: only for the log
            self.audit(
                "call_end",
                tool=tool,
                call=call,
                outcome="tool_error" if is_error else "ok",
                result_sha256=sha256_json(raw),
                result_bytes=json_size(raw),
                truncated=capped.truncated or None,
                duration_ms=_since(started),
                content_result={"content": capped.content, "structured": capped.structured},
            )
        return result

    # ----------------------------------------------------- resources, prompts
    def allow_resource(self, uri: str) -> None:
        """:class:`NotAllowed` unless ``uri`` is on the resources allowlist (exact)."""
        self._allow("resource", uri, self.resources)

    def allow_prompt(self, name: str) -> None:
        """:class:`NotAllowed` unless ``name`` is on the prompts allowlist (exact)."""
        self._allow("prompt", name, self.prompts)

    def _allow(self, kind: str, name: str, allowed: tuple[str, ...]) -> None:
        if name not in allowed:
            self.refuse(f"{kind} {name!r}", f"not on the {kind}s allowlist")
            raise NotAllowed(
                f"{kind} {name!r} is not on the {kind}s allowlist of {self.server!r} "
                f"(allowed: {', '.join(allowed) or 'none'}); nothing was sent",
                server=self.server,
            )

    # ------------------------------------------------------------ model views
    def exposed_tools(self) -> list[ToolView]:
        """The allowlisted tools the policy exposes, in allowlist order (revoked ones left out).

        A flagged tool shows a neutral description and a schema with the flagged texts withheld.
        """
        views = []
        for name in self.tools:
            pinned = self._pinned.get(name)
            if pinned is None or name in self._revoked or not pinned.exposure.exposed:
                continue
            description = str(pinned.wire.get("description") or "")
            input_schema = pinned.wire.get("inputSchema") or {"type": "object"}
            if pinned.flags:  # the model sees neither the flagged description nor flagged parameter texts
                description = neutral_description(name, self.server)
                input_schema = sanitize_schema(input_schema, max_chars=self.policy.max_description_chars)
            views.append(
                ToolView(
                    tool=name,
                    description=description,
                    input_schema=input_schema,
                    annotations=pinned.wire.get("annotations") or {},
                    requires_approval=pinned.exposure.needs_approval,
                )
            )
        return views


def _since(started: float) -> float:
    return round((time.monotonic() - started) * 1000, 3)


def _structured_problem(schema: Mapping[str, Any], structured: dict[str, Any] | None) -> str | None:
    if structured is None:
        return "the tool declares an output schema but returned no structured content"
    try:
        validator_cls = jsonschema.validators.validator_for(schema)
        errors = sorted(validator_cls(schema).iter_errors(structured), key=lambda e: list(e.path))
    except jsonschema.exceptions.SchemaError as exc:
        return f"the tool's output schema is itself invalid: {exc.message}"
    if errors:
        error = errors[0]
        where = "/".join(map(str, error.path)) or "(root)"
        return f"{where}: {error.message}"
    return None
