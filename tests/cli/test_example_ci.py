"""The CI example: its workflow's core command, run exactly as written on examples/ci/analysis.py."""

from __future__ import annotations

import json
import os
import shlex
import shutil
from pathlib import Path

import pytest
import yaml

from .conftest import Runner

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ci"


def _workflow_run_command() -> tuple[list[str], str]:
    workflow = yaml.safe_load((EXAMPLE / "console-bridge.yml").read_text())
    job = workflow["jobs"]["analysis"]
    commands = [step["run"] for step in job["steps"] if "console-bridge run" in str(step.get("run", ""))]
    assert len(commands) == 1
    return shlex.split(commands[0]), job["defaults"]["run"]["working-directory"]


def test_workflow_shape() -> None:
    workflow = yaml.safe_load((EXAMPLE / "console-bridge.yml").read_text())
    steps = workflow["jobs"]["analysis"]["steps"]
    uses = [step.get("uses", "") for step in steps]
    assert any(u.startswith("actions/upload-artifact@") for u in uses)
    upload = next(step for step in steps if step.get("uses", "").startswith("actions/upload-artifact@"))
    assert upload["if"] == "always()" and upload["with"]["path"] == "examples/ci/artifacts"
    assert workflow["permissions"] == {"contents": "read"}
    assert any("console-bridge doctor" in str(step.get("run", "")) for step in steps)
    assert (EXAMPLE / "README.md").is_file()


@pytest.mark.console
def test_the_workflow_command_runs_the_example(cb: Runner, tmp_path: Path) -> None:
    argv, workdir = _workflow_run_command()
    assert argv[:2] == ["console-bridge", "run"] and "--artifacts" in argv and "analysis.py" in argv
    assert workdir == "examples/ci"
    work = tmp_path / "checkout"
    shutil.copytree(EXAMPLE, work)
    before = sorted(os.listdir(work))
    # Exactly the workflow's command; the default recordings folder lands under XDG_DATA_HOME in tmp.
    proc = cb(*argv[1:], cwd=work)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Orders summary: 90 rows" in proc.stdout
    assert "Top region by revenue:" in proc.stdout
    assert sorted(os.listdir(work)) == sorted([*before, "artifacts"])  # the code wrote nothing here
    artifacts = work / "artifacts"
    assert (artifacts / "output.txt").read_text() == proc.stdout
    report = json.loads((artifacts / "report.json").read_text())
    assert report["exit_status"] == 0
    assert report["files"][0]["file"] == "analysis.py"
    assert (artifacts / "recording").is_dir()
    recordings = tmp_path / "xdg-data" / "console-bridge" / "recordings" / "sessions"
    assert report["recording"]["run_id"] in os.listdir(recordings)
