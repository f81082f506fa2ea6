"""Raw stdio MCP server that writes `dying now` to stderr and exits with status 3 on `tools/call`."""

import sys

from _rawrpc import JsonObj, RawServer, RequestId, log_arg_parser


class ExitMidcallServer(RawServer):
    name = "exit_midcall"

    def call_tool(self, req_id: RequestId, params: JsonObj) -> None:
        sys.stderr.write("dying now\n")
        sys.stderr.flush()
        sys.exit(3)


if __name__ == "__main__":
    ExitMidcallServer(log_arg_parser(__doc__).parse_args().log).serve()
