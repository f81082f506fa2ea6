"""The client the MCP conformance suite drives: console-bridge's governed ``McpConnection``.

The suite starts a scenario server and runs ``python scripts/conformance_client.py URL`` with the
scenario in ``MCP_CONFORMANCE_SCENARIO`` (and, for some auth scenarios, credentials in
``MCP_CONFORMANCE_CONTEXT``). The driver connects the way a host would (``McpConnection`` over
Streamable HTTP; for ``auth/*`` with the MCP SDK's ``OAuthClientProvider`` passed as ``auth=``),
lists the tools, calls the scenario's tool and closes. The OAuth authorization step is headless:
the authorization URL is fetched without following redirects and the code is read from the
``Location`` of the redirect, as a browser that approves at once would.

Run by ``scripts/conformance.py``; alone: ``MCP_CONFORMANCE_SCENARIO=initialize python
scripts/conformance_client.py http://127.0.0.1:PORT/mcp``.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx2
from mcp.client.auth import OAuthClientProvider
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

from console_bridge import McpConnection, Owner, Policy

REDIRECT_URI = "http://127.0.0.1:3030/callback"  # never listened on: the code is read from the redirect
CLIENT_METADATA_URL = "https://conformance-test.local/client-metadata.json"  # for auth/basic-cimd

#: Arguments for the tools the client scenarios offer (any other tool is called with none).
TOOL_ARGUMENTS: dict[str, dict[str, Any]] = {"add_numbers": {"a": 5, "b": 3}}


class MemoryStorage:
    """Tokens and client registration for one run (the SDK's ``TokenStorage`` protocol)."""

    def __init__(self, client: OAuthClientInformationFull | None = None) -> None:
        self.tokens: OAuthToken | None = None
        self.client = client

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


class HeadlessBrowser:
    """The redirect and callback handlers: approve by fetching the authorization URL."""

    def __init__(self) -> None:
        self.result: AuthorizationCodeResult | None = None

    async def redirect(self, authorization_url: str) -> None:
        async with httpx2.AsyncClient(follow_redirects=False, timeout=30.0) as client:
            response = await client.get(authorization_url)
        location = response.headers.get("location")
        if location is None:
            raise RuntimeError(f"the authorization endpoint answered {response.status_code} without a redirect")
        query = parse_qs(urlsplit(location).query)
        if "code" not in query:
            raise RuntimeError(f"the authorization redirect carries no code: {location}")
        self.result = AuthorizationCodeResult(
            code=query["code"][0], state=query.get("state", [None])[0], iss=query.get("iss", [None])[0]
        )

    async def callback(self) -> AuthorizationCodeResult:
        if self.result is None:
            raise RuntimeError("the callback came before the authorization redirect")
        result, self.result = self.result, None
        return result


def oauth_for(url: str, context: dict[str, Any]) -> OAuthClientProvider:
    """The MCP SDK's OAuth client, registered dynamically, by CIMD, or pre-registered (``context``)."""
    metadata = OAuthClientMetadata(
        client_name="console-bridge conformance client",
        redirect_uris=[REDIRECT_URI],  # type: ignore[list-item]  # pydantic coerces the str to AnyUrl
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        token_endpoint_auth_method="client_secret_basic" if context.get("client_secret") else "none",
    )
    client = None
    if context.get("client_id"):
        client = OAuthClientInformationFull(
            client_id=context["client_id"],
            client_secret=context.get("client_secret"),
            **metadata.model_dump(exclude_none=True),
        )
    browser = HeadlessBrowser()
    return OAuthClientProvider(
        server_url=url,
        client_metadata=metadata,
        storage=MemoryStorage(client),
        redirect_handler=browser.redirect,
        callback_handler=browser.callback,
        client_metadata_url=CLIENT_METADATA_URL,
    )


def run(url: str, scenario: str, context: dict[str, Any]) -> None:
    config = {"mcpServers": {"scenario": {"url": url}}}
    auth = oauth_for(url, context) if scenario.startswith("auth/") else None
    owner = Owner("conformance")
    with McpConnection(config, "scenario", owner=owner, auth=auth, timeout=20.0, startup_timeout=20.0) as probe:
        names = [tool["name"] for tool in probe.discover("tools").items]
    if not names:
        return
    # The scenario servers' tools are unannotated: the host approves them (its approver sees each call).
    policy = Policy(mode="read_write", approve=lambda request: request.tool in names)
    with McpConnection(
        config, "scenario", owner=owner, tools=names, policy=policy, auth=auth, timeout=20.0, startup_timeout=20.0
    ) as conn:
        for name in names[:1]:
            result = conn.call_tool(name, TOOL_ARGUMENTS.get(name, {}))
            print(f"{name}: {result.text[:200]}")


def main() -> int:
    url = sys.argv[-1]
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "initialize")
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    run(url, scenario, context)
    return 0


if __name__ == "__main__":
    sys.exit(main())
