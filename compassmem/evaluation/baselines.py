"""The LoCoMo baselines, computed in the same run as the system under test.

Every turn is indexed as ``(session date_time) speaker: text [shares <image caption>]``, with date_time the
original LoCoMo string (e.g. ``(1:56 pm on 8 May, 2023) Caroline: Hey Mel! ...``). Each baseline ranks only the
turns of the question's own conversation:

- ``bm25``: BM25 over turns (bm25s, Lucene variant, k1 1.5, b 0.75, bm25s's English stop words, Snowball
  English stemmer from PyStemmer);
- ``dense``: cosine of all-MiniLM-L6-v2 embeddings (turns embedded once per corpus);
- ``rrf``: reciprocal-rank fusion of the two full rankings, score = sum 1 / (60 + rank), rank from 1;
- ``bm25-window3``: BM25 over 3-turn chunks of a session, chunks flattened to their turns in rank order.

Chunks are non-overlapping (turns 1-3, 4-6, ... of each session; the last may be shorter): this is
the *chunk-level* baseline, i.e. what a plain chunking RAG would retrieve. ``stride=1`` gives sliding windows.
Ties keep corpus order (stable sort), so every ranking is deterministic.

Reproduction notes (development split, recall@10 over categories 1-4; target: bm25 0.58, dense 0.52, rrf 0.63;
this module: 0.584, 0.524, 0.627). Details that move the numbers by more than the 0.01 tolerance:

- one BM25 index per conversation (IDF of that conversation); a single index over all conversations filtered
  afterwards gives bm25 0.609;
- "English stop words" is bm25s's own 33-word list (``stopwords="en"``); scikit-learn's 318-word list gives
  bm25 0.611 / rrf 0.618, no stop words bm25 0.585 / rrf 0.642; without the stemmer bm25 0.549;
- the date prefix as the original string: without it rrf 0.596, as ISO ``YYYY-MM-DD HH:MM`` rrf 0.604;
- the speaker name: without it dense falls to 0.30; without the image caption rrf 0.614;
- "1-4 together" is the mean over questions, not over the four category means (that would read 0.49/0.46/0.54).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import structlog
from pydantic import BaseModel

from compassmem.retrieval.bm25_index import Bm25Index
from compassmem.embedding.embedders import Embedder
from compassmem.evaluation.harness import BatchPreparable, Retriever
from compassmem.evaluation.locomo_questions import Question, conversation_key
from compassmem.write.importers import ImportFormatError, read_locomo_turns
from compassmem.core.models import DEFAULT_TENANT, Turn

log = structlog.get_logger(__name__)

RRF_CONSTANT = 60
_SESSION_DATE_KEY = re.compile(r"^session_(\d+)_date_time$")


class BaselineTurn(BaseModel):
    """A turn as the baselines index it."""

    conversation_id: str
    turn_id: str
    session_id: str | None
    text: str
    tenant: str = DEFAULT_TENANT

    @property
    def conversation_key(self) -> str:
        return conversation_key(self.tenant, self.conversation_id)


class TurnCorpus:
    """The turns of every conversation (of a LoCoMo file, or read from memory), in conversation order, with their
    indexed text; conversations are named by their ``conversation_key`` (the id, in the default tenant)."""

    def __init__(self, turns: Sequence[BaselineTurn]) -> None:
        self.conversations: dict[str, list[BaselineTurn]] = {}
        self._text: dict[tuple[str, str], str] = {}
        for turn in turns:
            self.conversations.setdefault(turn.conversation_key, []).append(turn)
            self._text[(turn.conversation_key, turn.turn_id)] = turn.text

    def __len__(self) -> int:
        return len(self._text)

    def turns(self, conversation_id: str) -> list[BaselineTurn]:
        return self.conversations.get(conversation_id, [])

    def text_of(self, conversation_id: str, turn_id: str) -> str:
        return self._text.get((conversation_id, turn_id), "")


def locomo_session_dates(path: Path) -> dict[tuple[str, str], str]:
    """(sample_id, session number) -> the session's original date_time string; reads nothing else."""
    samples: Any = json.loads(path.read_text(encoding="utf-8"))
    if isinstance(samples, dict):
        samples = [samples]
    if not isinstance(samples, list):
        raise ImportFormatError(f"{path}: expected a list of LoCoMo samples")
    dates: dict[tuple[str, str], str] = {}
    for sample in samples:
        conversation = sample.get("conversation") or {}
        for key, value in conversation.items():
            match = _SESSION_DATE_KEY.match(key)
            if match and isinstance(value, str):
                dates[(str(sample.get("sample_id")), str(int(match.group(1))))] = value
    return dates


def baseline_text(turn: Turn, date_time: str | None) -> str:
    """``(date_time) speaker: text [shares caption]``; without a date string, the prefix is left out."""
    return baseline_line(turn.speaker, turn.indexed_text(), date_time)


def baseline_line(speaker: str, indexed_text: str, date_time: str | None) -> str:
    line = f"{speaker}: {indexed_text}"
    return f"({date_time}) {line}" if date_time else line


def locomo_date_text(moment: datetime) -> str:
    """A time as LoCoMo writes a session's date_time ('1:56 pm on 8 May, 2023'), in the time's own offset: what
    the baselines prefix to a turn whose session date no LoCoMo file gives (for every session of the LoCoMo files
    here it reads as the file's own string, since a session's first turn holds that time)."""
    meridiem = "am" if moment.hour < 12 else "pm"
    return f"{moment.hour % 12 or 12}:{moment.minute:02d} {meridiem} on {moment.day} {moment:%B}, {moment.year}"


class StoredTurn(Protocol):
    """A turn as memory keeps it (``IndexedTurn``, or an event's ``Observation`` from the listings): its text is
    the indexed text (captions included)."""

    turn_id: str
    speaker: str
    text: str
    timestamp: datetime
    session_id: str | None


def _natural(value: str | None) -> tuple[tuple[int, int | str], ...]:
    """'10' after '9', 's10' after 's9': digit runs compare as numbers."""
    return tuple((0, int(part)) if part.isdigit() else (1, part) for part in re.findall(r"\d+|\D+", value or ""))


def conversation_order(turns: Iterable[StoredTurn]) -> list[StoredTurn]:
    """A conversation's stored turns in the order a conversation file gives them: sessions by their first turn's
    time (sessions of the same start by their id, '2' before '10'), each session's turns by time, then id. Memory
    lists turns by time alone, which interleaves two sessions that start at the same moment (converted chats whose
    sessions carry a day only)."""
    sessions: dict[str | None, list[StoredTurn]] = {}
    for turn in sorted(turns, key=lambda t: (t.timestamp, _natural(t.turn_id))):
        sessions.setdefault(turn.session_id, []).append(turn)
    ordered = sorted(sessions.items(), key=lambda item: (item[1][0].timestamp, _natural(item[0])))
    return [turn for _, session in ordered for turn in session]


def stored_turn_corpus(conversations: Mapping[tuple[str, str], Iterable[StoredTurn]],
                       session_dates: Mapping[tuple[str, str], str] | None = None) -> TurnCorpus:
    """The baselines' corpus from the turns memory holds, ``(tenant, conversation_id) -> turns``.

    Each turn is indexed as :func:`load_turn_corpus` indexes a LoCoMo file's: its session's date string (from
    ``session_dates``, ``(conversation_id, session_id) -> date_time``, as :func:`locomo_session_dates` reads a
    file, else its session's first turn's time written the LoCoMo way; a turn without a session: its own time),
    the speaker, the text with its captions."""
    dates = session_dates or {}
    turns: list[BaselineTurn] = []
    for (tenant, conversation_id), stored in conversations.items():
        ordered = conversation_order(stored)
        starts: dict[str, datetime] = {}
        for turn in ordered:
            if turn.session_id is not None:
                starts.setdefault(turn.session_id, turn.timestamp)
        for turn in ordered:
            date_time = dates.get((conversation_id, turn.session_id or "")) or locomo_date_text(
                starts[turn.session_id] if turn.session_id is not None else turn.timestamp)
            turns.append(BaselineTurn(tenant=tenant, conversation_id=conversation_id, turn_id=turn.turn_id,
                                      session_id=turn.session_id,
                                      text=baseline_line(turn.speaker, turn.text, date_time)))
    corpus = TurnCorpus(turns)
    log.info("baseline_corpus_read", turns=len(corpus), conversations=len(corpus.conversations))
    return corpus


def load_turn_corpus(path: Path) -> TurnCorpus:
    """Turns of a LoCoMo file (via :func:`read_locomo_turns`) indexed the baseline way."""
    dates = locomo_session_dates(path)
    turns = [
        BaselineTurn(
            conversation_id=turn.conversation_id,
            turn_id=turn.turn_id,
            session_id=turn.session_id,
            text=baseline_text(turn, dates.get((turn.conversation_id, turn.session_id or ""))),
        )
        for turn in read_locomo_turns(path)
    ]
    corpus = TurnCorpus(turns)
    log.info("baseline_corpus_loaded", path=str(path), turns=len(corpus), conversations=len(corpus.conversations))
    return corpus


def ranked_order(scores: np.ndarray) -> np.ndarray:
    """Indices by descending score; ties keep their original order."""
    return np.argsort(-scores, kind="stable")


class Bm25TurnRetriever:
    """BM25 over the turns of the asked conversation."""

    def __init__(self, corpus: TurnCorpus) -> None:
        self._ids = {cid: [t.turn_id for t in turns] for cid, turns in corpus.conversations.items()}
        self._indexes = {cid: Bm25Index([t.text for t in turns]) for cid, turns in corpus.conversations.items()}

    def rank(self, conversation_id: str, question: str) -> list[str]:
        index = self._indexes.get(conversation_id)
        if index is None:
            return []
        ids = self._ids[conversation_id]
        return [ids[i] for i in ranked_order(index.scores(question))]


class DenseTurnRetriever:
    """Cosine similarity of sentence embeddings; turns are embedded once, questions in one batch if prepared."""

    def __init__(self, corpus: TurnCorpus, embedder: Embedder) -> None:
        self._embedder = embedder
        self._ids = {cid: [t.turn_id for t in turns] for cid, turns in corpus.conversations.items()}
        all_turns = [t for turns in corpus.conversations.values() for t in turns]
        vectors = embedder.embed([t.text for t in all_turns])
        self._vectors: dict[str, np.ndarray] = {}
        start = 0
        for cid, turns in corpus.conversations.items():
            self._vectors[cid] = vectors[start : start + len(turns)]
            start += len(turns)
        self._query_cache: dict[str, np.ndarray] = {}
        log.info("dense_turns_embedded", turns=len(all_turns))

    def prepare(self, questions: Sequence[Question]) -> None:
        texts = sorted({q.question for q in questions} - self._query_cache.keys())
        if texts:
            self._query_cache.update(zip(texts, self._embedder.embed(texts), strict=True))

    def _query_vector(self, question: str) -> np.ndarray:
        vector = self._query_cache.get(question)
        if vector is None:
            vector = self._embedder.embed([question])[0]
            self._query_cache[question] = vector
        return vector

    def rank(self, conversation_id: str, question: str) -> list[str]:
        vectors = self._vectors.get(conversation_id)
        if vectors is None or not len(vectors):
            return []
        ids = self._ids[conversation_id]
        return [ids[i] for i in ranked_order(vectors @ self._query_vector(question))]


class RrfRetriever:
    """Reciprocal-rank fusion: score(turn) = sum over rankings of 1 / (constant + rank), rank counted from 1."""

    def __init__(self, retrievers: Sequence[Retriever], constant: int = RRF_CONSTANT) -> None:
        self._retrievers = list(retrievers)
        self._constant = constant

    def prepare(self, questions: Sequence[Question]) -> None:
        for retriever in self._retrievers:
            if isinstance(retriever, BatchPreparable):
                retriever.prepare(questions)

    def rank(self, conversation_id: str, question: str) -> list[str]:
        fused: dict[str, float] = {}
        for retriever in self._retrievers:
            seen: set[str] = set()
            position = 0
            for turn_id in retriever.rank(conversation_id, question):
                if turn_id in seen:
                    continue
                seen.add(turn_id)
                position += 1
                fused[turn_id] = fused.get(turn_id, 0.0) + 1.0 / (self._constant + position)
        # sorted() is stable: ties keep the order of first appearance (the first retriever's order).
        return sorted(fused, key=lambda t: -fused[t])


def session_windows(turns: Sequence[BaselineTurn], size: int, stride: int) -> list[list[BaselineTurn]]:
    """Windows of ``size`` consecutive turns within each session, started every ``stride`` turns."""
    if size < 1 or stride < 1:
        raise ValueError("window size and stride must be >= 1")
    sessions: dict[str | None, list[BaselineTurn]] = {}
    for turn in turns:
        sessions.setdefault(turn.session_id, []).append(turn)
    windows: list[list[BaselineTurn]] = []
    for session in sessions.values():
        if stride >= size:  # chunks: 1-3, 4-6, ...; the last may be shorter
            starts = list(range(0, len(session), stride))
        else:  # sliding: full windows only, plus one that ends at the session's last turn
            starts = list(range(0, max(len(session) - size, 0) + 1, stride))
            if starts[-1] + size < len(session):
                starts.append(len(session) - size)
        windows.extend(session[start : start + size] for start in starts)
    return windows


class Bm25WindowRetriever:
    """BM25 over ``size``-turn windows of a session; windows are flattened to their turns in rank order."""

    def __init__(self, corpus: TurnCorpus, size: int = 3, stride: int | None = None) -> None:
        stride = size if stride is None else stride
        self._windows: dict[str, list[list[str]]] = {}
        self._indexes: dict[str, Bm25Index] = {}
        for cid, turns in corpus.conversations.items():
            windows = session_windows(turns, size, stride)
            self._windows[cid] = [[t.turn_id for t in w] for w in windows]
            self._indexes[cid] = Bm25Index(["\n".join(t.text for t in w) for w in windows])

    def rank(self, conversation_id: str, question: str) -> list[str]:
        index = self._indexes.get(conversation_id)
        if index is None:
            return []
        windows = self._windows[conversation_id]
        ranked: list[str] = []
        seen: set[str] = set()
        for i in ranked_order(index.scores(question)):
            for turn_id in windows[i]:
                if turn_id not in seen:
                    seen.add(turn_id)
                    ranked.append(turn_id)
        return ranked


Baseline = Bm25TurnRetriever | DenseTurnRetriever | RrfRetriever | Bm25WindowRetriever


def build_baselines(corpus: TurnCorpus, embedder: Embedder, sliding_windows: bool = True) -> dict[str, Baseline]:
    """The four baselines by name (sharing one BM25 index and one set of turn embeddings).

    ``sliding_windows`` adds ``bm25-window3-sliding`` (3-turn windows started at every turn): on the development
    split it is much stronger than the chunk baseline (recall@10, 1-4: 0.73 vs 0.67), so a system that beats
    only the chunks has not shown that its context beats plain neighbouring turns.
    """
    bm25 = Bm25TurnRetriever(corpus)
    dense = DenseTurnRetriever(corpus, embedder)
    baselines: dict[str, Baseline] = {
        "bm25": bm25,
        "dense": dense,
        "rrf": RrfRetriever([bm25, dense]),
        "bm25-window3": Bm25WindowRetriever(corpus, size=3),
    }
    if sliding_windows:
        baselines["bm25-window3-sliding"] = Bm25WindowRetriever(corpus, size=3, stride=1)
    return baselines
