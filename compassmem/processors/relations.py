"""Relation extraction between events: explicit cues, Allen temporal relations, shared entities, follow-ups.

Explicit cues ("because", "so", "led to", "if ... then", "in order to") split a turn into two clauses; the
clause that is not about the new event is matched against earlier events by shared keywords, and the edge
points from cause (condition, motive) to effect. Temporal edges come from the events' told-time intervals
and their resolved time anchors.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, date, datetime, timedelta
from typing import Literal

import numpy as np
from pydantic import BaseModel, Field

from compassmem.core.models import (
    AllenRelation,
    Event,
    Granularity,
    Observation,
    Relation,
    RelationType,
    relation_id_for,
)
from compassmem.processors.event_index import EventIndex
from compassmem.text.text_features import ascii_lower, keyword_stems, sentences


class RelationConfig(BaseModel):
    # A clause must share this many keyword stems with an earlier event, covering this share of its IDF mass.
    clause_min_shared: int = Field(default=2, ge=1)
    clause_min_coverage: float = Field(default=0.5, ge=0.0, le=1.0)
    cue_lookback_events: int = Field(default=200, ge=1)
    # Non-adjacent events this similar are linked as semantic follow-ups (a topic picked up again later).
    follow_up_cosine: float = Field(default=0.6, ge=0.0, le=1.0)
    follow_up_max: int = Field(default=2, ge=0)
    entity_links_max: int = Field(default=3, ge=0)
    meets_gap: timedelta = timedelta(minutes=5)


class KeywordStats(BaseModel):
    """Document frequencies of keyword stems over a conversation's events, for IDF weighting."""

    documents: int = 0
    frequency: dict[str, int] = Field(default_factory=dict)
    # A stem in at most this share of the events counts as rare (names a specific thing).
    rare_share: float = 0.05

    def add(self, stems: Sequence[str], new_document: bool) -> None:
        self.documents += int(new_document)
        for stem in set(stems):
            self.frequency[stem] = self.frequency.get(stem, 0) + 1

    def remove(self, stems: Sequence[str], whole_document: bool) -> None:
        """Undo ``add`` for stems an event no longer has (a redaction), and for the event itself when it is gone.
        A stem no event has any more leaves the table (a count never goes below zero: a memory started anew over
        a stored conversation did not count its earlier events)."""
        self.documents = max(0, self.documents - int(whole_document))
        for stem in set(stems):
            left = self.frequency.pop(stem, 0) - 1
            if left > 0:
                self.frequency[stem] = left

    def idf(self, stem: str) -> float:
        return math.log((self.documents + 1) / (self.frequency.get(stem, 0) + 0.5))

    def is_rare(self, stem: str) -> bool:
        return self.frequency.get(stem, 0) <= max(1, self.rare_share * self.documents)


class Cue(BaseModel):
    type: RelationType
    # The rule as one regex over a sentence (case-insensitive): group 1 is the text before the cue, group 2 the
    # text after it. It defines what matches but is not run: a failed search for a leading `(.*)` retries
    # from every position, quadratic in the sentence (a 16 KiB turn without a sentence end took a minute).
    pattern: str
    # Which regex group is the antecedent (cause / condition / motive); the other group is the consequent.
    antecedent_group: int
    strength: float
    # The same rule, run in linear time (``match_cue``): ``head`` is the pattern's part before the cue:
    # "any" `(.*)` (the last cue of the first line that has one), "some" `(.+)` (likewise, not at the line
    # start), "first" `(.*?)` (the first cue), "start" (the pattern is anchored: ``cue`` is the whole pattern
    # up to group 2, with group 1 inside it). ``cue`` matches at the cue's position: the cue and what the
    # pattern needs right after it. ``after``: group 2 runs to the end of its line (`(.+)`), or up to the
    # first comma after the cue, else to the end of the text (`(.+?)(?:,\s*then\b|,|$)`).
    head: Literal["any", "some", "first", "start"]
    cue: str
    after: Literal["line", "comma"] = "line"


# Each pattern captures (1) the text before the cue and (2) the text after it.
CUES: list[Cue] = [
    # "Because X, Y": the cause is X, up to the comma.
    Cue(type=RelationType.CAUSAL, pattern=r"^\W*because(?: of)?\b([^,]+),(.+)", antecedent_group=1, strength=0.85,
        head="start", cue=r"\W*+because(?: of)?\b([^,]++),(?=.)"),
    Cue(type=RelationType.CAUSAL, pattern=r"(.*)\bbecause(?: of)?\b(.+)", antecedent_group=2, strength=0.85,
        head="any", cue=r"\bbecause(?: of)?\b(?=.)"),
    Cue(type=RelationType.CAUSAL, pattern=r"(.*)\b(?:due to|thanks to|as a result of)\b(.+)", antecedent_group=2, strength=0.8,
        head="any", cue=r"\b(?:due to|thanks to|as a result of)\b(?=.)"),
    # "since" is mostly temporal in conversation ("since we last talked"); only ", since <clause>" is causal.
    Cue(type=RelationType.CAUSAL, pattern=r"(.+),\s*since (?!then|we last|last|I started|we started)(.+)", antecedent_group=2, strength=0.55,
        head="some", cue=r",\s*+since (?!then|we last|last|I started|we started)(?=.)"),
    Cue(type=RelationType.CAUSAL, pattern=r"(.+)\b(?:led to|leads to|resulted in|caused|made me)\b(.+)", antecedent_group=1, strength=0.85,
        head="some", cue=r"\b(?:led to|leads to|resulted in|caused|made me)\b(?=.)"),
    Cue(type=RelationType.CAUSAL, pattern=r"(.*?)\b(?:that's why|that is why|as a result|therefore|so now)\b(.+)", antecedent_group=1, strength=0.75,
        head="first", cue=r"\b(?:that's why|that is why|as a result|therefore|so now)\b(?=.)"),
    Cue(type=RelationType.CAUSAL, pattern=r"(.+),\s*so\b(.+)", antecedent_group=1, strength=0.6,
        head="some", cue=r",\s*+so\b(?=.)"),
    Cue(type=RelationType.CONDITIONAL, pattern=r"(.*)\b(?:only if|as long as|unless|if)\b(.+?)(?:,\s*then\b|,|$)", antecedent_group=2, strength=0.7,
        head="any", cue=r"\b(?:only if|as long as|unless|if)\b(?=.)", after="comma"),
    Cue(type=RelationType.MOTIVATIONAL, pattern=r"(.+)\b(?:in order to|so that|so i can|so we can|with the goal of)\b(.+)", antecedent_group=2, strength=0.75,
        head="some", cue=r"\b(?:in order to|so that|so i can|so we can|with the goal of)\b(?=.)"),
    Cue(type=RelationType.MOTIVATIONAL, pattern=r"(.+)\b(?:inspired me to|motivated me to|pushed me to|encouraged me to|drives me to)\b(.+)", antecedent_group=1, strength=0.8,
        head="some", cue=r"\b(?:inspired me to|motivated me to|pushed me to|encouraged me to|drives me to)\b(?=.)"),
]
# "start" cues are matched at position 0; the others are found wherever they occur (overlaps included).
_COMPILED = [
    (cue, re.compile(cue.cue if cue.head == "start" else f"(?=({cue.cue}))", re.IGNORECASE)) for cue in CUES
]
# Every cue above needs one of these; a sentence without any skips the cues (most sentences). Run on the
# sentence lowercased as IGNORECASE sees it (``ascii_lower``): an IGNORECASE alternation is slower to scan.
_ANY_CUE = re.compile(
    r"because|due to|thanks to|as a result|since|led to|leads to|resulted in|caused|made me|that's why"
    r"|that is why|therefore|so|if|as long as|unless|in order to|with the goal of|me to"
)
# A consequent that opens the turn ("So I ...", "That's why ...") points back at the previous event.
# (\W*+ is possessive: every alternative starts with a word character, so giving back is useless.)
_LEADING_CONSEQUENCE = re.compile(r"\W*+(?:so|that's why|that is why|because of that|as a result|therefore)\b", re.I)


def _line_end(text: str, position: int) -> int:
    end = text.find("\n", position)
    return len(text) if end < 0 else end


def match_cue(cue: Cue, sentence: str, compiled: re.Pattern[str] | None = None) -> tuple[str, str] | None:
    """Groups 1 and 2 of ``re.search(cue.pattern, sentence, re.I)``, or None where it finds nothing.

    Linear in the sentence: the cue is found first (every position it matches at, in one pass), and the
    groups are cut around it, with the regex's own choice among several cues (`.` stops at a newline).
    """
    regex = compiled if compiled is not None else re.compile(
        cue.cue if cue.head == "start" else f"(?=({cue.cue}))", re.IGNORECASE)
    if cue.head == "start":
        found = regex.match(sentence)
        if found is None:
            return None
        return found.group(1), sentence[found.end() : _line_end(sentence, found.end())]
    chosen: tuple[int, int, int] | None = None  # (line start, cue start, cue end)
    line_start, line_end = 0, _line_end(sentence, 0)
    last_comma: int | None = None
    for found in regex.finditer(sentence):
        start, end = found.start(), found.end(1)
        if start > line_end:  # the cue is on a later line
            if chosen is not None:
                break
            line_start, line_end, last_comma = sentence.rfind("\n", 0, start) + 1, _line_end(sentence, start), None
        if cue.head == "some" and start == line_start:
            continue
        if cue.after == "comma" and line_end < len(sentence) - 1:  # `$` is not at this line's end
            if last_comma is None:
                last_comma = sentence.rfind(",", line_start, line_end)
            if last_comma <= end:  # `(.+?)` takes one character at least before the comma
                continue
        chosen = (line_start, start, end)
        if cue.head == "first":
            break
    if chosen is None:
        return None
    line_start, start, end = chosen
    after_end = _line_end(sentence, end)
    if cue.after == "comma":
        comma = sentence.find(",", end + 1, after_end)
        after_end = after_end if comma < 0 else comma
    return sentence[line_start:start], sentence[end:after_end]


CONSECUTIVE_EVIDENCE = "consecutive events"
TOLD_TIME_EVIDENCE = "told-time intervals"
# Edges that only say "these two events were told one after the other".
ADJACENCY_EVIDENCE = frozenset({CONSECUTIVE_EVIDENCE, TOLD_TIME_EVIDENCE})
# The evidence of a same-entity and of a same-participant relation: this prefix, then the name(s).
ENTITY_EVIDENCE = "both name "
PARTICIPANTS_EVIDENCE = "same participants: "
# Only explicit cues (and a turn opening with a consequence) make these types; their evidence is the sentence.
_QUOTING_TYPES = frozenset({RelationType.CAUSAL, RelationType.CONDITIONAL, RelationType.MOTIVATIONAL})


def rests_on_turn(relation: Relation, removed: Observation, rebuilt: Event) -> bool:
    """Whether a relation of ``rebuilt``'s event rests on the ``removed`` turn, which a redaction has taken out of
    that event, and must go with it: its quoted sentence (an explicit cue's, or a turn opening with "So ...") comes
    from the turn and no turn the event keeps says it; it says both events name an entity that the event no
    longer names; or it lists the turn's speaker among the same participants and the speaker said nothing else in
    the event.

    Such a relation is removed, not given a neutral evidence text: its claim itself (this caused that, both name
    X) was read from the redacted words, so it would keep what they said. The other kinds hold no text of a turn
    (adjacency, told-time and time-anchor order, part-of by time, follow-ups by embedding cosine) and stay."""
    evidence = relation.evidence
    if relation.type is RelationType.SAME_ENTITY:
        return evidence.removeprefix(ENTITY_EVIDENCE) not in rebuilt.entities
    if relation.type is RelationType.SAME_PARTICIPANT:
        listed = evidence.removeprefix(PARTICIPANTS_EVIDENCE).split(", ")
        return removed.speaker in listed and removed.speaker not in rebuilt.participants
    if relation.type in _QUOTING_TYPES:
        return evidence in removed.text and not any(evidence in kept.text for kept in rebuilt.observations)
    return False

_GRANULARITY_CONFIDENCE = {
    Granularity.DAY: 0.9, Granularity.WEEK: 0.75, Granularity.MONTH: 0.6, Granularity.SEASON: 0.5, Granularity.YEAR: 0.4,
}


def make_relation(
    source: Event, target: Event | str, type_: RelationType, confidence: float, evidence: str,
    subtype: str | None = None,
) -> Relation:
    target_id = target if isinstance(target, str) else target.event_id
    return Relation(
        tenant=source.tenant,
        conversation_id=source.conversation_id,
        relation_id=relation_id_for(source.event_id, target_id, type_, subtype),
        source=source.event_id,
        target=target_id,
        type=type_,
        subtype=subtype,
        confidence=round(min(1.0, max(0.0, confidence)), 4),
        evidence=evidence[:300],
        created_at=datetime.now(UTC),
    )


def allen(a_start: datetime | date, a_end: datetime | date, b_start: datetime | date, b_end: datetime | date,
          meets_gap: timedelta | None = None) -> tuple[AllenRelation, bool] | None:
    """Allen relation of interval a to b as (relation, swapped): swapped means it holds from b to a."""
    def relate(s1, e1, s2, e2) -> AllenRelation | None:  # noqa: ANN001 - dates or datetimes alike
        if e1 < s2:
            if meets_gap is not None and isinstance(e1, datetime) and s2 - e1 <= meets_gap:
                return AllenRelation.MEETS
            return AllenRelation.BEFORE
        if e1 == s2 and s1 < e1:
            return AllenRelation.MEETS
        if s1 == s2 and e1 == e2:
            return AllenRelation.EQUALS
        if s1 == s2 and e1 < e2:
            return AllenRelation.STARTS
        if e1 == e2 and s1 > s2:
            return AllenRelation.FINISHES
        if s1 > s2 and e1 < e2:
            return AllenRelation.DURING
        if s1 < s2 < e1 < e2:
            return AllenRelation.OVERLAPS
        return None

    forward = relate(a_start, a_end, b_start, b_end)
    if forward is not None:
        return forward, False
    backward = relate(b_start, b_end, a_start, a_end)
    return (backward, True) if backward is not None else None


def occurrence(event: Event) -> tuple[date, date, Granularity] | None:
    """When the event happened, from its finest time anchor (None when it names no time)."""
    if not event.time_anchors:
        return None
    order = list(Granularity)
    anchor = min(event.time_anchors, key=lambda a: order.index(a.granularity))
    return anchor.start, anchor.end, anchor.granularity


class _CueWindow:
    """The earlier events cue clauses are matched against, for one extraction: their keyword sets, an index
    from stem to the events holding it (built on first use), and the clauses already matched."""

    def __init__(self, events: Sequence[Event], keyword_stats: KeywordStats) -> None:
        self.events = events
        self.keyword_stats = keyword_stats
        self.matched: dict[tuple[str, ...], tuple[Event, float] | None] = {}
        self.keywords: list[frozenset[str]] = []
        self._holders: dict[str, list[int]] | None = None

    def sharing(self, stems: Sequence[str], at_least: int) -> list[int]:
        """Indexes (in window order) of the events holding at least ``at_least`` of ``stems``."""
        if self._holders is None:
            self.keywords = [frozenset(event.keywords) for event in self.events]
            self._holders = {}
            for index, keywords in enumerate(self.keywords):
                for stem in keywords:
                    self._holders.setdefault(stem, []).append(index)
        counts: Counter[int] = Counter()
        for stem in stems:
            counts.update(self._holders.get(stem, ()))
        return sorted(index for index, count in counts.items() if count >= at_least)


class RelationExtractor:
    def __init__(self, config: RelationConfig | None = None) -> None:
        self.config = config or RelationConfig()

    def extract(self, event: Event, history: Sequence[Event] | EventIndex, texts: Sequence[str],
                keyword_stats: KeywordStats, adjacent: bool = True) -> list[Relation]:
        """Relations between ``event`` and earlier ``history`` (chronological), from the turn ``texts`` just added.

        ``history`` is the conversation's events before this step, in creation order: a conversation memory
        passes the ``EventIndex`` of its hot window (the most recent events, kept up to date as events are added,
        so nothing here scans every event); relations are only proposed between ``event`` and those events.
        ``adjacent`` is False when the texts were merged into an older event: then no adjacency edges.
        """
        index = history if isinstance(history, EventIndex) else EventIndex(history)
        # "earlier": the history without the event itself (a merge target is in it), in creation order.
        count, own = index.earlier_rows(event.event_id)
        relations: list[Relation] = []
        previous = index.earlier_tail(own, 1)[0] if count else None
        if adjacent and previous is not None:
            relations.extend(self._adjacency(previous, event))
        window = index.earlier_tail(own, self.config.cue_lookback_events)
        relations.extend(self._cue_relations(event, window, previous, texts, keyword_stats))
        relations.extend(self._anchor_relations(event, window))
        relations.extend(self._entity_relations(event, index, own, previous))
        relations.extend(self._semantic_follow_ups(event, index, own, adjacent))
        return relations

    def _adjacency(self, previous: Event, event: Event) -> list[Relation]:
        similarity = float(np.dot(previous.embedding or [], event.embedding or [])) if previous.embedding and event.embedding else 0.0
        found = allen(previous.temporal_info.start, previous.temporal_info.end,
                      event.temporal_info.start, event.temporal_info.end, self.config.meets_gap)
        relations = [make_relation(previous, event, RelationType.FOLLOW_UP, 0.5 + 0.5 * max(0.0, similarity),
                                   CONSECUTIVE_EVIDENCE)]
        if found is not None:
            kind, swapped = found
            source, target = (event, previous) if swapped else (previous, event)
            relations.append(make_relation(source, target, RelationType.TEMPORAL, 0.95,
                                           TOLD_TIME_EVIDENCE, subtype=kind.value))
        return relations

    def _match_clause(self, clause: str, window: _CueWindow) -> tuple[Event, float] | None:
        """The earlier event a clause restates: most of the clause's IDF mass shared, including two rare terms.

        Only the events sharing enough of the clause's rare stems can qualify; the window's stem index yields
        them (in window order, so ties go to the same event), instead of every clause testing every event.
        """
        found = keyword_stems(clause)
        key = tuple(found)
        if key in window.matched:
            return window.matched[key]
        stems = set(found)
        # A clause of one content word restates nothing: "if you need anything", "it really bugged me" matched
        # whichever earlier event had that word, and early in a conversation every word counts as rare.
        if len(stems) < self.config.clause_min_shared:
            window.matched[key] = None
            return None
        keyword_stats = window.keyword_stats
        need_rare = min(2, len(stems))
        rare = [stem for stem in stems if keyword_stats.is_rare(stem)]
        best: tuple[Event, float] | None = None
        if len(rare) >= need_rare:
            weights = {stem: keyword_stats.idf(stem) for stem in stems}
            total = sum(weights.values())
            for index in window.sharing(rare, need_rare):
                candidate, keywords = window.events[index], window.keywords[index]
                shared = stems & keywords
                if len(shared) < self.config.clause_min_shared:
                    continue
                coverage = sum(weights[s] for s in shared) / total
                if coverage >= self.config.clause_min_coverage and (best is None or coverage > best[1]):
                    best = (candidate, coverage)
        window.matched[key] = best
        return best

    def _cue_relations(self, event: Event, window: Sequence[Event], previous: Event | None,
                       texts: Sequence[str], keyword_stats: KeywordStats) -> list[Relation]:
        relations: list[Relation] = []
        first_text = event.observations[0].text if event.observations else ""
        cue_window = _CueWindow(window, keyword_stats)
        for text in texts:
            for sentence in sentences(text):
                if _ANY_CUE.search(ascii_lower(sentence)):
                    relations.extend(self._sentence_relations(event, cue_window, sentence))
        if previous is not None and texts and texts[0] == first_text and _LEADING_CONSEQUENCE.match(first_text):
            relations.append(make_relation(previous, event, RelationType.CAUSAL, 0.6,
                                           first_text[:120]))
        return relations

    def _sentence_relations(self, event: Event, window: _CueWindow, sentence: str) -> list[Relation]:
        for cue, regex in _COMPILED:
            groups = match_cue(cue, sentence, regex)
            if groups is None:
                continue
            # The antecedent (cause, condition, motive) restating an earlier event makes that event the source;
            # a consequent restating an earlier event would put the effect before its cause, so it is not used.
            found = self._match_clause(groups[cue.antecedent_group - 1], window)
            if found is None:
                return []
            other, coverage = found
            return [make_relation(other, event, cue.type, cue.strength * (0.5 + 0.5 * coverage), sentence)]
        return []

    def _anchor_relations(self, event: Event, window: Sequence[Event]) -> list[Relation]:
        """Order the event against the anchored events nearest in occurrence time (one before, one after)."""
        mine = occurrence(event)
        if mine is None:
            return []
        start, end, granularity = mine
        nearest_before: tuple[Event, date] | None = None
        nearest_after: tuple[Event, date] | None = None
        relations: list[Relation] = []
        shared_terms = set(event.keywords) | {e.lower() for e in event.entities}
        for other in window:
            theirs = occurrence(other)
            if theirs is None or other.event_id == event.event_id:
                continue
            o_start, o_end, o_granularity = theirs
            found = allen(o_start, o_end, start, end)
            if found is None:
                continue
            kind, swapped = found
            # This event's time lies inside a coarser period of another event about the same things.
            if kind is AllenRelation.DURING and swapped and o_granularity != granularity:
                if shared_terms & (set(other.keywords) | {e.lower() for e in other.entities}):
                    relations.append(make_relation(event, other, RelationType.PART_OF, 0.6,
                                                   "time anchor within the other event's period and shared terms"))
            if kind in (AllenRelation.BEFORE, AllenRelation.MEETS):
                holder = (other, o_end) if not swapped else None
                if holder and (nearest_before is None or o_end > nearest_before[1]):
                    nearest_before = holder
                if swapped and (nearest_after is None or o_start < nearest_after[1]):
                    nearest_after = (other, o_start)
        confidence = _GRANULARITY_CONFIDENCE[granularity]
        if nearest_before is not None:
            relations.append(make_relation(nearest_before[0], event, RelationType.TEMPORAL, confidence,
                                           "resolved time anchors", subtype=AllenRelation.BEFORE.value))
        if nearest_after is not None:
            relations.append(make_relation(event, nearest_after[0], RelationType.TEMPORAL, confidence,
                                           "resolved time anchors", subtype=AllenRelation.BEFORE.value))
        return relations

    def _entity_relations(self, event: Event, index: EventIndex, own_row: int | None,
                          previous: Event | None) -> list[Relation]:
        """Link to the latest earlier event naming the same entity; rarer entities first and stronger.

        The entity index gives, per name, the rows of the events naming it: their count (less the event's own
        row) is how many earlier events name it, and the last of them the latest.
        """
        own = [e for e in event.entities if e not in event.participants]
        if not own or previous is None:
            return []
        frequency = {name: index.count_except(index.rows_naming(name), own_row) for name in own}
        ranked = sorted((name for name in own if frequency[name] > 0), key=lambda n: frequency[n])
        relations: list[Relation] = []
        for name in ranked[: self.config.entity_links_max]:
            latest = index.event_at(index.latest_except(index.rows_naming(name), own_row))
            confidence = 0.4 + 0.5 / frequency[name]
            relations.append(make_relation(latest, event, RelationType.SAME_ENTITY, confidence,
                                           ENTITY_EVIDENCE + name))
        if previous.participants != event.participants:
            row = index.latest_except(index.rows_with_participants(event.participants), own_row)
            if row is not None:
                same = index.event_at(row)
                relations.append(make_relation(same, event, RelationType.SAME_PARTICIPANT, 0.6,
                                               PARTICIPANTS_EVIDENCE + ", ".join(event.participants)))
        return relations

    def _semantic_follow_ups(self, event: Event, index: EventIndex, own_row: int | None,
                             adjacent: bool) -> list[Relation]:
        """A topic picked up again later: the most similar earlier events of other sessions.

        Among the earlier events (less the previous one when the event is new), those of another session: the
        session index rules out the rest, and their rows of the event matrix are scored in creation order.
        """
        if not index.regular:
            earlier = [e for e in index.events if e.event_id != event.event_id]
            return self._follow_ups_among(event, earlier[:-1] if adjacent else earlier)
        count = len(index) - (own_row is not None)
        if count - (1 if adjacent and count else 0) <= 0 or not event.embedding or self.config.follow_up_max == 0:
            return []
        mask = np.ones(len(index), dtype=bool)
        if own_row is not None:
            mask[own_row] = False
        if adjacent:  # the previous event: the last earlier row
            mask[len(index) - 1 if own_row != len(index) - 1 else len(index) - 2] = False
        for session in set(event.session_ids):
            mask[index.rows_in_session(session)] = False
        rows = np.flatnonzero(mask)
        if not len(rows):
            return []
        scores = index.scores(rows, np.asarray(event.embedding, dtype=np.float32))
        return self._follow_up_relations(event, lambda at: index.event_at(rows[at]), scores)

    def _follow_ups_among(self, event: Event, earlier: Sequence[Event]) -> list[Relation]:
        """``_semantic_follow_ups`` by a scan of the earlier events (events without a usable embedding)."""
        if not earlier or not event.embedding or self.config.follow_up_max == 0:
            return []
        sessions = set(event.session_ids)
        candidates = [e for e in earlier if e.embedding and not sessions & set(e.session_ids)]
        if not candidates:
            return []
        scores = np.asarray([e.embedding for e in candidates], dtype=np.float32) @ np.asarray(event.embedding, dtype=np.float32)
        return self._follow_up_relations(event, candidates.__getitem__, scores)

    def _follow_up_relations(self, event: Event, candidate: Callable[[int], Event],
                             scores: np.ndarray) -> list[Relation]:
        """The best-scoring candidates (``candidate(i)`` is the one ``scores[i]`` belongs to) above the cosine."""
        relations = []
        for index in np.argsort(-scores)[: self.config.follow_up_max]:
            if scores[index] < self.config.follow_up_cosine:
                break
            relations.append(make_relation(candidate(int(index)), event, RelationType.FOLLOW_UP, float(scores[index]),
                                           f"semantic follow-up (cosine {scores[index]:.2f})"))
        return relations
