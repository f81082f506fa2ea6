"""The session manager's decisions and argument checks, without processes."""

from __future__ import annotations

import copy
import inspect
import pickle
from pathlib import Path

import anyio
import pytest

from console_bridge import AsyncSessionManager, ConnectionClosed, LaunchRefused, Owner, SessionManager
from console_bridge._console._session import AsyncConsole
from console_bridge._manager._culling import verdicts
from console_bridge._manager._entry import Entry
from console_bridge._manager._info import CullWords, SessionState, cull_reason, percentile, refill_count


def test_refill_fills_to_the_target_within_capacity() -> None:
    assert refill_count(target=2, warm=0, live=0, max_sessions=4, waiting=0, backing_off=False) == 2
    assert refill_count(target=2, warm=1, live=3, max_sessions=4, waiting=0, backing_off=False) == 1
    assert refill_count(target=2, warm=0, live=4, max_sessions=4, waiting=0, backing_off=False) == 0
    assert refill_count(target=3, warm=0, live=3, max_sessions=4, waiting=0, backing_off=False) == 1


def test_refill_yields_to_waiting_claims_and_backs_off() -> None:
    assert refill_count(target=2, warm=0, live=1, max_sessions=4, waiting=1, backing_off=False) == 0
    assert refill_count(target=2, warm=0, live=0, max_sessions=4, waiting=0, backing_off=True) == 0
    assert refill_count(target=0, warm=0, live=0, max_sessions=4, waiting=0, backing_off=False) == 0


def test_the_check_names_dead_idle_and_old_sessions_one_at_a_time(tmp_path: Path) -> None:
    """The culling verdicts, from local state only (consoles never started, no process)."""

    def entry(name: str, state: SessionState, *, age: float, idle: float) -> Entry:
        found = Entry(name, AsyncConsole(tmp_path), state=state)
        found.created -= age
        found.last_used = found.created + age - idle
        return found

    dead = entry("dead", "warm", age=0, idle=0)  # warm, but no server process was ever seen
    idle = entry("idle", "in_use", age=50, idle=20)
    old = entry("old", "in_use", age=100, idle=0)
    fresh = entry("fresh", "in_use", age=1, idle=0)
    starting = entry("starting", "starting", age=1000, idle=1000)
    found = verdicts([dead, idle, old, fresh, starting], idle_timeout=10.0, max_lifetime=60.0)
    assert next(found)[:2] == ("dead", dead)
    assert next(found)[:2] == ("cull", idle)
    old.state = "closing"  # what the manager did after one verdict is what the check of the next sees
    assert list(found) == []
    old.state = "in_use"
    [(_, _, idle_why), (verdict, _, old_why)] = verdicts([idle, old, fresh], idle_timeout=10.0, max_lifetime=60.0)
    assert verdict == "cull"
    assert "10 s idle" in idle_why and "max_lifetime=60" in old_why


def test_cull_reasons_name_the_bound() -> None:
    keep = cull_reason(now=10.0, created=0.0, last_used=9.0, idle_timeout=5.0, max_lifetime=60.0)
    assert keep is None
    idle = cull_reason(now=10.0, created=0.0, last_used=4.0, idle_timeout=6.0, max_lifetime=60.0)
    assert idle == "closed by the session manager after 6 s idle"
    old = cull_reason(now=61.0, created=0.0, last_used=61.0, idle_timeout=6.0, max_lifetime=60.0)
    assert old == "closed by the session manager after reaching max_lifetime=60 s"
    assert cull_reason(now=1e9, created=0.0, last_used=0.0, idle_timeout=None, max_lifetime=None) is None


def test_one_cull_rule_in_other_words_and_a_busy_session_is_never_idle() -> None:
    """serve culls its consoles by this rule too, in words naming its options (``_serve/_consoles``)."""
    words = CullWords(lifetime="over {:g} s (--max-lifetime)", idle="idle {:g} s (--idle-timeout)")
    idle = {"now": 100.0, "created": 0.0, "last_used": 0.0, "idle_timeout": 10.0, "max_lifetime": 600.0}
    assert cull_reason(**idle, words=words) == "idle 10 s (--idle-timeout)"
    assert cull_reason(**idle, busy=True, words=words) is None  # a cell running: not idle, however long
    old = {**idle, "now": 700.0}
    assert cull_reason(**old, busy=True, words=words) == "over 600 s (--max-lifetime)"  # age culls a busy one


def test_percentile_is_nearest_rank() -> None:
    assert percentile([], 50) is None
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile(list(range(1, 101)), 99) == 99
    assert percentile([5.0], 99) == 5.0


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"max_sessions": 0}, "max_sessions must be an integer >= 1"),
        ({"warm": 3, "max_sessions": 2}, "warm=3 exceeds max_sessions=2"),
        ({"max_per_owner": 0}, "max_per_owner must be an integer >= 1"),
        ({"idle_timeout": -1}, "idle_timeout must be a positive"),
        ({"acquire_timeout": None}, "acquire_timeout must be a positive"),
        ({"owner": object()}, "owner is given per claim"),
        ({"profile": "no-such-profile"}, "no-such-profile"),
    ],
)
def test_bad_arguments_are_refused_before_anything_starts(tmp_path: Path, kwargs: dict, fragment: str) -> None:
    with pytest.raises(LaunchRefused, match=fragment.replace("(", r"\(")):
        AsyncSessionManager(tmp_path, **kwargs)


def test_public_methods_of_the_managers_are_documented() -> None:
    for cls in (AsyncSessionManager, SessionManager):
        for method in ("session", "open", "get", "close", "sessions", "stats"):
            assert inspect.getdoc(getattr(cls, method)), f"{cls.__name__}.{method}"
    assert inspect.getdoc(AsyncSessionManager.aclose) and inspect.getdoc(SessionManager.shutdown)


def test_the_manager_refuses_copies_and_claims_before_start(tmp_path: Path) -> None:
    manager = AsyncSessionManager(tmp_path, warm=0)
    with pytest.raises(TypeError):
        copy.deepcopy(manager)
    with pytest.raises(TypeError):
        pickle.dumps(manager)

    async def claim() -> None:
        with pytest.raises(ConnectionClosed, match="not started"):
            await manager.open(owner=Owner("early"))

    anyio.run(claim)
