"""Reading a value a cell wrote, bounded by what it decodes to, not by its file.

A file of a few hundred kilobytes can hold a value of hundreds of gigabytes: a Parquet column of
one value repeated, a JSON list of empty objects, an ``.npy`` header that promises a huge shape.
``pull(name, max_bytes=...)`` bounds both the file and the value it becomes on the host:

* ``.npy``: the header's shape and dtype give the size before any data is read;
* JSON: the decoded size is bounded from the text (every ``[``, ``{``, ``,`` and ``:`` may make a
  Python object) before parsing; nesting deeper than Python's recursion limit is refused;
* Parquet: the footer's rows and columns are checked first, then the file is decoded in a short
  child process (pyarrow only) under a memory ceiling (``RLIMIT_AS``), batch by batch, counting
  the decoded bytes; what passes reaches the host as uncompressed Arrow (Feather), whose size is
  what the host then holds. A page that lies about its size exhausts the child, not the host.

Every refusal is a :class:`NotAllowed` naming the size and ``max_bytes``.
"""

from __future__ import annotations

import io
import json
import math
import os
import subprocess
import sys
from typing import Any

from console_bridge._errors import NotAllowed

__all__ = ["decode"]

_NEEDS_ARROW = "pandas and pyarrow (pip install 'console-bridge[datascience]')"
#: What one JSON token may cost as a Python object at most (an empty dict and its pointer).
_JSON_OBJECT_BYTES = 80
#: The Parquet child's whole budget, past the value: the interpreter with pyarrow, one batch, pages.
_CHILD_SLACK = 256 * 1024 * 1024
_CHILD_SECONDS = 120.0

_PARQUET_CHILD = r"""
import ctypes, io, resource, sys
ctypes.CDLL(None).prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG: SIGKILL when the host goes
limit, slack = int(sys.argv[1]), int(sys.argv[2])
data = sys.stdin.buffer.read()
def refuse(text, code=3):
    sys.stderr.write(text)
    sys.exit(code)
try:
    import pyarrow as pa, pyarrow.ipc, pyarrow.parquet as pq
except ImportError as exc:
    refuse(str(exc), 2)
size = next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmSize:"))
resource.setrlimit(resource.RLIMIT_AS, (size + 2 * limit + slack, resource.RLIM_INFINITY))
try:
    source = pq.ParquetFile(io.BytesIO(data))
    meta, schema = source.metadata, source.schema_arrow
    def width(kind):
        try:
            return max(kind.bit_width // 8, 1)
        except ValueError:
            return 0  # strings, lists, dictionaries: at least a pointer a row in pandas
    def objects(kind):  # what pandas makes of one row's value beyond its bytes: a dict, an array, a pointer
        if pa.types.is_struct(kind):
            return 240 + sum(80 + objects(kind.field(i).type) for i in range(kind.num_fields))
        if any(test(kind) for test in (pa.types.is_list, pa.types.is_large_list, pa.types.is_fixed_size_list)):
            return 120 + objects(kind.value_type)
        if pa.types.is_map(kind):  # (a list of (key, item) tuples a row)
            return 200 + objects(kind.key_type) + objects(kind.item_type)
        return 0 if width(kind) else 8
    per_row = sum(objects(field.type) for field in schema)
    declared = sum(meta.num_rows * (width(field.type) or 8) for field in schema) + meta.num_rows * per_row
    if declared > limit:
        refuse(f"{meta.num_rows} rows x {len(schema)} columns, at least {declared} bytes decoded")
    sink = io.BytesIO()
    total = 0
    with pa.ipc.new_file(sink, schema) as writer:
        for batch in source.iter_batches(batch_size=65536, use_threads=False, use_pandas_metadata=True):
            total += batch.nbytes + batch.num_rows * per_row
            if total > limit:
                refuse(f"{meta.num_rows} rows x {len(schema)} columns, more than {limit} bytes decoded")
            writer.write_batch(batch)
    sys.stdout.buffer.write(sink.getvalue())
except MemoryError:
    refuse(f"decoding it needed more than {limit} bytes (and the reader's own share)")
except (pa.ArrowException, OSError, ValueError, TypeError) as exc:
    text = str(exc)
    if "alloc" in text.lower() or "memory" in text.lower():
        refuse(f"decoding it needed more than {limit} bytes ({text.splitlines()[0]})")
    refuse(f"{type(exc).__name__}: {text}", 4)
"""


def decode(kind: str, data: bytes, *, max_bytes: int) -> Any:
    """A value from what a cell wrote, read by a reader that runs none of the writer's code, and
    refused before it grows past ``max_bytes`` on the host."""
    try:
        if kind == "parquet":
            return _parquet(data, max_bytes)
        if kind == "npy":
            return _npy(data, max_bytes)
        return _json(data, max_bytes)
    except NotAllowed:
        raise
    except ImportError as exc:
        raise NotAllowed(f"pulling a data frame needs {_NEEDS_ARROW} on the host: {exc}") from None
    except RecursionError:
        raise NotAllowed(f"the session's {kind} value nests deeper than the host reads; flatten it") from None
    except Exception as exc:
        raise NotAllowed(f"the session's {kind} file could not be read as one: {type(exc).__name__}: {exc}") from None


def _too_big(kind: str, what: str, max_bytes: int) -> NotAllowed:
    return NotAllowed(
        f"the session's {kind} value is too big to pull: {what}; max_bytes is {max_bytes} "
        "(pass a larger max_bytes, or pull a part of it)"
    )


def _npy(data: bytes, max_bytes: int) -> Any:
    import numpy
    from numpy.lib import format as npy_format

    stream = io.BytesIO(data)
    version = npy_format.read_magic(stream)
    if version == (1, 0):
        shape, _, dtype = npy_format.read_array_header_1_0(stream)
    elif version == (2, 0):
        shape, _, dtype = npy_format.read_array_header_2_0(stream)
    else:
        raise NotAllowed(f"the session's .npy file is format {version[0]}.{version[1]}; the host reads 1.0 and 2.0")
    size = math.prod(int(n) for n in shape) * dtype.itemsize
    if size > max_bytes:
        raise _too_big("npy", f"shape {tuple(shape)} of {dtype} is {size} bytes", max_bytes)
    if len(data) - stream.tell() < size:
        raise NotAllowed(f"the session's .npy file is cut short: its header promises {size} bytes of data")
    return numpy.load(io.BytesIO(data), allow_pickle=False)


def _json(data: bytes, max_bytes: int) -> Any:
    tokens = sum(data.count(mark) for mark in (b"[", b"{", b",", b":"))
    bound = len(data) + tokens * _JSON_OBJECT_BYTES
    if bound > max_bytes:
        raise _too_big("json", f"{len(data)} bytes of text with {tokens} items may take {bound} bytes", max_bytes)
    return json.loads(data.decode("utf-8"))


def _parquet(data: bytes, max_bytes: int) -> Any:
    import pandas

    try:
        done = subprocess.run(
            [sys.executable, "-I", "-c", _PARQUET_CHILD, str(max_bytes), str(_CHILD_SLACK)],
            input=data,
            capture_output=True,
            timeout=_CHILD_SECONDS,
            env={**os.environ, "ARROW_DEFAULT_MEMORY_POOL": "system", "MALLOC_ARENA_MAX": "1", "OMP_NUM_THREADS": "1"},
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise NotAllowed(
            f"the session's parquet value took over {_CHILD_SECONDS:.0f} s to decode; pull a part of it"
        ) from None
    except OSError as exc:
        raise NotAllowed(f"the host could not start a reader for the session's parquet file: {exc}") from None
    reason = done.stderr.decode("utf-8", "replace").strip()
    if done.returncode == 2:
        raise ImportError(reason)
    if done.returncode == 3:
        raise _too_big("parquet", reason, max_bytes)
    if done.returncode != 0:
        why = reason.splitlines()[-1] if reason else f"the reader ended with status {done.returncode}"
        raise NotAllowed(f"the session's parquet file could not be read as one: {why}")
    return pandas.read_feather(io.BytesIO(done.stdout))
