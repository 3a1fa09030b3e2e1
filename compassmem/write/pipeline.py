"""The in-process pipeline: turns in, event graph out, without Kafka (batch import, benchmarks, tests).

Turns are embedded in batches (the embedder is the bottleneck), then fed one by one, in order, to their
conversation's ConversationMemory; the updates go to the sinks, which are flushed once per batch. The flush is
``SinkGroup``'s, the same object the streaming worker flushes as the first step of its own commit
(``streams/checkpoint.py``): there it uses ``add_turns`` and leaves the flush to that commit.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import islice

from pydantic import BaseModel, Field

from compassmem.core.config import Settings
from compassmem.embedding.embedders import Embedder
from compassmem.core.models import RelationType, Turn, TurnPassage, partition_key, search_text
from compassmem.processors.clustering import Reclusterer
from compassmem.processors.conversation_memory import (
    APPLY_STAGES,
    DEFAULT_HOT_EVENTS,
    MIN_HOT_EVENTS,
    ConversationMemory,
    MemoryUpdate,
)
from compassmem.processors.event_frames import EventSummariser, TurnLabeller
from compassmem.processors.merging import EventMerger, MergeConfig
from compassmem.text.passages import passage_spans
from compassmem.processors.relations import RelationConfig, RelationExtractor
from compassmem.processors.segmentation import BoundaryDetector, BoundaryJudge, SegmentationConfig
from compassmem.sinks.batching import Sink
from compassmem.sinks.sink_group import PipelineObserver, SinkGroup
from compassmem.core.tracing import record_stages, span, stage


class PipelineConfig(BaseModel):
    segmentation: SegmentationConfig = Field(default_factory=SegmentationConfig)
    merging: MergeConfig = Field(default_factory=MergeConfig)
    relations: RelationConfig = Field(default_factory=RelationConfig)
    recluster_window: int = Field(default=50, ge=1)
    # Events of a conversation its memory holds (COMPASSMEM_WORKER_HOT_EVENTS): the most recent ones.
    hot_events: int = Field(default=DEFAULT_HOT_EVENTS, ge=MIN_HOT_EVENTS)
    batch_turns: int = Field(default=256, ge=1)

    @classmethod
    def from_settings(cls, settings: Settings) -> PipelineConfig:
        """What the settings choose of the write path: the memory window and the LLM boundary check's band."""
        return cls(hot_events=settings.worker_hot_events,
                   segmentation=SegmentationConfig(llm_band=settings.llm_boundary_band,
                                                   llm_max_share=settings.llm_boundary_max_share))


@dataclass(frozen=True)
class LlmSteps:
    """The write path's optional LLM upgrades (``compassmem.llm.steps.llm_steps`` builds them from settings):
    a judge for uncertain topic boundaries, a summariser of closed events and a labeller of their turns' categories.
    None: the offline path."""

    boundary_judge: BoundaryJudge | None = None
    summariser: EventSummariser | None = None
    labeller: TurnLabeller | None = None


@dataclass(frozen=True)
class WriteSteps:
    """What a runtime setting changes in how a conversation's memory is built
    (``compassmem/library/runtime_settings.py``): the boundary detector's configuration and the LLM steps."""

    segmentation: SegmentationConfig
    llm: LlmSteps


class IngestSummary(BaseModel):
    turns: int
    conversations: int
    events: int
    segments: int
    merged_segments: int
    duplicate_rate: float = Field(description="merged segments / all segments")
    mean_turns_per_event: float
    relations_by_type: dict[str, int]
    superseded_relations: int
    rejected_relations: int
    clusters: int
    average_degree: float = Field(description="2 x active relations / events")
    average_degree_without_adjacency: float
    seconds: float
    turns_per_second: float


def _batches(turns: Iterable[Turn], size: int) -> Iterator[list[Turn]]:
    iterator = iter(turns)
    while batch := list(islice(iterator, size)):
        yield batch


class MemoryPipeline:
    def __init__(self, embedder: Embedder, sinks: Sequence[Sink] | SinkGroup,
                 config: PipelineConfig | None = None, observer: PipelineObserver | None = None,
                 llm: LlmSteps | None = None, detector: Callable[[], BoundaryDetector] | None = None) -> None:
        """``detector`` makes each conversation's boundary detector (default: the configured topic detector; a
        benchmark passes another to compare what the same turns become)."""
        self.embedder = embedder
        # A SinkGroup when the caller flushes it too (the stream processor's commit), else one of our own.
        self.sink_group = sinks if isinstance(sinks, SinkGroup) else SinkGroup(sinks, observer)
        self.config = config or PipelineConfig()
        self.observer = observer
        self.llm = llm or LlmSteps()
        self._detector = detector or (lambda: BoundaryDetector(self.config.segmentation, self.llm.boundary_judge))
        self.memories: dict[str, ConversationMemory] = {}
        self._turns = 0
        self._seconds = 0.0

    def memory_for(self, tenant: str, conversation_id: str) -> ConversationMemory:
        key = partition_key(tenant, conversation_id)
        if key not in self.memories:
            config = self.config
            self.memories[key] = ConversationMemory(
                self._detector(),
                EventMerger(config.merging),
                RelationExtractor(config.relations),
                Reclusterer(config.recluster_window),
                config.hot_events,
                self.llm.summariser,
                self.llm.labeller,
            )
        return self.memories[key]

    def configure(self, tenant: str, conversation_id: str, steps: WriteSteps) -> None:
        """Build the conversation's memory from now on with ``steps`` (the streaming worker: the runtime settings
        in force in the conversation's turns partition)."""
        self.memory_for(tenant, conversation_id).use_steps(
            BoundaryDetector(steps.segmentation, steps.llm.boundary_judge), steps.llm.summariser, steps.llm.labeller)

    def ingest(self, turns: Iterable[Turn], progress: Callable[[int], None] | None = None,
               close_at_end: bool = True) -> IngestSummary:
        """Apply turns and commit (flush the sinks) after every batch of ``batch_turns``."""
        started = time.perf_counter()
        for batch in _batches(turns, self.config.batch_turns):
            with span("ingest.batch", turns=len(batch), conversations=len({t.key for t in batch})):
                self.add_turns(batch)
                self.sink_group.flush()
            if progress is not None:
                progress(len(batch))
        if close_at_end:
            with span("ingest.close", conversations=len(self.memories)):
                self.close_all()
        self._seconds += time.perf_counter() - started
        return self.summary()

    def add_turns(self, turns: Sequence[Turn]) -> None:
        """Embed turns in batches and apply them in order, adding what they change to the sinks without a flush:
        whoever owns the commit flushes (``ingest`` after each batch, the streaming worker's checkpoint)."""
        for batch in _batches(turns, self.config.batch_turns):
            with stage("batch.embed", turns=len(batch)) as took:
                # The passages of long turns after their first in the same call: the embedder's batches stay full.
                # A turn's indexed text is built once: it is cut into passages and each passage sliced from it.
                later = [(turn, text, index, span) for turn in batch for text in (turn.indexed_text(),)
                         for index, span in enumerate(passage_spans(text)) if index]
                embedded = self.embedder.embed([t.search_text() for t in batch] + [
                    search_text(turn.speaker, text[start:end], turn.timestamp)
                    for turn, text, _, (start, end) in later])
            vectors = embedded[: len(batch)]
            if self.observer is not None:
                self.observer.stage("embed", took.seconds, len(batch))
            update = MemoryUpdate(passages=[
                TurnPassage(tenant=turn.tenant, conversation_id=turn.conversation_id, turn_id=turn.turn_id,
                            subject_id=turn.subject_id, index=index, start=start, end=end,
                            embedding=vector.tolist(), timestamp=turn.timestamp, metadata=turn.metadata)
                for (turn, _, index, (start, end)), vector in zip(later, embedded[len(batch):], strict=True)])
            applying = time.time_ns()
            for turn, vector in zip(batch, vectors, strict=True):
                update.extend(self.memory_for(turn.tenant, turn.conversation_id).add_turn(turn, vector))
            record_stages({f"batch.{name}": update.stage_seconds[name] for name in APPLY_STAGES
                           if name in update.stage_seconds}, applying)
            if self.observer is not None:
                self.observer.stage("segment", update.stage_seconds.pop("segment", 0.0), len(batch))
            self.sink_group.add_update(update)
            self._turns += len(batch)

    def close_all(self) -> None:
        update = MemoryUpdate()
        for memory in self.memories.values():
            update.extend(memory.close_open_segment())
        self.write(update)

    def write(self, update: MemoryUpdate) -> None:
        """Add an update's records to every sink and flush them."""
        self.sink_group.add_update(update)
        self.sink_group.flush()

    def summary(self) -> IngestSummary:
        memories = list(self.memories.values())
        health = [m.health() for m in memories]
        events = sum(h.events for h in health)
        segments = sum(h.segments for h in health)
        merged = sum(h.merged_segments for h in health)
        relations = sum(h.relations for h in health)
        adjacency = sum(h.adjacency_relations for h in health)
        # Running totals: a memory holds only its conversation's most recent events and relations.
        by_type: Counter[str] = Counter()
        for memory in memories:
            by_type.update(memory.ledger.active_by_type)
        return IngestSummary(
            turns=self._turns,
            conversations=len(memories),
            events=events,
            segments=segments,
            merged_segments=merged,
            duplicate_rate=merged / segments if segments else 0.0,
            mean_turns_per_event=sum(m.stats.turns for m in memories) / events if events else 0.0,
            relations_by_type={t.value: by_type.get(t.value, 0) for t in RelationType},
            superseded_relations=sum(m.ledger.superseded for m in memories),
            rejected_relations=sum(m.stats.rejected_relations for m in memories),
            clusters=sum(1 for m in memories for count in m.clusters.counts if count),
            average_degree=2 * relations / events if events else 0.0,
            average_degree_without_adjacency=2 * (relations - adjacency) / events if events else 0.0,
            seconds=round(self._seconds, 3),
            turns_per_second=self._turns / self._seconds if self._seconds else 0.0,
        )
