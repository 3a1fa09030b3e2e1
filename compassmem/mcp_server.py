"""``compassmem mcp``: memory as tools for an MCP-capable agent, on the official MCP Python SDK.

Tools: ``remember`` (add turns), ``recall`` (a question answered with its evidence turns and events),
``list_conversations``, ``forget`` (a conversation) and ``redact_turn`` (one turn). Over stdio by default (the agent starts the process); with ``--port`` over
streamable HTTP at ``http://HOST:PORT/mcp``, bound to 127.0.0.1 unless ``--host`` says otherwise.
Every tool works on one ``Memory`` that the process opens at start, so a data directory that another process holds
fails before the agent connects, with the store's own message. A refused argument or a missing conversation is a
tool error with the reason (``is_error``), for the model to read and correct; the server keeps running.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from functools import wraps
from typing import ParamSpec, TypeVar

import structlog
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, Field, ValidationError

from compassmem import __version__
from compassmem.contracts.query import QueryResponse
from compassmem.contracts.records import ConversationPage, DeleteResult, RedactResult
from compassmem.errors import CompassmemError
from compassmem.memory import Memory
from compassmem.models import DEFAULT_TENANT, Turn

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
        default=None, description="Unique within the conversation; give it to make sending a turn twice harmless. "
                                  "Default: a new random id.")
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


class RecalledEvent(BaseModel):
    conversation_id: str
    event_id: str
    score: float
    turn_ids: list[str]
    path: list[str] = Field(description="Relations walked to reach the event from a search hit, e.g. 'causal' or "
                                        "'temporal/before'; empty when search found it directly.")


class Recall(BaseModel):
    answer: str | None = Field(description="An LLM's answer from the evidence when one is configured, else null.")
    turns: list[RecalledTurn] = Field(description="The evidence turns, best first.")
    events: list[RecalledEvent] = Field(description="The events holding them, in order of their best turn.")

    @classmethod
    def of(cls, response: QueryResponse) -> Recall:
        by_key = {(item.conversation_id, turn.turn_id): (item.event_id, turn)
                  for item in response.evidence for turn in item.turns}
        turns = []
        for ref in response.turn_refs:
            event_id, turn = by_key[(ref.conversation_id, ref.turn_id)]
            turns.append(RecalledTurn(conversation_id=turn.conversation_id, turn_id=turn.turn_id, event_id=event_id,
                                      speaker=turn.speaker, text=turn.text, timestamp=turn.timestamp))
        events = [RecalledEvent(conversation_id=item.conversation_id, event_id=item.event_id, score=item.score,
                                turn_ids=[turn.turn_id for turn in item.turns],
                                path=[step.type + (f"/{step.subtype}" if step.subtype else "") for step in item.path])
                  for item in response.evidence]
        return cls(answer=response.answer, turns=turns, events=events)


def _as_tool_errors(function: Callable[P, R]) -> Callable[P, R]:
    """What the caller can correct (a rule an argument breaks, no such memory) reaches the model as the tool's
    error text; the SDK would otherwise report only 'Error executing tool' for anything but a ToolError."""

    @wraps(function)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return function(*args, **kwargs)
        except ValidationError as error:
            raise ToolError(_rules(error)) from error
        except (CompassmemError, ValueError) as error:
            raise ToolError(str(error)) from error

    return call


def _rules(error: ValidationError) -> str:
    """Each broken rule as 'field: rule' (pydantic's own text also repeats the input and a documentation link)."""
    return "; ".join(f"{'.'.join(str(part) for part in item['loc']) or 'arguments'}: "
                     f"{item['msg'].removeprefix('Value error, ')}" for item in error.errors())


def new_turns(conversation_id: str, turns: Sequence[NewTurn], tenant: str, subject_id: str | None,
              now: datetime) -> list[Turn]:
    return [
        Turn(tenant=tenant, conversation_id=conversation_id, turn_id=turn.turn_id or f"t-{uuid.uuid4().hex[:16]}",
             speaker=turn.speaker, text=turn.text,
             timestamp=turn.timestamp or now + timedelta(milliseconds=index), session_id=turn.session_id,
             subject_id=subject_id)
        for index, turn in enumerate(turns)
    ]


def build_server(memory: Memory) -> MCPServer:
    server: MCPServer = MCPServer("compassmem", version=__version__, instructions=INSTRUCTIONS)

    @server.tool(description="Remember turns of a conversation (build memory from them). Send whole exchanges.")
    @_as_tool_errors
    def remember(conversation_id: str, turns: list[NewTurn], tenant: str = DEFAULT_TENANT,
                 subject_id: str | None = None) -> Remembered:
        stored = new_turns(conversation_id, turns, tenant, subject_id, datetime.now(UTC))
        if not stored:
            raise ToolError("give at least one turn")
        memory.add(stored)
        return Remembered(conversation_id=conversation_id, turn_ids=[t.turn_id for t in stored])

    @server.tool(description="Answer a question from memory with evidence: the supporting turns (speaker, text, "
                             "time) and the events holding them. Give exactly one scope: conversation_id, "
                             "conversation_ids, subject_id or all_conversations=true.")
    @_as_tool_errors
    def recall(question: str, conversation_id: str | None = None, conversation_ids: list[str] | None = None,
               subject_id: str | None = None, all_conversations: bool = False, tenant: str = DEFAULT_TENANT,
               budget_turns: int = 10) -> Recall:
        response = memory.query(question, conversation_id=conversation_id, conversation_ids=conversation_ids,
                                subject_id=subject_id, all_conversations=all_conversations or None, tenant=tenant,
                                budget_turns=budget_turns,
                                deadline_s=memory.settings.api_query_deadline_s)
        return Recall.of(response)

    @server.tool(description="List the remembered conversations, most recently updated first, with their event "
                             "and turn counts, participants and time span. query filters by conversation id, "
                             "subject, participant or event summary; pass next_cursor back as cursor for more.")
    @_as_tool_errors
    def list_conversations(tenant: str = DEFAULT_TENANT, query: str | None = None, limit: int = 20,
                           cursor: str | None = None) -> ConversationPage:
        return memory.conversations(tenant=tenant, query=query, limit=limit, cursor=cursor)

    @server.tool(description="Forget (delete) a conversation's memory.")
    @_as_tool_errors
    def forget(conversation_id: str, tenant: str = DEFAULT_TENANT) -> DeleteResult:
        return memory.forget(conversation_id, tenant=tenant)

    @server.tool(description="Delete one turn from memory (e.g. something the user asked to be forgotten): its words "
                             "leave the event that held it, which is rebuilt from its other turns, and the relations "
                             "that quoted them; the turn ids are those remember returned.")
    @_as_tool_errors
    def redact_turn(conversation_id: str, turn_id: str, tenant: str = DEFAULT_TENANT) -> RedactResult:
        return memory.redact_turn(conversation_id, turn_id, tenant=tenant)

    return server


def run_mcp(memory: Memory, host: str, port: int | None) -> None:
    """Serve until the client closes stdin (stdio) or the process is interrupted (HTTP)."""
    server = build_server(memory)
    if port is None:
        server.run("stdio")
        return
    log.info("mcp.listening", url=f"http://{host}:{port}/mcp")
    server.run("streamable-http", host=host, port=port)
