"""``Memory``: compassmem as a library, and the one module that wires the embedder, the stores, the write
pipeline and the query engine together.

    with Memory() as memory:                      # Settings() from COMPASSMEM_* (embedded stores by default)
        memory.add(turns)
        response = memory.query("Why was the launch moved?", conversation_id="priya-tom")

The verbs take and return the HTTP API's own records (``QueryRequest``/``QueryResponse``, ``ConversationPage``,
``EventPage``, ``LimitedConversationGraph``, ``DeleteResult``), so code moves between ``Memory`` and
``compassmem.Client`` without changing what it reads.
Failures are the classes of ``compassmem.core.errors``: a bad argument or turn field is a BadRequest naming it
(``library/arguments.py``), as over HTTP.

Writes (``add``, ``forget``, ``redact_turn``, ``delete_tenant``) go straight to the stores through an in-process
pipeline, like ``compassmem ingest``. The deletions also reach a worker when a stream is configured
(``COMPASSMEM_KAFKA_BOOTSTRAP``): like the HTTP API's, each records its command on the control topic first, so that
the worker deletes what it holds (its stores and state) and a replay of the turns topic does not bring the memory
back; a command the broker does not acknowledge deletes nothing (Unavailable). An embedded store belongs to one
process, so while a ``Memory`` holds the data directory no ``compassmem dev`` or second ``Memory`` can open it
(StoreOpenError says so).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from types import TracebackType
from typing import Annotated, Any

import structlog
from pydantic import Field, SkipValidation, ValidationError

from compassmem.core.chat_messages import turns_of
from compassmem.core.config import Settings
from compassmem.core.contracts.commands import Command, ForgetCommand, RedactCommand, SettingValue
from compassmem.core.contracts.limits import (
    Confidence,
    CursorText,
    GraphFocus,
    GraphNodes,
    GraphTopics,
    MetadataFilter,
    OverviewLinks,
    PageSize,
    SearchText,
    TimeBound,
)
from compassmem.core.contracts.query import QueryRequest, QueryResponse
from compassmem.core.contracts.records import (
    ConversationOverview,
    ConversationPage,
    DeleteResult,
    EventOut,
    EventPage,
    FieldError,
    LimitedConversationGraph,
    RedactResult,
    TenantDeleteResult,
)
from compassmem.embedding.embedders import Embedder, make_embedder
from compassmem.core.errors import BadRequest, NotFound, Unavailable, refused
from compassmem.llm.client import ChatClient, LlmAnswerer, LlmDecomposer
from compassmem.llm.steps import llm_steps
from compassmem.core.models import (
    DEFAULT_TENANT,
    Event,
    RelationType,
    Turn,
    TurnInput,
    partition_key,
)
from compassmem.write.pipeline import IngestSummary, MemoryPipeline, PipelineConfig
from compassmem.publish.publisher import ControlPublisher, KafkaTurnPublisher, PublishError
from compassmem.write.redaction import redact_stored_turn
from compassmem.write.resume import StoredLookup, resume, stored_prefixes
from compassmem.write.turn_ids import TurnIdConflict, TurnIds, stored_lookup
from compassmem.retrieval.reranker import shipped_reranker
from compassmem.publish.command_answers import command_answer
from compassmem.library.arguments import EachId, Id, Tenant, checked
from compassmem.library.forget_gate import ForgetGate
from compassmem.retrieval.engine import EngineConfig, QueryDeadlineExceeded, QueryEngine, RankingConfig
from compassmem.retrieval.graph_views import conversation_overview, focused_graph
from compassmem.retrieval.hot_tier import HotTier
from compassmem.retrieval.listing import (
    ConversationOrder,
    CursorSigner,
    conversation_graph,
    list_conversations,
    list_events,
)
from compassmem.library.runtime_settings import RuntimeSettings, SettingRecorded, overrides, setting_command
from compassmem.sinks.batching import GraphSink, VectorSink, WrittenEvent, WrittenEvents
from compassmem.sinks.factory import Stores, open_stores
from compassmem.transfer.exporter import export_memory
from compassmem.transfer.files import Target, reading, writing
from compassmem.transfer.importer import import_memory
from compassmem.transfer.records import TransferSummary

log = structlog.get_logger(__name__)


def _no_memory(tenant: str, conversation_id: str) -> str:
    return f"no memory for conversation {conversation_id!r} of tenant {tenant!r}"


def _forget_gate(settings: Settings) -> ForgetGate | None:
    """Where the worker's answers can be read (a stream is configured), the gate of this process's forgets."""
    bootstrap = settings.kafka_bootstrap
    if not bootstrap:
        return None

    def answered(partition: int, offset: int, wait_s: float) -> bool:
        return command_answer(bootstrap, settings.control_topic, partition, offset, wait_s) is not None

    return ForgetGate(answered, settings.forget_wait_s)


class Memory:
    """Long-term memory of conversations: add turns, ask questions with evidence, look at and forget memory.

    ``Memory(settings)`` opens the stores the settings name (embedded qdrant-edge and FalkorDB under
    ``settings.data_dir`` unless COMPASSMEM_QDRANT_URL / COMPASSMEM_FALKORDB_URL are set) and builds the embedder
    they choose. A process that already holds open stores and an embedder (the query API: ``compassmem api`` measures
    its store calls, and inside ``compassmem dev`` it shares the worker's) passes them in; they stay the caller's to
    close. ``engine_config`` and ``pipeline_config`` replace what the settings choose of the query engine (ranking,
    the graph walk) and of the write path (batch size, memory window), for experiments such as the benchmarks'
    ablations. ``control`` is where the deletions record their commands (the API passes the publisher it holds);
    without one, a Kafka producer is made on the first deletion when COMPASSMEM_KAFKA_BOOTSTRAP is set. Safe to share
    between threads.
    """

    def __init__(self, settings: Settings | None = None, *, stores: Stores | None = None,
                 embedder: Embedder | None = None, engine_config: EngineConfig | None = None,
                 pipeline_config: PipelineConfig | None = None, control: ControlPublisher | None = None) -> None:
        self.settings = settings or Settings()
        self.embedder = embedder or make_embedder(self.settings)
        self._owns_stores = stores is None
        self.stores = stores or open_stores(self.settings, dim=self.embedder.dim)
        self._pipeline_config = pipeline_config
        self._control = control
        # Made by this object (and closed by it) on the first deletion with a stream configured.
        self._own_control: KafkaTurnPublisher | None = None
        self._forget_gate = _forget_gate(self.settings)
        secret = self.settings.cursor_secret
        self.cursors = CursorSigner(secret.get_secret_value() if secret else None)
        try:
            self.hot = HotTier(self.stores.vectors, self.stores.graph, max_turns=self.settings.api_hot_turns,
                               max_age_s=self.settings.api_view_max_age_s,
                               followed_max_age_s=self.settings.api_hot_followed_max_age_s)
            chat = self._chat = ChatClient.from_settings(self.settings)
            self.engine = QueryEngine(self.embedder, self.stores.vectors, self.hot, engine_config,
                                      answerer=LlmAnswerer(chat) if chat else None,
                                      decomposer=LlmDecomposer(chat).decompose if chat else None,
                                      reranker=None if self.settings.reranker == "none"
                                      else shipped_reranker(self.settings.reranker))
        except BaseException:
            self.close()
            raise
        # The runtime settings in force here; the API's control-topic reader applies the changes it reads.
        self.runtime = RuntimeSettings(self.settings, on_change=self._use_setting)
        # Built on the first add: a reader (the API, `ask`) never needs the segmentation state.
        self._pipeline: MemoryPipeline | None = None
        # The events the pipeline wrote during an add, for ``_warm``.
        self._written = WrittenEvents()
        # One writer at a time: the pipeline's per-conversation state is not thread-safe (queries need no lock).
        self._writing = threading.Lock()
        # Called with (tenant, conversation_id) after a forget, (tenant, None) after a tenant's deletion: what the
        # process keeps of that memory beside the stores (the API's health trends) goes with it.
        self.forget_listeners: list[Callable[[str, str | None], None]] = []
        self._closed = False

    # -- writing -------------------------------------------------------------------------------------------------

    def add(self, turns: TurnInput | Iterable[TurnInput], *, progress: Callable[[int], None] | None = None,
            warm: bool = True) -> IngestSummary:
        """Build memory from turns (``Turn`` objects, dicts in the turn schema, or chat messages: ``{"conversation_id":
        ..., "role": ..., "content": ...}``, their ids and times filled in as ``core/chat_messages.py`` says), in
        order, and write it.

        Each call ends its conversations' open segments, so add a whole exchange or session at a time rather than
        turn by turn. Within one ``Memory`` a conversation's later calls continue its memory (merging, relations,
        topics). Turns that repeat all of a conversation's stored turns before new ones (the same file again after an
        interruption, or a longer one) continue it as one uninterrupted run would (``compassmem/write/resume.py``);
        otherwise a new ``Memory`` starts a fresh segmentation state for turns added to a stored conversation.
        With ``warm`` the events written are then read into the query's hot tier (the latest first, up to its
        ``api_hot_turns``), so that the queries that follow a write do not each load them from the stores; a
        process that only writes (``compassmem ingest``) passes False. Returns the running totals of this object's
        writes."""
        one = isinstance(turns, Turn | Mapping)
        validated = turns_of([turns] if one else list(turns), one=one, now=datetime.now(UTC))  # type: ignore[list-item]
        with self._writing:
            stored = stored_lookup(self.stores.vectors, validated)
            fresh = self.new_turns(validated, stored=stored)
            writer = self._writer()
            for prefix in stored_prefixes(validated, fresh, stored, self.stores):
                resume(writer, self.stores, prefix)
            try:
                summary = writer.ingest(fresh, progress=progress)
            finally:  # a failed add may have written part of its turns
                written = self._written.take()
                for tenant, conversation_id in {(t.tenant, t.conversation_id) for t in validated}:
                    # Merges rewrite older events: cached copies would be stale until their maximum age.
                    self.hot.invalidate(tenant, conversation_id)
        if warm:
            self._warm(written)
        return summary

    def new_turns(self, turns: Sequence[Turn], *, stored: StoredLookup | None = None) -> list[Turn]:
        """The turns memory does not have yet, in order: the same turn again, stored or earlier in ``turns``, is left
        out (it changes nothing). BadRequest naming each turn under an id its conversation has for another turn:
        a turn id names one turn (``compassmem/write/turn_ids.py``). ``add`` and ``POST /v1/turns`` check with it;
        ``stored``: the stored turns of ``turns``, when the caller has read them already."""
        if self._forget_gate is not None:
            self._forget_gate.check((t.tenant, t.conversation_id) for t in turns)
        ids = TurnIds(stored or stored_lookup(self.stores.vectors, turns))
        fresh: list[Turn] = []
        refused: list[FieldError] = []
        for index, turn in enumerate(turns):
            try:
                if ids.check(turn, index):
                    fresh.append(turn)
            except TurnIdConflict as conflict:
                refused.append(FieldError(field=f"[{index}].turn_id", message=str(conflict)))
        if refused:
            raise BadRequest("; ".join(f"{error.field}: {error.message}" for error in refused), errors=refused)
        return fresh

    def _warm(self, written: Sequence[WrittenEvent]) -> None:
        """Read the latest written events that the hot tier can hold into it."""
        chosen: dict[str, list[str]] = {}
        room = self.hot.max_turns
        for event in reversed(written):
            if event.turns > room:
                break
            room -= event.turns
            chosen.setdefault(event.tenant, []).append(event.event_id)
        for tenant, event_ids in chosen.items():
            event_ids.reverse()  # the latest loaded last: least recently used is the oldest
            self.hot.preload(tenant, event_ids)

    @checked
    def forget(self, conversation_id: Id, *, tenant: Tenant = DEFAULT_TENANT) -> DeleteResult:
        """Delete a conversation from both stores (and, with ``compact_after_erasure``, from their files), after
        recording a forget command on the control topic when a stream is configured (``forget_published``).
        Forgetting one that has no memory is not an error (``events_deleted`` is 0)."""
        with self._writing:
            where = self._publish(ForgetCommand(tenant=tenant, conversation_id=conversation_id))
            events = self.stores.vectors.count(tenant, conversation_id)
            self.stores.delete_conversation(tenant, conversation_id)
            self.hot.invalidate(tenant, conversation_id)
            if self._pipeline is not None:
                # Turns added again later start a new memory, with no relations to the deleted events.
                self._pipeline.memories.pop(partition_key(tenant, conversation_id), None)
            self._forgotten(tenant, conversation_id)
            self._erased()
        placed = self._markers_placed(tenant, conversation_id, where)
        log.info("memory.conversation_forgotten", tenant=tenant, conversation_id=conversation_id, events=events,
                 forget_published=where is not None, markers_placed=placed)
        return DeleteResult(tenant=tenant, conversation_id=conversation_id, events_deleted=events,
                            forget_published=where is not None, markers_placed=placed)

    @checked
    def redact_turn(self, conversation_id: Id, turn_id: Id, *, tenant: Tenant = DEFAULT_TENANT) -> RedactResult:
        """Delete one turn: the event that held it is rebuilt from its other turns (summary, keywords, entities,
        embedding) or, when it was the last, deleted with its relations. As for ``forget``, a redaction command is
        recorded first when a stream is configured (``redaction_published``). NotFound when no store holds the
        turn (and then nothing is recorded)."""
        missing = f"no turn {turn_id!r} in conversation {conversation_id!r} of tenant {tenant!r}"
        with self._writing:
            if self.stores.vectors.get_turn(tenant, conversation_id, turn_id) is None:
                raise NotFound(missing)
            # "checked": the worker may find the turn already gone (deleted below), which is no reason to refuse it.
            published = self._publish(RedactCommand(tenant=tenant, conversation_id=conversation_id, turn_id=turn_id,
                                                    if_absent="checked")) is not None
            stored = redact_stored_turn(self.stores, tenant, conversation_id, turn_id)
            self.hot.invalidate(tenant, conversation_id)
            if stored is None:  # redacted meanwhile by another process, e.g. the worker's control agent
                raise NotFound(missing)
            pipeline = self._pipeline
            memory = pipeline.memories.get(partition_key(tenant, conversation_id)) if pipeline else None
            if memory is not None:
                # Later adds to this conversation must not write the turn back with its event.
                memory.redact_turn(turn_id, stored.before, stored.event, stored.relations)
            self._erased()
        return RedactResult(tenant=tenant, conversation_id=conversation_id, turn_id=turn_id,
                            event_id=stored.event_id, event_deleted=stored.event is None,
                            redaction_published=published)

    @checked
    def delete_tenant(self, tenant: Tenant) -> TenantDeleteResult:
        """Delete every conversation of a tenant from both stores (an operator's step: over HTTP it needs an admin
        key), after recording a forget command for the whole tenant when a stream is configured. Deleting a tenant
        that has no memory is not an error."""
        with self._writing:
            where = self._publish(ForgetCommand(tenant=tenant))
            events = self.stores.vectors.count(tenant)
            self.stores.delete_tenant(tenant)
            self.hot.invalidate(tenant)
            if self._pipeline is not None:
                for key in [k for k in self._pipeline.memories if k.startswith(f"{tenant}/")]:
                    self._pipeline.memories.pop(key)
            self._forgotten(tenant, None)
            self._erased()
        placed = self._markers_placed(tenant, None, where)
        log.info("memory.tenant_deleted", tenant=tenant, events=events, forget_published=where is not None,
                 markers_placed=placed)
        return TenantDeleteResult(tenant=tenant, events_deleted=events, forget_published=where is not None,
                                  markers_placed=placed)

    # -- runtime settings ----------------------------------------------------------------------------------------

    def set_setting(self, key: str, value: object) -> SettingRecorded:
        """Record a runtime setting change on the control topic (``compassmem/library/runtime_settings.py``): workers
        apply it at its marker in each turns partition, API processes as they read it. UnknownSettingError or
        SettingValueError for a bad key or value; Unavailable without a stream or an acknowledgement."""
        command = setting_command(key, value)
        try:
            control = self._control_publisher()
            if control is None:
                raise Unavailable("a runtime setting is a record on the control topic, and no stream is "
                                  "configured (COMPASSMEM_KAFKA_BOOTSTRAP)")
            partition, offset = control.publish_command(command)
        except PublishError as error:
            raise Unavailable(f"the setting was not acknowledged, nothing changed: {error}") from error
        log.info("memory.setting_recorded", setting=key, value=command.value, offset=offset)
        return SettingRecorded(setting=key, value=command.value, requested_at=command.requested_at,
                               control_partition=partition, control_offset=offset)

    def _use_setting(self, key: str, value: SettingValue) -> None:
        """A runtime change of a read-path key takes effect here (write-path keys are the workers')."""
        ranking = overrides(RankingConfig, {key: value})
        if ranking:
            self.engine.use_ranking(self.engine.config.ranking.model_copy(update=ranking))
        hot_turns = overrides(Settings, {key: value}).get("api_hot_turns")
        if hot_turns is not None:
            self.hot.resize(int(hot_turns))

    def _publish(self, command: Command) -> tuple[int, int] | None:
        """Record a deletion's command on the control topic: its partition and offset there, None when no stream is
        configured. Unavailable when the broker does not acknowledge it: deleting without the log entry would let a
        replay of the turns topic bring the memory back (and the worker, which never heard of it, keeps it)."""
        try:
            control = self._control_publisher()
            if control is None:
                return None
            return control.publish_command(command)
        except PublishError as error:
            raise Unavailable(f"the {command.command} command was not acknowledged, nothing deleted: {error}") \
                from error

    def _markers_placed(self, tenant: str, conversation_id: str | None, where: tuple[int, int] | None) -> bool:
        """Whether the worker placed the markers of the forget at ``where`` (ForgetGate); outside the writer lock,
        so adds of other conversations go on while it waits."""
        return where is not None and self._forget_gate is not None and \
            self._forget_gate.recorded(tenant, conversation_id, *where)

    def _control_publisher(self) -> ControlPublisher | None:
        if self._control is None and self.settings.kafka_bootstrap:
            self._own_control = KafkaTurnPublisher(self.settings.kafka_bootstrap, self.settings.turns_topic,
                                                   self.settings.control_topic, client_id="compassmem-library")
            self._control = self._own_control
        return self._control

    def compact(self) -> bool:
        """Rewrite both stores' files from what they hold now, so that what earlier redactions and forgets deleted
        leaves the disk as well (``compassmem compact``; after every erasure with COMPASSMEM_COMPACT_AFTER_ERASURE).
        False when the vectors live on a Qdrant server, whose files are its operator's to compact."""
        with self._writing:
            return self.stores.compact()

    def _forgotten(self, tenant: str, conversation_id: str | None) -> None:
        for listener in self.forget_listeners:
            listener(tenant, conversation_id)

    def _erased(self) -> None:
        if self.settings.compact_after_erasure:
            self.stores.compact()

    # -- reading -------------------------------------------------------------------------------------------------

    @checked
    def query(self, request: QueryRequest | str, *, conversation_id: str | None = None,
              conversation_ids: Sequence[str] | None = None, subject_id: str | None = None,
              all_conversations: bool | None = None, tenant: str | None = None, budget_turns: int | None = None,
              max_hops: int | None = None, explain: bool | None = None, time_from: TimeBound | None = None,
              time_to: TimeBound | None = None, metadata: MetadataFilter | None = None,
              min_relevance: float | None = None,
              deadline_s: Annotated[float, Field(gt=0)] | None = None) -> QueryResponse:
        """Answer a question with ranked source turns and the evidence events that hold them.

        Pass a ``QueryRequest``, or the question and its fields (exactly one scope: ``conversation_id``,
        ``conversation_ids``, ``subject_id`` or ``all_conversations=True``). With ``explain=True`` the response
        also holds ``explanation``: why each turn ranks where it does (channels, feature contributions, score,
        path) and what the question was taken to ask. ``time_from``/``time_to`` (timezone-aware) keep the turns said
        within the range or held by an event whose resolved time anchor overlaps it; ``metadata`` the turns whose
        metadata has these top-level values (docs/querying.md). Every returned turn carries ``relevance``, the
        calibrated probability that it is evidence, and the response ``answerable``/``answerable_probability``;
        ``min_relevance`` (0-1, default 0) drops the turns whose relevance is below it. NotFound when the scope holds
        no memory at all (a filter or a ``min_relevance`` that leaves nothing answers no turns); Unavailable when
        ``deadline_s`` passed while gathering evidence."""
        fields: dict[str, Any] = {name: value for name, value in (
            ("conversation_id", conversation_id), ("conversation_ids", conversation_ids),
            ("subject_id", subject_id), ("all_conversations", all_conversations), ("tenant", tenant),
            ("budget_turns", budget_turns), ("max_hops", max_hops), ("explain", explain), ("time_from", time_from),
            ("time_to", time_to), ("metadata", metadata), ("min_relevance", min_relevance)) if value is not None}
        if isinstance(request, QueryRequest):
            if fields:
                raise TypeError(f"give either a QueryRequest or a question with its fields, not both "
                                f"({', '.join(fields)})")
        else:
            try:
                request = QueryRequest(question=request, **fields)
            except ValidationError as error:
                raise refused(error.errors()) from None
        try:
            response = self.engine.query(request, deadline_s=deadline_s)
        except QueryDeadlineExceeded as error:
            raise Unavailable(str(error)) from error
        # Only an empty answer asks whether the scope holds anything at all (NotFound rather than no evidence).
        if not response.turn_ids and self.stores.vectors.count_turns(request.scope) == 0:
            raise NotFound(f"no memory for {request.scope_label} of tenant {request.tenant!r}")
        return response

    # The listings take the bounds of the HTTP API's and the MCP tools' parameters (contracts/limits.py).
    @checked
    def conversations(self, *, tenant: Tenant = DEFAULT_TENANT, query: SearchText | None = None, limit: PageSize = 50,
                      cursor: CursorText | None = None, order: ConversationOrder = "recent") -> ConversationPage:
        """One page of the tenant's conversations with their event and turn counts and last update, most recent
        first (or by id); ``query`` keeps those whose id, subject, an event summary or a participant contains it.
        Pass the page's ``next_cursor`` for the next one (None on the last page); any other cursor is a ValueError
        (CursorError) naming it. Cursors are signed with ``COMPASSMEM_CURSOR_SECRET``, else with a secret of this
        process."""
        return list_conversations(self.stores, tenant, query=query,
                                  limit=limit, cursor=cursor, order=order, cursors=self.cursors)

    @checked
    def events(self, conversation_id: Id, *, tenant: Tenant = DEFAULT_TENANT, limit: PageSize = 50,
               cursor: CursorText | None = None) -> EventPage:
        """One page of a conversation's events in time order; ``next_cursor`` as for ``conversations``. NotFound
        when the conversation has no memory."""
        page = list_events(self.stores, tenant, conversation_id, limit=limit, cursor=cursor, cursors=self.cursors)
        if not page.events and cursor is None:
            raise NotFound(_no_memory(tenant, conversation_id))
        return page

    @checked
    def graph(self, conversation_id: Id, *, tenant: Tenant = DEFAULT_TENANT, max_nodes: GraphNodes | None = None,
              since: datetime | None = None, topics: Annotated[GraphTopics, EachId] | None = None,
              unclustered: bool = False, events: Annotated[GraphFocus, EachId] | None = None
              ) -> LimitedConversationGraph:
        """A conversation's event graph: events, topic clusters and every relation (superseded ones marked);
        ``max_nodes`` keeps the most recent events, ``since`` those that end at or after it. Focused (what the
        explorer draws on demand): with ``topics`` (cluster ids), ``unclustered`` (the events without a topic) or
        ``events`` (event ids), only those events (the limits apply to the topics' events) and the events named,
        with every relation touching one of them and the events at their other ends."""
        if topics or unclustered or events:
            graph = focused_graph(self.stores, tenant, conversation_id, topics=topics or [],
                                  unclustered=unclustered, events=events or [],
                                  max_nodes=max_nodes, since=since)
        else:
            graph = conversation_graph(self.stores, tenant, conversation_id, max_nodes=max_nodes, since=since)
        if graph is None:
            raise NotFound(_no_memory(tenant, conversation_id))
        return graph

    @checked
    def overview(self, conversation_id: Id, *, tenant: Tenant = DEFAULT_TENANT, types: list[RelationType] | None = None,
                 min_confidence: Confidence = 0.0, links: OverviewLinks = 50) -> ConversationOverview:
        """What the explorer opens a conversation on: its topics with their event and turn counts (the events
        without a topic as one more, id None), the relation types with how many the filters keep (``types``: all
        when None; at least ``min_confidence``), and the strongest ``links`` between topics that the kept active
        relations make. NotFound when the conversation has no memory."""
        overview = conversation_overview(self.stores, tenant, conversation_id,
                                         types=[t.value for t in types] if types else None,
                                         min_confidence=min_confidence, links=links)
        if overview is None:
            raise NotFound(_no_memory(tenant, conversation_id))
        return overview

    @checked
    def event(self, event_id: Id, *, tenant: Tenant = DEFAULT_TENANT) -> EventOut:
        """One event with its source turns (observations), as ``GET /v1/events/{id}`` and ``Client.event`` give it;
        NotFound when the tenant has no such event."""
        found = self.get_events([event_id], tenant=tenant)
        if not found:
            raise NotFound(f"no event {event_id!r} for tenant {tenant!r}")
        return EventOut.of(found[0])

    @checked
    def get_events(self, event_ids: Annotated[list[str], EachId], *, tenant: Tenant = DEFAULT_TENANT) -> list[Event]:
        """The stored events of these ids (evidence names them) that the tenant has; unknown ids are left out."""
        return self.stores.vectors.get_events(tenant, event_ids)

    # -- lifetime ------------------------------------------------------------------------------------------------

    def _writer(self) -> MemoryPipeline:
        if self._pipeline is None:
            # The worker's window too (unless pipeline_config replaces it), so that adding a conversation builds
            # the memory streaming it would.
            self._pipeline = MemoryPipeline(
                self.embedder, [VectorSink(self.stores.vectors), GraphSink(self.stores.graph), self._written],
                self._pipeline_config or PipelineConfig.from_settings(self.settings),
                llm=llm_steps(self.settings, self._chat))
        return self._pipeline

    def close(self) -> None:
        """Close the stores this object opened (not ones passed in). Safe to call twice."""
        if getattr(self, "_closed", False):
            return
        self._closed = True
        try:
            if self._own_control is not None:
                self._own_control.close()
        finally:
            if self._owns_stores:
                self.stores.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # -- export and import ---------------------------------------------------------------------------------------

    @checked
    def export(self, destination: SkipValidation[Target], *, conversation_id: Id | None = None,
               tenant: Tenant = DEFAULT_TENANT) -> TransferSummary:
        """Write the tenant's memory, or one conversation's, to a path or text stream as JSONL (the format of
        ``compassmem.transfer.records``): turns (with the passages of long ones) and events with their vectors,
        clusters, relations (superseded ones too). NotFound when ``conversation_id`` has no memory. Conversations
        holding ids stored before the id rule are left out and listed in the summary's ``skipped``
        (``compassmem migrate-ids`` rewrites them)."""
        if conversation_id is not None:
            self.events(conversation_id, tenant=tenant, limit=1)  # NotFound before a file is made
        with writing(destination) as out:
            return export_memory(self.stores, out, tenant=tenant, conversation_id=conversation_id,
                                 vector_space=self.settings.vector_space, dim=self.embedder.dim)

    def import_(self, source: Target, *, replace: bool = False, warm: bool = True,
                progress: Callable[[int, int], None] | None = None) -> TransferSummary:
        """Restore an export (a path or text stream) into these stores. The whole file is checked first: a bad line
        anywhere raises ExportFormatError naming it, and nothing is written. Refused (ImportRefused) when its
        vectors come from another embedder, or when the stores already hold its tenant (a tenant export) or a
        conversation of it, unless ``replace``: then each of its conversations replaces the stored one. If writing
        fails part-way, what was written is deleted again and ImportFailed says so (with ``replace``, which
        conversations were replaced). With ``warm``, a whole import's events are then read into the query's hot
        tier as after ``add`` (the latest first, up to ``api_hot_turns``); ``compassmem import`` passes False.
        ``progress(written, total)`` is called after each conversation of the file is written."""
        with self._writing, reading(source) as lines:
            try:
                summary = import_memory(self.stores, lines, vector_space=self.settings.vector_space,
                                        dim=self.embedder.dim, replace=replace,
                                        on_written=self._conversation_imported, written_events=self._written,
                                        progress=progress)
            finally:  # a failed import undid its writes: nothing of it is read into the tier
                written = self._written.take()
        if warm:
            self._warm(written)
        return summary

    def _conversation_imported(self, tenant: str, conversation_id: str) -> None:
        self.hot.invalidate(tenant, conversation_id)
        if self._pipeline is not None:
            # Segmentation state of a replaced conversation describes memory that is gone.
            self._pipeline.memories.pop(partition_key(tenant, conversation_id), None)
