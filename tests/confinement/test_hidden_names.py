"""Issue 30, item 1: a name the view hides inside a tree it shows stays hidden when the host renames
it away, renames over it, removes and recreates it, or creates it after start, at any depth; from
Python, SQL and R cells. Held by the remasker (``_confinement/_remask.py``), a watch-and-remask,
named ``"watched"`` in ``status().limits["hidden_names"]``; the race test measures its window."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import textwrap
import threading
import time
from pathlib import Path

import anyio
import pytest

from console_bridge import AsyncConsole
from console_bridge._confinement._remask import Remasker, mount_points, secret
from tests.support.binaries import binary_for

HAS_R = shutil.which("R") is not None
DEEP = "cfg/a/b/c/d/deep.key"  # depth 6 below the workspace
READ_PY = (
    "def _r(p):\n    try:\n        return open(p).read()\n    except Exception as e:\n        return type(e).__name__\n"
)


def _profile(tmp_path: Path) -> Path:
    profile = tmp_path / "hiding.yaml"
    profile.write_text(
        textwrap.dedent(
            f"""\
            name: hiding
            server: {{sandbox.profile: workspace, sandbox.network: restricted, sandbox.tempdir: managed}}
            expects: {{sandboxed: true, network: restricted, writable: [tmpdir, workspace]}}
            deny_read: ["{{workspace}}/secret.env", "{{workspace}}/later.env", "{{workspace}}/{DEEP}"]
            """
        )
    )
    return profile


async def _reads(console: AsyncConsole, path: str) -> str:
    """What each language's cell reads at ``path`` (errors included: they must not hold a token)."""
    out = [(await console.run(python=f"print(_r({path!r}))")).combined]
    sql = await console.run(sql=f"select content from read_text('{path}')")
    out.append(sql.combined + (sql.error.message if sql.error is not None else ""))
    if "r" in console.languages:
        code = f'tryCatch(cat(readLines("{path}", warn = FALSE), sep = "\\n"), error = function(e) cat("error"))'
        r = await console.run(r=code)
        out.append(r.combined)
    return "\n".join(out)


def _settle() -> None:
    time.sleep(0.3)  # the remasker acts within milliseconds; the race test below measures it


@pytest.mark.anyio
@pytest.mark.console
@pytest.mark.parametrize("version", ["0.0.5", "0.0.6"])
async def test_a_hidden_name_stays_hidden_whatever_the_host_does_to_it(
    version: str, tmp_path: Path, workspace: Path, recordings: Path
) -> None:
    (workspace / "secret.env").write_text("TOKEN-AT-START\n")
    (workspace / "public.csv").write_text("a\n1\n")
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    languages = ("python", "sql", "r") if HAS_R else ("python", "sql")
    async with AsyncConsole(
        workspace,
        command=binary_for(version),
        profile=str(_profile(tmp_path)),
        recordings_dir=recordings,
        languages=languages,
    ) as c:
        hidden = c.status().limits["hidden_names"]
        assert hidden["enforced_by"] == "watched" and hidden["value"] >= 4, hidden
        await c.run(python=READ_PY)
        assert "TOKEN" not in await _reads(c, "secret.env")
        steps = {}
        # an editor's save: the file renamed away, a new one written under the name
        os.rename(workspace / "secret.env", workspace / "secret.env.bak")
        (workspace / "secret.env").write_text("TOKEN-RECREATED\n")
        _settle()
        steps["rename away, recreate"] = await _reads(c, "secret.env")
        # an atomic replace: a new file renamed over the name
        (workspace / "next.tmp").write_text("TOKEN-RENAMED-OVER\n")
        os.rename(workspace / "next.tmp", workspace / "secret.env")
        _settle()
        steps["rename over"] = await _reads(c, "secret.env")
        # removed, then created again
        (workspace / "secret.env").unlink()
        _settle()
        (workspace / "secret.env").write_text("TOKEN-DELETED-RECREATED\n")
        _settle()
        steps["delete, create"] = await _reads(c, "secret.env")
        # a hidden name that did not exist at start, at depth 1 and at depth 6 (its folders too)
        (workspace / "later.env").write_text("TOKEN-LATER\n")
        (workspace / DEEP).parent.mkdir(parents=True)
        (workspace / DEEP).write_text("TOKEN-DEEP\n")
        _settle()
        steps["created later"] = await _reads(c, "later.env")
        steps["created later, depth 6"] = await _reads(c, DEEP)
        # the folders on the way renamed and made again
        os.rename(workspace / "cfg", workspace / "cfg.old")
        (workspace / DEEP).parent.mkdir(parents=True)
        (workspace / DEEP).write_text("TOKEN-DEEP-AGAIN\n")
        _settle()
        steps["folders renamed, made again"] = await _reads(c, DEEP)
        # a CI checkout made again: .git removed, a new one with a token in its config
        shutil.rmtree(workspace / ".git")
        subprocess.run(["git", "init", "-q", str(workspace)], check=True)
        (workspace / ".git" / "config").write_text("[http]\n\textraheader = AUTHORIZATION: TOKEN-GIT\n")
        _settle()
        steps[".git made again"] = await _reads(c, ".git/config")
        for step, seen in steps.items():
            assert "TOKEN" not in seen, (step, seen)
        # the session goes on, and what is not hidden is still live
        (workspace / "public.csv").write_text("a\n2\n")
        after = await c.run(python="print(open('public.csv').read().split()[1], 1 + 1)")
        assert after.text.split() == ["2", "2"] and after.error is None, after
        written = await c.run(python="open('out.txt', 'w').write('ok'); print('written')")
        assert written.error is None and (workspace / "out.txt").read_text() == "ok"
    # the host's files are untouched by the masks
    assert (workspace / "secret.env").read_text() == "TOKEN-DELETED-RECREATED\n"


@pytest.mark.anyio
@pytest.mark.console
async def test_a_rename_racing_the_cells_reads_is_masked_within_a_bounded_window(
    tmp_path: Path, workspace: Path, recordings: Path
) -> None:
    """The watch-and-remask has a window: between the host's rename and the mask. A host thread
    replaces the hidden file 200 times (a new token each time) while a cell reads it in a tight loop.
    Measured here: every replacement masked again within 5.5 ms, yet the loop (65,000 reads) got 175
    of the 200 tokens in those windows: this is why it is named "watched". Asserted: each mask within
    250 ms (a loaded 2-core CI runner), and once the host stops nothing reads a token."""
    (workspace / "secret.env").write_text("TOKEN-0\n")
    async with AsyncConsole(
        workspace, command=binary_for("0.0.6"), profile=str(_profile(tmp_path)), recordings_dir=recordings
    ) as c:
        await c.run(python=READ_PY)
        late: list[float] = []
        stop = threading.Event()

        def replace() -> None:
            for n in range(1, 201):
                (workspace / "next.tmp").write_text(f"TOKEN-{n}\n")
                os.rename(workspace / "next.tmp", workspace / "secret.env")
                start = time.monotonic()
                while not _masked_on_host_side(c, workspace / "secret.env"):
                    if time.monotonic() - start > 1.0:
                        break
                    time.sleep(0.0005)
                late.append(time.monotonic() - start)
                time.sleep(0.005)
            stop.set()

        reader = (
            "import time\nseen, reads, end = set(), 0, time.monotonic() + 20\n"
            "while time.monotonic() < end and not __import__('os').path.exists('stop.flag'):\n"
            "    got = _r('secret.env')\n    reads += 1\n"
            "    if got.startswith('TOKEN'):\n        seen.add(got.strip())\n"
            "print(reads, len(seen))"
        )
        thread = threading.Thread(target=replace)
        thread.start()
        async with anyio.create_task_group() as tg:

            async def flag() -> None:
                while not stop.is_set():
                    await anyio.sleep(0.05)
                (workspace / "stop.flag").write_text("")

            tg.start_soon(flag)
            raced = await c.run(python=reader, timeout=60)
        thread.join()
        reads, leaked = (int(x) for x in raced.text.split())
        print(f"race: {reads} reads, {leaked} of 200 tokens read; remask {max(late) * 1000:.1f} ms at most")
        assert reads > 200 and max(late) < 0.25, (reads, leaked, sorted(late)[-5:])
        assert "TOKEN" not in await _reads(c, "secret.env")  # once the host stops: hidden
        assert (await c.run(python="1 + 1")).text.strip() == "2"


def _masked_on_host_side(c: AsyncConsole, path: Path) -> bool:
    """Whether the server's mount namespace has a mount on ``path`` (its mountinfo, read from here)."""
    pid = c.pid
    return pid is not None and str(path) in mount_points(f"/proc/{pid}/mountinfo")


# ------------------------------------------------------------------ the watch alone (no mounts)
def test_the_etc_rule_is_what_not_everyone_may_read_at_any_depth(tmp_path: Path) -> None:
    etc = tmp_path / "etc"
    deep = etc / "a" / "b" / "c" / "d" / "e"
    deep.mkdir(parents=True)
    (etc / "passwd").write_text("root:x:0:0\n")
    (deep / "app.key").write_text("k")
    (deep / "app.key").chmod(0o600)
    (etc / "private").mkdir()
    (etc / "private").chmod(0o700)
    watch = Remasker([], str(etc), mount=False)
    try:
        watch.scan()
        assert sorted(watch.masked) == sorted([str(deep / "app.key"), str(etc / "private")])
        # created later, at depth 6, and a readable file made private
        (deep / "later.key").write_text("k")
        (deep / "later.key").chmod(0o640)
        (etc / "passwd").chmod(0o600)
        (etc / "new" / "x").mkdir(parents=True)
        (etc / "new" / "x" / "token").write_text("t")
        (etc / "new" / "x" / "token").chmod(0o400)
        _drain(watch)
        assert {str(deep / "later.key"), str(etc / "passwd"), str(etc / "new" / "x" / "token")} <= set(watch.masked)
        assert str(etc / "a") not in watch.masked  # a folder everyone may enter stays shown
    finally:
        watch.close()


def test_the_names_are_followed_through_folders_that_appear_and_are_renamed(tmp_path: Path) -> None:
    top = tmp_path / "w"
    top.mkdir()
    name = top / "x" / "y" / "secret"
    watch = Remasker([str(name)], None, mount=False)
    try:
        watch.scan()
        assert watch.masked == []
        name.parent.mkdir(parents=True)
        name.write_text("s")
        _drain(watch)
        assert set(watch.masked) == {str(name)}
        watch.masked.clear()
        os.rename(top / "x", top / "x.old")
        (top / "x.old" / "y" / "secret").write_text("moved away: not the name any more")
        _drain(watch)
        assert watch.masked == []
        name.parent.mkdir(parents=True)
        name.write_text("s2")
        _drain(watch)
        assert set(watch.masked) == {str(name)}  # found again under the new folders
    finally:
        watch.close()


def test_secret_is_by_mode() -> None:
    assert secret(os.stat_result((stat.S_IFREG | 0o640, 0, 0, 1, 0, 0, 0, 0, 0, 0)))
    assert not secret(os.stat_result((stat.S_IFREG | 0o644, 0, 0, 1, 0, 0, 0, 0, 0, 0)))
    assert secret(os.stat_result((stat.S_IFDIR | 0o751, 0, 0, 1, 0, 0, 0, 0, 0, 0)))
    assert not secret(os.stat_result((stat.S_IFDIR | 0o755, 0, 0, 1, 0, 0, 0, 0, 0, 0)))


def _drain(watch: Remasker) -> None:
    os.set_blocking(watch.fd, False)
    for _ in range(20):
        try:
            watch.step()
        except BlockingIOError:
            time.sleep(0.01)


@pytest.mark.anyio
@pytest.mark.console
@pytest.mark.skipif(
    os.geteuid() != 0,
    reason="only root can create files in the host's /etc (a normal user's /etc test is the watch alone, above)",
)
async def test_an_etc_secret_renamed_over_or_created_later_is_masked_at_any_depth(
    workspace: Path, recordings: Path
) -> None:
    """The /etc rule under change, in a live session: ``useradd`` rewrites /etc/shadow by rename, a
    package writes a new 0600 key. Root's cells are also refused such files by their ids (no host
    account), so what is asserted first is the mask itself: a mount over the name in the server's
    mount namespace, made after the host's change; then that no cell reads a token."""
    top = Path(f"/etc/console-bridge-test-{os.getpid()}")
    deep = top / "a" / "b" / "c" / "d"
    shadow = top / "shadow"  # depth 2
    try:
        top.mkdir(mode=0o755)
        shadow.write_text("TOKEN-SHADOW-0\n")
        shadow.chmod(0o640)
        async with AsyncConsole(workspace, command=binary_for("0.0.6"), recordings_dir=recordings) as c:
            assert c.status().limits["hidden_names"]["enforced_by"] == "watched"
            await c.run(python=READ_PY)
            assert _masked_on_host_side(c, shadow)
            # useradd's save: a new file renamed over the name
            fresh = top / "nshadow"
            fresh.write_text("TOKEN-SHADOW-1\n")
            fresh.chmod(0o640)
            os.rename(fresh, shadow)
            # created after start at depth 6, its folders too; a readable file made private
            deep.mkdir(parents=True)
            (deep / "app.key").write_text("TOKEN-DEEP\n")
            (deep / "app.key").chmod(0o600)
            (top / "public.conf").write_text("TOKEN-PUBLIC-THEN-PRIVATE\n")
            (top / "public.conf").chmod(0o644)
            time.sleep(0.3)
            (top / "public.conf").chmod(0o600)
            _settle()
            for name in (shadow, deep / "app.key", top / "public.conf"):
                assert _masked_on_host_side(c, name), name
                assert "TOKEN" not in await _reads(c, str(name)), name
            assert not _masked_on_host_side(c, top / "a"), "a folder everyone may enter stays shown"
            assert (await c.run(python="print(open('/etc/hostname').read() != '', 1 + 1)")).text.split() == [
                "True",
                "2",
            ]
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_a_host_out_of_inotify_instances_refuses_the_session(monkeypatch: pytest.MonkeyPatch) -> None:
    """The watch is made before the remasker forks: when the kernel refuses it (fs.inotify.max_user_instances
    reached, as with hundreds of sessions of one user), the server's setup fails (the session is refused)
    instead of running with hidden names nobody keeps hidden."""
    import errno

    from console_bridge._confinement import _remask

    def refused(*_args: object, **_kwargs: object) -> None:
        raise OSError(errno.EMFILE, "Too many open files")

    forks: list[int] = []
    monkeypatch.setattr(_remask.Remasker, "__init__", refused)
    monkeypatch.setattr(_remask.os, "fork", lambda: forks.append(1) or 0)
    with pytest.raises(OSError, match=r"fs\.inotify\.max_user_instances"):
        _remask.start({"names": ["/nonexistent/secret"]}, supervisor=1)
    assert forks == []


def test_a_chain_of_folders_made_between_the_look_and_the_watch_is_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The guest's hostile-hidden-names caught it once (login scope, under TCG): `mkdir -p cfg/a/b/c/d`
    and the deep file landed between the remasker's look (no `cfg/a/b/c` yet) and its watch on the
    deepest folder it had found; nothing reported the rest and the depth-6 token was read. The host's
    mkdir is made to land exactly there: the name must still be masked."""
    top = tmp_path / "w"
    top.mkdir()
    name = top / "cfg" / "a" / "b" / "c" / "d" / "deep.key"
    watch = Remasker([str(name)], None, mount=False)
    real_watch = Remasker._watch
    landed: list[str] = []

    def late_host(self: Remasker, folder: str) -> bool:
        if folder == str(top) and not landed:  # the look found no cfg; the host makes it all now
            name.parent.mkdir(parents=True)
            name.write_text("TOKEN-DEEP\n")
            landed.append(folder)
        return real_watch(self, folder)

    monkeypatch.setattr(Remasker, "_watch", late_host)
    try:
        watch.scan()
        _drain(watch)
        assert landed and str(name) in watch.masked, watch.masked
    finally:
        watch.close()
