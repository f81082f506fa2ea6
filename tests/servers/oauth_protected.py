"""An OAuth-protected MCP server on 127.0.0.1, built from the MCP SDK's own auth pieces.

``MCPServer`` with ``AuthSettings`` serves both the resource (``/mcp``, bearer tokens required,
RFC 9728 protected-resource metadata) and a minimal authorization server (RFC 8414 metadata,
dynamic client registration, authorization code + PKCE, refresh) whose provider approves every
authorization at once (no login page) and keeps everything in memory. One tool, ``whoami``,
answers with the OAuth client id of the token the call carried. Every authorization and token
grant is logged (``--log``) so a test can count them.

    python tests/servers/oauth_protected.py [--log FILE]    # prints "READY http://127.0.0.1:PORT/mcp"
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import socket
import time

import uvicorn
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    RefreshToken,
    construct_redirect_uri,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions
from mcp.server.mcpserver import MCPServer
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from mcp_types import ToolAnnotations

HOST = "127.0.0.1"
SCOPE = "console"


class MemoryProvider:
    """Approves every authorization request; tokens live for an hour."""

    def __init__(self, log: str | None) -> None:
        self.log = log
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.access: dict[str, AccessToken] = {}
        self.refresh: dict[str, RefreshToken] = {}

    def note(self, line: str) -> None:
        if self.log is not None:
            with open(self.log, "a", encoding="utf-8") as handle:
                handle.write(line + "\n")

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        assert client_info.client_id is not None
        self.clients[client_info.client_id] = client_info
        self.note(f"register {client_info.client_id}")

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        code = secrets.token_urlsafe(24)
        assert client.client_id is not None
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=params.scopes or [SCOPE],
            expires_at=time.time() + 300,
            client_id=client.client_id,
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
        )
        self.note(f"authorize {client.client_id}")
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        code = self.codes.get(authorization_code)
        return code if code is not None and code.client_id == client.client_id else None

    def _grant(self, client_id: str, scopes: list[str], resource: str | None) -> OAuthToken:
        access, refresh = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
        expires = int(time.time()) + 3600
        self.access[access] = AccessToken(
            token=access, client_id=client_id, scopes=scopes, expires_at=expires, resource=resource
        )
        self.refresh[refresh] = RefreshToken(token=refresh, client_id=client_id, scopes=scopes, resource=resource)
        self.note(f"token {client_id}")
        return OAuthToken(
            access_token=access, token_type="Bearer", expires_in=3600, scope=" ".join(scopes), refresh_token=refresh
        )

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        self.codes.pop(authorization_code.code, None)
        return self._grant(authorization_code.client_id, authorization_code.scopes, authorization_code.resource)

    async def load_refresh_token(self, client: OAuthClientInformationFull, refresh_token: str) -> RefreshToken | None:
        token = self.refresh.get(refresh_token)
        return token if token is not None and token.client_id == client.client_id else None

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        self.refresh.pop(refresh_token.token, None)
        return self._grant(refresh_token.client_id, scopes or refresh_token.scopes, refresh_token.resource)

    async def load_access_token(self, token: str) -> AccessToken | None:
        access = self.access.get(token)
        if access is None or (access.expires_at is not None and access.expires_at < time.time()):
            return None
        return access

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        self.access.pop(token.token, None)
        self.refresh.pop(token.token, None)


def build(port: int, log: str | None) -> MCPServer:
    base = f"http://{HOST}:{port}"
    server: MCPServer = MCPServer(
        "oauth-protected",
        auth_server_provider=MemoryProvider(log),
        auth=AuthSettings(
            issuer_url=base,  # type: ignore[arg-type]  # pydantic coerces the str
            resource_server_url=f"{base}/mcp",  # type: ignore[arg-type]
            client_registration_options=ClientRegistrationOptions(enabled=True, valid_scopes=[SCOPE]),
            required_scopes=[SCOPE],
            validate_token_resource=False,
        ),
    )

    @server.tool(
        description="The OAuth client id of the token this call carried.",
        annotations=ToolAnnotations(read_only_hint=True),
    )
    def whoami() -> str:
        token = get_access_token()
        return "anonymous" if token is None else f"client {token.client_id} scopes {' '.join(token.scopes)}"

    return server


async def serve(log: str | None) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((HOST, 0))
    port = sock.getsockname()[1]
    app = build(port, log).streamable_http_app()
    web = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=1))
    announcer = asyncio.create_task(announce(web, port))
    try:
        await web.serve(sockets=[sock])
    finally:
        announcer.cancel()


async def announce(web: uvicorn.Server, port: int) -> None:
    while not web.started:
        await asyncio.sleep(0.01)
    print(f"READY http://{HOST}:{port}/mcp", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log", metavar="FILE", help="append one line per registration, authorization, token")
    args = parser.parse_args()
    asyncio.run(serve(args.log))


if __name__ == "__main__":
    main()
