#!/usr/bin/env python3
"""Cold start with the read view against the bridge before it and the raw client, side by side.

Each variant lives in its own long-lived child process (its own ``PYTHONPATH``, so two checkouts
of console_bridge can be compared in one run); the driver tells the children in turn, in a
rotating order, to open one session, run ``1`` and close it, and collects the times. The first
session of every child is a warm-up (imports, the cached ``--version`` check) and not counted.

    .venv/bin/python scripts/bench_view.py --reps 7 \\
        --variant main=/work/wt-issue-23 --variant preview=/work/wt-preview

``raw`` (``mcp_console.AsyncMCPConsole``) always runs, with the serve arguments of the first
variant's server. The bridge children also time the pieces of the start: ``prepare()``,
``supervision()`` (the view's ``build_view()`` inside it), the probe cell; after the runs one
child applies a real session's mount plan in a fresh ``python -I -S`` child (``enter`` +
``apply_plan``, as the supervisor does before exec) and reports how long that takes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
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
TRIVIAL = "1"


# ----------------------------------------------------------------------------- child side
def _timed(cls: Any, name: str, sink: dict[str, float]) -> None:
    original = getattr(cls, name, None)
    if original is None:
        return

    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return original(self, *args, **kwargs)
        finally:
            sink[name] = sink.get(name, 0.0) + (time.perf_counter() - began) * 1000

    setattr(cls, name, wrapper)


def _host_env() -> dict[str, str]:
    env = {key: os.environ[key] for key in ("PATH", "HOME", "LANG") if key in os.environ}
    env.update({k: v for k, v in os.environ.items() if k.startswith("LC_")})
    return env


def _cpu() -> dict[str, float]:
    """CPU seconds of this process and of every reaped descendant (the session's tree, once closed)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"client": me.ru_utime + me.ru_stime, "tree": kids.ru_utime + kids.ru_stime}


def child(kind: str, binary: str, scratch: str) -> int:
    import psutil

    pieces: dict[str, float] = {}
    counter = 0
    if kind != "raw":
        from console_bridge._console import _confined

        _timed(_confined.SessionConfinement, "prepare", pieces)
        _timed(_confined.SessionConfinement, "supervision", pieces)
        if hasattr(_confined, "build_view"):
            original = _confined.build_view

            def build_view(*args: Any, **kwargs: Any) -> Any:
                began = time.perf_counter()
                try:
                    return original(*args, **kwargs)
                finally:
                    pieces["build_view"] = pieces.get("build_view", 0.0) + (time.perf_counter() - began) * 1000

            _confined.build_view = build_view  # type: ignore[attr-defined]

    async def once(serve_args: list[str] | None, keep_plan: bool) -> dict[str, Any]:
        nonlocal counter
        counter += 1
        base = Path(scratch) / f"{kind}-{counter:03d}"
        workspace, home, tmp = base / "workspace", base / "home", base / "tmp"
        for folder in (workspace, home, tmp):
            folder.mkdir(parents=True)
        pieces.clear()
        cpu0 = _cpu()
        began = time.perf_counter()
        out: dict[str, Any] = {}
        if kind == "raw":
            from mcp_console import AsyncMCPConsole

            env = _host_env() | {"TMPDIR": str(tmp), "MCP_CONSOLE_HOME": str(home)}
            client = AsyncMCPConsole(
                command=binary, args=list(serve_args or []), server_parameters={"env": env, "cwd": str(workspace)}
            )
            await client.connect()
            text = await client.send(python=TRIVIAL)
            out["ms"] = (time.perf_counter() - began) * 1000
            await client.close()
        else:
            from console_bridge import AsyncConsole

            tempfile.tempdir = str(tmp)
            console = AsyncConsole(workspace, command=binary, recordings_dir=home)
            await console.start()
            started = (time.perf_counter() - began) * 1000
            result = await console.send(python=TRIVIAL)
            out["ms"] = (time.perf_counter() - began) * 1000
            text = result.text
            out["start_ms"] = started
            out["probe_ms"] = console.status().extra.get("probe", {}).get("ms")
            if counter == 1:
                cmd = psutil.Process(console.pid).cmdline()
                out["serve_args"] = cmd[1:]
            if keep_plan and getattr(console._confined, "view", None) is not None:
                out["apply_plan_ms"] = _apply_plan_cost(console)
            await console.close()
        # (the raw client shows the bridge's startup markers around the value: same launch, no parsing)
        if "1" not in str(text):
            raise RuntimeError(f"{kind}: the cell gave {text!r}")
        out["pieces"] = dict(pieces)
        out["cpu"] = {k: (v - cpu0[k]) * 1000 for k, v in _cpu().items()}
        return out

    loop = asyncio.new_event_loop()
    for line in sys.stdin:
        request = json.loads(line)
        if request.get("quit"):
            break
        try:
            reply = loop.run_until_complete(once(request.get("serve_args"), bool(request.get("plan"))))
        except Exception as exc:  # reported to the driver, which stops the run
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(reply), flush=True)
    return 0


_APPLY = r"""
import json, os, sys, time
sys.path.insert(0, sys.argv[1])
t0 = time.perf_counter()
import _namespaces
t1 = time.perf_counter()
plan = json.loads(sys.argv[2])
_namespaces.enter(bool(plan.get("user_namespace")))
t2 = time.perf_counter()
_namespaces.apply_plan(plan)
t3 = time.perf_counter()
print(json.dumps({"import_ms": (t1 - t0) * 1e3, "enter_ms": (t2 - t1) * 1e3, "apply_plan_ms": (t3 - t2) * 1e3,
                  "steps": len(plan["steps"]), "binds": sum(1 for s in plan["steps"] if s["op"] == "bind"),
                  "masks": sum(1 for s in plan["steps"] if s["op"] == "mask")}))
"""


def _apply_plan_cost(console: Any, reps: int = 5) -> dict[str, Any]:
    """Apply this live session's mount plan in fresh children (a new root each time), as the supervisor does."""
    from console_bridge._confinement import _namespaces

    conf = console._confined
    plan = conf.view.plan()
    plan["user_namespace"] = conf.confinement.host.user_namespace
    folder = os.path.dirname(_namespaces.__file__)
    runs = []
    for _ in range(reps):
        root = tempfile.mkdtemp(prefix="cb-view-root-")
        plan["root"] = root
        began = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-I", "-S", "-c", _APPLY, folder, json.dumps(plan)],
            capture_output=True,
            text=True,
            check=False,
        )
        total = (time.perf_counter() - began) * 1000
        os.rmdir(root)
        if done.returncode != 0:
            return {"error": done.stderr.strip()[-500:]}
        runs.append(json.loads(done.stdout) | {"child_total_ms": total})
    keys = ("import_ms", "enter_ms", "apply_plan_ms", "child_total_ms")
    out: dict[str, Any] = {k: statistics.median(r[k] for r in runs) for k in keys}
    out.update({k: runs[0][k] for k in ("steps", "binds", "masks")})
    out["runs"] = runs
    return out


# ----------------------------------------------------------------------------- driver
def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--variant", action="append", default=[], help="NAME=PYTHONPATH of a console_bridge checkout")
    parser.add_argument("--binary", default=str(Path(sys.executable).parent / "mcp-console"))
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child")
    parser.add_argument("--scratch")
    args = parser.parse_args()
    if args.child:
        return child(args.child, args.binary, args.scratch)
    variants = [tuple(v.split("=", 1)) for v in args.variant] or [("bridge", str(HERE.parent))]
    scratch = tempfile.mkdtemp(prefix="cb-bench-view-")
    load = [os.getloadavg()[0]]
    children = {name: Child(SCRIPT, name, path, args.binary, scratch) for name, path in variants}
    children["raw"] = Child(SCRIPT, "raw", None, args.binary, scratch)
    samples: dict[str, list[dict[str, Any]]] = {name: [] for name in children}
    try:
        first = children[variants[0][0]].run()
        serve_args = first["serve_args"]
        for name, ch in children.items():
            if name != variants[0][0]:
                ch.run(serve_args=serve_args)
        names = list(children)
        for rep in range(args.reps):
            order = names[rep % len(names) :] + names[: rep % len(names)]
            if rep % 2:
                order.reverse()
            for name in order:
                samples[name].append(children[name].run(serve_args=serve_args))
            load.append(os.getloadavg()[0])
            print(
                f"rep {rep + 1}/{args.reps}: " + ", ".join(f"{n} {samples[n][-1]['ms']:.0f}" for n in names), flush=True
            )
        plan_cost = children[variants[0][0]].run(serve_args=serve_args, plan=True).get("apply_plan_ms")
    finally:
        for ch in children.values():
            ch.stop()
        subprocess.run(["rm", "-rf", scratch], check=False)
    report: dict[str, Any] = {"load": load, "reps": args.reps, "serve_args": serve_args, "variants": {}}
    raw_median = _median([s["ms"] for s in samples["raw"]])
    print(f"\nload average (1 min) during the run: {min(load):.1f}-{max(load):.1f}")
    print(f"{'variant':10} {'median':>8} {'min':>8} {'max':>8} {'/raw':>6}   pieces (medians, ms)")
    for name, runs in samples.items():
        ms = [s["ms"] for s in runs]
        pieces: dict[str, float] = {}
        for key in sorted({k for s in runs for k in s.get("pieces", {})}):
            pieces[key] = statistics.median(s["pieces"].get(key, 0.0) for s in runs)
        for key in ("client", "tree"):
            pieces[f"cpu_{key}"] = statistics.median(s["cpu"][key] for s in runs)
        for key in ("start_ms", "probe_ms"):
            vals = [s[key] for s in runs if s.get(key) is not None]
            if vals:
                pieces[key] = statistics.median(vals)
        med = statistics.median(ms)
        report["variants"][name] = {"median_ms": med, "samples_ms": ms, "pieces": pieces}
        ratio = med / raw_median if raw_median else float("nan")
        text = ", ".join(f"{k} {v:.1f}" for k, v in pieces.items())
        print(f"{name:10} {med:8.0f} {min(ms):8.0f} {max(ms):8.0f} {ratio:6.3f}   {text}")
    if len(variants) >= 2:
        a, b = variants[0][0], variants[1][0]
        ratio = report["variants"][a]["median_ms"] / report["variants"][b]["median_ms"]
        report["ratio"] = {f"{a}/{b}": ratio}
        print(f"{a}/{b}: {ratio:.3f} (target <= 1.05)")
    if plan_cost:
        report["apply_plan"] = plan_cost
        if "error" in plan_cost:
            print(f"apply_plan in a child: {plan_cost['error']}")
        else:
            print(
                f"apply_plan in a fresh `python -I -S` child ({plan_cost['steps']} steps, {plan_cost['binds']} binds,"
                f" {plan_cost['masks']} masks), medians of {len(plan_cost['runs'])}: import _namespaces "
                f"{plan_cost['import_ms']:.2f} ms, enter {plan_cost['enter_ms']:.2f} ms, apply_plan "
                f"{plan_cost['apply_plan_ms']:.2f} ms; whole child {plan_cost['child_total_ms']:.1f} ms"
            )
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
