"""Promises of docs/security.md that no other test module held: each test here is named beside its promise there.

Small and offline where the promise allows it: the query API over ``offline_api``'s empty stores, the MCP server's
tenant and key checks without a transport, the live feed's buffer without a broker, the compassmem pieces that
decide an order or a rule called directly. Where a promise is about a process (the console log, a process's own
cursor secret), a child process.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import subprocess
import sys
import textwrap
from typing import Any

import anyio
import pytest
from fastapi.testclient import TestClient
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import SecretStr

import compassmem.core.api_keys as api_keys
import compassmem.query_api.server as api_server
from compassmem.core.api_keys import TenantKeys
from compassmem.core.config import Settings
from compassmem.core.contracts.commands import ForgetCommand, RedactCommand
from compassmem.core.errors import BadRequest, Forbidden
from compassmem.mcp import server as mcp_server
from compassmem.mcp.server import TenantChoice, build_server
from compassmem.query_api import host_check
from compassmem.query_api.explorer.live import PURGED_REASON, FeedTopics, LiveFeed, LiveNotice, Numbered
from compassmem.query_api.host_check import HostCheckMiddleware
from compassmem.retrieval.listing import PROCESS_CURSORS, CursorError, CursorSigner
from compassmem.sinks.batching import CompactingSink, ConversationForgotten, TurnRedacted
from compassmem.streams.decoding import RawRecord, decode_turns_record
from compassmem.core.contracts.stream_records import ChangeOp, EventChange
from compassmem.system import loopback
from compassmem.system.loopback import is_loopback_host
from offline_api import LOCAL_URL, offline_app
from prometheus_text import parse_samples, value

ACME_KEY = "acme.AAAAAAAAAAAAAAAAAAAAAAAA"
GLOBEX_KEY = "globex.BBBBBBBBBBBBBBBBBBBBBBBB"
ADMIN_KEY = "operator-secret-of-the-promises"
CANARY = "Quillmarsh"


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


# -- HTTP API: what comes before authentication, and what comes right after it ---------------------------------------


def test_only_the_host_check_and_a_declared_body_too_large_come_before_the_key() -> None:
    closed = TestClient(offline_app(api_keys=[ACME_KEY, GLOBEX_KEY], api_auth_required=True,
                                    api_max_body_bytes=1024), base_url=LOCAL_URL)
    big = closed.post("/v1/turns", content=b"x" * 2000, headers={"Content-Type": "application/json"})
    assert big.status_code == 413 and "COMPASSMEM_API_MAX_BODY_BYTES" in big.json()["detail"]
    rebound = closed.get("/v1/events/e1", params={"tenant": "acme"}, headers={"Host": "rebound.example"})
    assert rebound.status_code == 400
    assert closed.get("/v1/events/e1", params={"tenant": "acme"}).status_code == 401


def test_the_tenant_a_request_names_is_checked_as_soon_as_it_is_read() -> None:
    api = TestClient(offline_app(api_keys=[ACME_KEY, GLOBEX_KEY]), base_url=LOCAL_URL)
    # A tenant query parameter before the other parameters: a bad limit does not hide the refusal.
    assert api.get("/v1/conversations", params={"tenant": "acme", "limit": 0},
                   headers=_bearer(GLOBEX_KEY)).status_code == 403
    # A body's tenant once the body is valid: a malformed body is a 422 first.
    malformed = api.post("/v1/query", content=b"{", headers={**_bearer(GLOBEX_KEY), "Content-Type": "application/json"})
    assert malformed.status_code == 422
    valid = api.post("/v1/query", json={"tenant": "acme", "conversation_id": "c1", "question": "What happened?"},
                     headers=_bearer(GLOBEX_KEY))
    assert valid.status_code == 403
    assert valid.json()["detail"] == "the API key is tenant 'globex''s, not tenant 'acme''s"
    # A tenant without a key is open to a request with a valid key (any tenant's) as to one without.
    assert api.get("/v1/events/e1", params={"tenant": "initech"}, headers=_bearer(ACME_KEY)).status_code == 404


# -- HTTP API: where it listens, which Host names it answers --------------------------------------------------------


def test_the_api_listens_on_loopback_unless_told_and_warns_when_told_to_serve_open(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings(_env_file=None).api_host == "127.0.0.1"  # type: ignore[call-arg]
    warnings: list[tuple[str, dict[str, Any]]] = []

    class Log:
        def warning(self, event: str, **fields: Any) -> None:
            warnings.append((event, fields))

    monkeypatch.setattr(api_server, "log", Log())
    public = Settings(_env_file=None, api_host="0.0.0.0")  # type: ignore[call-arg]
    with pytest.raises(api_server.ApiStartupError, match="--insecure-no-auth"):
        api_server.check_exposure(public, insecure_no_auth=False)
    assert warnings == []
    api_server.check_exposure(public, insecure_no_auth=True)
    assert [event for event, _ in warnings] == ["api.insecure_no_auth"]


def test_one_rule_decides_which_addresses_are_loopback_for_every_server() -> None:
    for name in ("localhost", "LocalHost.", "127.0.0.1", "127.8.9.10", "::1", "[::1]"):
        assert is_loopback_host(name), name
    for name in ("0.0.0.0", "::", "10.0.0.1", "192.0.2.1", "localhost.evil.example", "127.0.0.1.nip.io", ""):
        assert not is_loopback_host(name), name
    # The query API's start-up check, its Host check and the MCP server's checks all call this one function.
    assert api_server.is_loopback_host is host_check.is_loopback_host is mcp_server.is_loopback_host \
        is loopback.is_loopback_host


def test_the_api_answers_the_one_address_it_listens_on_and_no_wildcard() -> None:
    bound = HostCheckMiddleware(None, bind_host="192.0.2.1", allowed_hosts=[])  # type: ignore[arg-type]
    assert bound.answers("192.0.2.1:8080") and bound.answers("192.0.2.1") and bound.answers("localhost:1")
    assert not bound.answers("192.0.2.2") and not bound.answers("memory.example.com")
    everywhere = HostCheckMiddleware(None, bind_host="0.0.0.0", allowed_hosts=[])  # type: ignore[arg-type]
    assert not everywhere.answers("0.0.0.0") and not everywhere.answers("0.0.0.0:8080")


def test_a_refused_host_is_counted_like_any_request() -> None:
    api = TestClient(offline_app(), base_url=LOCAL_URL)
    assert api.get("/v1/conversations", headers={"Host": "rebound.example"}).status_code == 400
    samples = parse_samples(api.get("/metrics").text)
    assert value(samples, "compassmem_http_requests_total", method="GET", route="unmatched", status="400") == 1


# -- keys ------------------------------------------------------------------------------------------------------------


def test_a_presented_key_is_compared_with_every_configured_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """Constant time: the time taken does not depend on which key matched, or whether one did."""
    compared: list[bytes] = []
    original = hmac.compare_digest

    def compare_digest(a: bytes, b: bytes) -> bool:
        compared.append(b)
        return original(a, b)

    monkeypatch.setattr(api_keys.hmac, "compare_digest", compare_digest)
    keys = TenantKeys({"acme": SecretStr(ACME_KEY), "globex": SecretStr(GLOBEX_KEY)}, required=True,
                      admin_keys=[SecretStr(ADMIN_KEY), SecretStr(ADMIN_KEY + "-2")])
    for presented, owner in ((ACME_KEY, "acme"), (GLOBEX_KEY, "globex"), ("acme.nope", None)):
        compared.clear()
        assert keys.owner(presented) == owner
        assert len(compared) == 2, presented
    compared.clear()
    keys.check_admin(ADMIN_KEY)
    assert len(compared) == 2


# -- MCP: which keys open the tools over HTTP, which tenant they act for ------------------------------------------


def test_mcp_over_http_takes_tenant_keys_only_whatever_auth_required_says() -> None:
    memory = offline_app(api_keys=[ACME_KEY, GLOBEX_KEY], api_admin_keys=[ADMIN_KEY],
                         api_auth_required=False).state.services.memory
    server = build_server(memory, http_url="http://127.0.0.1:8765")
    assert server.settings.auth is not None  # the SDK's bearer authentication: 401 without a valid key
    verifier = server._token_verifier  # noqa: SLF001 - the verifier the SDK asks

    async def verified() -> list[str | None]:
        tokens = [await verifier.verify_token(key) for key in (ACME_KEY, GLOBEX_KEY, ADMIN_KEY, "acme.not-the-key")]
        return [token.client_id if token else None for token in tokens]

    assert anyio.run(verified) == ["acme", "globex", None, None]


def test_the_tenant_a_tool_acts_for_without_a_key() -> None:
    """Over stdio, or over HTTP without keys, no access token: the pinned tenant, else the one named."""
    no_keys = TenantKeys({}, required=True)
    pinned = TenantChoice(no_keys, "acme")
    assert pinned(None) == "acme" and pinned("acme") == "acme"
    with pytest.raises(Forbidden, match="COMPASSMEM_MCP_TENANT"):
        pinned("globex")
    open_to_all = TenantChoice(no_keys, None)
    assert open_to_all(None) == "default"
    assert open_to_all("globex") == "globex" and open_to_all("acme") == "acme"


def test_recall_stops_at_the_api_query_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    memory = offline_app(api_query_deadline_s=0.25).state.services.memory
    asked: dict[str, Any] = {}

    def query(question: str, **arguments: Any) -> None:
        asked.update(arguments)
        raise BadRequest("asked")

    monkeypatch.setattr(memory, "query", query)
    server = build_server(memory)

    async def call() -> object:
        return await server.call_tool("recall", {"question": "What happened?", "conversation_id": "c1"})

    with pytest.raises(ToolError, match="asked"):
        anyio.run(call)
    assert asked["deadline_s"] == 0.25


# -- cursors -----------------------------------------------------------------------------------------------------


def test_a_signed_cursor_is_refused_for_another_listing_or_a_key_of_other_types() -> None:
    signer = CursorSigner("a-shared-cursor-secret")
    assert signer.decode("conversations:id:", signer.encode("conversations:id:", ("c1",)), (str,)) == ("c1",)
    with pytest.raises(CursorError, match="belongs to another listing"):
        signer.decode("conversations:id:", signer.encode("conversations:recent:", ("c1",)), (str,))
    for key, shape in ((("c1",), (float, str)), ((1.0,), (str,)), (("c1",), (float,)), ((float("inf"),), (float,))):
        with pytest.raises(CursorError, match="does not hold a position of this listing"):
            signer.decode("l", signer.encode("l", key), shape)
    assert issubclass(CursorError, ValueError)


def test_without_a_cursor_secret_a_cursor_is_good_only_in_the_process_that_made_it() -> None:
    made = subprocess.run([sys.executable, "-c", "from compassmem.retrieval.listing import PROCESS_CURSORS; "
                           "print(PROCESS_CURSORS.encode('conversations:id:', ('c1',)))"],
                          capture_output=True, text=True, timeout=120, check=True).stdout.strip()
    with pytest.raises(CursorError, match="good only in the process that made it"):
        PROCESS_CURSORS.decode("conversations:id:", made, (str,))
    own = PROCESS_CURSORS.encode("conversations:id:", ("c1",))
    assert PROCESS_CURSORS.decode("conversations:id:", own, (str,)) == ("c1",)


# -- the live feed's buffer ---------------------------------------------------------------------------------------

TOPICS = FeedTopics("events", "relations", "clusters", "control")


def _change(op: ChangeOp, event_id: str = "e1") -> bytes:
    return EventChange(op=op, tenant="acme", conversation_id="c1", event_id=event_id).model_dump_json().encode()


def test_the_live_feed_keeps_the_last_4096_changes() -> None:
    async def main() -> tuple[object, object]:
        feed = LiveFeed("127.0.0.1:1", TOPICS)  # never started: changes are handed to it as its follower would
        stream, start = feed.subscribe("acme", "c1", None)
        feed.unsubscribe(stream)
        for number in range(4096):
            feed.publish(TOPICS.events, _change(ChangeOp.DELETE, f"e{number}"))
        kept, _ = feed.subscribe("acme", "c1", start)
        feed.publish(TOPICS.events, _change(ChangeOp.DELETE, "one-more"))
        lost, _ = feed.subscribe("acme", "c1", start)
        return kept.queue.get_nowait(), lost.queue.get_nowait()

    kept, lost = asyncio.run(main())
    assert isinstance(kept, Numbered) and kept.sequence == 1  # resumed: every change since the position
    assert isinstance(lost, LiveNotice) and "no longer kept" in lost.reason  # one too many: a resync


def test_a_forget_on_the_events_feed_drops_the_earlier_changes_and_is_sent_on() -> None:
    async def main() -> tuple[list[object], object]:
        feed = LiveFeed("127.0.0.1:1", TOPICS)
        stream, start = feed.subscribe("acme", "c1", None)
        feed.publish(TOPICS.events, _change(ChangeOp.DELETE))
        feed.publish(TOPICS.events, _change(ChangeOp.FORGET))
        await asyncio.sleep(0)  # the feed hands changes over through the stream's loop
        sent = [stream.queue.get_nowait() for _ in range(stream.queue.qsize())]
        resumed, _ = feed.subscribe("acme", "c1", start)
        return sent, resumed.queue.get_nowait()

    sent, resumed = asyncio.run(main())
    assert [item.change.op for item in sent if isinstance(item, Numbered)] == ["delete", "forget"]
    assert isinstance(resumed, LiveNotice) and resumed.reason == PURGED_REASON


# -- erasure -----------------------------------------------------------------------------------------------------


def test_a_batch_that_erased_something_compacts_when_its_sinks_flush() -> None:
    """The compaction is one of the batch's sinks, flushed with the stores' writes before the offsets are committed
    (tests/test_checkpoint.py); a batch redone after a crash flushes, and so compacts, again."""
    compactions: list[int] = []
    sink = CompactingSink(lambda: compactions.append(1))
    sink.flush()
    assert compactions == []  # nothing erased: nothing to compact
    for erased in (ConversationForgotten("acme", "c1"), TurnRedacted("acme", "c1", "t1")):
        sink.add(erased)
        sink.flush()
    assert len(compactions) == 2
    sink.add(TurnRedacted("acme", "c1", "t2"))
    sink.discard()  # a batch that failed: the one redone compacts
    sink.flush()
    assert len(compactions) == 2


def test_the_control_topics_commands_hold_ids_never_words() -> None:
    assert set(ForgetCommand.model_fields) == {"command", "tenant", "conversation_id", "requested_at"}
    assert set(RedactCommand.model_fields) == {"command", "tenant", "conversation_id", "turn_id", "if_absent",
                                               "requested_at"}
    for command in (ForgetCommand, RedactCommand):
        with pytest.raises(ValueError, match="text"):
            command.model_validate({"tenant": "acme", "conversation_id": "c1", "turn_id": "t1", "text": CANARY})


GOOD_TURN = {"tenant": "acme", "conversation_id": "c1", "turn_id": "t1", "speaker": "Ann", "text": "hello",
             "timestamp": "2024-03-04T09:15:00+00:00"}


@pytest.mark.parametrize("bad", [{"text": f"{CANARY}\u0000"}, {"speaker": CANARY * 20}, {"speaker": f"{CANARY}\u200b"},
                                 {"timestamp": CANARY}, {"turn_id": f"{CANARY} 1"}, {"text": CANARY * 2000}])
def test_a_dead_letters_reason_names_the_field_and_the_rule_not_the_value(bad: dict[str, str]) -> None:
    record = RawRecord(topic="turns", partition=0, offset=1, key=b"acme/c1",
                       value=json.dumps({**GOOD_TURN, **bad}).encode())
    letter = decode_turns_record(record)
    [field] = bad
    assert letter.reason.startswith(f"field '{field}'"), letter.reason  # type: ignore[union-attr]
    assert CANARY not in letter.reason, letter.reason  # type: ignore[union-attr]


def test_the_embedded_falkordb_keeps_no_query_telemetry_and_writes_uncompressed_snapshots(
        embedded_falkordb: Any) -> None:  # noqa: ANN401
    client = embedded_falkordb.redis_client()
    assert client.execute_command("GRAPH.CONFIG", "GET", "CMD_INFO")[1] in (0, b"0", "no", b"no")
    assert client.config_get("rdbcompression") == {"rdbcompression": "no"}


# -- what is printed -----------------------------------------------------------------------------------------------


def test_console_log_lines_show_control_characters_as_escapes() -> None:
    # The event and a value without spaces: structlog's console renderer would print both as they are.
    script = textwrap.dedent("""
        import structlog
        from compassmem.core.logging_setup import configure_logging

        configure_logging("INFO", "console")
        structlog.get_logger("probe").warning("refused\\x1b[2J", path="a\\x1b]0;title\\x07b\\u202ec")
    """)
    logged = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    assert not {"\x1b", "\x07", "\u202e"} & set(logged.stderr), logged.stderr
    assert "refused\\x1b[2J" in logged.stderr and "a\\x1b]0;title\\x07b\\u202ec" in logged.stderr, logged.stderr


def test_stopping_the_dev_broker_erases_what_it_held(tmp_path: Any) -> None:  # noqa: ANN401
    from kafka import KafkaProducer

    from compassmem.streams.broker import DevBroker, free_port
    from compassmem.streams.topics import TopicSpec, admin_client, ensure_topics

    port = free_port()
    with DevBroker(port=port, log_path=tmp_path / "first.log") as first:
        ensure_topics(first.bootstrap, [TopicSpec("compassmem.turns", 1)])
        producer = KafkaProducer(bootstrap_servers=first.bootstrap)
        producer.send("compassmem.turns", CANARY.encode()).get(30)
        producer.close()
    with DevBroker(port=port, log_path=tmp_path / "second.log") as second:  # the same address, started again
        admin = admin_client(second.bootstrap)
        try:
            assert "compassmem.turns" not in admin.list_topics()
        finally:
            admin.close()
