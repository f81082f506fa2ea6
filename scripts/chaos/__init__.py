"""Chaos soak for ``console_bridge.AsyncConsole`` against a real ``mcp-console`` binary.

Every cycle makes one seeded random choice among the operations below, applied to one of up
to ``--sessions`` concurrently open sessions (each with its own temporary workspace and
recordings folder, all under one temporary root that is removed at the end). With some
probability a *bystander* trivial cell runs at the same time on another open session, so a
fault in one session is exercised while a call is in flight in a neighbour.

Operations (the fault kinds)::

    open          start a session (and, usually, a first cell that starts the worker); sometimes the
                  opener's own cancel scope fires during start(), or another task calls close() or
                  cancel() during start(): either is final, and nothing may survive
    trivial       a trivial cell, output checked
    interrupt     a long cell, then the host's interrupt(); the session must stay usable
    cancel        a long run() in a task, console.cancel() from outside mid-call
    close_busy    close() while a cell runs (idle between windows, or with a call in flight)
    close         close() of an idle session
    sigkill       SIGKILL of the server from outside; the next operation must raise ConnectionClosed
    freeze        SIGSTOP of the server (idle or mid-cell), then close(): the stop ladder must end it
    crash         os._exit(3) in a cell: CellResult.worker_exited, the session stays usable
    flood         print('x' * 1_000_000): the result arrives, capped by the server's 8 KiB notice
    stdin         a cell waiting on input(), answered with send(stdin=...)
    restart       the host's restart(): in-memory state lost, the session stays usable
    abandon       the caller's own cancel scope ends a run() mid-call; interrupt(), then usable

Every library call runs under a bound from ``BOUNDS`` (seconds) via ``anyio.move_on_after``;
passing it counts as a hang (a watchdog thread ends the run if a shielded call never returns).
After each cycle the soak checks:

* survivors: every process recorded in a closed session's tree (server plus descendants, sampled
  with psutil while the session was open) is gone within ``BOUNDS["reap"]`` seconds (zombies
  ignored); a sweep also catches any process that refers to the run's root (cwd, environment)
  and belongs to no open session;
* leaks: nothing is left in the run's private temp root (``tempfile.tempdir`` points there, so
  each session's private ``TMPDIR`` is created inside it) except the open sessions' own folders;
* untyped errors: every exception the library raised is a ``BridgeError`` subclass;
* unfinalized: every clean ``close()`` left a finalized recording (``console.recording.finalized``;
  sessions that were SIGKILLed, SIGSTOPped or cancelled are exempt). With 0.0.5 this check is weak:
  its recordings have no end marker, so ``finalized`` only means "the server is gone";
* hangs: no call passed its bound.

Unexpected but typed behaviour (a wrong cell output, no ``ConnectionClosed`` after a SIGKILL,
a session unusable after an interrupt, ...) is reported as an *anomaly*.

Usage::

    .venv/bin/python scripts/chaos.py                          # 200 cycles, 4 sessions
    .venv/bin/python scripts/chaos.py --cycles 25 --sessions 3 --seed 1 --json out.json
    .venv/bin/python scripts/chaos.py --binary .venv-mcp-console-0.0.5/bin/mcp-console
    .venv/bin/python scripts/chaos.py --forecast --seed 7 --cycles 25   # the seeded plan, nothing run
    .venv/bin/python scripts/chaos.py --manager --cycles 16 --seed 3     # session manager faults
                                                                         # (scripts/chaos/manager.py)

The plan (which operation, on which session, which open variant) comes from its own seeded
generator and depends only on the seed and the number of open sessions, so ``--forecast`` shows
exactly what a run does as long as every operation behaves; timings and variants inside an
operation come from a second seeded generator.

Exit status: 0 when the run is clean; 1 on any survivor, leak, untyped error, hang or
unfinalized clean close (and on anomalies with ``--strict``); 2 on usage errors; 3 when the
watchdog had to end a run stuck in a call that ignored its bound.

Modules, in the order they build on each other: ``bounds`` (bounds, weights, the cells it runs),
``planning`` (the seeded plan, ``--forecast``), ``bookkeeping`` (steps, sessions, stats, process
helpers), ``watchdog``, ``steps`` (the bounded step and what every operation shares),
``operations`` (one method per fault), ``checks`` (survivors, orphans, leaks after each cycle),
``soak`` (``Chaos``: state, cycle, run, report), ``cli`` (the command line) and ``manager``
(the ``--manager`` soak). ``scripts/chaos.py`` and ``python -m scripts.chaos`` run ``cli.main``.
"""
