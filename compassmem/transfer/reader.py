"""Reading an export file, twice: ``check_file`` validates all of it before anything is written, ``replay`` hands
its records to the writer.

The first pass holds no records, only what the checks need: per conversation the ids and references of its records
(about a hundred bytes a record), for the whole file the ids that must be unique across conversations and one digest
per conversation. Every line is checked (``records``), then every conversation as a whole when its closing line
comes: its counts, no record twice, and every reference inside it (a turn's event holds the turn and the other way
round, a relation joins events or a topic of the conversation, a topic's members are its events); a passage is
checked when it comes, against its turn, which must come before it. A file cut off or edited anywhere is refused
before any of it is written. The second pass reads the same stream again and checks each conversation's digest
against the first pass's, so a file that changed in between is caught too.

Errors name the line (1-based) and what is wrong with it. A line may hold at most
``core.line_reading.MAX_LINE_CHARS`` characters.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import NamedTuple, TextIO

from pydantic import ValidationError

from compassmem.core import line_reading
from compassmem.core.line_reading import LineFormatError, json_value
from compassmem.transfer.records import (
    FORMAT,
    PASSAGES_SINCE,
    ClusterLine,
    ConversationEnd,
    Counts,
    End,
    EventLine,
    ExportFormatError,
    Header,
    ImportRefused,
    PassageLine,
    RecordLine,
    RelationLine,
    TurnLine,
    check_passage_of_turn,
    parse_line,
)

@dataclass(frozen=True)
class PlannedConversation:
    conversation_id: str
    counts: Counts
    digest: str


@dataclass(frozen=True)
class FilePlan:
    """What the first pass found: the header and, in file order, each conversation with its counts and digest."""

    header: Header
    conversations: list[PlannedConversation]

    @property
    def counts(self) -> Counts:
        return sum((c.counts for c in self.conversations), Counts())


class _TurnSeen(NamedTuple):
    """What the checks need of a turn line: where it is, its event, and what its passages must fit."""

    line: int
    event_id: str
    subject_id: str | None
    text_length: int


@dataclass
class _Block:
    """One conversation's records as the first pass sees them: their ids, references and line numbers."""

    conversation_id: str
    digest: hashlib._Hash = field(default_factory=hashlib.sha256)
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(Counts.model_fields, 0))
    lines: dict[tuple[str, str], int] = field(default_factory=dict)  # (kind, id) -> its line
    turns: dict[str, _TurnSeen] = field(default_factory=dict)  # turn id -> its line's facts
    held: dict[tuple[str, str], int] = field(default_factory=dict)  # (event id, turn id) -> the event's line
    ends: list[tuple[int, str, str]] = field(default_factory=list)  # (line, relation source, relation target)
    members: list[tuple[int, str, str]] = field(default_factory=list)  # (line, cluster id, member event id)

    def add(self, number: int, line: RecordLine, unique: set[str]) -> None:
        record_id = _record_id(line)
        key = (line.kind, record_id)
        if key in self.lines:
            raise ExportFormatError(f"line {number}: {_named(line)} of conversation {self.conversation_id!r} again "
                                    f"(first on line {self.lines[key]})")
        if not isinstance(line, TurnLine | PassageLine):
            # Turn ids repeat across conversations; the others are ids of the whole store.
            if f"{line.kind}:{record_id}" in unique:
                raise ExportFormatError(f"line {number}: {line.kind} {record_id!r} again, in another conversation")
            unique.add(f"{line.kind}:{record_id}")
        self.lines[key] = number
        self.counts[f"{line.kind}s"] += 1
        if isinstance(line, EventLine):
            self.held.update({(line.event.event_id, turn_id): number for turn_id in line.event.turn_ids})
        elif isinstance(line, TurnLine):
            turn = line.turn
            self.turns[turn.turn_id] = _TurnSeen(number, turn.event_id, turn.subject_id, len(turn.text))
        elif isinstance(line, PassageLine):
            self._check_passage(number, line)
        elif isinstance(line, RelationLine):
            self.ends.append((number, line.relation.source, line.relation.target))
        else:
            self.members.extend((number, line.cluster.cluster_id, member) for member in line.cluster.members)

    def _check_passage(self, number: int, line: PassageLine) -> None:
        """The passage's turn came before it in this conversation, and the passage fits it."""
        passage = line.passage
        turn = self.turns.get(passage.turn_id)
        if turn is None:
            raise ExportFormatError(f"line {number}: passage.turn_id: turn {passage.turn_id!r} has no line before "
                                    f"this passage in conversation {self.conversation_id!r} (a passage follows its "
                                    "turn)")
        try:
            check_passage_of_turn(passage, turn.text_length, turn.subject_id)
        except ValueError as error:
            raise ExportFormatError(f"line {number}: {error} (the turn is on line {turn.line})") from None

    def close(self, number: int, end: ConversationEnd) -> PlannedConversation:
        counts = Counts(**self.counts)
        if counts != end.counts:
            raise ExportFormatError(f"line {number}: conversation {end.conversation_id!r} should have {end.counts}, "
                                    f"the file holds {counts}")
        self._check_references()
        return PlannedConversation(self.conversation_id, counts, self.digest.hexdigest())

    def _check_references(self) -> None:
        events = {record_id for kind, record_id in self.lines if kind == "event"}
        clusters = {record_id for kind, record_id in self.lines if kind == "cluster"}
        for (event_id, turn_id), number in self.held.items():
            owner = self.turns.get(turn_id)
            if owner is None:
                raise ExportFormatError(f"line {number}: event {event_id!r} holds turn {turn_id!r}, which the file "
                                        "does not hold (its words could never be redacted)")
            if owner.event_id != event_id:
                raise ExportFormatError(f"line {number}: event {event_id!r} holds turn {turn_id!r}, which line "
                                        f"{owner.line} gives to event {owner.event_id!r}")
        for turn_id, (number, event_id, _, _) in self.turns.items():
            if (event_id, turn_id) not in self.held:
                where = "does not hold it" if event_id in events else "the file does not hold"
                raise ExportFormatError(f"line {number}: turn {turn_id!r} belongs to event {event_id!r}, which "
                                        f"{where}")
        for number, source, target in self.ends:
            for end, allowed in ((source, events), (target, events | clusters)):
                if end not in allowed:
                    raise ExportFormatError(f"line {number}: the relation joins {end!r}, which is not an event "
                                            f"(or a topic) of conversation {self.conversation_id!r} in the file")
        for number, cluster_id, member in self.members:
            if member not in events:
                raise ExportFormatError(f"line {number}: topic {cluster_id!r} lists event {member!r}, which the file "
                                        "does not hold")


def check_file(stream: TextIO, *, vector_space: str, dim: int) -> FilePlan:
    """The first pass: every line and every conversation checked (see the module), nothing kept but the plan.
    ExportFormatError at the first problem; ImportRefused for vectors of another embedder or dimension."""
    lines = _text_lines(stream)
    header = _read_header(lines)
    if header.vector_space != vector_space or header.dim != dim:
        raise ImportRefused(f"the file's vectors were made by the embedder {header.vector_space!r} ({header.dim}-d) "
                            f"and the settings choose {vector_space!r} ({dim}-d): their vectors cannot be searched "
                            f"together (set COMPASSMEM_EMBEDDER and COMPASSMEM_EMBEDDING_MODEL to the file's)")
    planned: list[PlannedConversation] = []
    closed: dict[str, int] = {}  # conversation id -> the line that closed it
    unique: set[str] = set()
    block: _Block | None = None
    for number, text, line in _records(lines, header):
        if isinstance(line, End):
            if block is not None:
                raise ExportFormatError(f"line {number}: the file ends inside conversation "
                                        f"{block.conversation_id!r} (no 'conversation' line closed it)")
            if line.conversations != len(planned):
                raise ExportFormatError(f"line {number}: the end line counts {line.conversations} conversations, "
                                        f"the file holds {len(planned)}")
            for extra, _ in lines:
                raise ExportFormatError(f"line {extra}: a line after the end line")
            return FilePlan(header, planned)
        if isinstance(line, ConversationEnd):
            if block is None or block.conversation_id != line.conversation_id:
                raise ExportFormatError(f"line {number}: closes conversation {line.conversation_id!r}, which has "
                                        "no records before it")
            block.digest.update(text.encode())
            planned.append(block.close(number, line))
            closed[block.conversation_id] = number
            block = None
            continue
        conversation_id = line.record.conversation_id
        if block is None:
            if conversation_id in closed:
                raise ExportFormatError(f"line {number}: conversation {conversation_id!r} again (line "
                                        f"{closed[conversation_id]} closed it)")
            block = _Block(conversation_id)
        elif conversation_id != block.conversation_id:
            raise ExportFormatError(f"line {number}: a record of conversation {conversation_id!r} inside "
                                    f"conversation {block.conversation_id!r} (no 'conversation' line closed it)")
        block.digest.update(text.encode())
        block.add(number, line, unique)
    raise ExportFormatError("the file ends without its 'end' line: it was cut off"
                            + (f" inside conversation {block.conversation_id!r}" if block else ""))


def replay(stream: TextIO, plan: FilePlan) -> Iterator[tuple[str, RecordLine | None]]:
    """The second pass over the same stream, from where the first began: each record with its conversation, then
    (conversation id, None) once the conversation's lines are all read and match the first pass's digest."""
    lines = _text_lines(stream)
    _read_header(lines)
    planned = iter(plan.conversations)
    digest = hashlib.sha256()
    for number, text, line in _records(lines, plan.header):
        if isinstance(line, End):
            return
        digest.update(text.encode())
        if isinstance(line, ConversationEnd):
            expected = next(planned, None)
            if expected is None or expected.conversation_id != line.conversation_id \
                    or expected.digest != digest.hexdigest():
                raise ExportFormatError(f"line {number}: the file changed while it was being imported")
            digest = hashlib.sha256()
            yield line.conversation_id, None
        else:
            yield line.record.conversation_id, line


def text_lines(stream: TextIO) -> Iterator[tuple[int, str]]:
    """``core.line_reading.text_lines``, its refusals as ExportFormatError (what an import reports)."""
    try:
        yield from line_reading.text_lines(stream)
    except LineFormatError as error:
        raise ExportFormatError(str(error)) from None


def _text_lines(stream: TextIO) -> Iterator[tuple[int, str]]:
    return ((number, text) for number, text in text_lines(stream) if text.strip())


def _read_header(lines: Iterator[tuple[int, str]]) -> Header:
    for number, text in lines:
        line = _parse(number, text)
        if not isinstance(line, Header):
            raise ExportFormatError(f"line {number}: the file must start with a header line, found a "
                                    f"{line.kind!r} line (is this a {FORMAT} file?)")
        return line
    raise ExportFormatError(f"the file is empty: a {FORMAT} file starts with a header line")


def _records(lines: Iterator[tuple[int, str]],
             header: Header) -> Iterator[tuple[int, str, RecordLine | ConversationEnd | End]]:
    """The lines after the header, parsed (every vector of the header's dimension), each record checked against the
    header's scope."""
    for number, text in lines:
        line = _parse(number, text, header.dim)
        if isinstance(line, Header):
            raise ExportFormatError(f"line {number}: a second header line")
        if isinstance(line, PassageLine) and header.version < PASSAGES_SINCE:
            raise ExportFormatError(f"line {number}: a passage line in a file of version {header.version}; passages "
                                    f"came with version {PASSAGES_SINCE}")
        if not isinstance(line, ConversationEnd | End):
            _check_scope(number, line, header)
        yield number, text, line


def _parse(number: int, text: str, dim: int | None = None) -> Header | RecordLine | ConversationEnd | End:
    try:
        return parse_line(json_value(text), dim)
    except json.JSONDecodeError as error:
        raise ExportFormatError(f"line {number}: not JSON ({error.msg} at column {error.colno})") from None
    except ValidationError as error:
        raise ExportFormatError(f"line {number}: {_first_problem(error)}") from None


def _first_problem(error: ValidationError) -> str:
    problems = error.errors(include_url=False)
    first = problems[0]
    # The first part of a location is the union's tag (the line's kind), which the field path repeats; the rules
    # of ``records`` name their field in the message itself.
    where = ".".join(str(part) for part in first["loc"][1:])
    message = first["msg"].removeprefix("Value error, ")
    more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
    return f"{where + ': ' if where else ''}{message}{more}"


def _check_scope(number: int, line: RecordLine, header: Header) -> None:
    """The record belongs to the header's tenant (and conversation)."""
    record = line.record
    if record.tenant != header.tenant:
        raise ExportFormatError(f"line {number}: a {line.kind} of tenant {record.tenant!r} in a file of tenant "
                                f"{header.tenant!r}")
    if header.conversation_id is not None and record.conversation_id != header.conversation_id:
        raise ExportFormatError(f"line {number}: a {line.kind} of conversation {record.conversation_id!r} in a file "
                                f"of conversation {header.conversation_id!r}")


def _named(line: RecordLine) -> str:
    """The record as an error names it."""
    if isinstance(line, PassageLine):
        return f"passage {line.passage.index} of turn {line.passage.turn_id!r}"
    return f"{line.kind} {_record_id(line)!r}"


def _record_id(line: RecordLine) -> str:
    if isinstance(line, EventLine):
        return line.event.event_id
    if isinstance(line, TurnLine):
        return line.turn.turn_id
    if isinstance(line, PassageLine):
        # A turn id holds no '/' (models.check_id).
        return f"{line.passage.turn_id}/{line.passage.index}"
    if isinstance(line, ClusterLine):
        return line.cluster.cluster_id
    return line.relation.relation_id
