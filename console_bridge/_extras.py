"""What to install for an optional integration, named by the packages themselves.

console-bridge is not on a package index, so an install hint of the form
``pip install 'console-bridge[ray]'`` would fetch whatever an index serves under that name (a
dependency-confusion trap). Hints name the extra's own requirements instead, read from this
installation's metadata (``pip install 'ray<3,>=2.40'``), with the extra named for reference.
"""

from __future__ import annotations

import importlib.metadata
import re
import shlex
from collections.abc import Iterable

__all__ = ["install_hint", "requirements_of"]

_EXTRA = re.compile(r"""^(?P<requirement>[^;]+);\s*extra\s*==\s*["'](?P<extra>[^"']+)["']\s*$""")


def requirements_of(extra: str) -> list[str]:
    """The requirements of ``extra`` (``["ray<3,>=2.40"]``); empty when the metadata is missing."""
    try:
        requires = importlib.metadata.requires("console-bridge") or []
    except importlib.metadata.PackageNotFoundError:
        return []
    found = []
    for line in requires:
        match = _EXTRA.match(line)
        if match and match["extra"] == extra:
            found.append(match["requirement"].strip())
    return found


def install_hint(extra: str, only: Iterable[str] | None = None, *, pip: str = "pip") -> str:
    """``pip install 'ray<3,>=2.40'`` for ``extra`` (``only``: just these distributions of it)."""
    wanted = {name.lower() for name in only} if only is not None else None
    requirements = [
        requirement
        for requirement in requirements_of(extra)
        if wanted is None or re.split(r"[<>=!~\[ ]", requirement, maxsplit=1)[0].lower() in wanted
    ]
    if not requirements:  # (no metadata: an uninstalled checkout) the names alone
        requirements = sorted(wanted or [extra])
    return f"{pip} install {' '.join(shlex.quote(r) for r in requirements)} (console-bridge's [{extra}] extra)"
