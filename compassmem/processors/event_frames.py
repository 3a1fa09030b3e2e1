"""Build episodic event frames (participants, actions, entities, time) from segments, and fold merges in."""

from __future__ import annotations

from collections import Counter

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
SUMMARY_WORDS = 60



def _summary(observations: list[Observation]) -> str:
    pieces = [f"{o.speaker}: {first_sentence(o.text)}" for o in observations]
    words = " / ".join(pieces).split()
    return " ".join(words[:SUMMARY_WORDS]) + (" ..." if len(words) > SUMMARY_WORDS else "")


def _frame_fields(observations: list[Observation], texts: list[str], anchors: list[TimeAnchor]) -> dict:
    stems: Counter[str] = Counter()
    names: list[str] = []
    actions: list[str] = []
    for text in texts:
        stems.update(keyword_stems(text))
        names.extend(entities(text))
        actions.extend(action_phrases(text))
    return {
        "observations": observations,
        "summary": _summary(observations),
        "participants": sorted({o.speaker for o in observations}),
        "actions": list(dict.fromkeys(actions))[:12],
        "entities": list(dict.fromkeys(names)),
        "keywords": [term for term, _ in stems.most_common(MAX_KEYWORDS)],
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
        embedding=segment.centroid().tolist(),
        **_frame_fields(observations, segment_texts(segment), segment_anchors(segment)),
    )


def merge_into(event: Event, segment: Segment) -> Event:
    """The event with the segment's turns appended: summary, anchors and embedding updated, version bumped.

    The embedding is the turn-count-weighted mean, so a merged event stays the centroid of all its turns.
    """
    observations = event.observations + _observations(segment.turns)
    texts = [o.text for o in observations]
    own = np.asarray(event.embedding, dtype=np.float32) * len(event.observations)
    added = np.asarray([t.embedding for t in segment.turns], dtype=np.float32).sum(axis=0)
    return event.model_copy(
        update={
            **_frame_fields(observations, texts, event.time_anchors + segment_anchors(segment)),
            "embedding": unit(own + added).tolist(),
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
            speaker=t.turn.speaker,
            text=t.turn.indexed_text(),
            timestamp=t.turn.timestamp,
            session_id=t.turn.session_id,
            has_time_expression=has_time_expression(t.turn.text),
            embedding=t.embedding,
        )
        for t in segment.turns
    ]
