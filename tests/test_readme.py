"""The README's examples run as written: the quick start in a fresh folder, the governance ones from the repo."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.places import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")


def python_blocks(section: str) -> list[str]:
    """The ```python blocks of the README section whose heading starts with ``section``."""
    start = README.index(f"## {section}")
    end = README.find("\n## ", start + 3)
    body = README[start : end if end != -1 else None]
    return re.findall(r"```python\n(.*?)```", body, flags=re.DOTALL)


def run_python(code: str, cwd: Path, tmp: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, XDG_DATA_HOME=str(tmp / "xdg-data"), XDG_CACHE_HOME=str(tmp / "xdg-cache"))
    env.pop("CONSOLE_BRIDGE_MCP_CONSOLE", None)
    return subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.console
def test_the_quick_start_runs_as_written_in_a_fresh_folder(tmp_path: Path) -> None:
    [quick_start] = python_blocks("Quick start")[:1]
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    proc = run_python(quick_start, fresh, tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "42" in lines
    assert "ZeroDivisionError: division by zero" in lines
    assert "'sandboxed': True" in proc.stdout and "'network': 'restricted'" in proc.stdout
    assert (fresh / "my-analysis").is_dir()


def test_the_governance_examples_run_from_the_repository(tmp_path: Path) -> None:
    blocks = python_blocks("A governed client") + python_blocks("Governance")
    first, second = blocks[0], blocks[1]
    proc = run_python(first, ROOT, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "hello" in proc.stdout
    proc = run_python(second.replace('"audit.jsonl"', repr(str(tmp_path / "audit.jsonl"))), ROOT, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "hello" in proc.stdout and "write_note" in proc.stdout
    assert (tmp_path / "audit.jsonl").is_file()


def test_the_user_install_line_names_extras_that_exist_and_bring_a_kernel() -> None:
    """Issue 31, item 7: the README shows a user install (the checkout with the datascience and jupyter
    extras) beside the developer setup; the extras it names exist, and jupyter's brings ipykernel.
    (Checked end to end by hand: a venv of /usr/bin/python3, that pip install, `run` and `%%console`.)"""
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    found = re.search(r"pip install '[^'\n]*\[([a-z,-]+)\]'", README)
    assert found is not None, "no `pip install '<checkout>[extras]'` line in the README"
    named = found.group(1).split(",")
    assert {"datascience", "jupyter"} <= set(named) and set(named) <= set(extras), (named, sorted(extras))
    assert any(requirement.startswith("ipykernel") for requirement in extras["jupyter"]), extras["jupyter"]
    assert README.index(found.group(0)) < README.index("## Quick start")  # beside the developer setup
