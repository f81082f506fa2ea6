"""Raw stdio MCP server whose second `tools/list` misbehaves once; every other listing is the first one.

Tools `t` and `u` (readOnlyHint true); `tools/call` answers "ok <name>". By --mode:
  fail-once  the second listing is a JSON-RPC error (-32603); later listings are unchanged
  slow-once  the second listing is answered only after --delay seconds (the server blocks
             meanwhile, so requests sent in between are answered after it, in order); once
             the late reply is out, the log gets the line `late reply sent`
Used to prove that a tool revoked after a failed re-verification stays revoked even when
the server later lists it exactly as it was pinned, and that a late reply does no harm.
"""

import sys
import time
from pathlib import Path
from typing import ClassVar

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "servers"))

from _rawrpc import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    READ_ONLY,
    JsonObj,
    RawServer,
    RequestId,
    RpcError,
    log_arg_parser,
    log_line,
    text_result,
    tool,
)

TOOLS = [
    tool("t", "Return the status of the build.", hints=READ_ONLY),
    tool("u", "Return the version.", hints=READ_ONLY),
]


class FlakyListServer(RawServer):
    name = "flaky_list"
    tools: ClassVar[list[JsonObj]] = TOOLS
    list_changed = True

    def __init__(self, mode: str, delay: float, log: str | None) -> None:
        super().__init__(log)
        self.mode = mode
        self.delay = delay
        self.listings = 0

    def list_tools(self, req_id: RequestId, params: JsonObj) -> None:
        self.listings += 1
        if self.listings == 2 and self.mode == "fail-once":
            raise RpcError(INTERNAL_ERROR, "tool listing failed")
        if self.listings == 2 and self.mode == "slow-once":
            time.sleep(self.delay)
            self.reply(req_id, {"tools": self.tools})
            if self.log is not None:
                log_line(self.log, "late reply sent")
            return
        self.reply(req_id, {"tools": self.tools})

    def call_tool(self, req_id: RequestId, params: JsonObj) -> None:
        name = params.get("name")
        if name not in ("t", "u"):
            raise RpcError(INVALID_PARAMS, f"Unknown tool: {name}")
        self.reply(req_id, text_result(f"ok {name}"))


if __name__ == "__main__":
    parser = log_arg_parser(__doc__.splitlines()[0])
    parser.add_argument("--mode", required=True, choices=("fail-once", "slow-once"))
    parser.add_argument("--delay", type=float, default=1.5)
    args = parser.parse_args()
    FlakyListServer(args.mode, args.delay, args.log).serve()
