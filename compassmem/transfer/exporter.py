"""Export: a tenant's conversations (or one) from the stores into the JSONL records of ``records``.

Conversation by conversation and event page by event page, so memory holds one page of events, their turns and
the turns' passages plus one conversation's clusters and relations at a time, however large the tenant is. Events
come from the vector store (the graph store keeps no observations or embeddings), provisional ones (open segments)
included. A long turn's passages (text/passages.py) follow it, so an imported memory finds what its later
paragraphs say as the exported one did.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from functools import partial
from typing import TextIO

import structlog
from pydantic import ValidationError

from compassmem.core.models import Cluster, IndexedTurn, Relation, TurnPassage
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


def export_memory(stores: Stores, out: TextIO, *, tenant: str, vector_space: str, dim: int,
                  conversation_id: str | None = None) -> TransferSummary:
    """Write the tenant's memory (only ``conversation_id``'s when given) to ``out``."""
    out.write(dump(Header(tenant=tenant, conversation_id=conversation_id, vector_space=vector_space, dim=dim,
                          exported_at=datetime.now(UTC))))
    total, conversations = Counts(), 0
    for current in [conversation_id] if conversation_id else _conversation_ids(stores, tenant):
        counts = _export_conversation(stores, out, tenant, current)
        out.write(dump(ConversationEnd(conversation_id=current, counts=counts)))
        total, conversations = total + counts, conversations + 1
        log.info("export.conversation_written", tenant=tenant, conversation_id=current, **counts.model_dump())
    out.write(dump(End(conversations=conversations)))
    out.flush()
    return TransferSummary(tenant=tenant, conversations=conversations, counts=total)


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


def _export_conversation(stores: Stores, out: TextIO, tenant: str, conversation_id: str) -> Counts:
    turns = passages = events = 0
    cursor: str | None = None
    while True:
        page = list_events(stores, tenant, conversation_id, limit=EVENT_PAGE, cursor=cursor)
        ids = [node.id for node in page.events]
        turns_by_event: dict[str, list[tuple[RecordLine, list[RecordLine]]]] = {}
        for turn, its_passages in _with_passages(stores, tenant, conversation_id,
                                                  stores.vectors.turns_of_events(tenant, ids)):
            what = f"turn {turn.turn_id!r} of conversation {conversation_id!r}"
            turns_by_event.setdefault(turn.event_id, []).append((
                _line(partial(TurnLine, turn=turn), what),
                [_line(partial(_passage_line, passage, turn), f"passage {passage.index} of {what}")
                 for passage in its_passages]))
        for event in stores.vectors.get_events(tenant, ids):
            out.write(dump(_line(partial(EventLine, event=event), f"event {event.event_id!r}")))
            for turn_line, passage_lines in turns_by_event.get(event.event_id, []):
                out.write(dump(turn_line))
                out.writelines(map(dump, passage_lines))
                turns, passages = turns + 1, passages + len(passage_lines)
            events += 1
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    relations, clusters = _graph_records(stores, tenant, conversation_id)
    for cluster in clusters:
        out.write(dump(_line(partial(ClusterLine, cluster=cluster), f"topic {cluster.cluster_id!r}")))
    for relation in relations:
        out.write(dump(_line(partial(RelationLine, relation=relation), f"relation {relation.relation_id!r}")))
    return Counts(turns=turns, passages=passages, events=events, relations=len(relations), clusters=len(clusters))


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
