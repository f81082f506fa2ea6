"""The whole suite's fixtures (helpers shared by several folders live in ``tests/support``)."""

from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
