"""The Python side of cell outcomes: the startup code the worker runs before the first cell, and
``yaml_string`` to pass it as ``startup.code``. See ``_outcome``.

The startup code installs the exception and thread hooks and, for SQL, a DuckDB connection whose
failures are recorded; it also frames stderr, records rich displays and SQL tables (``outputs.jsonl``),
keeps cells' sources for tracebacks, reads bytecode from the environments, and, offline, makes an
installer started from a cell fail at once."""

from __future__ import annotations

import json

from console_bridge._cells._outcome_log import outcome_dir_name
from console_bridge._worker import compact, worker_source

__all__ = ["python_startup_code", "yaml_string"]


def yaml_string(text: str) -> str:
    """``text`` as a YAML double-quoted scalar (JSON strings are valid YAML)."""
    return json.dumps(text, ensure_ascii=True)


_PYTHON_STARTUP = r'''
def _console_bridge_bytecode():
    # mcp-console points the worker at a bytecode cache (PYTHONPYCACHEPREFIX) that does not exist
    # and that cells could not be trusted to share: every import compiled from source, every
    # session. Imports read the environments' own __pycache__ (compiled by pip, read-only to
    # cells) instead, and the bridge writes no bytecode anywhere; Python started by a cell too.
    # (What the worker imported before this code read links the host put under that prefix: _bytecode.)
    import os, sys
    sys.pycache_prefix = None
    sys.dont_write_bytecode = True
    os.environ.pop("PYTHONPYCACHEPREFIX", None)
    os.environ["PYTHONDONTWRITEBYTECODE"] = "1"


_console_bridge_bytecode()
del _console_bridge_bytecode


%(fonts)s


def _console_bridge_sources():
    # Cells compile from strings named "<mcp-console:python:eN>", which linecache cannot read:
    # tracebacks and warnings showed no source line. Each cell's source is kept in linecache
    # as Python compiles it (the "compile" audit event), so earlier cells' functions show too.
    import linecache, sys

    cache = linecache.cache

    def on_audit(event, args):
        if event == "compile" and len(args) == 2:
            source, filename = args
            if isinstance(filename, str) and filename.startswith("<mcp-console:") and filename not in cache:
                if isinstance(source, bytes):
                    source = source.decode("utf-8", "replace")
                if isinstance(source, str):
                    cache[filename] = (len(source), None, source.splitlines(True), filename)

    sys.addaudithook(on_audit)


_console_bridge_sources()
del _console_bridge_sources


def _console_bridge_no_installs(offline):
    # Cells have no network, so an installer (pip, uv, conda, apt) started from a cell spent 10-12 s
    # in DNS retries before it failed. Starting one fails at once instead, saying why.
    if not offline:
        return
    import os, re, sys

    events = {"subprocess.Popen", "os.system", "os.posix_spawn", "os.exec", "os.spawn"}
    installers = re.compile(r"^(pip(\d+(\.\d+)?)?|uv|conda|mamba|micromamba|poetry|pipenv|apt|apt-get)$")
    verbs = {"install", "add", "sync"}
    message = ("no network in the sandbox; installs are disabled (console-bridge stopped {0!r}). Use the "
               "packages of the worker's environment, or have the host install what is missing there")

    def words(value):
        if isinstance(value, (str, bytes, os.PathLike)):
            text = os.fsdecode(value)
            return [word for word in re.split(r"[\s;&|()]+", text) if word]
        if isinstance(value, (list, tuple)):
            return [word for item in value for word in words(item)]
        return []

    def installing(argv):
        names = [os.path.basename(word) for word in argv]
        for index, name in enumerate(names):
            if installers.match(name.removesuffix(".exe")) and verbs & set(names[index + 1 : index + 4]):
                return True
        return False

    def on_audit(event, args):
        if event in events:
            argv = words(args[1] if event in ("subprocess.Popen", "os.posix_spawn", "os.exec") else
                         args[2] if event == "os.spawn" else args[0])
            if installing(argv):
                raise PermissionError(message.format(" ".join(argv)[:200]))

    sys.addaudithook(on_audit)


_console_bridge_no_installs(%(offline)s)
del _console_bridge_no_installs


def _console_bridge_streams():
    # mcp-console merges stderr into stdout. Each write to sys.stderr is framed by two Unicode
    # noncharacters (_cells.STDERR_START/_END: reserved for internal use, they pass through
    # mcp-console) so the bridge can tell the streams apart; it removes them. Output written to
    # file descriptor 2 directly (a subprocess, C code) is not framed and counts as stdout.
    import sys

    class BridgeStderr:
        def __init__(self, stream):
            self._console_bridge_stream = stream

        def write(self, text):
            if not isinstance(text, str) or not text:
                return self._console_bridge_stream.write(text)
            self._console_bridge_stream.write("\ufdd0" + text + "\ufdd1")
            return len(text)

        def writelines(self, lines):
            for line in lines:
                self.write(line)

        def __getattr__(self, name):
            return getattr(self._console_bridge_stream, name)

    if not hasattr(sys.stderr, "_console_bridge_stream"):
        sys.stderr = BridgeStderr(sys.stderr)


_console_bridge_streams()
del _console_bridge_streams


def _console_bridge_displays(path):
    # Rich results, the way IPython's display formatter builds them: the cell's final value and
    # each display() become a MIME bundle, appended as one JSON line to outputs.jsonl; stdout
    # gets its text/plain framed by noncharacters (_cells.DISPLAY_*) so the bridge knows where
    # it was shown. IPython's own display() is redirected here when a cell imports it.
    import base64, builtins, itertools, json, os, sys

    token = os.urandom(4).hex()  # (not secrets: it imports hashlib and OpenSSL at every worker start)
    counter = itertools.count(1)
    methods = (
        ("text/html", "_repr_html_"), ("text/markdown", "_repr_markdown_"), ("text/latex", "_repr_latex_"),
        ("image/svg+xml", "_repr_svg_"), ("image/png", "_repr_png_"), ("image/jpeg", "_repr_jpeg_"),
        ("application/json", "_repr_json_"),
    )
    limit = 20 * 1024 * 1024

    def encode(mime, value):
        if isinstance(value, tuple) and len(value) == 2:
            value = value[0]  # (data, metadata)
        if isinstance(value, (bytes, bytearray)):
            if mime.startswith("image/") and mime != "image/svg+xml":
                return base64.b64encode(bytes(value)).decode("ascii")
            return bytes(value).decode("utf-8", "replace")
        if mime == "application/json":
            return json.loads(json.dumps(value, default=str))
        return value if isinstance(value, str) else None

    def bundle(value):
        data = {}
        cls = type(value)
        if getattr(cls, "_repr_mimebundle_", None) is not None:
            try:
                got = value._repr_mimebundle_(include=None, exclude=None)
                if isinstance(got, tuple):
                    got = got[0]
                if isinstance(got, dict):
                    for mime, item in got.items():
                        encoded = encode(str(mime), item)
                        if encoded is not None:
                            data[str(mime)] = encoded
            except Exception:
                pass
        for mime, name in methods:
            if mime in data or getattr(cls, name, None) is None:
                continue
            try:
                encoded = encode(mime, getattr(value, name)())
            except Exception:
                continue
            if encoded is not None:
                data[mime] = encoded
        if "text/plain" not in data:
            try:
                data["text/plain"] = repr(value)
            except Exception as exc:
                data["text/plain"] = f"<unrepresentable {cls.__name__}: {exc!r}>"
        return data

    def emit(kind, data, table=None):
        ident = f"{token}-{next(counter)}"
        data = {mime: item for mime, item in data.items() if len(str(item)) <= limit or mime == "text/plain"}
        plain = str(data.get("text/plain", ""))
        if any(mime.startswith("image/") for mime in data):
            plain = ""  # (a figure: text readers get the image, not "<Figure size ...>"; the record keeps it)
        newline = "" if plain.endswith("\n") or not plain else "\n"
        if table is None and len(data) == 1 and isinstance(data.get("text/plain"), str):
            # Nothing but its text (e.g. the value 1): the frame says so, no record is written or read.
            ident += "-" + kind[0] + ("n" if newline else "")
        else:
            record = {"id": ident, "kind": kind, "data": data}
            if table is not None:
                record["table"] = table
            line = json.dumps(record, default=str) + "\n"
            try:
                fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
                try:
                    os.write(fd, line.encode("utf-8", "replace"))
                finally:
                    os.close(fd)
            except OSError:
                ident = ""
        sys.stdout.write("\ufdd2" + ident + "\ufdd3" + plain + newline + "\ufdd4")

    def displayhook(value):
        if value is None:
            return
        builtins._ = None
        emit("result", bundle(value))
        builtins._ = value

    def display(*objs, include=None, exclude=None, metadata=None, transient=None, display_id=None, raw=False,
                clear=False, **kwargs):
        for value in objs:
            if raw and isinstance(value, dict):
                emit("display", {str(k): v for k, v in value.items()})
            else:
                emit("display", bundle(value))

    def fallback():
        # Without IPython in the cell venv: this display hook, display() and IPython's display() here.
        sys.displayhook = displayhook
        builtins.display = display

        class IPythonDisplay:
            """Points IPython's display() here when a cell imports IPython (no kernel runs in the worker)."""

            target = "IPython.core.display_functions"

            def find_spec(self, fullname, path=None, target=None):
                if fullname != self.target:
                    return None
                import importlib.util
                sys.meta_path.remove(self)
                try:
                    spec = importlib.util.find_spec(fullname)
                finally:
                    sys.meta_path.insert(0, self)
                if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
                    return spec
                original = spec.loader.exec_module

                def exec_module(module):
                    original(module)
                    module.display = display

                spec.loader.exec_module = exec_module
                return spec

        loaded = sys.modules.get(IPythonDisplay.target)
        if loaded is not None:
            loaded.display = display
        else:
            sys.meta_path.insert(0, IPythonDisplay())

    emit.fallback = fallback
    return emit


%(tables)s


%(ipython)s


def _console_bridge_install(_dir_name, _want_sql):
    import contextlib, json, os, sys, threading, traceback
    folder = os.path.join(os.environ.get("TMPDIR") or "/tmp", _dir_name)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    path = os.path.join(folder, "outcomes.jsonl")
    # Created now, so the bridge finds it once and then only reads it.
    os.close(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600))

    # The cell running now: the last "<mcp-console:python:eN>" code the worker executed (the "exec"
    # audit event). A failure names it, and the cell whose code the traceback starts in (origin): a
    # thread an earlier cell started that fails later is that cell's, not the running one's.
    running = [None]

    def on_exec(event, args):
        if event == "exec" and args:
            name = getattr(args[0], "co_filename", "")
            if isinstance(name, str) and name.startswith("<mcp-console:python:"):
                running[0] = name

    sys.addaudithook(on_exec)

    def origin_of(error):
        tb = getattr(error, "__traceback__", None)
        while tb is not None:
            name = tb.tb_frame.f_code.co_filename
            if isinstance(name, str) and name.startswith("<mcp-console:python:"):
                return name
            tb = tb.tb_next
        return None

    def record(entry, later=False):
        try:
            line = (json.dumps(entry, default=str) + "\n").encode("utf-8", "replace")
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
            try:
                if os.write(fd, line) != len(line):
                    raise OSError("a short write")
            finally:
                os.close(fd)
        except Exception:
            # The log cannot be written (a full TMPDIR, EIO): the cell's output carries a failure instead,
            # small enough for a poll's tail (written after the traceback with `later`).
            short = dict(entry, message=str(entry.get("message"))[:500], traceback=str(entry.get("traceback"))[-1500:])
            frame = "\ufdd2!" + json.dumps(short, default=str)[:3000] + "\ufdd3\ufdd4"
            if entry.get("type") == "failure" and not later:
                with contextlib.suppress(Exception):
                    sys.stdout.write(frame)
                    sys.stdout.flush()
            return frame if entry.get("type") == "failure" else ""
        return ""

    private = set()  # ids of mcp-console's own code objects (its printer drops their frames too)

    def public_traceback(error):
        # The frames people read: the cell's and its libraries', not mcp-console's evaluator
        # nor this startup code's (the worker's own printer drops the same ones from the text).
        rendered = traceback.TracebackException.from_exception(error)

        def prune(exception, summary, seen):
            if exception is None or summary is None or id(exception) in seen:
                return
            seen.add(id(exception))
            frames = []
            tb = exception.__traceback__
            for position in summary.stack:
                if tb is None:
                    break
                code = tb.tb_frame.f_code
                machinery = id(code) in private or code.co_filename == "<console startup>" or (
                    code.co_filename == "<string>" and code.co_name.startswith("_mcp_console"))
                if not machinery:
                    frames.append(position)
                tb = tb.tb_next
            summary.stack = traceback.StackSummary.from_list(frames)
            prune(exception.__cause__, summary.__cause__, seen)
            prune(exception.__context__, summary.__context__, seen)

        prune(error, rendered, set())
        return "".join(rendered.format())

    def failure(language, error, where="", text=None, later=False):
        try:
            text = public_traceback(error) if text is None else text
        except Exception:
            try:
                text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
            except Exception:
                text = ""
        try:
            message = str(error)
        except Exception:
            message = "<unprintable>"
        name = type(error).__name__
        if language == "sql":
            head, sep, rest = message.partition(": ")
            if sep and head.endswith(" Error") and "\n" not in head:
                name, message = head, rest
        return record({"type": "failure", "language": language, "name": name, "message": message[:20000],
                       "traceback": text[-20000:], "kind": "exception", "where": where, "cell": running[0],
                       "origin": origin_of(error) if language == "python" else None}, later)

    hooked = False
    import gc, types
    evaluators = [
        fn for fn in gc.get_objects()
        if isinstance(fn, types.FunctionType) and fn.__name__ == "_mcp_console_eval_cell"
    ]
    for fn in evaluators:
        code = fn.__code__
        if fn.__defaults__:
            names = code.co_varnames[: code.co_argcount]
            if "_print_exception" not in names:
                continue
            index = names.index("_print_exception") - (len(names) - len(fn.__defaults__))
            if index < 0:
                continue
            original = fn.__defaults__[index]
            inner = getattr(original, "__defaults__", None) or ()
            private.update(*(item for item in inner if isinstance(item, set)))

            def printer(error, *args, _original=original, **kwargs):
                failure("python", error)
                return _original(error, *args, **kwargs)

            defaults = list(fn.__defaults__)
            defaults[index] = printer
            fn.__defaults__ = tuple(defaults)
            hooked = True
    del evaluators
    if not hooked:
        record({"type": "notice", "topic": "python",
                "message": "console-bridge could not hook this mcp-console's Python worker: failed Python cells "
                           "are not detected (only 0.0.5 and 0.0.6 are qualified)"})

    thread_hook = threading.excepthook

    def on_thread_error(args, _original=thread_hook):
        if args.exc_type is not SystemExit:
            failure("python", args.exc_value, where=getattr(args.thread, "name", ""))
        return _original(args)

    threading.excepthook = on_thread_error
    emit = _console_bridge_displays(os.path.join(folder, "outputs.jsonl"))
    capture_table = _console_bridge_tables(emit)
    if not _console_bridge_ipython(emit, failure, lambda topic, text: record(
            {"type": "notice", "topic": topic, "message": text}), running, folder):
        emit.fallback()

    class NoSQL:
        """Never used: SQL cells are not offered when SQL is off (the worker insists on a connection)."""

        def __getattr__(self, name):
            if name.startswith("__"):
                raise AttributeError(name)

            def call(*args, **kwargs):
                return self

            return call

    if not _want_sql:
        _console.sql_connection(NoSQL())
        return

    # DuckDB is imported and connected on the first SQL use, not here: importing it at every
    # worker start cost 60-100 ms of each cold start, for sessions that may never run SQL. The
    # host checked beforehand that the worker's Python finds duckdb (_worker_env).
    loaded = {}
    showing = ["result"]  # how the table being shown counts: the cell's value, or one statement's result

    def duckdb_error():
        module = loaded.get("duckdb")
        return module.Error if module is not None else ()

    def connect():
        try:
            import duckdb
        except Exception as exc:
            message = (f"SQL is withheld: duckdb cannot be imported in the worker's Python ({sys.executable}): "
                       f"{exc}. Install it there (pip install 'duckdb>=1.0').")
            record({"type": "notice", "topic": "sql", "message": message})
            error = RuntimeError(message)
            failure("sql", error)
            raise error from None
        loaded["duckdb"] = duckdb
        return duckdb.connect()

    class Connection:
        """The worker's DuckDB connection, made on first use; a failing call is recorded, then raised."""

        def __init__(self, make):
            self._console_bridge_make = make
            self._console_bridge_made = None

        @property
        def _connection(self):
            made = self._console_bridge_made
            if made is None:
                make = self._console_bridge_make
                if make is None:
                    raise RuntimeError("this DuckDB cursor is closed")
                made = self._console_bridge_made = make()
            return made

        def _call(self, name, *args, **kwargs):
            connection = self._connection
            try:
                value = getattr(connection, name)(*args, **kwargs)
            except duckdb_error() as exc:
                failure("sql", exc)
                raise
            return self if value is connection else value

        def execute(self, *args, **kwargs):
            caller = sys._getframe(1)
            show = caller.f_globals.get("_fallback_show") if caller.f_code.co_name == "_evaluate" else None
            if show is not None and len(args) == 1 and isinstance(args[0], str) and not kwargs:
                # A SQL cell of several statements: each one's result is shown, not only the last's.
                try:
                    self._connection  # (connected first: that imports duckdb)
                    statements = [item.query for item in loaded["duckdb"].extract_statements(args[0])]
                except Exception:
                    statements = []
                for statement in statements[:-1]:
                    shown = self._call("execute", statement)
                    if getattr(shown, "description", None) is not None:
                        showing[0] = "display"
                        try:
                            show(shown)
                        finally:
                            showing[0] = "result"
                if len(statements) > 1:
                    return self._call("execute", statements[-1])
            return self._call("execute", *args, **kwargs)

        def sql(self, *args, **kwargs):
            return self._call("sql", *args, **kwargs)

        def query(self, *args, **kwargs):
            return self._call("query", *args, **kwargs)

        def fetchmany(self, *args, **kwargs):
            rows = self._call("fetchmany", *args, **kwargs)
            capture_table(self._connection.description, rows, showing[0])
            return rows

        def cursor(self, *args, **kwargs):
            # Lazy too: the worker checks the startup connection by making and closing a cursor.
            return Connection(lambda: self._connection.cursor(*args, **kwargs))

        def close(self):
            if self._console_bridge_made is None:
                self._console_bridge_make = None  # never connected: nothing to close
                return None
            return self._call("close")

        def __getattr__(self, name):
            if name.startswith("_console_bridge_") or name == "_connection":
                raise AttributeError(name)  # (also when making the connection raised AttributeError)
            value = getattr(self._connection, name)
            if not callable(value) or name.startswith("_"):
                return value

            def call(*args, **kwargs):
                return self._call(name, *args, **kwargs)

            return call

    _console.sql_connection(Connection(connect))


_console_bridge_install(%(dir)s, %(sql)s)
del _console_bridge_install


def _console_bridge_trim():
    # What the worker's startup freed in the C heap stays resident (glibc gives back only the top of
    # its heap): 1.2 of the idle worker's 4 MiB of heap. It goes back to the system now, before the
    # first cell. ctypes is imported by mcp-console's worker already; without glibc, nothing.
    try:
        import ctypes
        ctypes.CDLL(None).malloc_trim(0)
    except Exception:
        pass


_console_bridge_trim()
del _console_bridge_trim
import time as _cb_time, os as _cb_os, json as _cb_json
with open(_cb_os.path.join(_cb_os.environ.get("TMPDIR") or "/tmp", %(dir)s, "outcomes.jsonl"), "a") as _cb_file:
    _cb_file.write(_cb_json.dumps({"type": "ready", "at": _cb_time.time()}) + "\n")
del _cb_time, _cb_os, _cb_json, _cb_file
'''


def python_startup_code(nonce: str, *, sql: bool, offline: bool = True, fonts: str = "") -> str:
    """The Python the worker runs before the first cell: outcome hooks and, with ``sql``, a
    DuckDB connection that Python owns (a missing duckdb withholds SQL with one notice). With
    ``offline`` (the sandbox has no network) a cell that starts an installer fails at once.
    ``fonts``: the code that shows matplotlib the session's font lists (``_vetting._font_cache``)."""
    return compact(
        _PYTHON_STARTUP
        % {
            "dir": repr(outcome_dir_name(nonce)),
            "fonts": fonts,
            "sql": "True" if sql else "False",
            "offline": "True" if offline else "False",
            "ipython": worker_source("_ipython"),
            "tables": worker_source("_tables"),
        }
    )
