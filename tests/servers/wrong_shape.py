"""Raw stdio MCP server that answers `tools/call` with the invalid result {"content": 5}."""

from _rawrpc import JsonObj, RawServer, RequestId, log_arg_parser


class WrongShapeServer(RawServer):
    name = "wrong_shape"

    def call_tool(self, req_id: RequestId, params: JsonObj) -> None:
        self.reply(req_id, {"content": 5})


if __name__ == "__main__":
    WrongShapeServer(log_arg_parser(__doc__).parse_args().log).serve()
