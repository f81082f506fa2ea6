"""Raw stdio MCP server that writes 10 MiB to stderr at startup, then behaves; `tools/call` -> "ok".

A client that does not drain the server's stderr pipe deadlocks it before `initialize` is answered.
"""

import sys

from _rawrpc import RawServer, log_arg_parser

FLOOD_BYTES = 10 * 1024 * 1024
LINE = b"E" * 1023 + b"\n"  # 1 KiB per line
CHUNK = LINE * 64  # 64 KiB per write


class StderrFloodServer(RawServer):
    name = "stderr_flood"


def flood() -> None:
    for _ in range(FLOOD_BYTES // len(CHUNK)):
        sys.stderr.buffer.write(CHUNK)
        sys.stderr.buffer.flush()


if __name__ == "__main__":
    args = log_arg_parser(__doc__).parse_args()
    flood()
    StderrFloodServer(args.log).serve()
