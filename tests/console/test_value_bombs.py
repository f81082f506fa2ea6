"""Issue 42, item 4: ``pull()`` is bounded by what a value decodes to, not by its file.

A cell controls the file a pulled value crosses in. A Parquet file of a few hundred bytes can
decode to gigabytes, an ``.npy`` header can promise any shape, a JSON text of empty objects grows
tenfold as Python objects. Each is refused as :class:`NotAllowed` naming ``max_bytes``, with the
host's memory flat and no reader left behind, and the session still answers.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy
import pandas
import psutil
import pyarrow
import pyarrow.parquet
import pytest

from console_bridge import AsyncConsole, NotAllowed
from console_bridge._console._value_read import decode
from tests.support.binaries import binary_for

pytestmark = [pytest.mark.anyio]

#: How much the host may grow while refusing a bomb (each bomb below decodes to 400 MB or more).
FLAT = 80 * 1024 * 1024
LIMIT = 100_000_000


def parquet_of(table: pyarrow.Table, **options: object) -> bytes:
    sink = io.BytesIO()
    pyarrow.parquet.write_table(table, sink, compression="zstd", **options)
    return sink.getvalue()


def rows_bomb() -> bytes:
    """50 M rows of one int64 (400 MB decoded) in about 200 KB: the footer says so."""
    return parquet_of(pyarrow.table({"a": numpy.zeros(50_000_000, dtype="int64")}), row_group_size=50_000_000)


def string_bomb() -> bytes:
    """1,000 rows whose footer promises 8 KB, each a 1 MB string: 1 GB decoded from under 1 KB."""
    return parquet_of(pyarrow.table({"s": pyarrow.array(["x" * 1_000_000] * 1000)}))


def npy_bomb() -> bytes:
    sink = io.BytesIO()
    numpy.save(sink, numpy.zeros(10))
    return sink.getvalue().replace(b"(10,)", b"(10000000000,)")


def json_bomb() -> bytes:
    return b"[" + b"{}," * 3_000_000 + b"{}]"


def rss() -> int:
    return int(psutil.Process().memory_info().rss)


@pytest.mark.parametrize(
    ("kind", "make", "says"),
    [
        ("parquet", rows_bomb, "50000000 rows x 1 columns"),
        ("parquet", string_bomb, "needed more than"),
        ("npy", npy_bomb, "shape (10000000000,)"),
        ("json", json_bomb, "may take"),
    ],
)
def test_a_bomb_is_refused_before_the_host_holds_it(kind: str, make: object, says: str) -> None:
    data = make()  # type: ignore[operator]
    assert len(data) < 10_000_000
    children = {child.pid for child in psutil.Process().children()}
    before = rss()
    with pytest.raises(NotAllowed) as caught:
        decode(kind, data, max_bytes=LIMIT)
    assert rss() - before < FLAT
    text = str(caught.value)
    assert says in text and "max_bytes is 100000000" in text and "larger max_bytes" in text, text
    assert {child.pid for child in psutil.Process().children()} <= children


def test_what_fits_still_reads_and_the_bound_is_max_bytes() -> None:
    frame = pandas.DataFrame(
        {"n": numpy.arange(100_000), "s": [f"row {i}" for i in range(100_000)]},
        index=pandas.Index(numpy.arange(100_000) * 2, name="k"),
    )
    data = parquet_of(pyarrow.Table.from_pandas(frame))
    back = decode("parquet", data, max_bytes=LIMIT)
    pandas.testing.assert_frame_equal(back, pandas.read_parquet(io.BytesIO(data)))
    with pytest.raises(NotAllowed, match="max_bytes is 1000000"):
        decode("parquet", data, max_bytes=1_000_000)  # 100,000 rows x 3 columns: over 1 MB decoded
    sink = io.BytesIO()
    numpy.save(sink, numpy.ones((500, 500)))
    assert decode("npy", sink.getvalue(), max_bytes=2_000_000).shape == (500, 500)
    with pytest.raises(NotAllowed, match="2000000 bytes"):
        decode("npy", sink.getvalue(), max_bytes=1_999_999)
    short = sink.getvalue()[:-8]
    with pytest.raises(NotAllowed, match="cut short"):
        decode("npy", short, max_bytes=LIMIT)
    assert decode("json", b'{"a": [1, 2, {"b": null}]}', max_bytes=1000) == {"a": [1, 2, {"b": None}]}
    with pytest.raises(NotAllowed, match="nests deeper"):
        decode("json", b"[" * 100_000 + b"]" * 100_000, max_bytes=LIMIT)


BOMB_CELLS = {
    "frame": (
        "import os, shutil\n"
        "class DataFrame:\n"
        "    def to_parquet(self, path):\n"
        "        shutil.copyfile(os.path.join(os.environ['TMPDIR'], 'bomb.bin'), path)\n"
        "DataFrame.__module__ = 'pandas.core.frame'\n"
        "frame = DataFrame()\n"
    ),
    "arr": (
        "import os, numpy as np\n"
        "arr = np.zeros(3)\n"
        "np.save = lambda file, value, allow_pickle=False: file.write(open(os.path.join(os.environ['TMPDIR'], "
        "'bomb.bin'), 'rb').read())\n"
    ),
    "many": "many = [{}] * 3_000_000\n",
}


@pytest.mark.console
@pytest.mark.parametrize(
    ("name", "bomb"), [("frame", string_bomb), ("frame", rows_bomb), ("arr", npy_bomb), ("many", None)]
)
async def test_a_cell_that_fakes_a_value_gets_no_host_memory(
    name: str, bomb: object, workspace: Path, recordings: Path
) -> None:
    async with AsyncConsole(workspace, command=binary_for("0.0.6"), recordings_dir=recordings) as c:
        if bomb is not None:
            await c.put_file("bomb.bin", bomb())  # type: ignore[operator]
        made = await c.run(python=BOMB_CELLS[name])
        assert made.error is None, made.combined
        before = rss()
        with pytest.raises(NotAllowed, match="too big to pull"):
            await c.pull(name)
        assert rss() - before < FLAT
        assert await c.list_files(".console-bridge-value-*") == []
        assert (await c.run(python="print(6 * 7)")).text == "42\n"
        await c.push("back", {"ok": [1, 2]})
        assert await c.pull("back") == {"ok": [1, 2]}
