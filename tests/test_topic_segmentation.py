"""Events follow the conversation's topics: topic-shift markers, question/answer structure, new requests in a support
chat, the sample conversation's topic changes, and event summaries that say what happened.

Turns go through the in-process pipeline with the real bundled embedder, exactly as `compassmem ingest` feeds them
(each turn's search-text embedding, one turn at a time)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from compassmem.write.importers import read_turns
from compassmem.core.models import Event, Turn
from compassmem.write.pipeline import MemoryPipeline, PipelineConfig
from compassmem.processors.event_frames import frame_lines, main_entities
from compassmem.processors.segmentation import BoundaryDetector, BoundaryReason, SegmenterState
from compassmem.text.text_features import ends_with_question, offers_more_help, shift_marker

SAMPLE = Path(__file__).resolve().parent.parent / "examples" / "sample_conversation.jsonl"
START = datetime(2024, 5, 6, 10, 0, tzinfo=UTC)


def chat(texts: list[str], speakers: tuple[str, str] = ("Ann", "Bob"), conversation_id: str = "c1") -> list[Turn]:
    """One session, speakers alternating, 40 seconds apart."""
    return [Turn(conversation_id=conversation_id, turn_id=f"T{number}", speaker=speakers[(number - 1) % 2],
                 text=text, session_id="1", timestamp=START + timedelta(seconds=40 * number))
            for number, text in enumerate(texts, start=1)]


def events_of(turns: list[Turn], embedder, batch: int = 256) -> list[Event]:  # noqa: ANN001
    pipeline = MemoryPipeline(embedder, [], PipelineConfig(batch_turns=batch))
    pipeline.ingest(turns)
    events = [e for memory in pipeline.memories.values() for e in memory.events.values()]
    return sorted(events, key=lambda e: (e.conversation_id, e.temporal_info.start))


def groups(events: list[Event]) -> list[list[str]]:
    return [e.turn_ids for e in events]


BY_THE_WAY = [
    "I finally sent the quarterly budget report to the board this morning.",
    "Nice! Was it hard to get the numbers out of finance?",
    "Very. Finance sent the spreadsheets two days late, so I stayed at the office until midnight on Thursday.",
    "That sounds exhausting, but at least the report is done now.",
    "By the way, did you watch the football match last night?",
    "I did! What a comeback in the second half.",
    "The last-minute goal from the corner kick was incredible.",
]


def test_a_by_the_way_topic_change_starts_a_new_event(embedder) -> None:
    events = events_of(chat(BY_THE_WAY), embedder)
    assert groups(events) == [["T1", "T2", "T3", "T4"], ["T5", "T6", "T7"]]


QUESTIONS = [
    "We spent the whole weekend repainting the kitchen cabinets.",
    "Oh fun, what color did you go with?",
    "A deep forest green, with brass handles and a matte finish.",
    "Sounds lovely. How long did the paint take to dry?",
    "Two full days, the humidity was terrible.",
    "Did you have to sand them first?",
    "Yes, every single door, my arms still hurt.",
]


def test_an_answer_stays_with_its_question(embedder) -> None:
    turns = chat(QUESTIONS)
    events = events_of(turns, embedder)
    owner = {turn_id: index for index, event in enumerate(events) for turn_id in event.turn_ids}
    for question, answer in zip(turns, turns[1:]):
        if ends_with_question(question.text):
            assert owner[question.turn_id] == owner[answer.turn_id], (question.text, answer.text)


SUPPORT = [
    "Hi, my order 4471 was supposed to arrive on Monday and it still hasn't shown up.",
    "Sorry about that! I checked order 4471: it is held at the regional warehouse and will be delivered on Friday.",
    "Okay, Friday works, thanks.",
    "Is there anything else I can help you with today?",
    "Yes, I moved last month and I need to change the shipping address on my account to 12 Oak Street, Springfield.",
    "Done: your shipping address is now 12 Oak Street, Springfield, and future orders will go there.",
    "Great. One more thing: I was charged twice for my last order, I see two payments of 49.90 on my card.",
    "I see the duplicate payment. I have refunded one of the two charges, it will show on your card in 3 to 5 days.",
    "Perfect, thank you so much!",
]


def test_a_support_chat_with_three_requests_gives_three_events(embedder) -> None:
    events = events_of(chat(SUPPORT, speakers=("Customer", "Agent")), embedder)
    assert groups(events) == [["T1", "T2", "T3", "T4"], ["T5", "T6"], ["T7", "T8", "T9"]]
    delivery, address, refund = (e.summary.lower() for e in events)
    assert "warehouse" in delivery or "delivered" in delivery
    assert "address" in address
    assert "refunded" in refund or "charged twice" in refund


def test_the_sample_conversation_splits_each_session_at_its_topic_change(embedder) -> None:
    events = events_of(list(read_turns(SAMPLE)), embedder)
    by_session = {}
    for event in events:
        (session,) = event.session_ids
        by_session.setdefault(session, []).append(event.turn_ids)
    # Session 1: the Atlas launch, then (Tom: "By the way, how is your new puppy doing?") the puppy.
    assert by_session["1"] == [["S1:1", "S1:2", "S1:3", "S1:4", "S1:5"], ["S1:6", "S1:7", "S1:8", "S1:9"]]
    # Session 2: the launch date and the team, then (Tom: "Any plans for the spring break?") the hiking trip.
    assert by_session["2"] == [["S2:1", "S2:2", "S2:3", "S2:4"], ["S2:5", "S2:6", "S2:7", "S2:8"]]


def test_the_previous_detector_kept_each_sample_session_whole(embedder, tmp_path: Path,  # noqa: ANN001
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The baseline memory_report --compare-segmenters measures against cuts as the detector before topics did: on
    the sample conversation, where the topic detector splits sessions 1 and 2, every session was one event."""
    import json
    import sys

    from benchmarks import memory_report
    from benchmarks.previous_segmenter import PreviousBoundaryDetector

    pipeline = MemoryPipeline(embedder, [], PipelineConfig(), detector=PreviousBoundaryDetector)
    pipeline.ingest(read_turns(SAMPLE))
    events = sorted((e for memory in pipeline.memories.values() for e in memory.events.values()),
                    key=lambda e: e.temporal_info.start)
    assert [e.session_ids for e in events] == [["1"], ["2"], ["3"]]

    out = tmp_path / "report.json"
    monkeypatch.setattr(sys, "argv", ["memory_report", "--data", str(SAMPLE), "--out", str(out),
                                      "--compare-segmenters"])
    memory_report.main()
    report = json.loads(out.read_text())
    assert report["previous_segmenter_summary"]["events"] == 3
    assert report["summary"]["events"] > 3
    assert report["summary"]["turns"] == report["previous_segmenter_summary"]["turns"] == 24


def test_summaries_name_the_main_action_with_who_and_when(embedder) -> None:
    events = {e.turn_ids[0]: e for e in events_of(list(read_turns(SAMPLE)), embedder)}
    puppy, launch, hiking = events["S1:6"], events["S2:1"], events["S2:5"]
    assert "Priya: We adopted him from the shelter last Saturday (2 March 2024)" in puppy.summary
    assert "moved the launch to April 15" in launch.summary and launch.summary.startswith("Priya:")
    assert "hiking in Zion National Park" in hiking.summary
    # Not the old "first clause of each turn": greetings and bare reactions are not what happened.
    assert "Morning Tom!" not in events["S1:1"].summary and "Again?" not in events["S1:1"].summary
    labels = [label for label, _ in frame_lines(puppy)]
    assert labels == ["what", "who", "entities", "when"]
    frame = dict(frame_lines(puppy))
    assert frame["who"] == "Priya, Tom"
    # "Biscuit is great!" alone does not make Biscuit a name (the capital only opens the sentence, and a biscuit is
    # food as far as the lexicon knows); "Did Biscuit come along?" does (tests/test_event_entities.py).
    assert "Paws Academy" in frame["entities"] and "Biscuit" not in puppy.entities
    assert "Biscuit" in next(e for e in events.values() if "S3:6" in e.turn_ids).entities
    assert "Poor" not in main_entities(puppy) and "Ha" not in main_entities(puppy)
    assert frame["when"].startswith("4 March 2024, 09:18") and "last Saturday = 2 March 2024" in frame["when"]


def test_boundaries_do_not_depend_on_how_turns_are_batched_or_on_a_restart(embedder) -> None:
    turns = list(read_turns(SAMPLE)) + chat(BY_THE_WAY + SUPPORT, conversation_id="c2")
    assert groups(events_of(turns, embedder, batch=1)) == groups(events_of(turns, embedder, batch=64))
    # A detector restored from its serialised state mid-stream (a restarted worker) cuts exactly the same.
    sample = list(read_turns(SAMPLE))
    vectors = embedder.embed([t.search_text() for t in sample])
    detector = BoundaryDetector()
    straight, state = [], SegmenterState()
    for turn, vector in zip(sample, vectors, strict=True):
        straight.extend(s.turns[0].turn.turn_id for s in detector.step(state, turn, vector))
    resumed, state = [], SegmenterState()
    for turn, vector in zip(sample, vectors, strict=True):
        state = SegmenterState.model_validate_json(state.model_dump_json())
        resumed.extend(s.turns[0].turn.turn_id for s in detector.step(state, turn, vector))
    assert resumed == straight


def test_every_received_turn_is_in_a_closed_segment_or_the_open_one(embedder) -> None:
    """The look-ahead never hides a turn: a provisional event (the open segment) holds every turn not yet closed,
    and a decision, once made, is final (a closed segment is never reopened)."""
    turns = chat(SUPPORT + BY_THE_WAY)
    vectors = embedder.embed([t.search_text() for t in turns])
    detector, state, closed = BoundaryDetector(), SegmenterState(), []
    for number, (turn, vector) in enumerate(zip(turns, vectors, strict=True), start=1):
        closed.extend(t.turn.turn_id for s in detector.step(state, turn, vector) for t in s.turns)
        assert closed + [t.turn.turn_id for t in state.open_turns] == [t.turn_id for t in turns[:number]]


def test_hard_boundaries_still_cut_at_once() -> None:
    """Session changes cut on arrival (no look-ahead), and a pending boundary then stays uncut."""
    vector = np.ones(8, dtype=np.float32) / np.sqrt(8)
    turns = chat(["How was the trip?", "Great, thanks.", "Glad to hear it."])
    turns[2] = turns[2].model_copy(update={"session_id": "2"})
    detector, state = BoundaryDetector(), SegmenterState()
    assert detector.step(state, turns[0], vector) == [] and detector.step(state, turns[1], vector) == []
    (closed,) = detector.step(state, turns[2], vector)
    assert closed.boundary_reason is BoundaryReason.SESSION and [t.turn.turn_id for t in closed.turns] == ["T1", "T2"]


@pytest.mark.parametrize(("text", "marker"), [
    ("Poor folks. By the way, how is your new puppy doing?", "by the way"),
    ("Totally understandable. Any plans for the spring break?", "any plans for"),
    ("Anyway, what are you reading these days?", "anyway"),
    ("Speaking of food, have you tried the new ramen place?", "speaking of"),
    ("On another note, the dentist called.", "on another note"),
    ("Oh, and I also need to update my phone number.", "i also need"),
    ("The way you paint is amazing.", None),
    ("I need a break from the project. Anyway is a word I overuse.", "anyway"),
])
def test_shift_markers_are_found_at_sentence_starts(text: str, marker: str | None) -> None:
    assert shift_marker(text) == marker


def test_only_an_offer_of_help_counts_as_closing_a_request() -> None:
    assert offers_more_help("Is there anything else I can help you with?")
    assert offers_more_help("Anything else?")
    assert not offers_more_help("Anything else you enjoy doing, Nate?")


def test_main_entities_leave_out_ordinary_words_capitalised_at_a_sentence_start() -> None:
    said = START
    event = Event(event_id="e", conversation_id="c", summary="", participants=["Ann", "Bob"],
                  entities=["Running", "Hopefully David", "David", "Hearing", "Ann", "We're", "Zion National Park"],
                  temporal_info={"start": said, "end": said},
                  observations=[{"turn_id": "T1", "speaker": "Ann", "timestamp": said,
                                 "text": "Running late again. Hopefully David comes. We're going to Zion National Park."},
                                {"turn_id": "T2", "speaker": "Bob", "timestamp": said,
                                 "text": "Hearing that, I'm jealous. Say hi to David, Ann."}])
    assert main_entities(event) == ["David", "Zion National Park"]
