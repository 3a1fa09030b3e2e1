"""Build episodic event frames (participants, actions, entities, time) from segments, and fold merges in."""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from dataclasses import dataclass, field

import numpy as np

from compassmem.processors.vectors import unit
from compassmem.models import Event, IndexedTurn, Observation, TemporalInfo, TimeAnchor, event_id_for
from compassmem.processors.segmentation import Segment, SegmentTurn
from compassmem.processors.text_features import (
    action_phrases,
    entities,
    first_sentence,
    keyword_stems,
)
from compassmem.processors.time_resolution import has_time_expression, resolve_time_expressions

MAX_KEYWORDS = 24
MAX_ACTIONS = 12
SUMMARY_WORDS = 60



def _summary(observations: list[Observation]) -> str:
    """The first sentences (20 words at most) of the observations, " / "-separated, cut at SUMMARY_WORDS words.

    Observations past the cut are not read: an event that keeps absorbing merges stays cheap to summarise.
    """
    words: list[str] = []
    for observation in observations:
        if words:
            words.append("/")
        words.extend(f"{observation.speaker}: {first_sentence(observation.text)}".split())
        if len(words) > SUMMARY_WORDS:
            break
    return " ".join(words[:SUMMARY_WORDS]) + (" ..." if len(words) > SUMMARY_WORDS else "")


@dataclass
class _TextFeatures:
    """Keyword stem counts, entities and actions (first occurrences, in order) over an event's texts."""

    texts: list[str]
    stems: Counter[str] = field(default_factory=Counter)
    names: dict[str, None] = field(default_factory=dict)
    actions: dict[str, None] = field(default_factory=dict)

    def add(self, text: str) -> None:
        self.texts.append(text)
        self.stems.update(keyword_stems(text))
        self.names.update(dict.fromkeys(entities(text)))
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


def _frame_fields(observations: list[Observation], texts: list[str], anchors: list[TimeAnchor],
                  event_id: str) -> dict:
    features = _text_features(texts, event_id)
    return {
        "observations": observations,
        "summary": _summary(observations),
        "participants": sorted({o.speaker for o in observations}),
        "actions": list(features.actions)[:MAX_ACTIONS],
        "entities": list(features.names),
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


def indexed_turns(segment: Segment, event_id: str) -> list[IndexedTurn]:
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
        )
        for t in segment.turns
    ]
