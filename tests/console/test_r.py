"""R cells against the real binaries and a real R (installed by .ci/run from Debian's packages)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from console_bridge import AsyncConsole, CellTimeout, LaunchRefused

R = shutil.which("R")
needs_r = pytest.mark.skipif(
    R is None,
    reason="R is not installed: .ci/run installs r-base-core from Debian's packages; "
    "run `apt-get install r-base-core r-cran-ggplot2 r-cran-reticulate` to run these",
)
pytestmark = [pytest.mark.anyio]


def reticulate_version() -> str | None:
    if R is None:
        return None
    out = subprocess.run(
        ["Rscript", "-e", "cat(as.character(packageVersion('reticulate')))"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    return out.stdout.strip() or None


def make(mcp_console: tuple[str, Path], workspace: Path, recordings: Path, **kwargs: object) -> AsyncConsole:
    return AsyncConsole(
        workspace,
        command=mcp_console[1],
        recordings_dir=recordings,  # type: ignore[arg-type]
        languages=("python", "sql", "r"),
        poll_window=5,
        **kwargs,
    )


@pytest.fixture
def listener() -> Iterator[int]:
    """A live TCP listener on 127.0.0.1, so a refused connect proves the sandbox, not an empty port."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    try:
        yield server.getsockname()[1]
    finally:
        server.close()


@needs_r
@pytest.mark.usefixtures("no_leaks")
async def test_r_cells_data_frames_errors_and_plots(mcp_console, workspace, recordings):
    async with make(mcp_console, workspace, recordings) as console:
        assert (await console.run(r="mean(c(1, 2, 3))", timeout=60)).text == "[1] 2\n"
        frame = await console.run(r="df <- data.frame(a = 1:3, b = c('x', 'y', 'z')); df[df$a > 1, ]")
        assert "2 2 y" in frame.text and "3 3 z" in frame.text
        fit = await console.run(r="coef(lm(y ~ x, data.frame(x = 1:10, y = 2 * (1:10) + 1)))[['x']]")
        assert fit.text.strip() == "[1] 2"
        error = await console.run(r="stop('boom')")
        assert "Error" in error.text and "boom" in error.text and not error.worker_exited
        assert (await console.run(r="nrow(df)")).text == "[1] 3\n"  # the error kept the session
        base = await console.run(r="plot(1:10)")
        assert base.images and base.images[0].data.startswith(b"\x89PNG")
        gg = await console.run(
            r="library(ggplot2); print(ggplot(data.frame(x = 1:3, y = 1:3), aes(x, y)) + geom_point())"
        )
        assert gg.images and gg.images[0].mime_type == "image/png"
        sql = await console.run(sql="select 6 * 7 as answer")  # Python owns SQL when R has no duckdb
        assert "42" in sql.text


@needs_r
@pytest.mark.usefixtures("no_leaks")
async def test_r_installs_fail_at_once_and_the_session_goes_on(mcp_console, workspace, recordings):
    async with make(mcp_console, workspace, recordings) as console:
        await console.run(r="kept <- 41", timeout=60)
        started = time.monotonic()
        for call in ("install.packages('jsonlite')", "utils::install.packages('jsonlite')", "update.packages()"):
            result = await console.run(r=call, timeout=60)
            assert result.error is not None, (call, result)
            assert "no network in the sandbox; installs are disabled" in result.error.message, (call, result.error)
        assert time.monotonic() - started < 20  # (a real attempt spends its time failing to reach CRAN)
        assert (await console.run(r="kept + 1")).text == "[1] 42\n"


@needs_r
@pytest.mark.usefixtures("no_leaks")
async def test_r_interrupt_keeps_state_and_restart_clears_it(mcp_console, workspace, recordings):
    async with make(mcp_console, workspace, recordings) as console:
        await console.run(r="kept <- 41", timeout=60)
        with pytest.raises(CellTimeout):
            await console.run(r="i <- 0; while (TRUE) { i <- i + 1 }", timeout=2)
        assert (await console.run(r="kept + 1")).text == "[1] 42\n"
        await console.restart()
        assert "not found" in (await console.run(r="kept", timeout=60)).text


@needs_r
@pytest.mark.usefixtures("no_leaks")
async def test_sandbox_holds_from_r(mcp_console, workspace, recordings, tmp_path, listener):
    outside = tmp_path / "outside.txt"
    async with make(mcp_console, workspace, recordings) as console:
        created = await console.run(r=f"file.create({str(outside)!r})", timeout=60)
        assert "[1] FALSE" in created.text and "Read-only file system" in created.text
        via_url = await console.run(r=f"readLines(url('http://127.0.0.1:{listener}/'))")
        assert "cannot open" in via_url.text
        via_socket = await console.run(r=f"socketConnection('127.0.0.1', {listener})")
        assert "cannot be opened" in via_socket.text or "cannot open" in via_socket.text
    assert not outside.exists()


@needs_r
@pytest.mark.usefixtures("no_leaks")
async def test_cross_language_bridge(mcp_console, workspace, recordings):
    async with make(mcp_console, workspace, recordings) as console:
        await console.run(python="shared = 21", timeout=60)
        from_r = await console.run(r="py$shared * 2")
        await console.run(r="from_r <- 'hello'")
        from_py = await console.run(python="r.from_r")
    version = reticulate_version()
    if "[1] 42" in from_r.text:  # a host with a current reticulate: the bridge works both ways
        assert "hello" in from_py.text
        return
    # Debian 12's reticulate 1.28 is too old for mcp-console: the failure must be stated clearly.
    assert "console-bridge: the Python<->R bridge" in from_r.combined, (version, from_r.combined)
    assert "reticulate" in from_r.combined and "too old" in from_r.combined


def test_r_without_r_installed_is_refused(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no R on PATH
    with pytest.raises(LaunchRefused, match="apt-get install r-base-core"):
        AsyncConsole(tmp_path, languages=("python", "r"))
