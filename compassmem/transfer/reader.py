"""Reading an export file: every line validated, conversations handed on whole.

A conversation is handed on only once its ``conversation`` line has arrived and its counts match, so a file cut
off or edited in the middle of a conversation is refused before any of that conversation is written. Errors name
the line (1-based) and what is wrong with it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from pydantic import ValidationError

from compassmem.models import Cluster, Event, IndexedTurn, Relation
from compassmem.transfer.records import (
    FORMAT,
    LINE,
    ClusterLine,
    ConversationEnd,
    Counts,
    End,
    EventLine,
    ExportFormatError,
    Header,
    RecordLine,
    TurnLine,
)


@dataclass
class Conversation:
    """One conversation's records, checked against the header and each other."""

    conversation_id: str
    events: list[Event] = field(default_factory=list)
    turns: list[IndexedTurn] = field(default_factory=list)
    relations: list[Relation] = field(default_factory=list)
    clusters: list[Cluster] = field(default_factory=list)

    def add(self, line: RecordLine) -> None:
        if isinstance(line, EventLine):
            self.events.append(line.event)
        elif isinstance(line, TurnLine):
            self.turns.append(line.turn)
        elif isinstance(line, ClusterLine):
            self.clusters.append(line.cluster)
        else:
            self.relations.append(line.relation)

    @property
    def counts(self) -> Counts:
        return Counts(turns=len(self.turns), events=len(self.events), relations=len(self.relations),
                      clusters=len(self.clusters))


def read_header(lines: Iterator[tuple[int, str]]) -> Header:
    for number, text in lines:
        line = _parse(number, text)
        if not isinstance(line, Header):
            raise ExportFormatError(f"line {number}: the file must start with a header line, found a "
                                    f"{line.kind!r} line (is this a {FORMAT} file?)")
        return line
    raise ExportFormatError(f"the file is empty: a {FORMAT} file starts with a header line")


def read_conversations(lines: Iterator[tuple[int, str]], header: Header) -> Iterator[Conversation]:
    """The conversations after the header, each once its closing line has checked it; ExportFormatError at the
    first bad line, and at the end of a file without its ``end`` line."""
    current: Conversation | None = None
    seen = 0
    for number, text in lines:
        line = _parse(number, text)
        if isinstance(line, End):
            if current is not None:
                raise ExportFormatError(f"line {number}: the file ends inside conversation "
                                        f"{current.conversation_id!r} (no 'conversation' line closed it)")
            if line.conversations != seen:
                raise ExportFormatError(f"line {number}: the end line counts {line.conversations} conversations, "
                                        f"the file holds {seen}")
            _expect_nothing_after(lines)
            return
        if isinstance(line, Header):
            raise ExportFormatError(f"line {number}: a second header line")
        if isinstance(line, ConversationEnd):
            if current is None or current.conversation_id != line.conversation_id:
                raise ExportFormatError(f"line {number}: closes conversation {line.conversation_id!r}, which has "
                                        "no records before it")
            if current.counts != line.counts:
                raise ExportFormatError(f"line {number}: conversation {line.conversation_id!r} should have "
                                        f"{line.counts}, the file holds {current.counts}")
            seen += 1
            yield current
            current = None
            continue
        conversation_id = _check_scope(number, line, header)
        if current is None:
            current = Conversation(conversation_id)
        elif conversation_id != current.conversation_id:
            raise ExportFormatError(f"line {number}: a record of conversation {conversation_id!r} inside "
                                    f"conversation {current.conversation_id!r} (no 'conversation' line closed it)")
        current.add(line)
    raise ExportFormatError("the file ends without its 'end' line: it was cut off"
                            + (f" inside conversation {current.conversation_id!r}" if current else ""))


def numbered(text_lines: Iterable[str]) -> Iterator[tuple[int, str]]:
    """The non-blank lines with their 1-based numbers."""
    lines = iter(text_lines)
    number = 0
    while True:
        try:
            text = next(lines)
        except StopIteration:
            return
        except UnicodeDecodeError as error:
            # A text stream decodes a block at a time: the bad byte is on this line or a little after it.
            raise ExportFormatError(f"line {number + 1} or soon after: not UTF-8 text ({error.reason})") from None
        number += 1
        if text.strip():
            yield number, text


def _parse(number: int, text: str) -> Header | RecordLine | ConversationEnd | End:
    try:
        return LINE.validate_python(json.loads(text))
    except json.JSONDecodeError as error:
        raise ExportFormatError(f"line {number}: not JSON ({error.msg} at column {error.colno})") from None
    except ValidationError as error:
        raise ExportFormatError(f"line {number}: {_first_problem(error)}") from None


def _first_problem(error: ValidationError) -> str:
    problems = error.errors(include_url=False)
    first = problems[0]
    # The first part of a location is the union's tag (the line's kind), which the field path repeats.
    where = ".".join(str(part) for part in first["loc"][1:])
    more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
    return f"{where + ': ' if where else ''}{first['msg']}{more}"


def _check_scope(number: int, line: RecordLine, header: Header) -> str:
    """The record's conversation, after checking it belongs to the header's tenant (and conversation) and that its
    vectors have the header's dimension."""
    record = line.record
    if record.tenant != header.tenant:
        raise ExportFormatError(f"line {number}: a {line.kind} of tenant {record.tenant!r} in a file of tenant "
                                f"{header.tenant!r}")
    if header.conversation_id is not None and record.conversation_id != header.conversation_id:
        raise ExportFormatError(f"line {number}: a {line.kind} of conversation {record.conversation_id!r} in a file "
                                f"of conversation {header.conversation_id!r}")
    for name, vector in line.vectors().items():
        if vector is None or len(vector) != header.dim:
            size = "no" if vector is None else f"a {len(vector)}-d"
            raise ExportFormatError(f"line {number}: {line.kind}.{name}: {size} vector; the header says "
                                    f"{header.dim}-d")
    return record.conversation_id


def _expect_nothing_after(lines: Iterator[tuple[int, str]]) -> None:
    for number, _ in lines:
        raise ExportFormatError(f"line {number}: a line after the end line")
