"""``%%console`` line parsing and session planning: pure functions, no kernel, no IPython."""

from __future__ import annotations

from pathlib import Path

import pytest

from console_bridge._jupyter._options import (
    DEFAULT_POLL_WINDOW,
    CellOptions,
    LanguageMissing,
    OptionsError,
    SessionSpec,
    describe_change,
    parse_cell_line,
    plan_session,
)


def test_an_empty_line_means_python_and_nothing_asked() -> None:
    assert parse_cell_line("") == CellOptions(language="python")
    assert parse_cell_line("   ") == CellOptions()


@pytest.mark.parametrize("language", ["python", "sql", "r"])
def test_the_language_is_the_one_positional_word(language: str) -> None:
    assert parse_cell_line(language).language == language


def test_every_option_is_read() -> None:
    line = "sql --profile workspace --workspace 'my data' --timeout 2.5 --poll-window 0.5 --recordings-dir rec"
    assert parse_cell_line(line) == CellOptions(
        language="sql",
        timeout=2.5,
        profile="workspace",
        workspace="my data",
        poll_window=0.5,
        recordings_dir="rec",
    )


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("cobol", "invalid choice"),
        ("--timeout 0", "positive"),
        ("--timeout -1", "positive"),
        ("--timeout nan", "positive"),
        ("--timeout inf", "positive"),
        ("--poll-window soon", "not a number"),
        ("--frobnicate", "unrecognized arguments"),
        ("--work=/tmp", "unrecognized arguments"),  # no abbreviations
        ("python sql", "unrecognized arguments"),
        ("--workspace 'unclosed", "No closing quotation"),
        ("-h", "usage"),
    ],
)
def test_bad_lines_raise_with_the_usage(line: str, says: str) -> None:
    with pytest.raises(OptionsError) as info:
        parse_cell_line(line)
    assert says in str(info.value)
    assert "%%console [python|sql|r]" in str(info.value)


def test_the_first_cell_opens_on_the_kernel_folder_with_defaults(tmp_path: Path) -> None:
    spec = plan_session(None, CellOptions(), cwd=tmp_path)
    assert spec == SessionSpec(workspace=tmp_path)
    assert (spec.profile, spec.poll_window, spec.recordings_dir) == ("read-only", DEFAULT_POLL_WINDOW, None)
    assert spec.languages == ("python", "sql")


def test_relative_paths_resolve_against_the_kernel_folder(tmp_path: Path) -> None:
    spec = plan_session(None, CellOptions(workspace="data/../ws", recordings_dir="rec"), cwd=tmp_path)
    assert spec.workspace == tmp_path / "ws"
    assert spec.recordings_dir == tmp_path / "rec"
    assert plan_session(None, CellOptions(workspace=str(tmp_path)), cwd=Path("/")).workspace == tmp_path


def test_options_not_given_keep_the_open_session(tmp_path: Path) -> None:
    current = SessionSpec(workspace=tmp_path / "ws", profile="workspace", poll_window=2.0, recordings_dir=tmp_path)
    assert plan_session(current, CellOptions(), cwd=Path("/elsewhere")) == current
    assert plan_session(current, CellOptions(language="sql", timeout=3), cwd=tmp_path) == current
    same = CellOptions(workspace=str(tmp_path / "ws"), profile="workspace")
    assert plan_session(current, same, cwd=tmp_path) == current


def test_a_new_language_or_option_changes_the_spec(tmp_path: Path) -> None:
    current = SessionSpec(workspace=tmp_path)
    # a language the open session lacks is refused (reopening would lose its state) ...
    with pytest.raises(LanguageMissing, match=r"%%console r --languages python,sql,r"):
        plan_session(current, CellOptions(language="r"), cwd=tmp_path)
    # ... unless the cell asks for it with --languages
    with_r = plan_session(current, parse_cell_line("r --languages python,sql,r"), cwd=tmp_path)
    assert with_r.languages == ("python", "sql", "r")
    assert plan_session(with_r, CellOptions(language="python"), cwd=tmp_path) == with_r
    # the first session: the defaults (the magic adds R where it is installed), plus the cell's language
    first = plan_session(None, CellOptions(language="r"), cwd=tmp_path, default_languages=("python", "sql", "r"))
    assert first.languages == ("python", "sql", "r")
    assert plan_session(None, CellOptions(language="r"), cwd=tmp_path).languages == ("python", "sql", "r")
    assert plan_session(None, parse_cell_line("sql --languages sql"), cwd=tmp_path).languages == ("sql",)
    with pytest.raises(OptionsError, match="does not include"):
        plan_session(None, parse_cell_line("r --languages python"), cwd=tmp_path)
    other = plan_session(current, CellOptions(profile="workspace", poll_window=5), cwd=tmp_path)
    assert (other.profile, other.poll_window, other.workspace) == ("workspace", 5, tmp_path)


def test_describe_change_names_what_differs(tmp_path: Path) -> None:
    old = SessionSpec(workspace=tmp_path)
    new = SessionSpec(workspace=tmp_path / "b", profile="workspace", languages=("python", "sql", "r"))
    text = describe_change(old, new)
    assert f"workspace '{tmp_path}' -> '{tmp_path / 'b'}'" in text
    assert "profile 'read-only' -> 'workspace'" in text
    assert "languages 'python, sql' -> 'python, sql, r'" in text
    assert "poll window" not in text
    assert describe_change(old, old) == ""


def test_limits_and_read_roots_on_the_cell_line(tmp_path: Path) -> None:
    """`%%console --memory 2GiB --processes 64 --best-effort --read-root data` changes the session's Limits."""
    options = parse_cell_line("--memory 2GiB --processes 64 --best-effort --read-root data --read-root /srv/x")
    assert dict(options.limits or ()) == {"memory": "2GiB", "processes": 64, "enforce": "best_effort"}
    spec = plan_session(None, options, cwd=tmp_path)
    assert spec.read_roots == (tmp_path / "data", Path("/srv/x"))
    assert dict(spec.limits) == {"memory": "2GiB", "processes": 64, "enforce": "best_effort"}
    same = plan_session(spec, parse_cell_line(""), cwd=tmp_path)
    assert same == spec  # a later cell without the options keeps the session
    changed = plan_session(spec, parse_cell_line("--strict"), cwd=tmp_path)
    assert "limits" in describe_change(spec, changed)
    with pytest.raises(OptionsError, match="contradict"):
        parse_cell_line("--best-effort --strict")


def test_every_limit_of_the_command_line_and_none_on_the_cell_line(tmp_path: Path) -> None:
    """The magic takes the command line's limits (`--recording-limit`, `--writes-limit` too), and
    `none` for no limit, which changes the session like any other value."""
    options = parse_cell_line("--writes-limit 512MiB --recording-limit none --memory none --processes none --cpu 1.5")
    assert dict(options.limits or ()) == {
        "writes": "512MiB",
        "recording": None,
        "memory": None,
        "processes": None,
        "cpu": 1.5,
    }
    spec = plan_session(None, parse_cell_line("--recording-limit 64MiB"), cwd=tmp_path)
    lifted = plan_session(spec, parse_cell_line("--recording-limit NONE --strict"), cwd=tmp_path)
    assert dict(lifted.limits) == {"recording": None, "enforce": "strict"} and "limits" in describe_change(spec, lifted)
    with pytest.raises(OptionsError, match=r"'lots' is not a whole number \(or none for no limit\)"):
        parse_cell_line("--processes lots")
    assert dict(parse_cell_line("--files-limit 1000").limits or ()) == {"files": 1000}
    assert dict(parse_cell_line("--files-limit none").limits or ()) == {"files": None}
    with pytest.raises(OptionsError, match=r"usage: .*--writes-limit SIZE"):
        parse_cell_line("--writes")
