"""The audit log: JSON Lines, whole lines under concurrency, rotation, and the records connections write.

Also here, tested: how to answer "what did agent X run on server Y yesterday, and what
came back?" from the log alone (``what_ran`` below, and the jq one-liner beside it).
"""

from __future__ import annotations

import datetime as dt
import inspect
import json
import multiprocessing
import shutil
import subprocess
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from console_bridge import AuditLog, BridgeError, Busy, ConnectionClosed, McpConnection, Owner, Policy
from console_bridge._governance._audit import sha256_json

from .support import OTHER, OWNER, SHUTDOWN_GRACE, STARTUP_TIMEOUT, TIMEOUT, config, connected, only, records

# ---------------------------------------------------------------------------------------------
# What did agent X run on server Y yesterday, and what came back?
#
# jq (the log must be written with AuditLog(path, include_content=True) to show arguments and
# results; without it, args_sha256/result_sha256 still identify them):
#
#   jq -c --arg agent agent-x --arg server files --arg day "$(date -u -d yesterday +%F)" \
#     'select(.agent_id == $agent and .server == $server and (.ts | startswith($day))
#             and (.event == "call_start" or .event == "call_end"))
#      | {ts, call, event, tool, arguments, outcome, result: [.result.content[]? | .text // .type]}' audit.jsonl
#
# Python:


def what_ran(agent_id: str, server: str, day: dt.date, *paths: str | Path) -> list[dict[str, Any]]:
    """Every tool call ``agent_id`` started on ``server`` during ``day`` (UTC), oldest first.

    Pass the log and its rotated files oldest first (``AuditLog(...).files()`` lists them).
    """
    runs: dict[str, dict[str, Any]] = {}
    for path in paths:
        for line in Path(path).read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            if record.get("agent_id") != agent_id or record.get("server") != server:
                continue
            if record["event"] == "call_start" and record["ts"].startswith(day.isoformat()):
                runs[record["call"]] = {
                    "ts": record["ts"],
                    "tool": record["tool"],
                    "arguments": record.get("arguments"),  # only with include_content=True
                    "args_sha256": record["args_sha256"],
                    "outcome": None,  # still running, or the connection died mid-call
                }
            elif record["event"] == "call_end" and record.get("call") in runs:
                result = record.get("result") or {}
                runs[record["call"]].update(
                    outcome=record["outcome"],  # ok, tool_error, output_schema_violation, SchemaDrift, ...
                    text="\n".join(b["text"] for b in result.get("content", []) if b.get("type") == "text"),
                    structured=result.get("structured"),
                    result_sha256=record.get("result_sha256"),
                    truncated=record.get("truncated", False),
                    reason=record.get("reason"),
                )
    return list(runs.values())


# Usage: what_ran("agent-x", "files", dt.datetime.now(dt.UTC).date() - dt.timedelta(days=1), "audit.jsonl")
# ---------------------------------------------------------------------------------------------

JQ_FILTER = (
    "select(.agent_id == $agent and .server == $server and (.ts | startswith($day)) "
    'and (.event == "call_start" or .event == "call_end")) '
    "| {ts, call, event, tool, arguments, outcome, result: [.result.content[]? | .text // .type]}"
)


def test_the_docs_carry_the_tested_answers() -> None:
    root = Path(__file__).resolve().parents[2]
    docs = (root / "docs" / "governance.md").read_text(encoding="utf-8")
    assert inspect.getsource(what_ran) in docs
    assert docs.count(JQ_FILTER) == 1  # the reference
    assert (root / "README.md").read_text(encoding="utf-8").count(JQ_FILTER) == 1  # the short version


def shift_days(path: Path, days: int) -> None:
    """Rewrite every record's timestamp ``days`` earlier (the log as it looks the next day)."""
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        record["ts"] = (dt.datetime.fromisoformat(record["ts"]) - dt.timedelta(days=days)).isoformat()
        lines.append(json.dumps(record))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.mark.anyio
async def test_what_did_agent_x_run_on_server_y_yesterday(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit.jsonl", include_content=True)
    policy = Policy(audit=log, pin_schemas="off")
    async with connected(
        "wellbehaved.py", tools=["echo", "add", "fail", "lookup"], policy=policy, name="files"
    ) as conn:
        await conn.call_tool("echo", {"text": "hello"})
        await conn.call_tool("add", {"a": 2, "b": 40})
        with pytest.raises(BridgeError):
            await conn.call_tool("fail", {})
        with pytest.raises(BridgeError):
            await conn.call_tool("lookup", {"q": "refused by the floor, never run"})
    async with connected("poisoned.py", tools=["clean"], policy=policy, name="files", owner=OTHER) as conn:
        await conn.call_tool("clean", {})  # another agent, same server
    async with connected("poisoned.py", tools=["clean"], policy=policy, name="clock") as conn:
        await conn.call_tool("clean", {})  # same agent, another server
    shift_days(log.path, 1)  # the log as it reads tomorrow
    log.write("call_start", agent_id="agent-x", server="files", tool="echo", call="today-1", args_sha256="0" * 64)

    yesterday = dt.datetime.now(dt.UTC).date() - dt.timedelta(days=1)
    runs = what_ran("agent-x", "files", yesterday, *log.files())
    assert [(r["tool"], r["arguments"], r["outcome"], r["text"]) for r in runs] == [
        ("echo", {"text": "hello"}, "ok", "hello"),
        ("add", {"a": 2, "b": 40}, "ok", "42"),
        ("fail", {}, "tool_error", "deliberate failure"),
    ]
    assert runs[1]["structured"] == {"sum": 42}
    assert all(len(r["result_sha256"]) == 64 for r in runs)
    assert what_ran("agent-x", "files", yesterday - dt.timedelta(days=1), log.path) == []

    if shutil.which("jq") is None:
        pytest.skip("jq is not installed; the Python answer above was checked")
    out = subprocess.run(
        ["jq", "-c", "--arg", "agent", "agent-x", "--arg", "server", "files", "--arg", "day", yesterday.isoformat(),
         JQ_FILTER, str(log.path)],
        capture_output=True, text=True, check=True, timeout=30,
    ).stdout.splitlines()  # fmt: skip
    rows = [json.loads(line) for line in out]
    assert [(r["event"], r["tool"]) for r in rows] == [
        (event, tool) for tool in ("echo", "add", "fail") for event in ("call_start", "call_end")
    ]
    assert rows[1]["result"] == ["hello"] and rows[0]["arguments"] == {"text": "hello"}


# ------------------------------------------------------------------------- the writer itself


def test_records_are_json_lines_with_timestamp_and_event(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "a.jsonl")
    written = log.write("call_start", owner="o", server="s", tool="t", skipped=None, content_arguments={"x": 1})
    line = (tmp_path / "a.jsonl").read_text(encoding="utf-8")
    assert line.endswith("\n") and line.count("\n") == 1
    record = json.loads(line)
    assert record == written
    assert list(record)[:2] == ["ts", "event"]
    assert dt.datetime.fromisoformat(record["ts"]).utcoffset() == dt.timedelta(0)
    assert "skipped" not in record and "arguments" not in record, "no raw content without include_content"
    full = AuditLog(tmp_path / "b.jsonl", include_content=True)
    assert full.write("call_start", content_arguments={"x": 1})["arguments"] == {"x": 1}
    assert list(log.records()) == [record]


def test_an_unwritable_path_is_a_bridge_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(BridgeError, match="cannot open audit log"):
        AuditLog(blocker / "audit.jsonl")
    log = AuditLog(tmp_path / "ok.jsonl")
    log.path.unlink()
    log.path.mkdir()  # now a directory: writes fail, visibly
    with pytest.raises(BridgeError, match="could not write the audit log"):
        log.write("lifecycle")


@pytest.mark.parametrize(("kwargs", "error"), [({"max_file_bytes": 0}, ValueError), ({"backups": -1}, ValueError)])
def test_bad_rotation_settings_are_refused(tmp_path: Path, kwargs: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        AuditLog(tmp_path / "a.jsonl", **kwargs)


def test_rotation_keeps_whole_records_and_the_newest_backups(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "a.jsonl", max_file_bytes=2000, backups=2)
    for index in range(60):
        log.write("call_end", index=index, pad="x" * 100)
    assert [path.name for path in log.files()] == ["a.jsonl.2", "a.jsonl.1", "a.jsonl"]
    assert not (tmp_path / "a.jsonl.3").exists()
    assert all(path.stat().st_size <= 2000 for path in log.files())
    indexes = [record["index"] for record in log.records(rotated=True)]
    assert indexes == list(range(indexes[0], 60)), "the newest records, in order, none torn"
    assert [record["index"] for record in log.records()] == indexes[-len(list(log.records())) :]


def test_rotation_without_backups_starts_over(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "a.jsonl", max_file_bytes=500, backups=0)
    for index in range(20):
        log.write("e", index=index, pad="y" * 100)
    assert log.files() == [log.path] and not (tmp_path / "a.jsonl.1").exists()
    assert [r["index"] for r in log.records()][-1] == 19


def test_one_record_larger_than_the_limit_is_still_written_whole(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "a.jsonl", max_file_bytes=100, backups=1)
    log.write("small")
    log.write("big", pad="z" * 1000)
    assert [r["event"] for r in log.records()] == ["big"]
    assert [r["event"] for r in log.records(rotated=True)] == ["small", "big"]


def _write_many(path: str, writer: int) -> None:
    log = AuditLog(path, max_file_bytes=40_000, backups=1000)
    for i in range(200):
        log.write("e", writer=writer, i=i, pad="p" * (50 + (i * 37) % 3000))


def test_processes_writing_and_rotating_one_log_never_tear_a_line(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    context = multiprocessing.get_context("fork")  # cheap: the writers share this interpreter's imports
    writers = [context.Process(target=_write_many, args=(str(path), n)) for n in range(3)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(timeout=60)
        assert writer.exitcode == 0
    log = AuditLog(path, backups=1000)
    seen = Counter((r["writer"], r["i"]) for r in log.records(rotated=True))
    assert len(seen) == 600 and set(seen.values()) == {1}
    assert all(p.stat().st_size <= 40_000 for p in log.files())


def test_threads_on_one_file_never_interleave_within_a_line(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    logs = [AuditLog(path), AuditLog(path, include_content=True)]

    def hammer(n: int) -> None:
        for i in range(150):
            logs[n % 2].write("e", thread=n, i=i, content_blob="b" * 20_000, pad="q" * (i * 97 % 9000))

    threads = [threading.Thread(target=hammer, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 900
    records_ = [json.loads(line) for line in lines]
    assert Counter(r["thread"] for r in records_) == dict.fromkeys(range(6), 150)


# ----------------------------------------------------------------- what connections write


def test_two_connections_and_threads_hammering_one_log(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    direct = AuditLog(path)
    policies = [Policy(audit=path, pin_schemas="off"), Policy(audit=AuditLog(path, include_content=True))]
    owners = [OWNER, Owner("agent-z")]
    conns = [
        McpConnection(
            config("poisoned.py", name=f"s{n}"),
            f"s{n}",
            owner=owners[n],
            tools=["clean"],
            policy=policies[n],
            timeout=TIMEOUT,
            startup_timeout=STARTUP_TIMEOUT,
            shutdown_grace=SHUTDOWN_GRACE,
        )
        for n in range(2)
    ]
    results: Counter[str] = Counter()
    lock = threading.Lock()

    def drive(conn: McpConnection) -> None:
        for i in range(60):
            try:
                conn.call_tool("clean", {"i": i, "blob": "a" * 10_000})
                outcome = "ok"
            except Busy:
                outcome = "busy"
            with lock:
                results[f"{conn.server} {outcome}"] += 1

    def scribble() -> None:
        for i in range(200):
            direct.write("note", i=i, pad="n" * 6000)

    for conn in conns:
        conn.connect()
    try:
        threads = [threading.Thread(target=drive, args=(c,)) for c in conns for _ in range(2)]
        threads += [threading.Thread(target=scribble) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=90)
        assert not any(thread.is_alive() for thread in threads)
    finally:
        for conn in conns:
            conn.close()

    lines = path.read_text(encoding="utf-8").splitlines()
    all_records = [json.loads(line) for line in lines]  # every line is one whole JSON record
    assert sum(1 for r in all_records if r["event"] == "note") == 400
    for n, conn in enumerate(conns):
        mine = [r for r in all_records if r.get("server") == conn.server]
        assert {r["agent_id"] for r in mine} == {owners[n].agent_id}
        starts = [r for r in mine if r["event"] == "call_start"]
        ends = [r for r in mine if r["event"] == "call_end"]
        assert len(starts) == len(ends) == results[f"{conn.server} ok"] > 0
        assert [r["call"] for r in starts] == [r["call"] for r in ends], "one call at a time, in order"
        assert sum(1 for r in mine if r["event"] == "refusal") == results[f"{conn.server} busy"]
        assert [r["action"] for r in mine if r["event"] == "lifecycle"] == ["connect_start", "connect", "close"]
        assert all({"ts", "owner", "server", "connection"} <= set(r) for r in mine)
        assert ("arguments" in starts[0]) is (n == 1), "raw arguments only with include_content"


@pytest.mark.anyio
async def test_a_call_leaves_start_and_end_records_with_hashes_sizes_and_duration(tmp_path: Path) -> None:
    audit = tmp_path / "audit.jsonl"
    async with connected("poisoned.py", tools=["clean"], policy=Policy(audit=audit)) as conn:
        await conn.call_tool("clean", {"b": 1, "a": "é"})
    start, end = only(records(audit, "call_start")), only(records(audit, "call_end"))
    assert start["call"] == end["call"] and start["connection"] == end["connection"]
    assert start["args_sha256"] == sha256_json({"a": "é", "b": 1})
    assert start["args_bytes"] == len(
        json.dumps({"b": 1, "a": "é"}, separators=(",", ":"), ensure_ascii=False).encode()
    )
    content = [{"type": "text", "text": "ok clean"}]
    assert end["result_sha256"] == sha256_json({"content": content, "structured": None})
    assert end["result_bytes"] > 0 and end["duration_ms"] >= 0 and end["outcome"] == "ok"
    assert "arguments" not in start and "result" not in end
    assert (start["owner"], start["agent_id"], start["session_id"], start["server"]) == (
        "agent-x/sess-1",
        "agent-x",
        "sess-1",
        "srv",
    )


@pytest.mark.anyio
async def test_lifecycle_connect_close_cancel_and_crash_are_recorded(tmp_path: Path) -> None:
    audit = tmp_path / "audit.jsonl"
    policy = Policy(audit=audit, mode="read_write", approve_writes=False)
    async with connected("poisoned.py", tools=["clean"], policy=policy) as conn:
        pid = conn.pid
    async with connected("poisoned.py", tools=["clean"], policy=policy) as cancelled:
        await cancelled.cancel()
    async with connected("exit_midcall.py", tools=["t"], policy=policy) as crashing:
        with pytest.raises(ConnectionClosed, match="crashed"):
            await crashing.call_tool("t", {})
    by_connection: dict[str, list[str]] = {}
    for record in records(audit, "lifecycle"):
        by_connection.setdefault(record["connection"], []).append(record["action"])
    assert list(by_connection.values()) == [
        ["connect_start", "connect", "close"],
        ["connect_start", "connect", "cancel"],
        ["connect_start", "connect", "crash", "close"],  # crash: what happened; close: it is over
    ]
    connect = records(audit, "lifecycle", action="connect")[0]
    assert connect["pid"] == pid and connect["server_info"]["name"] == "poisoned"
    crash = only(records(audit, "lifecycle", action="crash"))
    assert "status 3" in crash["reason"]
    assert only(records(audit, "call_end"))["outcome"] == "ConnectionClosed"
