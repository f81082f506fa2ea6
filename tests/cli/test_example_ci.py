"""The CI example: the workflows call examples/ci/run-analysis.sh, and that script, run as CI runs it, works.

The script is run as it is (no copy, no stubs on PATH) from a clean copy of the checkout
(the files git tracks or would add), with the variables GitHub Actions sets, as the non-root
user ``cbtest`` when this machine has it (as root it runs as root): a passing analysis exits 0
with its artifacts, a failing one exits 1 with the analysis's error. The same script runs in the
Debian 12 guest as a normal user on cgroup v2 (guest/scenarios/ci-example.sh).
"""

from __future__ import annotations

import json
import os
import pwd
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "ci"
SCRIPT = "examples/ci/run-analysis.sh"
SCRIPT_TIMEOUT = 600  # seconds: a fresh venv and pip install of the checkout and its dependencies


def test_the_github_workflow_runs_the_script_and_uploads_always() -> None:
    workflow = yaml.safe_load((EXAMPLE / "console-bridge.yml").read_text())
    assert workflow["permissions"] == {"contents": "read"}
    job = workflow["jobs"]["analysis"]
    assert job["runs-on"] == "ubuntu-24.04" and job["env"]["ANALYSIS_DIR"] == "examples/ci"
    steps = job["steps"]
    checkout = next(step for step in steps if step.get("uses", "").startswith("actions/checkout@"))
    assert checkout["with"]["persist-credentials"] is False
    runs = [step["run"] for step in steps if "run" in step]
    assert runs == [f"{SCRIPT} analysis.py"]  # every step is in the script the tests run
    assert not any(step.get("uses", "").startswith("actions/setup-python@") for step in steps)  # system Python
    upload = next(step for step in steps if step.get("uses", "").startswith("actions/upload-artifact@"))
    assert upload["if"] == "always()" and upload["with"]["path"] == "examples/ci/artifacts"
    assert os.access(REPO / SCRIPT, os.X_OK)
    listed = subprocess.run(["git", "ls-files", "-s", SCRIPT], cwd=REPO, capture_output=True, text=True, check=False)
    assert listed.stdout.startswith("100755") or not listed.stdout  # executable in git too (unless not yet added)


def test_the_gitlab_job_runs_the_same_script() -> None:
    job = yaml.safe_load((EXAMPLE / "gitlab-ci.yml").read_text())["console-bridge-analysis"]
    assert job["script"] == [f"{SCRIPT} analysis.py"]
    assert job["variables"]["ANALYSIS_DIR"] == "examples/ci"
    assert job["artifacts"]["when"] == "always" and job["artifacts"]["paths"] == ["examples/ci/artifacts/"]


def test_the_script_refuses_to_guess_what_to_install(tmp_path: Path) -> None:
    """Outside a console-bridge checkout it says to set CONSOLE_BRIDGE_SPEC (console-bridge is not on PyPI)."""
    alone = tmp_path / "ci"
    alone.mkdir()
    shutil.copy(REPO / SCRIPT, alone / "run-analysis.sh")
    proc = subprocess.run(
        ["bash", str(alone / "run-analysis.sh")],
        env={"PATH": os.environ["PATH"], "HOME": str(tmp_path), "GITHUB_ACTIONS": "true", "RUNNER_TEMP": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "set CONSOLE_BRIDGE_SPEC" in proc.stderr and "not on PyPI" in proc.stderr
    assert "::error title=run-analysis::" in proc.stdout  # a fixed-text annotation on the run's page


# ----------------------------------------------------------------------------- the script, for real


def _user() -> pwd.struct_passwd | None:
    """The non-root user to run as (cbtest, when we are root and it exists), else None: as ourselves."""
    if os.geteuid() != 0 or shutil.which("runuser") is None:
        return None
    try:
        return pwd.getpwnam("cbtest")
    except KeyError:
        return None


class Checkout:
    """A clean copy of this checkout, readable by the user the script runs as, and how to run the script there."""

    def __init__(self, root: Path, user: pwd.struct_passwd | None) -> None:
        self.root = root
        self.user = user
        self.workspace = root / "workspace"
        self.temp = root / "runner-temp"
        files = subprocess.run(
            ["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=REPO, capture_output=True, check=True
        ).stdout.split(b"\0")
        for name in filter(None, files):
            source = REPO / os.fsdecode(name)
            if source.is_file():
                target = self.workspace / os.fsdecode(name)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, target)
        self.temp.mkdir()
        if user is not None:
            for path in (root, *root.rglob("*")):
                os.chown(path, user.pw_uid, user.pw_gid, follow_symlinks=False)

    def run(self, *files: str, **env: str) -> subprocess.CompletedProcess[str]:
        home = self.user.pw_dir if self.user is not None else os.environ.get("HOME", str(self.root))
        variables = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",  # no stubs: the system's own tools
            "HOME": home,
            "LANG": "C.UTF-8",
            "GITHUB_ACTIONS": "true",
            "GITHUB_WORKSPACE": str(self.workspace),
            "RUNNER_TEMP": str(self.temp),
            "GITHUB_STEP_SUMMARY": str(self.temp / "summary.md"),
            "ANALYSIS_DIR": "examples/ci",
            "ANALYSIS_TIMEOUT": "300",
            # the runner's pip settings (a mirror, a certificate) are the runner's, not the script's
            **{key: value for key, value in os.environ.items() if key.startswith("PIP_")},
            **env,
        }
        argv = ["env", "-i", *(f"{key}={value}" for key, value in variables.items()), "bash", SCRIPT, *files]
        if self.user is not None:
            argv = ["runuser", "-u", self.user.pw_name, "--", *argv]
        return subprocess.run(
            argv, cwd=self.workspace, capture_output=True, text=True, timeout=SCRIPT_TIMEOUT, check=False
        )


@pytest.fixture(scope="module")
def checkout() -> Iterator[Checkout]:
    user = _user()
    root = Path(tempfile.mkdtemp(prefix="cb-ci-script-"))  # not under pytest's tmp: that is root's alone
    root.chmod(0o755)
    try:
        yield Checkout(root, user)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.console
def test_the_script_passes_a_passing_analysis(checkout: Checkout) -> None:
    proc = checkout.run("analysis.py")
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log
    who = checkout.user.pw_name if checkout.user is not None else pwd.getpwuid(os.geteuid()).pw_name
    assert f"user {who} (uid" in proc.stdout
    assert "All required checks passed." in proc.stdout  # doctor ran, and passed
    assert "Top region by revenue: west" in proc.stdout
    # the code's output is fenced: between ::stop-commands::TOKEN and ::TOKEN:: nothing is a command
    lines = proc.stdout.splitlines()
    opening = next(i for i, line in enumerate(lines) if line.startswith("::stop-commands::"))
    token = lines[opening].removeprefix("::stop-commands::")
    closing = lines.index(f"::{token}::")
    assert opening < next(i for i, line in enumerate(lines) if "Orders summary" in line) < closing
    assert not [line for line in lines if line.startswith("::") and line not in (lines[opening], lines[closing])]
    artifacts = checkout.workspace / "examples" / "ci" / "artifacts"
    report = json.loads((artifacts / "report.json").read_text())
    assert report["exit_status"] == 0 and report["files"][0]["file"] == "analysis.py"
    assert "Top region by revenue: west" in (artifacts / "output.txt").read_text()
    assert (artifacts / "recording" / "transcript.md").read_text().rstrip().endswith("## Recording finished")
    venv = checkout.temp / "console-bridge-venv"
    assert (venv / "bin" / "console-bridge").exists()  # installed from the checkout into RUNNER_TEMP
    assert "exit status 0" in (checkout.temp / "summary.md").read_text()


@pytest.mark.console
def test_the_script_fails_a_failing_analysis_with_its_error(checkout: Checkout) -> None:
    folder = checkout.workspace / "failing"
    folder.mkdir(exist_ok=True)
    (folder / "check.py").write_text(
        "rows = 3\nprint(f'checked {rows} rows')\n"
        "raise ValueError('column revenue has 2 negative values')\n"
        "print('::error::not reached')\n"
    )
    if checkout.user is not None:
        for path in (folder, folder / "check.py"):
            os.chown(path, checkout.user.pw_uid, checkout.user.pw_gid)
    venv = checkout.temp / "console-bridge-venv"
    reuse = {"CONSOLE_BRIDGE_VENV": str(venv)} if (venv / "bin" / "python").exists() else {}
    proc = checkout.run("check.py", ANALYSIS_DIR="failing", **reuse)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 1, log
    assert "checked 3 rows" in proc.stdout
    assert "ValueError: column revenue has 2 negative values" in log
    assert "::error title=analysis::the analysis raised an error (exit 1)" in proc.stdout
    assert "not reached" not in log
    artifacts = folder / "artifacts"
    report = json.loads((artifacts / "report.json").read_text())
    assert report["exit_status"] == 1
    assert "ValueError: column revenue has 2 negative values" in (artifacts / "output.txt").read_text()


def test_the_readme_ci_section_shows_the_workflow_as_it_is() -> None:
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("\n## CI\n") : readme.index("\n## ", readme.index("\n## CI\n") + 4)]
    shown = yaml.safe_load(section.split("```yaml\n", 1)[1].split("```", 1)[0])
    workflow = yaml.safe_load((EXAMPLE / "console-bridge.yml").read_text())
    assert shown["permissions"] == workflow["permissions"]
    assert shown["jobs"] == workflow["jobs"]
    for setting in ("kernel.apparmor_restrict_unprivileged_userns=0", "libpython3.X-dev", "normal user"):
        assert setting in section


# ------------------------------------------- the user-namespace sysctl, on a simulated Ubuntu 24.04


@pytest.fixture
def ubuntu(tmp_path: Path) -> Path:
    """A /proc/sys with Ubuntu 24.04's AppArmor restriction (the hook CONSOLE_BRIDGE_SYSCTL_ROOT)."""
    sysctl = tmp_path / "proc-sys"
    (sysctl / "kernel").mkdir(parents=True)
    (sysctl / "kernel" / "apparmor_restrict_unprivileged_userns").write_text("1\n")
    return sysctl


def _fake_sysctl(tmp_path: Path, sysctl: Path, *, takes_effect: bool) -> Path:
    """A `sysctl` first on PATH that accepts `-q -w KEY=VALUE` and, unless told not to, writes it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    write = f'key=${{3%%=*}}; printf "%s\\n" "${{3#*=}}" > "{sysctl}/${{key//.//}}"' if takes_effect else "true"
    fake = bin_dir / "sysctl"
    fake.write_text(f'#!/bin/bash\necho "sysctl $*" >> {tmp_path}/sysctl.calls\n{write}\n')
    fake.chmod(0o755)
    return bin_dir


def _script(tmp_path: Path, sysctl: Path, bin_dir: Path | None) -> subprocess.CompletedProcess[str]:
    path = f"{bin_dir}:/usr/bin:/bin" if bin_dir else "/usr/bin:/bin"
    env = {
        "PATH": path,
        "HOME": str(tmp_path),
        "GITHUB_ACTIONS": "true",
        "RUNNER_TEMP": str(tmp_path),
        "CONSOLE_BRIDGE_SYSCTL_ROOT": str(sysctl),
        "CONSOLE_BRIDGE_SPEC": str(tmp_path / "no-such-checkout"),  # stop right after the host settings
    }
    return subprocess.run(
        ["bash", str(REPO / SCRIPT)], env=env, capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="as_root runs sysctl directly only as root (else by sudo -n)")
def test_the_sysctl_is_set_and_read_back(tmp_path: Path, ubuntu: Path) -> None:
    proc = _script(tmp_path, ubuntu, _fake_sysctl(tmp_path, ubuntu, takes_effect=True))
    assert "sysctl -q -w kernel.apparmor_restrict_unprivileged_userns=0" in (tmp_path / "sysctl.calls").read_text()
    assert "kernel.apparmor_restrict_unprivileged_userns is now 0" in proc.stdout, proc.stdout + proc.stderr
    assert "unshare -Urm works" in proc.stdout
    assert proc.returncode == 2 and "pip install" in proc.stderr  # went on to the install (of a missing path)


@pytest.mark.skipif(os.geteuid() != 0, reason="as_root runs sysctl directly only as root (else by sudo -n)")
def test_a_sysctl_that_did_not_take_effect_stops_the_job(tmp_path: Path, ubuntu: Path) -> None:
    proc = _script(tmp_path, ubuntu, _fake_sysctl(tmp_path, ubuntu, takes_effect=False))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "kernel.apparmor_restrict_unprivileged_userns is still 1 after setting it to 0" in proc.stderr
    assert "::error title=run-analysis::kernel.apparmor_restrict_unprivileged_userns is still 1" in proc.stdout
    assert "making the venv" not in proc.stdout  # nothing installed, nothing run


def test_a_normal_user_who_cannot_sudo_is_told_what_to_run_as_root() -> None:
    user = _user()
    if user is None:
        pytest.skip("needs root and the test user cbtest")
    root = Path(tempfile.mkdtemp(prefix="cb-ci-sysctl-"))
    try:
        root.chmod(0o755)
        sysctl = root / "proc-sys" / "kernel"
        sysctl.mkdir(parents=True)
        (sysctl / "apparmor_restrict_unprivileged_userns").write_text("1\n")
        shutil.copytree(EXAMPLE, root / "ci")  # a copy readable by cbtest (the repo may not be)
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": user.pw_dir,
            "RUNNER_TEMP": str(root),
            "CONSOLE_BRIDGE_SYSCTL_ROOT": str(root / "proc-sys"),
        }
        sudo = shutil.which("sudo", path="/usr/bin:/bin")
        if (
            sudo is not None
            and subprocess.run(
                ["runuser", "-u", "cbtest", "--", sudo, "-n", "true"], capture_output=True, check=False
            ).returncode
            == 0
        ):
            pytest.skip("cbtest may sudo here")
        proc = subprocess.run(
            [
                "runuser",
                "-u",
                "cbtest",
                "--",
                "env",
                "-i",
                *(f"{k}={v}" for k, v in env.items()),
                "bash",
                str(root / "ci" / "run-analysis.sh"),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert proc.returncode == 3, proc.stdout + proc.stderr
        assert "this user cannot sudo" in proc.stderr
        assert "as root run sysctl -w kernel.apparmor_restrict_unprivileged_userns=0" in proc.stderr
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _docker_run_options(script: str) -> list[str]:
    """The options of the ``docker run`` line in a workflow step (shell continuation lines joined)."""
    joined = script.replace("\\\n", " ")
    line = next(part for part in joined.splitlines() if part.strip().startswith("docker run"))
    return shlex.split(line.split(" sh -ec ", 1)[0])


def test_the_github_container_recipe_runs_a_normal_user_under_the_shipped_profile() -> None:
    """Issue 34, item 3: the recipe's container has Docker's default seccomp profile plus the one rule
    bubblewrap needs (the shipped file), never ``seccomp=unconfined`` or ``--privileged``, and runs as a
    normal user; its options are the ones scripts/ci-container.sh runs here."""
    workflow = yaml.safe_load((EXAMPLE / "github-docker-job.yml").read_text())
    assert workflow["permissions"] == {"contents": "read"}
    steps = workflow["jobs"]["analysis-in-a-container"]["steps"]
    run = next(step["run"] for step in steps if "docker run" in step.get("run", ""))
    options = _docker_run_options(run)
    assert "--privileged" not in options and "seccomp=unconfined" not in options
    assert options[options.index("--user") + 1] == "1000:1000"
    seccomp = [options[i + 1] for i, o in enumerate(options) if o == "--security-opt" and "seccomp=" in options[i + 1]]
    assert seccomp == ["seccomp=$PWD/sandbox_profiles/seccomp-container.json"], seccomp
    assert (REPO / "sandbox_profiles" / "seccomp-container.json").is_file()
    assert "apparmor=unconfined" in options
    assert any("apparmor_restrict_unprivileged_userns=0" in step.get("run", "") for step in steps)
    tried = (REPO / "scripts" / "ci-container.sh").read_text()
    assert "--security-opt seccomp=" in tried and "--user 1000:1000" in tried


def test_the_kubernetes_recipe_matches_the_refusal_a_pod_without_it_gets() -> None:
    """Issue 34, item 3: the pod spec gives what the refusal in a Kubernetes container names (the same
    localhost profile and kubelet folder, AppArmor unconfined), as a non-root user with no privilege."""
    from console_bridge._confinement._container import PROFILE_NAME, Container

    pod = yaml.safe_load((REPO / "examples" / "k8s" / "analysis-pod.yaml").read_text())
    spec = pod["spec"]
    assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] != 0
    assert spec["automountServiceAccountToken"] is False
    [container] = spec["containers"]
    context = container["securityContext"]
    assert context["allowPrivilegeEscalation"] is False and context["capabilities"] == {"drop": ["ALL"]}
    assert context["seccompProfile"] == {"type": "Localhost", "localhostProfile": f"console-bridge/{PROFILE_NAME}"}
    assert context["appArmorProfile"] == {"type": "Unconfined"}
    refusal = Container("kubernetes", ("KUBERNETES_SERVICE_HOST",), apparmor="cri-containerd.apparmor.d").fix()
    assert f"localhostProfile: console-bridge/{PROFILE_NAME}" in refusal
    assert "appArmorProfile: {type: Unconfined}" in refusal
    kubelet = f"/var/lib/kubelet/seccomp/console-bridge/{PROFILE_NAME}"
    assert kubelet in refusal and kubelet in (REPO / "examples" / "k8s" / "analysis-pod.yaml").read_text()
