"""Raw stdio MCP server that writes the line `this is not json` to stdout on `tools/call`."""

from _rawrpc import JsonObj, RawServer, RequestId, log_arg_parser


class GarbageServer(RawServer):
    name = "garbage"

    def call_tool(self, req_id: RequestId, params: JsonObj) -> None:
        self.write_line("this is not json")


if __name__ == "__main__":
    GarbageServer(log_arg_parser(__doc__).parse_args().log).serve()
