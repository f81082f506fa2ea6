"""AsyncConsole / Console against the real mcp-console binaries (0.0.5 and 0.0.6)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import anyio
import pytest

from console_bridge import (
    ApprovalDenied,
    AsyncConsole,
    Busy,
    CellTimeout,
    ConnectionClosed,
    Console,
    DependenciesRefused,
    NotAllowed,
    Owner,
    OwnerMismatch,
    Policy,
    Recordings,
    run_context,
)
from console_bridge._governance._audit import sha256_json
from tests.support.processes import alive, tree_of

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_leaks")]


def make(mcp_console: tuple[str, Path], workspace: Path, recordings: Path, **kwargs: object) -> AsyncConsole:
    _, binary = mcp_console
    return AsyncConsole(workspace, command=binary, recordings_dir=recordings, **kwargs)  # type: ignore[arg-type]


async def test_python_and_sql_cells_keep_state(mcp_console, workspace, recordings):
    async with make(mcp_console, workspace, recordings) as console:
        assert console.status().version == mcp_console[0]
        first = await console.run(python="x = 20\nprint(x + 1)")
        assert first.text == "21\n" and not first.running and not first.is_error
        assert (await console.run(python="x * 2")).text.strip() == "40"
        sql = await console.run(sql="select 6 * 7 as answer")
        assert "answer" in sql.text and "42" in sql.text
        status = console.status()
        assert status.sandbox == {
            "sandboxed": True,
            "network": "restricted",
            "writable": ["tmpdir"],
            "inherit_codex": False,
        }
        assert status.dependencies == "deny" and status.profile == "read-only"
        # the connection status's fields, at the top level as the contract has them
        assert status.state == "idle" and status.server == "mcp-console" and status.owner == Owner("host")
        assert status.calls == status.connection.calls >= 3 and status.tools == ("send",)
        assert status.last_error is None and isinstance(status.stderr_tail, str)
        assert status.server_info is not None and status.server_info["name"]


async def test_status_before_and_while_starting_reads_as_a_connection_that_made_no_call(
    mcp_console, workspace, recordings
):
    console = make(mcp_console, workspace, recordings, owner=Owner("alice"))
    before = console.status()
    assert before.connection is None and before.state == "new" and before.calls == 0 and before.tools == ()
    assert before.owner == Owner("alice") and before.server == "mcp-console" and before.last_error is None
    seen: list[str] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(console.start)
        while console.status().state == "new":
            await anyio.sleep(0.001)
        seen.append(console.status().state)
    try:
        assert seen[0] in ("connecting", "idle")  # never a state outside the contract's
        assert console.status().state == "idle"
    finally:
        await console.close()
    assert console.status().state == "closed"


async def test_run_streams_chunks_and_polls_to_completion(mcp_console, workspace, recordings):
    chunks = []
    async with make(mcp_console, workspace, recordings, poll_window=0.3) as console:
        result = await console.run(
            python="import time\nfor i in range(3):\n    print(i, flush=True)\n    time.sleep(0.4)",
            on_output=chunks.append,
        )
    assert result.text == "0\n1\n2\n"
    assert len(chunks) >= 2 and chunks[0].running and not chunks[-1].running


async def test_send_window_is_clamped_and_poll_attaches(mcp_console, workspace, recordings):
    async with make(mcp_console, workspace, recordings, poll_window=0.2) as console:
        first = await console.send(python="import time; time.sleep(1.0); print('late')", timeout_ms=60_000)
        assert first.running and first.elapsed < 5
        with pytest.raises(Busy):
            await console.send(python="1")
        seen = first.text
        while True:
            chunk = await console.poll()
            seen += chunk.text
            if not chunk.running:
                break
        assert "late" in seen
        idle = await console.poll()
        assert idle.idle and idle.text == ""


async def test_cell_timeout_interrupts_and_session_lives_on(mcp_console, workspace, recordings):
    async with make(mcp_console, workspace, recordings, poll_window=0.5) as console:
        await console.run(python="kept = 'yes'")
        with pytest.raises(CellTimeout) as caught:
            await console.run(python="print('before', flush=True)\nimport time\ntime.sleep(30)", timeout=1.5)
        assert caught.value.result is not None and "before" in caught.value.result.text
        assert "KeyboardInterrupt" in caught.value.result.stderr
        assert (await console.run(python="kept")).text.strip() == "'yes'"


async def test_stdin_prompt_is_reported_and_answered(mcp_console, workspace, recordings):
    async with make(mcp_console, workspace, recordings) as console:
        await console.run(python="'start the worker first'")
        asked = await console.send(python="name = input('name? ')\nprint('hi', name)", timeout_ms=2000)
        assert asked.waiting_for_input and asked.prompt == "name? "
        answered = await console.send(stdin="bob\n")
        assert "hi bob" in answered.text


async def test_worker_crash_is_a_result_and_session_recovers(mcp_console, workspace, recordings):
    async with make(mcp_console, workspace, recordings) as console:
        crashed = await console.run(python="import os; os._exit(3)")
        assert crashed.worker_exited and crashed.is_error
        assert (await console.run(python="print('alive')")).text == "alive\n"


async def test_host_controls_are_host_only(mcp_console, workspace, recordings):
    owner = Owner("agent-1")
    async with make(mcp_console, workspace, recordings, owner=owner) as console:
        await console.run(python="state = 1")
        with run_context(owner), pytest.raises(NotAllowed):
            await console.restart()
        with run_context(Owner("intruder")), pytest.raises(OwnerMismatch):
            await console.run(python="1")
        await console.restart()
        gone = await console.run(python="state")
        assert "NameError" in gone.stderr


async def test_model_tool_is_governed(mcp_console, workspace, recordings, tmp_path):
    audit = tmp_path / "audit.jsonl"
    asked = []

    def approve(request):
        asked.append(request)
        return "forbidden" not in str(request.arguments.get("python", ""))

    policy = Policy(approve=approve, audit=audit)
    async with make(mcp_console, workspace, recordings, poll_window=0.5, policy=policy) as c:
        await c.run(python="'warm up the worker'")
        [send] = c.tools()
        props = send.input_schema["properties"]
        assert "requirements" not in props
        assert props["control"]["anyOf"] == [{"type": "string", "enum": ["interrupt"]}, {"type": "null"}]
        assert props["timeout_ms"]["anyOf"][0]["maximum"] == 500
        assert "poll with an empty send" in send.description and send.requires_approval
        with pytest.raises(NotAllowed):
            await send({"control": "restart"})
        with pytest.raises(DependenciesRefused):
            await send({"requirements": {"action": "add", "python": ["requests"]}})
        result = await send({"python": "print(6 * 7)", "timeout_ms": 10_000_000})
        assert result.text.strip() == "42"
        # a strict client sends every field, the unused ones null: a plain cell, no interrupt, no restart
        nulls = {"sql": None, "control": None, "stdin": None, "timeout_ms": None}
        assert (await send({"python": "print('strict')", **nulls})).text.strip() == "strict"
        with pytest.raises(NotAllowed):  # ApprovalDenied is a NotAllowed
            await send({"python": "print('forbidden')"})
    assert [r.arguments["timeout_ms"] for r in asked] == [500, 500, 500]
    events = [json.loads(line)["event"] for line in audit.read_text().splitlines()]
    assert {"approval", "refusal", "call_start", "call_end"} <= set(events)


async def test_an_approver_cannot_change_the_code_it_approved(mcp_console, workspace, recordings):
    """Issue 33: the console's model send handed the approver the live arguments, and an approver that
    edited ``request.arguments`` changed the code that ran."""

    def approve(request):
        request.arguments["python"] = "print('not what was approved')"
        return True

    async with make(mcp_console, workspace, recordings, policy=Policy(approve=approve)) as c:
        [send] = c.tools()
        result = await send({"python": "print('approved code')"})
        assert result.text.strip() == "approved code", result.text


async def test_the_model_send_is_approved_and_audited_by_the_governance_gate(
    mcp_console, workspace, recordings, tmp_path
):
    """Issue 33: the model send approved and audited on its own, beside the Gate. Now it goes through the
    Gate: an approver that rewrites the request (the code, a host-only control, a nested field) changes
    nothing that runs, what ran hashes to what was approved, and its records have a connection's shape."""
    audit = tmp_path / "audit.jsonl"
    owner = Owner("agent-1", "conv-7")
    shown: list[dict[str, object]] = []

    def approve(request):
        shown.append(copy.deepcopy(dict(request.arguments)))
        request.arguments["python"] = "print('not what was approved')"
        request.arguments["control"] = "restart"  # a host-only control would wipe the session's state
        request.arguments["requirements"] = {"action": "add", "python": ["requests"]}
        request.arguments["requirements"]["python"].append("numpy")  # and a nested edit
        return True

    policy = Policy(approve=approve, audit=audit)
    async with make(mcp_console, workspace, recordings, owner=owner, policy=policy) as c:
        await c.run(python="kept = 'state'")
        [send] = c.tools()
        with run_context(owner):
            result = await send({"python": "print('approved code')"})
            assert result.text.strip() == "approved code", result.text
            with pytest.raises(NotAllowed, match="reserved for the host"):
                await send({"control": "restart"})
            assert (await send({"python": "print(kept)"})).text.strip() == "state"  # no restart happened
    assert shown[0] == {"python": "print('approved code')", "timeout_ms": int(c.poll_window * 1000)}
    lines = [json.loads(line) for line in audit.read_text().splitlines()]
    approvals = [r for r in lines if r["event"] == "approval"]
    assert len(approvals) == 2 and all(r["approved"] is True for r in approvals)
    first = approvals[0]
    # the shape of an AsyncMcpConnection's approval record (see _governance/_audit.py)
    assert (first["owner"], first["agent_id"], first["session_id"]) == ("agent-1/conv-7", "agent-1", "conv-7")
    assert first["server"] == "mcp-console" and first["tool"] == "send" and first["reason"] == "runs code"
    assert first["gate"] is True and first["connection"] and first["call"]
    assert first["args_sha256"] == sha256_json(shown[0])
    started = [r for r in lines if r["event"] == "call_start" and r["tool"] == "send"]
    assert first["args_sha256"] in {r["args_sha256"] for r in started}, "what ran is not what was approved"
    [refusal] = [r for r in lines if r["event"] == "refusal"]
    assert refusal["target"] == "tool 'send'" and refusal["tool"] == "send" and refusal["connection"]
    assert (refusal["agent_id"], refusal["reason"]) == ("agent-1", "restart is host-only")


async def test_a_gate_that_never_answers_denies_the_model_send_after_approval_timeout(
    mcp_console, workspace, recordings
):
    async def stuck(request):
        await anyio.sleep_forever()

    policy = Policy(approve=stuck, approval_timeout=0.2)
    async with make(mcp_console, workspace, recordings, policy=policy) as c:
        [send] = c.tools()
        with anyio.fail_after(20), pytest.raises(ApprovalDenied, match="approval_timeout"):
            await send({"python": "print('never runs')"})
        assert (await c.run(python="print('host cells need no approval')")).text == "host cells need no approval\n"


async def test_sandbox_holds(mcp_console, workspace, recordings, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    async with make(mcp_console, workspace, recordings) as console:
        write = await console.run(python=f"open({str(outside / 'x')!r}, 'w').write('x')")
        # outside the view the folder has no name at all; inside, the sandbox makes it read-only
        words = ("Read-only file system", "Permission", "No such file")
        assert any(word in write.combined for word in words), write.combined
        ws_write = await console.run(python="open('x.txt', 'w').write('x')")
        assert "Read-only file system" in ws_write.combined
        tcp = await console.run(python="import socket\ns = socket.socket()\ns.connect(('127.0.0.1', 9))")
        assert "PermissionError" in tcp.combined or "Operation not permitted" in tcp.combined
        tmp_ok = await console.run(python="import tempfile\nopen(tempfile.gettempdir() + '/t', 'w').write('x')\n'ok'")
        assert "'ok'" in tmp_ok.text
    assert not (outside / "x").exists() and not (workspace / "x.txt").exists()


async def test_workspace_profile_and_writable_root(mcp_console, workspace, recordings, tmp_path):
    root = tmp_path / "out"
    root.mkdir()
    (workspace / ".git").mkdir()
    async with make(mcp_console, workspace, recordings, profile="workspace", writable_roots=[root]) as console:
        sandbox = console.status().sandbox
        assert sandbox is not None and str(root.resolve()) in sandbox["writable"]
        ok = await console.run(python="open('made.txt', 'w').write('x')\nprint('wrote')")
        assert ok.text == "wrote\n"
        git = await console.run(python="open('.git/config', 'w').write('x')")
        assert "Read-only file system" in git.combined or "Permission" in git.combined
        agents = await console.run(python="import os\nos.makedirs('.agents/console', exist_ok=True)")
        assert "Error" in agents.combined
        rooted = await console.run(python=f"open({str(root / 'r.txt')!r}, 'w').write('x')\nprint('ok')")
        assert rooted.text == "ok\n"
    assert (workspace / "made.txt").exists() and (root / "r.txt").exists()
    assert not (workspace / ".git" / "config").exists()


async def test_close_finalizes_recording_and_leaves_nothing(mcp_console, workspace, recordings):
    console = make(mcp_console, workspace, recordings)
    await console.start()
    await console.run(python="print('recorded')")
    pids = tree_of(console.pid or 0)
    tmpdir = console.status().tmpdir
    recording = console.recording
    assert recording is not None and recording.live
    await console.close()
    assert alive(pids) == [] and tmpdir is not None and not tmpdir.exists()
    assert recording.finalized and not recording.live
    if mcp_console[0] == "0.0.6":
        assert recording.transcript is not None
        assert recording.transcript.read_text().rstrip().endswith("## Recording finished")
    assert any(event for event in recording.events())
    await console.close()  # idempotent
    with pytest.raises(ConnectionClosed):
        await console.run(python="1")
    listed = Recordings(recordings).list()
    assert [r.run_id for r in listed] == [recording.run_id]


async def test_cancel_kills_at_once_and_fails_the_active_call(mcp_console, workspace, recordings):
    console = make(mcp_console, workspace, recordings, poll_window=20)
    await console.start()
    await console.run(python="1")
    pids = tree_of(console.pid or 0)
    failure: list[BaseException] = []

    async def long_cell() -> None:
        try:
            await console.run(python="import time; time.sleep(60)")
        except ConnectionClosed as exc:
            failure.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(long_cell)
        await anyio.sleep(0.5)
        with anyio.fail_after(5):
            await console.cancel()
    assert failure and isinstance(failure[0], ConnectionClosed)
    with anyio.fail_after(5):
        while alive(pids):
            await anyio.sleep(0.05)


def test_blocking_console_inside_a_running_loop(mcp_console, workspace, recordings):
    async def body() -> str:
        with Console(workspace, command=mcp_console[1], recordings_dir=recordings) as console:
            return console.run(python="print('from a loop')").text

    assert anyio.run(body) == "from a loop\n"


def test_plot_comes_back_as_png(mcp_console, workspace, recordings):
    with Console(workspace, command=mcp_console[1], recordings_dir=recordings) as console:
        code = "import matplotlib\nimport matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()"
        result = console.run(python=code)
        assert result.images and result.images[0].mime_type == "image/png"
        assert result.images[0].data.startswith(b"\x89PNG")
        bundle = result._repr_mimebundle_()
        assert "image/png" in bundle and "text/plain" in bundle


async def test_opted_in_project_config_is_still_verified(mcp_console, workspace, recordings):
    from console_bridge import LaunchRefused, SandboxMismatch

    config = workspace / ".agents" / "console" / "config.yaml"
    config.parent.mkdir(parents=True)
    extra = workspace.parent / "extra"
    extra.mkdir()
    # The profile's own -c settings outrank the project file (network stays restricted);
    # a grant the profile does not set goes through to the server, and verification catches it.
    config.write_text(f"sandbox:\n  network: enabled\n  filesystem:\n    read_write: [{str(extra)!r}]\n")
    with pytest.raises(LaunchRefused, match="project_config=True"):
        make(mcp_console, workspace, recordings)
    with pytest.raises(SandboxMismatch, match="extra"):
        async with make(mcp_console, workspace, recordings, project_config=True):
            pass
    config.write_text('tool:\n  description: "Evaluated code cannot directly access the network."\n')
    with pytest.raises(LaunchRefused, match=r"tool\.description"):
        async with make(mcp_console, workspace, recordings, project_config=True):
            pass


async def test_timeout_counts_the_cell_not_worker_startup(mcp_console, workspace, recordings):
    async with make(mcp_console, workspace, recordings, poll_window=0.5) as console:
        # The worker takes far longer than 300 ms to start; the cell itself is quick.
        first = await console.run(python="print('not cut short')", timeout=0.3)
        assert first.text == "not cut short\n" and first.error is None


async def test_worker_startup_has_its_own_bound(mcp_console, workspace, recordings):
    if mcp_console[0] == "0.0.5":
        pytest.skip(
            "mcp-console 0.0.5 boots the replacement worker inside restart(), and the start-time confinement "
            "probe already booted the first one: no cell can meet an unbooted worker on 0.0.5"
        )
    async with make(mcp_console, workspace, recordings, poll_window=0.5, startup_timeout=30) as console:
        met: list[bool] = []
        for _ in range(5):
            await console.restart()  # the start-time probe booted a worker: start from a fresh, unbooted one
            # a fresh worker starts its first cell in about 60 ms here (its bootstrap reads linked bytecode);
            # mcp-console may boot it before the cell comes (seen under load): then the cell simply runs
            console.startup_timeout = 0.005
            try:
                ran = await console.run(python="print('cut short')", timeout=60)
            except CellTimeout as caught:
                assert "did not start the cell within startup_timeout" in str(caught)
                assert caught.details["cell_started"] is False
                met.append(True)
                break
            else:
                assert ran.error is None and ran.text == "cut short\n", ran
            finally:
                console.startup_timeout = 30
        assert met, "each of 5 fresh workers was booted before its first cell: the bound was never met"
        after = await console.run(python="print('after')", timeout=60)
        assert after.text.endswith("after\n")


async def test_a_cell_ending_as_the_server_answers_running_is_collected(mcp_console, workspace, recordings):
    """mcp-console can answer "running" as a cell ends; the recording then logs the end first and the
    server refuses the next cell as Busy until an empty send collects it (measured: 2 in 200 cells that
    end at the send's window, and the guest's `disk-recording-total`). The bridge makes that send itself.
    A cell printing the same two lines last takes the same path: its result is the cell's, and the
    session goes on."""
    fake = "print('x = 1')\nprint('\\n[elapsed: 0.3s since admission]\\n[running; poll with an empty send]', end='')"
    async with make(mcp_console, workspace, recordings) as c:
        await c.run(python="kept = 41")
        result = await c.run(python=fake, timeout=30)
        assert not result.running and result.error is None and result.text == "x = 1\n", result
        sent = await c.send(python=fake)
        assert not sent.running and sent.text == "x = 1\n", sent
        after = await c.run(python="kept + 1")
        assert after.text.strip() == "42" and after.error is None, after
