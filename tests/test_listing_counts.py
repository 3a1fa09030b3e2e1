"""Counts in listings are exact at every moment: an open segment written under the id of an event the graph store
already holds (the worker applying again turns another path stored: a file ingested, then produced; a batch redone
after a crash) is that event being written again, listed and counted once, not beside it.

Issue #57 item 4: `/v1/conversations` showed the 24-turn sample conversation as 31 turns and 6 events (one listed
twice) for as long as the segment stayed open, after the tour produced a file `compassmem ingest` had built."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from test_library import SAMPLE, library_settings

from compassmem.library.memory import Memory
from compassmem.monitoring.memory_health import MemoryHealthMonitor
from compassmem.retrieval.graph_views import conversation_overview, focused_graph
from compassmem.retrieval.listing import conversation_graph, list_conversations, list_events
from compassmem.sinks.batching import event_keyword_vector
from compassmem.write.importers import read_turns

CONVERSATION = "priya-tom"
TENANT = "default"


@pytest.fixture(scope="module")
def memory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Memory]:
    with Memory(library_settings(tmp_path_factory.mktemp("listing") / "data")) as opened:
        opened.add(list(read_turns(Path(SAMPLE), timezone="UTC", tenant=TENANT, subject_id=None)), warm=False)
        yield opened


def _figures(memory: Memory) -> dict[str, object]:
    stores = memory.stores
    [summary] = list_conversations(stores, TENANT).conversations
    events = list_events(stores, TENANT, CONVERSATION, limit=100).events
    graph = conversation_graph(stores, TENANT, CONVERSATION)
    overview = conversation_overview(stores, TENANT, CONVERSATION)
    focused = focused_graph(stores, TENANT, CONVERSATION, unclustered=True, topics=[t.id for t in overview.topics
                                                                                     if t.id is not None])
    health = MemoryHealthMonitor(stores, None).report(TENANT, conversation=CONVERSATION, watch=False)
    assert graph is not None and overview is not None and focused is not None
    return {
        "summary": (summary.events, summary.turns),
        "event ids": sorted(e.id for e in events),
        "listed turns": sum(len(e.turn_ids) for e in events),
        "graph": (graph.counts.events, graph.limits.events_total, graph.limits.events_omitted),
        "overview": (overview.counts.events, overview.counts.turns),
        "focused": focused.limits.events_total,
        "health": (health.totals.events, health.totals.turns, health.conversations[0].turns),
    }


def test_an_open_segment_under_a_stored_events_id_is_counted_once(memory: Memory) -> None:
    before = _figures(memory)
    assert before["summary"] == (len(before["event ids"]), 24) and before["listed turns"] == 24
    stored = memory.stores.vectors.conversation_events(TENANT, CONVERSATION)
    last = max(stored, key=lambda e: e.temporal_info.start)
    # What the worker writes when it applies again the turns of an event another path closed: the same id, open.
    reopened = last.model_copy(update={"provisional": True})
    memory.stores.vectors.upsert_events([reopened], [event_keyword_vector(reopened)])
    try:
        assert _figures(memory) == before
    finally:
        memory.stores.vectors.upsert_events([last], [event_keyword_vector(last)])
