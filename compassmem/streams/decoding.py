"""From raw turns-topic records to what the worker applies: a turn, a control marker, or a dead letter.

Pure functions over bytes, so every malformed-message kind can be checked without a broker. Values are decoded
here rather than by Faust's serializers: a serializer error would stop the stream, and the dead-letter record
must carry the original bytes.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from datetime import UTC, datetime

from pydantic import ValidationError

from compassmem.core.contracts.dead_letters import (
    DeadLetter,
    DeadLetterReason,
    DeadLetterStage,
)
from compassmem.write.importers import describe_validation_error
from compassmem.core.models import Turn
from compassmem.core.contracts.stream_records import (
    CONTROL_HEADER,
    ControlKind,
    ForgetMarker,
    IdleCloseMarker,
    RedactMarker,
    SettingMarker,
)


@dataclass(frozen=True)
class RawRecord:
    """A consumed record, independent of the Kafka client that read it."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()
    timestamp: float | None = None  # seconds since the epoch, as the broker stamped it

    def header(self, name: str) -> bytes | None:
        for key, value in self.headers:
            if key == name:
                return value
        return None

    def dead_letter(self, stage: DeadLetterStage, code: DeadLetterReason, reason: str,
                    keep_value: bool = True) -> DeadLetter:
        """The record as a dead letter; without its value (``keep_value=False``) when that holds words that must
        not be copied: a turn whose id was redacted."""
        return DeadLetter(
            original_base64=base64.b64encode(self.value or b"" if keep_value else b"").decode("ascii"),
            original_key_base64=base64.b64encode(self.key).decode("ascii") if self.key is not None else None,
            stage=stage,
            reason_code=code,
            reason=reason,
            topic=self.topic,
            partition=self.partition,
            offset=self.offset,
            message_timestamp=datetime.fromtimestamp(self.timestamp, UTC) if self.timestamp is not None else None,
        )


@dataclass(frozen=True)
class TurnItem:
    record: RawRecord
    turn: Turn


@dataclass(frozen=True)
class ForgetItem:
    record: RawRecord
    marker: ForgetMarker


@dataclass(frozen=True)
class RedactItem:
    record: RawRecord
    marker: RedactMarker


@dataclass(frozen=True)
class SettingItem:
    record: RawRecord
    marker: SettingMarker


@dataclass(frozen=True)
class IdleCloseItem:
    record: RawRecord
    marker: IdleCloseMarker


Item = TurnItem | ForgetItem | RedactItem | SettingItem | IdleCloseItem
_MARKERS: dict[bytes, type[ForgetMarker] | type[RedactMarker] | type[SettingMarker] | type[IdleCloseMarker]] = {
    ControlKind.FORGET.value.encode(): ForgetMarker,
    ControlKind.REDACT.value.encode(): RedactMarker,
    ControlKind.SETTING.value.encode(): SettingMarker,
    ControlKind.IDLE_CLOSE.value.encode(): IdleCloseMarker,
}


def _json_object(record: RawRecord) -> dict | DeadLetter:
    if record.value is None:
        return record.dead_letter(DeadLetterStage.DECODE, DeadLetterReason.EMPTY_VALUE, "empty value (a null record is not a turn)")
    try:
        text = record.value.decode("utf-8")
    except UnicodeDecodeError as error:
        return record.dead_letter(DeadLetterStage.DECODE, DeadLetterReason.NOT_UTF8, f"value is not UTF-8: {error}")
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        return record.dead_letter(
            DeadLetterStage.DECODE, DeadLetterReason.NOT_JSON, f"value is not JSON: {error.msg} (line {error.lineno}, column {error.colno})"
        )
    except RecursionError:
        # Any producer can send JSON nested deeper than the parser's stack: a dead letter, never a crashed worker.
        return record.dead_letter(DeadLetterStage.DECODE, DeadLetterReason.NOT_JSON,
                                  "value is JSON nested too deeply to parse")
    if not isinstance(value, dict):
        return record.dead_letter(DeadLetterStage.DECODE, DeadLetterReason.NOT_OBJECT, f"value is JSON {type(value).__name__}, not an object")
    return value


def decode_turns_record(record: RawRecord) -> Item | DeadLetter:
    """A record of the turns topic: a turn (no control header) or one of the worker's own markers."""
    control = record.header(CONTROL_HEADER)
    value = _json_object(record)
    if isinstance(value, DeadLetter):
        return value
    model: type[Turn] | type[ForgetMarker] | type[RedactMarker] | type[SettingMarker] | type[IdleCloseMarker]
    if control is None:
        model = Turn
    elif control in _MARKERS:
        model = _MARKERS[control]
    else:
        return record.dead_letter(DeadLetterStage.DECODE, DeadLetterReason.UNKNOWN_CONTROL, f"unknown {CONTROL_HEADER} header {control!r}")
    try:
        parsed = model.model_validate(value)
    except ValidationError as error:
        return record.dead_letter(DeadLetterStage.VALIDATE, DeadLetterReason.INVALID_FIELDS, describe_validation_error(error))
    if isinstance(parsed, ForgetMarker):
        return ForgetItem(record, parsed)
    if isinstance(parsed, RedactMarker):
        return RedactItem(record, parsed)
    if isinstance(parsed, SettingMarker):
        return SettingItem(record, parsed)
    if isinstance(parsed, IdleCloseMarker):
        return IdleCloseItem(record, parsed)
    key = record.key.decode("utf-8", errors="replace") if record.key is not None else None
    if key != parsed.key:
        # The key decides the partition; a turn keyed otherwise may sit in another partition than the rest of its
        # conversation, where nothing keeps it in order. Refuse it rather than build memory from a shuffled stream.
        return record.dead_letter(
            DeadLetterStage.ROUTE, DeadLetterReason.WRONG_KEY,
            f"record key {key!r} is not the turn's tenant/conversation_id {parsed.key!r}; "
            "key every turn by 'tenant/conversation_id' so a conversation stays in one partition, in order",
        )
    return TurnItem(record, parsed)
