"""``doctor``, ``profiles``, ``recordings``, ``--help`` and ``--version`` through the installed script."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from console_bridge import __version__
from console_bridge._vetting._profiles import available_profiles
from console_bridge.cli import cli

from .conftest import Runner, start, write


def _commands(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = [prefix]
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            found += _commands(command, (*prefix, name))
        else:
            found.append((*prefix, name))
    return found


@pytest.mark.parametrize("path", _commands(cli), ids=lambda p: " ".join(p) or "console-bridge")
def test_every_command_has_help_with_examples(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(cli, [*path, "--help"], prog_name="console-bridge")
    assert result.exit_code == 0, result.output
    assert "Examples:" in result.output
    assert f"console-bridge {' '.join(path)}".strip() in result.output.split("Examples:")[1]


def test_version_through_the_entry_point(cb: Runner) -> None:
    version = cb("--version")
    assert version.returncode == 0
    assert version.stdout.startswith(f"console-bridge {__version__} ")
    assert "0.0.6" in version.stdout


def test_top_level_help_lists_the_commands() -> None:
    usage = CliRunner().invoke(cli, ["--help"], prog_name="console-bridge")
    assert usage.exit_code == 0
    for name in ("run", "doctor", "profiles", "recordings", "ps", "kill"):
        assert f"  {name} " in usage.output


@pytest.mark.console
def test_doctor_json_passes_here(cb: Runner, tmp_path: Path) -> None:
    proc = cb("doctor", "--json", "--recordings-dir", str(tmp_path / "recs"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    document = json.loads(proc.stdout)
    assert document["ok"] is True
    checks = {check["name"]: check for check in document["checks"]}
    binary = checks["mcp-console"]
    assert binary["status"] == "ok" and binary["qualified"] is True and binary["version"] in ("0.0.5", "0.0.6")
    assert Path(binary["path"]).name == "mcp-console"
    sandbox = checks["sandbox"]
    assert sandbox["status"] == "ok"
    assert sandbox["tcp_127_0_0_1"].startswith("refused")
    assert sandbox["workspace_write"].startswith("read-only")
    assert sandbox["advertised"]["network"] == "restricted"
    assert checks["worker python"]["status"] == "ok"
    assert checks["duckdb"]["status"] == "ok"
    assert checks["R"]["status"] in ("ok", "info")
    assert checks["recordings dir"]["status"] == "ok"
    assert checks["recordings dir"]["path"] == str(tmp_path / "recs")
    assert checks["project config"]["status"] == "ok"
    assert "global config" in checks
    assert not (tmp_path / "recs").exists()  # the doctor's own session records in a scratch folder
    # capacity: the kernel's per-user allowances, lowest first, read from /proc here
    walls = checks["capacity"]["walls"]
    instances = int(Path("/proc/sys/fs/inotify/max_user_instances").read_text())
    # one inotify instance per host process, not per session (the shared remasker): not a wall on sessions
    assert all(w["setting"] != "fs.inotify.max_user_instances" for w in walls)
    assert (
        f"fs.inotify.max_user_instances {instances} bounds host processes, not sessions"
        in (checks["capacity"]["detail"])
    )
    assert [w["sessions"] for w in walls] == sorted(w["sessions"] for w in walls)
    assert checks["capacity"]["detail"].startswith(f"about {walls[0]['sessions']} sessions at once")


def test_capacity_names_the_setting_that_stops_sessions_first(monkeypatch: pytest.MonkeyPatch) -> None:
    from console_bridge.cli import _doctor_capacity

    values = {
        "/proc/sys/fs/inotify/max_user_instances": 128,
        "/proc/sys/fs/inotify/max_user_watches": 8192,
        "/proc/sys/user/max_user_namespaces": 30,
        "/proc/sys/kernel/pid_max": 4_194_304,
    }
    monkeypatch.setattr(_doctor_capacity, "_read_int", values.get)
    walls = _doctor_capacity.capacity_walls()
    assert walls[0].setting == "user.max_user_namespaces" and walls[0].sessions == 10  # 3 per session
    text = _doctor_capacity.capacity_text(walls)
    assert text.startswith("about 10 sessions at once: user.max_user_namespaces is 30 and a session takes 3")
    assert "sysctl user.max_user_namespaces=N" in text and "fs.inotify.max_user_watches 8192" in text
    assert "fs.inotify.max_user_instances 128 bounds host processes, not sessions" in text
    assert all(wall.setting != "fs.inotify.max_user_instances" for wall in walls)


def test_doctor_warns_about_a_project_config_and_fails_without_a_binary(cb: Runner, tmp_path: Path) -> None:
    config = tmp_path / ".agents" / "console" / "config.yaml"
    config.parent.mkdir(parents=True)
    config.write_text("sandbox:\n  network: enabled\n")
    proc = cb("doctor", "--command", str(tmp_path / "no-such-mcp-console"), "--recordings-dir", str(tmp_path / "r"))
    assert proc.returncode == 1
    lines = {line.split()[1] if len(line.split()) > 1 else "": line for line in proc.stdout.splitlines()}
    assert lines["mcp-console"].startswith("FAIL")
    assert "does not exist" in lines["mcp-console"]
    assert lines["sandbox"].startswith("skip")
    assert "project config" in proc.stdout and str(config) in proc.stdout
    assert "Required checks failed: mcp-console" in proc.stdout


def test_profiles_list_and_show(tmp_path: Path) -> None:
    procs = {
        args: start(list(args), tmp_path, tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for args in (("profiles",), ("profiles", "show", "workspace"))
    }
    out = {args: (*p.communicate(timeout=60), p.returncode) for args, p in procs.items()}

    listing, _err, code = out[("profiles",)]
    assert code == 0
    for name in available_profiles():
        assert name in listing
    assert "sandboxed, no network access, writable: private TMPDIR, workspace" in listing

    shown, _err, code = out[("profiles", "show", "workspace")]
    assert code == 0
    assert "expects:  sandboxed, no network access, writable: private TMPDIR, workspace" in shown
    assert "-c sandbox.profile=workspace" in shown


def test_profiles_json_and_unknown_in_process() -> None:
    runner = CliRunner()
    listed = json.loads(runner.invoke(cli, ["profiles", "list", "--json"]).output)
    assert {item["name"] for item in listed} == set(available_profiles())

    document = json.loads(runner.invoke(cli, ["profiles", "show", "read-only", "--json"]).output)
    assert document["name"] == "read-only"
    assert document["expects"] == {"sandboxed": True, "network": "restricted", "writable": ["tmpdir"]}
    assert document["expected_sandbox"] == "sandboxed, no network access, writable: private TMPDIR"
    assert document["launch"]["0.0.6"]["supported"] is True

    unknown = runner.invoke(cli, ["profiles", "show", "no-such-profile"])
    assert unknown.exit_code == 2 and "no-such-profile" in unknown.output


def _older_copy(recs: Path, run_id: str) -> str:
    """A second, older recording: a real one copied under an earlier run-id."""
    older = "20200101T000000.000000000Z-" + run_id.rsplit("-", 1)[1]
    shutil.copytree(recs / "sessions" / run_id, recs / "sessions" / older, copy_function=shutil.copyfile)
    sidecar = json.loads((recs / "sessions" / f"{run_id}.console-bridge.json").read_text())
    (recs / "sessions" / f"{older}.console-bridge.json").write_text(json.dumps({**sidecar, "run_id": older}))
    return older


@pytest.mark.console
def test_recordings_list_prune_export_delete(tmp_path: Path) -> None:
    recs = tmp_path / "recs"
    write(tmp_path, "one.py", "print('one')\n")
    maker = start(["run", "-q", "--recordings-dir", str(recs), "one.py"], tmp_path, tmp_path, stdout=subprocess.PIPE)
    assert maker.communicate(timeout=90)[0] == "one\n" and maker.returncode == 0
    # beside the recording: its sidecar (.json) and the cell log the notebook export reads (.jsonl)
    (newest,) = [name for name in os.listdir(recs / "sessions") if not name.endswith((".json", ".jsonl"))]
    assert (recs / "sessions" / f"{newest}.console-bridge-cells.jsonl").stat().st_mode & 0o777 == 0o600
    sidecar = recs / "sessions" / f"{newest}.console-bridge.json"
    assert sidecar.stat().st_mode & 0o777 == 0o600
    info = json.loads(sidecar.read_text())
    assert info["workspace"] == str(tmp_path.resolve()) and info["profile"] == "read-only"
    assert info["owner"] == "host" and "token" not in sidecar.read_text().lower()
    oldest = _older_copy(recs, newest)

    def batch(*commands: list[str]) -> list[tuple[str, str, int]]:
        procs = [start(args, tmp_path, tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for args in commands]
        return [(*p.communicate(timeout=60), p.returncode) for p in procs]

    (listing, _, code), (pruned, _, prune_code) = batch(
        ["recordings", "list", "--json", "--root", str(recs)],
        ["recordings", "--root", str(recs), "prune", "--keep-last", "1", "--dry-run"],
    )
    assert code == 0 and prune_code == 0
    found = json.loads(listing)["recordings"]
    assert [rec["run_id"] for rec in found] == [newest, oldest]
    assert all(rec["finalized"] and not rec["live"] for rec in found)
    assert f"would delete {oldest}" in pruned and newest not in pruned
    assert (recs / "sessions" / oldest).is_dir()  # a dry run deletes nothing

    (exported, _, export_code), (deleted, _, delete_code) = batch(
        ["recordings", "export", newest, str(tmp_path / "exports") + "/", "--root", str(recs)],
        ["recordings", "delete", oldest, "--root", str(recs)],
    )
    assert export_code == 0 and delete_code == 0
    archive = Path(exported.strip())
    assert archive == tmp_path / "exports" / f"{newest}.tar.gz"
    with tarfile.open(archive) as tar:
        assert f"{newest}/transcript.md" in tar.getnames() or f"{newest}/transcript.qmd" in tar.getnames()
    assert deleted.strip() == f"deleted {oldest}"
    assert not (recs / "sessions" / oldest).exists()
    assert (recs / "sessions" / newest).is_dir()

    runner = CliRunner()
    table = runner.invoke(cli, ["recordings", "list", "--root", str(recs), "--workspace", str(tmp_path)])
    assert table.exit_code == 0 and newest in table.output and "finalized" in table.output
    assert "read-only" in table.output and str(tmp_path.resolve()) in table.output
    elsewhere = runner.invoke(cli, ["recordings", "list", "--root", str(recs), "--workspace", str(recs)])
    assert elsewhere.exit_code == 0 and newest not in elsewhere.output and "--all" in elsewhere.output
    everything = runner.invoke(cli, ["recordings", "list", "--root", str(recs), "--all"])
    assert newest in everything.output
    other_ws = runner.invoke(
        cli, ["recordings", "prune", "--root", str(recs), "--workspace", str(recs), "--keep-last", "0"]
    )
    assert other_ws.exit_code == 0 and "deleted 0 recordings" in other_ws.output
    assert (recs / "sessions" / newest).is_dir()  # prune applies to the listed set only
    shown = runner.invoke(cli, ["recordings", "show", newest, "--root", str(recs), "--transcript"])
    assert shown.exit_code == 0 and "finalized:  True" in shown.output
    missing = runner.invoke(cli, ["recordings", "show", "20200101T000000.000000000Z-0000000001", "--root", str(recs)])
    assert missing.exit_code == 1 and "console-bridge recordings list" in missing.output
    nothing = runner.invoke(cli, ["recordings", "prune", "--root", str(recs)])
    assert nothing.exit_code == 2 and "--older-than" in nothing.output
