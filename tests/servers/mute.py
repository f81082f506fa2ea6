"""Raw stdio server that reads and logs every message but never answers anything, not even `initialize`.

Exits on stdin EOF. With --log FILE it appends one line per method received.
"""

import json
import sys

from _rawrpc import log_arg_parser, log_method

if __name__ == "__main__":
    log = log_arg_parser(__doc__.splitlines()[0]).parse_args().log
    for raw in sys.stdin.buffer:
        try:
            message = json.loads(raw)
        except ValueError:
            continue
        if isinstance(message, dict) and isinstance(message.get("method"), str):
            log_method(log, message["method"], message.get("params"))
