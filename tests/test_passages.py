"""Long messages as passages: each passage of a long turn is searchable by meaning, a turn ranks by its best
passage, and evidence shows that passage, not the whole message (real embedded stores, built by ``Memory.add``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

from compassmem.core.config import Settings
from compassmem.core.contracts.query import QueryRequest
from compassmem.core.contracts.search import SearchScope
from compassmem.library.memory import Memory
from compassmem.core.models import Turn
from compassmem.text.passages import PASSAGE_WORDS, passage_spans
from compassmem.sinks import event_payload as layout
from compassmem.sinks.vector_store import HitSearch

# Short words, so that 3,000 of them fit in one turn (16 KiB).
TOPICS = {
    "testing": ["A test should check one thing and say in its name what that is.",
                "A test that fails now and then is worse than none, as we learn to not look at red.",
                "Tests of the whole app talk to real parts that the test sets up on its own.",
                "To know what ran is not to know if it was right."],
    "gardening": ["Beans want six hours of sun and a deep drink of water once a week.",
                  "A layer of bark on the bed keeps the soil cool and wet in the hot months.",
                  "Cut off the low leaves once the first pods set, to keep rot away.",
                  "Peel and core from the kitchen make a rich mix for next year's beds."],
    "trains": ["The first line for the public ran in the north of England two ages ago.",
               "One gauge won out, as most lands in the west took it in the end.",
               "Night trains with beds are back on a few long routes.",
               "New signals let more trains use the same track with no risk."],
    "cooking": ["A good stock cooks slow and is not let to boil hard.",
                "Salt the pot of water well, then save a cup of it for the sauce.",
                "Let the roast rest a bit so the juice stays in when you cut it.",
                "Warm the seeds in a dry pan till they smell of nuts."],
    "sleep": ["Most of us need from seven to nine hours of rest each night.",
              "A bright screen late at night can hold off the pull of sleep.",
              "A cool, dark room helps you drift off much more quickly.",
              "A cup of tea or coffee in the late day can keep you up at night."],
}
FACT = ("For the office itself, the finance team reserved 48,000 euros every quarter to renovate the Lisbon "
        "branch, covering new desks, better lighting and a quieter meeting room.")
FACT_QUESTION = "How much money did you say was set aside each quarter to refurbish the Portuguese office?"


def _paragraph(topic: str, words: int = 140) -> str:
    sentences, out = TOPICS[topic], []
    while len(" ".join(out).split()) < words:
        out.append(sentences[len(out) % len(sentences)])
    return " ".join(out)


def _long_answer(fact_paragraph: int | None) -> str:
    """About 3,000 words in 22 paragraphs; the fact, when given, is the paragraph at that index."""
    topics = list(TOPICS)
    paragraphs = [_paragraph(topics[n % len(topics)]) for n in range(22)]
    if fact_paragraph is not None:
        paragraphs[fact_paragraph] = f"{FACT} {_paragraph('sleep', 110)}"
    return "\n\n".join(paragraphs)


def chat_of_long_answers() -> list[Turn]:
    """Three long answers in conversation 'advice'; the fact is in the fifth paragraph of the first ('m1')."""
    exchanges = [
        ("Can you give me a long overview of practical advice for everyday life and work?", _long_answer(4)),
        ("And another overview like that, please, for my team's newsletter.", _long_answer(None)),
        ("Thanks. One more, covering the same ground but shorter if you can.", _long_answer(None)),
    ]
    start = datetime(2024, 5, 2, 18, 0, tzinfo=UTC)
    turns = []
    for n, (ask, answer) in enumerate(exchanges):
        for offset, (speaker, text) in enumerate((("user", ask), ("assistant", answer))):
            turns.append(Turn(conversation_id="advice", turn_id=f"m{2 * n + offset}", speaker=speaker, text=text,
                              timestamp=start + timedelta(minutes=10 * n + offset), session_id="1"))
    return turns


def test_a_long_text_is_cut_into_passages_that_cover_every_word_at_paragraph_ends() -> None:
    text = _long_answer(4)
    spans = passage_spans(text)
    assert 3_000 <= len(text.split()) <= 3_500
    assert len(spans) >= 20
    assert all(len(text[start:end].split()) <= PASSAGE_WORDS for start, end in spans)
    # In order, no overlap, every word in exactly one passage.
    assert all(end <= next_start for (_, end), (next_start, _) in zip(spans, spans[1:], strict=False))
    assert sum(len(text[start:end].split()) for start, end in spans) == len(text.split())
    # A paragraph of fewer words than a passage is never split.
    assert any(text[start:end].startswith(FACT) for start, end in spans)
    assert passage_spans("A short reply.") == [(0, len("A short reply."))]
    # One sentence longer than a passage is cut by words.
    run_on = " ".join(["word"] * (2 * PASSAGE_WORDS + 5))
    assert [len(run_on[s:e].split()) for s, e in passage_spans(run_on)] == [PASSAGE_WORDS, PASSAGE_WORDS, 5]


def test_a_fact_in_the_fifth_paragraph_of_a_3000_word_answer_is_found_and_shown(embedder, tmp_path: Path) -> None:  # noqa: ANN001
    # Asked of the assistant's side ("you"), as a user asks about an answer: the ranking model's prior for short
    # turns in chats of long answers (docs/decisions/003-fitted-ranking.md) is not what this test is about.
    question = FACT_QUESTION
    with Memory(Settings(data_dir=tmp_path), embedder=embedder) as memory:
        memory.add(chat_of_long_answers())
        answer = memory.query(QueryRequest(conversation_id="advice", question=question, budget_turns=3))
        # The store's passage search finds the passage and reports it as its turn, with its index ...
        vector = memory.embedder.embed([question])[0]
        hits = memory.stores.vectors.hits(SearchScope(tenant="default", conversation_ids=("advice",)),
                                          [HitSearch("passage", vector, 3)])[0]
        # ... closer to the question than the turn's own vector, which knows its opening only.
        opening = memory.stores.vectors.get_turn("default", "advice", "m1")
    assert opening is not None and opening.embedding is not None
    assert hits[0].score > float(np.dot(vector, opening.embedding)) + 0.05
    assert hits[0].turn_id == "m1" and hits[0].passage >= 1
    assert answer.turn_ids[0] == "m1"
    shown = next(t for item in answer.evidence for t in item.turns if t.turn_id == "m1")
    whole = chat_of_long_answers()[1].text
    # The evidence is the passage holding the fact, where its span says, not the 3,000 words.
    assert shown.span is not None and whole[shown.span[0]: shown.span[1]] == shown.text
    assert "48,000 euros" in shown.text
    assert len(shown.text.split()) <= PASSAGE_WORDS


def test_forgetting_a_turn_or_a_conversation_takes_its_passages(embedder, tmp_path: Path) -> None:  # noqa: ANN001
    turns = chat_of_long_answers()
    scope = SearchScope(tenant="default", conversation_ids=("advice",))
    with Memory(Settings(data_dir=tmp_path), embedder=embedder) as memory:
        memory.add(turns)
        vector = memory.embedder.embed(["practical advice"])[0]

        def found(turn_id: str) -> bool:
            hits = memory.stores.vectors.hits(scope, [HitSearch("passage", vector, 500)])[0]
            return any(hit.turn_id == turn_id for hit in hits)

        def stored() -> int:  # every passage point of the conversation, searched or not
            return memory.stores.vectors._count(layout.tenant_points("default", "advice", layout.PASSAGE_KIND))  # noqa: SLF001

        later = [len(passage_spans(turn.indexed_text())) - 1 for turn in turns]
        assert stored() == sum(later) and later[3] >= 20
        assert found("m3") and found("m1")
        memory.redact_turn("advice", "m3")
        assert stored() == sum(later) - later[3]
        assert not found("m3") and found("m1")
        memory.forget("advice")
        assert stored() == 0


def test_the_hot_tier_locates_the_passages_a_search_finds_so_none_is_read_from_the_store(  # noqa: ANN001
        embedder, tmp_path: Path) -> None:
    """A passage hit names a passage point; the turn it stands for is wherever the hot tier holds it, so a warm
    query reads no payload of its passage hits. Hits equal those read from the store, and a passage the tier
    does not hold (here: after a forget of the tier's entries) is still read from the store."""
    from compassmem.core.models import passage_point_key

    question = FACT_QUESTION
    scope = SearchScope(tenant="default", conversation_ids=("advice",))
    with Memory(Settings(data_dir=tmp_path), embedder=embedder) as memory:
        memory.add(chat_of_long_answers())  # the add leaves what it wrote in the hot tier
        store = memory.stores.vectors
        vector = memory.embedder.embed([question])[0]
        search = [HitSearch("passage", vector, 40)]
        from_payloads = store.hits(scope, search)[0]
        assert len(from_payloads) == 3 and any(hit.passage >= 1 for hit in from_payloads)

        reads: list[list[int]] = []
        read_payloads = store._payloads  # noqa: SLF001

        def counted(keys, fields):  # noqa: ANN001, ANN202
            reads.append(list(keys))
            return read_payloads(keys, fields)

        asked_fields: list[object] = []
        query_keys = store._query_keys  # noqa: SLF001

        def searched(queries, payload_keys):  # noqa: ANN001, ANN202
            asked_fields.extend(payload_keys)
            return query_keys(queries, payload_keys)

        store._payloads, store._query_keys = counted, searched  # noqa: SLF001
        located = store.hits(scope, search, memory.hot.locator(scope))[0]
        assert located == from_payloads
        assert asked_fields == [None] and reads == []  # searched without payloads, and nothing read after

        # Each passage after a turn's first is located with its index; past the turn's last passage nothing is.
        long_turn = chat_of_long_answers()[1]
        count = len(passage_spans(long_turn.indexed_text()))
        keys = [passage_point_key("default", "advice", "m1", index) for index in range(1, count + 1)]
        where = memory.hot.locate("default", keys)
        assert [where[key].passage for key in keys[:-1]] == list(range(1, count))
        assert {where[key].turn_id for key in keys[:-1]} == {"m1"} and keys[-1] not in where

        memory.hot.invalidate("default", "advice")  # what a forget or a redaction does to the tier
        assert store.hits(scope, search, memory.hot.locator(scope))[0] == from_payloads
        assert reads and {key for read in reads for key in read} >= {
            passage_point_key("default", "advice", hit.turn_id, hit.passage) for hit in from_payloads if hit.passage}


def test_a_forget_takes_the_passage_keys_from_the_hot_tier_and_no_tenant_locates_anothers(  # noqa: ANN001
        embedder, tmp_path: Path) -> None:
    """Canary: the tier's passage keys hold where a long turn's passages are; another tenant never learns of them,
    and after a forget no key of them is located and no held text holds the fact's words."""
    from compassmem.core.models import passage_point_key

    with Memory(Settings(data_dir=tmp_path), embedder=embedder) as memory:
        memory.add(chat_of_long_answers())
        count = len(passage_spans(chat_of_long_answers()[1].indexed_text()))
        keys = [passage_point_key("default", "advice", "m1", index) for index in range(1, count)]
        assert len(memory.hot.locate("default", keys)) == count - 1
        assert memory.hot.locate("other", keys) == {}
        # The same conversation and turn ids in another tenant are other points, located only in that tenant.
        assert not set(keys) & {passage_point_key("other", "advice", "m1", index) for index in range(1, count)}

        memory.forget("advice")
        assert memory.hot.locate("default", keys) == {}
        assert not any("48,000 euros" in text for entry in memory.hot._entries.values() for text in entry.texts)  # noqa: SLF001
        assert not any(held[3] == "m1" for held in memory.hot._turn_points.values())  # noqa: SLF001
