"""Values in and out of a session (``push``/``pull``), never by pickle.

A value crosses as a file in the session's private TMPDIR, in a format whose reader runs no code
of the writer's choosing: a pandas data frame as Parquet (pyarrow), a numpy array as ``.npy``
(``allow_pickle=False``), plain data (dict, list, str, numbers, bool, None) as JSON. On the host
the file a cell wrote is read with those readers alone, whatever the cell made of it: a hostile
cell gets at most a :class:`NotAllowed` saying the file could not be read, or that the value it
decodes to is bigger than ``max_bytes`` (``_value_read``: a decompression bomb stays a small file).
The cells that move a value are ordinary Python cells of the session (they are in its recording).
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import keyword
import secrets
from typing import TYPE_CHECKING, Any

import anyio

from console_bridge._console._value_read import decode
from console_bridge._errors import BridgeError, NotAllowed

if TYPE_CHECKING:
    from console_bridge._console._session import AsyncConsole

__all__ = ["pull", "push"]

#: The formats, by file extension.
_KINDS = ("parquet", "npy", "json")
_PREFIX = ".console-bridge-value-"
_NEEDS_ARROW = "pandas and pyarrow (pip install 'console-bridge[datascience]')"


def _check_name(name: object) -> str:
    if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name) or name.startswith("_cb_"):
        raise NotAllowed(f"a value's name must be a Python identifier (not a keyword, not _cb_...), not {name!r}")
    return name


def _module_of(value: object) -> str:
    return type(value).__module__.split(".")[0]


def encode(value: object) -> tuple[str, bytes]:
    """The value as (kind, bytes): a data frame as Parquet, an array as .npy, the rest as JSON."""
    if _module_of(value) == "pandas" and type(value).__name__ == "DataFrame":
        try:
            buffer = io.BytesIO()
            value.to_parquet(buffer)  # type: ignore[attr-defined]
        except ImportError as exc:
            raise NotAllowed(f"pushing a data frame needs {_NEEDS_ARROW} on the host: {exc}") from None
        except Exception as exc:  # (a column Parquet cannot hold: objects of mixed types, ...)
            raise NotAllowed(f"this data frame cannot be written as Parquet: {type(exc).__name__}: {exc}") from None
        return "parquet", buffer.getvalue()
    if _module_of(value) == "numpy" and type(value).__name__ == "ndarray":
        import numpy

        if value.dtype.hasobject:  # type: ignore[attr-defined]
            raise NotAllowed("an array of Python objects cannot cross without pickle; convert it (e.g. .astype(str))")
        buffer = io.BytesIO()
        numpy.save(buffer, value, allow_pickle=False)  # type: ignore[arg-type]
        return "npy", buffer.getvalue()
    try:
        return "json", json.dumps(value).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise NotAllowed(
            f"push takes a pandas DataFrame, a numpy array or plain data (dict, list, str, numbers, bool, None); "
            f"{type(value).__name__} is none of those ({exc})"
        ) from None


_LOAD = """\
import os as _cb_os
_cb_path = _cb_os.path.join(_cb_os.environ["TMPDIR"], {name!r})
try:
    if {kind!r} == "parquet":
        import pandas as _cb_lib
        {target} = _cb_lib.read_parquet(_cb_path)
    elif {kind!r} == "npy":
        import numpy as _cb_lib
        {target} = _cb_lib.load(_cb_path, allow_pickle=False)
    else:
        import json as _cb_lib
        with open(_cb_path, encoding="utf-8") as _cb_file:
            {target} = _cb_lib.load(_cb_file)
finally:
    _cb_os.remove(_cb_path)
    del _cb_os, _cb_path
"""

_SAVE = """\
import os as _cb_os
_cb_base = _cb_os.path.join(_cb_os.environ["TMPDIR"], {stem!r})
_cb_value = {source}
_cb_kind = type(_cb_value).__module__.split(".")[0], type(_cb_value).__name__
if _cb_kind == ("pandas", "DataFrame"):
    _cb_value.to_parquet(_cb_base + ".parquet")
elif _cb_kind == ("numpy", "ndarray") and not _cb_value.dtype.hasobject:
    import numpy as _cb_lib
    with open(_cb_base + ".npy", "wb") as _cb_file:
        _cb_lib.save(_cb_file, _cb_value, allow_pickle=False)
else:
    import json as _cb_lib
    with open(_cb_base + ".json", "w", encoding="utf-8") as _cb_file:
        _cb_lib.dump(_cb_value, _cb_file)
del _cb_os, _cb_base, _cb_value, _cb_kind
"""

_CLEAN = """\
import glob as _cb_glob, os as _cb_os
for _cb_path in _cb_glob.glob(_cb_os.path.join(_cb_glob.escape(_cb_os.environ["TMPDIR"]), {pattern!r})):
    _cb_os.remove(_cb_path)
del _cb_glob, _cb_os
"""


async def push(console: AsyncConsole, name: str, value: object) -> None:
    """Bind ``name`` in the session's Python to a copy of ``value``."""
    target = _check_name(name)
    kind, data = encode(value)
    file = f"{_PREFIX}{secrets.token_hex(8)}.{kind}"
    await console.put_file(file, data)
    result = await console.run(python=_LOAD.format(name=file, kind=kind, target=target))
    if result.error is not None:
        needs = " (the worker's Python needs pandas and pyarrow for a data frame)" if kind == "parquet" else ""
        raise NotAllowed(f"push({name!r}) failed in the session: {result.error}{needs}")


async def pull(console: AsyncConsole, name: str, *, max_bytes: int = 100_000_000) -> Any:
    """A copy of the session's Python value ``name`` (a data frame, an array or plain data)."""
    source = _check_name(name)
    stem = f"{_PREFIX}{secrets.token_hex(8)}"
    try:
        result = await console.run(python=_SAVE.format(stem=stem, source=source))
        if result.error is not None:
            raise NotAllowed(
                f"pull({name!r}) failed in the session: {result.error} (a value crosses as a data frame, a numpy "
                "array or JSON data)"
            )
        files = [found for found in await console.list_files(f"{stem}.*") if found.rpartition(".")[2] in _KINDS]
        if len(files) != 1:
            raise NotAllowed(f"pull({name!r}): the session left {len(files)} value files, not one")
        data = await console.get_file(files[0], max_bytes=max_bytes)
        kind = files[0].rpartition(".")[2]
        return await anyio.to_thread.run_sync(functools.partial(decode, kind, data, max_bytes=max_bytes))
    finally:
        with contextlib.suppress(BridgeError):
            await console.run(python=_CLEAN.format(pattern=f"{stem}.*"))
