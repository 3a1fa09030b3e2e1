"""Recall of a memory's answers and of the baselines over the same memory's turns: the core that
``compassmem eval`` and ``benchmarks/locomo_recall.py`` share.

- :class:`MemoryRetriever` asks each question through ``query`` (``Memory`` in process, or ``Client`` over HTTP:
  both take a ``QueryRequest``, the code path behind ``POST /v1/query``);
- :func:`memory_corpus` reads the asked conversations' turns from that memory (the vector store's turns in
  process, the events' source turns over HTTP) and indexes them the baselines' way;
- :func:`memory_result` and :func:`baseline_results` evaluate compassmem and the baselines on one set of
  questions, each with every question's recall kept for breakdowns (by category, by question shape).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

from compassmem.core.contracts.query import QueryRequest, QueryResponse
from compassmem.core.errors import NotFound
from compassmem.core.models import Observation
from compassmem.embedding.embedders import Embedder
from compassmem.evaluation.baselines import StoredTurn, TurnCorpus, build_baselines, stored_turn_corpus
from compassmem.evaluation.harness import MethodResult, evaluate_retriever
from compassmem.evaluation.locomo_questions import Question, conversation_key, split_conversation_key
from compassmem.evaluation.recall import BUDGETS
from compassmem.library.client import Client
from compassmem.library.memory import Memory

MemorySource = Memory | Client
# The listings' page size (the API's limit).
_PAGE = 200


class MemoryRetriever:
    """The system under test as the evaluation loop sees it; records each query's latency."""

    def __init__(self, memory: MemorySource, budget: int) -> None:
        self.memory = memory
        self.budget = budget
        self.latencies_ms: list[float] = []
        # Each query's own step timings (QueryResponse.timings_ms): where a latency goes.
        self.stages_ms: dict[str, list[float]] = {}
        self.ranked: dict[tuple[str, str], list[str]] = {}
        # Each answer's ranking with its relevance and answerability, without its evidence texts (answerability.py).
        self.answers: dict[tuple[str, str], QueryResponse] = {}
        # What the last answer showed of each turn: a long turn's evidence is one passage of it.
        self.shown: dict[tuple[str, str], str] = {}

    def rank(self, conversation_id: str, question: str) -> list[str]:
        tenant, conversation = split_conversation_key(conversation_id)
        started = time.perf_counter()
        response = self.memory.query(QueryRequest(conversation_id=conversation, tenant=tenant, question=question,
                                                  budget_turns=self.budget))
        self.latencies_ms.append((time.perf_counter() - started) * 1000)
        for stage_name, ms in response.timings_ms.items():
            self.stages_ms.setdefault(stage_name, []).append(ms)
        self.ranked[(conversation_id, question)] = response.turn_ids
        self.answers[(conversation_id, question)] = response.model_copy(update={"evidence": [], "explanation": None})
        self.shown.update({(conversation_key(tenant, turn.conversation_id), turn.turn_id): turn.text
                           for item in response.evidence for turn in item.turns})
        return response.turn_ids

    def text_shown(self, whole_text: Callable[[str, str], str]) -> Callable[[str, str], str]:
        """The text of a turn as the last answer showed it (its tokens are what a reader pays for), else whole."""
        return lambda conversation_id, turn_id: (self.shown.get((conversation_id, turn_id))
                                                 or whole_text(conversation_id, turn_id))


def stored_turns(memory: MemorySource, tenant: str, conversation_id: str) -> list[StoredTurn]:
    """Every turn memory holds of one conversation (empty when it holds none): in process the vector store's
    turns, over HTTP the source turns of the conversation's events (``GET .../events``, then each event)."""
    if isinstance(memory, Memory):
        return list(memory.stores.vectors.conversation_turns(tenant, conversation_id))
    turns: dict[str, Observation] = {}
    cursor: str | None = None
    try:
        while True:
            page = memory.events(conversation_id, tenant=tenant, limit=_PAGE, cursor=cursor)
            for node in page.events:
                if node.kind == "event" and not node.stub:
                    for observation in memory.event(node.id, tenant=tenant).observations:
                        turns.setdefault(observation.turn_id, observation)
            cursor = page.next_cursor
            if cursor is None:
                return list(turns.values())
    except NotFound:
        return []


def memory_corpus(memory: MemorySource, questions: Sequence[Question],
                  session_dates: Mapping[tuple[str, str], str] | None = None) -> TurnCorpus:
    """The baselines' corpus: the turns of every conversation the questions ask, read from ``memory``
    (``session_dates``: a LoCoMo file's own date strings, see ``stored_turn_corpus``). NotFound names the
    conversations that have no turns there."""
    asked = list(dict.fromkeys((q.tenant, q.conversation_id) for q in questions))
    conversations = {key: stored_turns(memory, *key) for key in asked}
    empty = [f"{conversation!r} of tenant {tenant!r}" for (tenant, conversation), turns in conversations.items()
             if not turns]
    if empty:
        raise NotFound(f"no memory for conversation {', '.join(empty[:5])}"
                            + (f" and {len(empty) - 5} more" if len(empty) > 5 else "")
                            + ": ingest the conversations the questions ask about first")
    return stored_turn_corpus(conversations, session_dates)


def memory_result(method: str, memory: MemorySource, questions: Sequence[Question], corpus: TurnCorpus,
                  budgets: Sequence[int] = BUDGETS, *, overall: str | None = None,
                  together: bool = True) -> tuple[MethodResult, MemoryRetriever]:
    """compassmem's recall: every question asked at the largest budget; context tokens as the answers showed
    the turns. Also the retriever, which kept each query's latency, steps and ranking."""
    retriever = MemoryRetriever(memory, budget=max(budgets))
    result = evaluate_retriever(method, retriever, questions, budgets, text_of=retriever.text_shown(corpus.text_of),
                                overall=overall, together=together)
    return result, retriever


def baseline_results(corpus: TurnCorpus, embedder: Embedder, questions: Sequence[Question],
                     budgets: Sequence[int] = BUDGETS, names: Sequence[str] | None = None, *,
                     overall: str | None = None, together: bool = True) -> list[MethodResult]:
    """The baselines' recall on the same questions (``compassmem/evaluation/baselines.py``), all of them or
    those of ``names`` in that order."""
    baselines = build_baselines(corpus, embedder)
    chosen = list(baselines) if names is None else list(names)
    return [evaluate_retriever(name, baselines[name], questions, budgets, text_of=corpus.text_of, overall=overall,
                               together=together) for name in chosen]
