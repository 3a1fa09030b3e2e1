"""Shared pytest fixtures.

Each group of fixtures is marked with the tests that use it; add new groups below rather than reusing names.
"""

from __future__ import annotations

import uuid
import zlib
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from compassmem.models import (
    Cluster,
    Event,
    Granularity,
    IndexedTurn,
    Observation,
    Relation,
    RelationType,
    TemporalInfo,
    TimeAnchor,
    event_id_for,
    relation_id_for,
)
from compassmem.sinks.falkordb_server import EmbeddedFalkorDB
from compassmem.sinks.vector_store import SparseVector

# --- storage layer: tests/test_vector_stores.py, tests/test_graph_store.py ----------------------------------

STORE_TEST_DIM = 32
STORE_TEST_T0 = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)


def _store_test_embedding(seed: int, dim: int) -> list[float]:
    """A deterministic random unit vector."""
    vector = np.random.default_rng(seed).normal(size=dim)
    return (vector / np.linalg.norm(vector)).tolist()


def _store_test_sparse(words: Sequence[str]) -> SparseVector:
    """Keyword vector with one stable index per word (term frequency 1), as a keyword extractor would give."""
    indices = sorted({zlib.crc32(w.lower().encode()) & 0x7FFFFFFF for w in words})
    return SparseVector(indices=indices, values=[1.0] * len(indices))


@pytest.fixture
def store_dim() -> int:
    """Embedding size the store tests use (small keeps them fast; the code path is the same as 384)."""
    return STORE_TEST_DIM


@pytest.fixture
def sparse_keywords() -> Callable[[Sequence[str]], SparseVector]:
    """``sparse_keywords(["meeting", "zanzibar"])``: a keyword sparse vector, one stable index per word."""
    return _store_test_sparse


@pytest.fixture
def event_builder() -> Callable[..., Event]:
    """``event_builder(conversation_id, first_turn, ...)``: a complete Event with observations, anchors, embedding."""

    def build(
        conversation_id: str = "conv-1",
        first_turn: int = 1,
        *,
        tenant: str = "default",
        summary: str | None = None,
        keywords: Sequence[str] = (),
        seed: int | None = None,
        turns: int = 2,
        cluster_id: str | None = None,
        version: int = 1,
        dim: int = STORE_TEST_DIM,
    ) -> Event:
        start = STORE_TEST_T0 + timedelta(minutes=10 * first_turn)
        observations = [
            Observation(
                turn_id=f"D1:{first_turn + i}",
                speaker="Caroline" if i % 2 == 0 else "Melanie",
                text=f"turn {first_turn + i} of {conversation_id}: {' '.join(keywords)}",
                timestamp=start + timedelta(seconds=i),
                session_id="session_1",
            )
            for i in range(turns)
        ]
        return Event(
            tenant=tenant,
            event_id=event_id_for(tenant, conversation_id, observations[0].turn_id),
            conversation_id=conversation_id,
            observations=observations,
            summary=summary or f"event at turn {first_turn} about {' '.join(keywords) or 'nothing'}",
            participants=["Caroline", "Melanie"],
            actions=["went to"],
            entities=["LGBTQ support group"],
            keywords=list(keywords),
            temporal_info=TemporalInfo(start=start, end=observations[-1].timestamp),
            time_anchors=[
                TimeAnchor(
                    expression="last Saturday",
                    start=date(2023, 5, 6),
                    end=date(2023, 5, 6),
                    granularity=Granularity.DAY,
                    turn_id=observations[0].turn_id,
                )
            ],
            cluster_id=cluster_id,
            embedding=_store_test_embedding(seed if seed is not None else first_turn, dim),
            version=version,
        )

    return build


@pytest.fixture
def turn_builder() -> Callable[..., IndexedTurn]:
    """``turn_builder(conversation_id, turn, event_id=..., keywords=...)``: an IndexedTurn with its embedding.

    Its turn id is ``D1:<turn>`` and its embedding that of ``event_builder(conversation_id, turn)`` unless ``seed``
    says otherwise, so a turn and an event can share a vector. ``event_id`` defaults to the event that would
    start at this turn.
    """

    def build(
        conversation_id: str = "conv-1",
        turn: int = 1,
        *,
        tenant: str = "default",
        event_id: str | None = None,
        keywords: Sequence[str] = (),
        seed: int | None = None,
        timestamp: datetime | None = None,
        dim: int = STORE_TEST_DIM,
    ) -> IndexedTurn:
        turn_id = f"D1:{turn}"
        return IndexedTurn(
            tenant=tenant,
            conversation_id=conversation_id,
            turn_id=turn_id,
            event_id=event_id or event_id_for(tenant, conversation_id, turn_id),
            speaker="Caroline" if turn % 2 else "Melanie",
            text=f"turn {turn} of {conversation_id}: {' '.join(keywords)}",
            timestamp=timestamp or STORE_TEST_T0 + timedelta(minutes=turn),
            session_id="session_1",
            has_time_expression=turn % 3 == 0,
            embedding=_store_test_embedding(seed if seed is not None else turn, dim),
        )

    return build


@pytest.fixture
def relation_builder() -> Callable[..., Relation]:
    """``relation_builder(source_event, target_id, type_, ...)``: a Relation with its deterministic id."""

    def build(
        source: Event,
        target: str,
        type_: RelationType = RelationType.CAUSAL,
        *,
        subtype: str | None = None,
        confidence: float = 0.8,
        superseded_by: str | None = None,
        minutes: int = 0,
    ) -> Relation:
        return Relation(
            tenant=source.tenant,
            conversation_id=source.conversation_id,
            relation_id=relation_id_for(source.event_id, target, type_, subtype),
            source=source.event_id,
            target=target,
            type=type_,
            subtype=subtype,
            confidence=confidence,
            evidence="because",
            created_at=STORE_TEST_T0 + timedelta(minutes=minutes),
            superseded_by=superseded_by,
        )

    return build


@pytest.fixture
def cluster_builder() -> Callable[..., Cluster]:
    """``cluster_builder(member_events, cluster_id, label=...)``: a Cluster of those events' conversation."""

    def build(events: Sequence[Event], cluster_id: str, label: Sequence[str] = ("topic",)) -> Cluster:
        return Cluster(
            tenant=events[0].tenant,
            conversation_id=events[0].conversation_id,
            cluster_id=cluster_id,
            members=[e.event_id for e in events],
            centroid=[0.25] * 4,
            label=list(label),
        )

    return build


@pytest.fixture
def store_tenant() -> str:
    """A tenant name no other test uses, so tests can share one FalkorDB / shard without seeing each other."""
    return f"t-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="session")
def embedded_falkordb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedFalkorDB]:
    """One embedded FalkorDB for the test session (tests isolate themselves by tenant)."""
    with EmbeddedFalkorDB(tmp_path_factory.mktemp("falkordb-session")) as server:
        yield server


@pytest.fixture
def own_falkordb_dir(tmp_path: Path) -> Path:
    """A data directory for a test that starts, kills and restarts its own FalkorDB."""
    return tmp_path / "falkordb"


# --- The real embedder (processor, pipeline and CLI tests) -------------------------------------------------


@pytest.fixture(scope="session")
def embedder():  # noqa: ANN201 - SentenceTransformerEmbedder, imported lazily so store tests skip torch
    from compassmem.embedding import SentenceTransformerEmbedder

    return SentenceTransformerEmbedder()
