"""``--tokens``: parsing, the 0600 rule, lookups and reloads (pure, on real files)."""

from __future__ import annotations

from pathlib import Path

import pytest

from console_bridge import NotAllowed
from console_bridge._serve._identity import Identities, parse_tokens

A = "alice-token-0123456789"
B = "bob-token-0123456789ab"


def write(path: Path, text: str, mode: int = 0o600) -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path


def test_tokens_name_identities(tmp_path: Path) -> None:
    ids = Identities.from_file(write(tmp_path / "t", f"# clients\n{A} alice\n\n{B}   bob\n"))
    assert ids.authenticate(f"Bearer {A}") == "alice"
    assert ids.authenticate(f"Bearer {B}") == "bob"
    assert ids.authenticate(f"Bearer {A}x") is None
    assert ids.authenticate(A) is None and ids.authenticate(None) is None
    # the scheme is case-insensitive (RFC 7235; lowercase `bearer` was refused: issue 32)
    assert ids.authenticate(f"bearer {A}") == "alice" and ids.authenticate(f"BEARER  {B}") == "bob"
    assert ids.authenticate("Bearer ") is None and ids.authenticate(f"Basic {A}") is None


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("short alice\n", "shorter than 16"),
        (f"{A}\n", "two words"),
        (f"{A} alice extra\n", "two words"),
        (f"{A} alice\n{A} bob\n", "already given"),
        (f"{A} 'bad owner'\n", "two words"),
        (f"{A} al/ice\n", "letters, digits"),
        ("# nothing\n", "no `TOKEN OWNER`"),
    ],
)
def test_bad_token_lines_are_refused_by_line(text: str, problem: str) -> None:
    with pytest.raises(NotAllowed, match=problem):
        parse_tokens(text, "t")


def test_a_token_file_others_can_read_is_refused_with_the_fix(tmp_path: Path) -> None:
    path = write(tmp_path / "t", f"{A} alice\n", 0o644)
    with pytest.raises(NotAllowed, match=r"chmod 600"):
        Identities.from_file(path)


def test_reload_takes_new_tokens_and_keeps_the_old_on_error(tmp_path: Path) -> None:
    path = write(tmp_path / "t", f"{A} alice\n")
    ids = Identities.from_file(path)
    write(path, f"{B} bob\n")
    assert "1 token(s)" in ids.reload()
    assert ids.authenticate(f"Bearer {A}") is None and ids.authenticate(f"Bearer {B}") == "bob"
    write(path, "broken\n")
    assert "not reloaded" in ids.reload()
    assert ids.authenticate(f"Bearer {B}") == "bob"
