"""Message schemas of the streaming topics other than the turns themselves (a turn is ``models.Turn``).

- control topic: ``ForgetCommand`` (the query API's DELETE and ``compassmem forget`` write it) and
  ``RedactCommand`` (DELETE of one turn, ``compassmem redact``).
- turns topic, besides turns: ``ForgetMarker``, ``RedactMarker`` and ``IdleCloseMarker``, written by the worker
  itself and told apart by the ``compassmem-control`` header. They sit in the log at the position where they took
  effect, so a replay of the turns topic reproduces forgets, redactions and idle closes exactly ("forgets are
  tombstones in the log").
- dead-letter topic: ``DeadLetter``.
- change feeds (events / relations / clusters topics): ``EventChange``, ``RelationChange``, ``ClusterChange``,
  published after the stores were written, for consumers that keep caches current (e.g. a navigation view).
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator

from compassmem.models import TENANT_PATTERN, Cluster, Event, Relation, check_id, partition_key

CONTROL_HEADER = "compassmem-control"


class ControlKind(StrEnum):
    FORGET = "forget"
    REDACT = "redact"
    IDLE_CLOSE = "idle-close"
    # On the control topic, after a command's markers are in the turns log (see ``ForgetDone``).
    FORGET_DONE = "forget-done"


def utc_now() -> datetime:
    return datetime.now(UTC)


class ForgetCommand(BaseModel):
    """Forget one conversation, or a whole tenant when ``conversation_id`` is None.

    The same JSON as the query API's ``turn_publisher.ForgetCommand``: ``{"command": "forget", "tenant": ...,
    "conversation_id": ... or null, "requested_at": ISO 8601}``; key it by ``tenant/conversation_id`` (or the
    tenant). A forget removes what the turns topic held for the conversation up to the moment the worker applies
    it, from both stores and from the worker's tables; turns produced after it start a new memory.
    """

    model_config = ConfigDict(extra="forbid")

    command: Literal["forget"] = "forget"
    tenant: str = Field(pattern=TENANT_PATTERN)
    conversation_id: str | None = None
    requested_at: datetime = Field(default_factory=utc_now)

    @model_validator(mode="after")
    def _ids(self) -> ForgetCommand:
        if self.conversation_id is not None:
            check_id(self.conversation_id)
        return self

    @property
    def key(self) -> str:
        return partition_key(self.tenant, self.conversation_id) if self.conversation_id else self.tenant

    def covers(self, tenant: str, conversation_id: str) -> bool:
        return tenant == self.tenant and self.conversation_id in (None, conversation_id)


class ForgetMarker(BaseModel):
    """A forget, copied by the worker into every partition of the turns topic (the control agent of ``app.py``)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["forget"] = "forget"
    forget: ForgetCommand
    # Where the command came from, so a duplicate broadcast (a redelivered command) is recognisable in the log.
    source_partition: int
    source_offset: int


class RedactCommand(BaseModel):
    """Redact one turn: its point leaves the vector store and its event is rebuilt from the other turns.

    ``{"command": "redact", "tenant": ..., "conversation_id": ..., "turn_id": ..., "requested_at": ...}``, keyed
    like the conversation's turns. Its marker in the turns log takes the turn out of the worker's state where it
    took effect, and the conversation's table record keeps the turn id, so the turn is dropped if it comes again.
    """

    model_config = ConfigDict(extra="forbid")

    command: Literal["redact"] = "redact"
    tenant: str = Field(pattern=TENANT_PATTERN)
    conversation_id: str
    turn_id: str
    requested_at: datetime = Field(default_factory=utc_now)

    @model_validator(mode="after")
    def _ids(self) -> RedactCommand:
        check_id(self.conversation_id)
        check_id(self.turn_id)
        return self

    @property
    def key(self) -> str:
        return partition_key(self.tenant, self.conversation_id)


ControlCommand = Annotated[ForgetCommand | RedactCommand, Field(discriminator="command")]
CONTROL_COMMAND: TypeAdapter[ForgetCommand | RedactCommand] = TypeAdapter(ControlCommand)


class RedactMarker(BaseModel):
    """A redaction, copied by the worker into every partition of the turns topic (as a ``ForgetMarker`` is)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["redact"] = "redact"
    redact: RedactCommand
    source_partition: int
    source_offset: int


class ForgetDone(BaseModel):
    """Written to the control topic once a command's (a forget's or a redaction's) markers are in every turns
    partition.

    A worker reading the control topic again (another app id, a reset consumer group) skips a command that has a
    ``ForgetDone``: its markers already sit in the turns log at the position where it took effect, and executing it
    again would delete what was built from turns produced after it.
    """

    model_config = ConfigDict(extra="forbid")

    kind: Literal["forget-done"] = "forget-done"
    source_partition: int
    source_offset: int
    # Turns partition -> offset of this command's marker there.
    markers: dict[int, int] = Field(default_factory=dict)


class IdleCloseMarker(BaseModel):
    """Close the conversation's open segment, if nothing of it arrived after ``after_offset`` (its turns-topic
    position when the idle timer fired); otherwise the marker is stale and changes nothing."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["idle-close"] = "idle-close"
    tenant: str = Field(pattern=TENANT_PATTERN)
    conversation_id: str
    after_offset: int
    idle_s: float

    @property
    def key(self) -> str:
        return partition_key(self.tenant, self.conversation_id)


class DeadLetterStage(StrEnum):
    DECODE = "decode"  # not UTF-8, not JSON, not a JSON object, an unknown control header
    VALIDATE = "validate"  # a JSON object that breaks the message schema (the reason names the field)
    ROUTE = "route"  # a valid turn on the wrong key or partition: its order could not be guaranteed
    PROCESS = "process"  # the processors raised on this turn; its conversation goes on without it
    CONTROL = "control"  # a malformed control-topic command
    STORE = "store"  # a store kept refusing this conversation's writes; the rest of the batch went on


class DeadLetterReason(StrEnum):
    """A short code for each way a record fails: a bounded metrics label (the ``reason`` text has the details)."""

    EMPTY_VALUE = "empty_value"
    NOT_UTF8 = "not_utf8"
    NOT_JSON = "not_json"
    NOT_OBJECT = "not_object"
    UNKNOWN_CONTROL = "unknown_control_header"
    INVALID_FIELDS = "invalid_fields"
    WRONG_KEY = "wrong_key"
    WRONG_PARTITION = "wrong_partition"
    PROCESSING_ERROR = "processing_error"
    STORE_REJECTED = "store_rejected"


class DeadLetter(BaseModel):
    """A record the worker could not use, kept byte for byte so it can be inspected, fixed and replayed."""

    original_base64: str
    original_key_base64: str | None = None
    stage: DeadLetterStage
    reason_code: DeadLetterReason
    reason: str
    topic: str
    partition: int
    offset: int
    message_timestamp: datetime | None = None
    dead_lettered_at: datetime = Field(default_factory=utc_now)


class ChangeOp(StrEnum):
    UPSERT = "upsert"
    DELETE = "delete"
    FORGET = "forget"


class EventChange(BaseModel):
    """An event written to (or deleted from) the stores. ``event`` comes without its embedding."""

    op: ChangeOp
    tenant: str
    conversation_id: str | None = None
    event_id: str | None = None
    event: Event | None = None


class RelationChange(BaseModel):
    op: Literal[ChangeOp.UPSERT] = ChangeOp.UPSERT
    relation: Relation


class ClusterChange(BaseModel):
    op: Literal[ChangeOp.UPSERT] = ChangeOp.UPSERT
    cluster: Cluster
