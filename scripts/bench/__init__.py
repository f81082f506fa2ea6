"""Side-by-side benchmark: ``console_bridge.AsyncConsole`` against the raw ``mcp_console.AsyncMCPConsole``.

Both clients run in ONE process, against the SAME ``mcp-console`` binary, with the SAME ``serve``
arguments (taken from the command line of a real bridge server, so they cannot drift from what
``AsyncConsole`` launches) and the same kind of environment and workspace: every session gets a
fresh temporary workspace, its own ``TMPDIR`` and its own ``MCP_CONSOLE_HOME``, all under one
temporary root that is removed at the end.

Usage::

    .venv/bin/python scripts/bench.py                    # the full run (a few minutes)
    .venv/bin/python scripts/bench.py --quick            # a smoke run (under a minute)
    .venv/bin/python scripts/bench.py --json bench.json  # also write every figure as JSON
    .venv/bin/python scripts/bench.py --manager          # the session manager section only
    .venv/bin/python scripts/bench.py --serve            # `console-bridge serve` vs library vs raw
    .venv/bin/python scripts/bench.py --ray              # sessions on a 2-node Ray cluster (bench_ray.py)
    .venv/bin/python scripts/bench.py --density 100      # 100 idle sessions live at once (bench_density.py)

What is measured (docs/performance.md explains each figure):

1. cold start to the first result of the cell ``1`` (median);
2. warm round trip of ``1`` (median, p95), raw and bridge calls interleaved;
3. completion lag of a 2 s cell polled with 0.5 s windows (bridge ``run()`` vs a raw poll loop);
4. close latency (idle, busy), ``cancel()`` and interrupt latency, and when the tree is gone;
5. Python-side memory per session (tracemalloc) and processes per session (psutil);
6. N concurrent sessions each running M trivial cells: per-call latency against one session.

``--manager`` runs the session manager section instead (scripts/bench_manager.py): warm-claim
latency against a cold start, churn, memory per warm session. ``--serve`` runs the
``console-bridge serve`` section (scripts/bench_serve.py): warm round trip of ``1`` through serve
(stdio, the MCP SDK client) against the library in-process and the raw client. ``--ray`` runs the Ray section
(scripts/bench_ray.py): the round trip added by a remote session, throughput across 2 nodes.

Exit status: 0 when every phase ran and nothing survived the cleanup; 1 when a phase failed or a
process or temporary folder survived; 2 on usage errors.

Modules, each building on those before it: ``settings``, ``stats``, ``processes``, ``sessions``,
``phase_start``, ``phase_calls``, ``phase_close``, ``phase_concurrency``, ``cleanup``, ``output``,
``cli``. ``scripts/bench.py`` runs ``cli.main``; the sections with modules of their own
(``--manager``, ``--serve``, ``--ray``) are the bench_*.py beside it.
"""
