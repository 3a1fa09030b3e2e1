"""Topic names the explorer shows: the topic's content words, never a speaker's name, a stop word or a contraction.

Before, a topic was named by the commonest keywords of its events, and LoCoMo's development conversations opened on
"caroline, support, help", "jon, gina, work" and "reminds, john, nature's". The names are now the terms a topic's
events share and the rest of the conversation says less (``compassmem/text/topic_terms.py``).

Memory: a hand-made conversation (tests/data/topic_labels_chat.json: two people who call each other by name, say
"I'll" and "love", about pottery, a marathon, a garden and a puppy), reclustered every 4 events so that its 16 events
get topics; and, when LOCOMO_DATA names the LoCoMo file (the repository does not ship it), its conversations.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from compassmem.core.config import Settings
from compassmem.core.models import Turn
from compassmem.library.memory import Memory
from compassmem.sinks.factory import Stores
from compassmem.sinks.falkordb_backend import FalkorDBGraphStore
from compassmem.sinks.qdrant_edge_backend import EdgeVectorStore
from compassmem.text.text_features import STOP_WORDS
from compassmem.text.topic_terms import name_terms, spelt_out, topic_terms
from compassmem.write.importers import read_turns
from compassmem.write.pipeline import PipelineConfig

CHAT = json.loads((Path(__file__).parent / "data" / "topic_labels_chat.json").read_text())
TENANT = "topic-labels"
LOCOMO_VARIABLE = "LOCOMO_DATA"  # the benchmarks' (benchmarks/common.py)


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory, embedder: Any, embedded_falkordb: Any) -> Iterator[Stores]:
    vectors = EdgeVectorStore(tmp_path_factory.mktemp("topic-labels") / "qdrant", embedder.dim)
    built = Stores(vectors=vectors, graph=FalkorDBGraphStore.from_embedded(embedded_falkordb))
    try:
        yield built
    finally:
        built.close()


def _memory(stores: Stores, embedder: Any, recluster_window: int = 50) -> Memory:
    return Memory(Settings(_env_file=None), stores=stores, embedder=embedder,  # type: ignore[call-arg]
                  pipeline_config=PipelineConfig(recluster_window=recluster_window))


def _faults(label_words: list[str], speakers: set[str]) -> list[str]:
    """What a topic name must not hold: a speaker's name (or its possessive), a stop word, a contraction."""
    names = {name.lower() for speaker in speakers for name in re.findall(r"[A-Za-z]+", speaker)}
    faults = []
    for word in label_words:
        if word.split("'")[0] in names or word in names:
            faults.append(f"{word!r} (a speaker's name)")
        elif word in STOP_WORDS:
            faults.append(f"{word!r} (a stop word)")
        elif "'" in word:
            faults.append(f"{word!r} (a contraction)")
    return faults


def _topic_faults(memory: Memory, conversation_id: str, speakers: set[str]) -> tuple[list[str], list[str]]:
    """The conversation's topic names, and what is wrong with each (its label and every keyword shown with it)."""
    topics = [t for t in memory.overview(conversation_id, tenant=TENANT).topics if t.id is not None]
    labels = [t.label for t in topics]
    faults = [f"{conversation_id} {t.label!r}: {fault}" for t in topics
              for fault in _faults(list(dict.fromkeys([*t.label.split(", "), *t.keywords])), speakers)]
    return labels, faults


def test_a_topic_is_named_by_its_own_terms_not_by_names_stop_words_or_what_every_event_says() -> None:
    members = [["carolin", "i'll", "pottery", "kiln", "love"], ["carolin", "glaze", "kiln", "pottery", "love"],
               ["carolin", "kiln", "bowl", "love", "about"]]
    others = [["carolin", "love", "marathon", "run"], ["carolin", "love", "garden", "tomato"]]
    # "carolin" is a speaker's name, "i'll" a contraction, "about" a stop word, "love" in every event; "glaze" and
    # "bowl" are in one event of three; "pottery" is in fewer of the conversation's other events than "kiln".
    assert topic_terms(members, [*members, *others], name_terms(["Caroline", "Melanie"]), 3) == ["pottery", "kiln"]


def test_terms_are_spelt_out_as_words_with_the_very_same_stem() -> None:
    texts = ["Caroline drove the car to the kiln", "the cars and Caroline's memories", "dairy-free milk"]
    assert spelt_out(["car", "memori", "dairy-fre", "natur"], texts) == ["car", "memories", "dairy-free", "natur"]


def test_the_topics_of_a_hand_made_conversation_are_named_by_what_they_are_about(stores: Stores,
                                                                                   embedder: Any) -> None:
    start = datetime(2024, 1, 1, 9, tzinfo=UTC)
    speakers = CHAT["speakers"]
    turns = [Turn(tenant=TENANT, conversation_id="hand-made-topics", turn_id=f"S{s + 1}:{i + 1}",
                  speaker=speakers[i % 2], text=text, timestamp=start + timedelta(days=s, minutes=i),
                  session_id=str(s + 1))
             for s, session in enumerate(CHAT["sessions"]) for i, text in enumerate(session)]
    with _memory(stores, embedder, recluster_window=4) as memory:
        memory.add(turns)
        labels, faults = _topic_faults(memory, "hand-made-topics", set(speakers))
    print(f"\nhand-made conversation's topics: {labels}")
    assert len(labels) >= 3 and all(labels)
    assert not faults, faults
    # What the sessions are about names the topics.
    named = {word for label in labels for word in label.split(", ")}
    assert len(named & {"pottery", "kiln", "glaze", "marathon", "garden", "vegetable", "puppy", "biscuit"}) >= 3


def _locomo() -> Path:
    data = os.environ.get(LOCOMO_VARIABLE)
    if not data or not Path(data).is_file():
        pytest.skip(f"LoCoMo data not found: set {LOCOMO_VARIABLE} to a LoCoMo JSON file (the repository does not "
                    "ship it; see docs/benchmarks.md)")
    return Path(data)


def test_no_topic_of_the_locomo_conversations_is_named_by_a_speaker_or_a_stop_word(stores: Stores,
                                                                                  embedder: Any) -> None:
    turns = [t.model_copy(update={"tenant": TENANT}) for t in read_turns(_locomo())]
    conversations = sorted({t.conversation_id for t in turns})
    every_label: list[str] = []
    every_fault: list[str] = []
    with _memory(stores, embedder) as memory:
        memory.add(turns)
        for conversation_id in conversations:
            speakers = {t.speaker for t in turns if t.conversation_id == conversation_id}
            labels, faults = _topic_faults(memory, conversation_id, speakers)
            print(f"\n{conversation_id} ({', '.join(sorted(speakers))}): {labels}")
            every_label += labels
            every_fault += faults
    assert len(every_label) >= 2 * len(conversations)
    assert not every_fault, f"{len(every_fault)} faults in {len(every_label)} topic names: {every_fault}"
