"""Plain chat messages as turns, and the rules that fill in what a message leaves out.

Wherever a turn is taken (``Memory.add`` and the clients' ``add``, ``POST /v1/turns``, the JSONL files of ``compassmem
ingest`` and ``produce``) a chat message as OpenAI's and LangChain's APIs write one is taken too:
``{"conversation_id": "c1", "role": "user", "content": "..."}``. The MCP tool ``remember`` fills in its turns by the
same rules (``TurnFiller``), documented in docs/getting-started.md#input-formats:

- speaker: ``name`` when given (OpenAI's optional name of the participant), else ``role``; text: ``content``.
- conversation_id: required (there is no default conversation: memory of two chats must not mix unasked).
- timestamp, unless given: when the input is read, one millisecond later for each turn before it, so the order
  holds.
- turn_id, unless given: ``m-`` and 16 hex digits of a hash of the speaker, the text, the timestamp when one was
  given, and how many times before in the input the same speaker said the same text (at that time). The same input
  read again gets the same ids, so a file ingested twice or a chat history sent again whole adds nothing twice
  (``write/turn_ids.py``: the same turn again changes nothing); the same words said again in a later call are that
  same turn unless a timestamp or a turn_id tells them apart.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from compassmem.core.contracts.records import FieldError
from compassmem.core.errors import BadRequest, refused
from compassmem.core.models import DEFAULT_TENANT, Turn

# A provisional id that passes the id rule: replaced by the derived one before the turn leaves ``TurnFiller.turn``.
_PENDING_ID = "pending"


class ChatMessage(BaseModel):
    """A chat message with the conversation it belongs to; its fields are checked by the rules of the turn they make
    (``Turn``), and an error names the message's own field (``role``, ``content``)."""

    model_config = ConfigDict(extra="forbid")

    conversation_id: str = Field(description="The conversation, required: a turn's id rule.")
    role: str = Field(description="Who said it, e.g. user, assistant or system: the turn's speaker unless `name` "
                                  "is given.")
    content: str = Field(description="What was said: the turn's text.")
    name: str | None = Field(default=None, description="The participant's name (OpenAI's optional field): the "
                                                        "turn's speaker when given.")
    tenant: str = Field(default=DEFAULT_TENANT, description="As a turn's.")
    turn_id: str | None = Field(default=None, description="As a turn's; default: derived from the message, the "
                                                          "same for the same input (docs/getting-started.md).")
    # Read by the turn's rule (an ISO 8601 string or a datetime, never a number), so left untyped here.
    timestamp: Any = Field(default=None, json_schema_extra={"anyOf": [{"type": "string", "format": "date-time"},
                                                                      {"type": "null"}]},
                           description="As a turn's (ISO 8601 with a UTC offset); default: when the input is read, "
                                       "a millisecond apart per turn, in order.")
    session_id: str | None = Field(default=None, description="As a turn's.")
    subject_id: str | None = Field(default=None, description="As a turn's.")
    metadata: dict[str, Any] = Field(default_factory=dict, description="As a turn's.")


def is_chat_message(item: Mapping[str, Any]) -> bool:
    """A mapping in the chat message shape (it has a role) rather than the turn schema."""
    return "role" in item


class TurnFiller:
    """Makes the turns of one input (a call, a request, a file) in order, filling in ids and times by the rules above:
    ``now`` is when the input is read."""

    def __init__(self, now: datetime) -> None:
        self._now = now
        self._position = 0
        self._said: Counter[tuple[str, str, str, str, str]] = Counter()

    def read(self, item: Turn | ChatMessage | Mapping[str, Any]) -> Turn:
        """A turn, a chat message or a mapping in either shape, as a turn; ValidationError naming the fields as the
        item names them."""
        if isinstance(item, ChatMessage):
            return self.message(item)
        if isinstance(item, Turn):
            self._position += 1
            return item
        if not is_chat_message(item):
            self._position += 1
            return Turn.model_validate(item)
        return self.message(ChatMessage.model_validate(item))

    def message(self, message: ChatMessage) -> Turn:
        try:
            return self.turn(tenant=message.tenant, conversation_id=message.conversation_id,
                             speaker=message.name if message.name is not None else message.role,
                             text=message.content, turn_id=message.turn_id, timestamp=message.timestamp,
                             session_id=message.session_id, subject_id=message.subject_id, metadata=message.metadata)
        except ValidationError as error:
            raise _as_message_fields(error, message) from None

    def turn(self, *, turn_id: str | None, timestamp: Any, **fields: Any) -> Turn:  # noqa: ANN401 - as Turn takes it
        """A turn from its fields, its id and time filled in when None."""
        position = self._position
        self._position += 1
        timed = timestamp is not None
        turn = Turn(turn_id=_PENDING_ID if turn_id is None else turn_id, timestamp=timestamp if timed else
                    self._now + timedelta(milliseconds=position), **fields)
        if turn_id is not None:
            return turn
        # The turn's own (normalised) values: the same words sent through any surface get the same id.
        when = turn.timestamp.isoformat() if timed else ""
        said = (turn.tenant, turn.conversation_id, turn.speaker, turn.text, when)
        before = self._said[said]
        self._said[said] += 1
        digest = hashlib.sha256("\0".join((turn.speaker, turn.text, when, str(before))).encode("utf-8"))
        return turn.model_copy(update={"turn_id": f"m-{digest.hexdigest()[:16]}"})


def turns_of(items: Sequence[Turn | ChatMessage | Mapping[str, Any]], *, one: bool, now: datetime) -> list[Turn]:
    """The turns of one input read at ``now``, every item checked: BadRequest naming each bad field, under its item's
    place in a list (``[2].timestamp``) unless the input was a single item (``one``)."""
    filler = TurnFiller(now)
    turns: list[Turn] = []
    errors: list[FieldError] = []
    for index, item in enumerate(items):
        try:
            turns.append(filler.read(item))
        except ValidationError as error:
            errors += refused(error.errors(), at=() if one else (index,)).errors
    if errors:
        raise BadRequest("; ".join(f"{e.field}: {e.message}" for e in errors), errors=errors)
    return turns


def _as_message_fields(error: ValidationError, message: ChatMessage) -> ValidationError:
    """The turn's fields renamed to the message's that gave them."""
    renamed = {"speaker": "name" if message.name is not None else "role", "text": "content"}
    return ValidationError.from_exception_data("ChatMessage", [
        {"type": item["type"], "input": item["input"], **({"ctx": item["ctx"]} if "ctx" in item else {}),
         "loc": (renamed.get(str(item["loc"][0]), item["loc"][0]), *item["loc"][1:]) if item["loc"] else ()}
        for item in error.errors()])
