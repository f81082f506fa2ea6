#!/usr/bin/env python3
"""Imports and the cold start to the first pandas result, against the host, side by side (issue 21).

Two targets of issue 21, measured in one run with the order rotated rep by rep:

- **cold**: a cold session (``AsyncConsole(...)``: constructor, ``start()``, then a cell that
  imports pandas) to that cell's result, against a *warm host interpreter's import*: a fresh
  ``python -c "import pandas"`` of the same venv, OS caches warm (one untimed run first), timed
  from the spawn to its exit, so it includes the interpreter's own start (~20 ms). Target <= 2x.
- **imports**: ``import pandas, matplotlib.pyplot`` timed inside the session's first two cells
  (``perf_counter`` around each import) against the same two imports timed inside a fresh host
  interpreter of the same venv. Target <= 1.5x.

The raw client (``mcp_console.AsyncMCPConsole``) runs the same cells with the first variant's
serve arguments less the bridge's ``startup.*`` (mcp-console's own worker start, its managed
DuckDB included) and the same PATH as the bridge's server (R hidden): its cold start is the floor
of mcp-console's own worker boot; its imports compile from source (mcp-console's bytecode prefix).

Each client lives in a long-lived child process (``--variant NAME=CHECKOUT`` runs a checkout of
console_bridge with ``PYTHONPATH``, so a branch and its base can be compared in one run); each
child's first session is a warm-up and not counted. For every session the recording's own events
(``tool_call``, ``environment_discovered``, ``worker_started``, ``worker_ready``, ``cell_started``,
``cell_ended``, in the server's clock) give the breakdown of where the cold start went.

    .venv/bin/python scripts/bench_imports.py --reps 5
    .venv/bin/python scripts/bench_imports.py --reps 5 --variant before=/tmp/base --variant after=.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.child import Child  # scripts/ is on sys.path when a script runs

SCRIPT = Path(__file__).resolve()  # each Child runs this script's --child mode

HERE = Path(__file__).resolve().parent
PANDAS_CELL = (
    "import time as _t\n_s = _t.perf_counter()\nimport pandas\nprint(round((_t.perf_counter() - _s) * 1000, 3))"
)
MPL_CELL = "_s = _t.perf_counter()\nimport matplotlib.pyplot\nprint(round((_t.perf_counter() - _s) * 1000, 3))"
HOST_TIMED = (
    "import time\n_s = time.perf_counter()\nimport pandas\n_p = time.perf_counter()\nimport matplotlib.pyplot\n"
    "print(round((_p - _s) * 1000, 3), round((time.perf_counter() - _p) * 1000, 3))"
)
#: The recording's events the breakdown is built from (the n-th of each kind is named kind#n).
EVENTS = (
    "recording_started",
    "tool_call",
    "environment_discovered",
    "worker_started",
    "worker_ready",
    "cell_started",
    "cell_ended",
)
#: (label, from, to) of each segment of the breakdown; "t0" is the constructor, "start" start()'s
#: return, "result" the first pandas result in hand (host clock, the same wall clock as the server's).
BRIDGE_SEGMENTS = (
    ("host before the server's spawn, spawn, initialize", "t0", "recording_started#1"),
    ("initialize, verification (host)", "recording_started#1", "tool_call#1"),
    ("mcp-console: environment discovery", "tool_call#1", "environment_discovered#1"),
    ("mcp-console: worker sandbox", "environment_discovered#1", "worker_started#1"),
    ("worker boot + bridge startup code", "worker_ready#1", "cell_started#1"),
    ("confinement probe cell", "cell_started#1", "cell_ended#1"),
    ("probe result to start() returned (host)", "cell_ended#1", "start"),
    ("start() to the pandas cell starting", "start", "cell_started#2"),
    ("the pandas cell (import pandas)", "cell_started#2", "cell_ended#2"),
    ("the result back to the caller", "cell_ended#2", "result"),
)
RAW_SEGMENTS = (
    ("spawn, initialize", "t0", "recording_started#1"),
    ("initialize (host)", "recording_started#1", "tool_call#1"),
    ("mcp-console: environment discovery", "tool_call#1", "environment_discovered#1"),
    ("mcp-console: worker sandbox", "environment_discovered#1", "worker_started#1"),
    ("worker boot (managed DuckDB included)", "worker_ready#1", "cell_started#1"),
    ("the pandas cell (import pandas, compiled from source)", "cell_started#1", "cell_ended#1"),
    ("the result back to the caller", "cell_ended#1", "result"),
)


# ----------------------------------------------------------------------------- child side
def _host_env(path: str | None = None) -> dict[str, str]:
    env = {key: os.environ[key] for key in ("PATH", "HOME", "LANG") if key in os.environ}
    env.update({k: v for k, v in os.environ.items() if k.startswith("LC_")})
    if path is not None:
        env["PATH"] = path
    return env


def _stamp(text: str) -> float:
    """An event's ``at`` (RFC 3339, nanoseconds, UTC) as seconds since the epoch."""
    day, _, rest = text.rstrip("Z").partition("T")
    whole, _, fraction = rest.partition(".")
    moment = datetime.datetime.fromisoformat(f"{day}T{whole}").replace(tzinfo=datetime.UTC)
    return moment.timestamp() + float(f"0.{fraction or '0'}")


def _events(home: Path) -> dict[str, float]:
    """kind#n -> time of the recording's n-th event of that kind."""
    found: dict[str, float] = {}
    counts: dict[str, int] = {}
    for path in home.rglob("events.jsonl"):
        for line in path.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError, KeyError):
                event = json.loads(line)
                kind = event["event"]
                if kind in EVENTS:
                    counts[kind] = counts.get(kind, 0) + 1
                    found[f"{kind}#{counts[kind]}"] = _stamp(event["at"])
    return found


def _number(text: str) -> float:
    """The first number a cell printed."""
    found = re.search(r"\d+(?:\.\d+)?", str(text))
    if found is None:
        raise ValueError(text)
    return float(found.group())


def child(kind: str, binary: str, scratch: str) -> int:
    counter = 0

    async def once(request: dict[str, Any]) -> dict[str, Any]:
        nonlocal counter
        counter += 1
        base = Path(scratch) / f"{kind}-{counter:03d}"
        workspace, home, tmp = base / "workspace", base / "home", base / "tmp"
        for folder in (workspace, home, tmp):
            folder.mkdir(parents=True)
        out: dict[str, Any] = {}
        marks: dict[str, float] = {"t0": time.time()}
        began = time.perf_counter()
        if kind == "raw":
            from mcp_console import AsyncMCPConsole

            env = _host_env(request.get("path")) | {"TMPDIR": str(tmp), "MCP_CONSOLE_HOME": str(home)}
            client = AsyncMCPConsole(
                command=binary, args=list(request["serve_args"]), server_parameters={"env": env, "cwd": str(workspace)}
            )
            await client.connect()
            pandas = await client.send(python=PANDAS_CELL)
            marks["result"] = time.time()
            out["cold_ms"] = (time.perf_counter() - began) * 1000
            mpl = await client.send(python=MPL_CELL)
            closing = time.perf_counter()
            await client.close()
            out["close_ms"] = (time.perf_counter() - closing) * 1000
        else:
            import psutil

            from console_bridge import AsyncConsole

            tempfile.tempdir = str(tmp)
            console = AsyncConsole(workspace, command=binary, recordings_dir=home)
            await console.start()
            marks["start"] = time.time()
            out["start_ms"] = (time.perf_counter() - began) * 1000
            result = await console.run(python=PANDAS_CELL)
            marks["result"] = time.time()
            out["cold_ms"] = (time.perf_counter() - began) * 1000
            pandas = result.text
            mpl = (await console.run(python=MPL_CELL)).text
            out["probe_ms"] = console.status().extra.get("probe", {}).get("ms")
            out["bytecode_linked"] = getattr(getattr(console, "_boot", None), "linked", None)
            if counter == 1:
                server = psutil.Process(console.pid)
                out["serve_args"] = server.cmdline()[1:]
                path = server.environ().get("PATH", "")
                shim = f"/proc/{console.pid}/root{path}"
                if path.startswith("/.console-bridge/") and os.path.isdir(shim):  # noqa: ASYNC240
                    out["path_links"] = {name: os.readlink(os.path.join(shim, name)) for name in os.listdir(shim)}
            closing = time.perf_counter()
            await console.close()
            out["close_ms"] = (time.perf_counter() - closing) * 1000
        try:
            out["pandas_cell_ms"] = _number(pandas)
            out["mpl_cell_ms"] = _number(mpl)
        except ValueError:
            raise RuntimeError(f"{kind}: the import cells gave {pandas!r} and {mpl!r}") from None
        marks.update(_events(home))
        out["marks"] = marks
        return out

    loop = asyncio.new_event_loop()
    for line in sys.stdin:
        request = json.loads(line)
        if request.get("quit"):
            break
        try:
            reply = loop.run_until_complete(once(request))
        except Exception as exc:  # reported to the driver, which stops the run
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(reply), flush=True)
    return 0


# ----------------------------------------------------------------------------- driver
def host_once() -> dict[str, float]:
    """A fresh interpreter of this venv: ``-c "import pandas"`` from spawn to exit, then the two imports
    timed inside another fresh one."""
    began = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import pandas"], check=True, env=_host_env(), cwd="/")
    wall = (time.perf_counter() - began) * 1000
    done = subprocess.run(
        [sys.executable, "-c", HOST_TIMED], check=True, capture_output=True, text=True, env=_host_env(), cwd="/"
    )
    pandas, mpl = (float(x) for x in done.stdout.split())
    return {"cold_ms": wall, "pandas_cell_ms": pandas, "mpl_cell_ms": mpl}


def _raw_args(serve_args: list[str]) -> list[str]:
    """The bridge's serve arguments less its startup code (``-c startup.*`` pairs)."""
    out: list[str] = []
    skip = False
    for index, arg in enumerate(serve_args):
        if skip:
            skip = False
            continue
        if arg == "-c" and index + 1 < len(serve_args) and serve_args[index + 1].startswith("startup."):
            skip = True
            continue
        out.append(arg)
    return out


def _segments(marks: dict[str, float], spec: tuple[tuple[str, str, str], ...]) -> dict[str, float]:
    return {label: (marks[b] - marks[a]) * 1000 for label, a, b in spec if a in marks and b in marks}


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--variant", action="append", default=[], help="NAME=PYTHONPATH of a console_bridge checkout")
    parser.add_argument("--binary", default=str(Path(sys.executable).parent / "mcp-console"))
    parser.add_argument("--no-raw", action="store_true", help="leave out the raw client")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child")
    parser.add_argument("--scratch")
    args = parser.parse_args()
    if args.child:
        return child(args.child, args.binary, args.scratch)
    variants = [tuple(v.split("=", 1)) for v in args.variant] or [("bridge", str(HERE.parent))]
    scratch = tempfile.mkdtemp(prefix="cb-bench-imports-")
    load = [os.getloadavg()[0]]
    children = {name: Child(SCRIPT, name, str(Path(path).resolve()), args.binary, scratch) for name, path in variants}
    if not args.no_raw:
        children["raw"] = Child(SCRIPT, "raw", None, args.binary, scratch)
    samples: dict[str, list[dict[str, Any]]] = {name: [] for name in [*children, "host"]}
    raw_request: dict[str, Any] = {}
    try:
        host_once()  # warm the OS caches (and the first-run costs) before anything is timed
        first = children[variants[0][0]].run()
        serve_args = _raw_args(first["serve_args"])
        if first.get("path_links"):
            folder = Path(scratch) / "raw-path"
            folder.mkdir()
            for name, target in first["path_links"].items():
                os.symlink(target, folder / name)
            raw_request["path"] = str(folder)
        raw_request["serve_args"] = serve_args
        for name, ch in children.items():
            if name != variants[0][0]:
                ch.run(**raw_request)  # each child's warm-up
        names = [*children, "host"]
        for rep in range(args.reps):
            order = names[rep % len(names) :] + names[: rep % len(names)]
            if rep % 2:
                order.reverse()
            for name in order:
                samples[name].append(host_once() if name == "host" else children[name].run(**raw_request))
            load.append(os.getloadavg()[0])
            print(
                f"rep {rep + 1}/{args.reps}: " + ", ".join(f"{n} {samples[n][-1]['cold_ms']:.0f}" for n in names),
                file=sys.stderr,
                flush=True,
            )
    finally:
        for ch in children.values():
            ch.stop()
        subprocess.run(["rm", "-rf", scratch], check=False)
    report: dict[str, Any] = {"load": load, "reps": args.reps, "raw_serve_args": raw_request.get("serve_args")}
    host = {key: _median([s[key] for s in samples["host"]]) for key in ("cold_ms", "pandas_cell_ms", "mpl_cell_ms")}
    host_imports = (host["pandas_cell_ms"] or 0) + (host["mpl_cell_ms"] or 0)
    print(f"load average (1 min) during the run: {min(load):.1f}-{max(load):.1f}; {args.reps} reps, medians in ms")
    print(
        f"host: `python -c 'import pandas'` {_fmt(host['cold_ms'])} (spawn to exit); inside a fresh interpreter: "
        f"pandas {_fmt(host['pandas_cell_ms'])} + matplotlib.pyplot {_fmt(host['mpl_cell_ms'])}"
    )
    report["host"] = {"median": host, "samples": samples["host"]}
    print(
        f"\n{'client':10} {'cold->pandas':>12} {'/host':>6} {'min-max':>13} {'start()':>8} {'probe':>6} "
        f"{'in-cell pandas+mpl':>18} {'/host':>6}"
    )
    for name in children:
        runs = samples[name]
        cold = [s["cold_ms"] for s in runs]
        imports = [s["pandas_cell_ms"] + s["mpl_cell_ms"] for s in runs]
        start = _median([s["start_ms"] for s in runs if "start_ms" in s])
        probe = _median([s["probe_ms"] for s in runs if s.get("probe_ms") is not None])
        med, imp = statistics.median(cold), statistics.median(imports)
        spec = RAW_SEGMENTS if name == "raw" else BRIDGE_SEGMENTS
        parts = [_segments(s["marks"], spec) for s in runs]
        breakdown = {
            label: statistics.median(part[label] for part in parts)
            for label, _, _ in spec
            if all(label in part for part in parts)
        }
        report[name] = {
            "cold_ms": med,
            "cold_ratio_to_host": med / host["cold_ms"] if host["cold_ms"] else None,
            "imports_ms": imp,
            "imports_ratio_to_host": imp / host_imports if host_imports else None,
            "start_ms": start,
            "probe_ms": probe,
            "close_ms": _median([s["close_ms"] for s in runs]),
            "breakdown_ms": breakdown,
            "samples": runs,
        }
        print(
            f"{name:10} {med:12,.0f} {report[name]['cold_ratio_to_host']:6.2f} "
            f"{f'{min(cold):,.0f}-{max(cold):,.0f}':>13} {_fmt(start):>8} {_fmt(probe):>6} {imp:18,.0f} "
            f"{report[name]['imports_ratio_to_host']:6.2f}"
        )
    for name in children:
        print(f"\nwhere {name}'s cold start went (medians of each segment, ms; server events in its own clock):")
        for label, value in report[name]["breakdown_ms"].items():
            print(f"  {value:8.1f}  {label}")
        # the session's start as the first user cell sees it: until the pandas cell starts in the worker
        first_cell = "cell_started#1" if name == "raw" else "cell_started#2"
        until = [(s["marks"][first_cell] - s["marks"]["t0"]) * 1000 for s in samples[name] if first_cell in s["marks"]]
        report[name]["to_first_cell_ms"] = _median(until)
        print(f"  {_fmt(report[name]['to_first_cell_ms']):>8}  constructor to the pandas cell starting in the worker")
        print(f"  {_fmt(report[name]['close_ms']):>8}  close() after the two cells")
    targets = {}
    for name in variants:
        entry = report[name[0]]
        targets[name[0]] = {
            "cold <= 2x host": entry["cold_ratio_to_host"] is not None and entry["cold_ratio_to_host"] <= 2.0,
            "imports <= 1.5x host": entry["imports_ratio_to_host"] is not None
            and entry["imports_ratio_to_host"] <= 1.5,
        }
        print(
            f"\ntargets ({name[0]}): "
            + ", ".join(f"{k}: {'met' if v else 'MISSED'}" for k, v in targets[name[0]].items())
        )
    report["targets"] = targets
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
