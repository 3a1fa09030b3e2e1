"""The explorer's live view: the worker's change feeds, per conversation, as server-sent events.

The worker publishes every event (provisional ones included), relation and topic it writes, once the stores hold
them, on the events, relations and clusters topics (``compassmem/core/contracts/stream_records.py``). ``LiveFeed`` follows the
three topics from their end (``ChangeFollower``: no consumer group, every API process sees every change) and hands
each change to the streams watching its conversation. Changes are numbered; the last ``buffer`` of them are kept, so a
stream that reconnects with the id of the last change it got (SSE ``Last-Event-ID``) receives what it missed, or a
``resync`` when that is no longer kept, after which the page reloads the graph.

A kept change may quote a turn that is redacted later, or a conversation that is forgotten: the feed also follows the
control topic, where every redaction and forget is recorded first (by any API process, ``compassmem redact`` or
``forget``), and the API process that carries one out purges at once (``LiveFeeds.purge``). A purge drops the
conversation's kept changes and ends its open streams with a ``resync``; an id from before it gets a ``resync`` too.
Ids are positions signed for one conversation by this process (``<n>.<signature>``), so a client can resume only
from a position it was given for that conversation, never ask for the whole buffer.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import secrets
import threading
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

import structlog
from pydantic import BaseModel, Field, ValidationError

from compassmem.core.config import Settings
from compassmem.core.contracts.commands import CONTROL_COMMAND
from compassmem.core.contracts.records import GraphEdge, GraphNode
from compassmem.query_api.change_follower import ChangeFollower
from compassmem.retrieval.listing import edge_of_relation, node_of_event
from compassmem.core.contracts.stream_records import ChangeOp, ClusterChange, EventChange, RelationChange

log = structlog.get_logger(__name__)

# A stream ends after this long and the page reconnects with Last-Event-ID (nothing is lost): an open page never
# holds a server's shutdown for longer, since uvicorn waits for open responses before it stops.
LIVE_STREAM_S = 15.0
_FOLLOW_WAIT_S = 10.0
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
    """A change of one conversation (``conversation_id`` None: every conversation of the tenant) and its number."""

    sequence: int
    tenant: str
    conversation_id: str | None
    change: LiveChange


@dataclass(frozen=True)
class Purged:
    """Where the conversation's (None: the tenant's) earlier changes were dropped: a stream resumed from before it
    is told to reload."""

    sequence: int
    tenant: str
    conversation_id: str | None


Kept = Numbered | Purged


@dataclass(eq=False)
class Subscription:
    """One stream's queue, filled from the feed's thread through the stream's event loop."""

    tenant: str
    conversation_id: str
    loop: asyncio.AbstractEventLoop
    # A resync notice ends the stream: the page reloads the graph and opens a new one.
    queue: asyncio.Queue[Numbered | LiveNotice] = field(default_factory=lambda: asyncio.Queue(_QUEUE_LIMIT + 1))

    def wants(self, item: Kept) -> bool:
        return item.tenant == self.tenant and item.conversation_id in (None, self.conversation_id)

    def put(self, item: Numbered | LiveNotice) -> None:
        """On the stream's loop only (the feed's thread goes through ``call_soon_threadsafe``)."""
        if self.queue.qsize() < _QUEUE_LIMIT:
            self.queue.put_nowait(item)
        elif self.queue.qsize() == _QUEUE_LIMIT:
            self.queue.put_nowait(LiveNotice(reason=f"more than {_QUEUE_LIMIT} changes waited for this page"))

    def restart(self, notice: LiveNotice) -> None:
        """Drop what waits to be sent (it may quote what was purged) and end the stream with ``notice``; on the
        stream's loop only."""
        while not self.queue.empty():
            self.queue.get_nowait()
        self.queue.put_nowait(notice)


class FeedTopics(NamedTuple):
    events: str
    relations: str
    clusters: str
    control: str

    @classmethod
    def of(cls, settings: Settings) -> FeedTopics:
        return cls(settings.events_topic, settings.relations_topic, settings.clusters_topic, settings.control_topic)


PURGED_REASON = "the conversation was redacted or forgotten since: reload the graph"
_SIGNATURE_BYTES = 12


class LiveFeed:
    """Follows the change feeds and the control topic for the live streams of one API process."""

    def __init__(self, bootstrap: str, topics: FeedTopics, *, buffer: int = 4096, poll_ms: int = 100) -> None:
        self._topics = topics
        # Signs the ids this process hands out: a Last-Event-ID from another process, a restart or a client's own
        # making does not verify.
        self._secret = secrets.token_bytes(32)
        self._sequence = 0
        self._buffer = buffer
        self._recent: deque[Kept] = deque()
        # The highest number no longer kept: a stream resumed from before it may have missed a change.
        self._dropped_through = 0
        self._subscriptions: set[Subscription] = set()
        # Held while a change is numbered and handed out, and while a new stream replays and registers: no change
        # falls between a replay and the registration.
        self._lock = threading.Lock()
        self._follower = ChangeFollower(bootstrap, topics, self.publish, client_id="compassmem-explorer",
                                        poll_ms=poll_ms)
        # Set once changes from then on reach the streams: a page is told "ready" only after it.
        self.following = self._follower.following

    def start(self) -> LiveFeed:
        self._follower.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        self._follower.stop(timeout_s)

    def subscribe(self, tenant: str, conversation_id: str, last_id: str | None) -> tuple[Subscription, str]:
        """The conversation's changes after ``last_id`` (None: from now on), and the id of the position they
        follow; call from the stream's event loop."""
        subscription = Subscription(tenant, conversation_id, asyncio.get_running_loop())
        with self._lock:
            if last_id is not None:
                missed = self._after(subscription, last_id)
                if isinstance(missed, LiveNotice):
                    subscription.put(missed)
                else:
                    for item in missed:
                        subscription.put(item)
            self._subscriptions.add(subscription)
            return subscription, self.event_id(subscription, self._sequence)

    def unsubscribe(self, subscription: Subscription) -> None:
        with self._lock:
            self._subscriptions.discard(subscription)

    def event_id(self, subscription: Subscription, sequence: int) -> str:
        """The id of position ``sequence`` as this subscription's conversation sees it."""
        return f"{sequence}.{self._signature(subscription, sequence)}"

    def publish(self, topic: str, value: bytes) -> None:
        """Number one change-feed record and hand it to the streams that watch its conversation; a command of the
        control topic purges what it covers."""
        if topic == self._topics.control:
            self._control(value)
            return
        try:
            found = self._decode(topic, value)
        except ValidationError as error:
            log.warning("explorer.live.skipped", topic=topic, reason=str(error).splitlines()[0])
            return
        if found is None:
            return
        tenant, conversation_id, change = found
        if change.op == "forget":
            # Its earlier changes go; the forget itself is kept and sent, so an open page clears its graph.
            self.purge(tenant, conversation_id, notify=False)
        with self._lock:
            self._sequence += 1
            item = Numbered(self._sequence, tenant, conversation_id, change)
            self._keep(item)
            for subscription in self._subscriptions:
                if subscription.wants(item):
                    subscription.loop.call_soon_threadsafe(subscription.put, item)

    def purge(self, tenant: str, conversation_id: str | None, *, notify: bool = True) -> None:
        """Drop the kept changes of a conversation (None: of every conversation of the tenant), so that none is
        replayed, and (``notify``) end its open streams with a resync, so that their pages reload the graph."""
        with self._lock:
            self._sequence += 1
            marker = Purged(self._sequence, tenant, conversation_id)
            self._recent = deque(item for item in self._recent if not _covers(marker, item))
            self._keep(marker)
            if notify:
                for subscription in self._subscriptions:
                    if subscription.wants(marker):
                        subscription.loop.call_soon_threadsafe(subscription.restart, LiveNotice(reason=PURGED_REASON))
        log.info("explorer.live.purged", tenant=tenant, conversation_id=conversation_id)

    def _keep(self, item: Kept) -> None:
        """Under the lock."""
        self._recent.append(item)
        while len(self._recent) > self._buffer:
            self._dropped_through = self._recent.popleft().sequence

    def _signature(self, subscription: Subscription, sequence: int) -> str:
        message = f"{subscription.tenant}/{subscription.conversation_id}/{sequence}".encode()
        digest = hmac.new(self._secret, message, hashlib.sha256).digest()[:_SIGNATURE_BYTES]
        return base64.urlsafe_b64encode(digest).decode()

    def _after(self, subscription: Subscription, last_id: str) -> list[Numbered] | LiveNotice:
        """The subscription's kept changes after ``last_id``; a notice when that is not a position this process gave
        its conversation, or when some of them are no longer kept or were purged."""
        number, _, signature = last_id.partition(".")
        if not number.isdigit() or int(number) > self._sequence or \
                not hmac.compare_digest(signature, self._signature(subscription, int(number))):
            return LiveNotice(reason="the Last-Event-ID is not a position this API process gave this conversation's "
                                     "stream (another process, a restart, or made up): reload the graph")
        after = int(number)
        if after < self._dropped_through:
            return LiveNotice(reason="the changes since the last one this page got are no longer kept")
        missed = [item for item in self._recent if item.sequence > after and subscription.wants(item)]
        if any(isinstance(item, Purged) for item in missed):
            return LiveNotice(reason=PURGED_REASON)
        return [item for item in missed if isinstance(item, Numbered)]

    def _control(self, value: bytes) -> None:
        try:
            command = CONTROL_COMMAND.validate_json(value)
        except ValidationError:
            return  # the worker's own records there (ForgetDone) purge nothing
        self.purge(command.tenant, command.conversation_id)

    def _decode(self, topic: str, value: bytes) -> tuple[str, str | None, LiveChange] | None:
        if topic == self._topics.events:
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
        if topic == self._topics.relations:
            relation = RelationChange.model_validate_json(value).relation
            return relation.tenant, relation.conversation_id, LiveChange(op="upsert", edge=edge_of_relation(relation))
        cluster = ClusterChange.model_validate_json(value).cluster
        node = GraphNode.of(cluster.cluster_id, {"kind": "cluster", "label": cluster.label, "members": cluster.members})
        return cluster.tenant, cluster.conversation_id, LiveChange(op="upsert", node=node)


def _covers(purge: Purged, item: Kept) -> bool:
    return item.tenant == purge.tenant and purge.conversation_id in (None, item.conversation_id)


class LiveFeeds:
    """The process's one LiveFeed, started by the first stream (an API nobody watches runs no extra consumer)."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._feed: LiveFeed | None = None
        self._lock = threading.Lock()

    def feed(self) -> LiveFeed | None:
        bootstrap = self._settings.kafka_bootstrap
        if not bootstrap:
            return None
        with self._lock:
            if self._feed is None:
                self._feed = LiveFeed(bootstrap, FeedTopics.of(self._settings)).start()
            return self._feed

    def purge(self, tenant: str, conversation_id: str | None) -> None:
        """After this process redacted or forgot (its stores are changed): purge its feed now, before the command
        comes back on the control topic. Nothing is kept while no stream has started the feed."""
        with self._lock:
            feed = self._feed
        if feed is not None:
            feed.purge(tenant, conversation_id)

    def stop(self) -> None:
        with self._lock:
            if self._feed is not None:
                self._feed.stop()
                self._feed = None


StreamEvent = Literal["ready", "change", "resync", "unavailable"]



async def live_stream(feed: LiveFeed | None, tenant: str, conversation_id: str,
                      last_id: str | None) -> AsyncIterator[bytes]:
    """One live stream of a conversation as server-sent events (``GET /v1/conversations/{id}/live``)."""
    if feed is None:
        yield sse("unavailable", LiveNotice(reason="this API process follows no change feed (set "
                                                  "COMPASSMEM_KAFKA_BOOTSTRAP, or run compassmem dev)"))
        return
    if not await asyncio.to_thread(feed.following.wait, _FOLLOW_WAIT_S):
        yield sse("unavailable", LiveNotice(reason="the change feed topics do not exist yet (no worker has started)"))
        return
    subscription, position = feed.subscribe(tenant, conversation_id, last_id)
    try:
        # A resumed stream keeps the client's last id; a new one starts from the position its graph load follows.
        yield sse("ready", LiveReady(ends_after_s=LIVE_STREAM_S), None if last_id else position)
        loop = asyncio.get_running_loop()
        ends = loop.time() + LIVE_STREAM_S
        while (left := ends - loop.time()) > 0:
            try:
                item = await asyncio.wait_for(subscription.queue.get(), left)
            except TimeoutError:
                return
            if isinstance(item, LiveNotice):
                yield sse("resync", item)
                return
            yield sse("change", item.change, feed.event_id(subscription, item.sequence))
    finally:
        feed.unsubscribe(subscription)


def sse(event: StreamEvent, data: BaseModel, event_id: str | None = None) -> bytes:
    """One server-sent event; the JSON has no newline, so it is one ``data:`` line."""
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {data.model_dump_json()}\n\n".encode()
