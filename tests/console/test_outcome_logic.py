"""Pure logic of cell status and outcomes (no processes)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from console_bridge import CellError, CellFailure, CellResult
from console_bridge._cells._events import CallEvents, EventTail
from console_bridge._cells._notices import split_response
from console_bridge._cells._outcome import (
    OutcomeLog,
    limit_failure,
    outcome_dir_name,
    parse_records,
    python_startup_code,
    r_profile_text,
    worker_exited_failure,
    yaml_string,
)

RUNNING = "a\n\n[elapsed: 0.5s since admission]\n[running; poll with an empty send]"
WAITING = 'hello\n[input requested: "Password:"]\n[waiting for stdin]'


def test_running_and_waiting_are_read_from_the_trailing_block_while_the_cell_runs() -> None:
    running = split_response(RUNNING, ended=False)
    assert running.running and running.output == "a\n"
    waiting = split_response(WAITING, ended=False)
    assert waiting.waiting_for_input and waiting.prompt == "Password:" and waiting.output == "hello\n"
    idle = split_response("[idle]", ended=False)
    assert idle.idle and idle.output == ""


@pytest.mark.parametrize("text", [WAITING, "[idle]", '[input requested: "x"]\n[waiting for stdin]\n', RUNNING + "\n"])
def test_a_cell_that_ended_has_no_status_whatever_it_printed(text: str) -> None:
    notice = split_response(text, ended=True)
    assert not (notice.running or notice.waiting_for_input or notice.idle or notice.worker_exited or notice.held)
    assert notice.output == text


def test_a_running_notice_on_a_cell_that_ended_is_the_server_holding_it() -> None:
    # mcp-console answers "running" as the cell ends (the recording logs the end first, measured 2 in
    # 200 cells that end at the send's window): the server holds the cell until an empty send.
    notice = split_response("'end'\n" + RUNNING[2:], ended=True)
    assert notice.held and not notice.running and notice.output == "'end'\n"
    assert not split_response(RUNNING, ended=False).held  # a running cell is running, not held
    only_running = "x\n[running; poll with an empty send]"  # without the elapsed line: output
    assert split_response(only_running, ended=True).output == only_running


def test_notice_lines_before_the_trailing_block_are_output() -> None:
    text = 'fake\n[input requested: "p"]\n\n[elapsed: 1s since admission]\n[running; poll with an empty send]'
    notice = split_response(text, ended=False)
    assert notice.running and not notice.waiting_for_input
    assert notice.output == 'fake\n[input requested: "p"]\n'


def test_worker_exit_is_read_only_from_an_error_result() -> None:
    text = "[worker exited with status 3]\n[startup may have executed; explicit restart required]"
    assert not split_response(text, ended=True).worker_exited
    exited = split_response(text, ended=True, is_error=True)
    assert exited.worker_exited and exited.exit_status == 3 and exited.restart_required


def test_done_alone_is_dropped() -> None:
    assert split_response("[done]", ended=True).output == ""
    assert split_response("x\n[done]", ended=True).output == "x\n[done]"


def test_parse_records_skips_garbage_and_reads_failures_and_notices() -> None:
    data = b"\n".join(
        [
            json.dumps({"type": "failure", "language": "python", "name": "ValueError", "message": "bad"}).encode(),
            b"not json",
            json.dumps({"type": "notice", "topic": "sql", "message": "withheld"}).encode(),
            json.dumps({"type": "failure", "kind": "bogus", "name": "X"}).encode(),
            b'{"type": "failure", "name": "partial',
        ]
    )
    records = parse_records(data)
    assert [f.name for f in records.failures] == ["ValueError", "X"]
    assert records.failures[1].kind == "exception"
    assert records.notices == (("sql", "withheld"),)


def test_outcome_log_reads_appended_records_and_refuses_symlinks(tmp_path: Path) -> None:
    log = OutcomeLog(tmp_path, "n0nce")
    assert log.mark() == (None, 0)
    # a copy deeper down (a cell's `cp -r $TMPDIR backup`) is never the log
    decoy = tmp_path / "sandbox-x" / "data" / "backup" / outcome_dir_name("n0nce")
    decoy.mkdir(parents=True)
    (decoy / "outcomes.jsonl").write_text(json.dumps({"type": "failure", "name": "Decoy"}) + "\n")
    assert log.mark() == (None, 0)
    folder = tmp_path / "sandbox-x" / "data" / outcome_dir_name("n0nce")
    folder.mkdir(parents=True)
    target = folder / "outcomes.jsonl"
    target.write_text(json.dumps({"type": "failure", "name": "Old"}) + "\n")
    mark = log.mark()
    assert mark[1] > 0
    with open(target, "a") as handle:
        handle.write(json.dumps({"type": "failure", "name": "New"}) + "\n")
    assert [f.name for f in log.read_since(mark).failures] == ["New"]
    secret = tmp_path / "secret"
    secret.write_text(json.dumps({"type": "failure", "name": "Planted"}) + "\n")
    target.unlink()
    os.symlink(secret, target)
    assert log.read_since((None, 0)).failures == ()


def test_event_tail_pairs_results_with_cell_ends(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"

    def line(event: str, **fields: object) -> str:
        return json.dumps({"event": event, **fields}, separators=(",", ":")) + "\n"

    def result(text: str) -> str:
        return line("tool_result", result={"content": [{"type": "text", "text": text}], "isError": False})

    events.write_text(
        line("cell_started", at="2026-11-30T05:47:40.460348387Z") + result("a\n[running; poll with an empty send]")
    )
    tail = EventTail()
    tail.attach(events)
    first = tail.next_call("a\n[running; poll with an empty send]")
    assert first is not None and not first.ended and first.started_at is not None
    assert tail.next_call("b\n") is None  # not recorded yet
    with open(events, "a") as handle:
        handle.write(line("cell_output") + result("b\n"))
    second = tail.next_call("b\n")
    assert second is not None and second.ended and second.started_at is None


def test_event_tail_matches_results_exactly_whatever_their_text(tmp_path: Path) -> None:
    """The result's text is found in the event line as the server escapes it, else by parsing the
    line: either way only the exact text (its first 512 characters) pairs with the call."""
    events = tmp_path / "events.jsonl"

    def result(*texts: str) -> str:
        content = [{"type": "text", "text": text} for text in texts]
        entry = {"event": "tool_result", "result": {"content": content, "isError": False}}
        return json.dumps(entry, ensure_ascii=False, separators=(",", ":")) + "\n"

    ended = json.dumps({"event": "cell_ended"}, separators=(",", ":")) + "\n"
    odd = 'q"uote \\ back\ttab \x01 \u00e9 \u2028 \ufdd2id\ufdd3'
    long = "x" * 600 + "tail"
    tail = EventTail()
    tail.attach(events)
    whole = result("1\n") + ended + result(odd) + result("two", "blocks") + ended + result(long) + result("1")
    with open(events, "w", encoding="utf-8") as handle:
        handle.write(whole[:10])  # a partial line is not read as an event
    assert tail.next_call("1\n") is None
    with open(events, "a", encoding="utf-8") as handle:
        handle.write(whole[10:])
    first = tail.next_call("1\n")
    assert first is not None and not first.ended
    assert tail.next_call(odd) == CallEvents(ended=True)  # the cell end between the two results
    both = tail.next_call("two\nblocks")  # two text blocks: the parsed line, joined
    assert both is not None and not both.ended
    assert tail.next_call(long) is not None and tail.next_call("1") is not None
    assert tail.next_call("1") is None  # consumed: each result pairs once
    with open(events, "a", encoding="utf-8") as handle:
        handle.write(ended + result("1\n") + result("1"))
    # "1" is not "1\n": the abandoned poll's result is passed over, its cell end with it
    last = tail.next_call("1")
    assert last is not None and not last.ended


def test_failures_make_is_error_and_raise_for_error() -> None:
    failure = CellFailure("python", "ValueError", "bad", "Traceback ...", "exception")
    result = CellResult(text="out", error=failure)
    assert result.is_error
    with pytest.raises(CellError) as caught:
        result.raise_for_error()
    assert caught.value.error is failure and "ValueError: bad" in str(caught.value)
    assert CellResult(text="fine").raise_for_error().text == "fine"


def test_limit_and_worker_exit_failures() -> None:
    limit = limit_failure("memory", "python", "the session tree reached memory=4GiB")
    assert (limit.kind, limit.name) == ("limit", "memory")
    with pytest.raises(CellError, match="memory limit"):
        CellResult(text="", error=limit).raise_for_error()
    exited = worker_exited_failure("r", 9)
    assert exited.kind == "worker_exited" and "status 9" in exited.message


def test_startup_code_is_valid_python_and_a_yaml_string() -> None:
    for sql in (True, False):
        code = python_startup_code("abc", sql=sql)
        compile(code, "<startup>", "exec")
        assert json.loads(yaml_string(code)) == code
    profile = r_profile_text("abc", "/home/u/.Rprofile")
    assert outcome_dir_name("abc") in profile and "/home/u/.Rprofile" in profile


def test_the_model_reads_the_status_after_the_output() -> None:
    from console_bridge._cells._observe import for_model as _for_model

    running = _for_model(CellResult(text="a\n", running=True))
    assert running.text == "a\n[running; poll with an empty send]"
    asked = _for_model(CellResult(text="", waiting_for_input=True, prompt="name? "))
    assert asked.text == '[input requested: "name? "]\n[waiting for stdin]'
    failed = _for_model(CellResult(text="Traceback ...\n", error=CellFailure("python", "ValueError", "bad")))
    assert failed.text.endswith("[console-bridge: the cell failed: ValueError: bad]")
    plain = CellResult(text="42\n")
    assert _for_model(plain) is plain


@pytest.mark.anyio
@pytest.mark.console
async def test_without_the_recording_status_falls_back_to_the_text_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    from console_bridge import AsyncConsole
    from console_bridge._console import _session
    from tests.support.binaries import binary_for

    monkeypatch.setattr(_session, "find_recording", lambda base, pid: None)
    ws = tmp_path / "ws"
    ws.mkdir()
    async with AsyncConsole(ws, command=binary_for("0.0.6"), recordings_dir=tmp_path / "r", events_wait=3) as c:
        first = await c.run(python="print('one')")
        started = time.monotonic()
        failed = await c.run(python="raise KeyError('k')")
        assert time.monotonic() - started < 2.5  # no second wait (of events_wait=3 s) for a recording that is not there
        assert first.text == "one\n" and failed.error is not None and failed.error.name == "KeyError"
        assert any("recording did not show" in note for note in c.status().extra["notices"])


def test_a_worker_preparation_phase_is_read_from_the_trailing_block() -> None:
    preparing = "\n[elapsed: 0.4s since admission; no new output; phase: startup]\n[running; poll with an empty send]"
    assert split_response(preparing, ended=False).starting
    running = "\n[elapsed: 2.8s since admission; no new output]\n[running; poll with an empty send]"
    assert not split_response(running, ended=False).starting


def test_event_timestamps_read_without_parsing_match_the_parsed_value() -> None:
    from console_bridge._cells._events import _timestamp

    line = b'{"event":"cell_started","owner":{"cell_id":4},"sequence":9,"at":"2026-12-01T10:12:15.716447762Z"}'
    assert _timestamp(line) == pytest.approx(1796119935.716447762, abs=1e-6)
    assert _timestamp(line.replace(b".716447762", b"")) == 1796119935.0
    # not the line's last key (a nested "at" after the top level's): parsed, the top level's value
    nested = b'{"at":"2026-11-30T05:47:40.5Z","x":{"at":"2020-01-01T00:00:00Z"}}'
    assert _timestamp(nested) == pytest.approx(1796017660.5)
    assert _timestamp(b'{"at":"2026-13-01T10:12:15Z"}') is None
    assert _timestamp(b"not json") is None


def test_a_worker_killed_by_a_signal_is_an_exit_with_a_negative_status() -> None:
    from console_bridge._cells._notices import read_notices
    from console_bridge._cells._outcome_log import worker_exited_failure

    text = (
        "[worker sideband read failed: worker sideband closed]\n[worker terminated by signal 9]\n"
        "[worker stopped: in-memory state lost; explicit restart required]"
    )
    notice = read_notices(text)
    assert notice.worker_exited and notice.exit_status == -9 and notice.restart_required
    failure = worker_exited_failure("python", notice.exit_status)
    assert failure.kind == "worker_exited" and "signal 9" in failure.message and "did not run" in failure.message
    assert "status 3" in worker_exited_failure("python", 3).message


def test_a_late_end_of_a_killed_cell_does_not_end_the_next_one(tmp_path: Path) -> None:
    """Seen in the guest after the memory limit killed a worker: the server logged the killed
    cell's end during the next call, and that cell, still running, came back as finished with the
    server's "[running; ...]" notice in its text. An end counts only for a cell not yet finished."""
    events = tmp_path / "events.jsonl"

    def line(event: str, **fields: object) -> str:
        return json.dumps({"event": event, **fields}, separators=(",", ":")) + "\n"

    def owner(session: int, cell: int) -> dict[str, object]:
        return {"session_id": session, "cell_id": cell, "interval": "cell"}

    def result(call: int, text: str) -> str:
        return line("tool_result", call_id=call, result={"content": [{"type": "text", "text": text}]})

    running = "2\n\n[elapsed: 2.9s since admission]\n[running; poll with an empty send]"
    tail = EventTail()
    tail.attach(events)
    with open(events, "w") as handle:  # the hog's call: the worker died, no end logged yet
        handle.write(line("cell_started", call_id=7, owner=owner(1, 5)) + result(7, "[worker exited]"))
    killed = tail.next_call("[worker exited]")
    assert killed is not None and not killed.ended
    tail.finished()  # the bridge saw the worker's death: that cell is over
    with open(events, "a") as handle:  # the next call: the late end, then the new cell, still running
        handle.write(line("cell_output", owner=owner(1, 5), call_id=7))
        handle.write(line("cell_ended", call_id=7, owner=owner(1, 5)))
        handle.write(line("worker_started", session_id=2))
        handle.write(line("cell_started", call_id=8, owner=owner(2, 1)) + result(8, running))
    nxt = tail.next_call(running)
    assert nxt is not None and not nxt.ended
    with open(events, "a") as handle:  # its poll sees its own end
        handle.write(line("cell_ended", call_id=8, owner=owner(2, 1)) + result(9, ""))
        handle.write(line("cell_output", owner=owner(2, 1), call_id=8))  # the pair's second, after
        handle.write(line("cell_started", call_id=10, owner=owner(2, 2)) + result(10, "[running]"))
    polled = tail.next_call("")
    assert polled is not None and polled.ended
    later = tail.next_call("[running]")  # the first cell's trailing cell_output does not end this one
    assert later is not None and not later.ended
    # 0.0.5 names cells by the call that started them: the same holds
    old = tmp_path / "old.jsonl"
    tail.attach(old)
    old.write_text(result(3, "[worker exited]"))
    assert (found := tail.next_call("[worker exited]")) is not None and not found.ended
    tail.finished()
    with open(old, "a") as handle:
        handle.write(line("cell_output", call_id=3, path="outputs/call-000003.log") + result(4, running))
        handle.write(line("cell_output", call_id=4, path="outputs/call-000004.log") + result(5, "x"))
    assert (found := tail.next_call(running)) is not None and not found.ended
    assert (found := tail.next_call("x")) is not None and found.ended


@pytest.mark.anyio
async def test_the_observer_keeps_a_cell_running_past_a_late_end_of_the_killed_one(tmp_path: Path) -> None:
    """The same, through the observer: a call that reports the worker's death closes its cell, so
    the cell after it reads as running (run() polls on) and not as finished."""
    from console_bridge._cells._observe import CellObserver
    from console_bridge._cells._recordings import Recording
    from console_bridge._results import ToolResult

    (tmp_path / "capture").mkdir()
    events = tmp_path / "capture" / "events.jsonl"

    def line(event: str, **fields: object) -> str:
        return json.dumps({"event": event, **fields}, separators=(",", ":")) + "\n"

    def result(call: int, text: str) -> str:
        return line("tool_result", call_id=call, result={"content": [{"type": "text", "text": text}]})

    owner = {"session_id": 1, "cell_id": 5, "interval": "cell"}
    death = "[worker terminated by signal 9]"
    running = "2\n\n[elapsed: 2.9s since admission]\n[running; poll with an empty send]"
    events.write_text(line("cell_started", call_id=7, owner=owner) + result(7, death))
    observer = CellObserver(lambda: Recording("run", tmp_path), lambda _recording: None, events_wait=2.0)
    killed = await observer.observe(ToolResult(text=death, is_error=True), 0.0)
    assert killed.worker_exited and not killed.running
    with open(events, "a") as handle:
        handle.write(line("cell_output", owner=owner, call_id=7) + line("cell_ended", call_id=7, owner=owner))
        second = {**owner, "session_id": 2, "cell_id": 1}
        handle.write(line("cell_started", call_id=8, owner=second) + result(8, running))
    nxt = await observer.observe(ToolResult(text=running), 0.0)
    assert nxt.running and nxt.text == "2\n"
