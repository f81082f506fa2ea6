"""Raw stdio MCP server that never answers `tools/call` (it keeps reading; exits on stdin EOF)."""

from _rawrpc import JsonObj, RawServer, RequestId, log_arg_parser


class HangServer(RawServer):
    name = "hang"

    def call_tool(self, req_id: RequestId, params: JsonObj) -> None:
        pass  # never answered


if __name__ == "__main__":
    HangServer(log_arg_parser(__doc__).parse_args().log).serve()
