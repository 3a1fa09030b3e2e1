"""Events that follow requests: a service chat's requests, its clarifying exchanges kept inside them, and a user <->
assistant chat whose long answers stay with the questions they answer.

Turns go through the in-process pipeline with the real bundled embedder, as `compassmem ingest` feeds them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from compassmem.core.models import MAX_TEXT_BYTES, Event, Turn
from compassmem.write.pipeline import MemoryPipeline, PipelineConfig
from compassmem.text.text_features import closes, makes_request, resolves_request

START = datetime(2024, 5, 6, 10, 0, tzinfo=UTC)


def exchange(lines: list[tuple[str, str]], seconds: int = 40) -> list[Turn]:
    """One session of (speaker, text) turns, ``seconds`` apart."""
    return [Turn(conversation_id="c1", turn_id=f"T{number}", speaker=speaker, text=text, session_id="1",
                 timestamp=START + timedelta(seconds=seconds * number))
            for number, (speaker, text) in enumerate(lines, start=1)]


def event_turns(turns: list[Turn], embedder) -> list[list[str]]:  # noqa: ANN001
    pipeline = MemoryPipeline(embedder, [], PipelineConfig())
    pipeline.ingest(turns)
    events: list[Event] = sorted((e for m in pipeline.memories.values() for e in m.events.values()),
                                 key=lambda e: e.temporal_info.start)
    return [e.turn_ids for e in events]


def numbered(first: int, last: int) -> list[str]:
    return [f"T{n}" for n in range(first, last + 1)]


# A return with the agent's clarifying questions, a lookup and a confirmation, then a second request after the
# first is resolved, then a third after an offer of more help.
CLARIFYING = [
    ("Customer", "Hi, I need to return a pair of running shoes I bought last week."),
    ("Agent", "Sure, I can help with that. Could you give me the order number?"),
    ("Customer", "It's 55231."),
    ("Agent", "Thanks. Were the shoes worn outside, or only tried on indoors?"),
    ("Customer", "Only tried on indoors, they are too small."),
    ("Agent", "Let me look that order up. One moment please."),
    ("Agent", "Done: I created a return label for order 55231 and emailed it to you. The refund follows once the "
              "shoes arrive."),
    ("Customer", "Great, thank you."),
    ("Agent", "You're welcome! Have a great day."),
    ("Customer", "Oh wait, can you also tell me when my new phone case will be delivered? It's order 55300."),
    ("Agent", "Order 55300 left our warehouse this morning and should arrive on Thursday."),
    ("Customer", "Okay, perfect."),
    ("Agent", "Is there anything else I can help you with today?"),
    ("Customer", "Yes, I need help with my gift card: its balance shows zero but I never used it. The card number "
                 "ends in 7781."),
    ("Agent", "I checked card 7781: it was deactivated by mistake. I restored the balance of 50 dollars."),
    ("Customer", "Thanks so much, that's all."),
]


def test_a_clarifying_exchange_stays_inside_its_request(embedder) -> None:  # noqa: ANN001
    assert event_turns(exchange(CLARIFYING), embedder) == [numbered(1, 9), numbered(10, 13), numbered(14, 16)]


def long_answer(words: int) -> str:
    """A reply of about ``words`` words in short sentences: paragraphs of numbered steps."""
    steps = ["Open the config file and set the wal level to replica.", "Add a line for the new host in the hba file.",
             "Make a slot so the log is kept for the copy.", "Take a base backup with the tool and the slot.",
             "Start the copy and check that it reads the log.", "Watch the lag and keep it low at all times."]
    paragraphs, count, step = [], 0, 0
    while count < words:
        text = f"Step {step + 1}. " + " ".join(steps[(step + k) % len(steps)] for k in range(4))
        paragraphs.append(text)
        count += len(text.split())
        step += 1
    return "\n\n".join(paragraphs)


def test_a_3000_word_answer_stays_in_the_event_of_the_question_it_answers(embedder) -> None:  # noqa: ANN001
    answer = long_answer(3000)
    assert len(answer.split()) >= 3000 and len(answer.encode()) <= MAX_TEXT_BYTES
    turns = exchange([
        ("user", "I want to set up a streaming replica for my Postgres 16 database on a second server. "
                 "Walk me through it from the start."),
        ("assistant", answer),
        ("user", "hmm, what if the primary goes down while the base backup is still running?"),
        ("assistant", "Then the backup fails and you start it again once the primary is back; the slot keeps the "
                      "log it needs, so nothing is lost."),
        ("user", "Different topic: can you help me write a cron job that copies my photos folder to an external "
                 "disk every night at 2 am?"),
        ("assistant", "Sure. Run crontab -e and add: 0 2 * * * rsync -a ~/Photos/ /media/backup/Photos/ - it copies "
                      "only what changed since the last run."),
    ], seconds=120)
    assert event_turns(turns, embedder) == [numbered(1, 4), numbered(5, 6)]


@pytest.mark.parametrize(("text", "expected"), [
    ("Have a great day!", True),
    ("You're welcome! Enjoy the rest of your day.", True),
    ("Glad I could help.", True),
    ("I have a trip coming up, can you find me a flight?", False),
    ("Walking my dogs helps me take care of myself.", False),
    ("Have a great day? What do you mean?", False),
])
def test_a_resolution_is_a_farewell_or_welcome_at_the_end_of_a_turn(text: str, expected: bool) -> None:
    assert resolves_request(text) is expected


@pytest.mark.parametrize(("text", "expected"), [
    ("No, that's all. Thanks.", True),
    ("That will be all.", True),
    ("Great, thanks a lot!", True),
    ("I appreciate your help.", True),
    ("Not right now, thanks.", True),
    ("No, I need a flight that leaves in the morning instead, the earliest you can find after 6 am.", False),
    ("Thanks for the detailed answer! Could you also show me how the same setup works with two replicas and a "
     "load balancer in front of them?", False),
])
def test_a_closing_ends_a_request_rather_than_making_one(text: str, expected: bool) -> None:
    assert closes(text) is expected


@pytest.mark.parametrize(("text", "expected"), [
    ("Can you help me find a dentist in San Jose?", True),
    ("I'm trying to set up a chat app with Socket.io.", True),
    ("I need a taxi for two people.", True),
    ("Hey Mel! I wanted to tell you about my school event last week.", False),
    ("Can you believe it? I'm finally filming my own movie!", False),
])
def test_a_request_is_asked_for_early_in_a_turn(text: str, expected: bool) -> None:
    assert makes_request(text) is expected
