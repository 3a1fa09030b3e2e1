"""compassmem for LangChain: ``CompassmemRetriever`` (a ``BaseRetriever``) and ``CompassmemChatMessageHistory``
(a ``BaseChatMessageHistory``), over a ``Memory`` (in-process) or a ``Client`` (HTTP).

    retriever = CompassmemRetriever(memory=memory, conversation_id="priya-tom", budget_turns=5)
    documents = retriever.invoke("Why was the Atlas launch moved?")
    june = CompassmemRetriever(memory=memory, all_conversations=True, time_from=datetime(2024, 6, 1, tzinfo=UTC),
                               metadata_filter={"channel": "email"})
    history = CompassmemChatMessageHistory(memory, "session-1")

The retriever asks compassmem and returns the ranked source turns as ``Document``s, best first: the page content is
the turn's text, the metadata its evidence (``tenant``, ``conversation_id``, ``turn_id``, ``speaker``,
``timestamp``, ``event_id``, ``score`` of that event, ``rank``, ``subgoal``, ``event_turn_ids``), the turn's
``relevance`` (the calibrated probability that it is evidence) and the question's ``answerable`` and
``answerable_probability`` (the same on every document of a call). A scope without memory gives no documents.
``min_relevance`` (default ``AGENT_MIN_RELEVANCE``, 0.05: a chain is given no documents rather than likely junk; 0
keeps every ranked turn) leaves out the turns below it; ``time_from``, ``time_to`` and ``metadata_filter`` (the
query's ``metadata``: LangChain's own ``metadata`` tags the retriever's runs) keep only the turns they admit
(docs/querying.md).

The history keeps one conversation: ``add_messages`` writes each message as a turn (human messages under their
``name`` or ``human_speaker``, AI ones under ``ai_speaker``, system ones under ``system_speaker``; other kinds and
messages without text are refused), ``messages`` reads the turns back in the order they were said, ``clear``
forgets the conversation. Over HTTP, added messages are readable once the worker has processed them.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SkipValidation, field_validator, model_validator

from compassmem.core.contracts.limits import BudgetTurns, MetadataFilter, ScopeIds, TimeBound
from compassmem.core.contracts.query import AGENT_MIN_RELEVANCE, QueryRequest
from compassmem.core.errors import NotFound
from compassmem.integrations.verbs import MemoryVerbs, conversation_turns
from compassmem.core.models import DEFAULT_TENANT, TENANT_PATTERN, Turn, check_id, check_speaker

try:
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.chat_history import BaseChatMessageHistory
    from langchain_core.documents import Document
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
    from langchain_core.retrievers import BaseRetriever
except ImportError as missing:  # pragma: no cover - depends on the environment
    raise ImportError("compassmem.integrations.langchain needs langchain-core: pip install 'compassmem[langchain]'") \
        from missing


class CompassmemRetriever(BaseRetriever):
    """Ranked source turns of compassmem as documents. Exactly one scope: ``conversation_id``,
    ``conversation_ids``, ``subject_id`` or ``all_conversations=True``, within ``tenant``."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    memory: SkipValidation[MemoryVerbs] = Field(description="A compassmem.Memory or compassmem.Client.")
    tenant: str = Field(default=DEFAULT_TENANT, pattern=TENANT_PATTERN)
    conversation_id: str | None = None
    conversation_ids: ScopeIds | None = None
    subject_id: str | None = None
    all_conversations: bool = False
    budget_turns: BudgetTurns = Field(default=10, description="How many ranked turns to return.")
    time_from: TimeBound | None = Field(default=None, description=QueryRequest.model_fields["time_from"].description)
    time_to: TimeBound | None = Field(default=None, description=QueryRequest.model_fields["time_to"].description)
    metadata_filter: MetadataFilter | None = Field(
        default=None, description=QueryRequest.model_fields["metadata"].description)
    min_relevance: float = Field(
        default=AGENT_MIN_RELEVANCE, ge=0.0, le=1.0, allow_inf_nan=False,
        description=f"{QueryRequest.model_fields['min_relevance'].description} Here the default is "
                    f"{AGENT_MIN_RELEVANCE}: a chain gets no documents rather than likely junk.")

    @model_validator(mode="after")
    def _scope(self) -> CompassmemRetriever:
        # The question's own rules are checked per call; a placeholder one checks the scope now, at construction.
        self.request("?")
        return self

    def request(self, question: str) -> QueryRequest:
        return QueryRequest(question=question, tenant=self.tenant, conversation_id=self.conversation_id,
                            conversation_ids=self.conversation_ids, subject_id=self.subject_id,
                            all_conversations=self.all_conversations, budget_turns=self.budget_turns,
                            time_from=self.time_from, time_to=self.time_to, metadata=self.metadata_filter,
                            min_relevance=self.min_relevance)

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        request = self.request(query)
        try:
            response = self.memory.query(request)
        except NotFound:
            return []
        return [Document(page_content=turn.text, id=f"{turn.conversation_id}/{turn.turn_id}", metadata={
            "tenant": request.tenant, "conversation_id": turn.conversation_id, "turn_id": turn.turn_id,
            "speaker": turn.speaker, "timestamp": turn.timestamp.isoformat(), "event_id": evidence.event_id,
            "score": evidence.score, "rank": rank, "subgoal": evidence.subgoal,
            "event_turn_ids": [t.turn_id for t in evidence.turns], "relevance": turn.relevance,
            "answerable": response.answerable, "answerable_probability": response.answerable_probability})
            for rank, (turn, evidence) in enumerate(response.ranked_turns(), start=1)]


class HistoryPlace(BaseModel):
    """Where a history keeps its messages and under which speakers."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tenant: str = Field(default=DEFAULT_TENANT, pattern=TENANT_PATTERN)
    conversation_id: str
    subject_id: str | None = None
    human_speaker: str = "human"
    ai_speaker: str = "ai"
    system_speaker: str = "system"

    @field_validator("conversation_id", "subject_id")
    @classmethod
    def _ids(cls, value: str | None) -> str | None:
        return value if value is None else check_id(value)

    @field_validator("human_speaker", "ai_speaker", "system_speaker")
    @classmethod
    def _speakers(cls, value: str) -> str:
        return check_speaker(value)


class CompassmemChatMessageHistory(BaseChatMessageHistory):
    """One conversation's messages, kept as compassmem turns (see the module's docstring)."""

    def __init__(self, memory: MemoryVerbs, conversation_id: str, *, tenant: str = DEFAULT_TENANT,
                 subject_id: str | None = None, human_speaker: str = "human", ai_speaker: str = "ai",
                 system_speaker: str = "system") -> None:
        self.memory = memory
        self.place = HistoryPlace(tenant=tenant, conversation_id=conversation_id, subject_id=subject_id,
                                  human_speaker=human_speaker, ai_speaker=ai_speaker, system_speaker=system_speaker)
        self.speakers = {"human": self.place.human_speaker, "ai": self.place.ai_speaker,
                         "system": self.place.system_speaker}

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override] - read from memory on each access
        by_speaker: dict[str, type[BaseMessage]] = {self.speakers["ai"]: AIMessage,
                                                    self.speakers["system"]: SystemMessage}
        messages: list[BaseMessage] = []
        for turn in conversation_turns(self.memory, self.place.tenant, self.place.conversation_id):
            kind = by_speaker.get(turn.speaker, HumanMessage)
            extra: dict[str, Any] = {}
            if kind is HumanMessage and turn.speaker != self.speakers["human"]:
                extra["name"] = turn.speaker
            messages.append(kind(content=turn.text, id=turn.turn_id, **extra))
        return messages

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Write the messages as turns in one call, each a millisecond after the one before."""
        if not messages:
            return
        now = datetime.now(UTC)
        self.memory.add([self._turn(index, message, now + timedelta(milliseconds=index))
                         for index, message in enumerate(messages)])

    def _turn(self, index: int, message: BaseMessage, timestamp: datetime) -> Turn:
        if message.type not in self.speakers:
            raise ValueError(f"message {index} is a {message.type!r} message: the history keeps human, ai and system "
                             "messages")
        text = str(message.text)
        if not text.strip():
            raise ValueError(f"message {index} ({message.type}) has no text: compassmem keeps text turns")
        speaker = message.name if message.type == "human" and message.name else self.speakers[message.type]
        place = self.place
        return Turn(tenant=place.tenant, conversation_id=place.conversation_id, subject_id=place.subject_id,
                    turn_id=message.id or f"m-{uuid.uuid4().hex[:16]}", speaker=speaker, text=text,
                    timestamp=timestamp)

    def clear(self) -> None:
        """Forget the conversation."""
        self.memory.forget(self.place.conversation_id, tenant=self.place.tenant)
