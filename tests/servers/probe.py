"""Raw stdio MCP server that reports on its own process; all tools readOnlyHint true.

Tools: `env` (JSON text {"cwd": ..., "env": {...}}: its working directory and full environment),
`stderr` (writes `bytes` bytes of filler to stderr, then the line `END-OF-STDERR`, then answers "ok"),
`sleep` (sleeps `seconds`, then answers "slept"; the loop is synchronous: nothing else is read meanwhile,
not even stdin EOF, so a close during a sleep waits for the shutdown grace, then SIGTERM),
`stdin` (JSON text {"kind": "socket"|"fifo"|..., "write": "ok" or the errno name}: what its stdin is, and
what writing one byte into it does).
Starts in milliseconds (no SDK import), unlike wellbehaved.py.
"""

import errno
import json
import os
import stat
import sys
import time
from typing import ClassVar

from _rawrpc import (
    INVALID_PARAMS,
    READ_ONLY,
    JsonObj,
    RawServer,
    RequestId,
    RpcError,
    log_arg_parser,
    text_result,
    tool,
)

BYTES_SCHEMA: JsonObj = {"type": "object", "properties": {"bytes": {"type": "integer"}}, "required": ["bytes"]}
SECONDS_SCHEMA: JsonObj = {"type": "object", "properties": {"seconds": {"type": "number"}}, "required": ["seconds"]}
MARKER = b"END-OF-STDERR\n"
LINE = b"F" * 1023 + b"\n"


class ProbeServer(RawServer):
    name = "probe"
    tools: ClassVar[list[JsonObj]] = [
        tool("env", "Report the working directory and environment.", hints=READ_ONLY),
        tool("stderr", "Write filler, then a marker line, to stderr.", BYTES_SCHEMA, hints=READ_ONLY),
        tool("sleep", "Sleep, then answer.", SECONDS_SCHEMA, hints=READ_ONLY),
        tool("stdin", "Report what stdin is and whether it can be written.", hints=READ_ONLY),
    ]

    def call_tool(self, req_id: RequestId, params: JsonObj) -> None:
        name = params.get("name")
        if name == "env":
            self.reply(req_id, text_result(json.dumps({"cwd": os.getcwd(), "env": dict(os.environ)})))
        elif name == "stderr":
            remaining = int((params.get("arguments") or {})["bytes"])
            while remaining > 0:
                chunk = (LINE * 64)[:remaining]
                sys.stderr.buffer.write(chunk)
                remaining -= len(chunk)
            sys.stderr.buffer.write(MARKER)
            sys.stderr.buffer.flush()
            self.reply(req_id, text_result("ok"))
        elif name == "sleep":
            time.sleep(float((params.get("arguments") or {})["seconds"]))
            self.reply(req_id, text_result("slept"))
        elif name == "stdin":
            mode = os.fstat(0).st_mode
            kinds = {stat.S_ISSOCK: "socket", stat.S_ISFIFO: "fifo", stat.S_ISCHR: "char", stat.S_ISREG: "file"}
            kind = next((label for test, label in kinds.items() if test(mode)), "other")
            try:
                os.write(0, b"x")
                wrote = "ok"
            except OSError as exc:
                wrote = errno.errorcode.get(exc.errno or 0, str(exc.errno))
            self.reply(req_id, text_result(json.dumps({"kind": kind, "write": wrote})))
        else:
            raise RpcError(INVALID_PARAMS, f"Unknown tool: {name}")


if __name__ == "__main__":
    ProbeServer(log_arg_parser(__doc__.splitlines()[0]).parse_args().log).serve()
