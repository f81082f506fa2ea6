"""console_bridge.ray on a real 2-node Ray cluster (loopback): placement, cells, files, errors,
an agent loop, driver shutdown and node loss. The node-loss test is last: it removes a node."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import pytest

from console_bridge import (
    Busy,
    CellError,
    CellResult,
    CellTimeout,
    ConnectionClosed,
    LaunchRefused,
    NotAllowed,
    Owner,
    OwnerMismatch,
    ServerError,
    run_context,
)
from console_bridge import _errors as errors
from tests.ray.conftest import CAPACITY, tree, wait_gone

pytestmark = [pytest.mark.anyio, pytest.mark.console, pytest.mark.slow]

ray = pytest.importorskip("ray")

from console_bridge.ray import BlockingRaySessionManager, RayConsole, RaySessionManager  # noqa: E402


def test_import_console_bridge_does_not_import_ray() -> None:
    code = "import sys, console_bridge; assert 'ray' not in sys.modules; import console_bridge.ray; print('ok')"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "ok\n"


@pytest.mark.parametrize("name", errors.__all__)
def test_every_error_pickles_with_its_fields(name: str) -> None:
    cls = getattr(errors, name)
    extra = {"result": CellResult(text="failed")} if cls is errors.CellError else {}
    error = cls("what happened", server="mcp-console", pid=7, stderr_tail="tail", details={"node_id": "ab"}, **extra)
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is cls and str(back) == str(error)
    assert (back.message, back.server, back.pid, back.stderr_tail, back.details) == (
        "what happened",
        "mcp-console",
        7,
        "tail",
        {"node_id": "ab"},
    )
    timeout = pickle.loads(pickle.dumps(CellTimeout("late", result=CellResult(text="so far"))))
    assert timeout.result.text == "so far"
    assert pickle.loads(pickle.dumps(ServerError("x", code=-32000))).code == -32000


async def test_sessions_spread_cells_files_errors_and_shutdown(cluster: Any, options: dict[str, Any]) -> None:
    async with RaySessionManager(**options) as manager:
        consoles = [await manager.open(owner=Owner(f"agent-{i}")) for i in range(2 * CAPACITY)]
        statuses = [await console.status() for console in consoles]
        nodes = Counter(status.node_id for status in statuses)
        assert sorted(nodes.values()) == [CAPACITY, CAPACITY], nodes  # per declared capacity
        assert set(nodes) == {n["NodeID"] for n in ray.nodes() if n["Alive"]}
        with pytest.raises(Busy, match="acquire_timeout"):
            await manager.open(owner=Owner("one-too-many"))
        stats = await manager.stats()
        assert stats.total_capacity == 2 * CAPACITY and sum(stats.in_use.values()) == 2 * CAPACITY

        console = consoles[0]
        assert manager.get(console.id) is console
        await console.run(python="x = 21")
        assert (await console.run(python="print(x * 2)")).text == "42\n"  # state persists
        sql = await console.run(sql="select 6 * 7 as answer")
        assert "42" in sql.text
        plot = await console.run(python="import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()")
        assert plot.images and plot.images[0].data.startswith(b"\x89PNG")

        seen: list[str] = []
        streamed = await console.run(
            python="import time\nfor i in range(4):\n    print(i, flush=True)\n    time.sleep(0.35)",
            on_output=lambda chunk: seen.append(chunk.text),
        )
        assert streamed.text == "0\n1\n2\n3\n" and len(seen) >= 2  # chunks reached the driver as they came

        path = await console.put_file("in/data.csv", b"a,b\n1,2\n")
        out = "import os\nopen(os.path.join(os.environ['TMPDIR'], 'out.txt'), 'w').write(open({!r}).read().upper())"
        await console.run(python=out.format(path))
        assert await console.get_file("out.txt") == b"A,B\n1,2\n"

        # Errors raised on the node are the same classes here, with their fields.
        with pytest.raises(CellTimeout, match=r"timeout=0\.5s") as timed_out:
            await console.run(python="import time; print('started', flush=True); time.sleep(30)", timeout=0.5)
        assert timed_out.value.result is not None and timed_out.value.server == "mcp-console"
        with pytest.raises(NotAllowed, match="contains"):
            await console.get_file("../etc/passwd")
        with pytest.raises(NotAllowed, match="one cell runs one language"):
            await console.send(python="1", sql="select 1")
        await console.send(python="import time; time.sleep(2)", timeout_ms=0)
        with pytest.raises(Busy, match="still running"):
            await console.send(python="1", timeout_ms=0)
        assert (await console.interrupt()).running is False
        assert (await console.run(python="print(x)")).text == "21\n"

        processes = [
            proc for pid_list in (await manager.node_pids()).values() for pid in pid_list for proc in tree(pid)
        ]
        assert len(processes) >= 2 * CAPACITY * 2  # supervisor + server (+ worker ...) per session
        await manager.close(consoles[1].id)
        with pytest.raises(ConnectionClosed, match="closed"):
            await consoles[1].run(python="1")
        assert len(await manager.sessions()) == 2 * CAPACITY - 1
    # Leaving the manager closed every session on every node: nothing of them is left,
    # not even the empty per-session workspaces (workspace=None).
    assert wait_gone(processes) == []
    temp = Path(tempfile.gettempdir())
    assert [p for c in consoles for p in temp.glob(f"console-bridge-ws-*-{c.id}-*")] == []
    with pytest.raises(ConnectionClosed):
        await consoles[0].run(python="1")


async def test_workspace_missing_on_a_node_is_refused(cluster: Any, options: dict[str, Any]) -> None:
    with pytest.raises(LaunchRefused, match=r"does not exist on Ray node [0-9a-f]{16}"):
        async with RaySessionManager(workspace="/nonexistent/console-bridge-ws", **options):
            pass


async def test_workspace_folder_shared_by_the_nodes(cluster: Any, options: dict[str, Any], tmp_path: Path) -> None:
    (tmp_path / "data.csv").write_text("a\n5\n")
    async with (
        RaySessionManager(workspace=tmp_path, **options) as manager,
        manager.session(owner=Owner("agent-1")) as console,
    ):
        assert (await console.run(python="print(open('data.csv').read().split()[1])")).text == "5\n"


async def test_an_agent_drives_a_remote_session(cluster: Any, options: dict[str, Any]) -> None:
    from tests.adapters.test_anthropic import ScriptedApi, agent, answer, call, tool_results

    async with RaySessionManager(**options) as manager, manager.session(owner=Owner("agent-1")) as console:
        handles = console.tools()
        api = ScriptedApi(call("send", {"python": "print(6 * 7)"}), call("send", {"control": "restart"}), answer)
        result, refusal = tool_results(await agent(api, handles))
        assert (result["content"], result["is_error"]) == ("42\n", False)
        assert refusal["is_error"] is True and refusal["content"].startswith('NotAllowed: control: "restart"')
        # Ownership is checked here, on the driver, before anything travels.
        with run_context(Owner("intruder")), pytest.raises(OwnerMismatch):
            await handles[0]({"python": "1"})
        with run_context(Owner("agent-1")), pytest.raises(NotAllowed, match="host control"):
            await console.interrupt()


async def test_a_session_culled_on_its_node_frees_its_slot(cluster: Any, options: dict[str, Any]) -> None:
    options = {**options, "acquire_timeout": 30.0}
    async with RaySessionManager(**options, max_sessions=1, idle_timeout=1.0, check_interval=0.2) as manager:
        first = await manager.open(owner=Owner("agent-1"))
        second = await manager.open(owner=Owner("agent-2"))  # waits until the first was culled for idleness
        with pytest.raises(ConnectionClosed, match="idle"):
            await first.run(python="1")
        assert (await second.run(python="print(2)")).text == "2\n"


async def test_files_values_settle_and_cancel_on_a_node(cluster: Any, options: dict[str, Any]) -> None:
    """The rest of the console surface (``_surfaces``): forwarded to the session on its node."""
    async with RaySessionManager(**options) as manager:
        console = await manager.open(owner=Owner("agent-1"))
        await console.put_file("in/a.csv", b"1")
        await console.run(python="import os\nopen(os.path.join(os.environ['TMPDIR'], 'b.txt'), 'w').write('2')")
        assert await console.list_files("**/*.*") == ["b.txt", "in/a.csv"]
        assert await console.list_files("*.txt") == ["b.txt"]
        with pytest.raises(NotAllowed):
            await console.list_files("../*")
        await console.push("plain", {"a": [1, 2]})
        assert (await console.run(python="print(plain['a'][1])")).text == "2\n"
        assert await console.pull("plain") == {"a": [1, 2]}

        await console.send(python="import time\nprint('go', flush=True)\ntime.sleep(30)", timeout_ms=0)
        seen: list[CellResult] = []
        settled = await console.settle(10.0, on_output=seen.append)  # chunks stream back to the driver
        assert settled is not None and not settled.running and seen and seen[-1].running is False
        await console.send(python="import time; time.sleep(30)", timeout_ms=0)
        settled = await console.settle(10.0)
        assert settled is not None and not settled.running
        assert (await console.run(python="print(3)")).text == "3\n"  # the session lives on
        with run_context(Owner("agent-1")), pytest.raises(NotAllowed, match="host control"):
            await console.settle()

        processes = tree((await console.status()).pid or 0)
        assert processes
        await console.cancel()
        assert wait_gone(processes) == []  # killed on its node
        with pytest.raises(ConnectionClosed, match="closed"):
            await console.run(python="1")
        await console.cancel()  # idempotent
        assert sum((await manager.stats()).in_use.values()) == 0  # its slot freed


def test_the_blocking_twin(cluster: Any, options: dict[str, Any]) -> None:
    with BlockingRaySessionManager(**options) as manager, manager.session(owner=Owner("agent-1")) as console:
        seen: list[str] = []
        assert console.run(python="print(6 * 7)", on_output=lambda c: seen.append(c.text)).text == "42\n"
        assert seen and console.status().node_id == console.node_id
        assert console.tools()[0].call({"python": "print(1)"}).text == "1\n"
        assert console.run(python="print(2)", check=True).text == "2\n"
        with pytest.raises(CellError, match="ZeroDivisionError") as failed:
            console.run(python="1 / 0", check=True)
        assert failed.value.result is not None and failed.value.result.error is not None
        assert [info.id for info in manager.sessions() if info.state == "in_use"] == [console.id]
        console.push("v", [1, 2])
        assert console.pull("v") == [1, 2]
        console.put_file("f.txt", b"x")
        assert console.list_files("*.txt") == ["f.txt"]
        settled = console.settle(5.0)
        assert settled is not None and not settled.running
        with manager.open(owner=Owner("agent-2")) as other:
            other.cancel()
            with pytest.raises(ConnectionClosed):
                other.run(python="1")
    with pytest.raises(ConnectionClosed):
        console.run(python="1")


DRIVER = """
import asyncio, json, sys
import ray
from console_bridge import Owner
from console_bridge.ray import RaySessionManager

async def main():
    ray.init(address=sys.argv[1], log_to_driver=False)
    manager = RaySessionManager(**json.loads(sys.argv[2]))
    await manager.__aenter__()
    consoles = [await manager.open(owner=Owner(f"a{i}")) for i in range(2)]
    await consoles[0].run(python="x = 1")
    pids = [pid for pids in (await manager.node_pids()).values() for pid in pids]
    print(json.dumps([pids, [console.id for console in consoles]]), flush=True)
    await asyncio.sleep(600)

asyncio.run(main())
"""


def test_a_killed_driver_leaves_no_session_process_on_any_node(cluster: Any, options: dict[str, Any]) -> None:
    ray_cluster, _ = cluster
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER, ray_cluster.address, json.dumps(options)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert driver.stdout is not None
        pids, ids = json.loads(driver.stdout.readline())
        assert len(pids) == 2
        processes = [proc for pid in pids for proc in tree(pid)]
        assert len(processes) >= 4
    finally:
        driver.kill()  # SIGKILL: no clean close; Ray ends the driver's actors, their sessions die with them
        driver.wait(30)
        if driver.stdout is not None:
            driver.stdout.close()
    assert wait_gone(processes, bound=60) == []
    # Their empty per-session workspaces were left behind by the killed hosts; the next start sweeps them.
    temp = Path(tempfile.gettempdir())
    assert len([p for i in ids for p in temp.glob(f"console-bridge-ws-*-{i}-*")]) == 2

    async def next_start() -> None:
        async with RaySessionManager(**options):
            pass

    anyio.run(next_start)
    assert [p for i in ids for p in temp.glob(f"console-bridge-ws-*-{i}-*")] == []


async def test_a_lost_node_ends_its_sessions_and_their_processes(cluster: Any, options: dict[str, Any]) -> None:
    """Last in the file: it removes the second node."""
    ray_cluster, _ = cluster
    [other] = [node for node in ray_cluster.worker_nodes]
    async with RaySessionManager(**options) as manager:
        a = await manager.open(owner=Owner("a"))
        b = await manager.open(owner=Owner("b"))
        by_node = {c.node_id: c for c in (a, b)}
        assert len(by_node) == 2
        doomed, survivor = by_node[other.node_id], next(c for c in (a, b) if c.node_id != other.node_id)
        pids = (await manager.node_pids())[doomed.node_id]
        processes = [proc for pid in pids for proc in tree(pid)]
        await survivor.run(python="y = 1")

        async def remove_soon() -> None:
            await anyio.sleep(1.0)
            await anyio.to_thread.run_sync(ray_cluster.remove_node, other)

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(remove_soon)
                with pytest.raises(ConnectionClosed, match=doomed.node_id) as lost:
                    await doomed.run(python="import time; time.sleep(30)")  # the node goes away mid-cell
        assert "was lost" in str(lost.value)
        with pytest.raises(ConnectionClosed, match=doomed.node_id):
            await doomed.run(python="1")
        assert (await survivor.run(python="print(y + 1)")).text == "2\n"  # the other node keeps working
        assert wait_gone(processes) == []  # no process of the lost node's sessions survives
        stats = await manager.stats()
        assert doomed.node_id in stats.lost and stats.total_capacity == CAPACITY
        assert isinstance(survivor, RayConsole)
    # The lost host left the doomed session's empty workspace; the next start on this machine sweeps it.
    async with RaySessionManager(**options):
        pass
    assert list(Path(tempfile.gettempdir()).glob(f"console-bridge-ws-*-{doomed.id}-*")) == []
