"""Code that runs inside the sandboxed worker, not on the host: real modules (ruff, mypy and the tests
see them), whose source the startup code carries into the worker. Each needs only the standard library
and what the cell venv has; none imports console_bridge, which the cell venv may not have."""

from __future__ import annotations

import ast
import functools
import threading
from importlib import resources

__all__ = ["compact", "worker_source"]


@functools.cache
def worker_source(module: str) -> str:
    """The source of ``console_bridge._worker.<module>``, to run in the worker as part of its startup code."""
    return resources.files(__name__).joinpath(f"{module}.py").read_text(encoding="utf-8")


_AST_LOCK = threading.Lock()


def compact(code: str) -> str:
    """``code`` without its comments and docstrings (``ast.unparse``): mcp-console takes at most 32 KiB
    of startup code (``startup encoded source is N bytes; maximum is 32768 bytes``), and what the worker
    runs needs none of the prose that explains it here. One thread at a time: CPython 3.11's ``ast`` raised
    ``SystemError: AST constructor recursion depth mismatch`` for sessions started from several threads."""
    with _AST_LOCK:
        return _compact(code)


def _compact(code: str) -> str:
    tree = ast.parse(code)
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            node.returns = None  # (annotations: prose for mypy, evaluated for nothing in the worker)
            arguments = node.args
            for arg in (
                *arguments.posonlyargs,
                *arguments.args,
                *arguments.kwonlyargs,
                arguments.vararg,
                arguments.kwarg,
            ):
                if arg is not None:
                    arg.annotation = None
        body = getattr(node, "body", None)
        if isinstance(body, list):
            # docstrings, wherever a module's source lands in the startup code: a bare string does nothing
            body[:] = [statement for statement in body if not _is_prose(statement)] or [ast.Pass()]
    # One space per level instead of four (unparsed code has no multi-line strings: each line's leading
    # spaces are its indentation).
    lines = []
    for line in ast.unparse(tree).splitlines():
        text = line.lstrip(" ")
        lines.append(" " * ((len(line) - len(text)) // 4) + text)
    return "\n".join(lines) + "\n"


def _is_prose(statement: ast.stmt) -> bool:
    return (
        isinstance(statement, ast.Expr)
        and isinstance(statement.value, ast.Constant)
        and isinstance(statement.value.value, str)
    )
