"""Keeps the API's hot tier current from the worker's change feeds (events and relations topics).

The worker publishes every event it writes, deletes or forgets, and every relation it writes, once the stores have
them. An API process (``compassmem api`` or the one inside ``compassmem dev``) follows both topics from their end
and drops the hot-tier entries they name (a relation names both its events), so the next query reloads them: a
merge, a new relation or a new turn of a cached event is seen as soon as the worker has written it, not
``api_view_max_age_s`` later. While it follows without a break the hot tier keeps entries up to
``api_hot_followed_max_age_s``; when a poll fails it falls back to the short limit. Records that are not change
records are skipped (logged), never fatal: the feed only invalidates.

With ``runtime`` it also reads the control topic, from its start: every runtime setting change (a
``SettingCommand``) in order, so the values in force here are the log's whatever the process's age; the read-path
keys take effect as they are read, and the worker's answers say where each change's markers sit in the turns log.
"""

from __future__ import annotations

import threading

import structlog
from pydantic import ValidationError

from compassmem.config import Settings
from compassmem.retrieval.hot_tier import HotTier
from compassmem.runtime_settings import RuntimeSettings
from compassmem.streams.forget_log import follow_setting
from compassmem.streams.messages import ChangeOp, EventChange, RelationChange

log = structlog.get_logger(__name__)


class ChangeFeedListener:
    """A daemon thread following the events and relations topics (every partition, from the end, no group), and
    with ``runtime`` the control topic (from its start)."""

    def __init__(self, bootstrap: str, settings: Settings, hot: HotTier, poll_ms: int = 200,
                 runtime: RuntimeSettings | None = None) -> None:
        from kafka import KafkaConsumer

        self._hot = hot
        self._runtime = runtime
        self._events_topic = settings.events_topic
        self._control_topic = settings.control_topic if runtime is not None else None
        self._topics = (settings.events_topic, settings.relations_topic,
                        *((settings.control_topic,) if runtime is not None else ()))
        self._poll_ms = poll_ms
        self._stop = threading.Event()
        # Never auto-created from here: the worker creates its topics with the partition counts it checks.
        self._consumer = KafkaConsumer(bootstrap_servers=bootstrap.split(","), enable_auto_commit=False,
                                       group_id=None, allow_auto_create_topics=False)
        self._assigned = False
        self.applied = 0
        self._thread = threading.Thread(target=self._run, name="change-feed", daemon=True)

    def _assign(self) -> bool:
        """Follow every partition from its end; False while a topic does not exist yet (no worker has run)."""
        from kafka import TopicPartition

        assigned = []
        for topic in self._topics:
            partitions = self._consumer.partitions_for_topic(topic)
            if not partitions:
                return False
            assigned += [TopicPartition(topic, p) for p in sorted(partitions)]
        self._consumer.assign(assigned)
        self._consumer.seek_to_end(*[tp for tp in assigned if tp.topic != self._control_topic])
        self._consumer.seek_to_beginning(*[tp for tp in assigned if tp.topic == self._control_topic])
        log.info("api.change_feed.following", topics=list(self._topics), partitions=len(assigned))
        return True

    @property
    def following(self) -> bool:
        """Whether it has found the topics and follows them (changes from then on are applied)."""
        return self._assigned

    def start(self) -> ChangeFeedListener:
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        self._thread.join(timeout_s)
        self._hot.feed_followed(False)
        self._consumer.close()

    def apply(self, topic: str, value: bytes) -> None:
        try:
            if topic == self._events_topic:
                change = EventChange.model_validate_json(value)
                if change.op == ChangeOp.FORGET or change.event_id is None:
                    self._hot.invalidate(change.tenant, change.conversation_id)
                else:
                    self._hot.invalidate_event(change.tenant, change.event_id)
            else:
                relation = RelationChange.model_validate_json(value).relation
                for event_id in (relation.source, relation.target):
                    self._hot.invalidate_event(relation.tenant, event_id)
        except ValidationError as error:
            log.warning("api.change_feed.skipped", topic=topic, reason=str(error).splitlines()[0])
            return
        self.applied += 1

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if not self._assigned:
                    self._assigned = self._assign()
                    if not self._assigned:
                        self._stop.wait(1.0)
                        continue
                batches = self._consumer.poll(timeout_ms=self._poll_ms)
            except Exception as error:  # noqa: BLE001 - a broker hiccup must not end the thread; the age limit covers
                self._hot.feed_followed(False)
                log.warning("api.change_feed.poll_failed", error=str(error))
                self._stop.wait(1.0)
                continue
            for partition, records in batches.items():
                for record in records:
                    if partition.topic == self._control_topic and self._runtime is not None:
                        follow_setting(self._runtime, record)
                    elif record.value is not None:
                        self.apply(partition.topic, record.value)
            # After applying: an entry loaded from now on has seen every change the feed delivered so far.
            self._hot.feed_followed(True)
