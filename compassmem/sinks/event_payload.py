"""How events and turns are laid out as Qdrant points, and the store logic both vector backends share.

Events and turns are points of one collection, told apart by the payload field ``kind``. Both carry the dense
embedding under one name; their keywords go to separate sparse vectors (``keywords`` for events,
``turn_keywords`` for turns), so the IDF modifier weighs a term by its rarity among events for event search and
among turns for turn search. A point carries only its own sparse vector.

The payload is the record without its embedding (datetimes and dates as ISO strings), plus ``kind`` and, for
events, a few derived filterable fields. Tenant and conversation_id stay top-level keyword fields: every query
filters on them. ``subject_id`` (null when the turns named none) is an indexed top-level keyword field too, for
queries across one subject's conversations. A turn's payload keeps its ``event_id``, so deleting an event can delete
its turns by filter.

A turn's payload keeps its ``timestamp`` (a datetime index) and ``metadata``, and so does each later passage of a
long turn: a query's ``TurnFilter`` narrows turn and passage searches alike. Its time range also admits the turns of
events with a resolved time anchor in it, read from the events' ``time_anchors`` first (one more read per search
batch, only when a query gives a range).

``PointStore`` implements the whole ``VectorStore`` interface on this layout, in terms of five engine primitives
(upsert, scroll, query, delete, count) taking backend-neutral ``PointData`` and ``PointFilter`` values; each backend
only translates those into its engine's types.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from abc import abstractmethod
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
import structlog

from compassmem.core.contracts.search import SearchScope, SparseVector, TurnFilter
from compassmem.core.models import (
    Event,
    IndexedTurn,
    TimeAnchor,
    TurnPassage,
    passage_point_id,
    turn_point_id,
    turn_point_key,
)
from compassmem.text.text_features import states_standing_wish
from compassmem.text.time_keys import turn_time_keys
from compassmem.text.time_resolution import resolve_time_expressions
from compassmem.sinks.vector_store import (
    STANDING_WISH_MARK,
    EventHit,
    HitSearch,
    HotEventRow,
    HotRecords,
    HotTurnRow,
    TurnHit,
    TurnLocation,
    TurnLocator,
    VectorStore,
)

DENSE_VECTOR = "dense"
SPARSE_VECTOR = "keywords"
TURN_SPARSE_VECTOR = "turn_keywords"
SPARSE_VECTORS = (SPARSE_VECTOR, TURN_SPARSE_VECTOR)

TENANT_FIELD = "tenant"
CONVERSATION_FIELD = "conversation_id"
KIND_FIELD = "kind"
EVENT_ID_FIELD = "event_id"
# "open" for a provisional event (a conversation's open segment), "closed" otherwise: a keyword, because qdrant-edge's
# Python filters do not match boolean payload values (MatchValue(True) finds nothing), so `provisional` cannot be used.
SEGMENT_FIELD = "segment"
OPEN_SEGMENT, CLOSED_SEGMENT = "open", "closed"
# The customer, user or account a conversation is about (``Turn.subject_id``), on events and turns alike; absent
# (null) when the turns named none.
SUBJECT_FIELD = "subject_id"
EVENT_KIND = "event"
TURN_KIND = "turn"
# The later passages of a long turn (models.TurnPassage): a dense vector, no keywords (the turn's own keywords cover
# its whole text), and where in the turn's text it lies.
PASSAGE_KIND = "passage"
PASSAGE_FIELD = "passage"
# Keyword payload indexes besides the tenant one (which the backends create with is_tenant=True).
# A turn's times as keys (text/time_keys.py): derived from its text and timestamp when it is written, dropped
# on the way back, searched by the time channel of a query (HitSearch.time_keys).
TIME_KEYS_FIELD = "time_keys"
# A turn's marks (vector_store.STANDING_WISH_MARK), derived from its text when it is written like its time keys.
MARKS_FIELD = "marks"
KEYWORD_INDEX_FIELDS = (CONVERSATION_FIELD, KIND_FIELD, EVENT_ID_FIELD, SUBJECT_FIELD, SEGMENT_FIELD, TIME_KEYS_FIELD,
                        MARKS_FIELD)
# When a turn (and each later passage of it) was said, an ISO 8601 string: a query's time range searches it.
TIMESTAMP_FIELD = "timestamp"
DATETIME_INDEX_FIELDS = (TIMESTAMP_FIELD,)
# The turn's metadata, on turns and passages: a query's metadata filter matches its top-level keys.
METADATA_FIELD = "metadata"
# An event's resolved time anchors (objects with ``start`` and ``end`` dates): a query's time range admits the turns
# of an event with one overlapping it.
TIME_ANCHORS_FIELD = "time_anchors"

# Added to the event for filtering (e.g. "which event holds turn D3:5", time ranges); dropped on the way back.
DERIVED_FIELDS = ("turn_ids", "session_ids", "start_ts", "end_ts", KIND_FIELD, SEGMENT_FIELD)

log = structlog.get_logger(__name__)

_SCROLL_PAGE = 256

# What a search hit (TurnHit, EventHit) reads of a point's payload, and what equal scores are ordered by.
HIT_FIELDS = (CONVERSATION_FIELD, "turn_id", EVENT_ID_FIELD, "speaker")
# What a passage hit reads: its turn, found by key afterwards like a turn hit whose payload was not read.
PASSAGE_HIT_FIELDS = (CONVERSATION_FIELD, "turn_id", PASSAGE_FIELD)

# What the hot tier reads of an event's and a turn's payload (HotEventRow, HotTurnRow): an event's payload also holds
# its observations (every turn's text again), frame and summary, which a query does not read from there.
HOT_FIELDS = (KIND_FIELD, EVENT_ID_FIELD, CONVERSATION_FIELD, "cluster_id", "temporal_info", "time_anchors", "turn_id",
              "speaker", "text", "timestamp", "session_id", "has_time_expression")

_POINT_NAMESPACE = uuid.UUID("3f0c2a9e-6a53-4d0f-9a51-6c1d3b1f7e42")


def point_id(event_id: str) -> str:
    """The Qdrant point id of an event: the event id itself when it is a UUID (the pipeline's ids are).

    Any other string maps to a stable UUID, because Qdrant accepts only UUIDs and unsigned integers.
    """
    try:
        return str(uuid.UUID(event_id))
    except ValueError:
        return str(uuid.uuid5(_POINT_NAMESPACE, event_id))


# What of an event stays a payload field of its own: what filters, the hot tier (HOT_FIELDS) and the order of hits
# read. The rest (observations, summary, frame lists) travels as one JSON text, EVENT_BODY_FIELD: qdrant-edge
# converts every payload string separately (docs/decisions/007-store-access-shapes.md). Stores written before the
# body existed hold every field on its own; both read back the same.
EVENT_OWN_FIELDS = frozenset({TENANT_FIELD, EVENT_ID_FIELD, CONVERSATION_FIELD, SUBJECT_FIELD, "cluster_id",
                              "temporal_info", "time_anchors", "version", "provisional"})
EVENT_BODY_FIELD = "body"
_EVENT_BODY = frozenset(Event.model_fields) - EVENT_OWN_FIELDS - {"embedding"}


def event_to_payload(event: Event) -> dict[str, Any]:
    payload = event.model_dump(mode="json", include=EVENT_OWN_FIELDS)
    payload[EVENT_BODY_FIELD] = event.model_dump_json(include=_EVENT_BODY)
    payload["turn_ids"] = event.turn_ids
    payload["session_ids"] = event.session_ids
    payload["start_ts"] = event.temporal_info.start.timestamp()
    payload["end_ts"] = event.temporal_info.end.timestamp()
    payload[KIND_FIELD] = EVENT_KIND
    payload[SEGMENT_FIELD] = OPEN_SEGMENT if event.provisional else CLOSED_SEGMENT
    return payload


def event_from_payload(payload: dict[str, Any], embedding: list[float] | None = None) -> Event:
    fields = {key: value for key, value in payload.items() if key not in DERIVED_FIELDS}
    body = fields.pop(EVENT_BODY_FIELD, None)
    if body is not None:
        fields.update(json.loads(body))
    fields["embedding"] = embedding
    return Event.model_validate(fields)


def hot_records_of(points: Sequence[tuple[Payload, Any]], dim: int) -> HotRecords:
    """Hot-tier rows from points read with ``HOT_FIELDS``: no pydantic model per point (a cold load of a few hundred
    turns spent a third of its time validating what the store had validated when it was written), and the vectors
    of all turns in one array."""
    events: list[HotEventRow] = []
    event_vectors: list[list[float]] = []
    turns: list[tuple[HotTurnRow, list[float]]] = []
    for payload, vectors in points:
        fields = _required(payload)
        dense = dense_of(vectors)
        if dense is None:
            continue
        if fields.get(KIND_FIELD) == EVENT_KIND:
            events.append(HotEventRow(
                event_id=fields[EVENT_ID_FIELD], conversation_id=fields[CONVERSATION_FIELD],
                cluster_id=fields.get("cluster_id"), start=datetime.fromisoformat(fields["temporal_info"]["start"]),
                time_anchors=tuple(TimeAnchor.model_validate(a) for a in fields.get("time_anchors") or ())))
            event_vectors.append(dense)
        else:
            turns.append((HotTurnRow(
                conversation_id=fields[CONVERSATION_FIELD], turn_id=fields["turn_id"], event_id=fields[EVENT_ID_FIELD],
                speaker=fields["speaker"], text=fields["text"], timestamp=datetime.fromisoformat(fields["timestamp"]),
                session_id=fields.get("session_id"), has_time_expression=bool(fields.get("has_time_expression"))),
                dense))
    turns.sort(key=lambda pair: (pair[0].timestamp, pair[0].turn_id))
    return HotRecords(
        events=events, event_vectors=np.asarray(event_vectors, dtype=np.float32).reshape(len(events), dim),
        turns=[row for row, _ in turns],
        turn_vectors=np.asarray([vector for _, vector in turns], dtype=np.float32).reshape(len(turns), dim))


def turn_to_payload(turn: IndexedTurn) -> dict[str, Any]:
    # No empty label list or metadata on every point: qdrant-edge converts each payload value, and most turns have
    # neither.
    empty = {name for name in ("category_labels", METADATA_FIELD) if not getattr(turn, name)}
    payload = turn.model_dump(mode="json", exclude={"embedding", *empty})
    payload[KIND_FIELD] = TURN_KIND
    if turn.has_time_expression:
        payload[TIME_KEYS_FIELD] = turn_time_keys(turn.text, resolve_time_expressions(turn.text, turn.timestamp))
    if states_standing_wish(turn.text):
        payload[MARKS_FIELD] = [STANDING_WISH_MARK]
    return payload


def turn_from_payload(payload: dict[str, Any], embedding: list[float] | None = None) -> IndexedTurn:
    fields = {key: value for key, value in payload.items() if key not in (KIND_FIELD, TIME_KEYS_FIELD, MARKS_FIELD)}
    fields["embedding"] = embedding
    return IndexedTurn.model_validate(fields)


def dense_of(vector: Any) -> list[float] | None:
    """The dense part of a returned point's vectors (named-vector dict), if it was requested."""
    if isinstance(vector, dict):
        dense = vector.get(DENSE_VECTOR)
        if dense is None:
            return None
        # Both engines hand back a list of floats already: no copy, float by float, of 384 values per turn on every
        # hot-tier miss.
        return dense if type(dense) is list else [float(x) for x in dense]
    return None


def event_from_point(payload: dict[str, Any] | None, vector: Any) -> Event:
    return event_from_payload(_required(payload), dense_of(vector))


def turn_from_point(payload: dict[str, Any] | None, vector: Any) -> IndexedTurn:
    return turn_from_payload(_required(payload), dense_of(vector))


def _required(payload: dict[str, Any] | None) -> dict[str, Any]:
    if payload is None:
        raise RuntimeError("the vector store returned a point without its payload")
    return payload


@dataclass(frozen=True)
class PointData:
    """One point to upsert, before a backend turns it into its engine's point type."""

    id: str
    dense: list[float]
    sparse_name: str | None
    sparse: SparseVector | None
    payload: dict[str, Any]

    def vectors(self, sparse: Callable[[SparseVector], Any]) -> dict[str, Any]:
        """The point's named vectors, its sparse one converted by ``sparse`` (a passage has none)."""
        if self.sparse_name is None or self.sparse is None:
            return {DENSE_VECTOR: self.dense}
        return {DENSE_VECTOR: self.dense, self.sparse_name: sparse(self.sparse)}


def _check_batch(
    noun: str,
    labels: Sequence[str],
    embeddings: Sequence[list[float] | None],
    sparse: Sequence[SparseVector],
    dim: int,
) -> None:
    """Reject a malformed batch before any of it is written, with a message naming the record."""
    if len(labels) != len(sparse):
        raise ValueError(f"got {len(labels)} {noun}s but {len(sparse)} sparse vectors; they pair up by position")
    for label, embedding in zip(labels, embeddings, strict=True):
        if embedding is None:
            raise ValueError(f"{label} has no embedding; embed it before storing it")
        if len(embedding) != dim:
            raise ValueError(f"{label} has a {len(embedding)}-d embedding; the store holds {dim}-d vectors")
    for vector in sparse:
        if len(vector.indices) != len(vector.values):
            raise ValueError("a sparse vector needs as many values as indices")


def check_upsert_batch(events: Sequence[Event], sparse: Sequence[SparseVector], dim: int) -> None:
    _check_batch("event", [f"event {e.event_id}" for e in events], [e.embedding for e in events], sparse, dim)


def check_turn_batch(turns: Sequence[IndexedTurn], sparse: Sequence[SparseVector], dim: int) -> None:
    labels = [f"turn {t.turn_id} of {t.tenant}/{t.conversation_id}" for t in turns]
    _check_batch("turn", labels, [t.embedding for t in turns], sparse, dim)


def passage_points(passages: Sequence[TurnPassage], dim: int) -> list[PointData]:
    for passage in passages:
        if len(passage.embedding) != dim:
            raise ValueError(f"passage {passage.index} of turn {passage.turn_id} of {passage.tenant}/"
                             f"{passage.conversation_id} has a {len(passage.embedding)}-d embedding; the store holds "
                             f"{dim}-d vectors")
    return [PointData(passage_point_id(p.tenant, p.conversation_id, p.turn_id, p.index), list(p.embedding), None,
                      None, passage_to_payload(p))
            for p in passages]


def passage_to_payload(passage: TurnPassage) -> dict[str, Any]:
    payload = {TENANT_FIELD: passage.tenant, CONVERSATION_FIELD: passage.conversation_id, "turn_id": passage.turn_id,
               SUBJECT_FIELD: passage.subject_id, KIND_FIELD: PASSAGE_KIND, PASSAGE_FIELD: passage.index,
               "start": passage.start, "end": passage.end}
    if passage.timestamp is not None:
        payload[TIMESTAMP_FIELD] = passage.timestamp.isoformat()
    if passage.metadata:
        payload[METADATA_FIELD] = passage.metadata
    return payload


def passage_from_point(payload: dict[str, Any] | None, vector: Any) -> TurnPassage:
    fields = _required(payload)
    embedding = dense_of(vector)
    if embedding is None:
        raise RuntimeError("the vector store returned a passage point without its vector")
    return TurnPassage(tenant=fields[TENANT_FIELD], conversation_id=fields[CONVERSATION_FIELD],
                       turn_id=fields["turn_id"], subject_id=fields.get(SUBJECT_FIELD), index=fields[PASSAGE_FIELD],
                       start=fields["start"], end=fields["end"], embedding=embedding,
                       timestamp=fields.get(TIMESTAMP_FIELD), metadata=fields.get(METADATA_FIELD) or {})


def check_query_vector(vector: Sequence[float], dim: int) -> None:
    if len(vector) != dim:
        raise ValueError(f"query vector has {len(vector)} dimensions; the store holds {dim}-d vectors")


def event_points(events: Sequence[Event], sparse: Sequence[SparseVector], dim: int) -> list[PointData]:
    check_upsert_batch(events, sparse, dim)
    return [
        PointData(point_id(e.event_id), list(e.embedding or []), SPARSE_VECTOR, keywords, event_to_payload(e))
        for e, keywords in zip(events, sparse, strict=True)
    ]


def turn_points(turns: Sequence[IndexedTurn], sparse: Sequence[SparseVector], dim: int) -> list[PointData]:
    check_turn_batch(turns, sparse, dim)
    return [
        PointData(
            turn_point_id(t.tenant, t.conversation_id, t.turn_id),
            list(t.embedding or []),
            TURN_SPARSE_VECTOR,
            keywords,
            turn_to_payload(t),
        )
        for t, keywords in zip(turns, sparse, strict=True)
    ]


@dataclass(frozen=True)
class TimeRange:
    """A date-time payload field within [since, until], either end open when None (a date reads as its midnight,
    UTC)."""

    key: str
    since: datetime | None = None
    until: datetime | None = None


@dataclass(frozen=True)
class PointFilter:
    """Which points an operation touches, independent of the engines' filter classes.

    Every ``match`` entry must hold (a tuple value matches any of its items, a scalar equals the value or is one of
    the items of a list value); with ``point_ids``, only those points; every ``within`` range must hold; for every
    ``some`` entry (an array field of objects, a filter), at least one object of that array meets that filter; with
    ``any_of``, at least one of those filters must hold as well.
    """

    match: Mapping[str, str | int | tuple[str, ...]]
    point_ids: tuple[str, ...] | None = None
    any_of: tuple[PointFilter, ...] = ()
    within: tuple[TimeRange, ...] = ()
    some: tuple[tuple[str, PointFilter], ...] = ()


@dataclass(frozen=True)
class Nearest:
    """One nearest-neighbour search as the engines take it: by vector ``using``, within ``where``."""

    query: list[float] | SparseVector
    using: str
    where: PointFilter
    limit: int


def tenant_points(tenant: str, conversation_id: str | None = None, kind: str | None = None) -> PointFilter:
    """A tenant's points, optionally only one conversation's and only one kind."""
    match = {TENANT_FIELD: tenant}
    if conversation_id is not None:
        match[CONVERSATION_FIELD] = conversation_id
    if kind is not None:
        match[KIND_FIELD] = kind
    return PointFilter(match)


def points_in(where: SearchScope, kind: str) -> PointFilter:
    """One kind of point of a search scope: a list of conversations, one subject, or the whole tenant."""
    match: dict[str, str | tuple[str, ...]] = {TENANT_FIELD: where.tenant, KIND_FIELD: kind}
    if where.conversation_ids is not None:
        ids = tuple(sorted(set(where.conversation_ids)))
        match[CONVERSATION_FIELD] = ids[0] if len(ids) == 1 else ids
    if where.subject_id is not None:
        match[SUBJECT_FIELD] = where.subject_id
    return PointFilter(match)


def _hit_points(points: PointFilter, search: HitSearch) -> PointFilter:
    """A search's points: those of its kind in its scope (``points``), and only those meeting its time keys and
    marks when it has some."""
    match = dict(points.match)
    if search.time_keys:
        match[TIME_KEYS_FIELD] = tuple(search.time_keys)
    if search.marks:
        match[MARKS_FIELD] = tuple(search.marks)
    return dataclasses.replace(points, match=match)


def anchored_events(where: SearchScope, turns: TurnFilter) -> PointFilter:
    """The scope's events with a resolved time anchor overlapping the filter's range: an anchor is whole days, so it
    overlaps when it starts on or before ``time_to`` and ends on or after ``time_from``'s day (UTC)."""
    since = turns.time_from.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0) \
        if turns.time_from is not None else None
    bounds = tuple(bound for bound in (TimeRange("start", until=turns.time_to), TimeRange("end", since=since))
                   if bound.since is not None or bound.until is not None)
    return PointFilter(points_in(where, EVENT_KIND).match, some=((TIME_ANCHORS_FIELD, PointFilter({}, within=bounds)),))


def admitted(where: SearchScope, kind: str, anchored: Sequence[dict[str, Any]]) -> PointFilter:
    """One kind of point of a search scope, turns and passages only where the scope's turn filter admits them: said
    within its time range or of an ``anchored`` event (the payloads ``anchored_events`` found), and carrying its
    metadata values. Events carry no turn fields, so the filter leaves them as they are."""
    points = points_in(where, kind)
    turns = where.turns
    if turns is None or kind == EVENT_KIND:
        return points
    match = {**points.match, **{f"{METADATA_FIELD}.{key}": value for key, value in turns.metadata}}
    if not turns.timed:
        return PointFilter(match)
    said = PointFilter({}, within=(TimeRange(TIMESTAMP_FIELD, turns.time_from, turns.time_to),))
    if not anchored:
        return PointFilter(match, within=said.within)
    if kind == TURN_KIND:
        of_events = (PointFilter({EVENT_ID_FIELD: tuple(sorted({p[EVENT_ID_FIELD] for p in anchored}))}),)
    else:
        # A passage names its turn, not the turn's event: the anchored events' turns, conversation by conversation
        # (a turn id is unique only within its conversation).
        turn_ids: dict[str, set[str]] = {}
        for payload in anchored:
            turn_ids.setdefault(payload[CONVERSATION_FIELD], set()).update(payload["turn_ids"])
        of_events = tuple(PointFilter({CONVERSATION_FIELD: conversation_id, "turn_id": tuple(sorted(ids))})
                          for conversation_id, ids in sorted(turn_ids.items()) if ids)
    return PointFilter(match, any_of=(said, *of_events))


def turns_of(tenant: str, event_ids: Sequence[str]) -> PointFilter:
    return PointFilter({TENANT_FIELD: tenant, KIND_FIELD: TURN_KIND, EVENT_ID_FIELD: tuple(sorted(set(event_ids)))})


def _turns_by_id(tenant: str, conversation_id: str, turn_ids: Sequence[str]) -> PointFilter:
    return PointFilter(tenant_points(tenant, conversation_id, TURN_KIND).match,
                       point_ids=tuple(sorted({turn_point_id(tenant, conversation_id, t) for t in turn_ids})))


def passages_of(tenant: str, conversation_id: str, turn_ids: Sequence[str]) -> PointFilter:
    return PointFilter({**tenant_points(tenant, conversation_id, PASSAGE_KIND).match,
                        "turn_id": tuple(sorted(set(turn_ids)))})


def _turn_and_its_passages(tenant: str, conversation_id: str, turn_id: str) -> PointFilter:
    passages = PointFilter({KIND_FIELD: PASSAGE_KIND, "turn_id": turn_id})
    return PointFilter(tenant_points(tenant, conversation_id).match,
                       any_of=(_turns_by_id(tenant, conversation_id, [turn_id]), passages))


def events_by_id(tenant: str, event_ids: Sequence[str]) -> PointFilter:
    # Tenant-filtered, never by bare id, so one tenant can never read or delete another tenant's points.
    ids = tuple(sorted({point_id(event_id) for event_id in event_ids}))
    return PointFilter({TENANT_FIELD: tenant, KIND_FIELD: EVENT_KIND}, point_ids=ids)


def events_and_their_turns(tenant: str, event_ids: Sequence[str]) -> PointFilter:
    """The events (by point id) and the turn points whose ``event_id`` is one of them, all of one tenant."""
    turns = PointFilter({KIND_FIELD: TURN_KIND, EVENT_ID_FIELD: tuple(sorted(set(event_ids)))})
    return PointFilter({TENANT_FIELD: tenant}, any_of=(events_by_id(tenant, event_ids), turns))


def in_requested_order(events: Sequence[Event], event_ids: Sequence[str]) -> list[Event]:
    """Events in the order their ids were asked for (engines return them in id order)."""
    by_id = {event.event_id: event for event in events}
    seen: set[str] = set()
    ordered: list[Event] = []
    for event_id in event_ids:
        if event_id in by_id and event_id not in seen:
            seen.add(event_id)
            ordered.append(by_id[event_id])
    return ordered


def in_time_order(events: Sequence[Event]) -> list[Event]:
    return sorted(events, key=lambda e: (e.temporal_info.start, e.temporal_info.end, e.event_id))


def in_turn_order(turns: Sequence[IndexedTurn]) -> list[IndexedTurn]:
    return sorted(turns, key=lambda t: (t.timestamp, t.turn_id))


Payload = dict[str, Any] | None


class PointStore(VectorStore):
    """The ``VectorStore`` methods on the point layout above; a backend supplies the engine primitives.

    Returned embeddings are unit-normalised: Qdrant stores cosine vectors normalised.
    """

    dim: int

    # --- engine primitives -----------------------------------------------------------------------------------

    @abstractmethod
    def _upsert(self, points: Sequence[PointData]) -> None:
        """Write a non-empty batch of points (same id = replace), durably enough for ``flush``."""

    @abstractmethod
    def _scroll_page(self, where: PointFilter, offset: Any, limit: int, payload_keys: Sequence[str] | None = None,
                     vectors: bool = True) -> tuple[list[tuple[Payload, Any]], Any]:
        """(payload (only ``payload_keys`` when given), vectors with at least the dense one, or None without
        ``vectors``) of up to ``limit`` points in scope from ``offset`` on (None: from the start), and the offset of
        the next page (None: no more)."""

    @abstractmethod
    def _query_keys(self, queries: Sequence[Nearest],
                    payload_keys: Sequence[Sequence[str] | None]) -> list[list[tuple[int, Payload | None, float]]]:
        """Per query, (point key: the integer its UUID holds, the payload's ``payload_keys`` of that query or None
        when they are None, score) of its best ``limit`` points in its scope by its vector ``using``, best first; one
        engine call where it can. A payload costs more to read than the search itself (qdrant-edge: about 7 us a
        point, whichever fields).

        ``queries`` is not empty; no query is an empty sparse vector or has a limit below 1."""

    @abstractmethod
    def _payloads(self, keys: Sequence[int], payload_keys: Sequence[str]) -> dict[int, Payload]:
        """The ``payload_keys`` of the points with these keys, by key; a point that no longer exists is left out."""

    @abstractmethod
    def _delete(self, where: PointFilter) -> None: ...

    @abstractmethod
    def _count(self, where: PointFilter) -> int: ...

    # --- events ----------------------------------------------------------------------------------------------

    def upsert_events(self, events: Sequence[Event], sparse: Sequence[SparseVector]) -> None:
        self._upsert_nonempty(event_points(events, sparse, self.dim))

    def get_events(self, tenant: str, event_ids: Sequence[str]) -> list[Event]:
        if not event_ids:
            return []
        found = [event_from_point(*record) for record in self._scroll(events_by_id(tenant, event_ids))]
        return in_requested_order(found, event_ids)

    def conversation_events(self, tenant: str, conversation_id: str) -> list[Event]:
        records = self._scroll(tenant_points(tenant, conversation_id, EVENT_KIND))
        return in_time_order([event_from_point(*record) for record in records])

    def provisional_events(self, tenant: str, conversation_id: str | None = None) -> list[Event]:
        where = tenant_points(tenant, conversation_id, EVENT_KIND)
        open_segments = PointFilter({**where.match, SEGMENT_FIELD: OPEN_SEGMENT})
        return in_time_order([event_from_payload(_required(payload)) for payload, _ in self._scroll(open_segments)])

    # --- turns -----------------------------------------------------------------------------------------------

    def upsert_turns(self, turns: Sequence[IndexedTurn], sparse: Sequence[SparseVector]) -> None:
        self._upsert_nonempty(turn_points(turns, sparse, self.dim))

    def upsert_passages(self, passages: Sequence[TurnPassage]) -> None:
        self._upsert_nonempty(passage_points(passages, self.dim))

    def passages_of_turns(self, tenant: str, conversation_id: str, turn_ids: Sequence[str]) -> list[TurnPassage]:
        if not turn_ids:
            return []
        position = {turn_id: n for n, turn_id in enumerate(dict.fromkeys(turn_ids))}
        records = self._scroll(passages_of(tenant, conversation_id, turn_ids))
        found = [passage_from_point(*record) for record in records]
        return sorted(found, key=lambda p: (position[p.turn_id], p.index))

    def conversation_turns(self, tenant: str, conversation_id: str) -> list[IndexedTurn]:
        records = self._scroll(tenant_points(tenant, conversation_id, TURN_KIND))
        return in_turn_order([turn_from_point(*record) for record in records])

    def conversation_turns_without_vectors(self, tenant: str, conversation_id: str) -> list[IndexedTurn]:
        """Every turn of one conversation in timestamp order, without embeddings (what a turn said, who, when):
        ``compassmem reembed`` reads a conversation's turns to embed them again, and a vector would be 384 floats a
        turn held for nothing."""
        records = self._scroll(tenant_points(tenant, conversation_id, TURN_KIND), vectors=False)
        return in_turn_order([turn_from_point(*record) for record in records])

    def get_turn(self, tenant: str, conversation_id: str, turn_id: str) -> IndexedTurn | None:
        return next(iter(self.get_turns(tenant, conversation_id, [turn_id])), None)

    def get_turns(self, tenant: str, conversation_id: str, turn_ids: Sequence[str]) -> list[IndexedTurn]:
        if not turn_ids:
            return []
        return [turn_from_point(*record) for record in self._scroll(_turns_by_id(tenant, conversation_id, turn_ids))]

    def turns_of_events(self, tenant: str, event_ids: Sequence[str]) -> list[IndexedTurn]:
        if not event_ids:
            return []
        return in_turn_order([turn_from_point(*record) for record in self._scroll(turns_of(tenant, event_ids))])

    def hot_records(self, tenant: str, event_ids: Sequence[str], with_turns: bool = True) -> HotRecords:
        if not event_ids:
            return hot_records_of([], self.dim)
        where = events_and_their_turns(tenant, event_ids) if with_turns else events_by_id(tenant, event_ids)
        return hot_records_of(self._scroll(where, payload_keys=HOT_FIELDS), self.dim)

    def count_turns(self, scope: SearchScope) -> int:
        return self._count(self._points_of(scope, [TURN_KIND])[TURN_KIND])

    def admitted_turns(self, scope: SearchScope, event_ids: Sequence[str]) -> set[tuple[str, str]]:
        if not event_ids:
            return set()
        turns = self._points_of(scope, [TURN_KIND])[TURN_KIND]
        where = dataclasses.replace(turns, match={**turns.match, EVENT_ID_FIELD: tuple(sorted(set(event_ids)))})
        records = self._scroll(where, (CONVERSATION_FIELD, "turn_id"), vectors=False)
        return {(p[CONVERSATION_FIELD], p["turn_id"]) for p in (_required(payload) for payload, _ in records)}

    def _points_of(self, scope: SearchScope, kinds: Collection[str]) -> dict[str, PointFilter]:
        """Per point kind, its points in the scope that the scope's turn filter admits (``admitted``); the events
        with a time anchor in its range are read once for all kinds."""
        anchored: list[dict[str, Any]] = []
        if scope.turns is not None and scope.turns.timed and set(kinds) - {EVENT_KIND}:
            anchored = [_required(payload) for payload, _ in self._scroll(
                anchored_events(scope, scope.turns), (CONVERSATION_FIELD, EVENT_ID_FIELD, "turn_ids"), vectors=False)]
        return {kind: admitted(scope, kind, anchored) for kind in kinds}

    def hits(self, scope: SearchScope, searches: Sequence[HitSearch],
             locate: TurnLocator | None = None) -> list[list[TurnHit | EventHit]]:
        points = self._points_of(scope, {search.kind for search in searches})
        queries = [self._nearest_query(_hit_points(points[search.kind], search), search.query, _vector_name(search),
                                       search.limit)
                   for search in searches]
        asked = [(search, query) for search, query in zip(searches, queries, strict=True) if query is not None]
        # Where the hits are, not what they say: converting whole payloads cost more than the searches' scoring.
        answers = self._query_keys([query for _, query in asked], [_hit_fields(search, locate) for search, _ in asked]
                                   ) if asked else []
        # A passage hit stands for its turn: (turn key, the passage, score), the turn located like an unread hit
        # unless the locator knew the passage's point.
        passages = self._passages_of(scope.tenant, [answer for (search, _), answer in zip(asked, answers, strict=True)
                                                    if search.kind == "passage"], locate)
        answers = [[(*passages[key], score) for key, _, score in answer if key in passages]
                   if search.kind == "passage" else answer
                   for (search, _), answer in zip(asked, answers, strict=True)]
        unread = {key for answer in answers for key, payload, _ in answer
                  if payload is None or (isinstance(payload, _PassageOf) and payload.where is None)}
        located: Mapping[int, TurnLocation] = {}
        if unread:
            located = locate(unread) if locate is not None else {}
            missing = [key for key in unread if key not in located]
            if missing:
                read = self._payloads(missing, HIT_FIELDS)
                located = {**located, **{key: _turn_location(payload) for key, payload in read.items()}}
        found: list[list[TurnHit | EventHit]] = []
        answered = iter(answers)
        for search, query in zip(searches, queries, strict=True):
            rows = next(answered) if query is not None else []
            if search.kind in ("turn", "passage"):
                turns: dict[int, TurnHit] = {}
                for key, payload, score in rows:
                    passage, where = 0, None
                    if isinstance(payload, _PassageOf):
                        passage, where = payload.index, payload.where
                    elif payload is not None:
                        where = _turn_location(payload)
                    where = where or located.get(key)
                    # None: the point was deleted between the search and the read. A turn is listed once, by its
                    # best passage.
                    if where is not None and key not in turns:
                        turns[key] = TurnHit(where.conversation_id, where.turn_id, where.event_id, score,
                                             where.speaker, passage)
                found.append(sorted(turns.values(), key=_turn_hit_order))
            else:
                events = [EventHit(p[CONVERSATION_FIELD], p[EVENT_ID_FIELD], score)
                          for p, score in ((_required(payload), score) for _, payload, score in rows)]
                found.append(sorted(events, key=_event_hit_order))
        return found

    def _passages_of(self, tenant: str, answers: Sequence[list[tuple[int, Payload | None, float]]],
                     locate: TurnLocator | None) -> dict[int, tuple[int, _PassageOf]]:
        """Per passage point a search returned: its turn's key and which passage of the turn it is, with the turn's
        location where the locator knew the point. Points searched without payload that the locator does not know
        are read by id; a point deleted meanwhile is left out."""
        found: dict[int, tuple[int, _PassageOf]] = {}
        unread = {key for answer in answers for key, payload, _ in answer if payload is None}
        located = locate(unread) if unread and locate is not None else {}
        for key, where in located.items():
            turn = turn_point_key(tenant, where.conversation_id, where.turn_id)
            found[key] = (turn, _PassageOf(where.passage, where))
        missing = [key for key in unread if key not in located]
        read = self._payloads(missing, PASSAGE_HIT_FIELDS) if missing else {}
        payloads = {key: payload for answer in answers for key, payload, _ in answer if payload is not None}
        for key, payload in {**payloads, **read}.items():
            found[key] = (turn_point_key(tenant, payload[CONVERSATION_FIELD], payload["turn_id"]),
                          _PassageOf(int(payload[PASSAGE_FIELD])))
        return found

    # --- deletes and counts ----------------------------------------------------------------------------------

    def delete_events(self, tenant: str, event_ids: Sequence[str]) -> None:
        if event_ids:
            # One filtered delete, so an event never outlives its turns or the other way round.
            self._delete(events_and_their_turns(tenant, event_ids))

    def delete_turn(self, tenant: str, conversation_id: str, turn_id: str) -> None:
        self._delete(_turn_and_its_passages(tenant, conversation_id, turn_id))

    def delete_conversation(self, tenant: str, conversation_id: str) -> None:
        self._delete(tenant_points(tenant, conversation_id))
        log.info("vector_store.conversation_deleted", tenant=tenant, conversation_id=conversation_id)

    def delete_tenant(self, tenant: str) -> None:
        self._delete(tenant_points(tenant))
        log.info("vector_store.tenant_deleted", tenant=tenant)

    def count(self, tenant: str, conversation_id: str | None = None) -> int:
        return self._count(tenant_points(tenant, conversation_id, EVENT_KIND))

    def stored_ids(self, tenant: str, conversation_id: str | None = None) -> Iterator[tuple[str, str | None]]:
        offset: Any = None
        while True:
            page, offset = self._scroll_page(tenant_points(tenant, conversation_id), offset, _SCROLL_PAGE,
                                             (CONVERSATION_FIELD, "turn_id"), vectors=False)
            for payload, _ in page:
                stored = _required(payload)
                yield stored[CONVERSATION_FIELD], stored.get("turn_id")
            if offset is None:
                return

    def turn_tenants(self) -> list[str]:
        """Every tenant that has a turn stored, sorted, read a page of turns at a time without vectors: what
        ``compassmem reembed`` rebuilds (reading every turn point, as it does anyway)."""
        found: set[str] = set()
        offset: Any = None
        while True:
            page, offset = self._scroll_page(PointFilter({KIND_FIELD: TURN_KIND}), offset, _SCROLL_PAGE,
                                             (TENANT_FIELD,), vectors=False)
            found.update(str(_required(payload)[TENANT_FIELD]) for payload, _ in page)
            if offset is None:
                return sorted(found)

    def _upsert_nonempty(self, points: list[PointData]) -> None:
        if points:
            self._upsert(points)

    def _nearest_query(self, where: PointFilter, query: Sequence[float] | SparseVector, using: str,
                       limit: int) -> Nearest | None:
        """The engine query of a search, or None when it cannot find anything (no keywords, no limit)."""
        if limit <= 0:
            return None
        if isinstance(query, SparseVector):
            return Nearest(query, using, where, limit) if query.indices else None
        check_query_vector(query, self.dim)
        return Nearest([float(x) for x in query], using, where, limit)

    def _scroll(self, where: PointFilter, payload_keys: Sequence[str] | None = None,
                vectors: bool = True) -> list[tuple[Payload, Any]]:
        found: list[tuple[Payload, Any]] = []
        offset: Any = None
        while True:
            page, offset = self._scroll_page(where, offset, _SCROLL_PAGE, payload_keys, vectors=vectors)
            found.extend(page)
            if offset is None:
                return found


def _hit_fields(search: HitSearch, locate: TurnLocator | None) -> tuple[str, ...] | None:
    """What a search reads of its hits' payloads: nothing for turns and passages the hot tier can locate."""
    if search.kind == "event":
        return HIT_FIELDS
    if locate is not None:
        return None
    return PASSAGE_HIT_FIELDS if search.kind == "passage" else HIT_FIELDS


@dataclass(frozen=True, slots=True)
class _PassageOf:
    """In place of a payload: the hit was this passage of the turn whose key it is listed under (and where that
    turn is, when the locator knew the passage's point)."""

    index: int
    where: TurnLocation | None = None


def _vector_name(search: HitSearch) -> str:
    if not isinstance(search.query, SparseVector):
        return DENSE_VECTOR
    return TURN_SPARSE_VECTOR if search.kind == "turn" else SPARSE_VECTOR


def _turn_hit_order(hit: TurnHit) -> tuple[float, str, str, str]:
    """Best first, equal scores by ids: equal scores are common in keyword search, and the engine orders them by its
    internal point offsets, which differ between two builds of the same memory."""
    return (-hit.score, hit.conversation_id, hit.turn_id, hit.event_id)


def _event_hit_order(hit: EventHit) -> tuple[float, str, str]:
    return (-hit.score, hit.conversation_id, hit.event_id)


def _turn_location(payload: Payload | None) -> TurnLocation:
    found = _required(payload)
    return TurnLocation(found[CONVERSATION_FIELD], found["turn_id"], found[EVENT_ID_FIELD], found["speaker"])
