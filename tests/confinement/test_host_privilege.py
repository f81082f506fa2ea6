"""No cell holds a host privilege, whoever starts the session (issue 29), attacked from cells.

Started by root, a session's ids are an unprivileged block of host ids (``_idmap``); started by
a normal user, the user's own. Every attack here must fail AND the session must still work:
the ``core_pattern`` helper (host code execution), a scan of every ``/proc/sys`` entry, the host
name, the host's keyrings, root-only files in the trees the view shows, and the owner of what a
cell writes. Writes to kernel settings are tried by opening for writing only (the kernel checks
at ``open``), so a failing guarantee shows up without changing the host.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import secrets
import shutil
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from console_bridge import AsyncConsole
from console_bridge._confinement._namespaces import SYSCALLS
from tests.support.binaries import binary_for
from tests.support.places import ROOT

pytestmark = [pytest.mark.anyio, pytest.mark.console, pytest.mark.usefixtures("no_leaks")]

HAS_R = shutil.which("R") is not None
ROOT_HOST = os.geteuid() == 0
CANARY = "ROOTONLY-" + secrets.token_hex(4)
#: Sysctls that belong to the namespace of the one who writes them: a cell's are its sandbox's own
#: IPC namespace's (SysV limits, POSIX message queues) and PID namespace's (pid_max since Linux 6.14).
IPC_SYSCTLS = {
    f"/proc/sys/kernel/{name}"
    for name in (
        *("auto_msgmni", "msgmax", "msgmnb", "msgmni", "msg_next_id", "sem", "sem_next_id"),
        *("shmall", "shmmax", "shmmni", "shm_next_id", "shm_rmid_forced"),
    )
}
PID_SYSCTLS = {"/proc/sys/kernel/ns_last_pid", "/proc/sys/kernel/pid_max"}

SCAN = r"""
import json, os
writable = []
for folder, _dirs, files in os.walk("/proc/sys"):
    for name in files:
        path = os.path.join(folder, name)
        if os.access(path, os.W_OK):
            writable.append(path)
opened = {}
for path in ("/proc/sys/kernel/core_pattern", "/proc/sys/kernel/hostname", "/proc/sys/kernel/randomize_va_space",
             "/proc/sysrq-trigger"):
    try:
        os.close(os.open(path, os.O_WRONLY))  # the kernel checks here; nothing is written
        opened[path] = "opened"
    except OSError as exc:
        opened[path] = exc.strerror
try:
    import socket
    socket.sethostname("pwned-by-a-cell")
    hostname = "changed"
except OSError as exc:
    hostname = exc.strerror
print("RESULT " + json.dumps({"writable": writable, "opened": opened, "hostname": hostname,
                              "uid_map": open("/proc/self/uid_map").read().split(), "proc": os.stat("/proc").st_dev}))
"""

R_SCAN = r"""
paths <- list.files("/proc/sys", recursive = TRUE, full.names = TRUE)
ok <- suppressWarnings(file.access(paths, 2)) == 0
cat("RESULT", paste(paths[ok], collapse = ","), "\n")
"""


def _console(workspace: Path, version: str = "0.0.6", **kwargs: object) -> AsyncConsole:
    return AsyncConsole(workspace, command=binary_for(version), **kwargs)  # type: ignore[arg-type]


def _result(text: str) -> dict[str, object]:
    line = next(line for line in text.splitlines() if line.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])  # type: ignore[no-any-return]


def _foreign(writable: list[str]) -> list[str]:
    """Writable entries that are not the cell's own IPC or PID namespace's."""
    return [
        path
        for path in writable
        if path not in IPC_SYSCTLS | PID_SYSCTLS and not path.startswith("/proc/sys/fs/mqueue/")
    ]


@pytest.fixture
def root_only_files() -> Iterator[list[Path]]:
    """A root-only (0600) canary in each tree the view shows beyond /etc: /opt, /usr/local, the
    worker venv and its base Python."""
    if not ROOT_HOST:
        pytest.skip(
            "planting root-only files needs root; as a normal user the cells run as that user "
            "(test_no_cell_reaches_a_host_privilege checks their uid)"
        )
    folders = [Path("/opt"), Path("/usr/local"), ROOT / ".venv", Path(sys.base_prefix)]
    made = []
    try:
        for folder in folders:
            path = folder / f".console-bridge-test-{secrets.token_hex(4)}"  # (the name does not hold CANARY)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            os.write(fd, f"{CANARY}\n".encode())
            os.close(fd)
            made.append(path)
        yield made
    finally:
        for path in made:
            path.unlink(missing_ok=True)


class _Keys:
    """The host's user keyring with a key in it (``add_key``/``keyctl`` by number, as the bridge does)."""

    KEY_SPEC_USER_KEYRING = -4
    KEYCTL_INVALIDATE = 21

    def __init__(self) -> None:
        numbers = {"x86_64": (248, 250), "aarch64": (217, 219)}.get(os.uname().machine)
        if numbers is None or os.uname().machine not in SYSCALLS:
            pytest.skip(f"no add_key number known for {os.uname().machine}")
        self.add_key, self.keyctl = numbers
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.name = f"console-bridge-test-{secrets.token_hex(4)}"
        payload = CANARY.encode()
        serial = self.libc.syscall(
            self.add_key, b"user", self.name.encode(), payload, len(payload), self.KEY_SPEC_USER_KEYRING
        )
        if serial < 0:
            pytest.skip(f"add_key refused here ({os.strerror(ctypes.get_errno())}): no keyring to attack")
        self.serial = int(serial)

    def close(self) -> None:
        self.libc.syscall(self.keyctl, self.KEYCTL_INVALIDATE, self.serial)


@pytest.fixture
def host_key() -> Iterator[_Keys]:
    keys = _Keys()
    try:
        yield keys
    finally:
        keys.close()


def _key_attack(keys: _Keys) -> str:
    return f"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
buf = ctypes.create_string_buffer(256)
got = libc.syscall({keys.keyctl}, 11, {keys.serial}, buf, 256)  # KEYCTL_READ
print("READ", got, buf.value[:64], os.strerror(ctypes.get_errno()))
found = libc.syscall({keys.keyctl}, 10, -4, b"user", {keys.name.encode()!r}, 0)  # KEYCTL_SEARCH the user keyring
print("SEARCH", found)
print("LISTED", {keys.name!r} in open("/proc/keys").read())
"""


@pytest.mark.parametrize("version", ["0.0.5", "0.0.6"])
@pytest.mark.parametrize("profile", ["read-only", "workspace"])
async def test_no_cell_reaches_a_host_privilege(
    version: str, profile: str, workspace: Path, recordings: Path, host_key: _Keys
) -> None:
    langs = ("python", "sql", "r") if HAS_R and version == "0.0.6" else ("python", "sql")
    host_name = socket.gethostname()
    core_pattern = Path("/proc/sys/kernel/core_pattern").read_text()
    async with _console(workspace, version, profile=profile, languages=langs, recordings_dir=recordings) as c:
        scan = await c.run(python=SCAN)
        assert scan.error is None, scan.combined
        found = _result(scan.text)
        writable = list(found["writable"])  # type: ignore[call-overload]
        assert _foreign(writable) == [], ", ".join(writable)
        opened = dict(found["opened"])  # type: ignore[call-overload]
        assert "opened" not in opened.values(), opened
        assert found["hostname"] != "changed"
        # the cells' /proc is a procfs of their own pid namespace, not the host's (a read-only bind over the
        # host's /proc/sys in the server's view would make mcp-console's sandbox fall back to binding it)
        assert found["proc"] != os.stat("/proc").st_dev
        # the session's root is the invoking user's ids (a normal user) or an unprivileged block (root)
        ids = c.status().extra["ids"]
        root_is = int(str(ids["uid"]).split()[1])
        assert (root_is >= 65536) if ROOT_HOST else (root_is == os.geteuid()), ids
        worker = psutil_worker(c)
        for kind in ("ipc", "pid", "uts", "user"):  # what it may write is its own namespaces', never the host's
            assert os.readlink(f"/proc/{worker}/ns/{kind}") != os.readlink(f"/proc/self/ns/{kind}"), kind
        keys = await c.run(python=_key_attack(keys=host_key))
        # never possessed (a session keyring of its own): no payload, no search hit. A normal user's own
        # keys stay listed to its cells (same uid, the "view" permission); root's are not even listed.
        assert CANARY not in keys.combined and "READ -1" in keys.text and "SEARCH -1" in keys.text, keys.text
        assert ("LISTED False" in keys.text) or not ROOT_HOST, keys.text
        if "r" in langs:
            r_scan = await c.run(r=R_SCAN)
            line = next(line for line in r_scan.text.splitlines() if line.startswith("RESULT"))
            r_writable = [path for path in line[len("RESULT") :].strip().split(",") if path]
            assert _foreign(r_writable) == [], r_writable
        assert (await c.run(python="print(6 * 7)")).text.strip() == "42"
    assert socket.gethostname() == host_name
    assert Path("/proc/sys/kernel/core_pattern").read_text() == core_pattern


def psutil_worker(console: AsyncConsole) -> int:
    """The pid of the session's mcp-console worker (host side)."""
    import psutil

    supervisor = console.status().supervisor_pid
    assert supervisor is not None
    for proc in psutil.Process(supervisor).children(recursive=True):
        argv = proc.cmdline()
        if len(argv) > 1 and argv[1] == "worker":
            return proc.pid
    raise AssertionError("no worker in the session's tree")


@pytest.mark.parametrize("profile", ["read-only", "workspace"])
async def test_root_only_files_in_shown_trees_are_unreadable(
    profile: str, root_only_files: list[Path], workspace: Path, recordings: Path
) -> None:
    langs = ("python", "sql", "r") if HAS_R else ("python", "sql")
    async with _console(workspace, profile=profile, languages=langs, recordings_dir=recordings) as c:
        for path in root_only_files:
            out = await c.run(python=f"print(open({str(path)!r}).read())")
            assert CANARY not in out.combined and "PermissionError" in out.combined, (path, out.combined)
            sql = await c.run(sql=f"select content from read_text('{path}')")
            assert CANARY not in sql.combined and sql.is_error, (path, sql.combined)
            if "r" in langs:
                r_out = await c.run(r=f'tryCatch(cat(readLines("{path}")), error = function(e) cat("denied"))')
                assert CANARY not in r_out.combined and "denied" in r_out.combined, (path, r_out.combined)
        assert (await c.run(python="print(6 * 7)")).text.strip() == "42"


async def test_what_cells_write_belongs_to_the_invoking_user(tmp_path: Path, workspace: Path, recordings: Path) -> None:
    extra = tmp_path / "out"
    extra.mkdir()
    me = (os.geteuid(), os.getegid())
    async with _console(workspace, profile="workspace", writable_roots=[extra], recordings_dir=recordings) as c:
        code = (
            "import os\n"
            "os.makedirs('made/deeper', exist_ok=True)\n"
            "open('made/deeper/f.txt', 'w').write('w')\n"
            f"open({str(extra / 'g.txt')!r}, 'w').write('g')\n"
            "print(os.stat('made/deeper/f.txt').st_uid)\n"
        )
        result = await c.run(python=code)
        assert result.error is None, result.combined
        made = workspace / "made"
        for path in (made, made / "deeper", made / "deeper" / "f.txt", extra / "g.txt"):
            info = path.stat()
            assert (info.st_uid, info.st_gid) == me, (path, info.st_uid, info.st_gid)
        # put_file hands the cells a file of their own: they may change it in place; get_file reads it back
        cell_path = await c.put_file("in/data.txt", b"one\n")
        appended = await c.run(python=f"open({cell_path!r}, 'a').write('two\\n'); print('ok')")
        assert appended.error is None and appended.text.strip() == "ok", appended.combined
        assert await c.get_file("in/data.txt") == b"one\ntwo\n"
        # ... and across a restart (the TMPDIR carry keeps owners)
        await c.restart()
        again = await c.run(
            python="import os; open(os.path.join(os.environ['TMPDIR'], 'in', 'data.txt'), 'a').write('three\\n')"
        )
        assert again.error is None, again.combined
        assert await c.get_file("in/data.txt") == b"one\ntwo\nthree\n"
        recording = c.status().recording
    assert recording is not None
    for path in [recording, *recording.rglob("*")]:
        assert path.stat().st_uid == me[0], path


async def test_the_users_private_folders_stay_usable_and_read_only(tmp_path: Path, recordings: Path) -> None:
    """A 0700 workspace (``mktemp -d``) with 0600 files, and such a read root: root's own data is its
    sessions' (an idmapped mount), the view keeps it read-only."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    (private / "data.csv").write_text("a\n1\n")
    (private / "data.csv").chmod(0o600)
    extra = tmp_path / "extra"
    extra.mkdir(mode=0o700)
    (extra / "more.txt").write_text("more\n")
    (extra / "more.txt").chmod(0o600)
    async with _console(private, read_roots=[extra], recordings_dir=recordings) as c:
        read = await c.run(python=f"print(open('data.csv').read() + open({str(extra / 'more.txt')!r}).read())")
        assert read.error is None and read.text.split() == ["a", "1", "more"], read.combined
        write = await c.run(python="open('new.txt', 'w').write('x')")
        assert write.error is not None and "Read-only file system" in write.error.message, write.combined
        assert (await c.run(python="print(6 * 7)")).text.strip() == "42"
    assert not (private / "new.txt").exists()


async def test_no_cell_plants_a_set_user_id_file(tmp_path: Path, workspace: Path, recordings: Path) -> None:
    """What a cell writes belongs to whoever started the session: a set-user-ID copy of a shell in the
    workspace would run as that user (root) for anyone who reaches the folder. Every way a cell sets
    the bits is refused (the server's seccomp filter, ``_setid``), and the session goes on."""
    extra = tmp_path / "out"
    extra.mkdir()
    langs = ("python", "sql", "r") if HAS_R else ("python", "sql")
    async with _console(
        workspace, profile="workspace", writable_roots=[extra], languages=langs, recordings_dir=recordings
    ) as c:
        attack = (
            "import os, shutil, subprocess\n"
            "shutil.copy('/bin/sh', 'sh')\n"
            "for mode in (0o4755, 0o2755, 0o6755):\n"
            "    try:\n"
            "        os.chmod('sh', mode); print('chmod', oct(mode), 'worked')\n"
            "    except PermissionError:\n"
            "        print('chmod refused')\n"
            "try:\n"
            f"    os.close(os.open({str(extra / 'made')!r}, os.O_CREAT | os.O_WRONLY, 0o4755)); print('created')\n"
            "except PermissionError:\n"
            "    print('create refused')\n"
            "print(subprocess.run(['sh', '-c', 'cp /bin/ls ls2 && chmod u+s,g+s ls2; echo rc=$?'],\n"
            "                     capture_output=True, text=True).stdout)\n"
            "try:\n"  # file capabilities: v2 cap_setuid in the permitted set
            "    os.setxattr('sh', 'security.capability', bytes.fromhex('0100000280000000000000000000000000000000'))\n"
            "    print('caps set')\n"
            "except OSError as exc:\n"
            "    print('caps refused', exc.errno)\n"
        )
        out = await c.run(python=attack)
        assert "worked" not in out.text and out.text.count("chmod refused") == 3, out.combined
        assert "create refused" in out.text and "rc=1" in out.text, out.combined
        assert f"caps refused {errno.EOPNOTSUPP}" in out.text, out.combined
        if "r" in langs:
            await c.run(r='file.create("r.bin"); Sys.chmod("r.bin", "6755", use_umask = FALSE)')
        assert (await c.run(python="print(6 * 7)")).text.strip() == "42"
    planted = [
        path for path in [*workspace.rglob("*"), *extra.rglob("*")] if path.stat(follow_symlinks=False).st_mode & 0o6000
    ]
    assert planted == [], planted
    assert (workspace / "sh").exists() and (workspace / "ls2").exists()  # the copies themselves were allowed
