#!/usr/bin/env python3
"""The sandboxed kernel against ipykernel, side by side in one run (issue 47).

Per kernel, ``--reps`` times with the order alternated rep by rep, through jupyter_client as a frontend:

- **start**: ``start_new_kernel`` to the first ``1 + 1``'s reply (target: at most 1.5 s);
- **trip**: the median round trip of a trivial cell, 20 of them (target: at most 1.2x ipykernel's);
- **plot**: ``import matplotlib.pyplot as plt; plt.plot([1, 2]);`` in a fresh kernel (at most 1.2x).

The sandboxed kernel is installed into a temporary prefix for the run (``console-bridge kernel install
--prefix``) and removed after; ipykernel is this venv's ``python3``.

    .venv/bin/python scripts/bench_kernel.py --reps 3 [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TARGETS = {"start_s": ("at most", 1.5), "trip_ratio": ("at most", 1.2), "plot_ratio": ("at most", 1.2)}


def _measure(name: str, folder: str) -> dict[str, float]:
    from jupyter_client.manager import start_new_kernel

    quiet: Any = lambda _message: None  # noqa: E731
    started = time.perf_counter()
    manager, client = start_new_kernel(kernel_name=name, cwd=folder)
    try:
        reply = client.execute_interactive("1 + 1", timeout=120, output_hook=quiet)
        start = time.perf_counter() - started
        if reply["content"]["status"] != "ok":
            raise SystemExit(f"{name}: the first cell failed: {reply['content'].get('evalue')}")
        trips = []
        for _ in range(20):
            began = time.perf_counter()
            client.execute_interactive("1 + 1", timeout=60, output_hook=quiet)
            trips.append(time.perf_counter() - began)
        began = time.perf_counter()
        reply = client.execute_interactive(
            "import matplotlib.pyplot as plt\nplt.plot([1, 2]);", timeout=120, output_hook=quiet
        )
        plot = time.perf_counter() - began
        if reply["content"]["status"] != "ok":
            raise SystemExit(f"{name}: the plot failed: {reply['content'].get('evalue')}")
    finally:
        client.stop_channels()
        manager.shutdown_kernel()
    return {"start_s": start, "trip_s": statistics.median(trips), "plot_s": plot}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    cli = str(Path(sys.executable).parent / "console-bridge")
    with tempfile.TemporaryDirectory(prefix="bench-kernel-") as prefix:
        folder = os.path.join(prefix, "notebooks")  # (a folder of its own: the kernel refuses /tmp itself)
        os.mkdir(folder)
        subprocess.run([cli, "kernel", "install", "--prefix", prefix, "--name", "cb-bench"], check=True,
                       capture_output=True)  # fmt: skip
        os.environ["JUPYTER_PATH"] = os.path.join(prefix, "share", "jupyter")
        runs: dict[str, list[dict[str, float]]] = {"ipykernel": [], "console-bridge": []}
        for rep in range(args.reps):
            order = [("ipykernel", "python3"), ("console-bridge", "cb-bench")]
            for label, name in order if rep % 2 == 0 else order[::-1]:
                runs[label].append(_measure(name, folder))
    report: dict[str, Any] = {
        label: {key: statistics.median(run[key] for run in figures) for key in figures[0]}
        for label, figures in runs.items()
    }
    ours, base = report["console-bridge"], report["ipykernel"]
    report["ratios"] = {
        "start_s": ours["start_s"],
        "trip_ratio": ours["trip_s"] / base["trip_s"],
        "plot_ratio": ours["plot_s"] / base["plot_s"],
    }
    for label in ("ipykernel", "console-bridge"):
        figures = report[label]
        print(f"{label:>15}: start {figures['start_s']:.2f} s, trip {figures['trip_s'] * 1000:.1f} ms, "
              f"plot {figures['plot_s']:.2f} s")  # fmt: skip
    for key, (how, bound) in TARGETS.items():
        value = report["ratios"][key]
        print(f"{key:>15}: {value:.2f} (target {how} {bound}: {'met' if value <= bound else 'NOT met'})")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
