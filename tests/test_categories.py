"""Category labels: WordNet's noun hierarchy read offline, turns labelled with what their nouns are, and questions
that ask for a category answered by the turns naming its instances."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from compassmem.core.config import RERANKER_MODEL, Settings
from compassmem.core.contracts.query import QueryRequest
from compassmem.library.memory import Memory
from compassmem.core.models import IndexedTurn, Turn
from compassmem.embedding.embedders import make_embedder
from compassmem.text.categories import CATEGORY_PREFIX, category_term, category_terms, noun_lemmas
from compassmem.text.lexicon import noun_lexicon
from compassmem.text.text_features import sparse_keyword_vector
from compassmem.retrieval.decomposition import analyse, asked_categories
from compassmem.retrieval.engine import EngineConfig, RankingConfig
from compassmem.sinks.batching import turn_keyword_vector


def names(synsets: object) -> set[str]:
    lexicon = noun_lexicon()
    return {lexicon.name(s) for s in synsets}  # type: ignore[attr-defined]


def test_a_noun_belongs_to_the_categories_above_it_and_not_to_the_root() -> None:
    lexicon = noun_lexicon()
    swimming = names(lexicon.categories("swimming"))
    assert {"swimming", "water_sport", "sport", "activity"} <= swimming
    assert "entity" not in swimming and "abstraction" not in swimming  # everything is one: it says nothing
    assert {"city"} <= names(lexicon.categories("paris"))  # an instance belongs to what it is an instance of
    assert lexicon.lemma("cities") == "city" and lexicon.lemma("children") == "child"
    assert lexicon.lemma("board games") == "board_game"
    assert lexicon.lemma("qwertyuiop") is None


def test_a_text_names_compounds_and_proper_nouns_but_not_people_as_common_nouns() -> None:
    lemmas = noun_lemmas("John: we played board games in Paris. Camping was next, then swimming.")
    assert "board_game" in lemmas and "paris" in lemmas and "camping" in lemmas and "swimming" in lemmas
    assert "john" not in lemmas  # a name (WordNet's "john" is first a toilet)
    terms = category_terms("We went swimming and camping.")
    assert terms == category_terms("We went swimming and camping.")  # the same text, the same sparse vector
    assert all(t.startswith(CATEGORY_PREFIX) for t in terms) and len(set(terms)) == len(terms)
    activity = noun_lexicon().senses("activity")[0]
    assert category_term(activity) in terms


def test_a_turns_keyword_vector_carries_its_labels_beside_its_words() -> None:
    turn = IndexedTurn(conversation_id="c", turn_id="1", event_id="e", speaker="Ann", text="I love tennis.",
                       timestamp=datetime(2023, 5, 1, tzinfo=UTC))
    vector = turn_keyword_vector(turn)
    sport = noun_lexicon().senses("sport")[0]
    label = sparse_keyword_vector([category_term(sport)]).indices[0]
    word = sparse_keyword_vector(["tenni"]).indices[0]  # the stem of "tennis"
    assert label in vector.indices and word in vector.indices


def test_the_category_a_question_asks_for() -> None:
    lexicon = noun_lexicon()
    assert "activity" in names(asked_categories("What activities has Melanie done with her family?"))
    assert names(asked_categories("What board games has Nate played?")) == {"board_game"}
    assert "hobby" in names(asked_categories("What are Joanna's hobbies?"))
    # "instruments" is a musical instrument only in its sixth sense: every sense counts.
    assert lexicon.senses("musical_instrument")[0] in asked_categories("What instruments does Tim play?")
    assert asked_categories("When did Melanie paint a sunrise?") == []
    assert asked_categories("What does John do to share his knowledge?") == []  # a name, not a category
    assert analyse("Which cities has Jon visited?").categories


def test_a_question_asking_for_a_category_finds_the_turns_naming_its_instances(embedder, tmp_path: Path) -> None:  # noqa: ANN001
    start = datetime(2023, 5, 1, 18, 0, tzinfo=UTC)
    lines = [
        ("Bob", "How was your week, Ann? Did you play anything?"),
        ("Ann", "I scored twice at soccer on Saturday, my knees are still sore."),
        ("Bob", "Ouch. My week was quiet, mostly reading."),
        ("Ann", "I play much less than I would like, work has been hectic."),
        ("Bob", "I never understood why people care so much about sports."),
        ("Ann", "Sports channels are always on at my dad's place, he loves them."),
        ("Bob", "My cousin plays the piano every evening, it drives the neighbours mad."),
        ("Ann", "Ha, we played cards all night at her place once."),
        ("Bob", "What else did you get up to?"),
        ("Ann", "A long game of volleyball at the beach with my colleagues."),
        ("Bob", "Sounds like a good week. I mostly played with my new phone."),
        ("Ann", "People play too much on their phones, I think."),
    ]
    turns = [Turn(conversation_id="week", turn_id=f"D1:{n}", speaker=speaker, text=text,
                  timestamp=start + timedelta(minutes=n), session_id="1")
             for n, (speaker, text) in enumerate(lines, start=1)]
    with Memory(Settings(data_dir=tmp_path), embedder=embedder) as memory:
        memory.add(turns)

        def top(config: RankingConfig) -> list[str]:
            engine_config = EngineConfig(ranking=config)
            other = Memory(memory.settings, stores=memory.stores, embedder=embedder, engine_config=engine_config)
            return other.query(QueryRequest(conversation_id="week", question="What sports has Ann played?",
                                            budget_turns=6)).turn_ids

        with_labels = top(RankingConfig())
        without = top(RankingConfig(category_candidates=0, category_weight=0.0))
    # Soccer and volleyball are sports; the question shares a word with neither, but with many other turns ("sports",
    # "play"): without the labels the volleyball turn is not among the first six.
    assert {"D1:2", "D1:10"} <= set(with_labels)
    assert not {"D1:2", "D1:10"} <= set(without)


def _asked_over_sessions(embedder, data_dir: Path, sessions: list[list[tuple[str, str]]], question: str,  # noqa: ANN001
                         budget: int, reranker: str = "none") -> list[str]:
    """The first ``budget`` turns for ``question`` over sessions a week apart (turn ids D<session>:<line>)."""
    start = datetime(2023, 3, 1, 18, 0, tzinfo=UTC)
    turns = [Turn(conversation_id="ann-bob", turn_id=f"D{s}:{n}", speaker=speaker, text=text,
                  timestamp=start + timedelta(days=7 * s, minutes=n), session_id=str(s))
             for s, lines in enumerate(sessions, start=1) for n, (speaker, text) in enumerate(lines, start=1)]
    with Memory(Settings(data_dir=data_dir, reranker=reranker), embedder=embedder) as memory:
        memory.add(turns)
        return memory.query(QueryRequest(conversation_id="ann-bob", question=question, budget_turns=budget)).turn_ids


# Three sessions, each telling of one pet.
PET_SESSIONS = [
    [("Ann", "Work was long today, the quarterly report is finally done."),
     ("Bob", "Well done! Anything fun planned for the weekend?"),
     ("Ann", "Mostly walks: my dog Rex needs two hours a day or he chews the sofa."),
     ("Bob", "Ha. I will bake bread, I just bought a new oven.")],
    [("Bob", "How was the trip to your parents?"),
     ("Ann", "Lovely, we cooked together and watched old films."),
     ("Ann", "And I came home with a kitten, a grey cat called Smoke who sleeps on my keyboard."),
     ("Bob", "That sounds like trouble for your deadlines.")],
    [("Ann", "I repainted the kitchen yellow this weekend."),
     ("Bob", "Bold choice. How are the animals?"),
     ("Ann", "Busy: I also adopted a parrot, Kiwi, who already whistles the phone's ringtone."),
     ("Bob", "You are running a zoo now.")],
]


# The dog, the cat and the parrot, each told in a session of its own, all in the first five.
PETS = {"D1:3", "D2:3", "D3:3"}
PETS_QUESTION = "What pets does Ann have?"


@pytest.mark.xfail(strict=True, reason="list questions are not solved with the bundled model (issue #37 item 5): "
                                       "the parrot of the third session ranks sixth, behind turns of sessions whose "
                                       "instance is already in")
def test_a_list_question_gathers_instances_from_three_sessions(embedder, tmp_path: Path) -> None:  # noqa: ANN001
    assert PETS <= set(_asked_over_sessions(embedder, tmp_path, PET_SESSIONS, PETS_QUESTION, 5))


def test_with_the_reranker_a_list_question_gathers_instances_from_three_sessions(embedder,  # noqa: ANN001
                                                                                tmp_path: Path) -> None:
    # The relevance reranker (docs/decisions/014-relevance-reranker.md) reads "pets" with the parrot's turn.
    assert PETS <= set(_asked_over_sessions(embedder, tmp_path, PET_SESSIONS, PETS_QUESTION, 5, RERANKER_MODEL))


def test_with_the_dialogue_model_a_list_question_gathers_instances_from_three_sessions(tmp_path: Path) -> None:
    # The model trained on questions and the turns that answer them (docs/decisions/013-dialogue-embedder.md)
    # relates "pets" to the parrot's turn, which shares no word with the question.
    settings = Settings(_env_file=None, data_dir=tmp_path, embedding_model="dialogue-minilm")  # type: ignore[call-arg]
    assert PETS <= set(_asked_over_sessions(make_embedder(settings), tmp_path, PET_SESSIONS, PETS_QUESTION, 5))


# Five sessions, each telling of one hobby Ann took up among other news; the other turns talk about hobbies and
# free time without naming one.
HOBBY_SESSIONS = [
    [("Bob", "Any hobbies keeping you busy these days?"),
     ("Ann", "The office moved to the fifth floor, the lift is always full."),
     ("Ann", "Oh, and I started pottery on Tuesdays, my first bowl is lopsided."),
     ("Bob", "Free time is precious, use it well.")],
    [("Ann", "My sister visited, we talked all night."),
     ("Bob", "I wish I had more free time for hobbies."),
     ("Ann", "I joined a climbing gym last month, my arms are sore."),
     ("Bob", "Hobbies cost money though.")],
    [("Bob", "Weekend plans?"),
     ("Ann", "Rain again, so I stayed in and baked sourdough bread for the first time."),
     ("Bob", "People say a hobby should relax you."),
     ("Ann", "The landlord still has not fixed the heating.")],
    [("Ann", "I finally finished the quarterly report."),
     ("Bob", "Do you still have time for your hobbies?"),
     ("Ann", "A bit: I bought a secondhand guitar and practise chords at night."),
     ("Bob", "My hobbies are sleeping and complaining.")],
    [("Bob", "How was the holiday?"),
     ("Ann", "Short, but I learned to knit on the train, a scarf is on its way."),
     ("Bob", "Everyone needs a hobby, they say."),
     ("Ann", "Back to work tomorrow, sadly.")],
]
HOBBIES = {"D1:3", "D2:3", "D3:2", "D4:3", "D5:2"}


@pytest.mark.parametrize("reranker", [
    pytest.param("none", marks=pytest.mark.xfail(strict=True, reason=(
        "without the reranker the pottery turn ranks 12th: WordNet files pottery under crafts, not hobbies, and "
        "the turns that say 'hobbies' come first (docs/decisions/014-relevance-reranker.md)"))),
    RERANKER_MODEL,
])
def test_a_list_question_gathers_instances_from_five_sessions(embedder, tmp_path: Path,  # noqa: ANN001
                                                              reranker: str) -> None:
    found = _asked_over_sessions(embedder, tmp_path, HOBBY_SESSIONS, "What hobbies has Ann taken up?", 10, reranker)
    assert HOBBIES <= set(found)
