"""``compassmem mcp``: memory as tools for an MCP-capable agent, on the official MCP Python SDK.

Tools: ``remember`` (add turns), ``recall`` (a question answered with its evidence turns and events),
``list_conversations``, ``forget`` (a conversation) and ``redact_turn`` (one turn). Over stdio by default (the agent
starts the process); with ``--port`` over streamable HTTP at ``http://HOST:PORT/mcp``, bound to 127.0.0.1 unless
``--host`` says otherwise.
Every tool works on one ``Memory`` that the process opens at start, so a data directory that another process holds
fails before the agent connects, with the store's own message. A refused argument or a missing conversation is a
tool error with the reason (``is_error``), for the model to read and correct; the server keeps running.

Which tenant a tool acts for (``TenantChoice``): over HTTP with ``COMPASSMEM_API_KEYS`` every request needs a key
(the SDK's bearer authentication answers 401 without a valid one) and the tools act for the key's tenant; naming
another is refused by the HTTP API's own key check (``TenantKeys``). Without keys, ``COMPASSMEM_MCP_TENANT`` pins one
tenant; without either, the ``tenant`` argument chooses (the server must then be on loopback, or started with
``--insecure-no-auth``). Over HTTP the SDK also refuses a Host or Origin that is not this server's (DNS rebinding)
and a body over ``COMPASSMEM_API_MAX_BODY_BYTES``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from functools import wraps
from typing import Annotated, ParamSpec, TypeVar

import structlog
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import BaseModel, Field, StrictBool, ValidationError

from compassmem import __version__
from compassmem.core.api_keys import TenantKeys
from compassmem.core.chat_messages import TurnFiller
from compassmem.core.config import ENV_PREFIX, Settings
from compassmem.core.contracts.query import (
    AGENT_MIN_RELEVANCE,
    EvidenceItem,
    QueryExplanation,
    QueryRequest,
    QueryResponse,
    TurnOut,
)
from compassmem.core.contracts.limits import (
    MAX_TURNS_PER_REQUEST,
    BudgetTurns,
    CursorText,
    MetadataFilter,
    PageSize,
    Question,
    ScopeIds,
    SearchText,
    TimeBound,
)
from compassmem.core.contracts.records import ConversationPage, DeleteResult, RedactResult
from compassmem.core.errors import CompassmemError, Forbidden, field_rules
from compassmem.system.loopback import LOOPBACK_NAME, is_loopback_host
from compassmem.library.memory import Memory
from compassmem.core.models import DEFAULT_TENANT, Turn

log = structlog.get_logger(__name__)

P = ParamSpec("P")
R = TypeVar("R")

INSTRUCTIONS = (
    "Long-term memory of conversations. Call remember with the turns of a conversation as they happen (whole "
    "exchanges at a time), recall to answer a question from memory with the exact turns that support it, "
    "list_conversations to see what is remembered, forget to delete a conversation, redact_turn to delete one "
    "turn (its words leave memory; the rest of the conversation stays)."
)


class NewTurn(BaseModel):
    """A turn to remember; ids and times the agent does not have are filled in."""

    speaker: str = Field(description="Who said it, e.g. 'user' or a name.")
    text: str = Field(description="What was said.")
    timestamp: datetime | None = Field(
        default=None, description="When it was said, ISO 8601 with a UTC offset; default: now (turns without one "
                                  "a millisecond apart, in the order given).")
    turn_id: str | None = Field(
        default=None, description="Unique within the conversation. Default: derived from the speaker, the text, the "
                                  "timestamp when given and how often the same words came earlier in the call, so "
                                  "sending the same turns again adds nothing; give timestamps or ids to keep the "
                                  "same words said in a later call apart.")
    session_id: str | None = Field(default=None, description="Optional session the turn belongs to.")


class Remembered(BaseModel):
    conversation_id: str
    turn_ids: list[str] = Field(description="The ids the turns are stored under, in the order given.")


class RecalledTurn(BaseModel):
    conversation_id: str
    turn_id: str
    event_id: str = Field(description="The event (a stretch of conversation on one topic) the turn belongs to.")
    speaker: str
    text: str
    timestamp: datetime
    relevance: float | None = Field(description=TurnOut.model_fields["relevance"].description)


class RecalledEvent(BaseModel):
    conversation_id: str
    event_id: str
    score: float
    relevance: float | None = Field(description=EvidenceItem.model_fields["relevance"].description)
    turn_ids: list[str]
    path: list[str] = Field(description="Relations walked to reach the event from a search hit, e.g. 'causal' or "
                                        "'temporal/before'; empty when search found it directly.")


class Recall(BaseModel):
    answer: str | None = Field(description="An LLM's answer from the evidence when one is configured, else null.")
    answerable: bool = Field(description=QueryResponse.model_fields["answerable"].description)
    answerable_probability: float = Field(description=QueryResponse.model_fields["answerable_probability"].description)
    turns: list[RecalledTurn] = Field(description="The evidence turns, best first, each at least min_relevance.")
    events: list[RecalledEvent] = Field(description="The events holding them, in order of their best turn.")
    explanation: QueryExplanation | None = Field(
        default=None, exclude_if=lambda value: value is None,
        description="Only with explain=true: why each turn ranks where it does (the channels that found it, each "
                    "ranking feature's contribution to its score, its event's path) and what the question was taken "
                    "to ask, as POST /v1/query gives it.")

    @classmethod
    def of(cls, response: QueryResponse) -> Recall:
        turns = [RecalledTurn(conversation_id=turn.conversation_id, turn_id=turn.turn_id, event_id=item.event_id,
                              speaker=turn.speaker, text=turn.text, timestamp=turn.timestamp,
                              relevance=turn.relevance)
                 for turn, item in response.ranked_turns()]
        events = [RecalledEvent(conversation_id=item.conversation_id, event_id=item.event_id, score=item.score,
                                relevance=item.relevance, turn_ids=[turn.turn_id for turn in item.turns],
                                path=[step.type + (f"/{step.subtype}" if step.subtype else "") for step in item.path])
                  for item in response.evidence]
        return cls(answer=response.answer, answerable=response.answerable,
                   answerable_probability=response.answerable_probability, turns=turns, events=events,
                   explanation=response.explanation)


def _as_tool_errors(function: Callable[P, R]) -> Callable[P, R]:
    """What the caller can correct (a rule an argument breaks, no such memory) reaches the model as the tool's
    error text; the SDK would otherwise report only 'Error executing tool' for anything but a ToolError."""

    @wraps(function)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return function(*args, **kwargs)
        except ValidationError as error:
            raise ToolError(field_rules(error)) from error
        except (CompassmemError, ValueError) as error:
            raise ToolError(str(error)) from error

    return call


def new_turns(conversation_id: str, turns: Sequence[NewTurn], tenant: str, subject_id: str | None,
              now: datetime) -> list[Turn]:
    """The turns to remember, ids and times filled in as for chat messages (``core/chat_messages.py``)."""
    filler = TurnFiller(now)
    return [filler.turn(tenant=tenant, conversation_id=conversation_id, turn_id=turn.turn_id, speaker=turn.speaker,
                        text=turn.text, timestamp=turn.timestamp, session_id=turn.session_id, subject_id=subject_id)
            for turn in turns]


class McpStartupError(RuntimeError):
    """The MCP server will not start with these settings; the message says why and what to change."""


class TenantKeyVerifier:
    """The SDK's ``TokenVerifier`` over the API's keys: a bearer token is valid when it is a tenant's key (of the
    pinned tenant, when one is), and the access token it yields names that tenant as its client."""

    def __init__(self, keys: TenantKeys, pinned: str | None) -> None:
        self._keys = keys
        self._pinned = pinned

    async def verify_token(self, token: str) -> AccessToken | None:
        tenant = self._keys.owner(token)
        if tenant is None or self._pinned not in (None, tenant):
            return None
        return AccessToken(token=token, client_id=tenant, scopes=[])


class TenantChoice:
    """The tenant a tool call acts for, from the ``tenant`` argument it names (None: not named)."""

    def __init__(self, keys: TenantKeys, pinned: str | None) -> None:
        self._keys = keys
        self._pinned = pinned

    def __call__(self, named: str | None) -> str:
        token = get_access_token()
        if token is not None:
            # Over HTTP with keys: the key's tenant, and the API's own check refuses any other named.
            tenant = named or token.client_id
            self._keys.check(tenant, token.token)
            return tenant
        if self._pinned is not None:
            if named not in (None, self._pinned):
                raise Forbidden(f"this server acts for tenant {self._pinned!r} only ({ENV_PREFIX}MCP_TENANT), not "
                                f"tenant {named!r}")
            return self._pinned
        return named or DEFAULT_TENANT


TenantArgument = Annotated[str | None, Field(
    description="The tenant whose memory to use; default: the server's (that of the API key, or the pinned one, "
                "else 'default'). Naming another tenant than the key's or the pinned one is refused.")]
ExplainArgument = Annotated[StrictBool, Field(
    description="Also return `explanation`: per turn the channels that found it with its rank and score in each, "
                "each ranking feature's contribution to its score and its event's relation path; for the question "
                "its subgoals, shape, time spans and what it asks for.")]
# The query body's own rules and descriptions (QueryRequest), so the tool and POST /v1/query cannot differ.
TimeFromArgument = Annotated[TimeBound | None, Field(description=QueryRequest.model_fields["time_from"].description)]
TimeToArgument = Annotated[TimeBound | None, Field(description=QueryRequest.model_fields["time_to"].description)]
MetadataArgument = Annotated[MetadataFilter | None, Field(description=QueryRequest.model_fields["metadata"].description)]
# The query body's bounds, and a default of its own: an agent acts on what it is given, so a turn that is likely not
# evidence is left out (an empty answer rather than junk); 0 gives every ranked turn, as POST /v1/query does.
MinRelevanceArgument = Annotated[float, Field(
    ge=0.0, le=1.0, allow_inf_nan=False,
    description=f"{QueryRequest.model_fields['min_relevance'].description} Here the default is "
                f"{AGENT_MIN_RELEVANCE}, not POST /v1/query's 0: an agent gets an empty result rather than turns "
                "that are likely junk; give 0 for every ranked turn. answerable and answerable_probability say "
                "whether memory likely holds an answer at all.")]
TurnsArgument = Annotated[list[NewTurn], Field(
    max_length=MAX_TURNS_PER_REQUEST, description=f"The turns, in order; at most {MAX_TURNS_PER_REQUEST} per call.")]


def build_server(memory: Memory, http_url: str | None = None) -> MCPServer:
    """The tools over ``memory``; ``http_url`` when served over HTTP there, where configured API keys are
    required."""
    settings = memory.settings
    # Required for every tenant: an MCP client holds one key, so no tenant is open to a caller without one.
    keys = TenantKeys(settings.api_keys, required=True)
    keyed = http_url is not None and bool(keys)
    server: MCPServer = MCPServer(
        "compassmem", version=__version__, instructions=INSTRUCTIONS,
        token_verifier=TenantKeyVerifier(keys, settings.mcp_tenant) if keyed else None,
        # The SDK asks for an issuer with any verifier; with static keys it serves no OAuth route that names it.
        auth=AuthSettings(issuer_url=http_url, resource_server_url=None) if keyed else None)
    tenant_of = TenantChoice(keys, settings.mcp_tenant)

    @server.tool(description="Remember turns of a conversation (build memory from them). Send whole exchanges.")
    @_as_tool_errors
    def remember(conversation_id: str, turns: TurnsArgument, tenant: TenantArgument = None,
                 subject_id: str | None = None) -> Remembered:
        stored = new_turns(conversation_id, turns, tenant_of(tenant), subject_id, datetime.now(UTC))
        if not stored:
            raise ToolError("give at least one turn")
        memory.add(stored)
        # The id as stored (NFKC): the one the other tools and every listing show.
        return Remembered(conversation_id=stored[0].conversation_id, turn_ids=[t.turn_id for t in stored])

    @server.tool(description="Answer a question from memory with evidence: the supporting turns (speaker, text, "
                             "time) and the events holding them. Give exactly one scope: conversation_id, "
                             "conversation_ids, subject_id or all_conversations=true. explain=true adds why each "
                             "turn was found and ranked where it is; time_from/time_to and metadata keep only the "
                             "turns said then (or in an event naming a time then) and carrying those metadata "
                             "values. Each turn has a relevance (the calibrated probability that it is evidence); "
                             f"turns below min_relevance (default {AGENT_MIN_RELEVANCE}) are left out. answerable "
                             "(with answerable_probability) is false when memory likely holds no answer, e.g. for "
                             "something never said: then say you do not know rather than use the turns.")
    @_as_tool_errors
    def recall(question: Question, conversation_id: str | None = None, conversation_ids: ScopeIds | None = None,
               subject_id: str | None = None, all_conversations: bool = False, tenant: TenantArgument = None,
               budget_turns: BudgetTurns = 10, explain: ExplainArgument = False,
               time_from: TimeFromArgument = None, time_to: TimeToArgument = None,
               metadata: MetadataArgument = None,
               min_relevance: MinRelevanceArgument = AGENT_MIN_RELEVANCE) -> Recall:
        response = memory.query(question, conversation_id=conversation_id, conversation_ids=conversation_ids,
                                subject_id=subject_id, all_conversations=all_conversations or None,
                                tenant=tenant_of(tenant),
                                budget_turns=budget_turns, explain=explain or None, time_from=time_from,
                                time_to=time_to, metadata=metadata, min_relevance=min_relevance,
                                deadline_s=memory.settings.api_query_deadline_s)
        return Recall.of(response)

    @server.tool(description="List the remembered conversations, most recently updated first, with their event "
                             "and turn counts, participants and time span. query filters by conversation id, "
                             "subject, participant or event summary; pass next_cursor back as cursor for more.")
    @_as_tool_errors
    def list_conversations(tenant: TenantArgument = None, query: SearchText | None = None, limit: PageSize = 20,
                           cursor: CursorText | None = None) -> ConversationPage:
        return memory.conversations(tenant=tenant_of(tenant), query=query, limit=limit, cursor=cursor)

    @server.tool(description="Forget (delete) a conversation's memory.")
    @_as_tool_errors
    def forget(conversation_id: str, tenant: TenantArgument = None) -> DeleteResult:
        return memory.forget(conversation_id, tenant=tenant_of(tenant))

    @server.tool(description="Delete one turn from memory (e.g. something the user asked to be forgotten): its words "
                             "leave the event that held it, which is rebuilt from its other turns, and the relations "
                             "that quoted them; the turn ids are those remember returned.")
    @_as_tool_errors
    def redact_turn(conversation_id: str, turn_id: str, tenant: TenantArgument = None) -> RedactResult:
        return memory.redact_turn(conversation_id, turn_id, tenant=tenant_of(tenant))

    return server


def check_exposure(settings: Settings, host: str, insecure_no_auth: bool) -> None:
    """Refuse to serve HTTP open to every tenant on an address other machines reach, unless told to."""
    if settings.api_keys or is_loopback_host(host) or insecure_no_auth:
        return
    raise McpStartupError(
        f"compassmem mcp on {host} (not loopback) with no API keys would let anyone who reaches it read and delete "
        f"every tenant's memory: set {ENV_PREFIX}API_KEYS (clients then send 'Authorization: Bearer <key>'), bind "
        "127.0.0.1, or pass --insecure-no-auth to serve it open anyway (e.g. behind a proxy that authenticates)")


def transport_security(settings: Settings, host: str, port: int) -> TransportSecuritySettings:
    """DNS-rebinding protection on any host: the Host header must be this server's host:port, or a loopback name or
    one of ``mcp_allowed_hosts`` with any port or none, and an Origin (sent by browsers) one of those over http or
    https."""
    names = [_bracketed(name) for name in ("127.0.0.1", LOOPBACK_NAME, "::1", *settings.mcp_allowed_hosts)]
    hosts = [f"{_bracketed(host)}:{port}", *names, *(f"{name}:*" for name in names)]
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts,
                                     allowed_origins=[f"{scheme}://{name}" for name in hosts
                                                      for scheme in ("http", "https")])


def _bracketed(host: str) -> str:
    """An address as a Host header writes it: an IPv6 one in brackets."""
    return f"[{host}]" if ":" in host else host


def run_mcp(memory: Memory, host: str, port: int | None) -> None:
    """Serve until the client closes stdin (stdio) or the process is interrupted (HTTP)."""
    settings = memory.settings
    if port is None:
        build_server(memory).run("stdio")
        return
    url = f"http://{_bracketed(host)}:{port}"
    server = build_server(memory, http_url=url)
    log.info("mcp.listening", url=f"{url}/mcp", api_keys=bool(settings.api_keys), tenant=settings.mcp_tenant)
    if not settings.api_keys and not is_loopback_host(host):
        log.warning("mcp.no_auth", host=host, effect="every tenant's memory is open to whoever reaches this port",
                    fix=f"set {ENV_PREFIX}API_KEYS")
    server.run("streamable-http", host=host, port=port, max_request_body_size=settings.api_max_body_bytes,
               transport_security=transport_security(settings, host, port))
