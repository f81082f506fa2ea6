"""Fixtures for the Jupyter tests: one real kernel per module, with the extension loaded."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.jupyter.kernel import Kernel, start_kernel


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kernel]:
    """One kernel for the module, with the extension loaded."""
    k = start_kernel(tmp_path_factory.mktemp("kernel"))
    try:
        k.run("%load_ext console_bridge").expect_ok()
        yield k
    finally:
        k.shutdown()
