"""Who may call ``compassmem mcp``'s tools for which tenant: the HTTP API's keys over streamable HTTP (a key names its
tenant; the tools act for it and refuse any other), one pinned tenant over stdio, the Host and Origin headers
(DNS rebinding), the HTTP API's limits on ``remember``, and the settings the server refuses to start with.

Each server is a real ``compassmem mcp`` process on real embedded stores, driven by the MCP SDK's own client."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from dev_process import free_port, serving_child
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from pydantic import SecretStr
from test_library import library_settings
from test_mcp_server import TURNS, server_env

from compassmem import Memory
from compassmem.core.api_keys import TenantKeys
from compassmem.core.config import Settings
from compassmem.mcp.server import TenantKeyVerifier, check_exposure, transport_security

ACME_KEY = "acme.acme-secret-0123456789abcdef"
GLOBEX_KEY = "globex.globex-secret-0123456789abcdef"
STRANGER_KEY = "initech.initech-secret-0123456789abcdef"  # names a tenant, but is not configured
MAX_BODY_BYTES = 64 * 1024
# Every tool with the arguments of a call that would read or change tenant acme's memory.
ACME_CALLS = {
    "list_conversations": {},
    # Every ranked turn: what recall finds is not the point here (the default min_relevance leaves some out).
    "recall": {"question": "What breed is Biscuit?", "conversation_id": "ann-bob", "min_relevance": 0},
    "redact_turn": {"conversation_id": "ann-bob", "turn_id": "2"},
    "forget": {"conversation_id": "ann-bob"},
    "remember": {"conversation_id": "ann-bob", "turns": TURNS[:1]},
}
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                         "clientInfo": {"name": "test", "version": "1"}}}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@dataclass(frozen=True)
class KeyedServer:
    url: str
    log: Path


def _mcp_command(data_dir: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "compassmem.cli", "--data-dir", str(data_dir), "mcp", *args]


@pytest.fixture(scope="module")
def keyed_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KeyedServer]:
    """``compassmem mcp --port`` with the keys of acme and globex, every tenant needing one."""
    root = tmp_path_factory.mktemp("mcp-keys")
    port = free_port()
    env = {**server_env(), "COMPASSMEM_API_KEYS": json.dumps([ACME_KEY, GLOBEX_KEY]),
           "COMPASSMEM_API_AUTH_REQUIRED": "true", "COMPASSMEM_API_MAX_BODY_BYTES": str(MAX_BODY_BYTES)}
    url = f"http://127.0.0.1:{port}/mcp"
    # Ready once the port answers at all: a GET without a key is refused, which is an answer.
    with serving_child(_mcp_command(root / "data", "--port", str(port)), root / "mcp.log", url, 120, env,
                       ready_status=401):
        yield KeyedServer(url=url, log=root / "mcp.log")


@asynccontextmanager
async def _session(url: str, key: str | None, headers: dict[str, str] | None = None) -> AsyncIterator[ClientSession]:
    sent = {**({"Authorization": f"Bearer {key}"} if key else {}), **(headers or {})}
    async with create_mcp_http_client(headers=sent) as http, \
            streamable_http_client(url, http_client=http) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


async def _refused_at_initialize(url: str, key: str | None, headers: dict[str, str] | None = None) -> None:
    """The SDK client's session fails at ``initialize`` (it reports an HTTP error status as an MCPError)."""
    with pytest.raises(BaseExceptionGroup) as refused:
        async with _session(url, key, headers):
            pass
    errors = refused.value.exceptions
    while any(isinstance(error, BaseExceptionGroup) for error in errors):
        errors = tuple(leaf for error in errors for leaf in getattr(error, "exceptions", (error,)))
    assert [type(error) for error in errors] == [MCPError], repr(refused.value)


def _run(server: KeyedServer, body: Any) -> None:  # noqa: ANN401 - an async test body
    async def main() -> None:
        with anyio.fail_after(90):
            await body()

    try:
        anyio.run(main)
    except BaseException:
        print(server.log.read_text()[-3000:])
        raise


def _text(result: Any) -> str:  # noqa: ANN401 - a CallToolResult
    return " ".join(getattr(item, "text", "") for item in result.content)


def test_a_request_without_a_valid_key_is_refused(keyed_server: KeyedServer) -> None:
    for headers in ({}, {"Authorization": f"Bearer {STRANGER_KEY}"}, {"Authorization": "Bearer acme.not-the-key"},
                    {"Authorization": ACME_KEY}):
        answer = httpx.post(keyed_server.url, json=INITIALIZE, headers={**MCP_HEADERS, **headers}, timeout=30)
        assert answer.status_code == 401, (headers, answer.status_code, answer.text)
        assert answer.headers["www-authenticate"].startswith("Bearer")

    async def body() -> None:
        await _refused_at_initialize(keyed_server.url, None)
        await _refused_at_initialize(keyed_server.url, STRANGER_KEY)

    _run(keyed_server, body)


def test_a_tenants_key_acts_for_its_tenant_only(keyed_server: KeyedServer) -> None:
    async def body() -> None:
        async with _session(keyed_server.url, ACME_KEY) as acme:
            remembered = await acme.call_tool("remember", {"conversation_id": "ann-bob", "turns": TURNS})
            assert not remembered.is_error, _text(remembered)
            listed = await acme.call_tool("list_conversations", {})
            assert listed.structured_content["tenant"] == "acme"
            assert [c["conversation_id"] for c in listed.structured_content["conversations"]] == ["ann-bob"]
            # Naming its own tenant is allowed.
            own = await acme.call_tool("recall", {**ACME_CALLS["recall"], "tenant": "acme"})
            assert not own.is_error, _text(own)
            assert any("beagle" in turn["text"] for turn in own.structured_content["turns"])

        async with _session(keyed_server.url, GLOBEX_KEY) as globex:
            listed = await globex.call_tool("list_conversations", {})
            assert listed.structured_content["tenant"] == "globex"
            assert listed.structured_content["conversations"] == []
            unseen = await globex.call_tool("recall", ACME_CALLS["recall"])
            assert unseen.is_error and "of tenant 'globex'" in _text(unseen), _text(unseen)
            # Naming acme is refused by every tool, before anything is read or changed.
            for tool, arguments in ACME_CALLS.items():
                refused = await globex.call_tool(tool, {**arguments, "tenant": "acme"})
                assert refused.is_error, (tool, _text(refused))
                assert "tenant 'globex'" in _text(refused) and "'acme'" in _text(refused), (tool, _text(refused))

        async with _session(keyed_server.url, ACME_KEY) as acme:
            listed = await acme.call_tool("list_conversations", {})
            [conversation] = listed.structured_content["conversations"]
            assert conversation["conversation_id"] == "ann-bob" and conversation["turns"] == len(TURNS)
            for tool, arguments in ACME_CALLS.items():
                refused = await acme.call_tool(tool, {**arguments, "tenant": "globex"})
                assert refused.is_error and "tenant 'acme'" in _text(refused), (tool, _text(refused))

    _run(keyed_server, body)


def test_another_keys_holder_cannot_use_a_session(keyed_server: KeyedServer) -> None:
    """A session id is no credential: a request with another tenant's key on acme's session is refused."""
    opened = httpx.post(keyed_server.url, json=INITIALIZE, timeout=30,
                        headers={**MCP_HEADERS, "Authorization": f"Bearer {ACME_KEY}"})
    assert opened.status_code == 200, opened.text
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
               "params": {"name": "list_conversations", "arguments": {}}}
    hijack = httpx.post(keyed_server.url, json=listing, timeout=30,
                        headers={**MCP_HEADERS, "Authorization": f"Bearer {GLOBEX_KEY}",
                                 "mcp-session-id": opened.headers["mcp-session-id"],
                                 "mcp-protocol-version": "2025-06-18"})
    assert hijack.status_code == 404, (hijack.status_code, hijack.text)


def test_remember_keeps_the_http_apis_limits(keyed_server: KeyedServer) -> None:
    async def body() -> None:
        async with _session(keyed_server.url, ACME_KEY) as acme:
            many = [{"speaker": "Ann", "text": f"note {index}"} for index in range(1001)]
            refused = await acme.call_tool("remember", {"conversation_id": "many", "turns": many})
            assert refused.is_error and "turns" in _text(refused) and "1000" in _text(refused), _text(refused)
            listed = await acme.call_tool("list_conversations", {"query": "many"})
            assert listed.structured_content["conversations"] == []

    _run(keyed_server, body)
    big = {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
           "params": {"name": "remember", "arguments": {"conversation_id": "big", "turns": [
               {"speaker": "Ann", "text": "x" * MAX_BODY_BYTES}]}}}
    answer = httpx.post(keyed_server.url, json=big, timeout=30,
                        headers={**MCP_HEADERS, "Authorization": f"Bearer {ACME_KEY}"})
    assert answer.status_code == 413, (answer.status_code, answer.text)


def test_a_host_or_origin_not_allowed_is_refused(keyed_server: KeyedServer) -> None:
    port = keyed_server.url.split(":")[2].split("/")[0]
    key = {"Authorization": f"Bearer {ACME_KEY}"}
    for headers, status in (({"Host": "rebound.example.com"}, 421), ({"Host": f"rebound.example.com:{port}"}, 421),
                            ({"Origin": "http://rebound.example.com"}, 403), ({"Host": f"localhost:{port}"}, 200),
                            ({"Origin": f"http://127.0.0.1:{port}"}, 200)):
        answer = httpx.post(keyed_server.url, json=INITIALIZE, headers={**MCP_HEADERS, **key, **headers}, timeout=30)
        assert answer.status_code == status, (headers, answer.status_code, answer.text)

    async def body() -> None:
        await _refused_at_initialize(keyed_server.url, ACME_KEY, {"Host": "rebound.example.com"})

    _run(keyed_server, body)


def _start(data_dir: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(_mcp_command(data_dir, *args), env=env, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=120)


def _one_error(started: subprocess.CompletedProcess[str]) -> str:
    assert started.returncode == 2, started.stderr[-2000:]
    errors = [line for line in started.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in started.stderr, started.stderr[-2000:]
    return errors[0]


def test_the_server_refuses_to_start_when_keys_are_required_and_none_are_configured(tmp_path: Path) -> None:
    env = {**server_env(), "COMPASSMEM_API_AUTH_REQUIRED": "true"}
    error = _one_error(_start(tmp_path / "data", env, "--port", str(free_port())))
    assert "COMPASSMEM_API_AUTH_REQUIRED" in error and "COMPASSMEM_API_KEYS" in error, error


def test_a_host_other_than_loopback_without_keys_needs_the_insecure_flag(tmp_path: Path) -> None:
    # A documentation address (TEST-NET-1) no interface has: a server that did not refuse could not bind it either.
    error = _one_error(_start(tmp_path / "data", server_env(), "--host", "192.0.2.1", "--port", str(free_port())))
    assert "192.0.2.1" in error and "COMPASSMEM_API_KEYS" in error and "--insecure-no-auth" in error, error
    assert not (tmp_path / "data" / "qdrant").exists(), "the stores were opened before the refusal"

    settings = library_settings(tmp_path / "data")
    check_exposure(settings, "192.0.2.1", insecure_no_auth=True)
    check_exposure(settings.model_copy(update={"api_keys": {"acme": SecretStr(ACME_KEY)}}), "192.0.2.1", False)
    for loopback in ("127.0.0.1", "127.0.0.2", "localhost", "::1"):
        check_exposure(settings, loopback, insecure_no_auth=False)


def test_the_allowed_hosts_are_the_bound_one_loopback_and_the_setting() -> None:
    settings = Settings(_env_file=None, mcp_allowed_hosts=["Memory.Example.com.", "[2001:db8::1]"])
    assert settings.mcp_allowed_hosts == ["memory.example.com", "2001:db8::1"]
    security = transport_security(settings, "192.0.2.1", 8765)
    assert security.enable_dns_rebinding_protection
    assert security.allowed_hosts == [
        "192.0.2.1:8765", "127.0.0.1", "localhost", "[::1]", "memory.example.com", "[2001:db8::1]",
        "127.0.0.1:*", "localhost:*", "[::1]:*", "memory.example.com:*", "[2001:db8::1]:*"]
    assert {"http://memory.example.com", "https://memory.example.com:*", "http://192.0.2.1:8765"} <= set(
        security.allowed_origins)
    assert transport_security(settings, "::1", 8765).allowed_hosts[0] == "[::1]:8765"
    with pytest.raises(ValueError, match="mcp_allowed_hosts"):
        Settings(_env_file=None, mcp_allowed_hosts=["https://memory.example.com:443/"])


def test_a_pinned_tenant_over_http_accepts_only_its_own_key() -> None:
    keys = TenantKeys({"acme": SecretStr(ACME_KEY), "globex": SecretStr(GLOBEX_KEY)}, required=True)

    async def verified() -> list[str | None]:
        tokens = [await TenantKeyVerifier(keys, pinned).verify_token(key)
                  for pinned in (None, "acme") for key in (ACME_KEY, GLOBEX_KEY, STRANGER_KEY)]
        return [token.client_id if token else None for token in tokens]

    assert anyio.run(verified) == ["acme", "globex", None, "acme", None, None]


def test_a_pinned_tenant_over_stdio(tmp_path: Path) -> None:
    from mcp.client.stdio import StdioServerParameters, stdio_client

    server = StdioServerParameters(command=sys.executable, args=_mcp_command(tmp_path / "data")[1:],
                                   env={**server_env(), "COMPASSMEM_MCP_TENANT": "acme"})

    async def main() -> None:
        with anyio.fail_after(120), (tmp_path / "mcp.log").open("w") as log:
            async with stdio_client(server, errlog=log) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                remembered = await session.call_tool("remember", {"conversation_id": "ann-bob", "turns": TURNS})
                assert not remembered.is_error, _text(remembered)
                listed = await session.call_tool("list_conversations", {})
                assert listed.structured_content["tenant"] == "acme"
                for tool, arguments in ACME_CALLS.items():
                    refused = await session.call_tool(tool, {**arguments, "tenant": "default"})
                    assert refused.is_error, (tool, _text(refused))
                    assert "COMPASSMEM_MCP_TENANT" in _text(refused) and "'acme'" in _text(refused), _text(refused)

    try:
        anyio.run(main)
    except BaseException:
        print((tmp_path / "mcp.log").read_text()[-3000:])
        raise
    with Memory(library_settings(tmp_path / "data")) as memory:
        assert [c.conversation_id for c in memory.conversations(tenant="acme").conversations] == ["ann-bob"]
        assert memory.conversations(tenant="default").conversations == []
