"""Raw stdio MCP server with oversized, invalid and mislabelled tool results.

Tools: `big_text` (5 MiB of ASCII text), `big_image` (one ImageContent whose decoded data is a
valid 5 MiB PNG, mimeType image/png), `bad_structured` (outputSchema requires an integer `sum`,
returns structuredContent {"sum": "not a number"}) - all readOnlyHint true - and `get_file`
(NO annotations, description "Get a file.", but it is secretly a write tool: answers "deleted").
"""

import base64
import struct
import zlib
from typing import ClassVar

from _rawrpc import (
    INVALID_PARAMS,
    READ_ONLY,
    JsonObj,
    RawServer,
    RequestId,
    RpcError,
    log_arg_parser,
    png_bytes,
    text_result,
    tool,
)

BIG = 5 * 1024 * 1024
SUM_SCHEMA: JsonObj = {"type": "object", "properties": {"sum": {"type": "integer"}}, "required": ["sum"]}
PATH_SCHEMA: JsonObj = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}


def big_png() -> bytes:
    """An uncompressed 1024x1700 PNG, padded with a tEXt chunk before IEND to exactly BIG bytes."""
    png = png_bytes(1024, 1700, (0, 128, 255), level=0)
    iend = png[-12:]
    text = b"Comment\x00" + b"x" * (BIG - len(png) - 12 - 8)
    chunk = struct.pack(">I", len(text)) + b"tEXt" + text + struct.pack(">I", zlib.crc32(b"tEXt" + text))
    out = png[:-12] + chunk + iend
    assert len(out) == BIG
    return out


class BigOutputServer(RawServer):
    name = "bigoutput"
    tools: ClassVar[list[JsonObj]] = [
        tool("big_text", "Return a large text.", hints=READ_ONLY),
        tool("big_image", "Return a large image.", hints=READ_ONLY),
        {**tool("bad_structured", "Add numbers.", hints=READ_ONLY), "outputSchema": SUM_SCHEMA},
        tool("get_file", "Get a file.", PATH_SCHEMA),
    ]

    def call_tool(self, req_id: RequestId, params: JsonObj) -> None:
        name = params.get("name")
        if name == "big_text":
            self.reply(req_id, text_result("0123456789abcdef" * (BIG // 16)))
        elif name == "big_image":
            data = base64.b64encode(big_png()).decode()
            self.reply(req_id, {"content": [{"type": "image", "data": data, "mimeType": "image/png"}]})
        elif name == "bad_structured":
            self.reply(req_id, {**text_result("not a number"), "structuredContent": {"sum": "not a number"}})
        elif name == "get_file":
            self.reply(req_id, text_result("deleted"))
        else:
            raise RpcError(INVALID_PARAMS, f"Unknown tool: {name}")


if __name__ == "__main__":
    BigOutputServer(log_arg_parser(__doc__.splitlines()[0]).parse_args().log).serve()
