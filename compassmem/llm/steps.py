"""The write path's optional LLM steps: a yes/no boundary check for uncertain topic shifts, event summaries, and
category labels for the turns of closed events.

Each is off unless an endpoint is configured (COMPASSMEM_LLM_URL) and its own switch is on
(COMPASSMEM_LLM_BOUNDARY_CHECK, COMPASSMEM_LLM_SUMMARY, COMPASSMEM_LLM_CATEGORIES). They implement the
processors' protocols (``BoundaryJudge``, ``EventSummariser``, ``TurnLabeller``), so the processors never import
this adapter, and they answer nothing whenever the LLM gives nothing usable: the detector's score, the extractive
summary or the lexicon's categories then stand.

Every text sent is bounded (each turn cut to a few hundred characters, a fixed number of turns), and after a
failure every step pauses for ``PAUSE_S``: an endpoint that is down or slow costs one timeout per pause, not one
per turn, and the stream goes on offline meanwhile.
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence

import structlog

from compassmem.core.config import Settings
from compassmem.llm.client import ChatClient, ChatMessage, LlmError
from compassmem.core.models import Event, Turn
from compassmem.write.pipeline import LlmSteps
from compassmem.text.lexicon import noun_lexicon

log = structlog.get_logger(__name__)

PAUSE_S = 30.0
# The boundary check: each turn's text is cut to this many characters (the detector sends at most five turns).
BOUNDARY_TURN_CHARS = 300
# The summary: at most this many of the event's turns (the first ones), each cut to this many characters.
SUMMARY_TURNS = 24
SUMMARY_TURN_CHARS = 400
SUMMARY_MAX_TOKENS = 120
# Events whose summary the summariser remembers, so an unchanged event (a replay) is not asked for twice.
SUMMARY_CACHE = 1024
_REPLY_CHARS = 200
# The category labels: one request per this many turns of a closed event, each cut to this many characters; per
# turn at most LABELS_PER_TURN labels of at most LABEL_WORDS words are kept. Labels of the last LABEL_CACHE turns
# are remembered by turn and text, so a replay or a re-closed event does not ask again.
LABEL_TURNS = 16
LABEL_TURN_CHARS = 300
LABELS_PER_TURN = 5
LABEL_WORDS = 3
LABEL_TOKENS_PER_TURN = 24
LABEL_CACHE = 4096

BOUNDARY_SYSTEM_PROMPT = (
    "You decide where a conversation changes topic. You are shown the last turns of the current topic and the "
    "next turn. Answer 'yes' if the next turn starts a new topic, 'no' if it continues the current one. Reply "
    "with one word: yes or no."
)
SUMMARY_SYSTEM_PROMPT = (
    "Summarise this part of a conversation in one or two sentences: who did what, and when. Each turn starts with "
    "the date it was said; resolve relative dates ('yesterday', 'last week') against it and write absolute dates. "
    "Name people by their names. Reply with the summary only."
)
LABELS_SYSTEM_PROMPT = (
    "You label the turns of a conversation with the general kinds of thing each one names, so that a later "
    "question about a kind finds them: a turn about playing Valorant gets 'video game', a trip to Rome gets "
    "'city, trip', a chicken pot pie gets 'food, dish'. Use common nouns of one or two words, never names. Reply "
    "with one line per turn, 'N: kind, kind', at most five kinds, or 'N: -' when the turn names nothing."
)
_LABEL_LINE = re.compile(r"^\W*(\d{1,3})\s*[:.)\-]\s*(.*)$")
_LABEL = re.compile(r"[a-z][a-z'\- ]*[a-z]")
_YES_NO = re.compile(r"\W*+(yes|no)\b", re.IGNORECASE)


def clip(text: str, chars: int) -> str:
    """The text on one line, cut to ``chars`` characters at a word boundary when there is one."""
    text = " ".join(text.split())
    if len(text) <= chars:
        return text
    cut = text[:chars].rsplit(" ", 1)[0] or text[:chars]
    return cut + " ..."


def boundary_prompt(recent: Sequence[Turn], candidate: Turn) -> list[ChatMessage]:
    current = "\n".join(f"{t.speaker}: {clip(t.text, BOUNDARY_TURN_CHARS)}" for t in recent)
    user = (f"Current topic:\n{current}\n\nNext turn:\n{candidate.speaker}: {clip(candidate.text, BOUNDARY_TURN_CHARS)}"
            "\n\nDoes the next turn start a new topic?")
    return [ChatMessage(role="system", content=BOUNDARY_SYSTEM_PROMPT), ChatMessage(role="user", content=user)]


def parse_yes_no(reply: str) -> bool | None:
    """True for a reply that opens with yes, False for no, None for anything else."""
    match = _YES_NO.match(reply)
    return None if match is None else match.group(1).lower() == "yes"


def labels_prompt(turns: Sequence[Turn]) -> list[ChatMessage]:
    lines = [f"{n}. {t.speaker}: {clip(t.indexed_text(), LABEL_TURN_CHARS)}" for n, t in enumerate(turns, 1)]
    return [ChatMessage(role="system", content=LABELS_SYSTEM_PROMPT),
            ChatMessage(role="user", content="\n".join(lines))]


def parse_labels(reply: str, count: int) -> dict[int, list[str]]:
    """Line number (1 .. ``count``) -> the labels on it: lower case, at most ``LABEL_WORDS`` words of letters each,
    at most ``LABELS_PER_TURN`` per line. Lines that are not 'N: ...' and numbers out of range are ignored."""
    found: dict[int, list[str]] = {}
    for line in reply.splitlines():
        match = _LABEL_LINE.match(line.strip())
        if match is None or not 1 <= int(match.group(1)) <= count:
            continue
        labels: list[str] = []
        for part in re.split(r"[,;/]", match.group(2)):
            label = " ".join(part.strip().strip("\"'*`.").lower().split())
            if _LABEL.fullmatch(label) and len(label.split()) <= LABEL_WORDS and label not in labels:
                labels.append(label)
        if labels:
            found[int(match.group(1))] = labels[:LABELS_PER_TURN]
    return found


def _turn_key(turn: Turn) -> tuple[str, str, str, str]:
    return (turn.tenant, turn.conversation_id, turn.turn_id,
            hashlib.sha256(turn.indexed_text().encode()).hexdigest())


class LlmTurnLabeller:
    """``TurnLabeller``: the kinds of thing each turn names, asked of the LLM ``LABEL_TURNS`` turns at a time.

    Thread-safe. Only labels WordNet knows are kept, since only those can meet a question's category. A failure
    pauses the step and leaves the turns it was asked for without labels."""

    def __init__(self, client: ChatClient, pause: Pause | None = None) -> None:
        self.client = client
        self.pause = pause or Pause()
        self._cache: OrderedDict[tuple[str, str, str, str], list[str]] = OrderedDict()
        self._lock = threading.Lock()

    def __call__(self, turns: Sequence[Turn]) -> dict[str, list[str]]:
        labels: dict[str, list[str]] = {}
        asking: list[tuple[Turn, tuple[str, str, str, str]]] = []
        with self._lock:
            for turn in turns:
                key = _turn_key(turn)
                if key in self._cache:
                    self._cache.move_to_end(key)
                    labels[turn.turn_id] = self._cache[key]
                else:
                    asking.append((turn, key))
        for start in range(0, len(asking), LABEL_TURNS):
            if self.pause.active():
                break
            chunk = asking[start:start + LABEL_TURNS]
            answered = self._ask([turn for turn, _ in chunk])
            if answered is None:
                continue
            with self._lock:
                for index, (turn, key) in enumerate(chunk, 1):
                    kept = [label for label in answered.get(index, []) if noun_lexicon().lemma(label) is not None]
                    self._cache[key] = kept
                    labels[turn.turn_id] = kept
                while len(self._cache) > LABEL_CACHE:
                    self._cache.popitem(last=False)
        return {turn_id: kept for turn_id, kept in labels.items() if kept}

    def _ask(self, turns: Sequence[Turn]) -> dict[int, list[str]] | None:
        """Labels by line number, or None when the LLM failed or its reply has no line to read (asked again when
        the turns come again)."""
        try:
            reply = self.client.chat(labels_prompt(turns), max_tokens=LABEL_TOKENS_PER_TURN * len(turns))
        except LlmError as error:
            self.pause.start("categories", self.client, error)
            return None
        answered = parse_labels(reply, len(turns))
        if not answered and not re.search(r"^\W*\d{1,3}\s*[:.)\-]", reply, re.MULTILINE):
            log.warning("llm.categories_unclear", turns=len(turns), reply=clip(reply, _REPLY_CHARS),
                        reason="no 'N: kind, kind' line; the turns keep the lexicon's categories only")
            return None
        return answered


def summary_prompt(event: Event) -> list[ChatMessage]:
    shown = event.observations[:SUMMARY_TURNS]
    lines = [f"[{o.timestamp:%A %Y-%m-%d}] {o.speaker}: {clip(o.text, SUMMARY_TURN_CHARS)}" for o in shown]
    if len(event.observations) > len(shown):
        lines.append(f"({len(event.observations) - len(shown)} more turns)")
    return [ChatMessage(role="system", content=SUMMARY_SYSTEM_PROMPT),
            ChatMessage(role="user", content="\n".join(lines))]


class Pause:
    """After a failure, no call for ``seconds``: shared by the steps of one endpoint."""

    def __init__(self, seconds: float = PAUSE_S) -> None:
        self.seconds = seconds
        self._until = 0.0

    def active(self) -> bool:
        return time.monotonic() < self._until

    def start(self, step: str, client: ChatClient, error: LlmError) -> None:
        self._until = time.monotonic() + self.seconds
        log.warning("llm.step_failed", step=step, url=client.url, reason=str(error), paused_s=self.seconds)


class LlmBoundaryJudge:
    """``BoundaryJudge``: the LLM's yes or no on whether a turn starts a new topic; None when it gives neither."""

    def __init__(self, client: ChatClient, pause: Pause | None = None) -> None:
        self.client = client
        self.pause = pause or Pause()

    def __call__(self, recent: Sequence[Turn], candidate: Turn) -> bool | None:
        if self.pause.active():
            return None
        try:
            # A few tokens: room for "Yes." and a model that capitalises or adds a full stop.
            reply = self.client.chat(boundary_prompt(recent, candidate), max_tokens=4)
        except LlmError as error:
            self.pause.start("boundary_check", self.client, error)
            return None
        verdict = parse_yes_no(reply)
        if verdict is None:
            log.warning("llm.boundary_check_unclear", turn_id=candidate.turn_id, reply=clip(reply, _REPLY_CHARS),
                        reason="the reply is neither yes nor no; the topic-shift score decides")
        return verdict


def _fingerprint(event: Event) -> str:
    """What the summary is written from: the event's turns and texts."""
    digest = hashlib.sha256()
    for observation in event.observations:
        digest.update(f"{observation.turn_id}\x1f{observation.speaker}\x1f{observation.text}\x1e".encode())
    return digest.hexdigest()


class LlmEventSummariser:
    """``EventSummariser``: one or two sentences from the LLM; None on a failure (the extractive summary stands).

    Thread-safe. The summaries of the last ``SUMMARY_CACHE`` events are remembered by event id and content, so an
    event that closes again unchanged (a stream processor replaying after a rebalance) is not asked for again.
    """

    def __init__(self, client: ChatClient, pause: Pause | None = None) -> None:
        self.client = client
        self.pause = pause or Pause()
        self._cache: OrderedDict[tuple[str, str], str] = OrderedDict()
        self._lock = threading.Lock()

    def __call__(self, event: Event) -> str | None:
        key = (event.event_id, _fingerprint(event))
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        if self.pause.active():
            return None
        try:
            reply = self.client.chat(summary_prompt(event), max_tokens=SUMMARY_MAX_TOKENS)
        except LlmError as error:
            self.pause.start("summary", self.client, error)
            return None
        summary = " ".join(reply.split()).strip("\"'")
        if not summary:
            return None
        with self._lock:
            self._cache[key] = summary
            while len(self._cache) > SUMMARY_CACHE:
                self._cache.popitem(last=False)
        return summary


def llm_steps(settings: Settings, client: ChatClient | None = None) -> LlmSteps:
    """The LLM steps the settings switch on (``client``: one already built from these settings, to share)."""
    wanted = [name for name, on in (("boundary_check", settings.llm_boundary_check),
                                    ("summary", settings.llm_summary), ("categories", settings.llm_categories)) if on]
    if not wanted:
        return LlmSteps()
    client = client or ChatClient.from_settings(settings)
    if client is None:
        log.warning("llm.write_steps_offline", steps=wanted,
                    reason="switched on, but no LLM endpoint is configured (COMPASSMEM_LLM_URL)")
        return LlmSteps()
    pause = Pause()
    log.info("llm.write_steps", steps=wanted, url=client.url)
    return LlmSteps(
        boundary_judge=LlmBoundaryJudge(client, pause) if settings.llm_boundary_check else None,
        summariser=LlmEventSummariser(client, pause) if settings.llm_summary else None,
        labeller=LlmTurnLabeller(client, pause) if settings.llm_categories else None,
    )
