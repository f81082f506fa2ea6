"""Which TMPDIR files a glob names (pure: ``run --collect``, ``list_files``)."""

from __future__ import annotations

import pytest

from console_bridge import NotAllowed
from console_bridge._console._files import glob_match


@pytest.mark.parametrize(
    ("pattern", "name", "expected"),
    [
        ("*.csv", "a.csv", True),
        ("*.csv", "d/a.csv", False),  # * stays within one folder
        ("**/*.csv", "a.csv", True),  # ** is zero or more folders
        ("**/*.csv", "d/e/a.csv", True),
        ("**", "a/b/c", True),
        ("out/*", "out/a", True),
        ("out/*", "out/a/b", False),
        ("*", ".hidden", False),  # hidden names only when the pattern names them
        (".*", ".hidden", True),
        ("**/*.csv", ".x/a.csv", False),
        ("**", ".x/a", False),
        ("data_?.csv", "data_1.csv", True),
        ("data_[0-9].csv", "data_x.csv", False),
    ],
)
def test_glob_match(pattern: str, name: str, expected: bool) -> None:
    assert glob_match(pattern, name) is expected


@pytest.mark.parametrize("pattern", ["", "/etc/*", "../x", "a/../../b"])
def test_bad_globs_are_refused(pattern: str) -> None:
    with pytest.raises(NotAllowed):
        glob_match(pattern, "a")
