"""The CI example in the guest: examples/ci/run-analysis.sh, as a CI job runs it, as the normal user alice.

    python3 ci_example.py --bed ~/bed       # needs ~/bed/repo and ~/bed/wheels (guest/run.sh --repo)

The script is the clean clone's own (``~/bed/repo/examples/ci/run-analysis.sh``, not a copy), run
with a bare environment plus what GitHub Actions sets (``GITHUB_ACTIONS=true``, ``RUNNER_TEMP``,
``GITHUB_WORKSPACE``, ``GITHUB_STEP_SUMMARY``). The guest has no network, so pip gets the
runner's usual kind of settings pointing at the wheels copied in (``PIP_NO_INDEX=1``,
``PIP_FIND_LINKS``): the script itself makes a fresh venv in ``RUNNER_TEMP`` and installs the
checkout, with its build backend, from them. The checks (one JSON line each, as check.py prints):

- ``ci-example-pass``: examples/ci/analysis.py; exit 0, doctor passed, the output fenced with
  ``::stop-commands::``, ``report.json``/``output.txt``/the recording in the artifacts;
- ``ci-example-fail``: an analysis that raises; exit 1 and its error in the log and in
  ``output.txt``, and the fixed annotation;
- ``ci-example-no-user-manager``: the passing analysis again with no systemd user manager and no
  ``XDG_RUNTIME_DIR`` (how GitHub's runner service runs a job: the hook
  ``CONSOLE_BRIDGE_NO_SYSTEMD=1`` hides alice's manager); exit 0.

Exits 1 when a check failed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from check import Report, fresh_dir, out, show, tail  # the bed's own helpers, beside this file

SCRIPT = "examples/ci/run-analysis.sh"
TIMEOUT = 1200  # seconds for one run of the script (a fresh venv and pip install under emulation)
FAILING = "rows = 3\nprint(f'checked {rows} rows')\nraise ValueError('column revenue has 2 negative values')\n"


def run_script(workspace: Path, temp: Path, wheels: Path, files: list[str], **extra: str) -> tuple[int, str, float]:
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(Path.home()),
        "LANG": "C.UTF-8",
        "GITHUB_ACTIONS": "true",
        "GITHUB_WORKSPACE": str(workspace),
        "RUNNER_TEMP": str(temp),
        "GITHUB_STEP_SUMMARY": str(temp / "summary.md"),
        "ANALYSIS_DIR": "examples/ci",
        "ANALYSIS_TIMEOUT": "600",
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(wheels),
        **extra,
    }
    if "XDG_RUNTIME_DIR" not in extra and os.environ.get("XDG_RUNTIME_DIR"):
        env["XDG_RUNTIME_DIR"] = os.environ["XDG_RUNTIME_DIR"]  # what an ssh login has
    for key in [k for k, v in env.items() if v == ""]:
        del env[key]
    start = time.monotonic()
    proc = subprocess.run(
        ["bash", SCRIPT, *files],
        cwd=workspace,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    return proc.returncode, proc.stdout, time.monotonic() - start


def fenced(log: str, marker: str) -> bool:
    """``marker`` is printed between ``::stop-commands::TOKEN`` and ``::TOKEN::``, and no other line is a command."""
    lines = log.splitlines()
    opening = next((i for i, line in enumerate(lines) if line.startswith("::stop-commands::")), None)
    if opening is None:
        return False
    closing_line = "::" + lines[opening].removeprefix("::stop-commands::") + "::"
    if closing_line not in lines:
        return False
    closing = lines.index(closing_line)
    inside = any(marker in line for line in lines[opening:closing])
    stray = [
        line
        for line in lines
        if line.startswith("::")
        and line not in (lines[opening], closing_line)
        and not line.startswith("::error title=")
    ]
    return inside and not stray


def timings(log: str) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for line in log.splitlines():
        if line.startswith("run-analysis: installed console-bridge"):
            found["install"] = line.rsplit(" in ", 1)[-1]
        elif line.startswith("run-analysis: console-bridge run exited"):
            found["run"] = line.split(" after ", 1)[-1].split(";", 1)[0]
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bed", type=Path, default=Path.home() / "bed")
    parser.add_argument("--scope", default="login")
    args = parser.parse_args()
    report = Report(args.scope)
    repo, wheels = args.bed / "repo", args.bed / "wheels"
    if not (repo / SCRIPT).is_file() or not wheels.is_dir():
        report.record("ci-example-pass", False, 0.0, why=f"no clean clone or wheels in {args.bed} (run.sh --repo)")
        return 1
    base = fresh_dir(Path.home(), "ci-example")
    workspace = base / "workspace"
    shutil.copytree(repo, workspace)  # the clean clone, as actions/checkout leaves it
    temp = base / "runner-temp"
    temp.mkdir()

    with report.timed("ci-example-pass") as d:
        rc, log, seconds = run_script(workspace, temp, wheels, ["analysis.py"])
        show(log)
        artifacts = workspace / "examples/ci/artifacts"
        found = artifacts / "report.json"
        report_json = json.loads(found.read_text()) if found.exists() else {}
        transcript = artifacts / "recording" / "transcript.md"
        d.update(exit=rc, seconds_script=round(seconds, 1), **timings(log))
        d["checks"] = {
            "exit 0": rc == 0,
            "doctor passed": "All required checks passed." in log,
            "as alice": "user alice (uid 1000)" in log,
            "fenced": fenced(log, "Top region by revenue: west"),
            "report.json exit_status 0": report_json.get("exit_status") == 0,
            "output.txt": "Top region by revenue: west" in (artifacts / "output.txt").read_text()
            if (artifacts / "output.txt").exists()
            else False,
            "recording finished": transcript.exists() and "## Recording finished" in transcript.read_text(),
            "venv in RUNNER_TEMP": (temp / "console-bridge-venv" / "bin" / "console-bridge").exists(),
        }
        d["why"] = "failed: " + ", ".join(k for k, ok in d["checks"].items() if not ok) + " / " + tail(log, 2)
        d["ok"] = all(d["checks"].values())

    with report.timed("ci-example-fail") as d:
        failing = workspace / "failing"
        failing.mkdir()
        (failing / "check.py").write_text(FAILING)
        rc, log, seconds = run_script(
            workspace,
            temp,
            wheels,
            ["check.py"],
            ANALYSIS_DIR="failing",
            CONSOLE_BRIDGE_VENV=str(temp / "console-bridge-venv"),
        )
        show(log)
        output = failing / "artifacts" / "output.txt"
        error = "ValueError: column revenue has 2 negative values"
        d.update(exit=rc, seconds_script=round(seconds, 1))
        d["checks"] = {
            "exit 1": rc == 1,
            "its output": "checked 3 rows" in log,
            "its error in the log": error in log,
            "its error in output.txt": output.exists() and error in output.read_text(),
            "annotation": "::error title=analysis::the analysis raised an error (exit 1)" in log,
        }
        d["why"] = "failed: " + ", ".join(k for k, ok in d["checks"].items() if not ok) + " / " + tail(log, 2)
        d["ok"] = all(d["checks"].values())

    with report.timed("ci-example-no-user-manager") as d:
        rc, log, seconds = run_script(
            workspace,
            temp,
            wheels,
            ["analysis.py"],
            CONSOLE_BRIDGE_VENV=str(temp / "console-bridge-venv"),
            CONSOLE_BRIDGE_NO_SYSTEMD="1",
            XDG_RUNTIME_DIR="",
            ARTIFACTS_DIR=str(base / "artifacts-no-manager"),
        )
        show(log)
        limits = [line.strip() for line in log.splitlines() if line.startswith("ok      limit ")]
        d.update(exit=rc, seconds_script=round(seconds, 1), limits=limits)
        d["why"] = tail(log, 2)
        d["ok"] = rc == 0 and "Top region by revenue: west" in log
    json_line = {"scope_done": f"{args.scope}/ci-example", "failed": report.failed}
    out(json.dumps(json_line))
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
