"""Continuing a stored conversation where an uninterrupted run would be: ``compassmem ingest`` run again after
Ctrl-C, or on a longer version of the same file (``Memory.add``).

A run keeps each conversation's memory-building state in its process (the worker keeps it in its table), so a new
``Memory`` started a stored conversation cold: its segmentation cut again where the earlier run had stopped, and
its merges and relations ignored the stored events. When an input repeats all of a conversation's stored turns
before its new ones, the state is rebuilt instead: the stored turns are replayed in the input's order, with their
stored vectors (no embedding) and nothing written, which leaves the state that a run over them held then.

The replayed state's open segment holds the last stored turns, which the earlier run closed: at the end of its
input (``add`` ends each call's open segments), or at a boundary that a later turn decided, which it never wrote.
What that close wrote is replaced when the segment closes again (``ReopenedTail``): the event it built is deleted,
an event it merged into and the relations it changed are written back as the state holds them, and relations it
added between held events are deleted. Topic clusters are not rolled back: the next reclustering rewrites them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from compassmem.core.contracts.search import SearchScope
from compassmem.core.models import IndexedTurn, Turn, partition_key
from compassmem.processors.conversation_memory import ConversationMemory, ReopenedTail
from compassmem.sinks.factory import Stores
from compassmem.write.pipeline import MemoryPipeline

StoredLookup = Callable[[Turn], IndexedTurn | None]


@dataclass(frozen=True)
class StoredPrefix:
    """A conversation's stored turns, as an input repeats them before its first new turn, with their vectors."""

    tenant: str
    conversation_id: str
    turns: list[Turn]
    vectors: list[np.ndarray]


def stored_prefixes(turns: Sequence[Turn], fresh: Sequence[Turn], stored: StoredLookup,
                    stores: Stores) -> list[StoredPrefix]:
    """The conversations of ``turns`` that have new turns (``fresh``) after repeating every turn memory holds of
    them; a conversation whose input leaves stored turns out, or starts with a new one, continues as before."""
    new = {(turn.key, turn.turn_id) for turn in fresh}
    by_conversation: dict[str, list[Turn]] = {}
    for turn in turns:
        by_conversation.setdefault(turn.key, []).append(turn)
    prefixes = []
    for key, given in by_conversation.items():
        first_new = next((i for i, turn in enumerate(given) if (key, turn.turn_id) in new), 0)
        # Repeats within the input were left out of ``fresh`` too: the first of each is the stored one.
        repeated: dict[str, Turn] = {}
        for turn in given[:first_new]:
            repeated.setdefault(turn.turn_id, turn)
        if not repeated:
            continue
        tenant, conversation_id = given[0].tenant, given[0].conversation_id
        if stores.vectors.count_turns(SearchScope.conversation(tenant, conversation_id)) != len(repeated):
            continue
        pairs = [(turn, held) for turn in repeated.values()
                 if (held := stored(turn)) is not None and held.embedding is not None]
        if len(pairs) == len(repeated):
            prefixes.append(StoredPrefix(
                tenant, conversation_id,
                # As stored: a resent turn keeps the time it was first stored with (write/turn_ids.py).
                [turn.model_copy(update={"timestamp": held.timestamp}) for turn, held in pairs],
                [np.asarray(held.embedding, dtype=np.float32) for _, held in pairs]))
    return prefixes


def resume(pipeline: MemoryPipeline, stores: Stores, prefix: StoredPrefix) -> None:
    """Give the pipeline the conversation's memory as an uninterrupted run would hold it after the stored turns."""
    pipeline.memories.pop(partition_key(prefix.tenant, prefix.conversation_id), None)
    memory = pipeline.memory_for(prefix.tenant, prefix.conversation_id)
    memory.replay(prefix.turns, prefix.vectors)
    memory.reopened = _reopened_tail(memory, stores, prefix.tenant, prefix.conversation_id)


def _reopened_tail(memory: ConversationMemory, stores: Stores, tenant: str,
                   conversation_id: str) -> ReopenedTail | None:
    """What the stores hold of the replayed open segment's earlier close (the events its turns point at)."""
    open_ids = [t.turn.turn_id for t in memory.segmenter.open_turns]
    closed_into = {turn.event_id for turn in stores.vectors.get_turns(tenant, conversation_id, open_ids)}
    if not closed_into:
        return None
    held = {*memory.evicted_pending, *memory.events}
    # That close related its event only to held events; a relation with an end outside them is older.
    window = held | closed_into
    active = memory.ledger.active
    return ReopenedTail(
        retract_events=sorted(closed_into - held),
        restore_events=sorted(closed_into & held),
        retract_relations=[r.relation_id for r in stores.graph.relations_touching(tenant, conversation_id,
                                                                                  sorted(closed_into))
                           if r.relation_id not in active and r.source in window and r.target in window],
        restore_relations=[relation_id for relation_id, r in active.items()
                           if r.source in closed_into or r.target in closed_into])
