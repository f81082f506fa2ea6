"""Pure policy decisions: the read-only floor, who needs approval, and the approval runner."""

from __future__ import annotations

import dataclasses
from typing import Any

import anyio
import pytest

from console_bridge import ApprovalRequest, AuditLog, Owner, Policy
from console_bridge._governance._policy import exposure, is_positively_read_only, run_approver

READ_ONLY = {"readOnlyHint": True}
WRITE = {"readOnlyHint": False, "destructiveHint": True}
FLAGS = ("description: pseudo_tags",)


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        (None, False),
        ({}, False),
        ({"title": "Read a file"}, False),
        ({"readOnlyHint": True}, True),
        ({"readOnlyHint": True, "destructiveHint": False, "openWorldHint": False}, True),
        ({"readOnlyHint": True, "destructiveHint": True}, False),
        ({"readOnlyHint": True, "openWorldHint": True}, False),
        ({"readOnlyHint": False}, False),
        ({"readOnlyHint": "true"}, False),  # only the JSON boolean counts
        ({"readOnlyHint": 1}, False),
        ({"destructiveHint": False}, False),
    ],
)
def test_only_a_positive_read_only_hint_counts(annotations: dict[str, Any] | None, expected: bool) -> None:
    assert is_positively_read_only(annotations) is expected


@pytest.mark.parametrize(
    ("annotations", "reason"),
    [
        (None, "unannotated"),
        ({"title": "Get file"}, "unannotated"),
        ({"idempotentHint": True}, "unannotated"),
        ({"readOnlyHint": False}, "write-like"),
        ({"destructiveHint": True}, "write-like"),
        ({"readOnlyHint": True, "openWorldHint": True}, "write-like"),
    ],
)
def test_read_only_floor_hides_everything_not_positively_read_only(
    annotations: dict[str, Any] | None, reason: str
) -> None:
    decision = exposure(Policy(), annotations, ())
    assert not decision.exposed
    assert decision.reasons == (reason,)


def test_read_only_tool_is_exposed_without_approval() -> None:
    decision = exposure(Policy(), READ_ONLY, ())
    assert decision.exposed and not decision.needs_approval
    assert decision.reasons == ()


def test_flagged_tool_needs_approval_in_every_mode_regardless_of_annotations() -> None:
    for policy in (Policy(), Policy(mode="read_write"), Policy(mode="read_write", approve_writes=False)):
        decision = exposure(policy, READ_ONLY, FLAGS)
        assert decision.exposed and decision.needs_approval, policy
        assert decision.reasons == ("flagged description",)


def test_flagged_write_tool_is_still_hidden_under_read_only() -> None:
    decision = exposure(Policy(), WRITE, FLAGS)
    assert not decision.exposed
    assert decision.reasons == ("write-like", "flagged description")


def test_read_write_asks_for_every_tool_not_positively_read_only() -> None:
    policy = Policy(mode="read_write")
    assert exposure(policy, WRITE, ()).needs_approval
    assert exposure(policy, None, ()).needs_approval
    assert not exposure(policy, READ_ONLY, ()).needs_approval


def test_read_write_without_approve_writes_lets_writes_through() -> None:
    decision = exposure(Policy(mode="read_write", approve_writes=False), WRITE, ())
    assert decision.exposed and not decision.needs_approval


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"mode": "admin"}, ValueError),
        ({"pin_schemas": "sometimes"}, ValueError),
        ({"approve": "yes"}, TypeError),
        ({"max_bytes": 100}, ValueError),
        ({"max_bytes": True}, ValueError),
        ({"max_description_chars": 0}, ValueError),
        ({"approval_timeout": 0}, ValueError),
        ({"approval_timeout": float("nan")}, ValueError),
        ({"approve_writes": "no"}, TypeError),
        ({"audit": 42}, TypeError),
    ],
)
def test_policy_rejects_bad_settings(kwargs: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        Policy(**kwargs)


def test_policy_defaults_are_the_safe_ones() -> None:
    policy = Policy()
    assert (policy.mode, policy.approve, policy.approve_writes, policy.pin_schemas) == (
        "read_only",
        None,
        True,
        "strict",
    )
    assert policy.sanitize_descriptions and policy.audit_log is None and policy.max_bytes == 1_000_000


def test_policy_audit_path_becomes_an_audit_log(tmp_path: Any) -> None:
    policy = Policy(audit=tmp_path / "a.jsonl")
    assert isinstance(policy.audit_log, AuditLog)
    assert policy.audit_log.path == tmp_path / "a.jsonl"
    log = AuditLog(tmp_path / "b.jsonl")
    assert Policy(audit=log).audit_log is log


def _request() -> ApprovalRequest:
    return ApprovalRequest(
        tool="write_note",
        arguments={"text": "hi"},
        annotations=WRITE,
        reason="write-like",
        owner=Owner("agent-x"),
        server="notes",
    )


def test_approval_request_is_frozen_and_carries_what_a_gate_needs() -> None:
    request = _request()
    assert {f.name for f in dataclasses.fields(request)} >= {
        "tool",
        "arguments",
        "annotations",
        "reason",
        "owner",
        "server",
    }
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.tool = "other"  # type: ignore[misc]


async def _async_yes(request: ApprovalRequest) -> bool:
    await anyio.sleep(0)
    return True


async def _async_no(request: ApprovalRequest) -> bool:
    return False


def _boom(request: ApprovalRequest) -> bool:
    raise RuntimeError("gate is down")


async def _async_boom(request: ApprovalRequest) -> bool:
    raise ValueError("bad gate")


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("approve", "expected"),
    [
        (lambda r: True, (True, None)),
        (lambda r: False, (False, None)),
        (lambda r: 1, (False, None)),  # truthy is not approval: only True is
        (lambda r: "yes", (False, None)),
        (lambda r: None, (False, None)),
        (_async_yes, (True, None)),
        (_async_no, (False, None)),
        (_boom, (False, "RuntimeError: gate is down")),
        (_async_boom, (False, "ValueError: bad gate")),
        (None, (False, None)),
    ],
)
async def test_run_approver(approve: Any, expected: tuple[bool, str | None]) -> None:
    assert await run_approver(approve, _request()) == expected


@pytest.mark.anyio
async def test_run_approver_denies_when_no_verdict_comes_in_time() -> None:
    never = anyio.Event()

    async def stuck(request: ApprovalRequest) -> bool:
        await never.wait()
        return True

    with anyio.fail_after(5):
        approved, error = await run_approver(stuck, _request(), timeout=0.05)
    assert not approved
    assert error is not None and "approval_timeout=0.05s" in error
