"""The host's links to compiled files, laid out as ``sys.pycache_prefix`` expects (no server)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from console_bridge._vetting._bytecode import BOOT_MODULES, bytecode_prefix, link_bytecode

TAG = sys.implementation.cache_tag


def _module(folder: Path, name: str, *, compiled: bool = True, package: bool = False) -> Path:
    """A source file (a package's ``__init__.py`` with ``package``) and, with ``compiled``, its file
    in ``__pycache__``."""
    if package:
        folder = folder / name
        folder.mkdir()
        source = folder / "__init__.py"
    else:
        source = folder / f"{name}.py"
    source.write_text("VALUE = 1\n")
    if compiled:
        (folder / "__pycache__").mkdir(exist_ok=True)
        (folder / "__pycache__" / f"{source.stem}.{TAG}.pyc").write_bytes(b"compiled")
    return source


def test_links_follow_the_prefix_layout_and_the_search_order(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    _module(first, "alpha")
    _module(second, "alpha")  # shadowed by first's
    pkg = _module(second, "pkg", package=True)
    _module(pkg.parent, "sub")
    _module(first, "stale", compiled=False)  # no compiled file: not linked
    prefix = tmp_path / "prefix"
    modules = ("alpha", "pkg", "pkg.sub", "stale", "missing", "alpha.not_a_package")
    assert link_bytecode(prefix, [str(first), "relative", str(second)], TAG, modules) == 3
    link = Path(str(prefix) + str(first)) / f"alpha.{TAG}.pyc"
    assert link.is_symlink() and os.path.realpath(link) == os.path.realpath(first / "__pycache__" / f"alpha.{TAG}.pyc")
    assert len(os.readlink(link)) < 60  # short enough to live in the inode (ext4): no block to allocate or free
    assert (Path(str(prefix) + str(second / "pkg")) / f"__init__.{TAG}.pyc").is_symlink()
    assert (Path(str(prefix) + str(second / "pkg")) / f"sub.{TAG}.pyc").is_symlink()
    assert not Path(str(prefix) + str(second)).joinpath(f"alpha.{TAG}.pyc").exists()
    # a second run links nothing new and fails nothing
    assert link_bytecode(prefix, [str(first), str(second)], TAG, modules) == 0
    assert link_bytecode(prefix, [str(first)], "", modules) == 0
    assert link_bytecode(prefix, [str(first)], "../x", modules) == 0


def test_the_link_is_where_python_itself_looks(tmp_path: Path) -> None:
    """The path of each link equals importlib's cache path with the prefix set (checked in a child
    interpreter started with -X pycache_prefix=...), for modules of the real standard library."""
    if not os.path.isfile(importlib.util.cache_from_source(json.__file__)):
        pytest.skip("this interpreter's standard library has no compiled files to link")
    prefix = tmp_path / "bytecode"
    # (a module frozen into this interpreter is never read from a file: its link would go unused)
    modules = [name for name in BOOT_MODULES if getattr(importlib.util.find_spec(name), "origin", None) != "frozen"]
    # the child's own search path (this process's may hold more: Ray, once imported, puts its
    # vendored psutil first), as the session takes the worker's from the worker-environment check
    child_path = json.loads(
        subprocess.run(
            [sys.executable, "-c", "import json, sys; print(json.dumps(sys.path))"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
    )
    linked = link_bytecode(prefix, child_path, TAG, modules)
    assert linked > 50  # most of the worker's bootstrap modules are found in this interpreter
    check = (
        "import importlib.util, json, sys\n"
        "names = json.loads(sys.argv[1])\n"
        "specs = {n: importlib.util.find_spec(n) for n in names}\n"
        "print(json.dumps({n: [s.cached, s.origin] for n, s in specs.items() if s is not None and s.cached}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-X", f"pycache_prefix={prefix}", "-c", check, json.dumps(modules)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    expected = json.loads(done.stdout)
    found = [name for name, (cached, _) in expected.items() if os.path.islink(cached)]
    assert len(found) == linked, sorted(set(expected) - set(found))
    for name in found:
        cached, origin = expected[name]
        own = os.path.join(os.path.dirname(origin), "__pycache__", os.path.basename(cached))
        assert os.path.realpath(cached) == os.path.realpath(own)


def test_the_prefix_is_mcp_consoles_layout(tmp_path: Path) -> None:
    assert bytecode_prefix(tmp_path) == tmp_path / "dependencies" / "python" / "bytecode"
