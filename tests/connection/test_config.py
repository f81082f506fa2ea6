"""Config refusals name the file, the entry and the fix; ``cwd`` is honoured.

Refusals happen at construction: nothing is started (the ``watch`` fixture proves it).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from console_bridge import AsyncMcpConnection, BridgeError, LaunchRefused, McpConnection
from tests.support.places import PYTHON, SERVERS, server_entry

from .helpers import OWNER, ProcessWatch, config

pytestmark = pytest.mark.anyio


def refused(cfg: Any, server: str = "s", **kwargs: Any) -> LaunchRefused:
    with pytest.raises(LaunchRefused) as info:
        AsyncMcpConnection(cfg, server, owner=OWNER, **kwargs)
    return info.value


def write_config(path: Path, servers: dict[str, Any]) -> Path:
    path.write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")
    return path


def test_missing_file_names_the_file_and_the_fix(tmp_path: Path, watch: ProcessWatch) -> None:
    path = tmp_path / "nope" / "mcp.json"
    error = refused(path)
    assert str(path) in str(error)
    assert "does not exist" in str(error)
    assert "check the path" in str(error)
    assert error.details["config"].endswith(repr(str(path)))


def test_invalid_json_names_the_file_and_the_position(tmp_path: Path, watch: ProcessWatch) -> None:
    path = tmp_path / "mcp.json"
    path.write_text('{"mcpServers": {"s": {"command": "x",}}}', encoding="utf-8")
    error = refused(str(path))
    text = str(error)
    assert str(path) in text
    assert "invalid JSON" in text
    assert "line 1" in text and "column" in text
    assert "fix the JSON" in text


def test_top_level_not_an_object(tmp_path: Path, watch: ProcessWatch) -> None:
    path = tmp_path / "mcp.json"
    path.write_text("[1, 2]", encoding="utf-8")
    assert "not a JSON object" in str(refused(path))


def test_no_mcpservers_object(tmp_path: Path, watch: ProcessWatch) -> None:
    path = tmp_path / "mcp.json"
    path.write_text('{"servers": {}}', encoding="utf-8")
    assert "mcpServers" in str(refused(path))


def test_unknown_server_lists_the_known_names(tmp_path: Path, watch: ProcessWatch) -> None:
    path = write_config(tmp_path / "mcp.json", {"files": {"command": "x"}, "web": {"url": "http://127.0.0.1:1/mcp"}})
    error = refused(path, "fiels")
    text = str(error)
    assert str(path) in text
    assert "'fiels'" in text
    assert "files" in text and "web" in text
    assert "use one of the known names" in text


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ({"args": ["x"]}, "neither 'command' nor 'url'"),
        ({"command": "x", "url": "http://127.0.0.1:1/mcp"}, "both 'command' and 'url'"),
    ],
)
def test_neither_or_both_command_and_url(tmp_path: Path, watch: ProcessWatch, entry: Any, problem: str) -> None:
    path = write_config(tmp_path / "mcp.json", {"srv": entry})
    error = refused(path, "srv")
    text = str(error)
    assert str(path) in text
    assert "entry 'srv'" in text
    assert problem in text
    assert "give 'command' (stdio) or 'url'" in text
    assert error.server == "srv"


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ("just a string", "not a JSON object"),
        ({"command": 5}, "'command' must be a non-empty string"),
        ({"command": "  "}, "'command' must be a non-empty string"),
        ({"command": "x", "args": "server.py"}, "'args' must be a list of strings"),
        ({"command": "x", "args": ["a", 1]}, "'args' must be a list of strings"),
        ({"command": "x", "env": {"A": 1}}, "'env' must map strings to strings"),
        ({"command": "x", "env": ["A=1"]}, "'env' must map strings to strings"),
        ({"command": "x", "cwd": 7}, "'cwd' must be a non-empty string"),
        ({"command": "x", "args": ["a\x00b"]}, "NUL"),
        ({"command": "x", "bogus": 1}, "unknown key(s) bogus"),
        ({"command": "x", "type": "http"}, "does not fit this entry"),
        ({"url": 5}, "'url' must be a string"),
        ({"url": "ftp://127.0.0.1/mcp"}, "is not an http(s) URL"),
        ({"url": "http://127.0.0.1:1/mcp", "headers": {"X-Key": 1}}, "'headers' must map strings to strings"),
        ({"url": "http://127.0.0.1:1/mcp", "headers": "X-Key: 1"}, "'headers' must map strings to strings"),
        ({"url": "http://127.0.0.1:1/mcp", "headers": {"X-Key": "a\r\nB: c"}}, "line break"),
        ({"url": "http://127.0.0.1:1/mcp", "command": None}, "both"),
    ],
)
def test_wrong_value_types_name_file_entry_and_fix(
    tmp_path: Path, watch: ProcessWatch, entry: Any, problem: str
) -> None:
    path = write_config(tmp_path / "mcp.json", {"srv": entry})
    error = refused(path, "srv")
    text = str(error)
    assert str(path) in text
    assert "entry 'srv'" in text
    assert problem in text
    # "what happened; what to do": every refusal carries a fix after the semicolon.
    assert ";" in text and text.rsplit(";", 1)[1].strip()


def test_mapping_config_is_named_in_refusals(watch: ProcessWatch) -> None:
    error = refused(config({"command": "x", "args": "y"}))
    assert "the config mapping" in str(error)


def test_config_of_the_wrong_type(watch: ProcessWatch) -> None:
    assert "mapping" in str(refused(42))


def test_relative_cwd_that_does_not_exist(tmp_path: Path, watch: ProcessWatch) -> None:
    folder = tmp_path / "conf"
    folder.mkdir()
    path = write_config(folder / "mcp.json", {"srv": {"command": "x", "cwd": "missing/dir"}})
    error = refused(path, "srv")
    text = str(error)
    assert str(path) in text and "entry 'srv'" in text
    assert "'missing/dir'" in text
    assert str(folder / "missing" / "dir") in text  # resolved against the config file's folder
    assert "create it or fix the path" in text


def test_cwd_that_is_a_file(tmp_path: Path, watch: ProcessWatch) -> None:
    (tmp_path / "afile").write_text("x", encoding="utf-8")
    assert "not an existing directory" in str(refused(config({"command": "x", "cwd": str(tmp_path / "afile")})))


@pytest.mark.parametrize(
    ("kwargs", "problem"),
    [
        ({"owner": "agent-1"}, "owner must be an Owner"),
        ({"timeout": 0}, "timeout must be a positive number"),
        ({"startup_timeout": -1}, "startup_timeout must be a positive number"),
        ({"tools": "echo"}, "tools must be a sequence of exact names"),
        ({"resources": [""]}, "resources must be a sequence of exact names"),
        ({"prompts": [1]}, "prompts must be a sequence of exact names"),
        ({"policy": {"mode": "read_only"}}, "policy must be a console_bridge.Policy"),
    ],
)
def test_bad_arguments_are_refused(watch: ProcessWatch, kwargs: dict[str, Any], problem: str) -> None:
    kwargs = {"owner": OWNER, **kwargs}
    with pytest.raises(LaunchRefused, match=problem):
        AsyncMcpConnection(config(server_entry("probe.py")), "s", **kwargs)


def test_blocking_twin_refuses_the_same_way_and_stops_its_thread(tmp_path: Path, watch: ProcessWatch) -> None:
    import threading

    before = threading.active_count()
    with pytest.raises(LaunchRefused, match="does not exist"):
        McpConnection(tmp_path / "nope.json", "s", owner=OWNER)
    assert threading.active_count() == before


async def test_missing_command_is_launch_refused(watch: ProcessWatch) -> None:
    conn = AsyncMcpConnection(
        config({"command": "/nonexistent/definitely-not-a-server"}), "s", owner=OWNER, startup_timeout=5
    )
    with pytest.raises(LaunchRefused) as info:
        await conn.connect()
    assert "/nonexistent/definitely-not-a-server" in str(info.value)
    assert "check that the command exists" in str(info.value)
    assert conn.status().state == "closed"


async def test_relative_cwd_is_taken_from_the_config_folder(tmp_path: Path, conns: Any) -> None:
    folder = tmp_path / "conf"
    (folder / "work dir").mkdir(parents=True)
    path = write_config(folder / "mcp.json", {"probe": server_entry("probe.py", cwd="work dir")})
    conn = conns(path, server="probe", tools=["env"])
    await conn.connect()
    report = json.loads((await conn.call_tool("env", {})).text)
    assert Path(report["cwd"]) == (folder / "work dir").resolve()


async def test_absolute_cwd_is_honoured(tmp_path: Path, conns: Any) -> None:
    conn = conns(server_entry("probe.py", cwd=str(tmp_path)), tools=["env"])
    await conn.connect()
    report = json.loads((await conn.call_tool("env", {})).text)
    assert Path(report["cwd"]) == tmp_path.resolve()


async def test_relative_cwd_in_a_mapping_is_taken_from_the_host_cwd(
    tmp_path: Path, conns: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    conn = conns({"command": PYTHON, "args": [str(SERVERS / "probe.py")], "cwd": "sub"}, tools=["env"])
    await conn.connect()
    report = json.loads((await conn.call_tool("env", {})).text)
    assert Path(report["cwd"]) == (tmp_path / "sub").resolve()


async def test_no_cwd_means_the_host_cwd(tmp_path: Path, conns: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    conn = conns(server_entry("probe.py"), tools=["env"])
    await conn.connect()
    report = json.loads((await conn.call_tool("env", {})).text)
    assert Path(report["cwd"]) == tmp_path.resolve()


def test_refusals_are_bridge_errors() -> None:
    assert issubclass(LaunchRefused, BridgeError)
