"""A real Ray cluster on this machine, loopback only: a head and one more node, each with
``console_sessions: 2`` (module scoped: one cluster per test file)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.support.binaries import binary_for
from tests.support.waiting import until_blocking

# Read by Ray at import: with this off, Ray takes 127.0.0.1 as the node address (loopback only).
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"

ray = pytest.importorskip("ray", reason="the [ray] extra is not installed (pip install -e '.[ray]' in this checkout)")

from ray.cluster_utils import Cluster  # noqa: E402

CAPACITY = 2
NODE = {
    "num_cpus": 1,
    "resources": {"console_sessions": CAPACITY},
    "node_ip_address": "127.0.0.1",
    "object_store_memory": 80 * 1024 * 1024,
}


def remove_ray_session(session_dir: str) -> None:
    """Ray keeps every cluster's session folder (logs, sockets) under /tmp/ray: remove the one this
    cluster made, and ``session_latest`` when it names it."""
    shutil.rmtree(session_dir, ignore_errors=True)
    latest = os.path.join(os.path.dirname(session_dir), "session_latest")
    if os.path.islink(latest) and os.readlink(latest) == session_dir:
        os.unlink(latest)


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[Cluster, Path]]:
    """(cluster, scratch folder). The driver (this process) is connected to it."""
    scratch = Path(tempfile.mkdtemp(prefix="cb-ray-test-"))
    saved = os.environ.get("CONSOLE_BRIDGE_STATE_DIR")
    # The nodes' processes inherit this: every session's private folder lives under the scratch folder.
    os.environ["CONSOLE_BRIDGE_STATE_DIR"] = str(scratch / "state")
    os.makedirs("/tmp/ray", exist_ok=True)
    cluster = Cluster(initialize_head=True, head_node_args={**NODE, "include_dashboard": False})
    session_dir = cluster.head_node.get_session_dir_path()
    try:
        cluster.add_node(**NODE)
        ray.init(address=cluster.address, log_to_driver=False)
        cluster.wait_for_nodes()
        yield cluster, scratch
    finally:
        ray.shutdown()
        cluster.shutdown()
        shutil.rmtree(scratch, ignore_errors=True)
        remove_ray_session(session_dir)
        if saved is None:
            os.environ.pop("CONSOLE_BRIDGE_STATE_DIR", None)
        else:
            os.environ["CONSOLE_BRIDGE_STATE_DIR"] = saved


@pytest.fixture
def options(cluster: tuple[Cluster, Path]) -> dict[str, Any]:
    """RaySessionManager options shared by the tests: small, cold pools, short poll windows."""
    recordings = cluster[1] / "recordings"
    recordings.mkdir(exist_ok=True)
    return {
        "command": str(binary_for("0.0.6")),
        "recordings_dir": str(recordings),
        "warm": 0,
        "poll_window": 0.3,
        "acquire_timeout": 1.0,
    }


def tree(pid: int) -> list[psutil.Process]:
    """A session's server, its supervisor (the parent) and every descendant of the supervisor."""
    try:
        server = psutil.Process(pid)
        supervisor = server.parent()
    except psutil.Error:
        return []
    top = supervisor if supervisor is not None else server
    try:
        return [top, *top.children(recursive=True)]
    except psutil.Error:
        return [top]


def wait_gone(processes: list[psutil.Process], bound: float = 30.0) -> list[psutil.Process]:
    """The processes still alive (not zombies) after at most ``bound`` seconds."""

    def alive() -> list[psutil.Process]:
        left = []
        for proc in processes:
            try:
                if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                    left.append(proc)
            except psutil.Error:
                pass
        return left

    return until_blocking(alive, lambda left: not left, bound=bound, every=0.1)
