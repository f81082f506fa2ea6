"""AsyncSessionManager against the real mcp-console 0.0.6: pool, hygiene, caps, culling, faults.

Pools are small (CPU is scarce: a cold start costs 2-3 s here) and bounds short.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest

from console_bridge import (
    AsyncSessionManager,
    Busy,
    ConnectionClosed,
    NotAllowed,
    Owner,
    Recordings,
    VersionRefused,
)
from tests.support.processes import alive, tree_of
from tests.support.waiting import eventually

pytestmark = [pytest.mark.anyio, pytest.mark.console, pytest.mark.slow, pytest.mark.usefixtures("no_leaks")]

A, B = Owner("agent-a"), Owner("agent-b")


def _console(options: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in options.items() if k != "workspace"}


def make(options: dict[str, Any], **kwargs: Any) -> AsyncSessionManager:
    return AsyncSessionManager(options["workspace"], **_console(options), **kwargs)


def servers() -> list[psutil.Process]:
    """Live mcp-console servers (``mcp-console serve``) started by this test process, at any depth."""
    out = []
    for proc in psutil.Process().children(recursive=True):
        try:
            cmdline = proc.cmdline()
            if proc.name() == "mcp-console" and cmdline[1:2] == ["serve"] and proc.status() != psutil.STATUS_ZOMBIE:
                out.append(proc)
        except psutil.Error:
            continue
    return out


async def test_a_warm_claim_hands_over_a_server_started_before_it(options):
    async with make(options, warm=1, max_sessions=2) as mgr:
        await eventually(lambda: mgr.stats().warm == 1, what="one warm session")
        [info] = mgr.sessions()
        assert info.state == "warm" and info.owner is None and info.pid is not None
        started_before = psutil.Process(info.pid).create_time()
        claimed_at = time.time()
        async with mgr.session(owner=A, name="first") as console:
            assert console.pid == info.pid and started_before < claimed_at
            assert console.owner == A
            assert (await console.run(python="1")).text.strip() == "1"
            [mine] = [s for s in mgr.sessions() if s.state == "in_use"]
            assert (mine.owner, mine.name, mine.pid, mine.cells) == (A, "first", info.pid, 1)
            assert mgr.get(mine.id) is console
        stats = mgr.stats()
        assert stats.warm_hits.count == 1 and stats.misses.count == 0
        assert stats.warm_hits.p50_ms is not None and stats.warm_hits.p50_ms < 1000
        with pytest.raises(ConnectionClosed, match="was closed"):
            mgr.get(mine.id)
        with pytest.raises(NotAllowed):
            mgr.get("no-such-id")
    assert alive({info.pid}) == []


async def test_the_next_owner_gets_a_fresh_session_with_its_own_recording(options):
    async with make(options, warm=1, max_sessions=2) as mgr:
        async with mgr.session(owner=A) as first:
            await first.run(python="secret = 41")
            first_pid = first.pid
            first_run = first.recording.run_id if first.recording else None
        assert alive(tree_of(first_pid) | {first_pid}) == []
        with pytest.raises(ConnectionClosed):
            await first.run(python="1")
        async with mgr.session(owner=B) as second:
            assert second.pid != first_pid and second.owner == B
            assert (await second.run(python="print('secret' in globals())")).text == "False\n"
            second_run = second.recording.run_id if second.recording else None
        assert first_run and second_run and first_run != second_run


async def test_eight_concurrent_claimers_never_exceed_max_sessions_and_are_served_in_order(options):
    peak = {"servers": 0, "slots": 0}
    served: list[int] = []
    go = anyio.Event()
    async with make(options, warm=1, max_sessions=2, acquire_timeout=120) as mgr:
        await eventually(lambda: mgr.stats().warm == 1, what="one warm session")

        async def sample() -> None:
            while True:
                stats = mgr.stats()
                assert stats.warm + stats.starting + stats.in_use <= 2, stats
                peak["slots"] = max(peak["slots"], len(mgr.sessions()))
                peak["servers"] = max(peak["servers"], len(servers()))
                await anyio.sleep(0.02)

        async def claimer(index: int) -> None:
            async with mgr.session(owner=Owner(f"agent-{index}")) as console:
                served.append(index)
                if index < 2:
                    await go.wait()  # hold both slots until every other claimer is queued
                assert (await console.run(python=f"{index} * 2")).text.strip() == str(index * 2)

        async with anyio.create_task_group() as sampler:
            sampler.start_soon(sample)
            async with anyio.create_task_group() as tg:
                for index in range(8):
                    tg.start_soon(claimer, index)
                    if index < 2:
                        await eventually(lambda i=index: i in served, what=f"claimer {index} served")
                    else:  # queued in a known order
                        await eventually(lambda i=index: mgr.stats().waiting == i - 1, what=f"claimer {index} queued")
                go.set()
            sampler.cancel_scope.cancel()
        stats = mgr.stats()
    assert 1 <= peak["servers"] <= 2 and peak["slots"] <= 2, peak
    # Queued claims are granted first come, first served, and each then cold-starts in one of two
    # slots: a claim may be served after later ones the other slot served meanwhile (one slow start
    # under load: [3, 2, 5, 6, 4, 7]), but never after two later ones that were both in flight with it,
    # which would take three slots. So the served order is two increasing runs interleaved: its
    # longest decreasing subsequence is at most 2 (it is 8 in the worst unfair order).
    assert sorted(served) == list(range(8))
    assert _longest_decreasing(served[2:]) <= 2, served
    assert stats.warm_hits.count + stats.misses.count == 8 and stats.closed >= 8


def _longest_decreasing(order: list[int]) -> int:
    """The length of the longest strictly decreasing subsequence of ``order``."""
    best = [1] * len(order)
    for j in range(len(order)):
        for i in range(j):
            if order[i] > order[j]:
                best[j] = max(best[j], best[i] + 1)
    return max(best, default=0)


def test_longest_decreasing_tells_fair_orders_from_unfair_ones() -> None:
    assert _longest_decreasing([2, 3, 4, 5, 6, 7]) == 1
    assert _longest_decreasing([3, 2, 5, 6, 4, 7]) == 2
    assert _longest_decreasing([4, 3, 2, 5, 6, 7]) == 3


async def test_max_per_owner_refuses_at_once(options):
    async with make(options, warm=0, max_sessions=3, max_per_owner=1) as mgr:
        console = await mgr.open(owner=A, name="long-lived")
        started = time.monotonic()
        with pytest.raises(NotAllowed, match="max_per_owner"):
            await mgr.open(owner=A)
        assert time.monotonic() - started < 5  # at once, not after acquire_timeout (30 s)
        session_id = mgr.id_of(console)
        await mgr.close(session_id)
        await mgr.close(session_id)  # idempotent
        with pytest.raises(ConnectionClosed):
            await console.run(python="1")
        again = await mgr.open(owner=A)  # the quota freed with the close
        assert (await again.run(python="2")).text.strip() == "2"
        await again.close()  # closed directly, not through the manager: the slot still frees
        await eventually(lambda: mgr.sessions() == [], bound=10, what="the directly closed session dropped")
        assert (await (await mgr.open(owner=A)).run(python="3")).text.strip() == "3"


async def test_idle_and_lifetime_culling_say_why(options):
    async with make(options, warm=0, max_sessions=2, idle_timeout=1.0, max_lifetime=None, check_interval=0.1) as mgr:
        console = await mgr.open(owner=A)
        await console.run(python="1")
        await eventually(lambda: mgr.sessions() == [], bound=15, what="the idle session culled")
        with pytest.raises(ConnectionClosed, match="closed by the session manager after 1 s idle"):
            await console.run(python="1")
        assert mgr.stats().culled == 1
    async with make(options, warm=0, max_sessions=2, idle_timeout=None, max_lifetime=4.0, check_interval=0.1) as mgr:
        console = await mgr.open(owner=A)
        # Culled during a cell: the call in flight fails with the reason, nothing survives.
        with pytest.raises(ConnectionClosed, match="max_lifetime=4 s"):
            await console.run(python="import time\ntime.sleep(30)")
        pid = console.pid
        await eventually(lambda: mgr.sessions() == [], bound=15, what="the old session gone")
        assert pid is not None and alive({pid}) == []


async def test_a_warm_session_killed_behind_the_managers_back_is_replaced_not_handed_out(options):
    async with make(options, warm=1, max_sessions=2, check_interval=60) as mgr:
        await eventually(lambda: mgr.stats().warm == 1, what="one warm session")
        [info] = mgr.sessions()
        assert info.pid is not None
        os.kill(info.pid, signal.SIGKILL)
        await eventually(lambda: alive({info.pid}) == [], what="the killed server gone")
        async with mgr.session(owner=A) as console:
            assert console.pid != info.pid
            assert (await console.run(python="1")).text.strip() == "1"
        assert mgr.stats().discarded == 1


async def test_closing_the_manager_fails_waiting_claims_and_closes_sessions(options):
    async with make(options, warm=0, max_sessions=1, acquire_timeout=0.3) as mgr:
        held = await mgr.open(owner=A)
        with pytest.raises(Busy, match=r"acquire_timeout=0\.3s"):
            await mgr.open(owner=B)
        mgr.acquire_timeout = 60
        outcome: list[BaseException] = []

        async def wait_for_one() -> None:
            try:
                await mgr.open(owner=B)
            except BaseException as exc:
                outcome.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(wait_for_one)
            await eventually(lambda: mgr.stats().waiting == 1)
            await mgr.aclose()
    assert len(outcome) == 1 and isinstance(outcome[0], ConnectionClosed), outcome
    with pytest.raises(ConnectionClosed, match="closed because the session manager was closed"):
        await held.run(python="1")
    with pytest.raises(ConnectionClosed, match="closed"):
        await mgr.open(owner=A)


async def test_a_claim_cancelled_while_starting_leaks_nothing(options, tmp_path: Path):
    # A server that takes 3 s to come up (a shim sleeps, then execs the real binary), so the
    # cancellation surely lands while the claim is starting it.
    slow = tmp_path / "slow" / "mcp-console"
    slow.parent.mkdir()
    slow.write_text(f'#!/bin/sh\nif [ "$1" = serve ]; then /bin/sleep 3; fi\nexec {options["command"]} "$@"\n')
    slow.chmod(0o755)
    async with make({**options, "command": slow}, warm=0, max_sessions=1, acquire_timeout=1) as mgr:
        with anyio.move_on_after(60) as scope:
            async with anyio.create_task_group() as tg:

                async def claim() -> None:
                    await mgr.open(owner=A)

                tg.start_soon(claim)
                await eventually(lambda: any(s.pid for s in mgr.sessions()), what="a server started")
                [info] = mgr.sessions()
                assert info.state == "starting" and info.pid is not None
                tree = tree_of(info.pid)
                tg.cancel_scope.cancel()
        assert not scope.cancelled_caught
        assert mgr.sessions() == [] and mgr.stats().in_use == 0
        assert alive(tree) == []
        # The slot came back: the next claim is served at once (a leaked slot would raise Busy).
        console = await mgr.open(owner=B)
        assert (await console.run(python="1")).text.strip() == "1"
    assert servers() == []


async def test_warm_up_failures_back_off_and_the_claim_raises_the_real_error(options, tmp_path: Path):
    fake = tmp_path / "mcp-console"
    fake.write_text("#!/bin/sh\necho 'mcp-console 9.9.9'\n")
    fake.chmod(0o755)
    broken = {**options, "command": fake}
    async with make(broken, warm=1, max_sessions=2, retry_backoff=5.0, check_interval=0.05) as mgr:
        await eventually(lambda: mgr.stats().failed >= 1, what="a failed warm-up")
        await anyio.sleep(0.5)  # a window for a busy loop to show itself
        stats = mgr.stats()
        assert stats.failed == 1, stats
        assert stats.last_failure and "VersionRefused" in stats.last_failure
        with pytest.raises(VersionRefused):
            await mgr.open(owner=A)
        assert mgr.sessions() == []


async def test_closing_during_a_warm_up_leaves_no_recording(options, recordings: Path) -> None:
    # A warm-up whose boot cell has started (its recording exists) when the manager closes is
    # closed cleanly (not killed), and the recording of a session nobody used is removed.
    mgr = make(options, warm=1, max_sessions=1, refill_delay=0.0)
    async with mgr:

        def booting() -> bool:
            infos = mgr.sessions()
            recorded = any((recordings / "sessions").glob("*/transcript.md"))
            return bool(infos) and infos[0].state == "starting" and recorded

        await eventually(booting, what="a warm-up inside its boot cell")
        pid = mgr.sessions()[0].pid
    assert pid is None or alive({pid}) == []
    assert Recordings(recordings).list() == [], "the unused warm-up left a recording"


async def test_an_unused_warm_spare_leaves_no_recording(options, recordings: Path) -> None:
    """Issue 31: each unused warm spare left an orphan recording (listed with `?`, never pruned)."""
    async with make(options, warm=1, max_sessions=2, refill_delay=0.0) as mgr:
        async with mgr.session(owner=A) as used:
            await used.run(python="x = 1")
            kept = used.recording.run_id if used.recording else None
        await eventually(lambda: mgr.stats().warm == 1, what="the refill's spare warm")
        spare = [info for info in mgr.sessions() if info.state == "warm"]
        assert spare and spare[0].recording is not None  # (the spare records, as every session)
    assert kept is not None
    assert [rec.run_id for rec in Recordings(recordings).list()] == [kept]
