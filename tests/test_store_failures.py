"""A store that refuses one conversation's records, or that is down: the batch processor, on real stores.

The graph store here is the real FalkorDB store behind a thin proxy that refuses (or fails to reach the server
for) chosen writes, standing in for a record FalkorDB cannot hold or a server that is restarting: a fault
injector, not a mock; every write it lets through lands in the real stores.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import redis.exceptions

from compassmem.core.config import Settings
from compassmem.core.contracts.dead_letters import DeadLetterReason, DeadLetterStage
from compassmem.sinks.factory import Stores, open_stores
from compassmem.streams.decoding import RawRecord
from compassmem.streams.processor import (
    BatchInput,
    MemoryStreamProcessor,
    StoreUnavailableError,
    StoreWriteError,
)
from compassmem.publish.producer import encode_turn

from conftest import expected_snapshot, interleave, reference_snapshots, stores_snapshot, stream_conversation


class FaultyGraph:
    """The real graph store, refusing writes that touch ``refuse`` and failing the next ``down`` writes as a server
    that cannot be reached would."""

    def __init__(self, inner: Any, refuse: str | None = None, down: int = 0) -> None:  # noqa: ANN401
        self.inner, self.refuse, self.down = inner, refuse, down

    def _check(self, items: Any) -> None:  # noqa: ANN401
        if self.down > 0:
            self.down -= 1
            raise redis.exceptions.ConnectionError("Error 111 connecting to FalkorDB: Connection refused.")
        if self.refuse and any(item.conversation_id == self.refuse for item in items):
            raise redis.exceptions.ResponseError("Strings cannot contain the NUL character")

    def upsert_events(self, events: Any) -> None:  # noqa: ANN401
        self._check(events)
        self.inner.upsert_events(events)

    def upsert_relations(self, relations: Any) -> None:  # noqa: ANN401
        self._check(relations)
        self.inner.upsert_relations(relations)

    def __getattr__(self, name: str) -> Any:  # noqa: ANN401
        return getattr(self.inner, name)


@pytest.fixture
def stores(tmp_path: Path, embedded_falkordb) -> Iterator[Stores]:  # noqa: ANN001
    with open_stores(Settings(_env_file=None, data_dir=tmp_path, falkordb_url=embedded_falkordb.url)) as opened:
        yield opened


def records_of(turns: list) -> list[RawRecord]:
    out = []
    for offset, turn in enumerate(turns):
        key, value = encode_turn(turn)
        out.append(RawRecord(topic="t.turns", partition=0, offset=offset, key=key, value=value))
    return out


def test_a_conversation_the_store_refuses_is_dead_lettered_and_the_rest_goes_on(
        stores: Stores, embedder, store_tenant: str) -> None:  # noqa: ANN001
    good = stream_conversation("good", 1, tenant=store_tenant)
    poison = stream_conversation("poison", 2, tenant=store_tenant)
    turns = interleave([good, poison])
    records = records_of(turns)
    faulty = dataclasses.replace(stores, graph=FaultyGraph(stores.graph, refuse="poison"))
    processor = MemoryStreamProcessor(embedder, faulty)
    batch = BatchInput(records=records, states={}, tombstones={})
    # As the worker's checkpoint runs a batch on its store thread (step 1): apply it, then flush the sinks.
    with pytest.raises(StoreWriteError) as refused:
        processor.sinks.write(partial(processor.process, batch))
    assert not isinstance(refused.value, StoreUnavailableError)

    out = processor.sinks.write(partial(processor.process_isolating, batch, sleep=lambda _: None))
    letters = [letter for letter in out.dead_letters]
    assert {(letter.stage, letter.reason_code) for letter in letters} == {
        (DeadLetterStage.STORE, DeadLetterReason.STORE_REJECTED)}
    assert sorted(letter.offset for letter in letters) == [r.offset for r, t in zip(records, turns, strict=True)
                                                           if t.conversation_id == "poison"]
    # The good conversation is complete; the poison one is in neither store (the events the vector store took
    # before the graph refused were removed), and its position moved past its dead-lettered turns.
    reference = reference_snapshots(good, embedder)
    key = f"{store_tenant}/good"
    # The stream keeps the last segment open (provisional) until the conversation goes idle: close it to compare.
    processor.pipeline.write(processor.pipeline.memories[key].close_open_segment())
    assert stores_snapshot(stores.vectors, stores.graph, key) == expected_snapshot(reference[key])
    assert stores.vectors.conversation_events(store_tenant, "poison") == []
    assert stores.graph.conversation_graph(store_tenant, "poison").number_of_nodes() == 0
    from compassmem.streams.state import decode_header

    header = decode_header(out.states[f"{store_tenant}/poison"][0])
    assert header.last_offset == max(letter.offset for letter in letters)


def test_an_unavailable_store_fails_the_batch_as_unavailable_and_a_retry_builds_it_whole(
        stores: Stores, embedder, store_tenant: str) -> None:  # noqa: ANN001
    turns = stream_conversation("retry", 3, tenant=store_tenant)
    faulty = dataclasses.replace(stores, graph=FaultyGraph(stores.graph, down=1))
    processor = MemoryStreamProcessor(embedder, faulty)
    batch = BatchInput(records=records_of(turns), states={}, tombstones={})
    with pytest.raises(StoreUnavailableError):
        processor.sinks.write(partial(processor.process, batch))
    # The store is back: the same batch, from its starting state.
    out = processor.sinks.write(partial(processor.process, batch))
    assert out.stats.applied_turns == len(turns) and not out.dead_letters
    key = f"{store_tenant}/retry"
    processor.pipeline.write(processor.pipeline.memories[key].close_open_segment())
    reference = reference_snapshots(turns, embedder)
    assert stores_snapshot(stores.vectors, stores.graph, key) == expected_snapshot(reference[key])
