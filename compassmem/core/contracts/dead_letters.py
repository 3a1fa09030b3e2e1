"""The dead-letter topic's record: a turns-topic record the worker could not use, with the stage and reason.

The worker writes them (``compassmem/streams/``), the metrics count them by reason (``compassmem/monitoring/``).
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, Field

from compassmem.core.models import utc_now


class DeadLetterStage(StrEnum):
    DECODE = "decode"  # not UTF-8, not JSON, not a JSON object, an unknown control header
    VALIDATE = "validate"  # a JSON object that breaks the message schema (the reason names the field)
    ROUTE = "route"  # a valid turn on the wrong key or partition (its order could not be guaranteed), of a
    # redacted turn id, or under an id its conversation has for another turn
    PROCESS = "process"  # the processors raised on this turn; its conversation goes on without it
    CONTROL = "control"  # a malformed control-topic command, or a redaction of a turn no store holds
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
    UNKNOWN_TURN = "unknown_turn"  # a redaction of a turn the stores do not hold: refused, nothing blocked
    UNKNOWN_CONVERSATION = "unknown_conversation"  # a redaction of a conversation with no memory at all
    REDACTED_TURN = "redacted_turn"  # a turn whose id was redacted before it came: dropped
    DUPLICATE_TURN = "duplicate_turn"  # a turn under an id its conversation has for another turn: refused


class DeadLetter(BaseModel):
    """A record the worker could not use, kept byte for byte so it can be inspected, fixed and replayed; but for a
    turn dropped because its id was redacted, whose words are not copied here (``original_base64`` empty)."""

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
