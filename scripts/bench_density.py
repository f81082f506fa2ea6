"""The ``--density N`` section of scripts/bench.py: N idle sessions live at once (issue 35).

N sessions (Python + SQL, the real ``mcp-console``) are started one after another, each to the
first result of ``1`` (so its worker is up), in two ways: ``manager`` (``AsyncSessionManager``
with ``warm=1``, ``max_sessions=N+2``, sessions taken with ``open()``; culling off) and ``direct``
(plain ``AsyncConsole``). With all N live it reports:

1. per session: PSS (``memory_full_info().pss`` summed over each session's tree, from its
   supervisor down), processes, file descriptors, inotify instances and watches (links to
   ``anon_inode:inotify`` under /proc/PID/fd, ``inotify wd:`` lines in /proc/PID/fdinfo), cgroups
   and systemd scopes (the session processes' cgroup entries that the host process is not in);
2. the same PSS split by role (supervisor, server, sandbox helpers, relay, worker, ...);
3. the host process's own RSS, PSS, descriptors and CPU time while starting and while idle;
4. the CPU time of the whole tree (host included) over an idle window of 10 s;
5. the time to start them all, and the start rate of the first and the last tenth;
6. a warm claim's p50/p99 with N live (manager only: ``open()`` of a warm session, and to its
   first result of ``1``) and a warm round trip of ``1+1`` on random sessions, p50/p99.

Every session is closed at the end, on failure and on Ctrl-C or SIGTERM too; then no process
started here may be left, nor a folder in the scratch root.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import shutil
import signal
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import psutil
from bench.processes import shared_remasker  # scripts/bench/, beside this script
from bench.stats import percentile
from bench_manager import STEP_BOUND, _ms, _Scratch, _servers, _until

from console_bridge import AsyncConsole, AsyncSessionManager, Owner

MODES = ("manager", "direct")
PLANS = {
    "quick": {"claims": 5, "round_trips": 20, "idle_window": 2.0},
    "full": {"claims": 50, "round_trips": 300, "idle_window": 10.0},
}
#: Sessions closed at once at the end (a bound on the load of closing N trees on a small machine).
CLOSE_CONCURRENCY = 8
#: Seconds one session's close may take before it is cancelled (its tree killed).
CLOSE_BOUND = 60.0
#: The role of a session's process by its command (``argv[0]`` name, ``argv[1]``); the tree's root is
#: the supervisor, any other Python in it the remasker (``_confinement/_remask.py``).
ROLES: dict[tuple[str, str | None], str] = {
    ("mcp-console", "serve"): "server (mcp-console serve)",
    ("mcp-console", "worker-relay"): "relay (mcp-console worker-relay)",
    ("mcp-console", "worker"): "worker (mcp-console worker)",
    ("mcp-console", "resolve"): "resolver (mcp-console resolve)",
    ("mcp-console-sandbox", "--config-env"): "sandbox launcher",
    ("mcp-console-sandbox", "--target-setup-fd"): "sandbox setup helper",
    ("codex-linux-sandbox", None): "sandbox setup helper",
    ("bwrap", None): "bwrap",
}
_KERNEL_LIMITS = {
    "kernel.pid_max": "/proc/sys/kernel/pid_max",
    "kernel.threads-max": "/proc/sys/kernel/threads-max",
    "fs.inotify.max_user_instances": "/proc/sys/fs/inotify/max_user_instances",
    "fs.inotify.max_user_watches": "/proc/sys/fs/inotify/max_user_watches",
    "user.max_user_namespaces": "/proc/sys/user/max_user_namespaces",
}


def kernel_limits() -> dict[str, int | None]:
    out: dict[str, int | None] = {}
    for name, path in _KERNEL_LIMITS.items():
        try:
            out[name] = int(Path(path).read_text(encoding="ascii").split()[0])
        except (OSError, ValueError, IndexError):
            out[name] = None
    return out


# ------------------------------------------------------------------ the /proc side
def _role(argv: list[str], is_root: bool) -> str:
    name = os.path.basename(argv[0]) if argv else ""
    if is_root:
        return "supervisor"
    if name.startswith("python"):
        return "remasker"
    second = argv[1] if len(argv) > 1 else None
    return ROLES.get((name, second)) or ROLES.get((name, None)) or f"other ({name})"


def _inotify(pid: int) -> tuple[int, int]:
    """(instances, watches) held by ``pid``; PermissionError when its fds are not ours to read."""
    instances = watches = 0
    fd_dir = f"/proc/{pid}/fd"
    for fd in os.listdir(fd_dir):
        try:
            if os.readlink(f"{fd_dir}/{fd}") != "anon_inode:inotify":
                continue
            text = Path(f"/proc/{pid}/fdinfo/{fd}").read_text(encoding="ascii", errors="replace")
        except FileNotFoundError:
            continue
        instances += 1
        watches += sum(1 for line in text.splitlines() if line.startswith("inotify wd:"))
    return instances, watches


def _cgroups(pid: int) -> set[str]:
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text(encoding="ascii").splitlines()
    except OSError:
        return set()
    return {line for line in lines if line}


def _process_record(proc: psutil.Process, session: int, is_root: bool) -> dict[str, Any] | None:
    try:
        with proc.oneshot():
            argv = proc.cmdline()
            info = proc.memory_full_info()
            record: dict[str, Any] = {
                "session": session,
                "pid": proc.pid,
                "role": _role(argv, is_root),
                "pss": getattr(info, "pss", info.rss),
                "uss": info.uss,
                "rss": info.rss,
                "fds": proc.num_fds(),
                "threads": proc.num_threads(),
            }
    except psutil.Error:
        return None
    try:
        record["inotify"], record["watches"] = _inotify(proc.pid)
    except OSError:
        record["inotify"] = record["watches"] = None  # fds not readable from here (another user namespace)
    record["cgroups"] = _cgroups(proc.pid)
    return record


def session_roots(pids: list[int | None]) -> list[int]:
    """Each server pid's ancestor that is a child of this process (its supervisor)."""
    me = os.getpid()
    parents = {p.pid: p.info["ppid"] for p in psutil.process_iter(["ppid"])}
    roots = []
    for pid in pids:
        node = pid
        while node is not None and node in parents and parents[node] != me:
            node = parents[node] if parents[node] not in (0, 1) else None
        if node is not None and parents.get(node) == me:
            roots.append(node)
    return roots


def survey(roots: list[int]) -> list[dict[str, Any]]:
    """Every process of every session tree, one record each (a single pass over /proc)."""
    children: dict[int, list[int]] = defaultdict(list)
    for proc in psutil.process_iter(["ppid"]):
        children[proc.info["ppid"]].append(proc.pid)
    records = []
    for index, root in enumerate(roots):
        stack = [root]
        while stack:
            pid = stack.pop()
            stack.extend(children.get(pid, ()))
            with contextlib.suppress(psutil.Error):
                record = _process_record(psutil.Process(pid), index, pid == root)
                if record is not None:
                    records.append(record)
    return records


def summarize_survey(records: list[dict[str, Any]], n: int) -> dict[str, Any]:
    host_groups = _cgroups(os.getpid())
    groups = set().union(*(r["cgroups"] for r in records)) - host_groups if records else set()
    readable = [r for r in records if r["inotify"] is not None]
    by_role: dict[str, dict[str, float]] = {}
    for role in sorted({r["role"] for r in records}):
        mine = [r for r in records if r["role"] == role]
        by_role[role] = {
            "processes_per_session": round(len(mine) / n, 2),
            "pss_mib_per_session": round(sum(r["pss"] for r in mine) / n / 2**20, 2),
            "uss_mib_per_session": round(sum(r["uss"] for r in mine) / n / 2**20, 2),
            "rss_mib_per_session": round(sum(r["rss"] for r in mine) / n / 2**20, 2),
        }
    return {
        "pss_mib_per_session": round(sum(r["pss"] for r in records) / n / 2**20, 2),
        "uss_mib_per_session": round(sum(r["uss"] for r in records) / n / 2**20, 2),
        "rss_mib_per_session": round(sum(r["rss"] for r in records) / n / 2**20, 2),
        "processes_per_session": round(len(records) / n, 2),
        "threads_per_session": round(sum(r["threads"] for r in records) / n, 2),
        "fds_per_session": round(sum(r["fds"] for r in records) / n, 2),
        "inotify_instances_per_session": round(sum(r["inotify"] for r in readable) / n, 2),
        "inotify_watches_per_session": round(sum(r["watches"] for r in readable) / n, 2),
        "processes_with_unreadable_fds": len(records) - len(readable),
        "cgroups_created": len(groups),
        "cgroups_per_session": round(len(groups) / n, 2),
        "scopes_created": sum(1 for g in groups if g.endswith(".scope")),
        "by_role": by_role,
    }


def _cpu_seconds(procs: list[psutil.Process]) -> dict[int, float]:
    out = {}
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            times = proc.cpu_times()
            out[proc.pid] = times.user + times.system
    return out


async def idle_cpu(window: float) -> dict[str, float]:
    """CPU seconds of this process and of every descendant over ``window`` seconds of idling."""
    me = psutil.Process()
    procs = [me, *_servers()]
    before = _cpu_seconds(procs)
    await anyio.sleep(window)
    after = _cpu_seconds(procs)
    tree = sum(after[pid] - before[pid] for pid in after if pid in before)
    host = after.get(me.pid, 0.0) - before.get(me.pid, 0.0)
    return {
        "window_s": window,
        "tree_cpu_s": round(tree, 3),
        "tree_cpu_percent": round(100 * tree / window, 2),
        "host_cpu_s": round(host, 3),
    }


def host_figures() -> dict[str, Any]:
    me = psutil.Process()
    info = me.memory_full_info()
    instances, watches = _inotify(me.pid)
    return {
        "rss_mib": round(info.rss / 2**20, 1),
        "pss_mib": round(getattr(info, "pss", info.rss) / 2**20, 1),
        "fds": me.num_fds(),
        "threads": me.num_threads(),
        "inotify_instances": instances,
        "inotify_watches": watches,
        "remasker": shared_remasker(),
    }


def _host_cpu() -> float:
    times = psutil.Process().cpu_times()
    return times.user + times.system


def start_rates(durations: list[float]) -> dict[str, Any]:
    """Total time and the start rate (sessions per second) of the first and the last tenth."""
    tenth = max(1, len(durations) // 10)
    first, last = durations[:tenth], durations[-tenth:]
    return {
        "started": len(durations),
        "total_s": round(sum(durations), 2),
        "rate_per_s": round(len(durations) / sum(durations), 3) if durations else None,
        "first_tenth_rate_per_s": round(len(first) / sum(first), 3) if first else None,
        "last_tenth_rate_per_s": round(len(last) / sum(last), 3) if last else None,
        "median_start_ms": _ms(statistics.median(durations)) if durations else None,
        "samples_ms": [_ms(d) for d in durations],
    }


def _pcts(samples: list[float]) -> dict[str, Any]:
    return {
        "p50_ms": _ms(percentile(samples, 0.5) or 0.0) if samples else None,
        "p99_ms": _ms(percentile(samples, 0.99) or 0.0) if samples else None,
        "count": len(samples),
    }


async def _check_one_plus_one(console: AsyncConsole, code: str = "1+1", expect: str = "2") -> None:
    result = await console.run(python=code, timeout=STEP_BOUND)
    if result.is_error or result.text.strip() != expect:
        raise RuntimeError(f"unexpected result of {code}: {result.text[:200]!r}")


# ------------------------------------------------------------------ one mode
async def _start_all(
    n: int, open_one: Callable[[int], Awaitable[AsyncConsole]], live: list[AsyncConsole], log: Callable[[str], None]
) -> tuple[list[float], str | None]:
    """Start sessions one after another to the first result of ``1`` (each into ``live``); stop at
    the first failure. Closing them is the caller's (``open_one`` hands each to its owner first)."""
    durations: list[float] = []
    step = max(1, n // 10)
    for index in range(n):
        started = time.perf_counter()
        try:
            with anyio.fail_after(STEP_BOUND):
                console = await open_one(index)
                await _check_one_plus_one(console, "1", "1")
        except Exception as exc:
            return durations, f"session {index + 1} of {n} did not start: {type(exc).__name__}: {exc}"
        live.append(console)
        durations.append(time.perf_counter() - started)
        if (index + 1) % step == 0 or index + 1 == n:
            recent = durations[-step:]
            log(f"  {index + 1}/{n} live; last {len(recent)} at {len(recent) / sum(recent):.2f}/s")
    return durations, None


async def measure_live(
    consoles: list[AsyncConsole], plan: dict[str, Any], log: Callable[[str], None], report: dict[str, Any]
) -> None:
    """With every session live and idle: the survey, the host, idle CPU, round trips."""
    n = len(consoles)
    await anyio.sleep(1.0)  # let the trees settle
    roots = await anyio.to_thread.run_sync(lambda: session_roots([c.pid for c in consoles]))
    if len(roots) != n:
        report["errors"].append(f"found the supervisor of {len(roots)} of {n} sessions")
    survey_started = time.perf_counter()
    records = await anyio.to_thread.run_sync(survey, roots)
    report["survey_s"] = round(time.perf_counter() - survey_started, 2)
    report["per_session"] = summarize_survey(records, max(1, len(roots)))
    report["host"] = host_figures()
    log(
        f"  {report['per_session']['pss_mib_per_session']} MiB PSS, "
        f"{report['per_session']['processes_per_session']} processes per session; measuring idle CPU"
    )
    report["idle"] = await idle_cpu(plan["idle_window"])
    rng = random.Random(35)
    samples = []
    for _ in range(plan["round_trips"]):
        console = rng.choice(consoles)
        started = time.perf_counter()
        await _check_one_plus_one(console)
        samples.append(time.perf_counter() - started)
    report["round_trip"] = _pcts(samples)
    log(f"  warm round trip of 1+1: p50 {report['round_trip']['p50_ms']} ms")


async def _close_all(consoles: list[AsyncConsole]) -> float:
    """Close every console (shielded, bounded each; a close that overruns is cancelled)."""
    started = time.perf_counter()
    limiter = anyio.CapacityLimiter(CLOSE_CONCURRENCY)

    async def close(console: AsyncConsole) -> None:
        async with limiter:
            with anyio.move_on_after(CLOSE_BOUND) as scope:
                await console.close()
            if scope.cancelled_caught:
                await console.cancel()

    with anyio.CancelScope(shield=True):
        async with anyio.create_task_group() as tg:
            for console in consoles:
                tg.start_soon(close, console)
    return time.perf_counter() - started


async def run_direct(
    n: int, scratch: _Scratch, options: dict[str, Any], plan: dict[str, Any], log: Callable[[str], None]
) -> dict[str, Any]:
    report: dict[str, Any] = {"mode": "direct", "errors": []}
    opened: list[AsyncConsole] = []  # every console made, started or not: all are closed at the end
    live: list[AsyncConsole] = []
    cpu = _host_cpu()

    async def open_one(index: int) -> AsyncConsole:
        console = AsyncConsole(scratch.workspace, owner=Owner(f"density-{index}"), **options)
        opened.append(console)
        await console.start()
        return console

    try:
        durations, error = await _start_all(n, open_one, live, log)
        report["start"] = start_rates(durations)
        report["host_cpu_starting_s"] = round(_host_cpu() - cpu, 2)
        if error:
            report["errors"].append(error)
        if live:
            await measure_live(live, plan, log, report)
    finally:
        report["close_all_s"] = round(await _close_all(opened), 2)
    return report


async def run_manager(
    n: int, scratch: _Scratch, options: dict[str, Any], plan: dict[str, Any], log: Callable[[str], None]
) -> dict[str, Any]:
    report: dict[str, Any] = {"mode": "manager", "errors": []}
    cpu = _host_cpu()
    live: list[AsyncConsole] = []
    manager = AsyncSessionManager(
        scratch.workspace,
        warm=1,
        max_sessions=n + 2,
        idle_timeout=None,
        max_lifetime=None,
        acquire_timeout=STEP_BOUND,
        **options,
    )
    close_started = None
    try:
        async with manager:  # leaving closes every session it started

            async def open_one(index: int) -> AsyncConsole:
                return await manager.open(owner=Owner(f"density-{index}"))

            durations, error = await _start_all(n, open_one, live, log)
            report["start"] = start_rates(durations)
            report["host_cpu_starting_s"] = round(_host_cpu() - cpu, 2)
            stats = manager.stats()
            report["start"]["warm_hits"], report["start"]["misses"] = stats.warm_hits.count, stats.misses.count
            if error:
                report["errors"].append(error)
            if not live:
                return report
            await measure_live(live, plan, log, report)
            claims, to_result = [], []
            try:  # a claim that fails (no warm-up succeeds) is reported; the figures above are kept
                for index in range(plan["claims"]):
                    await _until(lambda: manager.stats().warm >= 1)
                    t0 = time.perf_counter()
                    console = await manager.open(owner=Owner(f"claimer-{index}"))
                    claims.append(time.perf_counter() - t0)
                    try:
                        await _check_one_plus_one(console, "1", "1")
                        to_result.append(time.perf_counter() - t0)
                    finally:
                        await manager.close(manager.id_of(console))
            except Exception as exc:
                why = manager.stats().last_failure
                report["errors"].append(f"claim {len(claims) + 1}: {type(exc).__name__}: {exc} (last failure: {why})")
            report["claim"] = _pcts(claims)
            report["claim_to_result"] = _pcts(to_result)
            log(f"  warm claim: p50 {report['claim']['p50_ms']} ms, to the first result {report['claim_to_result']}")
            close_started = time.perf_counter()
    finally:
        if close_started is not None:
            report["close_all_s"] = round(time.perf_counter() - close_started, 2)
    return report


# ------------------------------------------------------------------ the section
async def run(binary: Path, quick: bool, log: Callable[[str], None], n: int, modes: tuple[str, ...]) -> dict[str, Any]:
    """Every mode's figures with ``n`` sessions live, and the cleanup check."""
    plan = PLANS["quick" if quick else "full"]
    scratch = _Scratch()
    saved = tempfile.tempdir
    tempfile.tempdir = str(scratch.tmp)  # each session's private TMPDIR lands here: leftovers are leaks
    saved_state = os.environ.get("CONSOLE_BRIDGE_STATE_DIR")
    os.environ["CONSOLE_BRIDGE_STATE_DIR"] = str(scratch.state)
    options = {"command": binary, "recordings_dir": scratch.recordings}
    report: dict[str, Any] = {
        "n": n,
        "plan": plan,
        "modes": {},
        "errors": [],
        "kernel_limits": kernel_limits(),
        "load_average_at_start": list(os.getloadavg()),
        "host_processes_at_start": len(psutil.pids()),
    }
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, asyncio.current_task().cancel)  # type: ignore[union-attr]  # closes all
    runners = {"manager": run_manager, "direct": run_direct}
    try:
        for mode in modes:
            log(f"phase: density {mode}, N={n}")
            try:
                result = await runners[mode](n, scratch, options, plan, log)
            except Exception as exc:
                result = {"mode": mode, "errors": [f"{type(exc).__name__}: {exc}"]}
                log(f"  FAILED: {type(exc).__name__}: {exc}")
            report["modes"][mode] = result
            report["errors"] += [f"{mode}: {e}" for e in result["errors"]]
            with anyio.move_on_after(30):  # every tree of this mode is gone before the next starts
                await _until(lambda: not _servers())
    finally:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.remove_signal_handler(signal.SIGTERM)
        tempfile.tempdir = saved
        if saved_state is None:
            os.environ.pop("CONSOLE_BRIDGE_STATE_DIR", None)
        else:
            os.environ["CONSOLE_BRIDGE_STATE_DIR"] = saved_state
        with anyio.CancelScope(shield=True), anyio.move_on_after(30):
            await _until(lambda: not _servers())
        survivors = _servers()
        for proc in survivors:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        leftovers = scratch.leftovers()
        shutil.rmtree(scratch.root, ignore_errors=True)
    report["load_average_at_end"] = list(os.getloadavg())
    report["targets"] = targets(report)
    report["cleanup"] = {
        "survivors": [p.pid for p in survivors],
        "leftover_folders": leftovers,
        "ok": not survivors and not leftovers and not scratch.root.exists(),
    }
    return report


#: Issue 35's targets: (figure path in a mode's report, threshold, at most or at least, unit).
TARGETS: dict[str, tuple[tuple[str, ...], float, str, str]] = {
    "pss_mib_per_session": (("per_session", "pss_mib_per_session"), 20.0, "<=", " MiB"),
    "start_rate_per_s": (("start", "rate_per_s"), 4.0, ">=", "/s"),
    "last_tenth_rate_per_s": (("start", "last_tenth_rate_per_s"), 4.0, ">=", "/s"),
    "warm_claim_p50_ms": (("claim", "p50_ms"), 2.0, "<=", " ms"),
}


def targets(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out = {}
    for mode, figures in report["modes"].items():
        for key, (path, threshold, op, unit) in TARGETS.items():
            value = _get(figures, *path)
            if value is None:
                continue
            met = value <= threshold if op == "<=" else value >= threshold
            out[f"{mode}:{key}"] = {"threshold": threshold, "op": op, "unit": unit, "value": value, "met": met}
    return out


def _get(figures: dict[str, Any], *path: str) -> Any:
    value: Any = figures
    for part in path:
        value = value.get(part) if isinstance(value, dict) else None
    return value


ROWS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("sessions started", ("start", "started"), ""),
    ("time to start them all", ("start", "total_s"), "s"),
    ("start rate, all / first tenth / last tenth", ("start",), "rates"),
    ("PSS per session", ("per_session", "pss_mib_per_session"), "MiB"),
    ("USS per session", ("per_session", "uss_mib_per_session"), "MiB"),
    ("processes per session", ("per_session", "processes_per_session"), ""),
    ("file descriptors per session", ("per_session", "fds_per_session"), ""),
    ("inotify instances / watches per session", ("per_session",), "inotify"),
    ("cgroups / scopes created", ("per_session",), "cgroups"),
    ("host process RSS / PSS", ("host",), "host"),
    ("host process fds / threads", ("host",), "host_fds"),
    ("host process inotify instances / watches", ("host",), "host_inotify"),
    ("shared remasker PSS (all sessions)", ("host", "remasker", "pss_mib"), "MiB"),
    ("shared remasker inotify instances / watches", ("host", "remasker"), "host_inotify"),
    ("host CPU while starting", ("host_cpu_starting_s",), "s"),
    ("idle CPU of the whole tree over the window", ("idle",), "idle"),
    ("warm claim p50 / p99", ("claim",), "pcts"),
    ("warm claim to first result p50 / p99", ("claim_to_result",), "pcts"),
    ("warm round trip of 1+1, random session, p50 / p99", ("round_trip",), "pcts"),
    ("close them all", ("close_all_s",), "s"),
)


def _cell(value: Any, kind: str) -> str:
    if value is None:
        return "n/a"
    if kind == "rates":
        return f"{value['rate_per_s']} / {value['first_tenth_rate_per_s']} / {value['last_tenth_rate_per_s']} per s"
    if kind == "inotify":
        return f"{value['inotify_instances_per_session']} / {value['inotify_watches_per_session']}"
    if kind == "cgroups":
        return f"{value['cgroups_created']} / {value['scopes_created']}"
    if kind == "host":
        return f"{value['rss_mib']} / {value['pss_mib']} MiB"
    if kind == "host_inotify":
        return f"{value['inotify_instances']} / {value['inotify_watches']}"
    if kind == "host_fds":
        return f"{value['fds']} / {value['threads']}"
    if kind == "idle":
        return f"{value['tree_cpu_s']} s in {value['window_s']:g} s (host {value['host_cpu_s']} s)"
    if kind == "pcts":
        return f"{value['p50_ms']} / {value['p99_ms']} ms"
    return f"{value} {kind}".strip()


def table(report: dict[str, Any]) -> str:
    modes = list(report["modes"])
    rows = [(f"N = {report['n']}", *modes)]
    for label, path, kind in ROWS:
        rows.append((label, *(_cell(_get(report["modes"][m], *path), kind) for m in modes)))
    pss: dict[str, float] = {}
    for m in modes:
        for role, figures in (_get(report["modes"][m], "per_session", "by_role") or {}).items():
            pss[role] = max(pss.get(role, 0.0), figures["pss_mib_per_session"])
    for role in sorted(pss, key=pss.__getitem__, reverse=True):  # the largest holders first
        cells = (_role_cell(_get(report["modes"][m], "per_session", "by_role", role)) for m in modes)
        rows.append((f"  PSS per session: {role}", *cells))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for index, row in enumerate(rows):
        lines.append("| " + " | ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)) + " |")
        if index == 0:
            lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def _role_cell(figures: dict[str, float] | None) -> str:
    if figures is None:
        return "n/a"
    count = figures["processes_per_session"]
    return f"{figures['pss_mib_per_session']} MiB in {count:g} process{'' if count == 1 else 'es'}"
