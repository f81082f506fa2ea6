"""Issue 31, item 4: values, not only files. ``push``/``pull`` move a data frame (Parquet), an array
(``.npy``, no pickle) or plain data (JSON) in and out of a session; nothing from the sandbox is ever
unpickled on the host, whatever a cell makes of the value or its file."""

from __future__ import annotations

from pathlib import Path

import numpy
import pandas
import pytest

from console_bridge import AsyncConsole, Console, NotAllowed
from console_bridge._console._values import decode, encode
from tests.support.binaries import binary_for

pytestmark = [pytest.mark.anyio]


@pytest.mark.console
@pytest.mark.parametrize("version", ["0.0.5", "0.0.6"])
async def test_values_go_in_and_come_back_equal(version: str, workspace: Path, recordings: Path) -> None:
    frame = pandas.DataFrame({"region": ["north", "south", "west"], "revenue": [1.5, 2.25, None], "n": [1, 2, 3]})
    array = numpy.arange(12, dtype="float32").reshape(3, 4)
    plain = {"a": [1, 2.5, "x", None, True], "nested": {"k": "v"}}
    async with AsyncConsole(workspace, command=binary_for(version), recordings_dir=recordings) as c:
        await c.push("df", frame)
        await c.push("arr", array)
        await c.push("cfg", plain)
        seen = await c.run(python="print(type(df).__name__, df['n'].sum(), arr.shape, arr.dtype, cfg['nested']['k'])")
        assert seen.text.split() == ["DataFrame", "6", "(3,", "4)", "float32", "v"], seen.combined
        await c.run(python="df['double'] = df['n'] * 2\narr2 = arr.T\ncfg['added'] = 42")
        back = await c.pull("df")
        pandas.testing.assert_frame_equal(back, frame.assign(double=frame["n"] * 2))
        assert numpy.array_equal(await c.pull("arr2"), array.T)
        assert await c.pull("cfg") == {**plain, "added": 42}
        assert await c.pull("cfg") == {**plain, "added": 42}  # again: nothing left behind in between
        leftovers = await c.list_files(".console-bridge-value-*")
        assert leftovers == [], leftovers
        assert (await c.run(python="print(1 + 1)")).text == "2\n"


@pytest.mark.console
async def test_a_hostile_value_never_runs_on_the_host(workspace: Path, recordings: Path, tmp_path: Path) -> None:
    flag = tmp_path / "pwned"
    async with AsyncConsole(workspace, command=binary_for("0.0.6"), recordings_dir=recordings) as c:
        # an object whose pickle would run code: it has no safe form, so it is refused, not pickled
        evil = f"import os\nclass Evil:\n    def __reduce__(self):\n        return (os.system, ('touch {flag}',))\n"
        await c.run(python=evil + "x = Evil()")
        with pytest.raises(NotAllowed, match="pull"):
            await c.pull("x")
        # an object array (np.save would pickle it): refused in the session, never written that way
        await c.run(python="import numpy as np\nobj = np.array([Evil()], dtype=object)")
        with pytest.raises(NotAllowed):
            await c.pull("obj")
        assert not flag.exists()
        # names are identifiers only: no code through the name
        for bad in ("x; import os", "__import__('os')", "class", "_cb_base"):
            with pytest.raises(NotAllowed, match="identifier"):
                await c.pull(bad)
            with pytest.raises(NotAllowed, match="identifier"):
                await c.push(bad, 1)
        assert (await c.run(python="print(2 + 2)")).text == "4\n"


def test_the_host_side_reads_only_safe_formats() -> None:
    # a pickle disguised as .npy or .json is refused by the readers themselves
    import pickle

    blob = pickle.dumps(numpy.array([object()], dtype=object))
    with pytest.raises(NotAllowed):
        decode("npy", blob, max_bytes=10**8)
    with pytest.raises(NotAllowed):
        decode("json", blob, max_bytes=10**8)
    with pytest.raises(NotAllowed):
        decode("parquet", b"PAR1 not really", max_bytes=10**8)
    with pytest.raises(NotAllowed, match="plain data"):
        encode(object())
    with pytest.raises(NotAllowed, match="objects"):
        encode(numpy.array([object()], dtype=object))
    kind, data = encode({"k": [1, 2]})
    assert kind == "json" and decode(kind, data, max_bytes=10**8) == {"k": [1, 2]}


@pytest.mark.console
def test_the_blocking_twin_pushes_and_pulls(workspace: Path, recordings: Path) -> None:
    with Console(workspace, command=binary_for("0.0.6"), recordings_dir=recordings) as c:
        c.push("xs", [3, 1, 2])
        c.run(python="xs = sorted(xs)")
        assert c.pull("xs") == [1, 2, 3]
