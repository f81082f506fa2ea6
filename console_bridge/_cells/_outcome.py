"""Cell outcomes: how the bridge learns that a cell's code failed, without reading its output.

mcp-console returns a Python traceback, a DuckDB error and an R error as ordinary
text (``isError`` false), and a cell can print anything, a fake traceback included.
So the outcome comes from the interpreters themselves, out of band:

- Python: the bridge's startup code (``startup.code``, run by the worker before the
  first cell) wraps the worker's own exception printer (the ``_print_exception``
  default argument of ``_mcp_console_eval_cell``, called exactly when a cell ends
  with an uncaught exception, SyntaxError and KeyboardInterrupt included) and
  ``threading.excepthook`` (errors inside threads).
- SQL: the same startup code hands the worker a DuckDB connection wrapped so that a
  failing ``execute`` is recorded (``"Catalog Error"``, ``"Parser Error"``, ...).
- R: an ``R_PROFILE_USER`` file sets ``options(error=...)``, which R evaluates only
  for an error nobody handled (not for ``try``/``tryCatch``, not for warnings), and for
  an interrupt. To tell an interrupt (which brings no new error message) from an error,
  the hook leaves a sentinel in R's error message after each report: ``geterrmessage()``
  in a later cell returns that sentinel instead of the last error (the one side effect
  a cell can see).

Each hook appends one JSON line to ``outcomes.jsonl`` in a private folder of the
session's ``TMPDIR``; the bridge notes the file's size before a cell and reads what
was appended once the server reports the cell ended (see ``_events``).

Trust level: printing text cannot forge or hide a failure, and a real uncaught error
is never missed. A cell that deliberately tampers with its own interpreter (rebinds
the hooks, resets ``options(error)``) or writes into that folder can; the sandbox, not
this signal, is the boundary against hostile code.

The parts: ``_outcome_python`` (the Python and SQL hooks), ``_outcome_r`` (the R hook) and
``_outcome_log`` (where the hooks write, and reading and parsing what they appended).
"""

from __future__ import annotations

from console_bridge._cells._outcome_log import (
    OUTCOMES_FILE,
    OutcomeLog,
    limit_failure,
    lost_failure,
    outcome_dir_name,
    parse_records,
    tampered_failure,
    worker_exited_failure,
)
from console_bridge._cells._outcome_python import python_startup_code, yaml_string
from console_bridge._cells._outcome_r import r_profile_text

__all__ = [
    "OUTCOMES_FILE",
    "OutcomeLog",
    "limit_failure",
    "lost_failure",
    "outcome_dir_name",
    "parse_records",
    "python_startup_code",
    "r_profile_text",
    "tampered_failure",
    "worker_exited_failure",
    "yaml_string",
]
