"""The ``--serve`` section of scripts/bench.py: ``console-bridge serve`` (stdio) against the library
in-process and the raw ``mcp_console.AsyncMCPConsole``.

One warm round trip of the cell ``1``, the three clients interleaved in rotation, each against its
own session of the same binary:

- raw: ``AsyncMCPConsole`` launched with exactly the serve arguments the bridge used;
- library: ``AsyncConsole.send(python="1")`` in this process;
- serve: the official MCP SDK client (``ClientSession`` over ``stdio_client``) calling ``send``
  on a ``console-bridge serve`` process (two MCP hops: client -> serve -> mcp-console);
- serve-http: the same client over Streamable HTTP (``streamable_http_client``, the 2025 handshake,
  a bearer token) against ``console-bridge serve --transport http`` on 127.0.0.1.

- floor-stdio, floor-http: the same client against ``scripts/bench/floor_server.py``, a server that
  answers every call with ``1`` at once: what the client, the transport and two process wake-ups
  cost with no server work at all.

Target: serve median <= 1.15 x raw median, over stdio (``target``) and over HTTP (``target_http``);
``hop_ms`` is each serve median less the library's (what the second MCP hop adds); ``serve_own_ms``
that less the floor (what serve's own work adds); ``best_ratio`` is (library + floor) / raw, the
least serve could reach over that transport if its own work cost nothing.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import psutil
from bench.stats import percentile  # scripts/bench/, beside this script

TARGET = 1.15
#: The bridge's startup code frames rich results and stderr with Unicode noncharacters (bench.py too).
_FRAMES = re.compile("\ufdd2[^\ufdd3]*\ufdd3|[\ufdd0\ufdd1\ufdd4]")
PLANS = {"quick": {"warmup": 5, "calls": 30}, "full": {"warmup": 10, "calls": 300}}
STEP_BOUND = 120.0  # seconds any start, call or close of this section may take


def _leaves(exc: BaseException) -> list[BaseException]:
    """The innermost exceptions of (nested) exception groups: what actually went wrong."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for part in exc.exceptions for leaf in _leaves(part)]
    return [exc]


def _leftover_children() -> list[psutil.Process]:
    out = []
    for proc in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if proc.status() != psutil.STATUS_ZOMBIE:
                out.append(proc)
    return out


FLOOR_SERVER = Path(__file__).resolve().parent / "bench" / "floor_server.py"


def start_floor_http() -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, str(FLOOR_SERVER), "http"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    url = proc.stdout.readline().strip()
    if not url.startswith("http://127.0.0.1:"):
        proc.kill()
        proc.wait()
        raise RuntimeError(f"floor_server.py http did not start (printed {url!r})")
    return proc, url


@contextlib.asynccontextmanager
async def _floor_http() -> AsyncIterator[str]:
    """Yields the URL of ``floor_server.py http`` (a subprocess, as serve is); killed at the end."""
    proc, url = await anyio.to_thread.run_sync(start_floor_http)
    try:
        yield url
    finally:
        proc.kill()
        await anyio.to_thread.run_sync(proc.wait, STEP_BOUND)


def _start_http(command: list[str], env: dict[str, str], cwd: Path) -> tuple[subprocess.Popen[str], str]:
    """``console-bridge serve --transport http`` and its URL (the first line it prints); its stderr is
    drained by a thread from then on."""
    proc = subprocess.Popen(
        command,
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    for line in proc.stderr:
        found = re.search(r"at (http://\S+/mcp)", line)
        if found:
            threading.Thread(target=proc.stderr.read, daemon=True).start()
            return proc, found.group(1)
    raise RuntimeError(f"serve --transport http did not start (exit {proc.wait()})")


@contextlib.asynccontextmanager
async def _http_serve(command: list[str], env: dict[str, str], cwd: Path) -> AsyncIterator[str]:
    """Yields the URL of a started ``serve --transport http``; SIGTERM (a clean stop) at the end."""
    proc, url = await anyio.to_thread.run_sync(_start_http, command, env, cwd)
    try:
        yield url
    finally:
        proc.terminate()
        await anyio.to_thread.run_sync(proc.wait, STEP_BOUND)


async def run(binary: Path, quick: bool, log: Callable[[str], None]) -> dict[str, Any]:
    import httpx2
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client
    from mcp.client.streamable_http import streamable_http_client
    from mcp_console import AsyncMCPConsole

    from console_bridge import AsyncConsole

    plan = PLANS["quick" if quick else "full"]
    root = Path(tempfile.mkdtemp(prefix="cb-bench-serve-"))
    folders = {
        name: root / name
        for name in ("ws-lib", "ws-raw", "ws-serve", "ws-http", "rec", "home", "tmp", "state", "xdg", "secret")
    }
    for folder in folders.values():
        folder.mkdir()
    saved_tmp, saved_state = tempfile.tempdir, os.environ.get("CONSOLE_BRIDGE_STATE_DIR")
    tempfile.tempdir = str(folders["tmp"])
    os.environ["CONSOLE_BRIDGE_STATE_DIR"] = str(folders["state"])
    report: dict[str, Any] = {"plan": plan, "errors": []}
    times: dict[str, list[float]] = {
        name: [] for name in ("raw", "library", "serve", "serve-http", "floor-stdio", "floor-http")
    }
    cli = Path(sys.executable).parent / "console-bridge"
    serve_env = dict(os.environ) | {
        "TMPDIR": str(folders["tmp"]),
        "CONSOLE_BRIDGE_STATE_DIR": str(folders["state"]),
        "XDG_DATA_HOME": str(folders["xdg"]),
    }
    serve = StdioServerParameters(
        command=str(cli),
        args=[
            "serve",
            "--workspace",
            str(folders["ws-serve"]),
            "--recordings-dir",
            str(folders["rec"]),
            "--command",
            str(binary),
        ],
        env=serve_env,
        cwd=str(folders["ws-serve"]),
    )
    token = folders["secret"] / "token"
    token.write_text(secrets.token_urlsafe(32) + "\n", encoding="utf-8")
    token.chmod(0o600)
    http_args = ["serve", "--transport", "http", "--port", "0", "--token-file", str(token), "--warm", "1"]
    http_args += ["--workspace", str(folders["ws-http"]), "--recordings-dir", str(folders["rec"])]
    http_args += ["--command", str(binary)]
    try:
        with anyio.fail_after(STEP_BOUND * 5):
            async with (
                AsyncConsole(folders["ws-lib"], command=binary, recordings_dir=folders["rec"]) as library,
                stdio_client(serve) as (read, write),
                ClientSession(read, write) as session,
                _http_serve([str(cli), *http_args], serve_env, folders["ws-http"]) as url,
                httpx2.AsyncClient(
                    headers={"Authorization": f"Bearer {token.read_text().strip()}"}, timeout=STEP_BOUND
                ) as http,
                streamable_http_client(url, http_client=http) as (http_read, http_write),
                ClientSession(http_read, http_write) as http_session,
                stdio_client(StdioServerParameters(command=sys.executable, args=[str(FLOOR_SERVER), "stdio"])) as (
                    floor_read,
                    floor_write,
                ),
                ClientSession(floor_read, floor_write) as floor_stdio,
                _floor_http() as floor_url,
                httpx2.AsyncClient(timeout=STEP_BOUND) as floor_http_client,
                streamable_http_client(floor_url, http_client=floor_http_client) as (floor_http_read, floor_http_write),
                ClientSession(floor_http_read, floor_http_write) as floor_http,
            ):
                for opened in (session, http_session, floor_stdio, floor_http):
                    await opened.initialize()
                cmdline = psutil.Process(library.pid or -1).cmdline()
                env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG") or k.startswith("LC_")}
                env |= {"TMPDIR": str(folders["tmp"]), "MCP_CONSOLE_HOME": str(folders["home"])}
                raw = AsyncMCPConsole(
                    command=str(binary), args=cmdline[1:], server_parameters={"env": env, "cwd": str(folders["ws-raw"])}
                )
                await raw.connect()
                try:

                    async def call_raw() -> str:
                        return str(await raw.send(python="1"))

                    async def call_library() -> str:
                        return (await library.send(python="1")).text

                    def call_on(client: ClientSession) -> Callable[[], Awaitable[str]]:
                        async def call() -> str:
                            result = await client.call_tool("send", {"python": "1"})
                            return "".join(getattr(block, "text", "") for block in result.content)

                        return call

                    series: list[tuple[str, Callable[[], Awaitable[str]]]] = [
                        ("raw", call_raw),
                        ("library", call_library),
                        ("serve", call_on(session)),
                        ("serve-http", call_on(http_session)),
                        ("floor-stdio", call_on(floor_stdio)),
                        ("floor-http", call_on(floor_http)),
                    ]
                    for _ in range(plan["warmup"]):
                        for _name, call in series:
                            await call()
                    log(f"  {plan['calls']} interleaved rounds")
                    for i in range(plan["calls"]):
                        shift = i % len(series)
                        for name, call in series[shift:] + series[:shift]:
                            started = time.perf_counter()
                            text = await call()
                            times[name].append(time.perf_counter() - started)
                            # (the raw client shows the bridge's startup frames around the value)
                            if _FRAMES.sub("", text).strip() != "1":
                                raise RuntimeError(f"{name} returned {text[:200]!r} for `1`")
                finally:
                    await raw.close()
    except Exception as exc:
        report["errors"].extend(f"{type(part).__name__}: {part}" for part in _leaves(exc))
        log(f"  FAILED: {type(exc).__name__}: {exc}")
    finally:
        tempfile.tempdir = saved_tmp
        if saved_state is None:
            os.environ.pop("CONSOLE_BRIDGE_STATE_DIR", None)
        else:
            os.environ["CONSOLE_BRIDGE_STATE_DIR"] = saved_state
        deadline = time.monotonic() + 10
        while _leftover_children() and time.monotonic() < deadline:
            await anyio.sleep(0.05)
        survivors = _leftover_children()
        for proc in survivors:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        state_left = (
            sorted(os.listdir(folders["state"] / "sessions")) if (folders["state"] / "sessions").is_dir() else []
        )
        shutil.rmtree(root, ignore_errors=True)
    figures: dict[str, Any] = {}
    for name, values in times.items():
        if values:
            ms = [v * 1000 for v in values]
            figures[name] = {
                "median_ms": round(statistics.median(ms), 3),
                "p95_ms": round(percentile(ms, 0.95) or 0.0, 3),
                "n": len(ms),
            }
    report["warm_rtt"] = figures
    if "raw" in figures and "serve" in figures:
        ratio = figures["serve"]["median_ms"] / figures["raw"]["median_ms"]
        report["target"] = {"threshold": TARGET, "value": round(ratio, 3), "met": ratio <= TARGET}
    if "raw" in figures and "serve-http" in figures:
        ratio = figures["serve-http"]["median_ms"] / figures["raw"]["median_ms"]
        report["serve_http_ratio"] = round(ratio, 3)
        report["target_http"] = {"threshold": TARGET, "value": round(ratio, 3), "met": ratio <= TARGET}
    if "library" in figures:  # what the second MCP hop itself adds, apart from the library under it
        report["hop_ms"] = {
            name: round(figures[name]["median_ms"] - figures["library"]["median_ms"], 3)
            for name in ("serve", "serve-http")
            if name in figures
        }
        floors = {"serve": "floor-stdio", "serve-http": "floor-http"}
        if "raw" in figures and all(floor in figures for floor in floors.values()):
            library, raw_ms = figures["library"]["median_ms"], figures["raw"]["median_ms"]
            report["floor_ms"] = {name: figures[floor]["median_ms"] for name, floor in floors.items()}
            report["serve_own_ms"] = {
                name: round(report["hop_ms"][name] - report["floor_ms"][name], 3)
                for name in floors
                if name in report["hop_ms"]
            }
            report["best_ratio"] = {name: round((library + report["floor_ms"][name]) / raw_ms, 3) for name in floors}
            report["budget_ms"] = round(raw_ms * (TARGET - 1), 3)
    report["cleanup"] = {
        "survivors": [p.pid for p in survivors],
        "sessions_left": state_left,
        "ok": not survivors and not state_left,
    }
    return report


def table(report: dict[str, Any]) -> str:
    rows = []
    figures = report.get("warm_rtt", {})
    raw = figures.get("raw", {}).get("median_ms")
    for name in ("raw", "library", "serve", "serve-http", "floor-stdio", "floor-http"):
        fig = figures.get(name)
        if fig is None:
            continue
        ratio = f"{fig['median_ms'] / raw:.3f}" if raw else "n/a"
        rows.append(
            f"| warm round trip of `1`, {name:<11} | {fig['median_ms']:.2f} ms (p95 {fig['p95_ms']:.2f}) | x{ratio} |"
        )
    return "\n".join(rows)
