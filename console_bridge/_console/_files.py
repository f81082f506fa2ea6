"""Which files of a session's TMPDIR a glob names (pure): ``--collect GLOB``, ``list_files``."""

from __future__ import annotations

import fnmatch

from console_bridge._errors import NotAllowed

__all__ = ["check_glob", "glob_match"]


def check_glob(pattern: str) -> list[str]:
    """The components of a relative glob (``*.csv``, ``out/**/*.png``); refuses absolute ones and ``..``."""
    if not isinstance(pattern, str) or not pattern.strip() or "\x00" in pattern:
        raise NotAllowed(f"glob {pattern!r} names nothing; pass a pattern like '*.csv' or 'out/**/*.png'")
    if pattern.startswith("/"):
        raise NotAllowed(f"glob {pattern!r} is absolute; pass a pattern relative to the cell's TMPDIR, like '*.csv'")
    parts = [part for part in pattern.split("/") if part not in ("", ".")]
    if ".." in parts or not parts:
        raise NotAllowed(f"glob {pattern!r} leaves the cell's TMPDIR; pass a pattern inside it, without '..'")
    return parts


def glob_match(pattern: str, name: str) -> bool:
    """Whether the relative file ``name`` matches ``pattern`` as :mod:`glob` would (recursive).

    ``*``, ``?`` and ``[...]`` stay within one folder; ``**`` is any number of folders. Names
    starting with ``.`` match only a component that starts with ``.`` too (as the shell does).
    """
    return _match(check_glob(pattern), name.split("/"))


def _match(pattern: list[str], parts: list[str]) -> bool:
    if not pattern:
        return not parts
    head = pattern[0]
    if head == "**":
        if len(pattern) == 1:  # a trailing "**": every file below, hidden ones excepted
            return bool(parts) and not any(part.startswith(".") for part in parts)
        for index in range(len(parts)):
            if _match(pattern[1:], parts[index:]):
                return True
            if parts[index].startswith("."):
                return False
        return False
    if not parts:
        return False
    part = parts[0]
    if part.startswith(".") and not head.startswith("."):
        return False
    return fnmatch.fnmatchcase(part, head) and _match(pattern[1:], parts[1:])
