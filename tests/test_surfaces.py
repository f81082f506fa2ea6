"""The twins keep to one surface: ``AsyncConsole``, ``Console`` and the Ray consoles, and the four
session managers, have every method of their ``Protocol`` (``console_bridge._surfaces``) with the
same parameters, names, kinds, defaults and annotations, compared by ``inspect``.

mypy checks the same classes against the same protocols (the ``if TYPE_CHECKING:`` blocks of the
twins' modules), but it lets a positional parameter be renamed or a default change; this does not.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from console_bridge import AsyncConsole, AsyncSessionManager, Console, SessionManager
from console_bridge._surfaces import AsyncConsoleSurface, AsyncManagerSurface, ConsoleSurface, ManagerSurface

# The type parameters: what differs by design (a Ray status is awaited; each manager hands out its
# own kind). A result that names one is mypy's to check.
PARAMETERS = {"Status_co", "Console_co", "Sessions_co", "Stats_co", "Self"}
# The async surface's names that the blocking one spells its own way, and back.
ASYNC_ONLY = {"__aenter__", "__aexit__", "aclose"}
BLOCKING_ONLY = {"__enter__", "__exit__", "start", "shutdown"}


def _members(protocol: type) -> dict[str, Any]:
    return {
        name: value
        for name, value in vars(protocol).items()
        if callable(value) and (not name.startswith("_") or name in ASYNC_ONLY | BLOCKING_ONLY)
    }


def _shape(function: Any) -> tuple[list[tuple[str, Any, Any, str]], str]:
    """The parameters (name, kind, default, annotation), ``self`` aside, and the return annotation."""
    signature = inspect.signature(function)
    parameters = [
        (p.name, p.kind, p.default, str(p.annotation)) for p in signature.parameters.values() if p.name != "self"
    ]
    return parameters, str(signature.return_annotation)


def _surfaces() -> list[tuple[type, type]]:
    pairs: list[tuple[type, type]] = [
        (AsyncConsoleSurface, AsyncConsole),
        (ConsoleSurface, Console),
        (AsyncManagerSurface, AsyncSessionManager),
        (ManagerSurface, SessionManager),
    ]
    try:
        from console_bridge.ray import BlockingRayConsole, BlockingRaySessionManager, RayConsole, RaySessionManager
    except ImportError:  # without the [ray] extra the Ray twins are not there to check
        return pairs
    return [
        *pairs,
        (AsyncConsoleSurface, RayConsole),
        (ConsoleSurface, BlockingRayConsole),
        (AsyncManagerSurface, RaySessionManager),
        (ManagerSurface, BlockingRaySessionManager),
    ]


@pytest.mark.parametrize(("protocol", "cls"), _surfaces(), ids=lambda t: t.__name__)
def test_every_twin_has_its_surfaces_methods_with_the_same_signatures(protocol: type, cls: type) -> None:
    problems = []
    for name, member in _members(protocol).items():
        implementation = getattr(cls, name, None)
        if implementation is None:
            problems.append(f"{cls.__name__} has no {name}()")
            continue
        want, want_return = _shape(member)
        got, got_return = _shape(implementation)
        if got != want:
            problems.append(f"{cls.__name__}.{name}{inspect.signature(implementation)}: the surface says {want}")
        if not any(parameter in want_return for parameter in PARAMETERS) and got_return != want_return:
            problems.append(f"{cls.__name__}.{name} returns {got_return}, the surface {want_return}")
        if inspect.iscoroutinefunction(member) and not inspect.iscoroutinefunction(implementation):
            problems.append(f"{cls.__name__}.{name} is not async; the surface's is")
        if protocol in (ConsoleSurface, ManagerSurface) and inspect.iscoroutinefunction(implementation):
            problems.append(f"{cls.__name__}.{name} is async on a blocking twin")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    ("async_surface", "blocking_surface"),
    [(AsyncConsoleSurface, ConsoleSurface), (AsyncManagerSurface, ManagerSurface)],
    ids=lambda t: t.__name__,
)
def test_the_blocking_surface_is_the_async_one_without_await(async_surface: type, blocking_surface: type) -> None:
    asynchronous, blocking = _members(async_surface), _members(blocking_surface)
    assert set(asynchronous) - ASYNC_ONLY == set(blocking) - BLOCKING_ONLY
    for name in set(asynchronous) - ASYNC_ONLY:
        assert _shape(asynchronous[name])[0] == _shape(blocking[name])[0], name


def test_the_parity_check_finds_a_drifted_twin() -> None:
    class Drifted:
        def poll(self, window: int | None = None) -> Any: ...

    assert _shape(Drifted.poll)[0] != _shape(ConsoleSurface.poll)[0]
