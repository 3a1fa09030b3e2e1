"""The explorer's live view: the worker's change feeds, per conversation, as server-sent events.

The worker publishes every event (provisional ones included), relation and topic it writes, once the stores hold
them, on the events, relations and clusters topics (``compassmem/streams/messages.py``). ``LiveFeed`` follows the
three topics from their end on a daemon thread (no consumer group: every API process sees every change) and hands
each change to the streams watching its conversation. Changes are numbered; the last ``buffer`` of them are kept, so a
stream that reconnects with the id of the last change it got (SSE ``Last-Event-ID``) receives what it missed, or a
``resync`` when that is no longer kept (or the id is from another process), after which the page reloads the graph.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Literal

import structlog
from kafka import KafkaConsumer, TopicPartition
from pydantic import BaseModel, Field, ValidationError

from compassmem.contracts.records import GraphEdge, GraphNode
from compassmem.retrieval.listing import edge_of_relation, node_of_event
from compassmem.streams.messages import ChangeOp, ClusterChange, EventChange, RelationChange

log = structlog.get_logger(__name__)

# A stream that falls this far behind (a stalled tab) is ended with a resync rather than buffered without bound.
_QUEUE_LIMIT = 1000


# -- What the stream sends (documented in the OpenAPI schema of the live endpoint's responses) --------------------


class LiveChange(BaseModel):
    """One change of a conversation's memory, as the live stream sends it (SSE event ``change``)."""

    op: Literal["upsert", "delete", "forget"] = Field(description="upsert: an event, topic or relation was "
                                                                  "written; delete: an event was removed (merged "
                                                                  "away); forget: the whole conversation was.")
    node: GraphNode | None = Field(default=None, description="The event or topic written.")
    edge: GraphEdge | None = Field(default=None, description="The relation written.")
    removed: str | None = Field(default=None, description="The id of the event deleted.")


class LiveReady(BaseModel):
    """The live stream's first event (SSE ``ready``): changes from here on will follow."""

    ends_after_s: float = Field(description="The stream ends after this long; reconnect with Last-Event-ID to get "
                                            "the changes in between.")


class LiveNotice(BaseModel):
    """SSE ``resync`` (changes were lost: reload the graph, then reconnect without Last-Event-ID) or
    ``unavailable`` (this API process follows no change feed); the stream ends after it."""

    reason: str


@dataclass(frozen=True)
class Numbered:
    """A change of one conversation (``conversation_id`` None: every conversation of the tenant) and its id."""

    id: str
    tenant: str
    conversation_id: str | None
    change: LiveChange


@dataclass(eq=False)
class Subscription:
    """One stream's queue, filled from the feed's thread through the stream's event loop."""

    tenant: str
    conversation_id: str
    loop: asyncio.AbstractEventLoop
    # A resync notice ends the stream: the page reloads the graph and opens a new one.
    queue: asyncio.Queue[Numbered | LiveNotice] = field(default_factory=lambda: asyncio.Queue(_QUEUE_LIMIT + 1))

    def wants(self, item: Numbered) -> bool:
        return item.tenant == self.tenant and item.conversation_id in (None, self.conversation_id)

    def put(self, item: Numbered | LiveNotice) -> None:
        """On the stream's loop only (the feed's thread goes through ``call_soon_threadsafe``)."""
        if self.queue.qsize() < _QUEUE_LIMIT:
            self.queue.put_nowait(item)
        elif self.queue.qsize() == _QUEUE_LIMIT:
            self.queue.put_nowait(LiveNotice(reason=f"more than {_QUEUE_LIMIT} changes waited for this page"))


class LiveFeed:
    """Follows the events, relations and clusters topics for the live streams of one API process."""

    def __init__(self, bootstrap: str, topics: tuple[str, str, str], *, buffer: int = 4096,
                 poll_ms: int = 100) -> None:
        self._bootstrap = bootstrap
        self._events_topic, self._relations_topic, self._clusters_topic = topics
        self._poll_ms = poll_ms
        # Ids are "<token>-<n>": a Last-Event-ID from another process (or before a restart) is recognised as such.
        self._token = uuid.uuid4().hex[:8]
        self._sequence = 0
        self._recent: deque[Numbered] = deque(maxlen=buffer)
        self._subscriptions: set[Subscription] = set()
        # Held while a change is numbered and handed out, and while a new stream replays and registers: no change
        # falls between a replay and the registration.
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.following = threading.Event()
        self._thread = threading.Thread(target=self._run, name="explorer-live-feed", daemon=True)

    def start(self) -> LiveFeed:
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def subscribe(self, tenant: str, conversation_id: str, last_id: str | None) -> tuple[Subscription, str]:
        """The conversation's changes after ``last_id`` (None: from now on), and the id of the last change before
        them; call from the stream's event loop."""
        subscription = Subscription(tenant, conversation_id, asyncio.get_running_loop())
        with self._lock:
            if last_id is not None:
                missed = self._after(last_id)
                if missed is None:
                    subscription.put(LiveNotice(reason="the changes since the last one this page got are no longer "
                                                       "kept, or came from another API process"))
                for item in missed or ():
                    if subscription.wants(item):
                        subscription.put(item)
            self._subscriptions.add(subscription)
            return subscription, self._id(self._sequence)

    def unsubscribe(self, subscription: Subscription) -> None:
        with self._lock:
            self._subscriptions.discard(subscription)

    def publish(self, topic: str, value: bytes) -> None:
        """Number one change-feed record and hand it to the streams that watch its conversation."""
        try:
            found = self._decode(topic, value)
        except ValidationError as error:
            log.warning("explorer.live.skipped", topic=topic, reason=str(error).splitlines()[0])
            return
        if found is None:
            return
        tenant, conversation_id, change = found
        with self._lock:
            self._sequence += 1
            item = Numbered(self._id(self._sequence), tenant, conversation_id, change)
            self._recent.append(item)
            for subscription in self._subscriptions:
                if subscription.wants(item):
                    subscription.loop.call_soon_threadsafe(subscription.put, item)

    def _id(self, sequence: int) -> str:
        return f"{self._token}-{sequence}"

    def _after(self, last_id: str) -> list[Numbered] | None:
        """The kept changes after ``last_id``; None when some of them are no longer kept."""
        token, _, number = last_id.partition("-")
        if token != self._token or not number.isdigit() or int(number) > self._sequence:
            return None
        oldest = int(self._recent[0].id.rpartition("-")[2]) if self._recent else self._sequence + 1
        if int(number) + 1 < oldest:
            return None
        return [item for item in self._recent if int(item.id.rpartition("-")[2]) > int(number)]

    def _decode(self, topic: str, value: bytes) -> tuple[str, str | None, LiveChange] | None:
        if topic == self._events_topic:
            event_change = EventChange.model_validate_json(value)
            if event_change.op == ChangeOp.FORGET:
                return event_change.tenant, event_change.conversation_id, LiveChange(op="forget")
            if event_change.event is not None:
                return (event_change.tenant, event_change.event.conversation_id,
                        LiveChange(op="upsert", node=node_of_event(event_change.event)))
            if event_change.event_id is not None and event_change.conversation_id is not None:
                return event_change.tenant, event_change.conversation_id, LiveChange(op="delete",
                                                                                     removed=event_change.event_id)
            return None
        if topic == self._relations_topic:
            relation = RelationChange.model_validate_json(value).relation
            return relation.tenant, relation.conversation_id, LiveChange(op="upsert", edge=edge_of_relation(relation))
        cluster = ClusterChange.model_validate_json(value).cluster
        node = GraphNode.of(cluster.cluster_id, {"kind": "cluster", "label": cluster.label, "members": cluster.members})
        return cluster.tenant, cluster.conversation_id, LiveChange(op="upsert", node=node)

    def _run(self) -> None:
        # Never auto-created from here: the worker creates its topics with the partition counts it checks.
        consumer = KafkaConsumer(bootstrap_servers=self._bootstrap.split(","), enable_auto_commit=False,
                                 group_id=None, allow_auto_create_topics=False, client_id="compassmem-explorer")
        try:
            while not self._stop.is_set():
                try:
                    if not self.following.is_set():
                        if not self._assign(consumer):
                            self._stop.wait(1.0)
                        continue
                    batches = consumer.poll(timeout_ms=self._poll_ms)
                except Exception as error:  # noqa: BLE001 - a broker hiccup must not end the live view
                    log.warning("explorer.live.poll_failed", error=str(error))
                    self._stop.wait(1.0)
                    continue
                for partition, records in batches.items():
                    for record in records:
                        if record.value is not None:
                            self.publish(partition.topic, record.value)
        finally:
            consumer.close()

    def _assign(self, consumer: KafkaConsumer) -> bool:
        """Follow every partition from its end; False while a topic does not exist yet (no worker has run)."""
        assigned = []
        for topic in (self._events_topic, self._relations_topic, self._clusters_topic):
            partitions = consumer.partitions_for_topic(topic)
            if not partitions:
                return False
            assigned += [TopicPartition(topic, p) for p in sorted(partitions)]
        consumer.assign(assigned)
        consumer.seek_to_end(*assigned)
        # Resolve the end offsets now (seek_to_end is lazy): a page told "ready" must not miss a later change.
        for partition in assigned:
            consumer.position(partition)
        self.following.set()
        log.info("explorer.live.following", partitions=len(assigned))
        return True


StreamEvent = Literal["ready", "change", "resync", "unavailable"]



def sse(event: StreamEvent, data: BaseModel, event_id: str | None = None) -> bytes:
    """One server-sent event; the JSON has no newline, so it is one ``data:`` line."""
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {data.model_dump_json()}\n\n".encode()
