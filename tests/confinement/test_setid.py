"""The seccomp filter against set-user-ID files (``_confinement/_setid.py``), in a throwaway child."""

from __future__ import annotations

import errno
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from console_bridge._confinement import _setid

CHILD = textwrap.dedent(
    """
    import os, subprocess, sys
    sys.path.insert(0, sys.argv[1])
    import _setid
    open("f", "w").close()
    _setid.install()
    out = []
    for mode in (0o755, 0o4755, 0o2755, 0o1777):
        try:
            os.chmod("f", mode); out.append(f"chmod {mode:o} ok")
        except PermissionError:
            out.append(f"chmod {mode:o} refused")
    for name, mode in (("g", 0o4755), ("h", 0o644)):
        try:
            os.close(os.open(name, os.O_CREAT | os.O_WRONLY, mode)); out.append(f"create {mode:o} ok")
        except PermissionError:
            out.append(f"create {mode:o} refused")
    os.close(os.open("f", os.O_RDONLY, 0o4755))  # no O_CREAT: the mode argument means nothing
    out.append("open ok")
    for name in ("security.capability", "user.note", "trusted.x"):
        try:
            os.setxattr("f", name, b"caps"); out.append(f"setxattr {name} ok")
        except OSError as exc:
            out.append(f"setxattr {name} errno {exc.errno}")
    fd = os.open("f", os.O_RDONLY)
    try:
        os.setxattr(fd, "user.note", b"1")
    except OSError as exc:
        out.append(f"fsetxattr errno {exc.errno}")
    os.close(fd)
    try:
        os.listxattr("f"); out.append("listxattr ok")  # reading them still works
    except OSError as exc:
        out.append(f"listxattr errno {exc.errno}")
    done = subprocess.run(["sh", "-c", "chmod g+s f; echo $?"], capture_output=True, text=True)
    out.append("child chmod rc=" + done.stdout.strip())
    print("|".join(out))
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a Linux seccomp filter")
def test_the_filter_refuses_set_id_bits_and_nothing_else(tmp_path: Path) -> None:
    here = str(Path(_setid.__file__).parent)
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", CHILD, here], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().split("|") == [
        "chmod 755 ok",
        "chmod 4755 refused",
        "chmod 2755 refused",
        "chmod 1777 ok",  # the sticky bit is not a privilege
        "create 4755 refused",
        "create 644 ok",
        "open ok",
        # every extended attribute write, whatever its name (a filter cannot read it): EOPNOTSUPP
        f"setxattr security.capability errno {errno.EOPNOTSUPP}",
        f"setxattr user.note errno {errno.EOPNOTSUPP}",
        f"setxattr trusted.x errno {errno.EOPNOTSUPP}",
        f"fsetxattr errno {errno.EOPNOTSUPP}",
        "listxattr ok",
        "child chmod rc=1",  # inherited by every descendant
    ]
    assert not (tmp_path / "f").stat().st_mode & 0o6000


def test_every_known_architecture_has_a_program_and_others_are_refused() -> None:
    for machine in ("x86_64", "aarch64"):
        ops = _setid.program(machine)
        assert 10 < len(ops) < 256 and all(len(op) == 8 for op in ops)
    with pytest.raises(_setid.SetidError, match="riscv64"):
        _setid.program("riscv64")
