"""The worker's startup code (issue 47): real modules carried into the worker, compacted to fit mcp-console's
32 KiB bound on startup code, and still the same program."""

from __future__ import annotations

import ast

from console_bridge._cells._outcome_python import python_startup_code, yaml_string
from console_bridge._vetting._font_cache import font_startup_code
from console_bridge._worker import compact, worker_source

#: mcp-console 0.0.5 and 0.0.6: "startup encoded source is N bytes; maximum is 32768 bytes"
_BOUND = 32768


def test_the_startup_code_fits_mcp_consoles_bound_with_room_to_grow() -> None:
    for sql in (True, False):
        encoded = yaml_string(python_startup_code("0" * 32, sql=sql, offline=True, fonts=font_startup_code()))
        assert len(encoded) <= _BOUND - 4096, f"{len(encoded)} bytes: move prose out or code out of the worker"


def test_compacting_keeps_the_program_and_drops_the_prose() -> None:
    source = worker_source("_ipython")
    small = compact(source)
    assert len(small) < 0.7 * len(source)
    assert ast.dump(ast.parse(small)) == ast.dump(ast.parse(compact(small)))  # stable
    names = {node.name for node in ast.walk(ast.parse(small)) if isinstance(node, ast.FunctionDef)}
    assert {"_console_bridge_ipython", "sandbox_hint", "eval_cell"} <= names
    assert '"""' not in small and "# " not in small.replace("# console-bridge: the bridge's own cell", "")
