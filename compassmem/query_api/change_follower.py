"""Follows Kafka topics from their end on a daemon thread: how an API process reads the worker's change feeds, both
for its hot tier (``change_listener.py``) and for the explorer's live view (``explorer/live.py``).

Every partition of every topic is assigned, with no consumer group, so every API process sees every record, and
nothing is committed: a follower started again starts again from the end. It waits for the topics to exist (the
worker creates them with the partition counts it checks, so never auto-created from here). The end offsets are
resolved as soon as the partitions are assigned (``seek_to_end`` alone is lazy): a record produced after
``following`` is set is always delivered, which the live view's "ready" promises. A failed poll is logged and tried
again a second later; it never ends the thread. Topics given in ``replayed`` are read from their start instead, each
record handed whole to its reader (the control topic, whose runtime settings an API process applies in log order).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import structlog
from kafka import KafkaConsumer, TopicPartition

log = structlog.get_logger(__name__)

_RETRY_S = 1.0


class ChangeFollower:
    """Hands every record of ``topics`` produced after it started following to ``deliver(topic, value)``, in order
    per partition, on its own thread. ``polled(True)`` is told after each poll's records were delivered,
    ``polled(False)`` after a poll failed."""

    def __init__(self, bootstrap: str, topics: Sequence[str], deliver: Callable[[str, bytes], None], *,
                 client_id: str, poll_ms: int = 200, polled: Callable[[bool], None] | None = None,
                 replayed: Mapping[str, Callable[[Any], None]] | None = None) -> None:
        self._bootstrap = bootstrap
        self._topics = tuple(topics)
        self._replayed = dict(replayed or {})
        self._deliver = deliver
        self._client_id = client_id
        self._poll_ms = poll_ms
        self._polled = polled
        self._stop = threading.Event()
        # Set once the partitions are assigned and their end offsets resolved: records from then on are delivered.
        self.following = threading.Event()
        self._thread = threading.Thread(target=self._run, name=client_id, daemon=True)

    def start(self) -> ChangeFollower:
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def _run(self) -> None:
        consumer: KafkaConsumer | None = None
        try:
            while not self._stop.is_set():
                try:
                    if consumer is None:
                        consumer = KafkaConsumer(bootstrap_servers=self._bootstrap.split(","), group_id=None,
                                                 enable_auto_commit=False, allow_auto_create_topics=False,
                                                 client_id=self._client_id)
                    if not self.following.is_set():
                        if not self._assign(consumer):
                            self._stop.wait(_RETRY_S)
                        continue
                    batches = consumer.poll(timeout_ms=self._poll_ms)
                except Exception as error:  # noqa: BLE001 - a broker hiccup must not end the thread
                    log.warning("change_follower.poll_failed", client_id=self._client_id, error=str(error))
                    if self._polled is not None:
                        self._polled(False)
                    self._stop.wait(_RETRY_S)
                    continue
                for partition, records in batches.items():
                    reader = self._replayed.get(partition.topic)
                    for record in records:
                        if reader is not None:
                            reader(record)
                        elif record.value is not None:
                            self._deliver(partition.topic, record.value)
                if self._polled is not None:
                    self._polled(True)
        finally:
            if consumer is not None:
                consumer.close()

    def _assign(self, consumer: KafkaConsumer) -> bool:
        """Follow every partition from its end (a replayed topic's from its start); False while a topic does not exist
        yet (no worker has run)."""
        assigned = []
        for topic in (*self._topics, *self._replayed):
            partitions = consumer.partitions_for_topic(topic)
            if not partitions:
                return False
            assigned += [TopicPartition(topic, p) for p in sorted(partitions)]
        consumer.assign(assigned)
        # Each seek only with partitions to move: kafka-python seeks every assigned partition when given none.
        followed = [partition for partition in assigned if partition.topic not in self._replayed]
        replayed = [partition for partition in assigned if partition.topic in self._replayed]
        if followed:
            consumer.seek_to_end(*followed)
        if replayed:
            consumer.seek_to_beginning(*replayed)
        for partition in assigned:
            consumer.position(partition)
        self.following.set()
        log.info("change_follower.following", client_id=self._client_id,
                 topics=[*self._topics, *self._replayed],
                 partitions=len(assigned))
        return True
