"""A part of :class:`AsyncConsole`: a worker's boot. When a fresh worker boots at the next call,
and what the host puts in the session's cache for it: the links to the compiled files its bootstrap
imports (see ``_bytecode``), made in a thread before it boots and removed once it ran a cell, and
matplotlib's font lists (see ``_font_cache``), put there once for the session.

mcp-console boots its first worker, and runs the startup code, as soon as the server starts (not
at the first call): the launcher waits for the thread before it starts the server. Before, the
thread was waited for only before the probe, and the font lists, which the first session of an
environment builds (0.5-1 s), were now and then not there yet when the startup code looked.

The launcher links for the first worker, the call path says when a fresh one is ahead (a restart,
a worker that died) and when it ran; neither knows how the links are made.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable
from pathlib import Path

import anyio

from console_bridge._confinement._registry import bridge_cache_dir
from console_bridge._vetting._bytecode import bytecode_prefix, link_bytecode
from console_bridge._vetting._font_cache import built_font_cache, show_font_cache
from console_bridge._vetting._worker_env import VenvFacts, venv_interpreter

__all__ = ["WorkerBoot"]


class WorkerBoot:
    """Whether a fresh worker boots at the next call, and its bytecode links.

    ``cache`` gives the session's private cache folder (asked for only when links are made: it
    exists once the confinement is prepared). ``wanted`` is false where the bridge must stay out
    of that cache (no Python cells, or ``dependencies="allow"``: mcp-console's package preparation
    manages it then). ``on_fresh`` runs whenever a fresh worker is ahead (the observer trusts a
    fresh outcome log again).
    """

    def __init__(
        self,
        cache: Callable[[], Path],
        *,
        wanted: bool,
        on_fresh: Callable[[], None],
        font_build_timeout: float = 60.0,
    ) -> None:
        self._cache = cache
        self._wanted = wanted
        self._on_fresh = on_fresh
        self._font_build_timeout = font_build_timeout
        #: the worker's Python as inspected on the host (the launcher sets it): what there is to link
        self.facts: VenvFacts | None = None
        #: the worker's environment (its prefix; the launcher sets it): whose font lists are built
        self.environment: Path | None = None
        #: matplotlib's font lists put read-only in the session's cache (``_font_cache``; 0: none)
        self.fonts_shown = 0
        #: compiled files linked for the worker's bootstrap, the last time links were made
        self.linked = 0
        #: the links' folder while they are there
        self.prefix: Path | None = None
        #: a fresh worker boots at the next call (a restart; the last one died)
        self.pending = False
        #: the session started: a fresh worker later gets links again (the first one's are the launcher's)
        self.armed = False
        self._thread: threading.Thread | None = None
        self._closed = False  # the session's folder is going: no more work in it

    def link(self) -> None:
        """Link the compiled files of the modules the worker imports before the startup code to
        where the worker's ``PYTHONPYCACHEPREFIX`` points (see ``_bytecode``), and, the first
        time, put matplotlib's font lists in the session's cache (see ``_font_cache``), in a thread
        of its own, whose file-system work (its cost: ``_bytecode``; the font lists: a link each,
        or their build, 0.5-1 s once per environment) hides behind the view's build. The server,
        which boots the worker at once, starts after :meth:`wait`."""
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
            if not self.fonts_shown:
                self.fonts_shown = self._show_fonts(cache, facts)

        self.prefix = prefix
        self._in_turn(make)

    def _show_fonts(self, cache: Path, facts: VenvFacts) -> int:
        """The environment's font lists (built the first time), in the session's cache; how many.
        Never raises: without them the first ``import matplotlib`` builds its own, as before."""
        python = venv_interpreter(self.environment) if self.environment is not None else None
        if python is None:
            return 0
        try:
            built = built_font_cache(bridge_cache_dir(), python, facts.search_path, timeout=self._font_build_timeout)
            return show_font_cache(built, cache) if built is not None else 0
        except (OSError, RuntimeError, ValueError):  # (RuntimeError: a symlink loop in resolve())
            return 0

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
        never overlap); :meth:`wait` waits for it. Nothing once :meth:`close` began."""
        if self._closed:
            return
        before = self._thread

        def run() -> None:
            if before is not None:
                before.join()
            work()

        self._thread = threading.Thread(target=run, name="console-bridge-bytecode", daemon=True)
        self._thread.start()

    async def wait(self) -> None:
        """Wait for the links' thread (before the server starts, which boots the worker, before a
        fresh worker's call, and before the session's folder is removed)."""
        thread = self._thread
        if thread is not None:
            # (cleared once joined, not before: a second waiter, such as a cancel racing a close,
            # must wait too, or it removes the session's folder under the thread)
            await anyio.to_thread.run_sync(thread.join)
            if self._thread is thread:
                self._thread = None

    async def close(self) -> None:
        """Before the session's folder is removed: no new work starts (a worker dying as the server
        stops calls :meth:`ahead`, which made links and font lists in the removed folder and left it
        behind), and the work under way ends."""
        self._closed = True
        await self.wait()

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
