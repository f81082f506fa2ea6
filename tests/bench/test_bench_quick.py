"""The benchmark script runs end to end (``--quick``) and writes its JSON report.

Only the shape is checked: no timing thresholds here (figures depend on the machine;
docs/performance.md records a full run).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "bench.py"
BINARY = Path(sys.executable).parent / "mcp-console"

METRICS = {
    "cold_start_median_ms",
    "fresh_process_cold_start_median_ms",
    "warm_rtt_median_ms",
    "warm_rtt_p95_ms",
    "completion_lag_median_ms",
    "close_idle_median_ms",
    "close_busy_median_ms",
    "cancel_busy_median_ms",
    "cancel_idle_median_ms",
    "interrupt_median_ms",
    "memory_current_kib",
    "memory_peak_kib",
    "processes_per_session",
    "concurrent_1_per_call_ms",
    "concurrent_n_per_call_ms",
    "concurrent_overhead_factor",
    "idle_cpu_per_session",
    "supervisor_start_added_ms",
    "probe_cell_ms",
    "probe_share_of_cold_start",
}
TARGETS = {
    "warm_rtt_ratio",
    "warm_rtt_p95_ratio",
    "cold_start_ratio",
    "concurrency_ratio",
    "run_completion_lag",
    "idle_close",
    "cancel",
}


@pytest.mark.console
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_quick_benchmark_runs_and_writes_json(tmp_path: Path) -> None:
    if not BINARY.exists():
        pytest.skip(f"no mcp-console beside {sys.executable}")
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json", str(out), "--binary", str(BINARY)],
        capture_output=True,
        text=True,
        timeout=570,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    output = f"stdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}"
    assert proc.returncode == 0, f"bench.py --quick exited {proc.returncode}\n{output}"
    report = json.loads(out.read_text(encoding="utf-8"))
    assert {"meta", "parity", "metrics", "targets", "samples", "cleanup", "errors"} <= set(report)
    assert report["meta"]["quick"] is True
    assert report["errors"] == []
    assert report["cleanup"]["ok"] is True
    assert report["cleanup"]["survivors"] == []
    assert report["parity"]["serve_args"][0] == "serve"
    missing = METRICS - set(report["metrics"])
    assert not missing, sorted(missing)
    for key, metric in report["metrics"].items():
        assert {"label", "unit", "raw", "bridge", "ratio"} <= set(metric), key
        assert metric["bridge"] is not None, key
    assert set(report["targets"]) == TARGETS
    for target in report["targets"].values():
        assert isinstance(target["value"], int | float)
        assert isinstance(target["met"], bool)
    # The table on stdout carries every metric row.
    assert "| metric" in proc.stdout


@pytest.mark.console
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_quick_manager_section_runs_and_leaks_nothing(tmp_path: Path) -> None:
    if not BINARY.exists():
        pytest.skip(f"no mcp-console beside {sys.executable}")
    out = tmp_path / "bench-manager.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--manager", "--quick", "--json", str(out), "--binary", str(BINARY)],
        capture_output=True,
        text=True,
        timeout=570,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    output = f"stdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}"
    assert proc.returncode == 0, f"bench.py --manager --quick exited {proc.returncode}\n{output}"
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["errors"] == [] and report["cleanup"]["ok"] is True
    latency, churn, memory = report["latency"], report["churn"], report["memory"]
    assert latency["warm_claim_p50_ms"] > 0 and latency["cold_start_median_ms"] > latency["warm_claim_p50_ms"]
    assert churn["cycles"] >= 1 and churn["leaked_processes"] == [] and churn["leaked_folders"] == []
    assert churn["peak_live"] <= 4
    assert memory["tree_pss_mib_per_session"] > 0
    assert set(report["targets"]) == {"warm_claim_p50_ms", "warm_claim_p99_ms"}
    assert "| warm claim to first result" in proc.stdout


@pytest.mark.console
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_quick_serve_section_runs_and_leaks_nothing(tmp_path: Path) -> None:
    if not BINARY.exists():
        pytest.skip(f"no mcp-console beside {sys.executable}")
    out = tmp_path / "bench-serve.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--serve", "--quick", "--json", str(out), "--binary", str(BINARY)],
        capture_output=True,
        text=True,
        timeout=270,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    output = f"stdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}"
    assert proc.returncode == 0, f"bench.py --serve --quick exited {proc.returncode}\n{output}"
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["errors"] == [] and report["cleanup"]["ok"] is True
    assert set(report["warm_rtt"]) == {"raw", "library", "serve", "serve-http", "floor-stdio", "floor-http"}
    assert report["serve_http_ratio"] > 0
    assert set(report["target_http"]) == {"threshold", "value", "met"} and set(report["hop_ms"]) == {
        "serve",
        "serve-http",
    }
    assert all(figure["median_ms"] > 0 for figure in report["warm_rtt"].values())
    assert report["target"]["threshold"] == 1.15
    assert "| warm round trip of `1`, serve" in proc.stdout
    # the breakdown: the floor (a server that does nothing) and serve's own work add up to the hop
    for name in ("serve", "serve-http"):
        own = report["serve_own_ms"][name] + report["floor_ms"][name]
        assert abs(own - report["hop_ms"][name]) < 0.01
        # the least ratio serve could reach is the library under it plus the floor, over raw: arithmetic,
        # not a timing claim (a quick run's few rounds can put the library below raw)
        library, raw_ms = report["warm_rtt"]["library"]["median_ms"], report["warm_rtt"]["raw"]["median_ms"]
        best = (library + report["floor_ms"][name]) / raw_ms
        assert report["best_ratio"][name] == pytest.approx(best, abs=0.002)
    assert report["budget_ms"] == pytest.approx(report["warm_rtt"]["raw"]["median_ms"] * 0.15, abs=0.01)
    assert "serve's own work" in proc.stdout


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_quick_connection_section_reports_the_gates_own_work(tmp_path: Path) -> None:
    out = tmp_path / "bench-connection.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--connection", "--quick", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=240,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert proc.returncode == 0, f"bench.py --connection --quick exited {proc.returncode}\n{proc.stderr[-4000:]}"
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["target_ms"] == 0.10 and set(report["transports"]) == {"stdio", "http"}
    for row in report["transports"].values():
        assert all(row[name]["p50"] > 0 for name in ("sdk", "bridge", "strict"))
        # own work is the bridge median less the SDK's: arithmetic, not a timing claim
        assert row["own_ms"] == pytest.approx(row["bridge"]["p50"] - row["sdk"]["p50"])
    assert "own ms (target <= 0.10)" in proc.stdout


@pytest.mark.console
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_density_section_runs_with_two_sessions_and_leaks_nothing(tmp_path: Path) -> None:
    if not BINARY.exists():
        pytest.skip(f"no mcp-console beside {sys.executable}")
    out = tmp_path / "bench-density.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--density", "2", "--quick", "--json", str(out), "--binary", str(BINARY)],
        capture_output=True,
        text=True,
        timeout=270,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    output = f"stdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}"
    assert proc.returncode == 0, f"bench.py --density 2 --quick exited {proc.returncode}\n{output}"
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["errors"] == [] and report["cleanup"]["ok"] is True
    assert report["n"] == 2 and set(report["modes"]) == {"manager", "direct"}
    for mode, figures in report["modes"].items():
        assert figures["start"]["started"] == 2, mode
        per_session = figures["per_session"]
        assert per_session["pss_mib_per_session"] > 0 and per_session["processes_per_session"] >= 2, mode
        assert per_session["fds_per_session"] > 0, mode
        assert "supervisor" in per_session["by_role"], mode
        assert figures["round_trip"]["count"] > 0 and figures["round_trip"]["p50_ms"] > 0, mode
        assert figures["idle"]["window_s"] > 0, mode
    assert report["modes"]["manager"]["claim"]["p50_ms"] > 0
    assert "manager:pss_mib_per_session" in report["targets"]
    assert "| PSS per session" in proc.stdout
