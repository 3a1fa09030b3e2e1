"""An event's entities are names, not the capitalised first words of sentences ("Plus", "What's", "Thoughts"):
a word that only ever opens a sentence counts where it is known as a name otherwise. Measured on a hand-labelled
sample of LoCoMo events by benchmarks/entity_precision.py (benchmarks/entity_labels.json)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from compassmem.core.models import Turn
from compassmem.processors.event_frames import build_event, merge_into
from compassmem.processors.segmentation import BoundaryReason, Segment, SegmentTurn
from compassmem.text.text_features import entities

T0 = datetime(2024, 5, 8, 13, 56, tzinfo=UTC)


def _segment(*said: tuple[str, str], start: int = 1) -> Segment:
    turns = [Turn(conversation_id="names", turn_id=f"D1:{start + i}", speaker=speaker, text=text,
                  timestamp=T0 + timedelta(minutes=start + i)) for i, (speaker, text) in enumerate(said)]
    return Segment(turns=[SegmentTurn(turn=turn, embedding=[1.0, 0.0, 0.0]) for turn in turns],
                   boundary_reason=BoundaryReason.SEMANTIC)


def test_sentence_openers_are_not_entities_but_names_are() -> None:
    event = build_event(_segment(
        ("Melanie", "Plus, it boosts my mood. What's new with you? Thoughts on the trip?"),
        ("Caroline", "Basketball has been my thing since I was a kid. Time flies!"),
        ("Melanie", "Caroline, those lessons are great. Paris was lovely, we watched Basketball with Jon."),
        ("Caroline", "Bye Nate! FYI, the UK trip is booked."),
    ))
    assert event.entities == ["Basketball", "Caroline", "Paris", "Jon", "Nate", "UK"]


def test_a_name_seen_inside_a_sentence_later_in_the_event_counts_from_its_first_mention() -> None:
    first = build_event(_segment(("Ana", "Biscuit chewed my slipper again.")))
    assert first.entities == []  # a biscuit is something to eat, as far as the lexicon knows
    merged = merge_into(first, _segment(("Ben", "Ha, I love how Biscuit does that."), start=2))
    assert merged.entities == ["Biscuit"]


def test_a_question_keeps_the_name_it_opens_with() -> None:
    assert entities("Caroline went where last summer?") == ["Caroline"]
