"""The export file: JSON Lines, one record per line, told apart by ``kind``.

    header          first line: format version, tenant, the conversation when only one was exported, and the
                    embedder (``Settings.vector_space``) and dimension of the vectors, which an import must match
    event, turn     a conversation's events, each followed by its turns, with their embeddings (so an import needs no
                    embedding model run)
    passage         a later passage of a long turn (text/passages.py), with its span and embedding, right after its
                    turn (from version 2)
    cluster         its topic clusters, with members and centroid
    relation        its relations, superseded ones included (``superseded_by`` set)
    conversation    closes a conversation with the number of records of each kind written for it
    end             last line: how many conversations the file holds

Records of one conversation are contiguous and closed by their ``conversation`` line, so a reader can check and
write a conversation as a whole; the trailer counts and the ``end`` line tell a cut-off file from a complete one.
The records inside are the stores' own models (``Event``, ``IndexedTurn``, ``TurnPassage``, ``Relation``,
``Cluster``), held to the rules of what may enter the stores when a line is read (and written: an export never
writes what an import would refuse): the ``Turn`` rules on what a store keeps of a turn (ids, in the very form
the stores hold them; speaker, text, session), no control character or lone surrogate in any string, at most
``MAX_STRING_BYTES`` in one, and finite vectors of the header's dimension and of unit norm (a topic's centroid, a
mean of unit vectors: at most unit norm).

Versions: a file says which it is in its header, and is read by the rules of that version. Version 1 holds no
passages (an import of it searches long turns by their openings); version 2 adds the ``passage`` line and the
``passages`` count. An export writes the newest; an import reads every version up to it, and refuses a newer one
with a message saying so rather than dropping what it does not know.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from functools import partial
from typing import Annotated, Literal

import numpy as np
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationInfo,
    field_validator,
    model_validator,
)

from compassmem.core.errors import BadRequest, CompassmemError
from compassmem.core.models import (
    MAX_INDEXED_TEXT_BYTES,
    TENANT_PATTERN,
    Cluster,
    Event,
    IndexedTurn,
    Relation,
    TurnPassage,
    check_session_id,
    check_speaker,
    check_storable,
    check_stored_id,
    check_text,
)

FORMAT = "compassmem-export"
# The version an export writes; an import reads 1 up to it (see the module).
VERSION = 2
PASSAGES_SINCE = 2
ConversationId = Annotated[str, AfterValidator(check_stored_id)]


# The longest string a record may hold: a stored turn's text at its longest (a summary or a relation's evidence is
# made of pieces of turns).
MAX_STRING_BYTES = MAX_INDEXED_TEXT_BYTES
# How far a stored embedding's length may be from 1: the stores keep them normalised, as float32.
NORM_TOLERANCE = 1e-3


class ExportFormatError(BadRequest):
    """A line of an export file that cannot be imported; the message names the line."""


class ImportRefused(CompassmemError):
    """The file is valid but does not fit the target: another embedder, or memory already there."""


class ImportFailed(CompassmemError):
    """Writing a checked file failed part-way; the message says what the stores hold of it now."""


def _check(where: str, check: Callable[[str], str], value: str | None) -> None:
    if value is None:
        return
    try:
        check(value)
    except ValueError as error:
        raise ValueError(f"{where}: {error}") from None


def _check_all(where: str, check: Callable[[str], str], values: Sequence[str]) -> None:
    for index, value in enumerate(values):
        _check(f"{where}[{index}]", check, value)


def _string(value: str) -> str:
    """Any string of a record: storable, and not longer than a stored turn's text."""
    check_storable(value, multiline=True)
    if len(value) > MAX_STRING_BYTES // 4 and (size := len(value.encode("utf-8"))) > MAX_STRING_BYTES:
        raise ValueError(f"is {size} bytes; the limit is {MAX_STRING_BYTES} bytes")
    return value


def _every_string(where: str, value: object) -> None:
    """Every string in a record (lists and objects walked without recursion), checked by ``_string``."""
    stack: list[tuple[object, str]] = [(value, where)]
    while stack:
        node, path = stack.pop()
        if isinstance(node, str):
            _check(path, _string, node)
        elif isinstance(node, dict):
            stack.extend((item, f"{path}.{key}") for key, item in node.items())
        elif isinstance(node, list):
            stack.extend((item, f"{path}[{index}]") for index, item in enumerate(node))


def check_vector(where: str, vector: Sequence[float] | None, *, unit: bool, dim: int | None = None) -> None:
    """A stored vector: ``dim`` numbers when the file's header is known (the reader passes it), finite, of norm 1
    (``unit``; a stored embedding) or at most 1 and not 0 (a topic's centroid). The dimension comes first: a vector
    cut short has a wrong norm too, and that message would hide what is wrong. NaN came in through JSON's ``NaN``
    and was written back out as ``null``, which no import can read."""
    if vector is None:
        if dim is not None:
            raise ValueError(f"{where}: has no vector; the file's header says {dim} dimensions")
        return
    if dim is not None and len(vector) != dim:
        raise ValueError(f"{where}: has {len(vector)} dimensions; the file's header says {dim}")
    array = np.asarray(vector, dtype=np.float64)
    if not np.isfinite(array).all():
        raise ValueError(f"{where}: holds NaN or infinite numbers; a vector must be finite")
    norm = float(np.linalg.norm(array))
    if unit and abs(norm - 1.0) > NORM_TOLERANCE:
        raise ValueError(f"{where}: has norm {norm:.6g}; a stored embedding is normalised to norm 1 (within "
                         f"{NORM_TOLERANCE:g})")
    if not unit and not 0.0 < norm <= 1.0 + NORM_TOLERANCE:
        raise ValueError(f"{where}: has norm {norm:.6g}; a topic's centroid has a norm above 0 and at most 1")


def _header_dim(info: ValidationInfo) -> int | None:
    """The dimension the file's header gives every vector: ``parse_line``'s context for a line read from a file;
    None for a line an export makes, whose vectors come from the store."""
    return info.context.get("dim") if isinstance(info.context, dict) else None


_turn_text = partial(check_text, max_bytes=MAX_INDEXED_TEXT_BYTES)


class _Line(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Header(_Line):
    kind: Literal["header"] = "header"
    format: Literal["compassmem-export"] = FORMAT
    version: int = Field(default=VERSION, strict=True)
    tenant: str = Field(pattern=TENANT_PATTERN)
    conversation_id: ConversationId | None = Field(default=None,
                                                   description="Set when the file holds this conversation only.")
    vector_space: Annotated[str, AfterValidator(_string)] = Field(
        description="The embedder that made the vectors (Settings.vector_space).")
    dim: int = Field(gt=0)
    exported_at: datetime

    @field_validator("version")
    @classmethod
    def _known(cls, value: int) -> int:
        if value > VERSION:
            raise ValueError(f"the file is of version {value} of the {FORMAT} format, newer than this compassmem "
                             f"reads (1 to {VERSION}): import it with a newer compassmem")
        if value < 1:
            raise ValueError(f"{value} is no version of the {FORMAT} format (they start at 1)")
        return value


class EventLine(_Line):
    kind: Literal["event"] = "event"
    event: Event

    @model_validator(mode="after")
    def _rules(self, info: ValidationInfo) -> EventLine:
        event = self.event
        for field in ("event_id", "conversation_id", "subject_id", "cluster_id"):
            _check(f"event.{field}", check_stored_id, getattr(event, field))
        _check_all("event.merged_from", check_stored_id, event.merged_from)
        _check_all("event.participants", check_speaker, event.participants)
        for index, observation in enumerate(event.observations):
            where = f"event.observations[{index}]"
            _check(f"{where}.turn_id", check_stored_id, observation.turn_id)
            _check(f"{where}.speaker", check_speaker, observation.speaker)
            _check(f"{where}.text", _turn_text, observation.text)
            _check(f"{where}.session_id", check_session_id, observation.session_id)
        _every_string("event", event.model_dump(exclude={"embedding"}))
        check_vector("event.embedding", event.embedding, unit=True, dim=_header_dim(info))
        return self

    @property
    def record(self) -> Event:
        return self.event


class TurnLine(_Line):
    kind: Literal["turn"] = "turn"
    turn: IndexedTurn

    @model_validator(mode="after")
    def _rules(self, info: ValidationInfo) -> TurnLine:
        turn = self.turn
        for field in ("conversation_id", "turn_id", "event_id", "subject_id"):
            _check(f"turn.{field}", check_stored_id, getattr(turn, field))
        _check("turn.speaker", check_speaker, turn.speaker)
        _check("turn.text", _turn_text, turn.text)
        _check("turn.session_id", check_session_id, turn.session_id)
        _every_string("turn", turn.model_dump(exclude={"embedding"}))
        check_vector("turn.embedding", turn.embedding, unit=True, dim=_header_dim(info))
        return self

    @property
    def record(self) -> IndexedTurn:
        return self.turn


class PassageLine(_Line):
    kind: Literal["passage"] = "passage"
    passage: TurnPassage

    @model_validator(mode="after")
    def _rules(self, info: ValidationInfo) -> PassageLine:
        passage = self.passage
        for field in ("conversation_id", "turn_id", "subject_id"):
            _check(f"passage.{field}", check_stored_id, getattr(passage, field))
        if passage.end <= passage.start:
            raise ValueError(f"passage.end: is {passage.end}, not after passage.start ({passage.start}); a passage "
                             "holds at least one character")
        _every_string("passage", passage.model_dump(exclude={"embedding"}))
        check_vector("passage.embedding", passage.embedding, unit=True, dim=_header_dim(info))
        return self

    @property
    def record(self) -> TurnPassage:
        return self.passage


def check_passage_of_turn(passage: TurnPassage, text_length: int, subject_id: str | None) -> None:
    """A passage fits the turn it names (whose indexed text is ``text_length`` characters long): its span lies in
    that text and it is about the turn's subject (a subject-scoped search finds a turn by its passages)."""
    if passage.end > text_length:
        raise ValueError(f"passage.end: is {passage.end}, past the end of turn {passage.turn_id!r}, whose text is "
                         f"{text_length} characters long")
    if passage.subject_id != subject_id:
        raise ValueError(f"passage.subject_id: is {passage.subject_id!r}, and turn {passage.turn_id!r} is about "
                         f"{subject_id!r}")


class ClusterLine(_Line):
    kind: Literal["cluster"] = "cluster"
    cluster: Cluster

    @model_validator(mode="after")
    def _rules(self, info: ValidationInfo) -> ClusterLine:
        cluster = self.cluster
        for field in ("cluster_id", "conversation_id"):
            _check(f"cluster.{field}", check_stored_id, getattr(cluster, field))
        _check_all("cluster.members", check_stored_id, cluster.members)
        _every_string("cluster", cluster.model_dump(exclude={"centroid"}))
        check_vector("cluster.centroid", cluster.centroid, unit=False, dim=_header_dim(info))
        return self

    @property
    def record(self) -> Cluster:
        return self.cluster


class RelationLine(_Line):
    kind: Literal["relation"] = "relation"
    relation: Relation

    @model_validator(mode="after")
    def _rules(self) -> RelationLine:
        relation = self.relation
        for field in ("relation_id", "conversation_id", "source", "target", "superseded_by"):
            _check(f"relation.{field}", check_stored_id, getattr(relation, field))
        _every_string("relation", relation.model_dump())
        return self

    @property
    def record(self) -> Relation:
        return self.relation


RecordLine = EventLine | TurnLine | PassageLine | ClusterLine | RelationLine


class Counts(BaseModel):
    """Records of each kind: of one conversation (its trailer), or of a whole export or import. Each field is its
    line kind's plural (a file of version 1 counts no passages)."""

    turns: int = Field(default=0, ge=0)
    passages: int = Field(default=0, ge=0)
    events: int = Field(default=0, ge=0)
    relations: int = Field(default=0, ge=0)
    clusters: int = Field(default=0, ge=0)

    def __str__(self) -> str:
        return ", ".join(f"{value} {name}" for name, value in self.model_dump().items())

    def __add__(self, other: Counts) -> Counts:
        return Counts(**{name: getattr(self, name) + getattr(other, name) for name in Counts.model_fields})


class ConversationEnd(_Line):
    kind: Literal["conversation"] = "conversation"
    conversation_id: ConversationId
    counts: Counts


class End(_Line):
    kind: Literal["end"] = "end"
    conversations: int = Field(ge=0)


Line = Annotated[Header | RecordLine | ConversationEnd | End,
                 Field(discriminator="kind")]
LINE = TypeAdapter(Line)


def parse_line(data: object, dim: int | None = None) -> Header | RecordLine | ConversationEnd | End:
    """A line of a file, checked by the rules above; ``dim``, the header's, once it is read: every vector must
    have that many numbers."""
    return LINE.validate_python(data, context={"dim": dim})


class LegacyIds(BaseModel):
    """A stored conversation holding ids that break the id rule (``models.ID_RULE``), written before it: its own id
    when that one does, and its turn ids that do, as the stores hold them."""

    conversation_id: str
    turn_ids: list[str] = Field(default_factory=list)

    @property
    def named(self) -> str:
        """The conversation as a report names it: its id, and the turn ids at fault."""
        turns = f" (turn ids {', '.join(map(repr, self.turn_ids))})" if self.turn_ids else ""
        return f"{self.conversation_id!r}{turns}"


class TransferSummary(BaseModel):
    """What an export wrote or an import restored."""

    tenant: str
    conversations: int
    counts: Counts
    skipped: list[LegacyIds] = Field(
        default_factory=list, description="Conversations an export left out: they hold ids stored before the id "
                                          "rule, which no verb can name (`compassmem migrate-ids` rewrites them).")


def dump(line: _Line) -> str:
    return line.model_dump_json() + "\n"
