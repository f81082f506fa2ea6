"""The MCP server face: ``console-bridge serve``'s server, over stdio and Streamable HTTP.

``_server`` runs it (:class:`ServeConfig`, :func:`serve_stdio`, :func:`serve_http`); ``_mcp`` the
MCP server and its tools, ``_contract`` their schemas, ``_fast`` the hot ``send`` beside the SDK,
``_stdio`` the pipes, ``_http`` the HTTP gate (tokens, origins, bodies), ``_events`` resumable SSE,
``_identity`` who a client is, ``_consoles`` each console's lifetime. The command's options live
in ``cli/_serve``.
"""

from __future__ import annotations

from console_bridge._serve._server import ServeConfig, serve_http, serve_stdio

__all__ = ["ServeConfig", "serve_http", "serve_stdio"]
