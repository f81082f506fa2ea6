"""A part of :class:`AsyncConsole`: a worker's boot. When a fresh worker boots at the next call,
and the links to the compiled files its bootstrap imports (see ``_bytecode``): made in a thread
before it boots, waited for before the call that boots it, removed once it ran a cell.

The launcher links for the first worker, the call path says when a fresh one is ahead (a restart,
a worker that died) and when it ran; neither knows how the links are made.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable
from pathlib import Path

import anyio

from console_bridge._vetting._bytecode import bytecode_prefix, link_bytecode
from console_bridge._vetting._worker_env import VenvFacts

__all__ = ["WorkerBoot"]


class WorkerBoot:
    """Whether a fresh worker boots at the next call, and its bytecode links.

    ``cache`` gives the session's private cache folder (asked for only when links are made: it
    exists once the confinement is prepared). ``wanted`` is false where the bridge must stay out
    of that cache (no Python cells, or ``dependencies="allow"``: mcp-console's package preparation
    manages it then). ``on_fresh`` runs whenever a fresh worker is ahead (the observer trusts a
    fresh outcome log again).
    """

    def __init__(self, cache: Callable[[], Path], *, wanted: bool, on_fresh: Callable[[], None]) -> None:
        self._cache = cache
        self._wanted = wanted
        self._on_fresh = on_fresh
        #: the worker's Python as inspected on the host (the launcher sets it): what there is to link
        self.facts: VenvFacts | None = None
        #: compiled files linked for the worker's bootstrap, the last time links were made
        self.linked = 0
        #: the links' folder while they are there
        self.prefix: Path | None = None
        #: a fresh worker boots at the next call (a restart; the last one died)
        self.pending = False
        #: the session started: a fresh worker later gets links again (the first one's are the launcher's)
        self.armed = False
        self._thread: threading.Thread | None = None

    def link(self) -> None:
        """Link the compiled files of the modules the worker imports before the startup code to
        where the worker's ``PYTHONPYCACHEPREFIX`` points (see ``_bytecode``), in a thread of its
        own: their file-system work (its cost: ``_bytecode``) hides behind the view's build and the
        server's launch. The worker starts after :meth:`wait`."""
        facts = self.facts
        if facts is None or not facts.search_path or not self._wanted:
            return
        cache = self._cache()
        prefix = bytecode_prefix(cache / "mcp-console")

        def make() -> None:
            try:
                cache.mkdir(mode=0o700, exist_ok=True)  # as supervision() makes it
                self.linked = link_bytecode(prefix, facts.search_path, facts.cache_tag)
            except OSError:
                self.linked = 0  # the worker compiles those modules from source, as before

        self.prefix = prefix
        self._in_turn(make)

    def unlink(self) -> None:
        """Once the worker has booted, the links have served: remove them in a thread while the
        first cells run (left for the end, their removal slowed a loaded host's ``close()``: see
        ``_bytecode``). A fresh worker later gets them again (:meth:`ahead`)."""
        prefix, self.prefix = self.prefix, None
        if prefix is None:
            return
        self._in_turn(lambda: shutil.rmtree(prefix, ignore_errors=True))

    def _in_turn(self, work: Callable[[], None]) -> None:
        """Run ``work`` in a thread once the links' previous work is done (making and removing them
        never overlap); :meth:`wait` waits for it."""
        before = self._thread

        def run() -> None:
            if before is not None:
                before.join()
            work()

        self._thread = threading.Thread(target=run, name="console-bridge-bytecode", daemon=True)
        self._thread.start()

    async def wait(self) -> None:
        """Wait for the links' thread (before the worker boots, and before the session's folder is removed)."""
        thread, self._thread = self._thread, None
        if thread is not None:
            await anyio.to_thread.run_sync(thread.join)

    def ahead(self) -> None:
        """A fresh worker boots at the next call: it makes a fresh outcome log (``on_fresh``), and its
        bootstrap reads the environment's compiled files through the links again (restart to the
        first result took 0.31-0.33 s without them, 0.14-0.17 s with them, here). They are made in a
        thread now and waited for before the next call (:meth:`before_call`)."""
        self.pending = True
        self._on_fresh()
        if self.prefix is None and self.armed:
            self.link()

    async def before_call(self) -> None:
        """What a call waits for first: the links, while a fresh worker is ahead."""
        if self.pending:
            await self.wait()

    def ran(self) -> None:
        """The fresh worker has booted and ran a cell: the links go again."""
        self.pending = False
        self.unlink()
