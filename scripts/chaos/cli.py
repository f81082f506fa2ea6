"""The command line: ``python scripts/chaos.py`` (or ``python -m scripts.chaos``); ``--help``."""

from __future__ import annotations

import argparse
import json
import random
import sys
import traceback
from collections import Counter
from pathlib import Path

import anyio

from . import __doc__ as OVERVIEW
from .bounds import OPERATIONS
from .planning import forecast
from .soak import Chaos


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=OVERVIEW.split("\n\n")[0] if OVERVIEW else None)
    parser.add_argument("--cycles", type=int, default=200, help="number of cycles (default 200)")
    parser.add_argument("--sessions", type=int, default=4, help="max concurrent sessions (default 4)")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: random, printed)")
    parser.add_argument("--binary", default=None, help="mcp-console binary (default: the library's choice)")
    parser.add_argument("--json", default=None, metavar="PATH", help="also write the report as JSON")
    parser.add_argument("--strict", action="store_true", help="also exit 1 on anomalies")
    parser.add_argument("--progress", type=int, default=0, metavar="N", help="print a status line every N cycles")
    parser.add_argument("-v", "--verbose", action="store_true", help="log every operation and finding")
    parser.add_argument(
        "--forecast", action="store_true", help="print the seeded plan (as if every operation behaves) and exit"
    )
    parser.add_argument(
        "--manager", action="store_true", help="soak the session manager instead (scripts/chaos/manager.py)"
    )
    args = parser.parse_args(argv)
    if args.cycles < 1 or args.sessions < 1:
        parser.error("--cycles and --sessions must be at least 1")
    if args.binary and not Path(args.binary).expanduser().is_file():
        parser.error(f"--binary {args.binary!r} is not a file")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.manager:
        return manager_main(args)
    if args.forecast:
        if args.seed is None:
            print("chaos: --forecast needs --seed", file=sys.stderr)
            return 2
        plans = forecast(args.seed, args.cycles, args.sessions)
        for index, plan in enumerate(plans, 1):
            print(f"{index:4d} {plan.kind:<10} {plan.variant or ''}")
        counts = Counter(plan.kind for plan in plans)
        print("kinds: " + ", ".join(f"{kind}={counts.get(kind, 0)}" for kind in OPERATIONS))
        return 0
    chaos = Chaos(args)
    aborted: str | None = None
    try:
        anyio.run(chaos.main)
    except KeyboardInterrupt:
        aborted = "interrupted"
    except BaseException as exc:  # the soak itself failed: report what was gathered
        aborted = f"soak error: {type(exc).__name__}: {exc}"
        traceback.print_exc()
    finally:
        chaos.watchdog.stop()
        report = chaos.report(aborted=aborted)
        try:
            chaos.cleanup()
        except OSError as exc:
            print(f"chaos: could not remove {chaos.root}: {exc}", file=sys.stderr)
        chaos.print_report(report)
        chaos.write_json(report)
    return 0 if report["ok"] else 1


def manager_main(args: argparse.Namespace) -> int:
    """``--manager``: the session manager soak; same report keys and exit status as the console soak."""
    from . import manager as chaos_manager  # scripts/chaos/manager.py

    seed = args.seed if args.seed is not None else random.randrange(1 << 16)
    print(f"chaos --manager: seed {seed}, {args.cycles} cycles", file=sys.stderr)

    def log(message: str) -> None:
        if args.verbose:
            print(message, file=sys.stderr, flush=True)

    report = chaos_manager.run(args.binary, args.cycles, seed, log)
    print(json.dumps({k: v for k, v in report.items() if k != "details"}, indent=2))
    for key, items in report["details"].items():
        for item in items:
            print(f"{key}: {item}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print("OK" if report["ok"] else f"FAILED: {', '.join(report['failures'])}")
    return 0 if report["ok"] and not (args.strict and report["anomalies"]) else 1
