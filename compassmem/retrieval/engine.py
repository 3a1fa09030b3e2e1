"""Answering a question from memory: subgoals, hybrid seeds, graph navigation, ranked evidence turns.

The one code path behind ``POST /v1/query`` and the recall benchmark.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Collection, Sequence
from datetime import date, datetime, timedelta
from typing import NamedTuple

import numpy as np
import structlog
from pydantic import BaseModel, Field

from compassmem.core.contracts.query import (
    EvidenceItem,
    QueryExplanation,
    QueryRequest,
    QueryResponse,
    TurnOut,
    TurnRef,
)
from compassmem.core.contracts.search import SearchScope
from compassmem.embedding.embedders import Embedder
from compassmem.core.logging_setup import current_request_id
from compassmem.core.models import Granularity, TimeAnchor, search_text
from compassmem.text.categories import category_term
from compassmem.text.lexicon import load_in_background
from compassmem.text.text_features import keyword_stems, sparse_keyword_vector
from compassmem.text.time_keys import joined_spans, question_time_keys
from compassmem.text.time_resolution import is_bare_holiday, resolve_time_expressions
from compassmem.retrieval.decomposition import QuestionAnalysis, analyse, keyword_query, with_subgoals
from compassmem.retrieval.explanation import explain_question, explain_turns, explanation
from compassmem.retrieval.hot_tier import HotEvent, HotTier
from compassmem.retrieval.memory_view import MemoryView, TurnKey
from compassmem.retrieval.navigation import NavigationConfig, Reached, walk
from compassmem.retrieval.reranker import Reranker
from compassmem.retrieval.bm25_index import bm25_tokens
from compassmem.retrieval.relevance import (
    RelevanceModel,
    closest_speaker_share,
    coverage_of,
    overlaps,
    question_inputs,
    shipped_relevance_model,
    turn_inputs,
)
from compassmem.retrieval.ranking_model import (
    BASE_FEATURES,
    RANK_SCALE,
    RERANK,
    RERANK_TERMS,
    SPEAKER,
    RankingModel,
    conversation_shape,
    hand_model,
    rank_feature,
    shipped_model,
)
from compassmem.sinks.vector_store import (
    STANDING_WISH_MARK,
    EventHit,
    HitSearch,
    TurnHit,
    TurnLocator,
    VectorStore,
)
from compassmem.core.tracing import set_attributes, span, stage

log = structlog.get_logger(__name__)


class RankingConfig(BaseModel):
    rrf_constant: int = Field(default=60, ge=1)
    # Candidates come from the stores, per subgoal: nearest turns, best keyword turns, nearest events. Their events
    # (at most max_candidate_events, best first) and the events one relation away from them (at most
    # neighbour_events) are what is ranked, so a query's cost follows these numbers, not the memory's size.
    # Cold loads over big scopes make these caps the tail of latency: docs/decisions/004-query-candidate-caps.md.
    dense_candidates: int = Field(default=100, ge=1)
    # Nearest passages of long turns (text/passages.py), per subgoal: a turn found by a later passage is a
    # candidate, and its dense score is its best passage's.
    passage_candidates: int = Field(default=50, ge=0)
    # The dense list's weight in a turn's fused score (the keyword list's is 1, the window list's window_weight).
    dense_weight: float = Field(default=1.0, ge=0.0)
    keyword_candidates: int = Field(default=100, ge=1)
    # Event-level dense search; off by default, like the keyword one below: the turns' events already cover what it
    # finds, at a high cost (docs/decisions/004-query-candidate-caps.md).
    event_candidates: int = Field(default=0, ge=0)
    max_candidate_events: int = Field(default=35, ge=1)
    # ... taken in that many at a time until they hold this many turns, up to max_candidate_events_total events:
    # 35 LoCoMo events hold about 190 turns, 35 one-message events of an assistant chat 35
    # (docs/decisions/002-retrieval-across-conversation-styles.md).
    max_candidate_turns: int = Field(default=200, ge=1)
    max_candidate_events_total: int = Field(default=200, ge=1)
    # Turns said at, or speaking of, the time a question names, nearest to the question first (the time channel).
    time_candidates: int = Field(default=20, ge=0)
    time_weight: float = Field(default=1.0, ge=0.0)
    # Turns that state a standing instruction or preference (text_features.states_standing_wish), nearest to the
    # question first: candidates whatever words they share with it (docs/decisions/003-fitted-ranking.md).
    wish_candidates: int = Field(default=5, ge=0)
    neighbour_events: int = Field(default=20, ge=0)
    # Event-level keyword search (sparse over whole events); off by default: turn-level keyword hits already
    # reach their events (docs/decisions/004-query-candidate-caps.md).
    event_keyword_candidates: int = Field(default=0, ge=0)
    seeds_per_subgoal: int = Field(default=5, ge=1)
    # A turn's score mixes its own hybrid score with its event's score: context is evidence too.
    turn_weight: float = Field(default=0.5, ge=0.0, le=1.0)
    # Neighbouring turns of the same session: an answer often sits next to the turn that matches the question.
    context_weight: float = Field(default=0.15, ge=0.0, le=1.0)
    # BM25 over 3-turn windows of a session (best window containing the turn), fused into the turn score.
    window_weight: float = Field(default=2.0, ge=0.0)
    walk_weight: float = Field(default=0.1, ge=0.0)
    # Each turn already taken from the same session lowers the next one's score by this much (multi-hop
    # questions gather facts spread over many sessions).
    session_diversity: float = Field(default=0.0, ge=0.0)
    aggregate_session_diversity: float = Field(default=0.03, ge=0.0)
    # Aggregating questions gather distinct instances ("What activities does Melanie do?"): each turn is also
    # lowered by this much times its similarity to the most similar turn already taken, so that five turns about
    # one pottery class do not fill the places of the camping trip and the concert (maximal marginal relevance).
    # Weight: docs/decisions/005-ranking-adjustments.md.
    aggregate_redundancy: float = Field(default=0.15, ge=0.0)
    # Every subgoal is scored twice, the second time expanded with its best turns (pseudo-relevance feedback),
    # and the two averaged: the turns found first say how the conversation words what was asked, and find the
    # same kind of fact told in other words or other sessions. Once only for aggregating questions; for every
    # question: docs/decisions/005-ranking-adjustments.md.
    feedback_turns: int = Field(default=3, ge=0)
    feedback_weight: float = Field(default=1.0, ge=0.0)
    # Temporal questions: turns that carry a time expression are where dates are said.
    time_boost: float = Field(default=0.15, ge=0.0)
    # A question that names a day or a period ("What did Jon do in May 2023?") is answered by turns said then or
    # naming a day in it.
    date_boost: float = Field(default=0.2, ge=0.0)
    # A question that asks for a category ("What activities has Melanie done?") is answered by turns naming its
    # instances ("camping", "swimming"), which share no word with it: the turns labelled with the category (a
    # keyword search over the labels, up to category_candidates) join the candidates, and are fused into each
    # subgoal's turn scores as one more ranked list (nearest to the subgoal first, weighted by label score).
    category_candidates: int = Field(default=100, ge=0)
    category_weight: float = Field(default=1.0, ge=0.0)
    # A question about a participant ("What pets does Nate have?") is answered by that participant's own turns.
    speaker_boost: float = Field(default=0.2, ge=0.0)
    # ... unless the question names the wrong one ("What did Melanie paint?" when Caroline painted it): the best
    # turn of each participant the question does not name keeps its place in the first this-many turns if it
    # had one before the boost.
    speaker_hedge_top: int = Field(default=5, ge=0)
    # A question relating two events in time ("How long before B did A?"): each event's best turns (by its own
    # subgoal) keep these places, its best within the first 5, its second within the first 10.
    event_reserved_places: tuple[int, ...] = (5, 10)
    # A subgoal whose best event is weaker than this is rewritten to its content words and searched again.
    unmet_threshold: float = Field(default=0.45, ge=0.0, le=1.0)
    # A turn that asks ("Got any paintings to show?") shares the words of a question put to the memory but
    # rarely holds its answer: its score is lowered by this much times the share of its text that asks. Its
    # neighbours keep the context it gives (context_weight uses the unlowered scores). On the LoCoMo development
    # split asking turns are half as common among the evidence as elsewhere (docs/decisions/005-ranking-adjustments.md).
    question_penalty: float = Field(default=0.25, ge=0.0)
    # The relevance reranker reads the question with each of this many turns, the best of the ranking without it,
    # and its verdict is one more feature (ranking_model.RERANK); its cost grows with this number, not with memory.
    rerank_candidates: int = Field(default=20, ge=0, le=200)
    # The most a query waits for the reranker (and never past its deadline); past it the query ranks without it.
    # Queries share the reranker's threads, so under load this bounds what others' long questions cost one query.
    rerank_budget_ms: int = Field(default=1000, ge=10, le=10_000)
    # The final score of a turn: the weights shipped with the package (ranking_model.py: the hand-chosen ones below
    # as they were when it was fitted, plus fitted terms for long turns), or the hand-chosen ones alone
    # (turn_weight, context_weight, question_penalty, time_boost, date_boost, speaker_boost; changing them changes
    # the shipped model only when benchmarks/fit_ranking.py is run again). docs/decisions/003-fitted-ranking.md.
    fitted: bool = True


class EngineConfig(BaseModel):
    ranking: RankingConfig = Field(default_factory=RankingConfig)
    navigation: NavigationConfig = Field(default_factory=NavigationConfig)
    # Weights to rank by instead of those ``ranking.fitted`` chooses (the fitting script's folds).
    model: RankingModel | None = None

    def ranking_model(self) -> RankingModel:
        if self.model is not None:
            return self.model
        if self.ranking.fitted:
            return shipped_model()
        r = self.ranking
        return hand_model(r.turn_weight, r.context_weight, r.question_penalty, r.time_boost, r.date_boost,
                          r.speaker_boost)


def _rank_scores(scores: np.ndarray) -> np.ndarray:
    """0-based rank of each entry by descending score."""
    order = np.argsort(-scores, kind="stable")
    ranks = np.empty(len(scores), dtype=np.int64)
    ranks[order] = np.arange(len(scores))
    return ranks


def _normalised(values: np.ndarray) -> np.ndarray:
    top = float(values.max()) if len(values) else 0.0
    return values / top if top > 0 else values


class QueryDeadlineExceeded(RuntimeError):
    """A query ran past its deadline (``COMPASSMEM_API_QUERY_DEADLINE_S``) while gathering evidence."""

    def __init__(self, deadline_s: float, phase: str) -> None:
        super().__init__(f"the query ran past its deadline of {deadline_s:g} s (during {phase})")
        self.deadline_s = deadline_s
        self.phase = phase


class _Deadline:
    """Checked between steps: a query stops at the first step boundary after its deadline."""

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        self._at = None if seconds is None else time.monotonic() + seconds

    @property
    def passed(self) -> bool:
        return self._at is not None and time.monotonic() > self._at

    def left_s(self) -> float | None:
        """Seconds left (None: no deadline), never below 0."""
        return None if self._at is None else max(0.0, self._at - time.monotonic())

    def check(self, phase: str) -> None:
        if self.passed:
            assert self.seconds is not None
            raise QueryDeadlineExceeded(self.seconds, phase)


class SubgoalScores(BaseModel, arbitrary_types_allowed=True):
    text: str
    turns: np.ndarray
    events: np.ndarray
    best_similarity: float
    # Per turn, what each channel said of it (ranking_model.FEATURES: dense, dense_rank, keyword_rank, ...).
    channels: dict[str, np.ndarray]

    def combined(self, other: SubgoalScores, how: Callable[[np.ndarray, np.ndarray], np.ndarray],
                 best_similarity: float) -> SubgoalScores:
        return SubgoalScores(text=self.text, turns=how(self.turns, other.turns), events=how(self.events, other.events),
                             best_similarity=best_similarity,
                             channels={name: how(values, other.channels[name]) for name, values in self.channels.items()})


class Gathered(BaseModel, arbitrary_types_allowed=True):
    """What a question found before its final order: the candidates' view and their scores."""

    analysis: QuestionAnalysis
    view: MemoryView
    scored: list[SubgoalScores]
    event_scores: np.ndarray
    # Per event, the most the walk from any subgoal's seeds gave it (0 for a seed or an event not reached).
    walk_scores: np.ndarray
    reached: dict[str, Reached]
    best_subgoal: dict[str, str]
    # The subgoals' embeddings, the whole question's first (relevance reads its similarity to each turn).
    vectors: np.ndarray


class Relevance(NamedTuple):
    """How likely each returned turn is evidence and the memory holds an answer (retrieval/relevance.py)."""

    turns: np.ndarray  # per place of the order, before ``min_relevance`` drops any
    answerable: float
    turn_inputs: dict[str, np.ndarray]
    question_inputs: dict[str, float]


class Ranked(NamedTuple):
    """A question's final order and what it was computed from (what an explanation reads)."""

    refs: list[TurnRef]
    evidence: list[EvidenceItem]
    order: np.ndarray
    features: dict[str, np.ndarray]
    final: np.ndarray
    asked: set[str]
    spans: list[tuple[date, date]]
    # How many turns the reranker read (None: no reranker ran; 0: its time ran out, the ranking is without it).
    reranked: int | None
    relevance: Relevance


class QueryEngine:
    def __init__(self, embedder: Embedder, vectors: VectorStore, hot: HotTier,
                 config: EngineConfig | None = None,
                 answerer: Callable[[str, list[EvidenceItem]], str | None] | None = None,
                 decomposer: Callable[[str], list[str] | None] | None = None,
                 reranker: Reranker | None = None) -> None:
        self.embedder = embedder
        self.reranker = reranker
        self.decomposer = decomposer
        self.vectors = vectors
        self.hot = hot
        self.config = config or EngineConfig()
        self.model = self.config.ranking_model()
        self.relevance_model: RelevanceModel = shipped_relevance_model()
        self.answerer = answerer
        load_in_background()  # question analysis reads it (the category a question asks for)

    def use_ranking(self, ranking: RankingConfig) -> None:
        """Rank by these from the next query on (a runtime setting changed)."""
        config = self.config.model_copy(update={"ranking": ranking})
        self.config, self.model = config, config.ranking_model()

    def query(self, request: QueryRequest, deadline_s: float | None = None) -> QueryResponse:
        """Answer one question. With ``deadline_s``, raise QueryDeadlineExceeded at the first step boundary past
        it while evidence is gathered; once the evidence is ranked, a passed deadline only skips the LLM answer.

        With traces on, one ``query`` span with a child per step of ``timings_ms``; its attributes say the
        question's length, never its text."""
        with span("query", tenant=request.tenant, scope=request.scope_label, question_chars=len(request.question),
                  budget_turns=request.budget_turns, max_hops=request.max_hops,
                  request_id=current_request_id()) as opened:
            response = self._query(request, deadline_s)
            set_attributes(opened, evidence_items=len(response.evidence), turns=len(response.turn_ids))
            return response

    def _query(self, request: QueryRequest, deadline_s: float | None) -> QueryResponse:
        timings: dict[str, float] = {}
        started = time.perf_counter()
        deadline = _Deadline(deadline_s)
        found = self._gather(request, deadline, timings)
        if found.view.empty:
            explained = self._explained(found, None, timings) if request.explain else None
            timings["total"] = _elapsed(started)
            unanswerable = self.relevance_model.answerable(question_inputs(np.zeros(0), 0.0, 0.0, False, 0.0))
            return QueryResponse(turn_ids=[], evidence=[], subgoals=[s.text for s in found.analysis.subgoals],
                                 timings_ms=timings, explanation=explained, answerable=unanswerable >= 0.5,
                                 answerable_probability=round(unanswerable, 4))
        ranked = self._rank(found, request, deadline, timings)
        refs, evidence = ranked.refs, ranked.evidence
        explained = self._explained(found, ranked, timings) if request.explain else None
        answer = None
        if self.answerer is not None and not deadline.passed:
            with stage("query.answer") as took:
                answer = self.answerer(request.question, evidence)
            timings["answer"] = took.ms
        timings["total"] = _elapsed(started)
        answerable = ranked.relevance.answerable
        return QueryResponse(turn_ids=[r.turn_id for r in refs], turn_refs=refs, evidence=evidence,
                             subgoals=[s.text for s in found.analysis.subgoals], answer=answer, timings_ms=timings,
                             explanation=explained, reranked=ranked.reranked, answerable=answerable >= 0.5,
                             answerable_probability=round(answerable, 4))

    def _explained(self, found: Gathered, ranked: Ranked | None, timings: dict[str, float]) -> QueryExplanation:
        """The explanation of a ranking from what it holds (retrieval/explanation.py): no search, no scoring."""
        with stage("query.explain") as took:
            view, analysis = found.view, found.analysis
            if ranked is None:
                question = explain_question(analysis, found.scored, set(), [], None)
                result = explanation(question, self.model, 0.0, [])
            else:
                question = explain_question(analysis, found.scored, ranked.asked, ranked.spans, view.latest_time())
                turns = explain_turns(view, ranked.order, found.scored, ranked.features, ranked.final, self.model,
                                      found.walk_scores, found.event_scores, found.reached, found.best_subgoal,
                                      ranked.evidence)
                inputs = ranked.relevance.turn_inputs
                for index, turn in enumerate(turns):
                    turn.relevance_inputs = {name: round(float(values[index]), 4) for name, values in inputs.items()}
                result = explanation(question, self.model, conversation_shape(view.length_feature), turns)
                result.answerable_inputs = {name: round(value, 4)
                                            for name, value in ranked.relevance.question_inputs.items()}
        timings["explain"] = took.ms
        return result

    def candidate_features(self, request: QueryRequest) -> tuple[list[TurnRef], dict[str, np.ndarray]]:
        """Every candidate turn of a question with the features the ranking model weighs (what a model is fitted
        on: benchmarks/fit_ranking.py)."""
        found = self._gather(request, _Deadline(None), {})
        if found.view.empty:
            return [], {}
        view = found.view
        refs = [TurnRef(conversation_id=c, turn_id=t) for c, t in zip(view.turn_conversations, view.turn_ids,
                                                                     strict=True)]
        features = turn_features(view, found.analysis, found.scored, found.event_scores, found.walk_scores,
                                 asked_speakers(found.analysis.question, view.speakers))
        self._add_rerank(view, found.analysis, features, self.model.score(features, view.turn_count),
                         tenant=request.tenant, force=True)
        return refs, features

    def _gather(self, request: QueryRequest, deadline: _Deadline, timings: dict[str, float]) -> Gathered:
        """Subgoals, candidates, their scores per subgoal and the walk's event scores: all but the final order."""
        analysis = analyse(request.question)
        if self.decomposer is not None:
            with stage("query.decompose") as took:
                analysis = with_subgoals(analysis, self.decomposer(request.question) or [])
            timings["decompose"] = took.ms
            deadline.check("decompose")
        with stage("query.embed", subgoals=len(analysis.subgoals)) as took:
            vectors = self.embedder.embed([s.text for s in analysis.subgoals])
        timings["embed"] = took.ms
        with stage("query.load") as took:
            view = self._candidates(request.search_scope, analysis, vectors, timings)
        timings["load"] = took.ms
        if view.empty:
            return Gathered(analysis=analysis, view=view, scored=[], event_scores=np.zeros(0),
                            walk_scores=np.zeros(0), reached={}, best_subgoal={}, vectors=vectors)
        deadline.check("load")
        with stage("query.search", candidate_turns=view.turn_count) as took:
            scored = []
            for subgoal, vector in zip(analysis.subgoals, vectors, strict=True):
                deadline.check("search")
                scored.append(self._score_subgoal(view, subgoal.text, vector))
            if self.config.ranking.feedback_turns:
                feedback = []
                for result, vector in zip(scored, vectors, strict=True):
                    deadline.check("search")
                    feedback.append(self._with_feedback(view, result, vector))
                scored = feedback
            scored = self._retry_unmet(view, analysis, scored, deadline)
        timings["search"] = took.ms
        with stage("query.navigate", candidate_events=len(view.event_ids)) as took:
            event_scores, walk_scores, reached, best_subgoal = self._navigate(view, analysis, scored, vectors,
                                                                              request.max_hops, deadline)
        timings["navigate"] = took.ms
        deadline.check("navigate")
        return Gathered(analysis=analysis, view=view, scored=scored, event_scores=event_scores,
                        walk_scores=walk_scores, reached=reached, best_subgoal=best_subgoal, vectors=vectors)

    def _candidates(self, scope: SearchScope, analysis: QuestionAnalysis, vectors: np.ndarray,
                    timings: dict[str, float]) -> MemoryView:
        """The events worth ranking for a question's subgoals (and the category it asks for), from store searches
        within the scope, with their turns and the events one relation away; everything else stays in the stores.
        ``timings`` gets the load's parts: store searches, hot-tier reads (misses load from the stores) and
        building the view."""
        mark = time.perf_counter()
        ranking = self.config.ranking
        texts = [s.text for s in analysis.subgoals]
        best_rank: dict[str, int] = {}
        must_hold: dict[str, set[str]] = {}
        keyword_hits: dict[str, list[TurnKey]] = {}

        def take(hits: Sequence[TurnHit | EventHit]) -> None:
            for rank, hit in enumerate(hits):
                best_rank[hit.event_id] = min(rank, best_rank.get(hit.event_id, rank))
                if isinstance(hit, TurnHit):
                    must_hold.setdefault(hit.event_id, set()).add(hit.turn_id)

        # The searches of every subgoal in two batches (two engine calls, two round trips to a server): first by
        # meaning, then by keywords. The turns the first finds tell who speaks in the scope, and the keyword
        # searches leave the participants' names out (_search_stems).
        dense: list[HitSearch] = []
        for vector in vectors:
            dense.append(HitSearch("turn", vector, ranking.dense_candidates))
            dense.append(HitSearch("event", vector, ranking.event_candidates))
            dense.append(HitSearch("passage", vector, ranking.passage_candidates))
        subgoal_searches = len(dense)
        # Only questions that gather instances search by category: on single-fact questions the labels only
        # add rivals to the turn that answers.
        by_category = analysis.aggregate and bool(analysis.categories) and ranking.category_candidates > 0
        if by_category:
            labels = sparse_keyword_vector(category_term(synset) for synset in analysis.categories)
            dense.append(HitSearch("turn", labels, ranking.category_candidates))
        # Standing instructions and preferences answer later requests put in other words ("What time is our next
        # meeting?" for "Always use 24-hour times when I ask about meetings"): the nearest of them are candidates.
        if ranking.wish_candidates:
            dense.append(HitSearch("turn", vectors[0], ranking.wish_candidates, marks=(STANDING_WISH_MARK,)))
        # Hits of turns the hot tier holds are located there: reading a hit's payload from the store cost more than
        # the search (about 0.7 ms per 100 hits on qdrant-edge), and a warm conversation's hits are mostly held.
        locate = self.hot.locator(scope)
        dense_results = self.vectors.hits(scope, dense, locate)
        subgoal_results = dense_results[:subgoal_searches]
        category_hits = dense_results[subgoal_searches] if by_category else []
        speakers = {hit.speaker for hits in dense_results for hit in hits if isinstance(hit, TurnHit)}
        # A keyword search per distinct set of stems: a subgoal and its rewrite to content words (_retry_unmet) are
        # searched by the same stems (_search_stems), and so are subgoals that stem alike; each search's texts
        # share its hits.
        by_stems: dict[tuple[str, ...], list[str]] = {}
        for text in texts:
            by_stems.setdefault(_search_stems(text, speakers), []).extend([text, keyword_query(text) or text])
        keyword = [HitSearch("turn", sparse_keyword_vector(stems), ranking.keyword_candidates) for stems in by_stems]
        keyword_results = self.vectors.hits(scope, keyword, locate)
        for hits in dense_results:
            take(hits)
        for hits, query_texts in zip(keyword_results, by_stems.values(), strict=True):
            take(hits)
            for query_text in query_texts:
                keyword_hits[query_text] = [(hit.conversation_id, hit.turn_id) for hit in hits
                                            if isinstance(hit, TurnHit)]
        ranked = sorted(best_rank, key=lambda e: (best_rank[e], e))
        timings["load_search"] = _elapsed(mark)
        mark = time.perf_counter()
        hot = self._candidate_events(scope.tenant, ranked, must_hold)
        time_hits = self._time_channel(scope, analysis, vectors[0], hot, locate)
        if scope.turns is not None:
            hot = self._admitted(scope, hot)
        links: dict[str, int] = {}
        for entry in hot.values():
            for other, _ in entry.links:
                if other not in hot:
                    links[other] = links.get(other, 0) + 1
        nearby = sorted(links, key=lambda e: (-links[e], e))[: ranking.neighbour_events]
        # A far end that is no event (a part_of edge's cluster id) loads as nothing. Neighbours come without their
        # turns: the walk passes through them (their vector and relations) to reach and lift candidates, but their
        # turns were only rivals of the candidates' own (docs/decisions/004-query-candidate-caps.md).
        hot.update(self.hot.events(scope.tenant, nearby, with_turns=False))
        timings["load_hot"] = _elapsed(mark)
        mark = time.perf_counter()
        view = MemoryView(scope.tenant, hot.values(), self.embedder.dim, turn_filter=scope.turns)
        view.keyword_hits.update(keyword_hits)
        for text, hits in zip(texts, subgoal_results[2::3], strict=True):
            view.take_passage_hits(text, [hit for hit in hits if isinstance(hit, TurnHit)])
        view.time_hits = [(hit.conversation_id, hit.turn_id) for hit in time_hits]
        # The searches' hits as they came, for an explanation of the ranking (references only).
        view.search_hits = {
            "dense": list(zip(texts, subgoal_results[0::3], strict=True)),
            "passage": list(zip(texts, subgoal_results[2::3], strict=True)),
            "keyword": [(query_texts[0], hits) for hits, query_texts in zip(keyword_results, by_stems.values(),
                                                                           strict=True)],
            "time": [(None, time_hits)],
            "category": [(None, category_hits)],
            "wish": [(None, dense_results[-1])] if ranking.wish_candidates else [],
        }
        top = max((hit.score for hit in category_hits), default=0.0)
        if top > 0:
            view.label({(hit.conversation_id, hit.turn_id): hit.score / top for hit in category_hits
                        if isinstance(hit, TurnHit)})
        timings["load_view"] = _elapsed(mark)
        return view

    def _candidate_events(self, tenant: str, ranked: Sequence[str],
                          must_hold: dict[str, set[str]]) -> dict[str, HotEvent]:
        """The best-ranked events, max_candidate_events at a time, until they hold max_candidate_turns turns (or
        max_candidate_events_total events are in): what a query reads and ranks is counted in turns, so a memory of
        one-message events (assistant chats) gets as many candidate turns as one of ten-turn events."""
        ranking = self.config.ranking
        hot: dict[str, HotEvent] = {}
        turns, start, size = 0, 0, ranking.max_candidate_events
        limit = min(len(ranked), ranking.max_candidate_events_total)
        while start < limit and size > 0:
            chunk = ranked[start: min(limit, start + size)]
            loaded = self.hot.events(tenant, chunk, must_hold)
            hot.update(loaded)
            turns += sum(len(entry.turn_ids) for entry in loaded.values())
            start += len(chunk)
            # The next read is sized by the turns per event seen so far, so the budget is met in one more read.
            per_event = turns / max(len(hot), 1)
            size = -(-(ranking.max_candidate_turns - turns) // max(per_event, 1e-9)) if per_event else 0
            size = int(max(size, 0))
        return hot

    def _admitted(self, scope: SearchScope, hot: dict[str, HotEvent]) -> dict[str, HotEvent]:
        """The candidate events with only the turns the scope's turn filter admits: the searches found admitted
        turns only, but the hot tier holds whole events, so the store says which of their turns count. An event
        left with none stays, without turns, for the walk to pass through."""
        admitted = self.vectors.admitted_turns(scope, list(hot))
        return {event_id: entry.only({turn_id for turn_id in entry.turn_ids
                                      if (entry.conversation_id, turn_id) in admitted})
                for event_id, entry in hot.items()}

    def _time_channel(self, scope: SearchScope, analysis: QuestionAnalysis, vector: np.ndarray,
                      candidates: dict[str, HotEvent], locate: TurnLocator | None) -> list[TurnHit]:
        """The turns speaking of the time the question names, nearest to the question first (``time_candidates``
        of them; text/time_keys.py), their events added to ``candidates``. Those turns often share neither
        words nor meaning with the question ("Yesterday I met Dana in Boston" for "Which city was Jon in on 20
        October?"): no other search makes them candidates, and in the fusion they are a ranked list of their own.
        Relative times in the question are resolved against the latest turn among the candidates found so far."""
        latest = max((max(entry.timestamps) for entry in candidates.values() if entry.timestamps), default=None)
        keys = question_time_keys(question_spans(analysis.question, latest))
        if not keys or self.config.ranking.time_candidates == 0:
            return []
        search = HitSearch("turn", vector, self.config.ranking.time_candidates, time_keys=keys)
        hits = [hit for hit in self.vectors.hits(scope, [search], locate)[0] if isinstance(hit, TurnHit)]
        must_hold: dict[str, set[str]] = {}
        for hit in hits:
            if hit.event_id not in candidates:
                must_hold.setdefault(hit.event_id, set()).add(hit.turn_id)
        if must_hold:
            candidates.update(self.hot.events(scope.tenant, list(must_hold), must_hold))
        return hits

    def _keyword_hits(self, view: MemoryView, text: str) -> list[TurnKey]:
        """Keyword hits of a text: the ones the candidate search made, else a store search in the view's scope."""
        if text not in view.keyword_hits:
            sparse = sparse_keyword_vector(_search_stems(text, view.speakers))
            view.keyword_hits[text] = [(h.conversation_id, h.turn_id) for h in self.vectors.turn_hits(
                _view_scope(view), sparse, self.config.ranking.keyword_candidates)]
        return view.keyword_hits[text]

    def _score_subgoal(self, view: MemoryView, text: str, vector: np.ndarray,
                       passages: bool = True) -> SubgoalScores:
        """Hybrid (dense + keyword, reciprocal-rank fused) scores of every turn and event for one subgoal; with
        ``passages``, a turn's dense score is its best passage's where the passage search of ``text`` found one."""
        ranking = self.config.ranking
        k = ranking.rrf_constant
        dense_turns = view.dense_scores(text, vector) if passages else view.turn_matrix @ vector
        dense_ranks = _rank_scores(dense_turns)
        turn_rrf = ranking.dense_weight / (k + 1 + dense_ranks)
        channels = {"dense": dense_turns - (dense_turns.max() if len(dense_turns) else 0.0),
                    "dense_rank": rank_feature(dense_ranks)}
        for channel, weight, keys in (("keyword_rank", 1.0, self._keyword_hits(view, text)),
                                      ("time_rank", ranking.time_weight, view.time_hits)):
            listed = np.zeros(len(dense_turns), dtype=np.float64)
            for rank, key in enumerate(keys):
                row = view.turn_row.get(key)
                if row is not None:
                    turn_rrf[row] += weight / (k + 1 + rank)
                    if not listed[row]:  # the lists are best first: a turn listed twice keeps its better place
                        listed[row] = RANK_SCALE / (RANK_SCALE + rank)
            channels[channel] = listed
        dense_events = view.event_matrix @ vector
        event_rrf = 1.0 / (k + 1 + _rank_scores(dense_events))
        if ranking.event_keyword_candidates:
            sparse = sparse_keyword_vector(_search_stems(text, view.speakers))
            event_hits = self.vectors.hits(_view_scope(view), [HitSearch("event", sparse,
                                                                         ranking.event_keyword_candidates)])[0]
            for rank, event_hit in enumerate(event_hits):
                row = view.event_row.get(event_hit.event_id)
                if row is not None:
                    event_rrf[row] += 1.0 / (k + 1 + rank)
        channels["label_rank"] = np.zeros(len(dense_turns), dtype=np.float64)
        if len(view.labelled_rows) and ranking.category_weight > 0:
            # The labelled turns as one more ranked list, ordered by how close they are to the subgoal (and how
            # strongly they carry the label): the instances of the category that fit the question come first.
            rows = view.labelled_rows
            order = np.argsort(-(dense_turns[rows] * view.label_strength), kind="stable")
            turn_rrf[rows[order]] += ranking.category_weight / (k + 1 + np.arange(len(order)))
            channels["label_rank"][rows[order]] = rank_feature(np.arange(len(order), dtype=np.float64))
        window = view.window_scores(text)
        # Only windows that match count: a rank among tied zeros is the turn's place in time, and gave the
        # conversation's first turns up to two dense lists' weight for sharing no word with the question.
        window_ranks = _rank_scores(window)
        turn_rrf += np.where(window > 0, ranking.window_weight / (k + 1 + window_ranks), 0.0)
        channels["window_rank"] = np.where(window > 0, rank_feature(window_ranks), 0.0)
        turns = _normalised(turn_rrf)
        best_turn_of_event = np.zeros(len(view.event_ids), dtype=np.float64)
        valid = view.turn_event >= 0
        np.maximum.at(best_turn_of_event, view.turn_event[valid], turns[valid])
        events = 0.5 * _normalised(event_rrf) + 0.5 * best_turn_of_event
        return SubgoalScores(text=text, turns=turns, events=events,
                             best_similarity=float(dense_events.max()) if len(dense_events) else 0.0,
                             channels=channels)

    def _with_feedback(self, view: MemoryView, result: SubgoalScores, vector: np.ndarray) -> SubgoalScores:
        ranking = self.config.ranking
        best = np.argsort(-result.turns)[: ranking.feedback_turns]
        expanded = vector + ranking.feedback_weight * view.turn_matrix[best].mean(axis=0)
        expanded = expanded / max(float(np.linalg.norm(expanded)), 1e-9)
        # The passages were searched with the subgoal's own vector, not the expanded one.
        again = self._score_subgoal(view, result.text, expanded, passages=False)
        # The channels stay those of the subgoal as asked: the expansion's effect is in the fused scores, and the
        # ranking model keeps a plain dense search among its features.
        averaged = result.combined(again, lambda a, b: 0.5 * (a + b), result.best_similarity)
        return averaged.model_copy(update={"channels": result.channels})

    def _retry_unmet(self, view: MemoryView, analysis: QuestionAnalysis, scored: list[SubgoalScores],
                     deadline: _Deadline | None = None) -> list[SubgoalScores]:
        """Rewrite a subgoal that found nothing strong to its content words, and search again."""
        retried = list(scored)
        for index, result in enumerate(scored):
            if result.best_similarity >= self.config.ranking.unmet_threshold:
                continue
            if deadline is not None:
                deadline.check("search")
            rewrite = keyword_query(result.text)
            if not rewrite or rewrite == result.text:
                continue
            vector = self.embedder.embed([rewrite])[0]
            again = self._score_subgoal(view, rewrite, vector)
            if again.best_similarity > result.best_similarity:
                retried[index] = result.combined(again, np.maximum, again.best_similarity)
        return retried

    def _navigate(self, view: MemoryView, analysis: QuestionAnalysis, scored: list[SubgoalScores],
                  vectors: np.ndarray, max_hops: int,
                  deadline: _Deadline | None = None
                  ) -> tuple[np.ndarray, np.ndarray, dict[str, Reached], dict[str, str]]:
        """Per subgoal: seed from the best events, walk the graph; event score = hybrid + walk bonus. Also the walk
        bonus alone, per event (the ranking model's ``walk`` feature)."""
        ranking = self.config.ranking
        event_scores = np.zeros(len(view.event_ids), dtype=np.float64)
        walked = np.zeros(len(view.event_ids), dtype=np.float64)
        reached_all: dict[str, Reached] = {}
        best_subgoal: dict[str, str] = {}
        for result, vector in zip(scored, vectors, strict=True):
            if deadline is not None:
                deadline.check("navigate")
            seeds_rows = np.argsort(-result.events)[: ranking.seeds_per_subgoal]
            seeds = {view.event_ids[row]: float(result.events[row]) for row in seeds_rows}
            reached = walk(view, vector, seeds, max_hops, self.config.navigation, temporal=analysis.temporal)
            # Seeds already carry their search score; the walk adds what search alone missed.
            walk_scores = np.zeros(len(view.event_ids), dtype=np.float64)
            for event_id, hit in reached.items():
                if hit.hops > 0:
                    walk_scores[view.event_row[event_id]] = hit.score
            combined = result.events + ranking.walk_weight * walk_scores
            walked = np.maximum(walked, walk_scores)
            for event_id, hit in reached.items():
                row = view.event_row[event_id]
                if combined[row] > event_scores[row]:
                    reached_all[event_id] = hit
                    best_subgoal[event_id] = result.text
            improved = combined > event_scores
            for row in np.nonzero(improved)[0]:
                best_subgoal.setdefault(view.event_ids[row], result.text)
            event_scores = np.maximum(event_scores, combined)
        return event_scores, walked, reached_all, best_subgoal

    def _rank(self, found: Gathered, request: QueryRequest, deadline: _Deadline, timings: dict[str, float]) -> Ranked:
        ranking, budget = self.config.ranking, request.budget_turns
        view, analysis, scored, event_scores = found.view, found.analysis, found.scored, found.event_scores
        asked = asked_speakers(analysis.question, view.speakers)
        spans = question_spans(analysis.question, view.latest_time())
        features = turn_features(view, analysis, scored, event_scores, found.walk_scores, asked, spans)
        final = self.model.score(features, view.turn_count)
        reranked = self._add_rerank(view, analysis, features, final, tenant=request.tenant, deadline=deadline,
                                    timings=timings)
        if reranked:
            final = final + sum(self.model.weights.get(name, 0.0) * features[name] for name in RERANK_TERMS)
        speaker_term = self.model.weights.get(SPEAKER, 0.0) * features[SPEAKER]
        unboosted = final - speaker_term if speaker_term.any() else final
        diversity = ranking.aggregate_session_diversity if analysis.aggregate else ranking.session_diversity
        redundancy = ranking.aggregate_redundancy if analysis.aggregate else 0.0
        order = _diversified(view, final, budget, diversity, redundancy)
        if final is not unboosted:
            order = _keep_others_best(view, order, unboosted, asked, ranking.speaker_hedge_top)
        order = _keep_each_events_best(order, scored, analysis.events, ranking.event_reserved_places)
        with stage("query.relevance") as took:
            relevance = self._relevance(found, order, final, features[SPEAKER],
                                        named=bool(asked) and len(asked) < len(view.speakers))
        timings["relevance"] = took.ms
        placing = placing_scores(order, final)
        # Against the relevance as shown (4 places): a turn shown at the threshold is kept.
        kept = np.round(relevance.turns, 4) >= request.min_relevance
        if not kept.all():
            order, placing, relevance = order[kept], placing[kept], _kept_relevance(relevance, kept)
        refs = [TurnRef(conversation_id=view.turn_conversations[row], turn_id=view.turn_ids[row],
                        relevance=round(float(p), 4)) for row, p in zip(order, relevance.turns, strict=True)]
        evidence = self._evidence(view, order, placing, relevance.turns, found.reached, found.best_subgoal, analysis)
        return Ranked(refs, evidence, order, features, final, asked, spans,
                      None if reranked is None else len(reranked), relevance)

    def _relevance(self, found: Gathered, order: np.ndarray, final: np.ndarray, speaker: np.ndarray, *,
                   named: bool) -> Relevance:
        """The returned turns' probability of being evidence and the question's of being answerable."""
        view, question = found.view, found.analysis.question
        cosine = view.dense_scores(question, found.vectors[0])
        question_tokens = bm25_tokens([keyword_query(question) or question])[0]
        candidate_tokens = {token for counts in view.turn_token_counts for token in counts} | view.speaker_tokens
        coverage = coverage_of(question_tokens, candidate_tokens)
        overlap = overlaps([counts.keys() for counts in view.turn_token_counts], question_tokens)
        rows = [int(row) for row in order]
        inputs = turn_inputs(cosine[rows], overlap[rows], coverage, final[rows], speaker[rows], named)
        turns = self.relevance_model.turn_relevance(inputs)
        top_cosine = float(cosine.max()) if len(cosine) else 0.0
        asked = question_inputs(turns, coverage, top_cosine, named,
                                closest_speaker_share(cosine, overlap, speaker) if named else 0.0)
        answerable = self.relevance_model.answerable(asked)
        return Relevance(self.relevance_model.calibrated(turns), answerable, inputs,
                         {name: float(value[0]) for name, value in asked.items()})

    def _add_rerank(self, view: MemoryView, analysis: QuestionAnalysis, features: dict[str, np.ndarray],
                    first: np.ndarray, *, tenant: str, force: bool = False, deadline: _Deadline | None = None,
                    timings: dict[str, float] | None = None) -> list[int] | None:
        """Fill the ``rerank`` feature: the reranker's verdict on the best ``rerank_candidates`` turns by ``first``
        (the ranking without it). Skipped where no reranker runs or the model does not weigh it (unless ``force``:
        the fitting script wants the feature whatever the weights): None. The rows it filled, none when the
        reranker's time (``rerank_budget_ms``, at most what the deadline leaves) ran out first."""
        ranking = self.config.ranking
        weighed = any(self.model.weights.get(name, 0.0) for name in RERANK_TERMS)
        if self.reranker is None or not ranking.rerank_candidates or not (weighed or force):
            return None
        with stage("query.rerank") as took:
            rows = np.argsort(-first, kind="stable")[: ranking.rerank_candidates]
            stems = set(_search_stems(analysis.question, view.speakers))
            documents = [_reranked_text(view, int(row), stems) for row in rows]
            timeout = None  # the fitting script's own calls wait for every verdict
            if deadline is not None:
                left = deadline.left_s()
                timeout = ranking.rerank_budget_ms / 1000
                timeout = timeout if left is None else min(left, timeout)
            scores = self.reranker.scores(analysis.question, documents, tenant=tenant, timeout_s=timeout)
        if timings is not None:
            timings["rerank"] = took.ms
        if scores is None:
            log.warning("query.rerank_skipped", tenant=tenant, candidates=len(rows), waited_ms=round(took.ms, 1))
            return []
        verdict = np.zeros(view.turn_count, dtype=np.float64)
        # Trained with a softmax over each question's turns, its scores mean something only against each other:
        # each turn's softmax share over the best one's (1 for the best).
        scores = scores.astype(np.float64)
        verdict[rows] = np.exp(scores - scores.max())
        features[RERANK] = verdict
        features[RERANK_TERMS[1]] = verdict * conversation_shape(view.length_feature)
        return [int(row) for row in rows]

    def _evidence(self, view: MemoryView, order: np.ndarray, placing: np.ndarray, relevance: np.ndarray,
                  reached: dict[str, Reached], best_subgoal: dict[str, str],
                  analysis: QuestionAnalysis) -> list[EvidenceItem]:
        """The events of the ranked turns, each at the place of its best turn and scored as that place
        (``placing``: never higher than the place before), with its turns in ranking order."""
        grouped: dict[str, list[int]] = {}
        best_place: dict[str, int] = {}
        of_row: dict[int, float] = {}
        for place, row in enumerate(order):
            grouped.setdefault(view.turn_event_ids[row], []).append(int(row))
            best_place.setdefault(view.turn_event_ids[row], place)
            of_row[int(row)] = round(float(relevance[place]), 4)
        stems = set(_search_stems(analysis.question, view.speakers))
        evidence = []
        for event_id, rows in grouped.items():
            event = view.events.get(event_id)
            hit = reached.get(event_id)
            turns = [view.turn(r) for r in rows]
            evidence.append(EvidenceItem(
                conversation_id=turns[0].conversation_id,
                event_id=event_id,
                score=round(float(placing[best_place[event_id]]), 4),
                relevance=max(of_row[row] for row in rows),
                subgoal=best_subgoal.get(event_id, analysis.question),
                turns=[_turn_out(view, row, stems, of_row[row]) for row in rows],
                path=hit.path if hit is not None else [],
                time_anchors=list(event.time_anchors) if event is not None else [],
                cluster_id=event.cluster_id if event is not None else None,
            ))
        return evidence


def placing_scores(order: np.ndarray, final: np.ndarray) -> np.ndarray:
    """The score of each place of the ranking, from the first: its turn's final score, or, where the ranking put the
    turn above better-scored ones (diversity, a participant's hedge, places kept for two events), the best score
    placed after it, so that a list in ranking order never shows a score rising."""
    scores = final[order]
    return np.maximum.accumulate(scores[::-1])[::-1]


def _view_scope(view: MemoryView) -> SearchScope:
    """A search among the view's conversations, under its query's turn filter."""
    return SearchScope(tenant=view.tenant, conversation_ids=tuple(view.conversations), turns=view.turn_filter)


def _turn_out(view: MemoryView, row: int, stems: set[str], relevance: float | None = None) -> TurnOut:
    """A turn as evidence: a long one shows only its passage that answers (``shown_span``)."""
    turn = view.turn(row)
    span = shown_span(view, row, stems)
    return TurnOut(conversation_id=turn.conversation_id, turn_id=turn.turn_id, speaker=turn.speaker,
                   text=turn.text if span is None else turn.text[span[0]: span[1]], timestamp=turn.timestamp,
                   span=span, relevance=relevance)


def _kept_relevance(relevance: Relevance, kept: np.ndarray) -> Relevance:
    """The relevance of the turns ``min_relevance`` kept (the question's answerability is the same)."""
    return relevance._replace(turns=relevance.turns[kept],
                              turn_inputs={name: values[kept] for name, values in relevance.turn_inputs.items()})


def _reranked_text(view: MemoryView, row: int, stems: set[str]) -> str:
    """A turn as the reranker reads it: as it is indexed (day, speaker, text), a long turn by the passage its
    evidence shows."""
    shown = _turn_out(view, row, stems)
    return search_text(shown.speaker, shown.text, shown.timestamp)


def shown_span(view: MemoryView, row: int, stems: set[str]) -> tuple[int, int] | None:
    """The passage of a long turn its evidence shows (None for a turn of one passage): the one closer to a subgoal
    than the turn's opening, else the one holding most of the question's words, else the opening."""
    spans = view.turn_passage_spans[row]
    if len(spans) == 1:
        return None
    closest = view.closest_passage.get(row)
    if closest is not None and closest[1] < len(spans):
        return spans[closest[1]]
    text = view.turn_texts[row]
    shared = [len(stems.intersection(keyword_stems(text[start:end]))) for start, end in spans]
    return spans[max(range(len(spans)), key=lambda index: (shared[index], -index))]


def turn_features(view: MemoryView, analysis: QuestionAnalysis, scored: list[SubgoalScores],
                  event_scores: np.ndarray, walk_scores: np.ndarray, asked: set[str],
                  spans: list[tuple[date, date]] | None = None) -> dict[str, np.ndarray]:
    """Per candidate turn, every feature a ranking model weighs (ranking_model.FEATURES), each the most any subgoal
    gave it. ``spans``: the question's ``question_spans`` when already resolved."""
    fused = np.max(np.vstack([s.turns for s in scored]), axis=0)
    context = np.zeros_like(fused)
    context[1:] = np.where(view.same_session_as_previous, fused[:-1], 0.0)
    context[:-1] = np.maximum(context[:-1], np.where(view.same_session_as_previous, fused[1:], 0.0))
    features = {name: np.max(np.vstack([s.channels[name] for s in scored]), axis=0) for name in scored[0].channels}
    features["fused"] = fused
    features["context"] = context
    features["event"] = _of_turns_events(view, _normalised(event_scores))
    features["walk"] = _of_turns_events(view, walk_scores)
    features["asks"] = view.question_share
    features["wish"] = view.standing_wish
    features["temporal_time"] = view.has_time.astype(np.float64) if analysis.temporal else np.zeros_like(fused)
    if spans is None:
        spans = question_spans(analysis.question, view.latest_time())
    features["dated"] = view.dated_within(spans).astype(np.float64) if spans else np.zeros_like(fused)
    named = bool(asked) and len(asked) < len(view.speakers)
    features[SPEAKER] = np.isin(view.turn_speakers, sorted(asked)).astype(np.float64) if named else np.zeros_like(fused)
    features["length"] = view.length_feature
    features["user_side"] = user_side(view, asked)
    features["early"] = earliness(view) if _ASKS_BEGINNING.search(analysis.question) else np.zeros_like(fused)
    features[RERANK] = np.zeros_like(fused)  # filled after a first ranking (QueryEngine._add_rerank)
    shape = conversation_shape(view.length_feature)
    for name in BASE_FEATURES:
        features[f"{name}*long"] = features[name] * shape
    return features


# "What did I say when I first described ...", "... at the start", "originally": asked about how things began.
_ASKS_BEGINNING = re.compile(r"\b(?:first|initial|initially|at the start|to start|started|starting|began|begin|"
                             r"beginning|originally|original|earliest)\b", re.IGNORECASE)


def earliness(view: MemoryView) -> np.ndarray:
    """Each turn's place in time among its conversation's candidates: 1 for the earliest, 0 for the latest (rows
    are in conversation and time order)."""
    count = view.turn_count
    if not count:
        return np.zeros(0, dtype=np.float64)
    conversations = np.asarray(view.turn_conversations)
    # One pass over the rows: each conversation's rows are one run (a tenant-wide scope holds many conversations).
    starts = np.concatenate(([0], np.flatnonzero(conversations[1:] != conversations[:-1]) + 1))
    sizes = np.diff(np.append(starts, count))
    run = np.repeat(np.arange(len(starts)), sizes)
    last = (sizes - 1)[run]
    return np.where(last > 0, 1.0 - (np.arange(count) - starts[run]) / np.maximum(last, 1), 0.0)


def user_side(view: MemoryView, asked: set[str]) -> np.ndarray:
    """1 for the user's turns where the participants are a user and an assistant named by role (``USER_ROLES``,
    ``ASSISTANT_ROLES``), unless the question names the assistant alone ("What did you recommend?"); else 0.
    What the user says of themselves (facts, plans, instructions) is what later questions mostly ask about, and an
    assistant's answer is mostly built from it."""
    speakers = {speaker.lower() for speaker in view.speakers}
    if not (speakers & USER_ROLES and speakers & ASSISTANT_ROLES) or (
            asked and all(speaker.lower() in ASSISTANT_ROLES for speaker in asked)):
        return np.zeros(view.turn_count, dtype=np.float64)
    users = sorted(speaker for speaker in view.speakers if speaker.lower() in USER_ROLES)
    return np.isin(view.turn_speakers, users).astype(np.float64)


def _of_turns_events(view: MemoryView, per_event: np.ndarray) -> np.ndarray:
    """Per turn, its event's value (0 for a turn whose event is not in the view)."""
    return np.where(view.turn_event >= 0, per_event[np.maximum(view.turn_event, 0)], 0.0)


def _diversified(view: MemoryView, final: np.ndarray, budget: int, session_penalty: float,
                 redundancy_penalty: float) -> np.ndarray:
    """The best ``budget`` rows, taken one at a time from the best ``5 * budget``: each lowered by
    ``session_penalty`` per row already taken from its session and by ``redundancy_penalty`` times its
    similarity to the most similar row taken (ties to the better-ranked row)."""
    ranked = np.argsort(-final, kind="stable")
    if session_penalty == 0 and redundancy_penalty == 0:
        return ranked[:budget]
    candidates = ranked[: budget * 5]
    base = final[candidates]
    sessions = view.session_code[candidates]
    similarity = view.turn_matrix[candidates] @ view.turn_matrix[candidates].T if redundancy_penalty else None
    taken_in_session = np.zeros(len(candidates))
    redundancy = np.zeros(len(candidates))
    open_rows = np.ones(len(candidates), dtype=bool)
    taken: list[int] = []
    for _ in range(min(budget, len(candidates))):
        adjusted = base - session_penalty * taken_in_session - redundancy_penalty * redundancy
        best = int(np.argmax(np.where(open_rows, adjusted, -np.inf)))
        open_rows[best] = False
        taken.append(int(candidates[best]))
        taken_in_session += sessions == sessions[best]
        if similarity is not None:
            redundancy = np.maximum(redundancy, similarity[:, best])
    return np.asarray(taken, dtype=np.int64)


def _keep_others_best(view: MemoryView, order: np.ndarray, unboosted: np.ndarray, asked: set[str],
                      top: int) -> np.ndarray:
    """``order`` with the best turn of each participant not in ``asked`` put back into the first ``top`` places
    when the unboosted ranking had it there (a boost may reorder the top, not remove the other side from it)."""
    if top == 0 or len(order) == 0:
        return order
    ranked = list(order)
    for row in np.argsort(-unboosted, kind="stable")[:top]:
        speaker = view.turn_speakers[row]
        if speaker in asked or any(view.turn_speakers[r] == speaker for r in ranked[:top]):
            continue
        _place_within(ranked, int(row), top)
    return np.asarray(ranked, dtype=np.int64)


def _place_within(ranked: list[int], row: int, top: int) -> None:
    """Move ``row`` to place ``top`` (1-based) unless it is already there or higher; a row not ranked at all
    takes the last row's place (the budget holds)."""
    if row in ranked[:top]:
        return
    if row in ranked:
        ranked.remove(row)
    else:
        ranked.pop()
    ranked.insert(min(top, len(ranked) + 1) - 1, row)


def _keep_each_events_best(order: np.ndarray, scored: list[SubgoalScores], events: list[str],
                           places: Sequence[int]) -> np.ndarray:
    """``order`` with each related event's best turns (by that event's own subgoal) within ``places``: its best
    within the first places[0], its second within the first places[1], ... A question relating two events needs
    both, and the better-matched one would otherwise fill the top."""
    if not events or len(order) == 0:
        return order
    ranked = [int(r) for r in order]
    by_text = {s.text: s for s in scored}
    bests = [np.argsort(-by_text[e].turns, kind="stable")[: len(places)] for e in events if e in by_text]
    for level, top in enumerate(places):
        # Level by level, the first event one place above the next: a later insertion lands below an earlier one
        # and cannot push it out of its places.
        for index, best in enumerate(bests):
            if level < len(best):
                _place_within(ranked, int(best[level]), max(1, min(top - (len(bests) - 1 - index), len(ranked))))
    return np.asarray(ranked, dtype=np.int64)


def _search_stems(text: str, speakers: Collection[str]) -> tuple[str, ...]:
    """The stems a text is searched by in the keyword index: those of its content words but the participants'
    names (unless nothing else is left).

    The auxiliaries of a question ("did", "does", "has") are in most turns: searching them walked long posting
    lists for hits that ranked turns by the grammar they share with the question.

    A participant's name is in half the turns of a two-person conversation (a turn is indexed with who said it):
    when no other word of "What breed is Ann's dog?" is in the turn that answers ("He is a golden retriever"), the
    name alone ranked Ann's shortest turns first, and that list counts as much as the dense one in the fusion. Who
    asks about whom is the speaker boost's job. Measured: docs/decisions/005-ranking-adjustments.md."""
    stems = keyword_stems(keyword_query(text) or text)
    names = {stem for speaker in speakers for stem in keyword_stems(speaker)}
    return tuple(stem for stem in stems if stem not in names) or tuple(stems)


def question_spans(question: str, reference: datetime | None) -> list[tuple[date, date]]:
    """The days and periods a question names, resolved as a turn's would be, against the conversation's latest
    time (relative ones: "last month" of a question asked now), and the ranges two days make ("between August 11
    and August 15"); a weekend from its Friday (``_as_asked``).

    A question that also names a fixed time says when its relative ones are: "What did Joanna finish last Friday,
    as she said on 23 January 2022?" means the Friday before that day, and is resolved against it. With a fixed
    period but no day ("recently in May 2022"), the period says when, and the relative times are left out.
    A holiday named alone ("How many guests did I invite for Thanksgiving?") names an occasion, and which year's is
    a guess: it is searched by its words, not as a day (a turn's "Thanksgiving" is still a day: a question naming
    the date reaches it)."""
    if reference is None:
        return []
    anchors = [a for a in _question_anchors(question, reference) if not is_bare_holiday(a.expression)]
    return [*(_as_asked(a) for a in anchors), *joined_spans(question, anchors)]


def _as_asked(anchor: TimeAnchor) -> tuple[date, date]:
    """An anchor's span as a question means it: a weekend asked about starts on the Friday ("What did Jon do on
    the first weekend of May?" is answered by "Last Friday I went to the car show"); a turn's weekend stays
    Saturday and Sunday."""
    if anchor.granularity is Granularity.WEEK and anchor.start.weekday() == 5 and anchor.end == anchor.start + _ONE_DAY:
        return anchor.start - _ONE_DAY, anchor.end
    return anchor.start, anchor.end


def _question_anchors(question: str, reference: datetime) -> list[TimeAnchor]:
    """The question's times (``question_spans``): relative ones against the last fixed day it names, else against
    ``reference``; without a fixed day but with a fixed period, the fixed ones alone."""
    anchors = resolve_time_expressions(question, reference)
    if len(anchors) < 2:
        return anchors
    # A fixed time resolves alike against any reference; a relative one moves with it.
    elsewhere = resolve_time_expressions(question, reference - _FAR_REFERENCE)
    if [a.expression for a in elsewhere] != [a.expression for a in anchors]:
        return anchors
    fixed = [a for a, b in zip(anchors, elsewhere, strict=True) if (a.start, a.end) == (b.start, b.end)]
    if not fixed or len(fixed) == len(anchors):
        return anchors
    days = [a.start for a in fixed if a.granularity is Granularity.DAY and a.start == a.end]
    if not days:
        return fixed
    said = datetime(days[-1].year, days[-1].month, days[-1].day, 12, tzinfo=reference.tzinfo)
    return resolve_time_expressions(question, said)


_ONE_DAY = timedelta(days=1)
# Far enough that every relative time of a question resolves elsewhere (years and seasons included).
_FAR_REFERENCE = timedelta(days=3 * 366 + 45)


# Speakers named by their role rather than a name (user <-> assistant chats, support chats): a question put to the
# memory in the first person ("What did I say my budget was?") asks about the user's side, one in the second person
# ("the restaurant you recommended") about the assistant's.
USER_ROLES = frozenset({"user", "human", "customer", "client", "caller", "me"})
ASSISTANT_ROLES = frozenset({"assistant", "ai", "bot", "agent", "system", "model", "chatbot", "gpt", "support"})
_FIRST_PERSON = frozenset({"i", "me", "my", "mine", "myself", "i'm", "i've", "i'd", "i'll"})
_SECOND_PERSON = frozenset({"you", "your", "yours", "yourself", "you've", "you'd", "you're"})
# "Can you explain ...", "How would you find ...", "What would you suggest ...": the one asked is asked to do
# something now; that "you" names nobody whose turns answer.
_REQUEST_TO_ACT = re.compile(r"\b(?:can|could|would|will)\s+you\b", re.IGNORECASE)


def asked_speakers(question: str, speakers: set[str]) -> set[str]:
    """Participants a question names, by full name or a short form of it ("Mel" for Melanie), or by person when
    the participants are named by role (``USER_ROLES``, ``ASSISTANT_ROLES``): "I" is the user, "you" the
    assistant, unless it is asked to do something ("Can you explain ...": ``_REQUEST_TO_ACT``)."""
    words = {w.lower() for w in re.findall(r"[A-Za-z][A-Za-z'\-]+", question.replace("'s", ""))}
    persons = {word.lower() for word in re.findall(r"[A-Za-z']+", _REQUEST_TO_ACT.sub(" ", question))}
    found = {speaker for speaker in speakers
             if (speaker.lower() in USER_ROLES and persons & _FIRST_PERSON)
             or (speaker.lower() in ASSISTANT_ROLES and persons & _SECOND_PERSON)}
    for speaker in speakers:
        name = speaker.lower().split()[0]
        if name in words or any(len(w) >= 3 and name.startswith(w) for w in words if w[0] == name[0]):
            found.add(speaker)
    return found


def _elapsed(since: float) -> float:
    return round((time.perf_counter() - since) * 1000, 3)
