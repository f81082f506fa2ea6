"""Raw stdio MCP server that answers `tools/call` with a valid result under id = request id + 1000."""

from _rawrpc import JsonObj, RawServer, RequestId, log_arg_parser, text_result


class WrongIdServer(RawServer):
    name = "wrong_id"

    def call_tool(self, req_id: RequestId, params: JsonObj) -> None:
        wrong = req_id + 1000 if isinstance(req_id, int) else f"{req_id}-wrong"
        self.reply(wrong, text_result("ok"))


if __name__ == "__main__":
    WrongIdServer(log_arg_parser(__doc__).parse_args().log).serve()
