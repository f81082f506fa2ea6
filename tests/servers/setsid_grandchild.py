"""Raw stdio MCP server that leaves a grandchild in its own session; `tools/call` -> "ok".

At startup it spawns `python -c` that calls os.setsid() then sleeps 600 s, waits until the
grandchild really is in a new session (so killing the server's process group cannot reach it),
then writes the grandchild's pid atomically to the file named by $GRANDCHILD_PID_FILE.
"""

import os
import subprocess
import sys
import time

from _rawrpc import RawServer, log_arg_parser

GRANDCHILD_CODE = "import os, time; os.setsid(); time.sleep(600)"


class SetsidGrandchildServer(RawServer):
    name = "setsid_grandchild"


def spawn_grandchild(inherit_stdio: bool) -> int:
    stdio = None if inherit_stdio else subprocess.DEVNULL
    child = subprocess.Popen([sys.executable, "-c", GRANDCHILD_CODE], stdin=stdio, stdout=stdio, stderr=stdio)
    deadline = time.monotonic() + 10
    while os.getsid(child.pid) == os.getsid(0) and time.monotonic() < deadline:
        time.sleep(0.01)
    return child.pid


def write_pid_file(path: str, pid: int) -> None:
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="ascii") as f:
        f.write(f"{pid}\n")
    os.replace(tmp, path)


if __name__ == "__main__":
    parser = log_arg_parser(__doc__)
    parser.add_argument(
        "--inherit-stdio",
        action="store_true",
        help="the grandchild keeps the server's stdin/stdout/stderr pipes open (default: /dev/null)",
    )
    args = parser.parse_args()
    pid = spawn_grandchild(args.inherit_stdio)
    if pid_file := os.environ.get("GRANDCHILD_PID_FILE"):
        write_pid_file(pid_file, pid)
    SetsidGrandchildServer(args.log).serve()
