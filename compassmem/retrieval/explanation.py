"""Why a query's turns are where they are (``explain: true``): built from what the ranking already holds.

Nothing here searches, embeds or scores again: the channels come from the store searches' hits the view kept
(``MemoryView.search_hits``) and the ranking lists' places (the per-subgoal channel features), the contributions from
the ranking features the engine scored with (``engine.turn_features``) times the model's weights, the path from the
evidence items. So the explanation costs a few hundred microseconds on top of a query, and explaining never changes
the ranking.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import date, datetime
from typing import Protocol

import numpy as np

from compassmem.core.contracts.query import (
    AskedCategory,
    ChannelHit,
    DateSpan,
    EvidenceItem,
    QueryExplanation,
    QuestionExplanation,
    SubgoalExplanation,
    TurnExplanation,
)
from compassmem.retrieval.decomposition import QuestionAnalysis, keyword_query, question_shape
from compassmem.retrieval.memory_view import MemoryView
from compassmem.retrieval.navigation import Reached
from compassmem.retrieval.ranking_model import RANK_SCALE, RankingModel
from compassmem.sinks.vector_store import TurnHit
from compassmem.text.lexicon import noun_lexicon

# The store searches in the order a turn's channels list them.
SEARCH_CHANNELS = ("dense", "passage", "keyword", "time", "category", "wish")


class Scored(Protocol):
    """A subgoal's scores (the engine's ``SubgoalScores``): what the explanation reads of them."""

    text: str
    turns: np.ndarray
    channels: dict[str, np.ndarray]
    best_similarity: float


def explain_question(analysis: QuestionAnalysis, scored: Sequence[Scored], asked: set[str],
                     spans: Sequence[tuple[date, date]], reference: datetime | None) -> QuestionExplanation:
    """What the question was taken to ask: its subgoals, shape, times and the categories and speakers it names."""
    similarity = {s.text: s.best_similarity for s in scored}
    lexicon = noun_lexicon() if analysis.categories else None
    return QuestionExplanation(
        subgoals=[SubgoalExplanation(text=s.text, keywords=s.keywords, best_similarity=similarity.get(s.text, 0.0))
                  for s in analysis.subgoals],
        shape=question_shape(analysis.question, analysis),  # type: ignore[arg-type] - one of SHAPES
        temporal=analysis.temporal, causal=analysis.causal, aggregate=analysis.aggregate,
        categories=[AskedCategory(synset=synset, name=lexicon.name(synset)) for synset in analysis.categories]
        if lexicon is not None else [],
        asked_speakers=sorted(asked), entities=analysis.entities, events=analysis.events,
        time_spans=[DateSpan(start=start, end=end) for start, end in spans], time_reference=reference)


def explain_turns(view: MemoryView, order: np.ndarray, scored: Sequence[Scored], features: Mapping[str, np.ndarray],
                  final: np.ndarray, model: RankingModel, walk_scores: np.ndarray, event_scores: np.ndarray,
                  reached: Mapping[str, Reached], best_subgoal: Mapping[str, str],
                  evidence: Sequence[EvidenceItem]) -> list[TurnExplanation]:
    """One explanation per ranked row of ``order``, in its order."""
    rows = [int(row) for row in order]
    if not rows:
        return []
    found = _search_channels(view, rows)
    ranked = _ranking_channels(view, rows, scored, walk_scores, best_subgoal)
    # Feature x explained turn, only the features some explained turn has (a chat's NAME*long terms are all 0).
    every = list(features)
    values = np.vstack([features[name][rows] for name in every])
    held = np.any(values != 0, axis=1)
    names = [name for name, kept in zip(every, held.tolist(), strict=True) if kept]
    values = values[held]
    weighted = [(name, weight) for name, weight in model.weights.items() if weight and name in set(names)]
    contributions = (np.asarray([weight for _, weight in weighted])[:, None]
                     * np.vstack([features[name][rows] for name, _ in weighted])) if weighted \
        else np.zeros((0, len(rows)))
    by_score = np.empty(len(final), dtype=np.int64)
    by_score[np.argsort(-final, kind="stable")] = np.arange(len(final))
    best_subgoals = np.argmax(np.vstack([s.turns[rows] for s in scored]), axis=0).tolist()
    paths = {item.event_id: item.path for item in evidence}
    value_columns, contribution_columns = values.T.tolist(), contributions.T.tolist()
    explained = []
    for index, row in enumerate(rows):
        event_id = view.turn_event_ids[row]
        event_row = int(view.turn_event[row])
        searched = found.get(row, [])
        added = sorted(((name, c) for (name, _), c in zip(weighted, contribution_columns[index], strict=True) if c),
                       key=lambda item: -abs(item[1]))
        explained.append(TurnExplanation(
            conversation_id=view.turn_conversations[row], turn_id=view.turn_ids[row], rank=index + 1,
            score=float(final[row]), score_rank=int(by_score[row]) + 1, candidates=len(final),
            channels=[*searched, *ranked[index]], found_with_event=not searched,
            features={name: value for name, value in zip(names, value_columns[index], strict=True) if value},
            contributions=dict(added),
            subgoal=scored[best_subgoals[index]].text,
            event_id=event_id,
            event_score=round(float(event_scores[event_row]), 4) if event_row >= 0 else 0.0,
            path=paths[event_id] if event_id in paths else (reached[event_id].path if event_id in reached else [])))
    return explained


def explanation(question: QuestionExplanation, model: RankingModel, shape: float,
                turns: list[TurnExplanation]) -> QueryExplanation:
    return QueryExplanation(question=question, model=model.source,
                            weights={name: weight for name, weight in model.weights.items() if weight},
                            conversation_shape=shape, turns=turns)


def _search_channels(view: MemoryView, rows: Sequence[int]) -> dict[int, list[ChannelHit]]:
    """Per explained row, the store searches that returned its turn: each channel's best place over the subgoals
    searched (the first subgoal on a tie), with the hit's score."""
    wanted = {(view.turn_conversations[row], view.turn_ids[row]): row for row in rows}
    best: dict[int, dict[str, ChannelHit]] = {}
    for channel in SEARCH_CHANNELS:
        for subgoal, hits in view.search_hits.get(channel, ()):
            for rank, hit in enumerate(hits):
                if not isinstance(hit, TurnHit):
                    continue
                row = wanted.get((hit.conversation_id, hit.turn_id))
                if row is None:
                    continue
                held = best.setdefault(row, {})
                if channel not in held or rank + 1 < held[channel].rank:
                    held[channel] = ChannelHit(channel=channel, stage="search", rank=rank + 1, score=float(hit.score),
                                               subgoal=subgoal)
    return {row: [held[c] for c in SEARCH_CHANNELS if c in held] for row, held in best.items()}


def _ranking_channels(view: MemoryView, rows: Sequence[int], scored: Sequence[Scored], walk_scores: np.ndarray,
                      best_subgoal: Mapping[str, str]) -> list[list[ChannelHit]]:
    """Per explained row, the lists among the candidates that raised its score and no search stands for: the BM25
    windows (the best place over the subgoals) and the graph walk (its event's place among the walked events)."""
    places = np.vstack([s.channels["window_rank"][rows] for s in scored])  # subgoal x explained turn
    best = np.argmax(places, axis=0).tolist()
    windows: dict[int, list[np.ndarray]] = {}
    walked = np.sort(walk_scores[walk_scores > 0])
    explained = []
    for index, row in enumerate(rows):
        channels = []
        place = float(places[best[index], index])
        if place > 0:
            text = scored[best[index]].text
            if best[index] not in windows:
                windows[best[index]] = [w for w in (view.scored_windows(text),
                                                    view.scored_windows(keyword_query(text) or text)) if w is not None]
            channels.append(ChannelHit(channel="window", stage="ranking", rank=_place(place),
                                       score=max((float(w[row]) for w in windows[best[index]]), default=0.0),
                                       subgoal=text))
        event_row = int(view.turn_event[row])
        if event_row >= 0 and walk_scores[event_row] > 0:
            score = float(walk_scores[event_row])
            higher = len(walked) - int(np.searchsorted(walked, score, side="right"))
            channels.append(ChannelHit(channel="walk", stage="ranking", rank=higher + 1, score=score,
                                       subgoal=best_subgoal.get(view.turn_event_ids[row])))
        explained.append(channels)
    return explained


def _place(rank_feature: float) -> int:
    """The 1-based place a rank feature (``RANK_SCALE / (RANK_SCALE + rank)``) stands for."""
    return int(round(RANK_SCALE / rank_feature - RANK_SCALE)) + 1
