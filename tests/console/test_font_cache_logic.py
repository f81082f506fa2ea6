"""The font cache's build and its copy into a session, without a server (``_font_cache``): one
folder per environment made whole, safe for concurrent sessions, and a failure that only costs speed.

The environment's interpreter is a small shell script standing in for Python: it writes what
matplotlib's ``import matplotlib.font_manager`` writes (a ``fontlist-v*.json`` in ``MPLCONFIGDIR``).
"""

from __future__ import annotations

import errno
import os
import stat
import threading
from pathlib import Path

import pytest

from console_bridge._vetting import _font_cache
from console_bridge._vetting._font_cache import FONT_FOLDER, built_font_cache, show_font_cache

_WRITES = '#!/bin/sh\nprintf \'{"fonts": []}\' > "$MPLCONFIGDIR/fontlist-v390.json"\ntouch "$MPLCONFIGDIR/other"\n'


def _environment(tmp_path: Path, script: str = _WRITES) -> tuple[Path, list[str]]:
    """(interpreter, sys.path) of an environment whose matplotlib is a folder of two files."""
    site = tmp_path / "site-packages"
    (site / "matplotlib").mkdir(parents=True)
    for name in ("__init__.py", "font_manager.py"):
        (site / "matplotlib" / name).write_text("")
    python = tmp_path / "python"
    python.write_text(script)
    python.chmod(0o755)
    return python, [str(tmp_path / "elsewhere"), str(site)]


def _folders(cache: Path) -> list[str]:
    return sorted(entry.name for entry in (cache / "matplotlib-fonts").iterdir())


def test_an_environment_without_matplotlib_builds_nothing(tmp_path: Path) -> None:
    python, _ = _environment(tmp_path)
    assert built_font_cache(tmp_path / "cache", python, [str(tmp_path / "elsewhere")]) is None
    assert not (tmp_path / "cache").exists()


def test_the_build_keeps_only_the_font_lists_and_is_used_again(tmp_path: Path) -> None:
    python, search_path = _environment(tmp_path)
    cache = tmp_path / "cache"
    built = built_font_cache(cache, python, search_path)
    assert built is not None and sorted(p.name for p in built.iterdir()) == ["fontlist-v390.json"]
    assert stat.S_IMODE(built.stat().st_mode) == 0o755
    python.write_text("#!/bin/sh\nexit 1\n")  # not run again: the built folder is used
    assert built_font_cache(cache, python, search_path) == built
    assert _folders(cache) == [built.name]


def test_concurrent_sessions_share_one_whole_build(tmp_path: Path) -> None:
    python, search_path = _environment(tmp_path)
    cache = tmp_path / "cache"
    barrier = threading.Barrier(6)
    results: list[Path | None] = []

    def build() -> None:
        barrier.wait()
        results.append(built_font_cache(cache, python, search_path))

    threads = [threading.Thread(target=build) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 6 and len(set(results)) == 1 and results[0] is not None, results
    assert _folders(cache) == [results[0].name]  # the losers' scratch folders are gone
    assert [p.name for p in results[0].iterdir()] == ["fontlist-v390.json"]


@pytest.mark.parametrize(
    ("script", "timeout"),
    [("#!/bin/sh\nexit 1\n", 10.0), ("#!/bin/sh\nexit 0\n", 10.0), ("#!/bin/sh\nexec sleep 30\n", 0.3)],
    ids=["fails", "writes-nothing", "too-slow"],
)
def test_a_failed_build_leaves_nothing(tmp_path: Path, script: str, timeout: float) -> None:
    python, search_path = _environment(tmp_path, script)
    cache = tmp_path / "cache"
    assert built_font_cache(cache, python, search_path, timeout=timeout) is None
    assert _folders(cache) == []


def test_a_changed_matplotlib_gets_a_new_build(tmp_path: Path) -> None:
    python, search_path = _environment(tmp_path)
    cache = tmp_path / "cache"
    first = built_font_cache(cache, python, search_path)
    init = Path(search_path[1]) / "matplotlib" / "__init__.py"
    os.utime(init, ns=(0, init.stat().st_mtime_ns + 1_000_000_000))
    second = built_font_cache(cache, python, search_path)
    assert first is not None and second is not None and first != second
    assert _folders(cache) == sorted([first.name, second.name])  # the first is recent: kept


def test_a_folder_others_may_write_is_not_used(tmp_path: Path) -> None:
    python, search_path = _environment(tmp_path)
    cache = tmp_path / "cache"
    built = built_font_cache(cache, python, search_path)
    assert built is not None
    built.chmod(0o777)
    assert built_font_cache(cache, python, search_path) is None


def test_the_session_gets_links_or_whole_copies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    python, search_path = _environment(tmp_path)
    built = built_font_cache(tmp_path / "cache", python, search_path)
    assert built is not None
    linked = tmp_path / "linked"
    linked.mkdir()
    assert show_font_cache(built, linked) == 1 == show_font_cache(built, linked)  # (again: already there)
    source = built / "fontlist-v390.json"
    assert (linked / FONT_FOLDER / source.name).stat().st_ino == source.stat().st_ino

    def cross_device(src: object, dst: object) -> None:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(_font_cache.os, "link", cross_device)
    copied = tmp_path / "copied"
    copied.mkdir()
    assert show_font_cache(built, copied) == 1
    assert os.listdir(copied / FONT_FOLDER) == [source.name]  # no partial file left
    copy = copied / FONT_FOLDER / source.name
    assert copy.read_bytes() == source.read_bytes() and copy.stat().st_ino != source.stat().st_ino
    assert stat.S_IMODE(copy.stat().st_mode) == 0o644
