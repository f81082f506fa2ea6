"""A SQL cell's result as a table, inside the sandboxed worker (its source is carried in the startup code,
see ``console_bridge._worker``).

The worker previews a query by ``fetchmany()`` on the connection from its ``_fallback_show``, then
``print()``s a text grid. The rows fetched there are kept, and that ``print()`` (looked up in the worker's
SQL module) shows the grid as the cell's result, with an HTML table and the rows beside it
(``CellResult.table``).
"""

from collections.abc import Callable
from typing import Any

__all__ = ["_console_bridge_tables"]


def _console_bridge_tables(emit: Callable[..., None]) -> Callable[[Any, Any, str], None]:
    import builtins
    import sys

    pending: list[tuple[dict[str, Any], str]] = []
    width = 10_000

    def cell(value: Any) -> Any:
        if value is None or isinstance(value, (bool, int, float)):
            return value
        text = value if isinstance(value, str) else str(value)
        return text if len(text) <= width else text[: width - 1] + "\u2026"

    def shown(value: Any) -> str:
        import html

        return "NULL" if value is None else html.escape(str(value))

    def framed_print(*args: Any, **kwargs: Any) -> None:
        if pending and len(args) == 1 and isinstance(args[0], str) and not kwargs:
            import html  # (imported on the first table, not at every worker start)

            table, kind = pending.pop()
            head = "".join(f"<th>{html.escape(str(name))}</th>" for name in table["columns"])
            body = "".join(
                "<tr>" + "".join(f"<td>{shown(value)}</td>" for value in row) + "</tr>" for row in table["rows"]
            )
            more = "<p><i>more rows not shown</i></p>" if table["truncated"] else ""
            page = f'<table class="dataframe"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{more}'
            emit(kind, {"text/plain": args[0], "text/html": page}, table=table)
            return None
        pending.clear()
        builtins.print(*args, **kwargs)

    def capture(description: Any, rows: Any, kind: str = "result") -> None:
        # kind: "display" for a statement before a cell's last one (its result is shown, not the cell's value)
        caller = sys._getframe(2)
        if caller.f_code.co_name != "_fallback_show":
            return
        try:
            names = [str(column[0]) for column in description or ()]
            preview = caller.f_globals.get("_PREVIEW_ROWS", len(rows))
            kept = [[cell(value) for value in row] for row in list(rows)[:preview]]
        except Exception:
            return
        pending[:] = [({"columns": names, "rows": kept, "truncated": len(rows) > preview}, kind)]
        caller.f_globals["print"] = framed_print

    return capture
