"""The blocking twin shows the async methods' real parameters and docs (``help(Console.run)``)."""

from __future__ import annotations

import inspect

import pytest

from console_bridge import AsyncConsole, Console


@pytest.mark.parametrize("name", ["__init__", "send", "poll", "run", "put_file", "get_file", "list_files"])
def test_blocking_methods_carry_the_async_signatures_and_docstrings(name: str) -> None:
    blocking, original = getattr(Console, name), getattr(AsyncConsole, name)
    assert inspect.signature(blocking) == inspect.signature(original)
    assert blocking.__doc__ == original.__doc__
    assert original.__doc__ or name == "__init__"  # (the class docstring documents the constructor)
    assert "kwargs" not in str(inspect.signature(blocking))
