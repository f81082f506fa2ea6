"""Launch refusals that need no server: the argument allowlist, writable roots, profiles,
version translation, project config, environment keys, languages and the worker's Python."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from packaging.version import Version

from console_bridge import AsyncConsole, LaunchRefused, VersionRefused
from console_bridge._vetting._launch import SCRATCH_DIRS, SYSTEM_DIRS, split_args, validate_root, worker_python
from console_bridge._vetting._profiles import available_profiles, load_profile, translate
from console_bridge._vetting._sandbox import TMPDIR, WORKSPACE, SandboxPolicy

HOME = Path.home().resolve()
VENV = Path(__file__).resolve().parents[2] / ".venv"
MCP_CONSOLE = VENV / "bin" / "mcp-console"
ACCEPTED_C = "sandbox.network=restricted"


def unsafe_root(root: Path) -> str | None:
    """Why ``root`` must never be a writable root, or None when it may be."""
    if not root.is_absolute() or not root.is_dir() or root != root.resolve():
        return "not an existing absolute resolved directory"
    if root == Path("/") or root == HOME or root in HOME.parents:
        return "root, home or an ancestor of home"
    if root == Path("/tmp") or str(root) in SCRATCH_DIRS:
        return "a shared temporary folder"
    for system in map(Path, SYSTEM_DIRS):
        inside = root == system or system in root.parents
        scratch = any(Path(s) in root.parents for s in SCRATCH_DIRS)
        if inside and not scratch:
            return f"inside {system}"
    return None


# ------------------------------------------------------------ the args allowlist


@pytest.fixture
def paths(tmp_path: Path) -> dict[str, str]:
    """Placeholders for the refused-argument table."""
    (tmp_path / "file").write_text("x", encoding="utf-8")
    (tmp_path / "etc-link").symlink_to("/etc")
    return {
        "home": str(HOME),
        "file": str(tmp_path / "file"),
        "etc_link": str(tmp_path / "etc-link"),
        "tmp_up": str(tmp_path / ".." / ".." / ".." / ".."),
        "missing": str(tmp_path / "nonexistent"),
    }


#: (args, text the refusal must name); ``@name@`` is filled from the ``paths`` fixture.
REFUSED_ARGS: list[tuple[list[str], str]] = [
    (["--no-sandbox"], "--no-sandbox"),
    (["--no-config"], "--no-config"),
    (["--no-global-config"], "--no-global-config"),
    (["--no-project-config"], "--no-project-config"),
    (["--config-file", "x"], "--config-file"),
    (["--config-file=x"], "--config-file=x"),
    (["--default-config", "k=v"], "--default-config"),
    (["--default-config=sandbox.network=enabled"], "--default-config"),
    (["-c", "sandbox.network=enabled"], "sandbox.network=enabled"),
    (["-c", "sandbox.network={proxy: {domains: {allow: [example.com]}}}"], "sandbox.network={proxy"),
    (["-c", "sandbox.network.proxy.domains.allow=[example.com]"], "sandbox.network.proxy.domains.allow"),
    (["-c", "sandbox.network=restricted # comment"], "sandbox.network=restricted # comment"),
    (["-c", "sandbox.network='restricted'"], "sandbox.network='restricted'"),
    (["-c", "sandbox.filesystem.read_write=[/]"], "sandbox.filesystem.read_write=[/]"),
    (["-c", "sandbox.filesystem.deny=[]"], "sandbox.filesystem.deny"),
    (["-c", "sandbox.profile=workspace"], "sandbox.profile=workspace"),
    (["-c", "sandbox.profile=inherit_codex"], "sandbox.profile=inherit_codex"),
    (["-c", "sandbox.tempdir=read_write"], "sandbox.tempdir=read_write"),
    (["-c", "sandbox={}"], "sandbox={}"),
    (["-c", "environment.X=1"], "environment.X=1"),
    (["-c", "inherit_environment=true"], "inherit_environment"),
    (["-c", "python=/usr"], "python=/usr"),
    (["-c", "r.resolution=disabled"], "r.resolution"),
    (["-c", "tool.description=x"], "tool.description=x"),
    (["-c", "tool.parameters.requirements.enabled=true"], "tool.parameters.requirements.enabled"),
    (["-c", "languages=[r]"], "languages=[r]"),
    (["-c", "resolver.x=y"], "resolver.x=y"),
    (["-c", "startup.code=import os"], "startup.code"),
    (["-c", "cache.x=y"], "cache.x=y"),
    (["-csandbox.network=enabled"], "sandbox.network=enabled"),
    (["--config=sandbox.network=enabled"], "sandbox.network=enabled"),
    (["--config", "sandbox.network=enabled"], "sandbox.network=enabled"),
    (["-c"], "-c"),
    (["--config"], "--config"),
    (["-c", "sandbox.network=restricted", "-c", "sandbox.network=enabled"], "sandbox.network=enabled"),
    (["--unknown"], "--unknown"),
    (["--writable-rootx", "/srv"], "--writable-rootx"),
    (["--c", "sandbox.network=restricted"], "--c"),
    (["-C", "sandbox.network=restricted"], "-C"),
    (["serve"], "serve"),
    (["-"], "-"),
    (["--"], "--"),
    (["--writable-root", "/tmp/a\x00b"], "NUL"),
    (["-c", "sandbox.network=restricted\x00"], "NUL"),
    (["-c", "sandbox.network=restricted\n-c sandbox.network=enabled"], "line break"),
    (["--no-sandbox\n"], "line break"),
    (["--writable-root", "/tmp/x\ny"], "line break"),
    (["--writable-root"], "--writable-root needs a PATH"),
    (["--writable-root="], "empty"),
    (["--writable-root", "/"], "'/'"),
    (["--writable-root=/"], "'/'"),
    (["--writable-root", "~"], "'~'"),
    (["--writable-root", "@home@"], "@home@"),
    (["--writable-root", "/usr"], "/usr"),
    (["--writable-root", "/usr/local"], "/usr/local"),
    (["--writable-root", "/etc/ssh" if Path("/etc/ssh").is_dir() else "/etc"], "/etc"),
    (["--writable-root", "/var"], "/var"),
    (["--writable-root", "/proc/self"], "/proc/self"),
    (["--writable-root", "/dev/shm" if Path("/dev/shm").is_dir() else "/dev"], "/dev"),
    (["--writable-root", "/tmp"], "/tmp"),
    (["--writable-root", "/tmp/"], "/tmp/"),
    (["--writable-root", "/var/tmp"], "/var/tmp"),
    (["--writable-root", "/tmp/../etc"], "/tmp/../etc"),
    (["--writable-root", "@etc_link@"], "@etc_link@"),
    (["--writable-root", "@tmp_up@"], "@tmp_up@"),
    (["--writable-root", "@file@"], "not a directory"),
    (["--writable-root", "@missing@"], "does not exist"),
    (["--writable-root", "nonexistent"], "nonexistent"),
    (["--writable-root", "~no-such-user-here/x"], "~no-such-user-here/x"),
    (["--writable-root", "/" + "a" * 5000], "aaaa"),
    (["--writable-root", "/tmp/" + "/".join(["d" * 200] * 30)], "dddd"),
]
#: The number of refused-argument cases above (reported; kept in sync by a test).
REFUSED_COUNT = 71


def _fill(items: list[str], paths: dict[str, str]) -> list[str]:
    for name, value in paths.items():
        items = [item.replace(f"@{name}@", value) for item in items]
    return items


@pytest.mark.parametrize(("args", "needle"), REFUSED_ARGS, ids=[repr(case[0])[:60] for case in REFUSED_ARGS])
def test_refused_argument(paths: dict[str, str], args: list[str], needle: str) -> None:
    args = _fill(args, paths)
    needle = _fill([needle], paths)[0]
    with pytest.raises(LaunchRefused) as caught:
        split_args(args)
    assert type(caught.value) is LaunchRefused
    assert needle in str(caught.value)


def test_refused_count() -> None:
    assert len(REFUSED_ARGS) == REFUSED_COUNT


def test_refused_argument_message_names_the_alternative() -> None:
    with pytest.raises(LaunchRefused) as caught:
        split_args(["--no-sandbox"])
    message = str(caught.value)
    assert "disables the sandbox" in message
    assert "--writable-root PATH" in message and "-c sandbox.network=restricted" in message


@pytest.mark.parametrize("bad", ["--writable-root /x", ["--writable-root", 3], [b"--no-sandbox"]])
def test_args_must_be_a_sequence_of_strings(bad: Any) -> None:
    with pytest.raises(LaunchRefused, match="sequence of strings"):
        split_args(bad)


def test_refused_argument_through_the_console(tmp_path: Path) -> None:
    with pytest.raises(LaunchRefused, match="--no-sandbox"):
        AsyncConsole(tmp_path, args=["--no-sandbox"])
    with pytest.raises(LaunchRefused, match="'/'"):
        AsyncConsole(tmp_path, writable_roots=["/"])


def test_accepted_arguments(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two words"
    one.mkdir()
    two.mkdir()
    roots, extra = split_args(
        [
            "--writable-root",
            str(one),
            f"--writable-root={two}",
            "-c",
            ACCEPTED_C,
            "-c",
            " sandbox.network = restricted ",
            "-c" + ACCEPTED_C,
            "--config=" + ACCEPTED_C,
            "--config",
            ACCEPTED_C,
        ]
    )
    assert roots == [one.resolve(), two.resolve()]
    assert extra == ["-c", ACCEPTED_C] * 5
    assert split_args([]) == ([], [])


def test_accepted_roots_are_resolved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "real"
    target.mkdir()
    (tmp_path / "link").symlink_to(target)
    monkeypatch.chdir(tmp_path)
    assert split_args(["--writable-root", "link"])[0] == [target.resolve()]
    assert split_args(["--writable-root", "real/../real"])[0] == [target.resolve()]
    assert validate_root(tmp_path / "link") == target.resolve()


def test_a_folder_inside_var_tmp_is_accepted() -> None:
    if not Path("/var/tmp").is_dir() or not os.access("/var/tmp", os.W_OK):
        pytest.skip("no writable /var/tmp")
    folder = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="cb-test-"))
    try:
        assert split_args(["--writable-root", str(folder)])[0] == [folder.resolve()]
    finally:
        folder.rmdir()


# -------------------------------------------------- the allowlist, as a property


@pytest.fixture(scope="module")
def good_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("grant")
    (folder / "sub").mkdir()
    return folder


FLAGS = [
    "--no-sandbox",
    "--no-config",
    "--no-global-config",
    "--no-project-config",
    "--config-file",
    "--default-config",
    "--writable-root",
    "--writable-rootx",
    "-c",
    "--config",
    "-C",
    "--c",
    "-",
    "--",
    "--unknown",
    "-cc",
    "--WRITABLE-ROOT",
    "--config-file=x",
]
KEYS = [
    "sandbox.network",
    "sandbox.profile",
    "sandbox.tempdir",
    "sandbox.filesystem.read_write",
    "sandbox.network.proxy.domains.allow",
    "sandbox",
    "python",
    "environment.X",
    "inherit_environment",
    "tool.description",
    "languages",
    "resolver.x",
    "startup.code",
    "r.home",
]
VALUES = ["restricted", "enabled", "workspace", "read_write", "inherit_codex", "[/]", "{proxy: {}}", "'restricted'"]


def _argv_strategy(good: Path) -> st.SearchStrategy[list[str]]:
    text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)
    flag = st.sampled_from(FLAGS) | text.map(lambda t: "-" + t) | text.map(lambda t: "--" + t)
    spaces = st.sampled_from(["", " ", "  "])
    setting = st.builds(
        lambda k, a, b, v: f"{k}{a}={b}{v}",
        st.sampled_from(KEYS) | text,
        spaces,
        spaces,
        st.sampled_from(VALUES) | text,
    )
    c_form = st.one_of(
        setting.map(lambda s: ["-c", s]),
        setting.map(lambda s: ["-c" + s]),
        setting.map(lambda s: ["--config=" + s]),
        setting.map(lambda s: ["--config", s]),
    )
    path = (
        st.sampled_from(
            [
                "/",
                str(HOME),
                "~",
                "/usr",
                "/etc",
                "/tmp",
                "/var/tmp",
                "/var",
                str(good),
                str(good / "sub"),
                str(good / "sub" / ".."),
                str(good / ".." / ".."),
                "nonexistent",
                "",
                "/proc/self",
                "~no-such-user-here",
                "/" + "n" * 300,
            ]
        )
        | text.map(lambda t: str(good / t))
        | text
    )
    root_form = st.one_of(path.map(lambda p: ["--writable-root", p]), path.map(lambda p: ["--writable-root=" + p]))
    item = st.one_of(flag.map(lambda f: [f]), c_form, root_form, text.map(lambda t: [t]))
    return st.lists(item, max_size=6).map(lambda parts: [token for part in parts for token in part])


def _check_accepted(argv: list[str], roots: list[Path], extra: list[str]) -> None:
    """``split_args`` returned: only the two accepted forms were present, and their values are safe."""
    assert extra == ["-c", ACCEPTED_C] * (len(extra) // 2)
    for root in roots:
        assert unsafe_root(root) is None, (root, unsafe_root(root))
    index = 0
    while index < len(argv):
        token = argv[index]
        if token == "--writable-root":
            index += 2
            continue
        if token in ("-c", "--config"):
            assert argv[index + 1].replace(" ", "") == ACCEPTED_C
            index += 2
            continue
        compact = token.replace(" ", "")
        assert token.startswith("--writable-root=") or compact in ("-c" + ACCEPTED_C, "--config=" + ACCEPTED_C), token
        index += 1


def test_allowlist_property(good_dir: Path) -> None:
    @settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(argv=_argv_strategy(good_dir))
    def check(argv: list[str]) -> None:
        try:
            roots, extra = split_args(argv)
        except LaunchRefused:
            return
        _check_accepted(argv, roots, extra)

    check()


# ------------------------------------------------------------------- profiles


def write_profile(tmp_path: Path, body: str, name: str = "p.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body), encoding="utf-8")
    return path


EXPECT_TMP = "expects: {sandboxed: true, network: restricted, writable: [tmpdir]}\n"
EXPECT_WS = "expects: {sandboxed: true, network: restricted, writable: [tmpdir, workspace]}\n"

#: (profile YAML, the key the refusal must name).
REFUSED_PROFILES: list[tuple[str, str]] = [
    ("server: {sandbox.network: enabled}\n" + EXPECT_TMP, "sandbox.network"),
    ("server: {sandbox: {network: enabled}}\n" + EXPECT_TMP, "sandbox.network"),
    ("server: {sandbox.network: {proxy: {domains: {allow: [example.com]}}}}\n" + EXPECT_TMP, "sandbox.network"),
    ("server: {sandbox: {network: {proxy: {domains: {allow: []}}}}}\n" + EXPECT_TMP, "sandbox.network"),
    ("server: {sandbox.profile: inherit_codex}\n" + EXPECT_TMP, "sandbox.profile"),
    ("server: {sandbox.profile: full_access}\n" + EXPECT_TMP, "sandbox.profile"),
    ("server: {sandbox.tempdir: read_write}\n" + EXPECT_TMP, "sandbox.tempdir"),
    ("server: {sandbox.filesystem.read_write: [/data]}\n" + EXPECT_TMP, "sandbox.filesystem.read_write"),
    ("server: {sandbox.filesystem.read_write: ['../sibling']}\n" + EXPECT_TMP, "sandbox.filesystem.read_write"),
    ("server: {sandbox.filesystem.read_write: ['out/../../x']}\n" + EXPECT_TMP, "sandbox.filesystem.read_write"),
    ("server: {sandbox.filesystem.read_write: ['~/x']}\n" + EXPECT_TMP, "sandbox.filesystem.read_write"),
    ("server: {sandbox.filesystem.read_write: out}\n" + EXPECT_TMP, "sandbox.filesystem.read_write"),
    ("server: {sandbox: {filesystem: {read_write: [/]}}}\n" + EXPECT_TMP, "sandbox.filesystem.read_write"),
    ("server: {environment: {X: '1'}}\n" + EXPECT_TMP, "environment.X"),
    ("server: {inherit_environment: true}\n" + EXPECT_TMP, "inherit_environment"),
    ("server: {executables: {git: /usr/bin/git}}\n" + EXPECT_TMP, "executables.git"),
    ("server: {python: /usr}\n" + EXPECT_TMP, "python"),
    ("server: {r: {home: /usr/lib/R}}\n" + EXPECT_TMP, "r.home"),
    ("server: {tool: {description: x}}\n" + EXPECT_TMP, "tool.description"),
    ("server: {startup: {language: python, code: x}}\n" + EXPECT_TMP, "startup.language"),
    ("server: {resolver: {index: x}}\n" + EXPECT_TMP, "resolver.index"),
    ("server: {sandbox.enabled: false}\n" + EXPECT_TMP, "sandbox.enabled"),
    ("server: {no_sandbox: true}\n" + EXPECT_TMP, "no_sandbox"),
    ("server: {sandbox: null}\n" + EXPECT_TMP, "sandbox"),
    ("server: {}\nexpects: {sandboxed: true, network: enabled, writable: [tmpdir]}\n", "expects.network"),
    ("server: {}\nexpects: {sandboxed: false, network: restricted, writable: []}\n", "expects.sandboxed"),
    ("server: {}\nexpects: {network: restricted, writable: [tmpdir]}\n", "expects.sandboxed"),
    ("server: {}\n" + EXPECT_WS, "expects.writable"),
    ("server: {sandbox.profile: workspace}\n" + EXPECT_TMP, "expects.writable"),
    ("server: {sandbox.tempdir: read_only}\n" + EXPECT_TMP, "expects.writable"),
    ("server: {}\nexpects: {sandboxed: true, network: restricted, writable: [tmpdir, host_tmp]}\n", "expects.writable"),
    ("server: {}\nexpects: {sandboxed: true, network: restricted, writable: tmpdir}\n", "expects.writable"),
    ("server: {}\nexpects: {sandboxed: true, network: restricted, writable: [tmpdir], paths: []}\n", "expects.paths"),
    ("server: {}\n", "expects"),
    ("extends: ':workspace'\nserver: {}\n" + EXPECT_TMP, "extends"),
    ("server: {}\nenvironment: {X: '1'}\n" + EXPECT_TMP, "environment"),
]


@pytest.mark.parametrize(("body", "key"), REFUSED_PROFILES, ids=[case[1] for case in REFUSED_PROFILES])
def test_refused_profile(tmp_path: Path, body: str, key: str) -> None:
    path = write_profile(tmp_path, body)
    with pytest.raises(LaunchRefused) as caught:
        load_profile(path)
    message = str(caught.value)
    assert f"{key!r}" in message, message
    assert str(path) in message
    assert caught.value.details["key"] == key


def test_setting_given_nested_and_dotted_is_refused(tmp_path: Path) -> None:
    """Two spellings of one setting: the refused one must not be hidden by the other."""
    path = write_profile(
        tmp_path,
        """\
        server:
          sandbox: {network: enabled}
          sandbox.network: restricted
        expects: {sandboxed: true, network: restricted, writable: [tmpdir]}
        """,
    )
    with pytest.raises(LaunchRefused, match=r"'sandbox\.network' is given twice"):
        load_profile(path)


@pytest.mark.parametrize("where", ["server", "top"])
def test_duplicate_yaml_keys_are_refused(tmp_path: Path, where: str) -> None:
    body = (
        "server:\n  sandbox.network: enabled\n  sandbox.network: restricted\n" + EXPECT_TMP
        if where == "server"
        else "server: {sandbox.network: enabled}\nserver: {}\n" + EXPECT_TMP
    )
    with pytest.raises(LaunchRefused, match="duplicate key"):
        load_profile(write_profile(tmp_path, body))


@pytest.mark.parametrize("body", ["- a\n- b\n", "server: [\n", "", "just text\n"])
def test_profile_that_is_not_a_mapping_is_refused(tmp_path: Path, body: str) -> None:
    path = write_profile(tmp_path, body)
    with pytest.raises(LaunchRefused, match="YAML"):
        load_profile(path)


def test_unknown_profile_name_is_refused() -> None:
    with pytest.raises(LaunchRefused) as caught:
        load_profile("no-such-profile")
    assert "read-only" in str(caught.value) and "workspace" in str(caught.value)


def test_refused_profile_through_the_console(tmp_path: Path) -> None:
    path = write_profile(tmp_path, "server: {sandbox.network: enabled}\n" + EXPECT_TMP)
    with pytest.raises(LaunchRefused, match=r"sandbox\.network"):
        AsyncConsole(tmp_path, profile=path)


def test_shipped_profiles_load() -> None:
    assert set(available_profiles()) >= {"read-only", "workspace"}
    read_only = load_profile("read-only")
    assert (read_only.name, read_only.base, read_only.tempdir) == ("read-only", "read_only", "managed")
    assert read_only.expects_writable == {TMPDIR}
    workspace = load_profile("workspace")
    assert (workspace.name, workspace.base, workspace.tempdir) == ("workspace", "workspace", "managed")
    assert workspace.expects_writable == {TMPDIR, WORKSPACE}
    for profile in (read_only, workspace):
        assert profile.read_write == profile.read_only == profile.deny == ()
        assert profile.as_dict()["expects"]["network"] == "restricted"


def test_narrowing_profile_loads(tmp_path: Path) -> None:
    path = write_profile(
        tmp_path,
        """\
        name: narrow
        server:
          sandbox:
            profile: read_only
            tempdir: read_only
            filesystem: {read_write: [out, 'a/b'], read_only: [/data], deny: [secrets]}
        expects: {sandboxed: true, network: restricted, writable: []}
        """,
    )
    profile = load_profile(path)
    assert profile.name == "narrow"
    assert profile.tempdir == "read_only"
    assert profile.read_write == ("out", "a/b")
    assert profile.read_only == ("/data",)
    assert profile.deny == ("secrets",)


# ------------------------------------------------------------------ translate()


def test_translate_workspace_on_006(tmp_path: Path) -> None:
    args, expected = translate(load_profile("workspace"), Version("0.0.6"), tmp_path, [])
    assert args == [
        "-c",
        "sandbox.network=restricted",
        "-c",
        "sandbox.profile=workspace",
        "-c",
        "sandbox.tempdir=managed",
    ]
    assert expected == SandboxPolicy(sandboxed=True, network="restricted", writable=frozenset({TMPDIR, WORKSPACE}))


def test_translate_workspace_on_005(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    args, expected = translate(load_profile("workspace"), Version("0.0.5"), tmp_path, [])
    settings_ = dict(arg.split("=", 1) for arg in args[1::2])
    assert args[0::2] == ["-c"] * len(settings_)
    assert "sandbox.profile" not in settings_ and "sandbox.tempdir" not in settings_
    assert settings_["sandbox.network"] == "restricted"
    assert json.loads(settings_["sandbox.filesystem.read_write"]) == [str(tmp_path)]
    assert json.loads(settings_["sandbox.filesystem.read_only"]) == [str(tmp_path / ".git")]
    assert expected.writable == frozenset({TMPDIR, str(tmp_path)})
    assert WORKSPACE not in expected.writable


@pytest.mark.parametrize("version", ["0.0.5", "0.0.6"])
def test_translate_read_only(tmp_path: Path, version: str) -> None:
    root = tmp_path / "out"
    root.mkdir()
    args, expected = translate(load_profile("read-only"), Version(version), tmp_path, [root])
    assert args[:2] == ["-c", "sandbox.network=restricted"]
    assert ("sandbox.profile=read_only" in args) == (version == "0.0.6")
    assert not any(arg.startswith("sandbox.filesystem") for arg in args)
    assert expected == SandboxPolicy(sandboxed=True, network="restricted", writable=frozenset({TMPDIR, str(root)}))


def test_translate_tempdir_read_only_needs_006(tmp_path: Path) -> None:
    path = write_profile(
        tmp_path, "server: {sandbox.tempdir: read_only}\nexpects: {sandboxed: true, network: restricted, writable: []}"
    )
    profile = load_profile(path)
    args, expected = translate(profile, Version("0.0.6"), tmp_path, [])
    assert "sandbox.tempdir=read_only" in args and expected.writable == frozenset()
    with pytest.raises(LaunchRefused, match=r"0\.0\.6"):
        translate(profile, Version("0.0.5"), tmp_path, [])


def test_translate_relative_paths_become_absolute(tmp_path: Path) -> None:
    path = write_profile(
        tmp_path,
        "server: {sandbox.filesystem.read_write: [out], sandbox.filesystem.deny: [secrets]}\n" + EXPECT_TMP,
    )
    args, expected = translate(load_profile(path), Version("0.0.6"), tmp_path, [])
    assert f"sandbox.filesystem.read_write={json.dumps([str(tmp_path / 'out')])}" in args
    assert f"sandbox.filesystem.deny={json.dumps([str(tmp_path / 'secrets')])}" in args
    assert expected.writable == frozenset({TMPDIR, str(tmp_path / "out")})


# --------------------------------------------------- the console's own refusals


def test_project_config_needs_opt_in(tmp_path: Path) -> None:
    config = tmp_path / ".agents" / "console" / "config.yaml"
    config.parent.mkdir(parents=True)
    config.write_text("sandbox:\n  network: enabled\n", encoding="utf-8")
    with pytest.raises(LaunchRefused) as caught:
        AsyncConsole(tmp_path)
    message = str(caught.value)
    assert str(config) in message and "project_config=True" in message
    console = AsyncConsole(tmp_path, project_config=True)
    assert console.project_config is True


BRIDGE_ENV = ["TMPDIR", "MCP_CONSOLE_HOME", "MCP_CONSOLE_X", "LD_PRELOAD", "LD_LIBRARY_PATH", "DYLD_INSERT_LIBRARIES"]


@pytest.mark.parametrize("key", BRIDGE_ENV)
def test_env_keys_controlled_by_the_bridge_are_refused(tmp_path: Path, key: str) -> None:
    with pytest.raises(LaunchRefused) as caught:
        AsyncConsole(tmp_path, env={key: "/x"})
    assert repr(key) in str(caught.value)


@pytest.mark.parametrize("env", [{"A": 1}, {1: "a"}, {"A": "a\x00"}, {"A\x00": "a"}])
def test_env_must_be_plain_strings(tmp_path: Path, env: dict[Any, Any]) -> None:
    with pytest.raises(LaunchRefused, match="strings"):
        AsyncConsole(tmp_path, env=env)


def test_plain_env_is_accepted(tmp_path: Path) -> None:
    AsyncConsole(tmp_path, env={"MY_SETTING": "1", "OMP_NUM_THREADS": "2"})


@pytest.mark.skipif(shutil.which("R") is not None, reason="R is installed here")
def test_r_without_r_installed_is_refused(tmp_path: Path) -> None:
    with pytest.raises(LaunchRefused) as caught:
        AsyncConsole(tmp_path, languages=["python", "r"])
    message = str(caught.value)
    assert "R is not installed" in message and "apt-get install r-base-core" in message


CONSTRUCTOR_REFUSALS: list[tuple[dict[str, Any], str]] = [
    ({"dependencies": "maybe"}, "dependencies"),
    ({"languages": "python"}, "languages"),
    ({"languages": []}, "languages"),
    ({"languages": ["python", "julia"]}, "languages"),
    ({"poll_window": 0}, "poll_window"),
    ({"timeout": -1}, "timeout"),
    ({"startup_timeout": "5"}, "startup_timeout"),
    ({"poll_window": float("nan")}, "poll_window"),
    ({"poll_window": float("inf")}, "poll_window"),
    ({"timeout": True}, "timeout"),
    ({"owner": "agent"}, "owner"),
    ({"policy": {"mode": "read_write"}}, "policy"),
]


@pytest.mark.parametrize(("kwargs", "needle"), CONSTRUCTOR_REFUSALS, ids=[repr(c[0]) for c in CONSTRUCTOR_REFUSALS])
def test_constructor_refusals(tmp_path: Path, kwargs: dict[str, Any], needle: str) -> None:
    with pytest.raises(LaunchRefused, match=needle):
        AsyncConsole(tmp_path, **kwargs)


def test_missing_workspace_is_refused(tmp_path: Path) -> None:
    with pytest.raises(LaunchRefused, match="not an existing directory"):
        AsyncConsole(tmp_path / "missing")


# ----------------------------------------------------------- the worker's Python


def test_python_must_be_a_venv(tmp_path: Path) -> None:
    prefix = tmp_path / "bare-prefix"
    (prefix / "bin").mkdir(parents=True)
    with pytest.raises(LaunchRefused) as caught:
        worker_python(prefix)
    assert "pyvenv.cfg" in str(caught.value) and str(prefix) in str(caught.value)
    with pytest.raises(LaunchRefused, match=r"does not exist; create the venv with `python3 -m venv .*missing`"):
        worker_python(tmp_path / "missing")


def test_python_venv_and_its_interpreter_are_accepted() -> None:
    assert worker_python(VENV) == VENV
    assert worker_python(VENV / "bin" / "python") == VENV


@pytest.mark.anyio
async def test_python_is_refused_at_start_before_anything_runs(tmp_path: Path) -> None:
    if not MCP_CONSOLE.exists():
        pytest.skip("mcp-console is not installed in the venv")
    console = AsyncConsole(tmp_path, command=MCP_CONSOLE, python=tmp_path, recordings_dir=tmp_path / "rec")
    with pytest.raises(LaunchRefused, match=r"pyvenv\.cfg") as caught:
        await console.start()
    assert not isinstance(caught.value, VersionRefused)
    assert console.pid is None
    assert console.status().tmpdir is None  # no private TMPDIR was made
    assert console.status().state == "closed"
