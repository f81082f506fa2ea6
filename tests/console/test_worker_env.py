"""A worker environment without duckdb: SQL is withheld with one clear notice, Python is unaffected."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from console_bridge import Console, NotAllowed
from console_bridge._vetting._worker_env import missing_modules
from tests.support.binaries import binary_for
from tests.support.cli import cli_env, cli_path

pytestmark = pytest.mark.console


@pytest.fixture(scope="module")
def bare_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv with nothing installed (no duckdb, no pandas)."""
    target = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(target)], check=True, timeout=120)
    return target


def test_missing_modules_locates_without_importing(bare_venv: Path) -> None:
    assert missing_modules(bare_venv, ("duckdb", "json")) == ("duckdb",)
    assert missing_modules(Path(sys.prefix), ("duckdb",)) == ()


@pytest.mark.parametrize("version", ["0.0.5", "0.0.6"])
def test_sql_is_withheld_with_one_notice_and_python_works(bare_venv: Path, tmp_path: Path, version: str) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    with Console(ws, python=bare_venv, command=binary_for(version), recordings_dir=tmp_path / "recs") as console:
        result = console.run(python="import sys; print(sys.prefix)")
        assert result.error is None and result.text.strip() == str(bare_venv)
        failed = console.run(python="raise ValueError('still detected')")
        assert failed.error is not None and failed.error.name == "ValueError"
        with pytest.raises(NotAllowed, match=r"SQL is withheld: the worker.s Python .* cannot import duckdb"):
            console.run(sql="select 1")
        notices = console.status().extra["notices"]
        assert len([n for n in notices if "SQL is withheld" in n]) == 1
        assert "Traceback" not in result.text and "startup" not in result.text


def test_cli_python_file_exits_0_and_sql_file_gives_the_notice(bare_venv: Path, tmp_path: Path) -> None:
    (tmp_path / "job.py").write_text("print('python ok')\n")
    (tmp_path / "q.sql").write_text("select 1\n")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [cli_path(), "run", "--python", str(bare_venv), "--recordings-dir", str(tmp_path / "recs"), *args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=90,
            env=cli_env(tmp_path),
            check=False,
        )

    ok = run("job.py")
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout == "python ok\n"
    sql = run("q.sql")
    assert sql.returncode == 1
    assert "SQL is withheld" in sql.stderr and "duckdb" in sql.stderr


def test_the_check_is_answered_again_until_the_venv_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """checked_venv runs the interpreter once, then again only when a folder of its sys.path changed
    (a package installed there)."""
    import console_bridge._vetting._worker_env as worker_env

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    runs: list[Path] = []
    original = worker_env.inspect_venv

    def counted(prefix: Path, *args: object, **kwargs: object) -> object:
        runs.append(prefix)
        return original(prefix, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(worker_env, "inspect_venv", counted)
    first = worker_env.checked_venv(venv, ("duckdb_probe_module",))
    assert first is not None and first.missing == ("duckdb_probe_module",) and len(runs) == 1
    assert worker_env.checked_venv(venv, ("duckdb_probe_module",)) is first and len(runs) == 1
    site = next(Path(p) for p in first.search_path if p.endswith("site-packages") and p.startswith(str(venv)))
    (site / "duckdb_probe_module").mkdir()
    (site / "duckdb_probe_module" / "__init__.py").write_text("")
    again = worker_env.checked_venv(venv, ("duckdb_probe_module",))
    assert again is not None and again.missing == () and len(runs) == 2
