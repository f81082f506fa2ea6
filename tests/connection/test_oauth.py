"""``auth=``: a governed connection reaches an OAuth-protected MCP server (the MCP SDK's own
authorization and resource server, tests/servers/oauth_protected.py, on 127.0.0.1) through the
SDK's ``OAuthClientProvider``; ``auth`` is refused for stdio servers and for anything not an
``httpx2.Auth``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx2
import pytest
from mcp.client.auth import OAuthClientProvider
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

from console_bridge import AsyncMcpConnection, BridgeError, LaunchRefused, McpConnection, ServerError
from tests.support.places import PYTHON, SERVERS

from .helpers import OWNER, announced_server, config

pytestmark = pytest.mark.anyio

REDIRECT_URI = "http://127.0.0.1:9/callback"  # never fetched: the code is read from the redirect


class Storage:
    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


def provider(url: str, storage: Storage) -> OAuthClientProvider:
    """The SDK's OAuth client with a headless "browser": the authorization URL is fetched and the
    code taken from its redirect (the fixture's authorization server approves at once)."""
    codes: list[AuthorizationCodeResult] = []

    async def redirect(authorization_url: str) -> None:
        async with httpx2.AsyncClient(follow_redirects=False) as client:
            location = (await client.get(authorization_url)).headers["location"]
        query = parse_qs(urlsplit(location).query)
        codes.append(AuthorizationCodeResult(code=query["code"][0], state=query.get("state", [None])[0]))

    async def callback() -> AuthorizationCodeResult:
        return codes.pop()

    metadata = OAuthClientMetadata(
        client_name="console-bridge test",
        redirect_uris=[REDIRECT_URI],  # type: ignore[list-item]
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        token_endpoint_auth_method="none",
    )
    return OAuthClientProvider(url, metadata, storage, redirect_handler=redirect, callback_handler=callback)


class OAuthServer:
    def __init__(self, url: str, log: Path) -> None:
        self.url = url
        self.log = log

    def grants(self) -> list[str]:
        return self.log.read_text(encoding="utf-8").split() if self.log.exists() else []


@pytest.fixture(scope="module")
def oauth_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OAuthServer]:
    log = tmp_path_factory.mktemp("oauth") / "grants.log"
    with announced_server([PYTHON, str(SERVERS / "oauth_protected.py"), "--log", str(log)], "OAuth") as (_, url):
        yield OAuthServer(url, log)


async def test_oauth_protected_server_is_reached_with_the_sdk_provider(conns: Any, oauth_server: OAuthServer) -> None:
    storage = Storage()
    conn = conns(
        {"url": oauth_server.url}, tools=["whoami"], prompts=["absent"], auth=provider(oauth_server.url, storage)
    )
    await conn.connect()
    result = await conn.call_tool("whoami", {})
    assert storage.client is not None and storage.tokens is not None  # registered dynamically, token granted
    assert result.text == f"client {storage.client.client_id} scopes console"
    assert oauth_server.grants().count(storage.client.client_id) == 3  # register, authorize, token
    # The flow's first 401 is not mistaken for a refusal later: a server error is reported as itself.
    with pytest.raises(ServerError) as raised:
        await conn.get_prompt("absent")
    assert "authorization" not in str(raised.value)
    await conn.close()
    # A second connection with the same storage uses the stored token: no new authorization.
    again = conns({"url": oauth_server.url}, tools=["whoami"], auth=provider(oauth_server.url, storage))
    await again.connect()
    assert (await again.call_tool("whoami", {})).text == result.text
    assert oauth_server.grants().count(storage.client.client_id) == 3


async def test_without_auth_the_server_refuses(conns: Any, oauth_server: OAuthServer) -> None:
    conn = conns({"url": oauth_server.url}, tools=["whoami"])
    with pytest.raises(BridgeError) as raised:
        await conn.connect()
    message = str(raised.value)
    assert "requires authorization (HTTP 401" in message and "resource_metadata=" in message, message
    assert "pass auth=" in message and "OAuthClientProvider" in message


def test_the_blocking_twin_takes_auth(blocking_conns: Any, oauth_server: OAuthServer) -> None:
    storage = Storage()
    with blocking_conns({"url": oauth_server.url}, tools=["whoami"], auth=provider(oauth_server.url, storage)) as conn:
        assert conn.call_tool("whoami", {}).text.startswith("client ")


def test_auth_is_refused_for_stdio_and_for_non_auth_objects() -> None:
    stdio = config({"command": PYTHON, "args": [str(SERVERS / "wellbehaved.py")]})
    with pytest.raises(LaunchRefused, match=r"stdio server: auth applies to HTTP servers .* only"):
        AsyncMcpConnection(stdio, "s", owner=OWNER, auth=httpx2.BasicAuth("u", "p"))
    with pytest.raises(LaunchRefused, match=r"stdio server: auth applies to HTTP servers"):
        McpConnection(stdio, "s", owner=OWNER, auth=httpx2.BasicAuth("u", "p"))
    http = config({"url": "http://127.0.0.1:9/mcp"})
    with pytest.raises(LaunchRefused, match=r"auth must be an httpx2.Auth .* not str"):
        AsyncMcpConnection(http, "s", owner=OWNER, auth="Bearer abc")  # type: ignore[arg-type]
