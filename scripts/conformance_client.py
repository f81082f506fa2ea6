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
from mcp.client.auth.extensions.client_credentials import (
    ClientCredentialsOAuthProvider,
    PrivateKeyJWTOAuthProvider,
    SignedJWTParameters,
)
from mcp.client.auth.extensions.identity_assertion import IdentityAssertionOAuthProvider
from mcp.client.auth.utils import build_protected_resource_metadata_discovery_urls
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

from console_bridge import BridgeError, McpConnection, Owner, Policy

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


def auth_for(url: str, scenario: str, context: dict[str, Any]) -> httpx2.Auth | None:
    """The SDK's provider for the scenario's grant, passed through ``auth=``: client credentials
    (secret or private-key JWT), identity assertion (SEP-990), else the authorization code flow."""
    if not scenario.startswith("auth/"):
        return None
    if scenario == "auth/client-credentials-basic":
        return ClientCredentialsOAuthProvider(
            server_url=url,
            storage=MemoryStorage(),
            client_id=context["client_id"],
            client_secret=context["client_secret"],
            token_endpoint_auth_method="client_secret_basic",
        )
    if scenario == "auth/client-credentials-jwt":
        signed = SignedJWTParameters(
            issuer=context["client_id"],
            subject=context["client_id"],
            signing_algorithm=context.get("signing_algorithm", "ES256"),
            signing_key=context["private_key_pem"],
        )
        return PrivateKeyJWTOAuthProvider(
            server_url=url,
            storage=MemoryStorage(),
            client_id=context["client_id"],
            assertion_provider=signed.create_assertion_provider(),
        )
    if scenario == "auth/enterprise-managed-authorization":
        return identity_assertion(url, context)
    return oauth_for(url, context)


def identity_assertion(url: str, context: dict[str, Any]) -> httpx2.Auth:
    """SEP-990: an ID-JAG from the enterprise IdP (RFC 8693 token exchange), then jwt-bearer at the MCP
    server's authorization server. The issuer is configuration; here it is read from the server's
    protected resource metadata, as the suite puts no issuer in the context."""
    prm_url = build_protected_resource_metadata_discovery_urls(None, url)[0]
    issuer = httpx2.get(prm_url, timeout=30.0).raise_for_status().json()["authorization_servers"][0]

    async def id_jag(audience: str, resource: str) -> str:
        async with httpx2.AsyncClient(timeout=30.0) as http:
            response = await http.post(
                context["idp_token_endpoint"],
                data={
                    "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange",
                    "requested_token_type": "urn:ietf:params:oauth:token-type:id-jag",
                    "subject_token": context["idp_id_token"],
                    "subject_token_type": "urn:ietf:params:oauth:token-type:id_token",
                    "audience": audience,
                    "resource": resource,
                    "client_id": context["idp_client_id"],
                },
            )
        return str(response.raise_for_status().json()["access_token"])

    return IdentityAssertionOAuthProvider(
        server_url=url,
        storage=MemoryStorage(),
        client_id=context["client_id"],
        client_secret=context["client_secret"],
        issuer=issuer,
        assertion_provider=id_jag,
        token_endpoint_auth_method="client_secret_basic",
    )


def stub_arguments(schema: dict[str, Any]) -> dict[str, Any]:
    """The least arguments a tool's inputSchema requires."""
    by_type = {"string": "x", "integer": 0, "number": 0, "boolean": False, "object": {}, "array": []}
    properties = schema.get("properties", {})
    return {name: by_type.get(properties.get(name, {}).get("type"), "x") for name in schema.get("required", [])}


def planned_calls(scenario: str, listed: list[dict[str, Any]], context: dict[str, Any]) -> list[tuple[str, Any]]:
    """The calls a scenario checks, in order: (tool, arguments)."""
    names = [tool["name"] for tool in listed]
    if scenario == "http-custom-headers":  # the suite names the calls (edge values for Mcp-Param-*)
        return [(c["name"], c.get("arguments") or {}) for c in context.get("toolCalls", []) if c["name"] in names]
    if scenario == "http-invalid-tool-headers":  # every tool the listing kept (malformed x-mcp-header dropped)
        return [(tool["name"], stub_arguments(tool.get("inputSchema", {}))) for tool in listed]
    if scenario == "sep-2322-client-request-state":
        order = ["test_mrtr_echo_state", "test_mrtr_unrelated", "test_mrtr_no_state", "test_mrtr_no_result_type"]
        return [(name, {}) for name in order if name in names]
    if scenario == "json-schema-2020-12-preservation":  # the focal tool's inputSchema, echoed verbatim
        focal = next(tool for tool in listed if tool["name"] != "json_schema_echo")
        return [("json_schema_echo", {"schema": focal["inputSchema"]})]
    return [(name, TOOL_ARGUMENTS.get(name, {})) for name in names[:1]]


def run(url: str, scenario: str, context: dict[str, Any]) -> None:
    config = {"mcpServers": {"scenario": {"url": url}}}
    auth = auth_for(url, scenario, context)
    owner = Owner("conformance")
    with McpConnection(config, "scenario", owner=owner, auth=auth, timeout=20.0, startup_timeout=20.0) as probe:
        listed = probe.discover("tools").items
    calls = planned_calls(scenario, listed, context)
    if not calls:
        return
    names = sorted({name for name, _ in calls})
    # The scenario servers' tools are unannotated: the host approves them (its approver sees each call).
    policy = Policy(mode="read_write", approve=lambda request: request.tool in names)
    with McpConnection(
        config, "scenario", owner=owner, tools=names, policy=policy, auth=auth, timeout=20.0, startup_timeout=20.0
    ) as conn:
        for name, arguments in calls:
            try:
                result = conn.call_tool(name, arguments)
            except BridgeError as exc:  # a scenario may answer a call with an error on purpose
                print(f"{name}: {type(exc).__name__}: {exc}")
                continue
            print(f"{name}: {result.text[:200]}")


def main() -> int:
    url = sys.argv[-1]
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "initialize")
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    run(url, scenario, context)
    return 0


if __name__ == "__main__":
    sys.exit(main())
