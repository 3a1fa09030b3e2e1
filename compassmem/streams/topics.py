"""The worker's topics, created up front with explicit partition counts.

A topic that a client auto-creates gets the broker's default partition count, and Faust stops when a table's
changelog and its source topic disagree; partitions cannot be added later on every broker either (Tansu has no
CreatePartitions). So every process that touches the topics (broker, produce, worker, dev) calls
``ensure_topics`` first: it creates what is missing and refuses to go on when an existing topic has another
partition count than the settings say.
"""

from __future__ import annotations

from dataclasses import dataclass

import structlog
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import KafkaError, KafkaTimeoutError, TopicAlreadyExistsError

from compassmem.core.config import Settings

log = structlog.get_logger(__name__)

# Faust names a table's changelog "<app id>-<table name>-changelog".
MEMORY_TABLE = "conversation-memory"
TOMBSTONE_TABLE = "forget-tombstones"
SETTINGS_TABLE = "partition-settings"


class TopicSetupError(RuntimeError):
    """The topics cannot be used as configured; the message says which setting to change."""


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    compacted: bool = False
    purpose: str = ""


def changelog_topic(settings: Settings, table: str) -> str:
    return f"{settings.kafka_app_id}-{table}-changelog"


def topic_specs(settings: Settings) -> list[TopicSpec]:
    n = settings.kafka_partitions
    return [
        TopicSpec(settings.turns_topic, n, purpose="turns in, keyed tenant/conversation_id (+ the worker's markers)"),
        # One partition: forget commands are rare, and one ordered log of them is what an audit wants.
        TopicSpec(settings.control_topic, 1, purpose="forget, redaction and setting commands"),
        TopicSpec(settings.events_topic, n, purpose="change feed: events written"),
        TopicSpec(settings.relations_topic, n, purpose="change feed: relations written"),
        TopicSpec(settings.clusters_topic, n, purpose="change feed: clusters written"),
        TopicSpec(settings.dlq_topic, n, purpose="dead letters"),
        # Table changelogs must match the turns topic partition for partition: the state of a conversation is
        # written to the changelog partition of the turns partition it came from.
        TopicSpec(changelog_topic(settings, MEMORY_TABLE), n, compacted=True, purpose="conversation state"),
        TopicSpec(changelog_topic(settings, TOMBSTONE_TABLE), n, compacted=True, purpose="forget tombstones"),
        TopicSpec(changelog_topic(settings, SETTINGS_TABLE), n, compacted=True,
                  purpose="runtime settings in force per turns partition"),
    ]


def admin_client(bootstrap: str, timeout: float = 15.0) -> KafkaAdminClient:
    """An admin client; waits up to ``timeout`` for the broker (it may be starting)."""
    try:
        return KafkaAdminClient(bootstrap_servers=bootstrap.split(","), client_id="compassmem-admin",
                                request_timeout_ms=10_000, bootstrap_timeout_ms=int(timeout * 1000))
    except KafkaTimeoutError as error:
        raise TopicSetupError(
            f"no Kafka broker answered at {bootstrap} within {timeout:g} s (COMPASSMEM_KAFKA_BOOTSTRAP); start one "
            "with `compassmem broker`, or use `compassmem dev`"
        ) from error


def ensure_topics(bootstrap: str, specs: list[TopicSpec], timeout: float = 15.0) -> None:
    admin = admin_client(bootstrap, timeout)
    try:
        existing = set(admin.list_topics())
        missing = [s for s in specs if s.name not in existing]
        if missing:
            new = [NewTopic(s.name, s.partitions, 1, topic_configs={"cleanup.policy": "compact"} if s.compacted else {})
                   for s in missing]
            try:
                admin.create_topics(new)
            except TopicAlreadyExistsError:
                pass  # another process created them meanwhile; the check below still applies
            log.info("topics.created", topics={s.name: s.partitions for s in missing})
        _check_partitions(admin, specs)
    except KafkaError as error:
        raise TopicSetupError(f"cannot set up topics on {bootstrap}: {error}") from error
    finally:
        admin.close()


def _check_partitions(admin: KafkaAdminClient, specs: list[TopicSpec]) -> None:
    wanted = {s.name: s.partitions for s in specs}
    described = admin.describe_topics(list(wanted))
    for topic in described:
        name, count = topic.get("name", topic.get("topic")), len(topic["partitions"])
        if count != wanted[name]:
            raise TopicSetupError(
                f"topic {name!r} has {count} partitions but the settings ask for {wanted[name]} "
                "(COMPASSMEM_KAFKA_PARTITIONS, or 1 for the control topic); partitions cannot be changed in place: "
                "use the existing count, or new topic names"
            )


def first_offset_at_or_after(bootstrap: str, topic: str, partition: int, offset: int,
                             timeout_s: float = 5.0) -> int | None:
    """The offset of the first record that exists at or after ``offset`` in one partition, read by a consumer of
    its own (no group); None if none arrived within ``timeout_s``. The worker's gap check asks it whether missing
    offsets exist on the broker (``streams/faust_fixes/positions.py``)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap.split(","), enable_auto_commit=False,
                             auto_offset_reset="earliest", group_id=None)
    try:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        start = consumer.beginning_offsets([tp]).get(tp, 0) or 0
        consumer.seek(tp, max(offset, start))
        polled = consumer.poll(timeout_ms=int(timeout_s * 1000), max_records=1)
        records = polled.get(tp, [])
        return records[0].offset if records else None
    finally:
        consumer.close()
