"""The write path's LLM steps against the local chat-completions server (fake_chat_server.py): the boundary check
decides uncertain topic shifts, the summariser writes event summaries, and both leave the offline result whenever
the endpoint fails, is slow or answers something unusable.

The detector's score is pinned (``PinnedScore``) where a test needs a gap inside or outside the uncertain band;
the client, the prompts and the server are the real ones.
"""

from __future__ import annotations

from pathlib import Path

import time
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from fake_chat_server import FakeChatServer

from compassmem.core.config import Settings
from compassmem.llm.client import ChatClient
from compassmem.llm.steps import (
    BOUNDARY_TURN_CHARS,
    SUMMARY_TURN_CHARS,
    SUMMARY_TURNS,
    LlmBoundaryJudge,
    LlmEventSummariser,
    llm_steps,
    parse_yes_no,
)
from compassmem.core.models import SummarySource, Turn
from compassmem.write.pipeline import LlmSteps, MemoryPipeline, PipelineConfig
from compassmem.processors.event_frames import build_event, frame_lines, summarised
from compassmem.processors.segmentation import (
    JUDGE_CONTEXT_TURNS,
    BoundaryDetector,
    BoundaryJudge,
    BoundaryReason,
    ContextTurn,
    Segment,
    SegmentationConfig,
    SegmenterState,
    SegmentTurn,
)

TIMEOUT_S = 0.5
START = datetime(2024, 3, 4, 9, 0, tzinfo=UTC)
# Statements without questions, openers or topic markers: only the topic-shift score decides their gaps.
PLAIN = [
    "Our team moved the product launch to the end of April.",
    "The marketing plan needs a new schedule for the campaign.",
    "My sister bought a red bicycle for her commute.",
    "Cycling through the city park is pleasant in spring.",
]
SUMMARY = "Ann told Bob on 4 March 2024 that the launch moved to April."


@pytest.fixture
def llm(fake_llm: tuple[FakeChatServer, str]) -> tuple[FakeChatServer, str]:
    fake_llm[0].reset("yes")
    return fake_llm


def client(url: str) -> ChatClient:
    return ChatClient(url, "test-model", timeout_s=TIMEOUT_S)


def chat(texts: list[str], conversation_id: str = "c1") -> list[Turn]:
    """One session, Ann and Bob alternating, a minute apart."""
    return [Turn(conversation_id=conversation_id, turn_id=f"T{number}", speaker=("Ann", "Bob")[(number - 1) % 2],
                 text=text, session_id="1", timestamp=START + timedelta(minutes=number))
            for number, text in enumerate(texts, start=1)]


class PinnedScore(BoundaryDetector):
    """The detector with its topic-shift probability pinned, so a gap lies where the test wants it."""

    def __init__(self, probability: float, judge: BoundaryJudge | None,
                 config: SegmentationConfig | None = None) -> None:
        super().__init__(config, judge)
        self.probability = probability

    def shift_probability(self, state: SegmenterState, following: ContextTurn) -> float:
        return self.probability


def segment(detector: BoundaryDetector, turns: list[Turn]) -> tuple[list[Segment], SegmenterState]:
    state, closed = SegmenterState(), []
    rng = np.random.default_rng(3)
    for turn in turns:
        closed.extend(detector.step(state, turn, rng.standard_normal(8).astype(np.float32)))
    last = detector.close(state, BoundaryReason.END)
    assert last is not None
    return [*closed, last], state


def whole(turns: list[Turn]) -> Segment:
    """All the turns as one closed segment."""
    rng = np.random.default_rng(5)
    return Segment(turns=[SegmentTurn(turn=t, embedding=rng.standard_normal(8).tolist()) for t in turns],
                   boundary_reason=BoundaryReason.END)


def cuts(segments: list[Segment]) -> list[tuple[str, str]]:
    """(first turn, boundary reason) of every segment but the last."""
    return [(s.turns[-1].turn.turn_id, s.boundary_reason.value) for s in segments[:-1]]


# -- the boundary check ---------------------------------------------------------------------------------------


def test_an_uncertain_non_cut_becomes_a_cut_when_the_llm_says_yes(llm: tuple[FakeChatServer, str]) -> None:
    fake, url = llm
    # 0.25 is below the 0.30 threshold (no cut offline) but within the 0.10 band.
    segments, state = segment(PinnedScore(0.25, LlmBoundaryJudge(client(url))), chat(PLAIN))
    assert cuts(segments) == [("T2", "llm_topic_shift")]  # T3 starts the new topic
    assert (state.judge.asked, state.judge.cut, state.judge.kept) == (1, 1, 0)
    [sent] = fake.requests
    prompt = sent["messages"][-1]["content"]
    assert f"Next turn:\nAnn: {PLAIN[2]}" in prompt and f"Bob: {PLAIN[1]}" in prompt and PLAIN[3] not in prompt
    assert sent["max_tokens"] <= 4


@pytest.mark.parametrize("reply", ["no", "No.", " NO, it continues"])
def test_an_uncertain_cut_stays_together_when_the_llm_says_no(llm: tuple[FakeChatServer, str], reply: str) -> None:
    fake, url = llm
    fake.reply = reply
    segments, state = segment(PinnedScore(0.35, LlmBoundaryJudge(client(url))), chat(PLAIN))
    assert cuts(segments) == []
    assert (state.judge.asked, state.judge.kept) == (1, 1)


@pytest.mark.parametrize(("probability", "expected"), [(0.05, []), (0.19, []), (0.41, [("T2", "semantic_shift")]),
                                                       (0.9, [("T2", "semantic_shift")])])
def test_nothing_is_asked_outside_the_band(llm: tuple[FakeChatServer, str], probability: float,
                                           expected: list[tuple[str, str]]) -> None:
    fake, url = llm
    segments, state = segment(PinnedScore(probability, LlmBoundaryJudge(client(url))), chat(PLAIN))
    assert cuts(segments) == expected
    assert fake.requests == [] and state.judge.asked == 0


def test_nothing_is_asked_when_the_setting_is_off(llm: tuple[FakeChatServer, str], embedder) -> None:  # noqa: ANN001
    fake, url = llm
    steps = llm_steps(Settings(_env_file=None, llm_url=url))  # an endpoint for answers only
    assert steps == LlmSteps()
    assert llm_steps(Settings(_env_file=None, llm_boundary_check=True, llm_summary=True)) == LlmSteps()  # no URL
    pipeline = MemoryPipeline(embedder, [], PipelineConfig(), llm=steps)
    pipeline.ingest(chat(PLAIN * 3))
    assert fake.requests == []
    [memory] = pipeline.memories.values()
    assert memory.segmenter.judge.asked == 0
    assert all(e.summary_source is SummarySource.EXTRACTIVE for e in memory.events.values())


@pytest.mark.parametrize(("mode", "reply", "requests"), [("slow", "yes", 1), ("error", "yes", 2),  # one retry
                                                         ("garbage", "yes", 1), ("answer", "Maybe, hard to say.", 2)])
def test_a_failing_or_unclear_llm_leaves_the_score_decision(llm: tuple[FakeChatServer, str], mode: str,
                                                            reply: str, requests: int) -> None:
    fake, url = llm
    fake.mode, fake.reply = mode, reply
    judge = LlmBoundaryJudge(client(url))
    started = time.monotonic()
    below, below_state = segment(PinnedScore(0.25, judge), chat(PLAIN))
    above, _ = segment(PinnedScore(0.35, judge), chat(PLAIN))
    assert cuts(below) == [] and cuts(above) == [("T2", "semantic_shift")]
    assert below_state.judge.no_answer == 1
    # A failure pauses the check: the second conversation asked nothing (an unclear reply is no failure).
    assert len(fake.requests) == requests
    assert time.monotonic() - started < TIMEOUT_S * 2 + 1


def test_the_stream_goes_on_while_the_llm_is_down(llm: tuple[FakeChatServer, str]) -> None:
    fake, url = llm
    fake.mode = "slow"
    detector = PinnedScore(0.25, LlmBoundaryJudge(client(url)), SegmentationConfig(llm_max_share=1.0))
    started = time.monotonic()
    segments, state = segment(detector, chat(PLAIN * 10))
    assert sum(len(s.turns) for s in segments) == 40
    assert len(fake.requests) == 1 and state.judge.no_answer == state.judge.asked
    assert time.monotonic() - started < TIMEOUT_S + 1


def test_texts_sent_are_bounded(llm: tuple[FakeChatServer, str]) -> None:
    fake, url = llm
    fake.reply = "no"
    long = [f"Turn {n} says " + "a great deal about the launch plans " * 200 for n in range(1, 12)]
    # Comments are never cut on the score: long turns would hit the length limit, so raise it for this test.
    config = SegmentationConfig(soft_max_tokens=100_000, hard_max_tokens=100_000, llm_max_share=1.0)
    segment(PinnedScore(0.25, LlmBoundaryJudge(client(url)), config), chat(long))
    assert fake.requests
    for sent in fake.requests:
        prompt = sent["messages"][-1]["content"]
        turns = [line for line in prompt.splitlines() if line.startswith(("Ann: ", "Bob: "))]
        assert 2 <= len(turns) <= JUDGE_CONTEXT_TURNS + 1
        assert all(len(line) <= len("Ann: ") + BOUNDARY_TURN_CHARS + 4 for line in turns)
        assert len(prompt) < (JUDGE_CONTEXT_TURNS + 1) * (BOUNDARY_TURN_CHARS + 10) + 200


def test_a_conversation_s_checks_stay_within_its_share_of_turns(llm: tuple[FakeChatServer, str]) -> None:
    fake, url = llm
    fake.reply = "no"
    detector = PinnedScore(0.25, LlmBoundaryJudge(client(url)), SegmentationConfig(llm_max_share=0.25))
    _, state = segment(detector, chat(PLAIN * 10))
    assert state.judge.asked == len(fake.requests) == 10  # a quarter of 40 turns
    assert state.judge.over_budget > 0


@pytest.mark.parametrize(("reply", "verdict"), [("yes", True), ("Yes.", True), ("**No**", False),
                                                ("no doubt it does", False), ("yesterday", None), ("", None),
                                                ("I think yes", None)])
def test_yes_no_replies(reply: str, verdict: bool | None) -> None:
    assert parse_yes_no(reply) is verdict


def test_the_pipeline_asks_through_the_settings(llm: tuple[FakeChatServer, str], embedder) -> None:  # noqa: ANN001
    fake, url = llm
    # The widest band and no budget: every gap the score decides is the LLM's, and it says yes to all.
    settings = Settings(_env_file=None, llm_url=url, llm_timeout_s=TIMEOUT_S, llm_boundary_check=True,
                        llm_boundary_band=0.5, llm_boundary_max_share=1.0)
    pipeline = MemoryPipeline(embedder, [], PipelineConfig.from_settings(settings), llm=llm_steps(settings))
    pipeline.ingest(chat(PLAIN * 2))
    [memory] = pipeline.memories.values()
    assert memory.segmenter.judge.asked == len(fake.requests) > 0
    assert memory.stats.boundary_reasons["llm_topic_shift"] > 0
    assert all("Does the next turn start a new topic?" in r["messages"][-1]["content"] for r in fake.requests)


# -- summaries ------------------------------------------------------------------------------------------------


def test_summaries_come_from_the_llm_when_on(llm: tuple[FakeChatServer, str], embedder) -> None:  # noqa: ANN001
    fake, url = llm
    fake.reply = f'"{SUMMARY}"\n'
    offline = MemoryPipeline(embedder, [])
    offline.ingest(chat(PLAIN))
    settings = Settings(_env_file=None, llm_url=url, llm_timeout_s=TIMEOUT_S, llm_summary=True)
    online = MemoryPipeline(embedder, [], llm=llm_steps(settings))
    online.ingest(chat(PLAIN))
    before, events = (list(p.memories["default/c1"].events.values()) for p in (offline, online))
    assert len(events) == len(before) == len(fake.requests) > 0
    for event, extractive in zip(events, before, strict=True):
        assert (event.summary, event.summary_source) == (SUMMARY, SummarySource.LLM)
        assert event.extractive_summary == extractive.summary
        assert frame_lines(event)[:2] == [("what", SUMMARY), ("extract", extractive.summary)]
    sent = fake.requests[0]
    prompt = sent["messages"][-1]["content"]
    assert "[Monday 2024-03-04] Ann: " + PLAIN[0] in prompt and "who did what" in sent["messages"][0]["content"]


def test_the_library_writes_llm_summaries_when_the_settings_say_so(llm: tuple[FakeChatServer, str], embedder,  # noqa: ANN001
                                                                   tmp_path: Path) -> None:
    from compassmem.library.memory import Memory

    fake, url = llm
    fake.reply = f'"{SUMMARY}"\n'
    settings = Settings(_env_file=None, data_dir=tmp_path, llm_url=url, llm_timeout_s=TIMEOUT_S, llm_summary=True)
    with Memory(settings, embedder=embedder) as memory:
        memory.add(chat(PLAIN))
        stored = memory.stores.vectors.conversation_events("default", "c1")
    assert stored and fake.requests
    assert {(e.summary, e.summary_source) for e in stored} == {(SUMMARY, SummarySource.LLM)}


@pytest.mark.parametrize("mode", ["slow", "error", "garbage"])
def test_the_extractive_summary_stands_when_the_llm_fails(llm: tuple[FakeChatServer, str], mode: str) -> None:
    fake, url = llm
    fake.mode = mode
    event = build_event(whole(chat(PLAIN)))
    assert summarised(event, LlmEventSummariser(client(url))) == event
    assert event.summary_source is SummarySource.EXTRACTIVE and frame_lines(event)[1][0] == "who"


def test_an_unchanged_event_is_not_summarised_again(llm: tuple[FakeChatServer, str]) -> None:
    fake, url = llm
    fake.reply = SUMMARY
    summariser = LlmEventSummariser(client(url))
    first = summarised(build_event(whole(chat(PLAIN))), summariser)
    assert summarised(first, summariser) is first  # already the LLM's
    again = summarised(build_event(whole(chat(PLAIN))), summariser)  # the same segment closed again (a replay)
    assert again.summary == SUMMARY and len(fake.requests) == 1
    longer = chat([*PLAIN, "Bob bought a helmet for the bicycle as well."])
    assert summarised(build_event(whole(longer)), summariser).summary == SUMMARY
    assert len(fake.requests) == 2  # a changed event is asked for anew


def test_a_summary_prompt_is_bounded(llm: tuple[FakeChatServer, str]) -> None:
    fake, url = llm
    texts = [f"Turn {n}: " + "the launch plan changed again and again " * 100 for n in range(SUMMARY_TURNS + 6)]
    event = build_event(whole(chat(texts)))
    summarised(event, LlmEventSummariser(client(url)))
    lines = fake.requests[0]["messages"][-1]["content"].splitlines()
    assert len(lines) == SUMMARY_TURNS + 1 and lines[-1] == "(6 more turns)"
    assert all(len(line) <= len("[Monday 2024-03-04] Ann: ") + SUMMARY_TURN_CHARS + 4 for line in lines)
