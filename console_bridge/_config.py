"""Parsing of the common ``mcpServers`` configuration into launch specs (no I/O but reading the file),
and the check of the ``auth`` a connection is given for its entry."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx2

from console_bridge._errors import LaunchRefused

__all__ = ["HttpSpec", "ServerSpec", "StdioSpec", "check_auth", "load_server_spec"]

_STDIO_KEYS = {"command", "args", "env", "cwd", "type"}
_HTTP_KEYS = {"url", "headers", "type"}
_STDIO_TYPES = {"stdio"}
_HTTP_TYPES = {"http", "streamable-http", "streamable_http", "streamableHttp"}


@dataclass(frozen=True, slots=True)
class StdioSpec:
    """A server started as a child process speaking MCP over stdin/stdout."""

    name: str
    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: Path | None = None


@dataclass(frozen=True, slots=True)
class HttpSpec:
    """A server reached over Streamable HTTP."""

    name: str
    url: str
    headers: Mapping[str, str] = field(default_factory=dict)


ServerSpec = StdioSpec | HttpSpec


def _refuse(origin: str, server: str | None, problem: str, fix: str) -> LaunchRefused:
    where = f"{origin}, entry {server!r}" if server else origin
    return LaunchRefused(f"{where}: {problem}; {fix}", server=server, details={"config": origin})


def _load_document(
    config: str | os.PathLike[str] | Mapping[str, Any], server: str | None = None
) -> tuple[Mapping[str, Any], str, Path]:
    if isinstance(config, Mapping):
        return config, "the config mapping", Path.cwd()
    if not isinstance(config, str | os.PathLike):
        raise LaunchRefused(
            f"config must be a path to an mcpServers JSON file or a mapping, not {type(config).__name__}; "
            'pass e.g. {"mcpServers": {"name": {"command": "...", "args": []}}}'
        )
    path = Path(config).expanduser()
    origin = f"config file {str(path)!r}"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise _refuse(
            origin,
            server,
            "the file does not exist",
            f"check the path (relative paths start at {str(Path.cwd())!r}) or pass a mapping",
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise _refuse(origin, server, f"cannot be read ({exc})", "check its permissions and encoding") from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _refuse(
            origin,
            None,
            f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}",
            "fix the JSON syntax",
        ) from None
    if not isinstance(document, Mapping):
        raise _refuse(origin, None, "the top level is not a JSON object", 'use {"mcpServers": {...}}')
    return document, origin, path.resolve().parent


def _string_list(value: Any) -> bool:
    return isinstance(value, list | tuple) and all(isinstance(item, str) for item in value)


def _string_map(value: Any) -> bool:
    return isinstance(value, Mapping) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())


def load_server_spec(config: str | os.PathLike[str] | Mapping[str, Any], server: str) -> ServerSpec:
    """Find entry ``server`` in an ``mcpServers`` config and validate it.

    Raises :class:`LaunchRefused` naming the file, the entry and the fix for a missing
    file, invalid JSON, an unknown entry, an entry with neither or both of
    ``command``/``url``, wrong value types, unknown keys and a ``cwd`` that does not exist.
    """
    document, origin, base_dir = _load_document(config, server if isinstance(server, str) else None)
    servers = document.get("mcpServers")
    if not isinstance(servers, Mapping):
        raise _refuse(origin, None, "has no 'mcpServers' object", 'put the servers under {"mcpServers": {...}}')
    if not isinstance(server, str) or server not in servers:
        known = ", ".join(sorted(map(str, servers))) or "none"
        raise _refuse(origin, None, f"no server named {server!r} (known: {known})", "use one of the known names")
    entry = servers[server]
    if not isinstance(entry, Mapping):
        raise _refuse(origin, server, "the entry is not a JSON object", "give command/args or url")
    has_command, has_url = "command" in entry, "url" in entry
    if has_command == has_url:
        problem = "has both 'command' and 'url'" if has_command else "has neither 'command' nor 'url'"
        raise _refuse(origin, server, problem, "give 'command' (stdio) or 'url' (Streamable HTTP), not both")
    allowed = _STDIO_KEYS if has_command else _HTTP_KEYS
    unknown = sorted(set(map(str, entry)) - allowed)
    if unknown:
        raise _refuse(
            origin, server, f"unknown key(s) {', '.join(unknown)}", f"allowed keys are {', '.join(sorted(allowed))}"
        )
    kind = entry.get("type")
    if kind is not None and kind not in (_STDIO_TYPES if has_command else _HTTP_TYPES):
        raise _refuse(origin, server, f"'type' is {kind!r}, which does not fit this entry", "remove 'type'")
    if has_command:
        return _stdio_spec(entry, origin, server, base_dir)
    return _http_spec(entry, origin, server)


def _stdio_spec(entry: Mapping[str, Any], origin: str, server: str, base_dir: Path) -> StdioSpec:
    command, args, env, cwd = entry["command"], entry.get("args", []), entry.get("env", {}), entry.get("cwd")
    if not isinstance(command, str) or not command.strip():
        raise _refuse(origin, server, "'command' must be a non-empty string", "name the executable")
    if not _string_list(args):
        raise _refuse(origin, server, "'args' must be a list of strings", 'e.g. "args": ["server.py"]')
    if not _string_map(env):
        raise _refuse(origin, server, "'env' must map strings to strings", 'e.g. "env": {"KEY": "value"}')
    for text in (command, *args, *env, *env.values()):
        if "\x00" in text:
            raise _refuse(origin, server, "a value contains a NUL byte", "remove it")
    cwd_path: Path | None = None
    if cwd is not None:
        if not isinstance(cwd, str) or not cwd:
            raise _refuse(origin, server, "'cwd' must be a non-empty string", "give a directory path")
        cwd_path = Path(cwd).expanduser()
        if not cwd_path.is_absolute():
            cwd_path = base_dir / cwd_path
        if not cwd_path.is_dir():
            raise _refuse(
                origin,
                server,
                f"'cwd' {cwd!r} is not an existing directory (resolved to {str(cwd_path)!r})",
                "create it or fix the path (relative paths are taken from the config file's folder)",
            )
    return StdioSpec(name=server, command=command, args=tuple(args), env=dict(env), cwd=cwd_path)


def _http_spec(entry: Mapping[str, Any], origin: str, server: str) -> HttpSpec:
    url, headers = entry["url"], entry.get("headers", {})
    if not isinstance(url, str):
        raise _refuse(origin, server, "'url' must be a string", 'e.g. "url": "http://127.0.0.1:8000/mcp"')
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise _refuse(origin, server, f"'url' {url!r} is not an http(s) URL", "give the server's full endpoint URL")
    if not _string_map(headers):
        raise _refuse(origin, server, "'headers' must map strings to strings", 'e.g. "headers": {"X-Key": "v"}')
    for key, value in headers.items():
        if any(ch in key + value for ch in "\r\n\x00"):
            raise _refuse(origin, server, f"header {key!r} contains a line break or NUL", "remove it")
    return HttpSpec(name=server, url=url, headers=dict(headers))


def check_auth(auth: object, spec: ServerSpec) -> None:
    """``auth`` is an ``httpx2.Auth`` (e.g. the MCP SDK's ``OAuthClientProvider``), for an HTTP server only."""
    if auth is None:
        return
    if not isinstance(auth, httpx2.Auth):
        raise LaunchRefused(
            f"auth must be an httpx2.Auth (e.g. mcp.client.auth.OAuthClientProvider) or None, not "
            f"{type(auth).__name__}",
            server=spec.name,
        )
    if not isinstance(spec, HttpSpec):
        raise LaunchRefused(
            f"server {spec.name!r} is a stdio server: auth applies to HTTP servers (a `url` entry) only; "
            "drop auth=, or pass credentials to a stdio server through its `env` entry",
            server=spec.name,
        )
