"""Readers for conversation files: LoCoMo JSON and the plain JSONL turn format.

JSONL format: one JSON object per line, exactly the Turn message schema (the same one Kafka producers and
``POST /v1/turns`` use): ``{"tenant": "default", "conversation_id": "c1", "turn_id": "D1:1",
"speaker": "Ann", "text": "...", "timestamp": "2023-05-08T13:56:00+00:00", "session_id": "1",
"subject_id": "customer-42", "attachments": [{"kind": "image", "caption": "a dog"}], "metadata": {}}``, or a chat
message: ``{"conversation_id": "c1", "role": "user", "content": "..."}``, its speaker, id and time filled in by the
rules of ``core/chat_messages.py`` (ids derived from the file's content, so ingesting it again adds nothing). Blank
lines are skipped.

LoCoMo: conversation_id = sample_id, turn_id = dia_id. LoCoMo gives one date-time per session and no zone:
it is read in ``timezone`` (UTC by default), given to the session's first turn, and each following turn
gets one more second so the order is kept. Only the turns and session dates are read; ``qa`` and the
annotation fields (observation, session_summary, event_summary) are never touched. LoCoMo has no subject: an
optional ``subject_id`` (the customer, user or account the conversations are about) is stamped on every turn.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar
from zoneinfo import ZoneInfo

from pydantic import BaseModel, ValidationError

from compassmem.core.chat_messages import TurnFiller
from compassmem.core.models import DEFAULT_TENANT, MAX_URL_CHARS, Attachment, Turn, check_id
from compassmem.core.line_reading import LineFormatError, json_value, text_lines
from compassmem.write.turn_ids import TurnIdConflict, TurnIds


# The --subject option of the commands that import files (ingest, produce).
SUBJECT_HELP = ("the customer, user or account the conversations are about, stamped on every turn of a LoCoMo "
                "file (JSONL turns carry their own subject_id)")


Record = TypeVar("Record", bound=BaseModel)
Value = TypeVar("Value")


class ImportFormatError(ValueError):
    """A conversation file that cannot be read; the message says where and why."""


def describe_validation_error(error: ValidationError) -> str:
    """One line per broken field: 'field: rule'."""
    parts = []
    for item in error.errors():
        field = ".".join(str(p) for p in item["loc"]) or "(record)"
        parts.append(f"field '{field}': {item['msg']}")
    return "; ".join(parts)


def _once_per_id(numbered: Iterable[tuple[int, Turn]], where: str, unit: str) -> Iterator[Turn]:
    """Each turn id of a conversation once (``write/turn_ids.py``): the same turn again is skipped, another turn under
    an id given before is refused, naming both places (``unit`` and its number: a line, a turn of the file)."""
    ids = TurnIds(where=lambda number: f"{unit} {number}")
    for number, turn in numbered:
        try:
            if ids.check(turn, number):
                yield turn
        except TurnIdConflict as conflict:
            raise ImportFormatError(f"{where}: {unit} {number}: {conflict}") from None


def read_jsonl_turns(path: Path) -> Iterator[Turn]:
    return _once_per_id(_numbered_jsonl_turns(path), str(path), "line")


def _numbered_jsonl_turns(path: Path) -> Iterator[tuple[int, Turn]]:
    return _numbered_jsonl_values(path, TurnFiller(datetime.now(UTC)).read)


def numbered_jsonl_records(path: Path, model: type[Record]) -> Iterator[tuple[int, Record]]:
    """Each non-blank line of a JSONL file as a ``model``, with its line number; ImportFormatError naming the line
    (and the broken fields) at the first line that is not one (``compassmem eval`` reads its questions so too). Lines
    are read as ``compassmem import`` reads them: UTF-8, at most ``MAX_LINE_CHARS`` characters, never read whole past
    that."""
    return _numbered_jsonl_values(path, model.model_validate)


def _numbered_jsonl_values(path: Path, read: Callable[[dict[str, Any]], Value]) -> Iterator[tuple[int, Value]]:
    for line_number, line in _text_lines(path):
        if not line.strip():
            continue
        try:
            record = json_value(line)
        except json.JSONDecodeError as error:
            raise ImportFormatError(f"{path}: line {line_number}: not valid JSON: {error.msg}") from error
        if not isinstance(record, dict):
            raise ImportFormatError(f"{path}: line {line_number}: expected a JSON object, got {type(record).__name__}")
        try:
            yield line_number, read(record)
        except ValidationError as error:
            raise ImportFormatError(f"{path}: line {line_number}: {describe_validation_error(error)}") from error


def _text_lines(path: Path) -> Iterator[tuple[int, str]]:
    with path.open("r", encoding="utf-8") as handle:
        try:
            yield from text_lines(handle)
        except LineFormatError as error:  # a line too long, or not UTF-8: the same words, naming the file
            raise ImportFormatError(f"{path}: {error}") from None


_LOCOMO_DATE = re.compile(r"^\s*(\d{1,2}):(\d{2})\s*([ap]m)\s+on\s+(\d{1,2})\s+([A-Za-z]+),?\s+(\d{4})\s*$", re.I)
_SESSION_KEY = re.compile(r"^session_(\d+)$")


def parse_locomo_datetime(value: str, zone: ZoneInfo) -> datetime:
    """'1:56 pm on 8 May, 2023' -> an aware datetime in ``zone``."""
    match = _LOCOMO_DATE.match(value)
    if not match:
        raise ValueError(f"unrecognised session date_time {value!r} (expected e.g. '1:56 pm on 8 May, 2023')")
    hour, minute, meridiem, day, month, year = match.groups()
    parsed = datetime.strptime(f"{day} {month[:3].title()} {year}", "%d %b %Y")
    hour_24 = int(hour) % 12 + (12 if meridiem.lower() == "pm" else 0)
    return parsed.replace(hour=hour_24, minute=int(minute), tzinfo=zone)


def _first_url(value: Any) -> str | None:
    """The attachment's link, if it is one: an inline ``data:`` URL is the image itself, not where it lives (some
    LoCoMo turns carry hundreds of KB of base64 there), and only the caption is memory."""
    url = str(value[0]) if isinstance(value, list) and value else str(value) if value and not isinstance(value, list) \
        else None
    if url is None or url.startswith("data:") or len(url) > MAX_URL_CHARS:
        return None
    return url


def _locomo_sample_turns(sample: dict[str, Any], zone: ZoneInfo, tenant: str, subject_id: str | None,
                         where: str) -> Iterator[Turn]:
    sample_id = sample.get("sample_id")
    conversation = sample.get("conversation")
    if not isinstance(sample_id, str) or not isinstance(conversation, dict):
        raise ImportFormatError(f"{where}: needs a string 'sample_id' and a 'conversation' object")
    sessions = sorted(
        (int(m.group(1)), key) for key in conversation if (m := _SESSION_KEY.match(key))
    )
    for number, key in sessions:
        turns = conversation[key]
        if not isinstance(turns, list) or not turns:
            continue
        session_where = f"{where} ({sample_id}) {key}"
        try:
            started = parse_locomo_datetime(str(conversation.get(f"{key}_date_time", "")), zone)
        except ValueError as error:
            raise ImportFormatError(f"{session_where}: {error}") from error
        for offset, raw in enumerate(turns):
            if not isinstance(raw, dict):
                raise ImportFormatError(f"{session_where} turn {offset}: expected an object")
            caption = raw.get("blip_caption")
            attachments = [Attachment(kind="image", caption=caption, url=_first_url(raw.get("img_url")))] if caption else []
            try:
                yield Turn(
                    tenant=tenant,
                    conversation_id=sample_id,
                    turn_id=raw.get("dia_id"),
                    speaker=raw.get("speaker"),
                    text=raw.get("text"),
                    timestamp=started + timedelta(seconds=offset),
                    session_id=str(number),
                    subject_id=subject_id,
                    attachments=attachments,
                )
            except ValidationError as error:
                raise ImportFormatError(
                    f"{session_where} turn {offset} ({raw.get('dia_id')}): {describe_validation_error(error)}"
                ) from error


def check_subject(subject_id: str | None) -> str | None:
    """A subject id given for a whole import, checked once: the rules of ``Turn.subject_id``."""
    if subject_id is None:
        return None
    try:
        return check_id(subject_id)
    except ValueError as error:
        raise ImportFormatError(f"subject id {subject_id!r}: {error}") from None


def read_locomo_turns(path: Path, timezone: str = "UTC", tenant: str = DEFAULT_TENANT,
                      subject_id: str | None = None) -> Iterator[Turn]:
    """LoCoMo turns; ``subject_id``, when given, is stamped on every turn."""
    subject_id = check_subject(subject_id)
    try:
        samples = json_value(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ImportFormatError(f"{path}: line {error.lineno}: not valid JSON: {error.msg}") from error
    if isinstance(samples, dict):
        samples = [samples]
    if not isinstance(samples, list):
        raise ImportFormatError(f"{path}: expected a list of LoCoMo samples")
    zone = ZoneInfo(timezone)
    return _once_per_id(enumerate(_locomo_turns(path, samples, zone, tenant, subject_id), start=1), str(path), "turn")


def _locomo_turns(path: Path, samples: list[Any], zone: ZoneInfo, tenant: str,
                  subject_id: str | None) -> Iterator[Turn]:
    for index, sample in enumerate(samples):
        if not isinstance(sample, dict):
            raise ImportFormatError(f"{path}: sample {index}: expected an object")
        yield from _locomo_sample_turns(sample, zone, tenant, subject_id, f"{path}: sample {index}")


def read_turns(path: Path, timezone: str = "UTC", tenant: str = DEFAULT_TENANT,
               subject_id: str | None = None) -> Iterator[Turn]:
    """Turns from a file, by format: ``.jsonl``/``.ndjson`` is the JSONL turn format, anything else LoCoMo JSON.

    ``tenant`` and ``subject_id`` apply to LoCoMo files; a JSONL line carries its own. A ``subject_id`` given
    with a JSONL file is refused rather than ignored: it would not reach the turns.
    """
    if not path.exists():
        raise ImportFormatError(f"{path}: no such file")
    if path.suffix.lower() in {".jsonl", ".ndjson"}:
        if subject_id is not None:
            raise ImportFormatError(f"{path}: a subject id is stamped only on LoCoMo imports; in a JSONL file each "
                                    "line carries its own optional 'subject_id'")
        return read_jsonl_turns(path)
    return read_locomo_turns(path, timezone=timezone, tenant=tenant, subject_id=subject_id)
