"""Export: a tenant's conversations (or one) from the stores into the JSONL records of ``records``.

Conversation by conversation and event page by event page, so memory holds one page of events, their turns and
the turns' passages plus one conversation's clusters and relations at a time, however large the tenant is. Events
come from the vector store (the graph store keeps no observations or embeddings), provisional ones (open segments)
included. A long turn's passages (text/passages.py) follow it, so an imported memory finds what its later
paragraphs say as the exported one did. A conversation holding ids stored before the id rule is left out and
reported (``find_legacy_ids``): an import would refuse it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import TextIO

import structlog
from pydantic import ValidationError

from compassmem.core.models import Cluster, Event, IndexedTurn, Relation, TurnPassage, check_stored_id
from compassmem.retrieval.listing import list_conversations, list_events
from compassmem.sinks.factory import Stores
from compassmem.transfer.records import (
    ClusterLine,
    ConversationEnd,
    Counts,
    End,
    EventLine,
    ExportFormatError,
    Header,
    LegacyIds,
    PassageLine,
    RecordLine,
    RelationLine,
    TransferSummary,
    TurnLine,
    check_passage_of_turn,
    dump,
)

log = structlog.get_logger(__name__)

CONVERSATION_PAGE = 200
EVENT_PAGE = 64
# A record of the stores as an export file holds it.
StoredRecord = Event | IndexedTurn | TurnPassage | Cluster | Relation


def export_memory(stores: Stores, out: TextIO, *, tenant: str, vector_space: str, dim: int,
                  conversation_id: str | None = None) -> TransferSummary:
    """Write the tenant's memory (only ``conversation_id``'s when given) to ``out``, but for the conversations that
    hold ids stored before the id rule: no verb can name them, so no import could restore them as they are; they are
    left out and listed in the summary's ``skipped`` (``compassmem migrate-ids`` rewrites them)."""
    skipped = find_legacy_ids(stores, tenant, conversation_id).legacy
    chosen = (current for current in ([conversation_id] if conversation_id else _conversation_ids(stores, tenant))
              if current not in skipped)
    summary = write_file(out, Header(tenant=tenant, conversation_id=conversation_id, vector_space=vector_space,
                                     dim=dim, exported_at=datetime.now(UTC)),
                         ((current, conversation_records(stores, tenant, current)) for current in chosen))
    if skipped:
        log.warning("export.conversations_skipped", tenant=tenant, conversations=len(skipped))
    return summary.model_copy(update={"skipped": list(skipped.values())})


def write_file(out: TextIO, header: Header,
               conversations: Iterable[tuple[str, Iterable[StoredRecord]]]) -> TransferSummary:
    """An export file: the header, each conversation's records (``conversation_records``' order) and its closing
    line, the end line."""
    out.write(dump(header))
    total, written = Counts(), 0
    for conversation_id, records in conversations:
        counts = _write_conversation(out, conversation_id, records)
        total, written = total + counts, written + 1
        log.info("export.conversation_written", tenant=header.tenant, conversation_id=conversation_id,
                 **counts.model_dump())
    out.write(dump(End(conversations=written)))
    out.flush()
    return TransferSummary(tenant=header.tenant, conversations=written, counts=total)


@dataclass(frozen=True)
class IdScan:
    """What ``find_legacy_ids`` found: every conversation id stored, and the conversations holding ids that break
    the id rule, by their stored id."""

    conversations: frozenset[str]
    legacy: dict[str, LegacyIds]


def find_legacy_ids(stores: Stores, tenant: str, conversation_id: str | None = None) -> IdScan:
    """The tenant's (or one conversation's) conversation and turn ids as both stores hold them, read without
    vectors, and those among them that break the id rule (``check_stored_id``): written before it, they can no
    longer be named."""
    # The graph's listing aggregates the whole tenant: for one conversation its points say enough.
    conversations = {s.conversation_id for s in stores.graph.conversation_stats(tenant)} if conversation_id is None \
        else set()
    turns: dict[str, set[str]] = {}
    for stored, turn_id in stores.vectors.stored_ids(tenant, conversation_id):
        conversations.add(stored)
        if turn_id is not None and not _nameable(turn_id):
            turns.setdefault(stored, set()).add(turn_id)
    legacy = sorted({c for c in conversations if not _nameable(c)} | set(turns))
    return IdScan(frozenset(conversations),
                  {c: LegacyIds(conversation_id=c, turn_ids=sorted(turns.get(c, ()))) for c in legacy})


def _nameable(value: str) -> bool:
    try:
        check_stored_id(value)
    except ValueError:
        return False
    return True


def _conversation_ids(stores: Stores, tenant: str) -> Iterator[str]:
    # By id, not most recent first: a conversation written to during the export cannot move between pages.
    cursor: str | None = None
    while True:
        page = list_conversations(stores, tenant, limit=CONVERSATION_PAGE, cursor=cursor, order="id")
        yield from (summary.conversation_id for summary in page.conversations)
        if page.next_cursor is None:
            return
        cursor = page.next_cursor


def _line(make: Callable[[], RecordLine], what: str) -> RecordLine:
    """A record as a line of the file, held to the rules an import checks (``records``): the stores holding
    something an import would refuse (a NaN vector) fails the export, rather than writing a file that cannot be
    restored."""
    try:
        return make()
    except ValueError as error:  # a ValidationError, or a passage that does not fit its turn
        problem = str(error) if not isinstance(error, ValidationError) else "; ".join(
            item["msg"].removeprefix("Value error, ") for item in error.errors(include_url=False))
        raise ExportFormatError(f"the stores hold {what}, which an import would refuse ({problem}); nothing was "
                                "exported") from None


def conversation_records(stores: Stores, tenant: str, conversation_id: str) -> Iterator[StoredRecord]:
    """A conversation's records in the order of the file, read a page of events at a time: each event, then its
    turns, each followed by its passages; then its topics and relations."""
    cursor: str | None = None
    while True:
        page = list_events(stores, tenant, conversation_id, limit=EVENT_PAGE, cursor=cursor)
        ids = [node.id for node in page.events]
        turns_by_event: dict[str, list[IndexedTurn | TurnPassage]] = {}
        for turn, its_passages in _with_passages(stores, tenant, conversation_id,
                                                  stores.vectors.turns_of_events(tenant, ids)):
            turns_by_event.setdefault(turn.event_id, []).extend([turn, *its_passages])
        for event in stores.vectors.get_events(tenant, ids):
            yield event
            yield from turns_by_event.get(event.event_id, [])
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    relations, clusters = _graph_records(stores, tenant, conversation_id)
    yield from clusters
    yield from relations


def _write_conversation(out: TextIO, conversation_id: str, records: Iterable[StoredRecord]) -> Counts:
    """The records as lines, each held to the rules an import checks, and the conversation's closing line."""
    counts = dict.fromkeys(Counts.model_fields, 0)
    turn: IndexedTurn | None = None  # the turn the passages that follow belong to
    for record in records:
        line = _record_line(record, conversation_id, turn)
        turn = record if isinstance(record, IndexedTurn) else turn
        out.write(dump(line))
        counts[f"{line.kind}s"] += 1
    total = Counts(**counts)
    out.write(dump(ConversationEnd(conversation_id=conversation_id, counts=total)))
    return total


def _record_line(record: StoredRecord, conversation_id: str, turn: IndexedTurn | None) -> RecordLine:
    if isinstance(record, Event):
        return _line(partial(EventLine, event=record), f"event {record.event_id!r}")
    if isinstance(record, Cluster):
        return _line(partial(ClusterLine, cluster=record), f"topic {record.cluster_id!r}")
    if isinstance(record, Relation):
        return _line(partial(RelationLine, relation=record), f"relation {record.relation_id!r}")
    if isinstance(record, IndexedTurn):
        return _line(partial(TurnLine, turn=record), f"turn {record.turn_id!r} of conversation {conversation_id!r}")
    assert turn is not None, "a passage follows its turn"
    return _line(partial(_passage_line, record, turn),
                 f"passage {record.index} of turn {turn.turn_id!r} of conversation {conversation_id!r}")


def _with_passages(stores: Stores, tenant: str, conversation_id: str,
                   turns: list[IndexedTurn]) -> list[tuple[IndexedTurn, list[TurnPassage]]]:
    """Each turn with its stored passages in order, read in one call for the page of turns."""
    by_turn: dict[str, list[TurnPassage]] = {}
    for passage in stores.vectors.passages_of_turns(tenant, conversation_id, [turn.turn_id for turn in turns]):
        by_turn.setdefault(passage.turn_id, []).append(passage)
    return [(turn, by_turn.get(turn.turn_id, [])) for turn in turns]


def _passage_line(passage: TurnPassage, turn: IndexedTurn) -> PassageLine:
    """A passage's line, held to the import's check against its turn as well as its own rules."""
    check_passage_of_turn(passage, len(turn.text), turn.subject_id)
    return PassageLine(passage=passage)


def _graph_records(stores: Stores, tenant: str, conversation_id: str) -> tuple[list[Relation], list[Cluster]]:
    """The conversation's relations (superseded ones too) and clusters, read in one go from its graph."""
    graph = stores.graph.conversation_graph(tenant, conversation_id)
    clusters = [Cluster.model_validate(data) for _, data in graph.nodes(data=True) if data["kind"] == "cluster"]
    relations = [Relation.model_validate(data) for _, _, data in graph.edges(data=True)]
    return (sorted(relations, key=lambda r: (r.created_at, r.relation_id)),
            sorted(clusters, key=lambda c: c.cluster_id))
