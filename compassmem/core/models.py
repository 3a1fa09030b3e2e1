"""Pydantic records shared by every part of compassmem.

One message schema serves Kafka, the JSONL import format and ``POST /v1/turns``,
so validation lives here and every boundary reuses it.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import unicodedata
import uuid
from collections.abc import Mapping
from datetime import UTC, date, datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

TENANT_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,62}$"
DEFAULT_TENANT = "default"
MAX_TEXT_BYTES = 16 * 1024
MAX_SPEAKER_CHARS = 100
MAX_ID_CHARS = 128
# What the stores can hold, and what keeps one turn record far below Kafka's default 1 MB record limit
# (text 16 KiB + metadata 16 KiB + attachments at most ~100 KiB as UTF-8 JSON).
MAX_SESSION_ID_CHARS = 128
MAX_ATTACHMENTS = 16
MAX_ATTACHMENT_KIND_CHARS = 64
MAX_CAPTION_CHARS = 2000
MAX_URL_CHARS = 2048
MAX_METADATA_DEPTH = 8
MAX_METADATA_KEYS = 256
MAX_METADATA_BYTES = 16 * 1024
# A stored turn's text is ``Turn.indexed_text()``: the utterance and a "[shares <caption>]" per attachment.
MAX_INDEXED_TEXT_BYTES = MAX_TEXT_BYTES + MAX_ATTACHMENTS * (len(" [shares ]") + 4 * MAX_CAPTION_CHARS)
INT64_BOUND = 2**63  # integers JSON values may hold: -2**63 to 2**63-1, what the stores keep exactly
_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")

# Free text (turn text, captions, metadata string values) may hold tab, newline and carriage return; names (ids,
# speaker, session id, attachment kind and url, metadata keys) no control character at all. Lone surrogates
# (U+D800-U+DFFF) cannot be encoded as UTF-8, and FalkorDB refuses strings containing U+0000.
_NOT_IN_TEXT = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff]")
_NOT_IN_NAME = re.compile(r"[\x00-\x1f\x7f\ud800-\udfff]")
# The same rules as JSON Schema patterns (ECMA-262 and Python re alike), for schema-driven clients.
TEXT_PATTERN = r"^[^\x00-\x08\x0b\x0c\x0e-\x1f]*\S[^\x00-\x08\x0b\x0c\x0e-\x1f]*$"
NAME_PATTERN = r"^[^\x00-\x1f\x7f]*$"
# Ids are keys in every store, path segments in URLs and labels a person compares by eye, so they come from a small
# ASCII set: nothing a store trims or folds (FalkorDB's string index ignores spaces at either end), nothing invisible,
# nothing from two scripts that look alike. NFKC first, so fullwidth "ｃ１" is the id "c1".
ID_CHARS = "A-Za-z0-9._~:@+=|-"
ID_PATTERN = r"^(?!\.\.?$)[" + ID_CHARS + r"]{1,128}$"
ID_RULE = ("1-128 characters, each an ASCII letter or digit or one of . _ ~ : @ + = | - (no space, no '/', nothing "
           "invisible or from another script), other than '.' and '..'; fullwidth and other compatibility forms are "
           "read as their plain letters (NFKC) first, so 'ｃ１' is the id 'c1'")
_ID = re.compile(r"[" + ID_CHARS + r"]*")
_WHITESPACE_RUN = re.compile(r"\s+")
# Code points that draw nothing or nothing of their own but are not of category Cf: the combining grapheme joiner,
# Hangul fillers, Khmer inherent vowels, Mongolian and other variation selectors, the braille blank.
_INVISIBLE = frozenset([0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x2800, 0x3164, 0xFFA0, *range(0x180B, 0x1810),
                        *range(0xFE00, 0xFE10), *range(0xE0100, 0xE01F0)])
# Letters of these scripts are drawn alike ('a' and Cyrillic 'а'): one word may not mix them.
_LOOKALIKE_SCRIPTS = ("LATIN", "CYRILLIC", "GREEK")


def check_storable(value: str, *, multiline: bool) -> str:
    """Refuse what a store cannot hold: U+0000 and other C0 control characters (tab, newline and carriage return
    are fine where ``multiline``), and lone surrogates, which have no UTF-8 encoding."""
    found = (_NOT_IN_TEXT if multiline else _NOT_IN_NAME).search(value)
    if found is None:
        return value
    char = found.group()
    code = f"U+{ord(char):04X}"
    if 0xD800 <= ord(char) <= 0xDFFF:
        raise ValueError(f"must not contain a lone surrogate ({code} at position {found.start()}): it has no "
                         "UTF-8 encoding")
    allowed = " (tab, newline and carriage return are allowed)" if multiline else ""
    raise ValueError(f"must not contain control characters such as {code} (found at position {found.start()})"
                     f"{allowed}")


def _describe(char: str, position: int) -> str:
    visible = char.isprintable() and not char.isspace() and _kind_of(char) not in _UNSEEN
    shown = f"'{char}' " if visible else ""
    return f"{shown}U+{ord(char):04X} ({unicodedata.name(char, 'unnamed')}) at position {position}"


def _refuse_invisible(value: str) -> None:
    for position, char in enumerate(value):
        category = unicodedata.category(char)
        if category == "Cf" or ord(char) in _INVISIBLE:
            raise ValueError(f"must not contain an invisible format character such as {_describe(char, position)}: "
                             "names that look alike must be the same name")
        if category in {"Cn", "Co", "Cs"}:
            raise ValueError(f"must not contain an unassigned or private-use character such as "
                             f"{_describe(char, position)}")
        if category.startswith("M") and (position == 0 or value[position - 1].isspace()):
            raise ValueError(f"must not start a word with a combining mark such as {_describe(char, position)}")


_UNSEEN = ("an invisible format character", "a combining mark")


def _kind_of(char: str) -> str:
    """What a character refused in an id is, in words a person sending it recognises."""
    if char.isspace():
        return "whitespace"
    if unicodedata.category(char) == "Cf" or ord(char) in _INVISIBLE:
        return "an invisible format character"
    if unicodedata.category(char).startswith("M"):
        return "a combining mark"
    if char == "/":
        return "it separates tenant and conversation in keys"
    if char.isalnum():
        return "not an ASCII letter or digit, though it may look like one"
    return "a character outside the id set"


def _script(char: str) -> str | None:
    name = unicodedata.name(char, "")
    return next((script for script in _LOOKALIKE_SCRIPTS if name.startswith(script)), None)


def _refuse_mixed_scripts(value: str) -> None:
    for word in value.split():
        scripts = {script for char in word if char.isalpha() and (script := _script(char))}
        if len(scripts) > 1:
            named = " and ".join(sorted(script.title() for script in scripts))
            raise ValueError(f"must not mix letters of the {named} scripts in one word ({word!r}): their letters "
                             "look alike")


def normalise_name(value: str) -> str:
    """A speaker's or other display name as it is stored and compared: NFKC (fullwidth and compatibility letters
    become the plain ones), every run of whitespace one space and none at either end, and no invisible character
    (format characters, fillers, variation selectors), no combining mark opening a word and no word mixing Latin,
    Cyrillic or Greek letters: two names that look alike are the same name, or one is refused."""
    if not value.isascii():
        value = unicodedata.normalize("NFKC", value)
        _refuse_invisible(value)
        _refuse_mixed_scripts(value)
    if value != value.strip() or "  " in value or any(c.isspace() and c != " " for c in value):
        value = _WHITESPACE_RUN.sub(" ", value).strip()
    return value


def check_name(value: str, max_chars: int) -> str:
    """A speaker's name: normalised (``normalise_name``), at most ``max_chars`` once normalised, no control
    characters."""
    check_storable(value, multiline=False)
    value = normalise_name(value)
    if len(value) > max_chars:
        raise ValueError(f"must be at most {max_chars} characters once normalised (NFKC), got {len(value)}")
    return value


def check_id(value: str, max_chars: int = MAX_ID_CHARS) -> str:
    """Every id (tenant aside: ``TENANT_PATTERN``): conversation, turn, subject, session, event, relation, topic.
    NFKC first (returned so), then ``ID_RULE``: 1-``max_chars`` characters of ``ID_CHARS``, neither '.' nor '..'
    (they read as path segments wherever an id becomes part of a path or URL). Every place that takes an id (bodies,
    paths, commands, Kafka records, import files, the library) goes through this one rule, so a stored id and a
    looked-up one agree, and no store can fold two of them into one."""
    check_storable(value, multiline=False)
    if not value.isascii():
        value = unicodedata.normalize("NFKC", value)
    if not 1 <= len(value) <= max_chars:
        raise ValueError(f"must be 1-{max_chars} characters, got {len(value)}")
    allowed = _ID.match(value)
    if allowed is not None and allowed.end() < len(value):
        position = allowed.end()
        char = value[position]
        raise ValueError(f"must hold only ASCII letters, digits and . _ ~ : @ + = | -; found "
                         f"{_describe(char, position)}: {_kind_of(char)}")
    if value in {".", ".."}:
        raise ValueError("must not be '.' or '..'")
    return value


def check_stored_id(value: str) -> str:
    """An id as the stores hold it: ``check_id``'s form already, not merely one it reads as another id (fullwidth
    'ｃ１' for 'c1'). Records written as they are read (an export file's) must hold this form: stored otherwise,
    the id could not be named by any verb, which reads every id it is given as its canonical form."""
    canonical = check_id(value)
    if canonical != value:
        raise ValueError(f"{value!r} is not in its canonical form {canonical!r}: fullwidth and other compatibility "
                         "forms read as their plain letters (NFKC), and a stored id is that form itself")
    return value


def check_speaker(value: str) -> str:
    """Who said a turn: not blank, at most 100 characters once normalised (``check_name``)."""
    if not value.strip():
        raise ValueError("must not be blank")
    return check_name(value, MAX_SPEAKER_CHARS)


def check_session_id(value: str) -> str:
    return check_id(value, MAX_SESSION_ID_CHARS)


def check_text(value: str, max_bytes: int = MAX_TEXT_BYTES) -> str:
    """What was said: not blank, no control characters but tab, newline and carriage return, no lone surrogates,
    at most ``max_bytes`` as UTF-8 (a turn's 16 KiB; what a store keeps of it, ``MAX_INDEXED_TEXT_BYTES``)."""
    if not value.strip():
        raise ValueError("must not be empty after stripping whitespace")
    check_storable(value, multiline=True)
    size = len(value.encode("utf-8"))
    if size > max_bytes:
        # Rejected rather than truncated: a silently cut turn would be evidence we cannot trust.
        raise ValueError(f"is {size} bytes; the limit is {max_bytes} bytes ({max_bytes // 1024} KiB)")
    return value


def _json_path(path: tuple[str | int, ...]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f"[{json.dumps(p)}]" for p in path)


def check_metadata(value: dict[str, Any]) -> dict[str, Any]:
    """Metadata is free JSON, bounded: at most 8 levels deep, 256 keys in all, 16 KiB as UTF-8 JSON, strings the
    stores can hold, finite numbers, integers within 64 bits. Walked without recursion, so any nesting is safe."""
    keys = 0
    stack: list[tuple[Any, tuple[str | int, ...], int]] = [(value, (), 1)]
    while stack:
        node, path, depth = stack.pop()
        where = f"{_json_path(path)}: " if path else ""
        if isinstance(node, dict):
            if depth > MAX_METADATA_DEPTH:
                raise ValueError(f"{where}is nested more than {MAX_METADATA_DEPTH} levels deep; the limit is "
                                 f"{MAX_METADATA_DEPTH}")
            keys += len(node)
            if keys > MAX_METADATA_KEYS:
                raise ValueError(f"has more than {MAX_METADATA_KEYS} keys in all; the limit is {MAX_METADATA_KEYS}")
            for key, item in node.items():
                if not isinstance(key, str):
                    raise ValueError(f"{where}keys must be strings")
                try:
                    check_storable(key, multiline=False)
                except ValueError as error:
                    raise ValueError(f"{where}key {json.dumps(key)}: {error}") from None
                stack.append((item, (*path, key), depth + 1))
        elif isinstance(node, list):
            if depth > MAX_METADATA_DEPTH:
                raise ValueError(f"{where}is nested more than {MAX_METADATA_DEPTH} levels deep; the limit is "
                                 f"{MAX_METADATA_DEPTH}")
            if len(node) > MAX_METADATA_BYTES:
                raise ValueError(f"{where}is larger than {MAX_METADATA_BYTES} bytes as JSON; the limit is "
                                 f"{MAX_METADATA_BYTES} bytes (16 KiB)")
            stack.extend((item, (*path, index), depth + 1) for index, item in enumerate(node))
        elif isinstance(node, str):
            if len(node) > MAX_METADATA_BYTES:
                raise ValueError(f"{where}is larger than {MAX_METADATA_BYTES} bytes as JSON; the limit is "
                                 f"{MAX_METADATA_BYTES} bytes (16 KiB)")
            try:
                check_storable(node, multiline=True)
            except ValueError as error:
                raise ValueError(f"{where}{error}") from None
        elif isinstance(node, bool) or node is None:
            pass
        elif isinstance(node, int):
            if not -INT64_BOUND <= node < INT64_BOUND:
                raise ValueError(f"{where}integers must fit in 64 bits (-2**63 to 2**63-1)")
        elif isinstance(node, float):
            if not math.isfinite(node):
                raise ValueError(f"{where}numbers must be finite (no NaN or Infinity)")
        else:
            raise ValueError(f"{where}must hold only JSON values (objects, arrays, strings, numbers, booleans, "
                             f"null), got {type(node).__name__}")
    size = len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
    if size > MAX_METADATA_BYTES:
        raise ValueError(f"is {size} bytes as JSON; the limit is {MAX_METADATA_BYTES} bytes (16 KiB)")
    return value


def iso_datetime_input(value: Any) -> Any:  # noqa: ANN401 - the raw input, before pydantic reads it
    """A date-time as input gives it: a ``datetime`` or an ISO 8601 string. A number would be read as Unix seconds,
    or silently as milliseconds when large: the schemas say ISO 8601."""
    if isinstance(value, datetime):
        return value
    if not isinstance(value, str) or not _ISO_DATE.match(value):
        raise ValueError("must be an ISO 8601 date-time string with a UTC offset, e.g. "
                         "2023-05-08T13:56:00+00:00 (numbers are not accepted)")
    return value


def stable_uuid(*parts: str) -> str:
    """A deterministic UUID from its parts, so replays upsert instead of duplicating.

    UUID-shaped because Qdrant point ids must be UUIDs or unsigned integers.
    """
    return str(uuid.UUID(int=stable_key(*parts)))


def stable_key(*parts: str) -> int:
    """``stable_uuid(*parts)`` as the 128-bit integer the UUID holds (``uuid.UUID(...).int``), without going
    through its text: the query path looks turns up by it (0.7 us instead of 2.6)."""
    return int.from_bytes(hashlib.sha256("\x1f".join(parts).encode("utf-8")).digest()[:16], "big")


def partition_key(tenant: str, conversation_id: str) -> str:
    return f"{tenant}/{conversation_id}"


def utc_now() -> datetime:
    """Now, in UTC: the default of the time a record was made (a command's ``requested_at``, a dead letter's)."""
    return datetime.now(UTC)


class Attachment(BaseModel):
    """Something shared with a turn, e.g. an image; only its caption is memory."""

    model_config = ConfigDict(extra="forbid")

    kind: str = Field(default="image", min_length=1, max_length=MAX_ATTACHMENT_KIND_CHARS,
                      json_schema_extra={"pattern": NAME_PATTERN},
                      description=f"What is shared, e.g. 'image': 1-{MAX_ATTACHMENT_KIND_CHARS} characters, no "
                                  "control characters.")
    caption: str = Field(max_length=MAX_CAPTION_CHARS,
                         json_schema_extra={"pattern": r"^[^\x00-\x08\x0b\x0c\x0e-\x1f]*$"},
                         description=f"What the attachment shows; the part that becomes memory. At most "
                                     f"{MAX_CAPTION_CHARS} characters; no control characters except tab, newline "
                                     "and carriage return.")
    url: str | None = Field(default=None, max_length=MAX_URL_CHARS, json_schema_extra={"pattern": NAME_PATTERN},
                            description=f"Where it lives: at most {MAX_URL_CHARS} characters, no control "
                                        "characters.")

    @field_validator("kind", "url")
    @classmethod
    def _names(cls, value: str | None) -> str | None:
        return value if value is None else check_storable(value, multiline=False)

    @field_validator("caption")
    @classmethod
    def _caption(cls, value: str) -> str:
        return check_storable(value, multiline=True)


class Turn(BaseModel):
    """One utterance of a conversation: the unit that arrives on the turns topic."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tenant: str = Field(default=DEFAULT_TENANT, pattern=TENANT_PATTERN, description="The tenant that owns the turn.")
    conversation_id: str = Field(json_schema_extra={"pattern": ID_PATTERN, "minLength": 1,
                                                    "maxLength": MAX_ID_CHARS},
                                 description=f"The conversation: {ID_RULE}.")
    turn_id: str = Field(json_schema_extra={"pattern": ID_PATTERN, "minLength": 1, "maxLength": MAX_ID_CHARS},
                         description=f"Unique within the conversation: {ID_RULE}.")
    speaker: str = Field(min_length=1, max_length=MAX_SPEAKER_CHARS,
                         json_schema_extra={"pattern": r"^[^\x00-\x1f\x7f]*\S[^\x00-\x1f\x7f]*$"},
                         description=f"Who said it: 1-{MAX_SPEAKER_CHARS} characters, not blank, no control "
                                     "characters, no invisible characters (zero-width, bidi controls, fillers, "
                                     "variation selectors) and no word mixing Latin, Cyrillic or Greek letters; "
                                     "stored NFKC-normalised with each run of whitespace one space and none at "
                                     "either end.")
    text: str = Field(json_schema_extra={"pattern": TEXT_PATTERN, "minLength": 1, "maxLength": MAX_TEXT_BYTES},
                      description=f"The utterance: not blank, at most {MAX_TEXT_BYTES} bytes as UTF-8 (16 KiB; "
                                  "longer text is rejected, never truncated), no control characters except tab, "
                                  "newline and carriage return, no lone surrogates.")
    timestamp: datetime = Field(description="When it was said: an ISO 8601 string with a UTC offset, e.g. "
                                            "2023-05-08T13:56:00+00:00 (numbers and naive times are rejected).")
    session_id: str | None = Field(default=None,
                                   json_schema_extra={"pattern": ID_PATTERN, "minLength": 1,
                                                      "maxLength": MAX_SESSION_ID_CHARS},
                                   description=f"Optional session, an id: {ID_RULE}.")
    subject_id: str | None = Field(default=None,
                                   json_schema_extra={"pattern": ID_PATTERN, "minLength": 1,
                                                      "maxLength": MAX_ID_CHARS},
                                   description="Optional: the customer, user or account the conversation is about, "
                                               "so that memory can be queried across all of that subject's "
                                               f"conversations: {ID_RULE}.")
    attachments: list[Attachment] = Field(default_factory=list, max_length=MAX_ATTACHMENTS,
                                          description=f"At most {MAX_ATTACHMENTS}.")
    metadata: dict[str, Any] = Field(
        default_factory=dict, json_schema_extra={"maxProperties": MAX_METADATA_KEYS},
        description=f"Free JSON kept with the turn: at most {MAX_METADATA_DEPTH} levels deep, {MAX_METADATA_KEYS} "
                    f"keys in all, {MAX_METADATA_BYTES} bytes as UTF-8 JSON (16 KiB); no control characters in strings "
                    "(values may hold tab, newline and carriage return) and no lone surrogates; finite numbers, "
                    "integers within 64 bits.")

    @field_validator("conversation_id", "turn_id")
    @classmethod
    def _ids(cls, value: str) -> str:
        return check_id(value)

    @field_validator("subject_id")
    @classmethod
    def _subject(cls, value: str | None) -> str | None:
        return value if value is None else check_id(value)

    @field_validator("speaker")
    @classmethod
    def _speaker(cls, value: str) -> str:
        return check_speaker(value)

    @field_validator("session_id")
    @classmethod
    def _session(cls, value: str | None) -> str | None:
        return value if value is None else check_session_id(value)

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, value: dict[str, Any]) -> dict[str, Any]:
        return check_metadata(value)

    @field_validator("timestamp", mode="before")
    @classmethod
    def _iso_string(cls, value: Any) -> Any:
        return iso_datetime_input(value)

    @field_validator("text")
    @classmethod
    def _text(cls, value: str) -> str:
        return check_text(value)

    @field_validator("timestamp")
    @classmethod
    def _aware(cls, value: datetime) -> datetime:
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError("must carry a UTC offset (ISO 8601 with offset, e.g. 2023-05-08T13:56:00+00:00)")
        return value

    @property
    def key(self) -> str:
        return partition_key(self.tenant, self.conversation_id)

    def indexed_text(self) -> str:
        """The utterance plus what it shares: what a turn shows as evidence."""
        shared = " ".join(f"[shares {a.caption}]" for a in self.attachments if a.caption)
        return f"{self.text} {shared}".strip()

    def search_text(self) -> str:
        return search_text(self.speaker, self.indexed_text(), self.timestamp)


# What the library (Memory.add) and the HTTP clients (Client.add) take as a turn: a Turn, or a dict in its schema.
TurnInput = Turn | Mapping[str, Any]


def search_text(speaker: str, text: str, timestamp: datetime) -> str:
    """What is embedded and keyword-indexed for a turn: when, who, what.

    Questions name people and dates ("When did Caroline ...?"), so the speaker and the day the turn was said
    belong in its search text; the stored evidence text stays the utterance itself.
    """
    return f"({timestamp.day} {timestamp:%B %Y}) {speaker}: {text}"


class Observation(BaseModel):
    """A source turn as an event keeps it: enough to show evidence without another lookup."""

    turn_id: str
    speaker: str
    text: str
    timestamp: datetime
    session_id: str | None = None


class Granularity(StrEnum):
    DAY = "day"
    WEEK = "week"
    MONTH = "month"
    SEASON = "season"
    YEAR = "year"


class TimeAnchor(BaseModel):
    """A time expression resolved against the timestamp of the turn that said it."""

    expression: str
    start: date
    end: date
    granularity: Granularity
    turn_id: str | None = None

    @model_validator(mode="after")
    def _ordered(self) -> TimeAnchor:
        if self.end < self.start:
            raise ValueError("end must not be before start")
        return self


class TemporalInfo(BaseModel):
    start: datetime
    end: datetime


class SummarySource(StrEnum):
    EXTRACTIVE = "extractive"  # the event's most central sentences (processors/event_frames.py)
    LLM = "llm"  # written by an LLM at event close (COMPASSMEM_LLM_SUMMARY)


class Event(BaseModel):
    """An episodic event frame: a run of turns about one thing, with who, what and when."""

    tenant: str = DEFAULT_TENANT
    event_id: str
    conversation_id: str
    # The subject (customer, user, account) of the event's first turn that names one; see ``Turn.subject_id``.
    subject_id: str | None = None
    observations: list[Observation]
    summary: str
    summary_source: SummarySource = SummarySource.EXTRACTIVE
    # The extractive summary, kept when ``summary`` is another source's.
    extractive_summary: str | None = None
    participants: list[str]
    actions: list[str] = Field(default_factory=list)
    entities: list[str] = Field(default_factory=list)
    keywords: list[str] = Field(default_factory=list)
    temporal_info: TemporalInfo
    time_anchors: list[TimeAnchor] = Field(default_factory=list)
    cluster_id: str | None = None
    embedding: list[float] | None = None
    version: int = 1
    merged_from: list[str] = Field(default_factory=list)
    provisional: bool = False

    @property
    def turn_ids(self) -> list[str]:
        return [o.turn_id for o in self.observations]

    @property
    def session_ids(self) -> list[str]:
        return sorted({o.session_id for o in self.observations if o.session_id is not None})


class IndexedTurn(BaseModel):
    """A turn as the vector store keeps it: searchable on its own, and pointing at the event that holds it."""

    tenant: str = DEFAULT_TENANT
    conversation_id: str
    turn_id: str
    event_id: str
    subject_id: str | None = None
    speaker: str
    text: str
    timestamp: datetime
    session_id: str | None = None
    has_time_expression: bool = False
    embedding: list[float] | None = None
    # The kinds of thing the turn names, from the optional LLM labeller (``TurnLabeller``): searched as categories
    # beside the lexicon's, for instances the lexicon does not know ("Valorant" -> "video game").
    category_labels: list[str] = Field(default_factory=list)
    # The turn's own metadata (``Turn.metadata``), which a query can filter on (``QueryRequest.metadata``); empty
    # for turns stored before it was kept.
    metadata: dict[str, Any] = Field(default_factory=dict)


class TurnPassage(BaseModel):
    """One passage of a long turn after its first (text/passages.py), as the vector store keeps it: its span
    of the turn's indexed text and its own embedding. It points at the turn, not at the turn's event, so it is
    written once, when the turn is embedded, and outlives the turn's moves between events."""

    tenant: str = DEFAULT_TENANT
    conversation_id: str
    turn_id: str
    subject_id: str | None = None
    index: int = Field(ge=1)
    start: int = Field(ge=0)
    end: int = Field(ge=0)
    embedding: list[float]
    # The turn's time and metadata, so that a filtered query filters its passages as it filters turns; None and
    # empty for passages stored before they were kept.
    timestamp: datetime | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


def passage_point_id(tenant: str, conversation_id: str, turn_id: str, index: int) -> str:
    return stable_uuid("passage", tenant, conversation_id, turn_id, str(index))


def passage_point_key(tenant: str, conversation_id: str, turn_id: str, index: int) -> int:
    """``passage_point_id`` as the integer its UUID holds (``turn_point_key``'s twin for passages)."""
    return stable_key("passage", tenant, conversation_id, turn_id, str(index))


def turn_point_id(tenant: str, conversation_id: str, turn_id: str) -> str:
    return stable_uuid("turn", tenant, conversation_id, turn_id)


def turn_point_key(tenant: str, conversation_id: str, turn_id: str) -> int:
    """``turn_point_id`` as the integer its UUID holds: how a search hit names the turn's point."""
    return stable_key("turn", tenant, conversation_id, turn_id)


def event_id_for(tenant: str, conversation_id: str, first_turn_id: str) -> str:
    return stable_uuid("event", tenant, conversation_id, first_turn_id)


class RelationType(StrEnum):
    CAUSAL = "causal"
    TEMPORAL = "temporal"
    PART_OF = "part_of"
    CONDITIONAL = "conditional"
    MOTIVATIONAL = "motivational"
    SAME_PARTICIPANT = "same_participant"
    SAME_ENTITY = "same_entity"
    FOLLOW_UP = "follow_up"


class AllenRelation(StrEnum):
    """Allen's interval relations; the inverses are expressed by swapping source and target."""

    BEFORE = "before"
    MEETS = "meets"
    OVERLAPS = "overlaps"
    STARTS = "starts"
    DURING = "during"
    FINISHES = "finishes"
    EQUALS = "equals"


class Relation(BaseModel):
    tenant: str = DEFAULT_TENANT
    conversation_id: str
    relation_id: str
    source: str
    target: str
    type: RelationType
    subtype: str | None = None
    confidence: float = Field(ge=0.0, le=1.0)
    evidence: str
    created_at: datetime
    superseded_by: str | None = None


def relation_id_for(source: str, target: str, type_: RelationType, subtype: str | None) -> str:
    return stable_uuid("relation", source, target, type_.value, subtype or "")


class Cluster(BaseModel):
    """A topic (super-event): events of one conversation close in meaning."""

    tenant: str = DEFAULT_TENANT
    conversation_id: str
    cluster_id: str
    members: list[str]
    centroid: list[float]
    label: list[str] = Field(default_factory=list)
