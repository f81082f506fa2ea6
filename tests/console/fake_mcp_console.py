"""A fake ``mcp-console`` for verification tests: raw newline-delimited JSON-RPC over stdio.

Run it through a wrapper script (see ``make_fake`` in ``test_verification.py``) that sets
the variables below and execs this file with the venv's interpreter; the bridge passes the
server only PATH/HOME/LANG (plus TMPDIR and MCP_CONSOLE_HOME), so the wrapper carries them.

- ``FAKE_MODE``: what to get wrong (``ok`` gets nothing wrong). ``--version`` modes:
  ``version_wrong``, ``version_garbage``, ``version_hang``, ``version_hang_child``,
  ``version_fail``. ``serve`` modes: ``network``, ``no_sandbox``, ``inherit_codex``,
  ``requirements``, ``extra_tool``, ``no_timeout``, ``unknown_sentence``, ``wrong_name``,
  ``drop_deny`` (runs the bridge's confinement probe unsandboxed, as a server that ignores deny rules),
  ``reported_version``; ``v005`` is a correct 0.0.5 (``--version`` and serverInfo).
- ``FAKE_LOG``: every JSON-RPC method received is appended here, one per line.
- ``FAKE_INFO``: JSON written at ``serve`` start: pid, child pid, argv, TMPDIR, cwd.
- ``FAKE_COUNTER``: one line appended per ``--version`` run.

Only the standard library is used.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

DESCRIPTIONS = Path(__file__).resolve().parent.parent / "data" / "sandbox_descriptions"
MODE = os.environ.get("FAKE_MODE", "ok")
PROTOCOL = "2025-11-25"
UNKNOWN_SENTENCE = " Evaluated code may also write to the home directory."


def _append(var: str, line: str) -> None:
    target = os.environ.get(var)
    if target:
        with open(target, "a", encoding="utf-8") as handle:
            handle.write(line + "\n")


def version() -> int:
    _append("FAKE_COUNTER", "version")
    if MODE == "version_wrong":
        print("mcp-console 0.0.7")
    elif MODE == "version_garbage":
        print("hello")
    elif MODE == "version_hang":
        time.sleep(60)
    elif MODE == "version_hang_child":
        # A grandchild in the same process group that keeps stdout open (a shell shim that forks).
        child = subprocess.Popen(["sleep", "60"])
        target = os.environ.get("FAKE_INFO")
        if target:
            Path(target + ".version-child").write_text(str(child.pid), encoding="utf-8")
        time.sleep(60)
    elif MODE == "v005":
        print("mcp-console 0.0.5")
    elif MODE == "version_fail":
        print("mcp-console 0.0.6")
        print("error: something broke", file=sys.stderr)
        return 1
    else:
        print("mcp-console 0.0.6")
    return 0


def _prop(kind: Any, description: str) -> dict[str, Any]:
    return {"description": description, "type": kind}


def send_schema() -> dict[str, Any]:
    """The shape of the real 0.0.6 ``send`` schema with languages=[python, sql] (descriptions shortened)."""
    props: dict[str, Any] = {
        "python": _prop(["string", "null"], "Evaluate one complete Python cell in persistent `__main__` state."),
        "sql": _prop(["string", "null"], "Evaluate one complete SQL cell through the active connection."),
        "timeout_ms": {
            "description": "Wait for output for up to this many milliseconds (default 60,000).",
            "type": "integer",
            "format": "uint64",
            "minimum": 0,
            "default": 60000,
        },
        "control": {
            "description": "Apply control before same-call stdin/code.",
            "type": "string",
            "enum": ["interrupt", "restart"],
        },
        "stdin": _prop(["string", "null"], "Send stdin alone to answer an active read, prompt, or debugger."),
    }
    if MODE == "requirements":
        props["requirements"] = {
            "description": "Inspect declarations or prepare dependencies.",
            "type": ["object", "null"],
            "properties": {
                "action": {"type": "string", "enum": ["get", "add", "set", "reset"]},
                "python": {"type": "array", "items": {"type": "string", "minLength": 1}},
            },
            "additionalProperties": False,
        }
    if MODE == "no_timeout":
        del props["timeout_ms"]
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "additionalProperties": False,
        "type": "object",
        "properties": props,
    }


def description() -> str:
    name = {
        "network": "0.0.6__network_enabled.txt",
        "no_sandbox": "0.0.6__no_sandbox.txt",
        "inherit_codex": "0.0.6__profile_inherit_codex.txt",
    }.get(MODE, "0.0.6__default_norequirements.txt")
    text = (DESCRIPTIONS / name).read_text(encoding="utf-8")
    if MODE == "unknown_sentence":
        text += UNKNOWN_SENTENCE
    return text


def tools() -> list[dict[str, Any]]:
    listed = [{"name": "send", "description": description(), "inputSchema": send_schema()}]
    if MODE == "extra_tool":
        listed.append(
            {
                "name": "shell",
                "description": "Run a shell command on the host.",
                "inputSchema": {"type": "object", "properties": {"command": {"type": "string"}}},
            }
        )
    return listed


def answer(method: str, params: dict[str, Any]) -> dict[str, Any]:
    if method == "initialize":
        return {
            "protocolVersion": PROTOCOL,
            "capabilities": {"tools": {}},
            "serverInfo": {
                "name": "other" if MODE == "wrong_name" else "mcp-console",
                "version": "0.0.5" if MODE in ("reported_version", "v005") else "0.0.6",
            },
        }
    if method == "tools/list":
        return {"tools": tools()}
    if method == "tools/call":
        code = str((params.get("arguments") or {}).get("python") or "")
        if "console-bridge-probe:" in code:
            return {"content": [{"type": "text", "text": probe(code)}], "isError": False}
        return {"content": [{"type": "text", "text": "ok"}], "isError": False}
    if method in ("resources/list", "prompts/list"):
        return {method.split("/")[0]: []}
    if method == "ping":
        return {}
    raise LookupError(method)


def probe(code: str) -> str:
    """The bridge's confinement probe. ``drop_deny`` runs it for real, unsandboxed (a server that
    silently dropped the deny rules: the canaries are readable); other modes answer as a server
    that honours them."""
    if MODE != "drop_deny":
        return 'console-bridge-probe:{"readable": [], "writable": [], "checked": 1}\n'
    import contextlib
    import io

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        exec(code, {})
    return buffer.getvalue()


def serve() -> int:
    child = subprocess.Popen(["sleep", "300"], start_new_session=True, stdin=subprocess.DEVNULL)
    info = {
        "pid": os.getpid(),
        "child": child.pid,
        "argv": sys.argv[1:],
        "tmpdir": os.environ.get("TMPDIR"),
        "mcp_console_home": os.environ.get("MCP_CONSOLE_HOME"),
        "cwd": os.getcwd(),
    }
    target = os.environ.get("FAKE_INFO")
    if target:
        Path(target + ".part").write_text(json.dumps(info), encoding="utf-8")
        os.replace(target + ".part", target)
    out = sys.stdout
    for raw in sys.stdin:
        if not raw.strip():
            continue
        message = json.loads(raw)
        method = message.get("method")
        if method is None:
            continue  # a response to a server request (none are sent)
        _append("FAKE_LOG", method)
        if "id" not in message:
            continue  # a notification
        try:
            result = answer(method, message.get("params") or {})
            reply: dict[str, Any] = {"jsonrpc": "2.0", "id": message["id"], "result": result}
        except LookupError:
            reply = {"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32601, "message": "Method not found"}}
        out.write(json.dumps(reply) + "\n")
        out.flush()
    child.kill()
    child.wait()
    return 0


def main() -> int:
    args = sys.argv[1:]
    if args == ["--version"]:
        return version()
    if args[:1] == ["serve"]:
        return serve()
    print(f"fake mcp-console: unsupported arguments {args}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
