"""Evidence out of reach (issue 20, item 4): the audit log, the registry and the token file are never
where a session's code can write or read them; a token file others can read is refused with the fix.

The refusals happen before anything starts (no console): each test runs the real command and checks
its exit status and message. One test runs a real session to show the audit log is denied to cells
wherever it lives, and that the session works.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from console_bridge import AsyncConsole, LaunchRefused, Policy
from tests.support.binaries import binary_for
from tests.support.sessions import recordings, state_dir, workspace

__all__ = ["recordings", "state_dir", "workspace"]  # fixtures

from .conftest import serve_args, serve_env


def _serve(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        serve_args(tmp_path, *args),
        input="",
        capture_output=True,
        text=True,
        env=env or serve_env(tmp_path),
        cwd=tmp_path,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("profile", ["workspace", "read-only"])
def test_an_audit_log_a_cell_could_reach_is_refused(tmp_path: Path, profile: str) -> None:
    done = _serve(tmp_path, "--profile", profile, "--audit", str(tmp_path / "ws" / "audit.jsonl"))
    assert done.returncode == 3, done.stderr
    assert "the audit log" in done.stderr and "inside the workspace or a writable root" in done.stderr
    assert list((tmp_path / "state").glob("sessions/*")) == []  # nothing started


def test_an_audit_log_in_a_writable_root_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(LaunchRefused, match="audit log"):
        AsyncConsole(tmp_path, writable_roots=[out], policy=Policy(audit=out / "logs" / "audit.jsonl"))


def test_a_registry_a_cell_could_rewrite_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    monkeypatch.setenv("CONSOLE_BRIDGE_STATE_DIR", str(ws / "state"))
    with pytest.raises(LaunchRefused, match="state folder"):
        AsyncConsole(ws, profile="workspace")
    AsyncConsole(ws, profile="read-only")  # denied to every cell's reads: allowed where code cannot write


def test_token_files_out_of_reach_and_private(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    inside = tmp_path / "ws" / "token"
    inside.write_text("a-token-of-at-least-sixteen-chars\n")
    inside.chmod(0o600)
    done = _serve(tmp_path, "--transport", "http", "--port", "0", "--token-file", str(inside))
    assert done.returncode == 3 and "bearer token file" in done.stderr, done.stderr
    shared = tmp_path / "token"
    shared.write_text("a-token-of-at-least-sixteen-chars\n")
    shared.chmod(0o644)
    done = _serve(tmp_path, "--transport", "http", "--port", "0", "--token-file", str(shared))
    assert done.returncode == 2, done.stderr
    assert f"(mode 0644); run `chmod 600 {shared}`" in done.stderr
    assert "serving MCP" not in done.stderr


@pytest.mark.console
@pytest.mark.anyio
async def test_the_audit_log_is_denied_to_cells_wherever_it_lives(
    tmp_path: Path, workspace: Path, recordings: Path, state_dir: Path
) -> None:
    audit = tmp_path / "logs" / "audit.jsonl"
    policy = Policy(audit=audit)
    async with AsyncConsole(workspace, command=binary_for("0.0.6"), recordings_dir=recordings, policy=policy) as c:
        # outside the view it has no name at all (inside a read root or the workspace it would be denied)
        assert str(audit) in c.status().deny_read or not any(
            str(audit).startswith(entry["path"] + "/") for entry in c.status().view
        )
        tried = await c.run(python=f"print(open({str(audit)!r}).read())")
        assert tried.error is not None and tried.error.name in ("PermissionError", "FileNotFoundError"), tried.text
        works = await c.run(python="print(6 * 7)")
        assert works.text.strip() == "42"
    assert audit.stat().st_size > 0  # the host wrote it
