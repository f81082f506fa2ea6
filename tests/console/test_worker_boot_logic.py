"""The worker-boot part on its own (no server): when links are made, waited for and removed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from console_bridge._console._worker_boot import WorkerBoot
from console_bridge._vetting._bytecode import bytecode_prefix
from console_bridge._vetting._worker_env import VenvFacts

pytestmark = pytest.mark.anyio

TAG = sys.implementation.cache_tag


def _facts(tmp_path: Path) -> VenvFacts:
    """An environment with one compiled module the bootstrap imports (json)."""
    site = tmp_path / "site"
    (site / "__pycache__").mkdir(parents=True)
    (site / "json.py").write_text("VALUE = 1\n")
    (site / "__pycache__" / f"json.{TAG}.pyc").write_bytes(b"compiled")
    return VenvFacts(missing=(), embedding_library=None, python_version="3.11", cache_tag=TAG, search_path=(str(site),))


def _boot(tmp_path: Path, *, wanted: bool = True) -> tuple[WorkerBoot, list[str]]:
    fresh: list[str] = []
    boot = WorkerBoot(lambda: tmp_path / "cache", wanted=wanted, on_fresh=lambda: fresh.append("fresh"))
    boot.facts = _facts(tmp_path)
    return boot, fresh


async def test_links_are_made_for_the_first_worker_and_removed_once_it_ran(tmp_path: Path) -> None:
    boot, _ = _boot(tmp_path)
    boot.link()
    prefix = bytecode_prefix(tmp_path / "cache" / "mcp-console")
    assert boot.prefix == prefix
    await boot.wait()
    assert boot.linked == 1 and prefix.is_dir()
    boot.unlink()
    assert boot.prefix is None
    await boot.wait()
    assert not prefix.exists()


async def test_a_fresh_worker_ahead_gets_links_only_once_the_session_started(tmp_path: Path) -> None:
    boot, fresh = _boot(tmp_path)
    prefix = bytecode_prefix(tmp_path / "cache" / "mcp-console")
    boot.ahead()  # during start: the launcher links for the first worker itself
    assert boot.pending and fresh == ["fresh"] and boot.prefix is None
    await boot.before_call()
    assert not prefix.exists()
    boot.armed = True
    boot.ahead()
    assert fresh == ["fresh", "fresh"] and boot.prefix == prefix
    await boot.before_call()  # waits for the links: the fresh worker boots with them
    assert boot.linked == 1 and prefix.is_dir()
    boot.ran()
    assert not boot.pending and boot.prefix is None
    await boot.wait()
    assert not prefix.exists()


async def test_making_and_removing_never_overlap(tmp_path: Path) -> None:
    """Removal queued behind the making: after one wait, nothing of the links is left."""
    boot, _ = _boot(tmp_path)
    boot.link()
    boot.unlink()
    await boot.wait()
    assert not bytecode_prefix(tmp_path / "cache" / "mcp-console").exists()


@pytest.mark.parametrize("facts", [True, False])
async def test_nothing_is_linked_where_the_bridge_stays_out_or_knows_nothing(tmp_path: Path, facts: bool) -> None:
    boot, _ = _boot(tmp_path, wanted=not facts)
    if not facts:
        boot.facts = None
    boot.armed = True
    boot.ahead()
    await boot.before_call()
    assert boot.prefix is None and boot.linked == 0 and not (tmp_path / "cache").exists()


async def test_every_waiter_waits_for_the_thread_and_nothing_starts_once_closing(tmp_path: Path) -> None:
    """A cancel racing a close both wait before the session's folder goes: the second waiter saw no
    thread and let the folder be removed under it, which the thread then made again (a manager closed
    during a warm-up left ``state/sessions/<id>`` with links and font lists: the bench's churn leak)."""
    import threading

    import anyio

    boot, _ = _boot(tmp_path)
    gate = threading.Event()
    boot._in_turn(gate.wait)  # work under way, as the links' thread
    done: list[str] = []

    async def waiter(name: str) -> None:
        await boot.wait()
        done.append(name)

    async with anyio.create_task_group() as tg:
        tg.start_soon(waiter, "cancel")
        tg.start_soon(waiter, "close")
        await anyio.sleep(0.2)
        assert done == []  # neither waiter got past the thread still at work
        gate.set()
    assert sorted(done) == ["cancel", "close"]
    await boot.close()
    boot.ahead()  # a worker dying as the server stops: no links are made in a folder that is going
    boot.armed = True
    boot.ahead()
    assert boot._thread is None and not (tmp_path / "cache").exists()
