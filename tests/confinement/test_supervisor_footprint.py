"""What the supervisor (``_confinement/_supervisor.py``) holds: every session has one, and its remasker
is a fork of it, so its imports are paid twice per session. Run as the supervisor runs, ``python -I -S``."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from console_bridge._confinement._plan import SUPERVISOR

#: Modules a ``python -I -S`` with the supervisor's needs does not have to import (json and signal
#: bring re and enum: about 1.1 MiB of private memory per supervisor, measured in docs/performance.md).
HEAVY = ("enum", "re", "json", "signal", "typing", "functools", "collections")


def _run(code: str, *args: str) -> str:
    prelude = f"import sys\nsys.path.insert(0, {str(SUPERVISOR.parent)!r})\n"
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", prelude + textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_supervisor_and_what_it_imports_for_a_view_leave_out_heavy_modules() -> None:
    out = _run(
        f"""
        import _supervisor, _namespaces, _setid, _remask
        print(",".join(m for m in {HEAVY!r} if m in sys.modules))
        """
    )
    assert out.strip() == ""


CONFIGS = [
    '{"argv": ["/usr/bin/mcp-console", "serve", "-c", "startup.code=\\"\\\\ndef f():\\\\n\\""], "grace": 3.0}',
    '{"view": {"steps": [["bind", "/a b", "/\\u00e9\\ud83d\\ude00", true, null]], "ids": {"size": 65536}}}',
    '  [1, -2, 3.5e-3, "x", {}, [], false, NaN, -Infinity]\n',
    json.dumps({"cleanup": ["/tmp/s\x01\n"], "rlimits": {"as": 2**40}, "nested": {"deep": [[[{}]]]}}),
]


@pytest.mark.parametrize("text", CONFIGS)
def test_the_configuration_reads_as_json_reads_it(text: str) -> None:
    out = _run(
        """
        import json, _supervisor
        print(json.dumps(_supervisor.loads(sys.argv[1])))
        """,
        text,
    )
    assert json.loads(out) == json.loads(json.dumps(json.loads(text)))


@pytest.mark.parametrize("text", ["", "   ", "[1, 2", '{"a": 1} {"b": 2}', "[1] x", "{'a': 1}", '"\\x"'])
def test_anything_but_one_json_value_is_refused(text: str) -> None:
    out = _run(
        """
        import _supervisor
        try:
            _supervisor.loads(sys.argv[1])
        except ValueError as exc:
            print("ValueError", exc)
        """,
        text,
    )
    assert out.startswith("ValueError"), out
