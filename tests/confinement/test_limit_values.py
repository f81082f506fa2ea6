"""``Limits`` refuses values that cannot work, naming the value and what to give (pure, no session)."""

from __future__ import annotations

from typing import Any

import pytest

from console_bridge import LaunchRefused, Limits


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"processes": 31}, "from 32 up (or None), not 31: an idle Python worker alone runs about 11 tasks"),
        ({"processes": 8}, "from 32 up"),
        ({"processes": True}, "from 32 up"),
        ({"processes": "64"}, "from 32 up"),
        ({"cpu": 0}, "a number of CPUs such as 1.5"),
        ({"cpu": float("nan")}, "a number of CPUs such as 1.5"),
        ({"memory": "512KiB"}, "give at least 1MiB (or None for no limit)"),
        ({"tmpdir": "2 parsecs"}, "unknown unit 'parsecs'"),
        ({"writes": True}, "must be a size such as '4GiB'"),
        ({"enforce": "sometimes"}, "'strict', 'required' or 'best_effort'"),
        ({"files": 0}, "limit 'files' must be a whole number of files and folders, 1 or more (or None), not 0"),
        ({"files": "many"}, "limit 'files' must be a whole number"),
        ({"files": True}, "limit 'files' must be a whole number"),
    ],
)
def test_a_value_that_cannot_work_is_refused_with_the_way_out(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(LaunchRefused, match=message.replace("(", r"\(").replace(")", r"\)")):
        Limits(**changes)


def test_the_files_limit_defaults_to_100000_and_takes_none() -> None:
    assert Limits().files == 100_000 and Limits(files=None).files is None and Limits(files=1).files == 1


def test_the_smallest_values_and_none_are_taken() -> None:
    limits = Limits(processes=32, cpu=0.01, memory="1MiB", tmpdir=None, recording=None, writes=None)
    assert limits.processes == 32 and limits.bytes("memory") == 1 << 20 and limits.bytes("tmpdir") is None
