"""Where the API sends what it accepts: turns to the turns topic, forget commands to the control topic.

The API depends only on the two protocols, so ``compassmem dev`` can hand in its own producers and
``compassmem api`` the Kafka ones below. Both key their records by ``tenant/conversation_id`` (DESIGN.md
section 2: one conversation stays in one partition, in order) and return only once the broker has
acknowledged, so a 202 means the turns are in the log.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Literal, Protocol, runtime_checkable

import structlog
from kafka import KafkaProducer
from kafka.errors import KafkaError
from pydantic import BaseModel, Field

from compassmem.models import TENANT_PATTERN, Turn, partition_key

log = structlog.get_logger(__name__)

_SEND_TIMEOUT_S = 10.0


class PublishError(RuntimeError):
    """The broker did not acknowledge; nothing can be assumed about the records of that call."""


class ForgetCommand(BaseModel):
    """A control-topic record: forget one conversation, or a whole tenant when conversation_id is None.

    Kept in the log (not only applied to the stores) so that replaying the turns topic does not bring a
    forgotten conversation back.
    """

    command: Literal["forget"] = "forget"
    tenant: str = Field(pattern=TENANT_PATTERN)
    conversation_id: str | None = None
    requested_at: datetime = Field(default_factory=lambda: datetime.now(UTC))

    @property
    def key(self) -> str:
        return partition_key(self.tenant, self.conversation_id) if self.conversation_id else self.tenant


@runtime_checkable
class TurnPublisher(Protocol):
    def publish_turns(self, turns: Sequence[Turn]) -> None:
        """Append turns to the turns topic, in the order given; raise PublishError when not acknowledged."""
        ...


@runtime_checkable
class ControlPublisher(Protocol):
    def publish_forget(self, command: ForgetCommand) -> None:
        """Append a forget command to the control topic; raise PublishError when not acknowledged."""
        ...


class _KafkaTopicWriter:
    """kafka-python producer for one topic: string keys, JSON values, acks from all in-sync replicas."""

    def __init__(self, bootstrap: str, topic: str, client_id: str) -> None:
        self.topic = topic
        # One request in flight, so a retried batch cannot overtake the next one and reorder a conversation;
        # a retry may duplicate a record, which the idempotent upserts downstream absorb.
        self._producer = KafkaProducer(
            bootstrap_servers=bootstrap.split(","),
            client_id=client_id,
            acks="all",
            max_in_flight_requests_per_connection=1,
            retries=3,
            key_serializer=str.encode,
            value_serializer=str.encode,
        )

    def _send(self, records: Sequence[tuple[str, str]]) -> None:
        try:
            futures = [self._producer.send(self.topic, key=key, value=value) for key, value in records]
            self._producer.flush(timeout=_SEND_TIMEOUT_S)
            for future in futures:
                future.get(timeout=_SEND_TIMEOUT_S)
        except KafkaError as error:
            log.warning("publisher.failed", topic=self.topic, records=len(records), error=repr(error))
            raise PublishError(f"topic {self.topic!r}: {error}") from error

    def close(self) -> None:
        self._producer.close(timeout=_SEND_TIMEOUT_S)


class KafkaTurnPublisher(_KafkaTopicWriter):
    """Turns as their message-schema JSON (the one the worker, the importer and ``POST /v1/turns`` share)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(bootstrap, topic, client_id="compassmem-api-turns")

    def publish_turns(self, turns: Sequence[Turn]) -> None:
        self._send([(turn.key, turn.model_dump_json()) for turn in turns])


class KafkaControlPublisher(_KafkaTopicWriter):
    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(bootstrap, topic, client_id="compassmem-api-control")

    def publish_forget(self, command: ForgetCommand) -> None:
        self._send([(command.key, command.model_dump_json())])
