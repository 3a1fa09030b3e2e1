"""The optional LLM category labels (``LlmTurnLabeller``) against the local chat-completions server
(fake_chat_server.py): the kinds of thing a turn names, for instances WordNet does not know ("Valorant" -> "video
game"), stored on the turn and searched as categories; bounded requests; a failure leaves the lexicon's categories.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fake_chat_server import FakeChatServer

from compassmem.core.config import Settings
from compassmem.core.contracts.search import SearchScope
from compassmem.llm.client import ChatClient
from compassmem.llm.steps import (
    LABEL_TURN_CHARS,
    LABEL_TURNS,
    LABELS_PER_TURN,
    LlmTurnLabeller,
    llm_steps,
    parse_labels,
)
from compassmem.core.models import Turn
from compassmem.text.categories import category_term, category_terms
from compassmem.text.lexicon import noun_lexicon
from compassmem.text.text_features import sparse_keyword_vector
from compassmem.retrieval.decomposition import analyse
from compassmem.sinks.factory import Stores
from compassmem.sinks.vector_store import HitSearch

TIMEOUT_S = 0.5
START = datetime(2024, 3, 4, 9, 0, tzinfo=UTC)
GAME_TURN = "I spent the whole weekend playing Valorant with my cousins, we finally reached the gold rank."
TEXTS = [
    "Good morning! How was your weekend?",
    GAME_TURN,
    "That sounds like a lot of fun. I mostly read novels these days.",
    "Which one are you reading right now?",
    "A long mystery set in Lisbon, I cannot put it down.",
    "My sister started a pottery class on Thursdays as well.",
    "Our kitchen tap broke again, the plumber comes on Monday.",
    "We should plan a picnic at the lake when it gets warmer.",
]


@pytest.fixture
def llm(fake_llm: tuple[FakeChatServer, str]) -> tuple[FakeChatServer, str]:
    fake_llm[0].reset()
    return fake_llm


def chat(texts: list[str], conversation_id: str = "c1") -> list[Turn]:
    return [Turn(conversation_id=conversation_id, turn_id=f"T{number}", speaker=("Ann", "Bob")[number % 2],
                 text=text, session_id="1", timestamp=START + timedelta(minutes=number))
            for number, text in enumerate(texts, start=1)]


def labelling(messages: list[dict[str, Any]]) -> str:
    """An LLM that knows Valorant is a video game and reading is a hobby: one line per numbered turn."""
    lines = []
    for line in messages[-1]["content"].splitlines():
        number = line.split(".", 1)[0]
        kinds = "video game, game" if "Valorant" in line else "hobby" if "novels" in line else "-"
        lines.append(f"{number}: {kinds}")
    return "\n".join(lines)


def labeller(url: str) -> LlmTurnLabeller:
    return LlmTurnLabeller(ChatClient(url, "test-model", timeout_s=TIMEOUT_S))


@pytest.mark.parametrize(("reply", "expected"), [
    ("1: video game, Sport\n2: -\n3: board games; cooking", {1: ["video game", "sport"], 3: ["board games", "cooking"]}),
    ("Here are the labels:\n1) \"musical instrument\"\n2. pet / dog", {1: ["musical instrument"], 2: ["pet", "dog"]}),
    ("1: a, b2b, the thing that is too long, x-ray\n7: game\n0: game", {1: ["x-ray"]}),
    ("1: a, b, c, d, e, f, g, h", {}),
    ("1: book, book, novel, story, poem, essay, letter, note", {1: ["book", "novel", "story", "poem", "essay"]}),
    ("no numbered lines at all", {}),
])
def test_replies_are_read_line_by_line_and_bounded(reply: str, expected: dict[int, list[str]]) -> None:
    assert parse_labels(reply, 3) == expected
    assert all(len(labels) <= LABELS_PER_TURN for labels in parse_labels(reply, 3).values())


def test_labels_are_kept_only_when_the_lexicon_knows_them(llm: tuple[FakeChatServer, str]) -> None:
    fake, url = llm
    fake.reply = "1: video games, zorbleflux, game\n2: -"
    labels = labeller(url)(chat(TEXTS[1:3]))
    assert labels == {"T1": ["video games", "game"]}
    assert "Valorant" in fake.requests[0]["messages"][-1]["content"]


def test_requests_are_bounded_in_turns_and_characters(llm: tuple[FakeChatServer, str]) -> None:
    fake, url = llm
    fake.respond = labelling
    turns = chat([f"Turn {n}: " + "we argued about the garden fence again " * 40 for n in range(2 * LABEL_TURNS + 3)])
    labeller(url)(turns)
    sent = [r["messages"][-1]["content"].splitlines() for r in fake.requests]
    assert [len(lines) for lines in sent] == [LABEL_TURNS, LABEL_TURNS, 3]
    assert all(len(line) <= len("16. Ann: ") + LABEL_TURN_CHARS + 4 for lines in sent for line in lines)
    assert all(r["max_tokens"] <= 24 * LABEL_TURNS for r in fake.requests)


def test_a_turn_seen_before_is_not_asked_again(llm: tuple[FakeChatServer, str]) -> None:
    fake, url = llm
    fake.respond = labelling
    step = labeller(url)
    first = step(chat(TEXTS))
    assert first == {"T2": ["video game", "game"], "T3": ["hobby"]} and len(fake.requests) == 1
    assert step(chat(TEXTS)) == first and len(fake.requests) == 1  # a replay, or the event closing again
    changed = chat([*TEXTS[:1], GAME_TURN.replace("Valorant", "chess")])
    assert step(changed) == {} and len(fake.requests) == 2  # the same turn id with another text is asked anew
    assert len(fake.requests[1]["messages"][-1]["content"].splitlines()) == 1


@pytest.mark.parametrize("mode", ["slow", "error", "garbage", "wrong-shape"])
def test_a_failing_llm_leaves_no_labels_and_pauses_the_step(llm: tuple[FakeChatServer, str], mode: str) -> None:
    fake, url = llm
    fake.mode = mode
    step = labeller(url)
    assert step(chat(TEXTS)) == {} and fake.requests  # asked (a 5xx is retried once by the client)
    fake.reset()
    fake.respond = labelling
    assert step(chat(TEXTS)) == {} and fake.requests == []  # paused: the stream goes on offline


def test_an_unreadable_reply_is_asked_again_later(llm: tuple[FakeChatServer, str]) -> None:
    fake, url = llm
    fake.reply = "I am not sure what you mean."
    step = labeller(url)
    assert step(chat(TEXTS[:2])) == {}
    fake.respond = labelling
    assert step(chat(TEXTS[:2])) == {"T2": ["video game", "game"]} and len(fake.requests) == 2


def test_labels_add_their_categories_to_the_turn_s_terms() -> None:
    lexicon = noun_lexicon()
    video_game = category_term(lexicon.senses("video_game")[0])
    assert video_game not in category_terms(GAME_TURN)  # WordNet does not know Valorant
    labelled = set(category_terms(GAME_TURN, ["video game"]))
    assert {category_term(s) for s in lexicon.categories("video_game")} <= labelled and video_game in labelled
    assert category_terms(GAME_TURN, ["zorbleflux"]) == category_terms(GAME_TURN)


def found_by_category(stores: Stores, question: str) -> list[str]:
    """The turns the query engine's category search finds for a question (``QueryEngine`` adds them to the
    candidates of a question that gathers instances)."""
    analysis = analyse(question)
    assert analysis.aggregate and analysis.categories
    labels = sparse_keyword_vector(category_term(synset) for synset in analysis.categories)
    [hits] = stores.vectors.hits(SearchScope(tenant="default"), [HitSearch("turn", labels, 10)])
    return [hit.turn_id for hit in hits]


def test_the_library_finds_an_instance_by_the_kind_the_llm_named(llm: tuple[FakeChatServer, str], embedder,  # noqa: ANN001
                                                                  tmp_path: Path) -> None:
    from compassmem.library.memory import Memory

    fake, url = llm
    fake.respond = labelling
    question = "What video games does Ann play?"
    online = Settings(_env_file=None, data_dir=tmp_path / "on", llm_url=url, llm_timeout_s=TIMEOUT_S,
                      llm_categories=True)
    assert llm_steps(online).labeller is not None
    with Memory(online, embedder=embedder) as memory:
        memory.add(chat(TEXTS))
        stored = memory.stores.vectors.get_turn("default", "c1", "T2")
        assert found_by_category(memory.stores, question) == ["T2"]
        assert memory.query(question, conversation_id="c1").turn_ids[0] == "T2"
    assert fake.requests and stored is not None and stored.category_labels == ["video game", "game"]
    offline = Settings(_env_file=None, data_dir=tmp_path / "off")
    with Memory(offline, embedder=embedder) as memory:
        memory.add(chat(TEXTS))
        stored = memory.stores.vectors.get_turn("default", "c1", "T2")
        assert found_by_category(memory.stores, question) == []
    assert stored is not None and stored.category_labels == [] and "Valorant" in stored.text
