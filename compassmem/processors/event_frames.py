"""Build episodic event frames (participants, actions, entities, time) from segments, and fold merges in."""

from __future__ import annotations

import re
import threading
from collections import Counter, OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Protocol

import numpy as np

from compassmem.processors.vectors import unit
from compassmem.core.models import (
    Event,
    Granularity,
    IndexedTurn,
    Observation,
    SummarySource,
    TemporalInfo,
    TimeAnchor,
    Turn,
    event_id_for,
)
from compassmem.processors.segmentation import Segment, SegmentTurn
from compassmem.text.lexicon import noun_lexicon
from compassmem.text.text_features import (
    action_phrases,
    capitalised_names,
    entities,
    first_sentence,
    keyword_stems,
    opener,
    sentences,
    words,
)
from compassmem.text.time_resolution import has_time_expression, resolve_time_expressions

MAX_KEYWORDS = 24
MAX_ACTIONS = 12
SUMMARY_WORDS = 60
# The summary reads the sentences of the event's first observations only, and of each at most the first few: an
# event that keeps absorbing merges (or one 16 KiB turn of tiny sentences) stays cheap to summarise.
SUMMARY_OBSERVATIONS = 48
SUMMARY_SENTENCES_PER_TURN = 8
SENTENCE_WORDS = 28
MAIN_ENTITIES = 6

# A person doing something: a personal pronoun subject and the word after it ("we adopted", "she's going").
_DOER = re.compile(r"\b(?:i|we|he|she|they)(?:'(?:m|re|ve|ll|d|s))?\s+[a-z]", re.IGNORECASE)
# Capitalised words that are no names: interjections, reactions, greetings.
_NOT_NAMES = frozenset("""ha haha hah hehe lol wow yay aw aww ooh oh hmm oops yikes whoa woo woohoo nope yep yup
    poor lucky wonderful amazing awesome cool nice great congrats congratulations thanks sorry bye goodbye morning
    evening afternoon night welcome please maybe ok okay got wish appreciate hard things thing still now then
    today tonight tomorrow yesterday life love glad happy sure hope guess anyway actually honestly seriously
    sometimes every everyone everything someone something nothing lots lot hopefully luckily finally thankfully
    unfortunately fortunately basically recently currently usually really""".split())


_ORDINARY_ENDING = re.compile(r"(?:ing|ly|ed)$")


def _named_inside(name: str, texts: list[str]) -> bool:
    """The name is written capitalised inside a sentence somewhere (not only as a sentence's first word)."""
    return any(re.search(rf"[\w,;:] {re.escape(name)}\b", text) for text in texts)


@dataclass
class _Candidate:
    order: tuple[int, int]
    speaker: str
    text: str
    stems: Counter[str]
    score: float = 0.0


def _sentence_candidates(observations: list[Observation]) -> list[_Candidate]:
    found = []
    for index, observation in enumerate(observations[:SUMMARY_OBSERVATIONS]):
        for number, sentence in enumerate(sentences(observation.text)[:SUMMARY_SENTENCES_PER_TURN]):
            stems = Counter(keyword_stems(sentence))
            if len(stems) >= 2:  # greetings and one-word reactions say nothing that happened
                found.append(_Candidate((index, number), observation.speaker, sentence.strip(), stems))
    return found


def _when(anchor: TimeAnchor) -> str:
    """A resolved time, as a person writes it: '2 March 2024', 'week of 4 March 2024', 'April 2024'."""
    start, end = anchor.start, anchor.end
    if start == end:
        return f"{start.day} {start:%B %Y}"
    if anchor.granularity is Granularity.WEEK and (end - start).days <= 6:
        return f"week of {start.day} {start:%B %Y}"
    if start.day == 1 and (end + timedelta(days=1)).day == 1:
        first, last = f"{start:%B %Y}", f"{end:%B %Y}"
        if start.month == 1 and end.month == 12 and start.year == end.year:
            return str(start.year)
        return first if first == last else f"{first} to {last}"
    return f"{start.day} {start:%B %Y} to {end.day} {end:%B %Y}"


def _with_times(sentence: str, anchors: list[TimeAnchor]) -> str:
    """The sentence with each time expression it holds followed by its resolved date: "last Saturday (2 March
    2024)"."""
    for anchor in anchors:
        at = sentence.find(anchor.expression)
        if at >= 0 and not sentence[at + len(anchor.expression):].startswith(" ("):
            end = at + len(anchor.expression)
            sentence = f"{sentence[:end]} ({_when(anchor)}){sentence[end:]}"
    return sentence


def _clip(sentence: str, max_words: int = SENTENCE_WORDS) -> str:
    tokens = sentence.split()
    return sentence if len(tokens) <= max_words else " ".join(tokens[:max_words]) + " ..."


def _summary(observations: list[Observation], anchors: list[TimeAnchor]) -> str:
    """What happened, extractively: the event's most central sentences, in order, each with who said it and the
    resolved dates of the time expressions it holds.

    A sentence is central when it has content words and the rest of the event repeats them (one for each content
    word plus its count elsewhere in the event, over the square root of how many it has); it gains for saying
    who did what ("we adopted ..."), for naming someone or something and for saying when, and loses for being a
    question or a reaction ("Yes, ...", "Wow, ..."). One sentence for an event of up to two turns, two up to five,
    three beyond; at most SUMMARY_WORDS words (the first sentence always).
    """
    candidates = _sentence_candidates(observations)
    if not candidates:
        first = observations[0]
        return f"{first.speaker}: {first_sentence(first.text)}"
    totals: Counter[str] = Counter()
    for candidate in candidates:
        totals.update(candidate.stems)
    by_turn: dict[str, list[TimeAnchor]] = {}
    for anchor in anchors:
        by_turn.setdefault(anchor.turn_id or "", []).append(anchor)
    turn_ids = [o.turn_id for o in observations[:SUMMARY_OBSERVATIONS]]
    central = [sum(1 + totals[s] - n for s, n in c.stems.items()) / len(c.stems) ** 0.5 for c in candidates]
    top = max(central)
    for candidate, value in zip(candidates, central, strict=True):
        said_when = any(a.expression in candidate.text for a in by_turn.get(turn_ids[candidate.order[0]], []))
        candidate.score = (value / top + 0.5 * (_DOER.search(candidate.text) is not None)
                           + 0.2 * min(2, len(entities(candidate.text))) + 0.4 * said_when
                           - 0.5 * candidate.text.rstrip().endswith("?")
                           - 0.25 * (opener(candidate.text) == "reacts"))
    wanted = 1 if len(observations) <= 2 else 2 if len(observations) <= 5 else 3
    chosen = sorted(sorted(candidates, key=lambda c: (-c.score, c.order))[:wanted], key=lambda c: c.order)
    pieces, count = [], 0
    for candidate in chosen:
        text = _with_times(_clip(candidate.text), by_turn.get(turn_ids[candidate.order[0]], []))
        piece = f"{candidate.speaker}: {text}"
        if pieces and count + len(piece.split()) > SUMMARY_WORDS:
            break
        pieces.append(piece)
        count += len(piece.split())
    return " / ".join(pieces)


def main_entities(event: Event, limit: int = MAIN_ENTITIES) -> list[str]:
    """The event's entities a reader needs, most mentioned first, its participants aside. A single capitalised word
    also written in lower case in the event, an interjection or a common opener ("Ha", "Poor", "Hopefully"), a
    contraction ("We're"), or a word ending like a verb form or an adverb ("Running", "Joined", "Honestly") that
    is never capitalised inside a sentence, is left out."""
    texts = [o.text for o in event.observations[:SUMMARY_OBSERVATIONS]]
    lower = {w for text in texts for w in words(text) if w.islower()}
    participants = set(event.participants)
    ranked: dict[str, tuple[int, int]] = {}
    for position, found in enumerate(event.entities):
        parts = found.strip("-'").split()
        while len(parts) > 1 and parts[0].lower() in _NOT_NAMES:
            parts = parts[1:]  # "Morning Tom" is Tom
        name = " ".join(parts)
        if not name or name in ranked or name in participants:
            continue
        mentions = sum(text.count(name) for text in texts)
        if " " not in name and (name.lower() in lower or name.lower() in _NOT_NAMES or "'" in name
                                or (_ORDINARY_ENDING.search(name) and not _named_inside(name, texts))):
            continue  # an ordinary word capitalised: "Running late", "Hopefully", "We're"
        ranked[name] = (-mentions, position)
    return sorted(ranked, key=ranked.__getitem__)[:limit]


def frame_lines(event: Event) -> list[tuple[str, str]]:
    """The event frame a person reads, in order: what happened, who took part, the main entities, and when (when
    it was said, and the resolved dates of the times it mentions)."""
    start, end = event.temporal_info.start, event.temporal_info.end
    said = f"{start.day} {start:%B %Y}, {start:%H:%M}"
    if end.date() != start.date():
        said += f" to {end.day} {end:%B %Y}, {end:%H:%M}"
    elif f"{end:%H:%M}" != f"{start:%H:%M}":
        said += f"-{end:%H:%M}"
    mentioned = list(dict.fromkeys(f"{a.expression} = {_when(a)}" for a in event.time_anchors))
    lines = [("what", event.summary)]
    if event.summary_source is not SummarySource.EXTRACTIVE:
        # The line above is the LLM's; the extractive summary stays beside it, marked as such.
        lines.append(("extract", event.extractive_summary or ""))
    lines.append(("who", ", ".join(event.participants)))
    named = main_entities(event)
    if named:
        lines.append(("entities", ", ".join(named)))
    lines.append(("when", said + (f"; mentions {'; '.join(mentioned[:4])}" if mentioned else "")))
    return lines


@dataclass
class _TextFeatures:
    """Keyword stem counts, capitalised names (whether each only ever opened a sentence) and actions (first
    occurrences, in order) over an event's texts."""

    texts: list[str]
    stems: Counter[str] = field(default_factory=Counter)
    names: dict[str, bool] = field(default_factory=dict)
    actions: dict[str, None] = field(default_factory=dict)

    def add(self, text: str) -> None:
        self.texts.append(text)
        self.stems.update(keyword_stems(text))
        for found in capitalised_names(text):
            self.names[found.name] = self.names.get(found.name, True) and found.opening
        if len(self.actions) < MAX_ACTIONS:
            self.actions.update(dict.fromkeys(action_phrases(text)))


# The features of recently built or merged events, by event id: a merge then reads only the new segment's
# texts, not every text the event has absorbed so far (a stream of repeats would be quadratic). An entry is
# used only while its texts are exactly the event's first texts, so a stale or foreign entry is never used.
_FEATURES: OrderedDict[str, _TextFeatures] = OrderedDict()
_FEATURES_SIZE = 256
_FEATURES_LOCK = threading.Lock()


def _text_features(texts: list[str], event_id: str) -> _TextFeatures:
    with _FEATURES_LOCK:
        features = _FEATURES.pop(event_id, None)
    known = len(features.texts) if features is not None else 0
    if features is None or known > len(texts) or features.texts != texts[:known]:
        features, known = _TextFeatures(texts=[]), 0
    for text in texts[known:]:
        features.add(text)
    with _FEATURES_LOCK:
        _FEATURES[event_id] = features
        while len(_FEATURES) > _FEATURES_SIZE:
            _FEATURES.popitem(last=False)
    return features


def _named(names: Mapping[str, bool], participants: set[str]) -> list[str]:
    """The event's entities: its capitalised names, but a word that only ever opens a sentence in it only where it
    is known as a name otherwise: a participant, or a proper noun of the lexicon ("Paris"). A sentence's first word
    is capitalised whatever it is ("Plus", "What's", "Thoughts"); written capitalised inside a sentence, it is a
    name ("a trip to Paris")."""
    lexicon = noun_lexicon()
    return [name for name, opening in names.items()
            if not opening or name in participants or lexicon.is_proper(lexicon.lemma(name) or "")]


def _frame_fields(observations: list[Observation], texts: list[str], anchors: list[TimeAnchor],
                  event_id: str) -> dict:
    features = _text_features(texts, event_id)
    participants = {o.speaker for o in observations}
    return {
        "observations": observations,
        "summary": _summary(observations, anchors),
        # A changed event's summary is extractive again until a summariser writes it anew.
        "summary_source": SummarySource.EXTRACTIVE,
        "extractive_summary": None,
        "participants": sorted(participants),
        "actions": list(features.actions)[:MAX_ACTIONS],
        "entities": _named(features.names, participants),
        "keywords": [term for term, _ in features.stems.most_common(MAX_KEYWORDS)],
        "temporal_info": TemporalInfo(
            start=min(o.timestamp for o in observations), end=max(o.timestamp for o in observations)
        ),
        "time_anchors": anchors,
    }


def segment_texts(segment: Segment) -> list[str]:
    return [t.turn.indexed_text() for t in segment.turns]


def segment_anchors(segment: Segment) -> list[TimeAnchor]:
    anchors: list[TimeAnchor] = []
    for item in segment.turns:
        anchors.extend(resolve_time_expressions(item.turn.text, item.turn.timestamp, item.turn.turn_id))
    return anchors


def _observations(turns: list[SegmentTurn]) -> list[Observation]:
    return [
        Observation(
            turn_id=t.turn.turn_id,
            speaker=t.turn.speaker,
            text=t.turn.indexed_text(),
            timestamp=t.turn.timestamp,
            session_id=t.turn.session_id,
        )
        for t in turns
    ]


def segment_subject(segment: Segment) -> str | None:
    """The subject of the segment's first turn that names one (a conversation is normally about one subject)."""
    return next((t.turn.subject_id for t in segment.turns if t.turn.subject_id is not None), None)


def segment_event_id(segment: Segment) -> str:
    first = segment.first
    return event_id_for(first.tenant, first.conversation_id, first.turn_id)


def build_event(segment: Segment) -> Event:
    first = segment.first
    observations = _observations(segment.turns)
    return Event(
        tenant=first.tenant,
        event_id=segment_event_id(segment),
        conversation_id=first.conversation_id,
        subject_id=segment_subject(segment),
        embedding=segment.centroid().tolist(),
        **_frame_fields(observations, segment_texts(segment), segment_anchors(segment), segment_event_id(segment)),
    )


def merge_into(event: Event, segment: Segment) -> Event:
    """The event with the segment's turns appended: summary, anchors and embedding updated, version bumped.

    The embedding is the turn-count-weighted mean, so a merged event stays the centroid of all its turns. The
    event keeps its subject; one without a subject takes the segment's.
    """
    observations = event.observations + _observations(segment.turns)
    texts = [o.text for o in observations]
    own = np.asarray(event.embedding, dtype=np.float32) * len(event.observations)
    added = np.asarray([t.embedding for t in segment.turns], dtype=np.float32).sum(axis=0)
    return event.model_copy(
        update={
            **_frame_fields(observations, texts, event.time_anchors + segment_anchors(segment), event.event_id),
            "embedding": unit(own + added).tolist(),
            "subject_id": event.subject_id if event.subject_id is not None else segment_subject(segment),
            "version": event.version + 1,
            "merged_from": event.merged_from + [segment_event_id(segment)],
        }
    )


def without_turn(event: Event, turn_id: str, embeddings: Sequence[Sequence[float]]) -> Event | None:
    """The event rebuilt from its other turns (a redaction): summary, keywords, entities, participants, time and
    anchors recomputed from them alone, and ``embeddings`` (those turns' own) averaged anew; version bumped. None
    when the turn was its only one. An LLM summary is dropped too: it was written from the redacted text."""
    observations = [o for o in event.observations if o.turn_id != turn_id]
    if not observations or not embeddings:
        return None
    anchors = [a for a in event.time_anchors if a.turn_id != turn_id]
    return event.model_copy(update={
        **_frame_fields(observations, [o.text for o in observations], anchors, event.event_id),
        "embedding": unit(np.asarray(embeddings, dtype=np.float32).mean(axis=0)).tolist(),
        "version": event.version + 1,
    })


class EventSummariser(Protocol):
    """A summary of a closed event written by another means than extraction (an LLM), or None when there is
    none to be had (the extractive summary then stands)."""

    def __call__(self, event: Event) -> str | None: ...


def summarised(event: Event, summariser: EventSummariser) -> Event:
    """The event with the summariser's summary, the extractive one kept beside it; unchanged on no answer."""
    if event.summary_source is not SummarySource.EXTRACTIVE:
        return event
    summary = summariser(event)
    if summary is None:
        return event
    return event.model_copy(update={"summary": summary, "summary_source": SummarySource.LLM,
                                    "extractive_summary": event.summary})


class TurnLabeller(Protocol):
    """The kinds of thing each turn names, as common nouns ("video game" for a turn about Valorant), found by
    another means than the lexicon (an LLM). Turn id -> labels; a turn it has nothing for is left out."""

    def __call__(self, turns: Sequence[Turn]) -> dict[str, list[str]]: ...


def indexed_turns(segment: Segment, event_id: str,
                  labels: Mapping[str, Sequence[str]] | None = None) -> list[IndexedTurn]:
    labels = labels or {}
    return [
        IndexedTurn(
            tenant=t.turn.tenant,
            conversation_id=t.turn.conversation_id,
            turn_id=t.turn.turn_id,
            event_id=event_id,
            subject_id=t.turn.subject_id,
            speaker=t.turn.speaker,
            text=t.turn.indexed_text(),
            timestamp=t.turn.timestamp,
            session_id=t.turn.session_id,
            has_time_expression=has_time_expression(t.turn.text),
            embedding=t.embedding,
            category_labels=list(labels.get(t.turn.turn_id, ())),
            metadata=t.turn.metadata,
        )
        for t in segment.turns
    ]
