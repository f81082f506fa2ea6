"""SessionManager, the blocking twin: plain code and threads, against the real mcp-console 0.0.6."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from console_bridge import ConnectionClosed, Console, Owner, SessionManager
from tests.support.processes import alive

pytestmark = [pytest.mark.console, pytest.mark.slow, pytest.mark.usefixtures("no_leaks")]


def make(options: dict[str, Any], **kwargs: Any) -> SessionManager:
    return SessionManager(options["workspace"], **{k: v for k, v in options.items() if k != "workspace"}, **kwargs)


def test_the_blocking_twin_works_from_plain_code_and_threads(options: dict[str, Any]) -> None:
    results: dict[int, str] = {}
    errors: list[BaseException] = []
    with make(options, warm=1, max_sessions=2, acquire_timeout=120) as mgr:
        with mgr.session(owner=Owner("plain")) as console:
            assert isinstance(console, Console) and console.owner == Owner("plain")
            assert console.run(python="21 * 2").text.strip() == "42"
            first_pid = console.pid

        def worker(index: int) -> None:
            try:
                with mgr.session(owner=Owner(f"thread-{index}")) as mine:
                    results[index] = mine.run(python=f"print({index})").text
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(90)
        assert errors == [] and results == {i: f"{i}\n" for i in range(3)}
        long_lived = mgr.open(owner=Owner("keeper"), name="kept")
        assert mgr.get(long_lived.id).pid == long_lived.pid
        assert [s.name for s in mgr.sessions() if s.state == "in_use"] == ["kept"]
        stats = mgr.stats()
        assert stats.warm_hits.count + stats.misses.count == 5
    assert alive({first_pid}) == []
    with pytest.raises(ConnectionClosed):
        long_lived.run(python="1")
    mgr.shutdown()  # idempotent
