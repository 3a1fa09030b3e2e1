"""``ChangeFollower`` (what the hot tier's listener and the explorer's live view read the change feeds with) against
the session's real dev broker: it waits for its topics, starts at their end, delivers every record produced after it
follows, and a follower started again starts again from the end (no group, nothing committed)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic

from compassmem.query_api.change_follower import ChangeFollower


class Received:
    """What a follower delivered, and the outcome of each poll, from its thread."""

    def __init__(self) -> None:
        self.records: list[tuple[str, bytes]] = []
        self.polls: list[bool] = []
        self._lock = threading.Lock()

    def deliver(self, topic: str, value: bytes) -> None:
        with self._lock:
            self.records.append((topic, value))

    def polled(self, ok: bool) -> None:
        with self._lock:
            self.polls.append(ok)

    def values(self) -> list[bytes]:
        with self._lock:
            return [value for _, value in self.records]


def _wait(condition: Callable[[], bool], what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.fixture
def topics(stream_broker) -> tuple[str, str]:  # noqa: ANN001 - DevBroker
    name = uuid.uuid4().hex[:8]
    return f"follow-a-{name}", f"follow-b-{name}"


@pytest.fixture
def producer(stream_broker) -> Iterator[KafkaProducer]:  # noqa: ANN001 - DevBroker
    made = KafkaProducer(bootstrap_servers=stream_broker.bootstrap)
    yield made
    made.close()


def _create(bootstrap: str, *names: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(name, num_partitions=2, replication_factor=1) for name in names])
    finally:
        admin.close()


def _send(producer: KafkaProducer, topic: str, *values: bytes) -> None:
    for index, value in enumerate(values):
        producer.send(topic, value, partition=index % 2)
    producer.flush()


def test_it_waits_for_its_topics_then_delivers_every_record_produced_after_it_follows(
        stream_broker, topics: tuple[str, str], producer: KafkaProducer) -> None:  # noqa: ANN001
    first, second = topics
    received = Received()
    follower = ChangeFollower(stream_broker.bootstrap, topics, received.deliver, client_id="test-follower",
                              poll_ms=50, polled=received.polled).start()
    try:
        time.sleep(1.5)
        assert not follower.following.is_set(), "it must wait while its topics do not exist"
        _create(stream_broker.bootstrap, first, second)
        assert follower.following.wait(20), "it never found its topics"
        # The moment it follows, its positions are resolved: everything produced from now on arrives.
        _send(producer, first, b"a-1", b"a-2", b"a-3")
        _send(producer, second, b"b-1")
        _wait(lambda: len(received.values()) >= 4, "four records")
        assert sorted(received.values()) == [b"a-1", b"a-2", b"a-3", b"b-1"]
        assert {topic for topic, _ in received.records} == {first, second}
        assert received.polls and all(received.polls)
    finally:
        follower.stop()


def test_it_starts_at_the_end_and_started_again_starts_again_from_the_end(
        stream_broker, topics: tuple[str, str], producer: KafkaProducer) -> None:  # noqa: ANN001
    _create(stream_broker.bootstrap, *topics)
    _send(producer, topics[0], b"old-1", b"old-2")
    first = Received()
    follower = ChangeFollower(stream_broker.bootstrap, topics, first.deliver, client_id="test-follower",
                              poll_ms=50).start()
    try:
        assert follower.following.wait(20)
        _send(producer, topics[0], b"one", b"two")
        _wait(lambda: len(first.values()) >= 2, "the first follower's records")
    finally:
        follower.stop()
    _send(producer, topics[0], b"while-stopped")

    again = Received()
    restarted = ChangeFollower(stream_broker.bootstrap, topics, again.deliver, client_id="test-follower",
                               poll_ms=50).start()
    try:
        assert restarted.following.wait(20)
        _send(producer, topics[1], b"three")
        _wait(lambda: again.values() != [], "the restarted follower's record")
        time.sleep(0.5)  # room for anything it should not get
        assert again.values() == [b"three"]
    finally:
        restarted.stop()
    assert sorted(first.values()) == [b"one", b"two"]
