"""Where the API and ``Memory`` send what they record: turns to the turns topic, forget and redaction commands to
the control topic.

The API and ``Memory`` depend only on the two protocols, so ``compassmem dev`` and ``compassmem api`` hand in the
Kafka publisher below (``Memory`` makes one itself when ``COMPASSMEM_KAFKA_BOOTSTRAP`` is set) and tests may hand in
anything that keeps the contract. Records are keyed by ``tenant/conversation_id`` (one conversation stays in one
partition, in order) and a call returns only once the broker has acknowledged, so a 202 means the turns are in the
log.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from kafka.errors import KafkaError, MessageSizeTooLargeError

# One schema and one producer for the worker's input topics, shared with `compassmem produce` and `forget`.
from compassmem.core.contracts.commands import (  # noqa: F401 - the commands' schema, for publish_command's callers
    Command,
    ForgetCommand,
    RedactCommand,
    SettingCommand,
)
from compassmem.core.models import Turn
from compassmem.publish.producer import ProduceError, TurnProducer


class PublishError(RuntimeError):
    """The broker did not acknowledge; some records of that call may have been written (retrying is safe:
    every write downstream is an idempotent upsert)."""


class RecordTooLargeError(PublishError):
    """The producer or the broker refused a record as too large: retrying cannot help (the API answers 413)."""


@runtime_checkable
class TurnPublisher(Protocol):
    def publish_turns(self, turns: Sequence[Turn]) -> None:
        """Append turns to the turns topic, in the order given; raise PublishError when not acknowledged."""
        ...


@runtime_checkable
class ControlPublisher(Protocol):
    def publish_command(self, command: Command) -> tuple[int, int]:
        """Append a control command to the control topic; its (partition, offset) there; raise PublishError when
        not acknowledged."""
        ...


class KafkaTurnPublisher:
    """Both protocols over one kafka-python producer (``TurnProducer``); control commands need ``control_topic``.
    Raises PublishError at construction when the brokers cannot be reached."""

    def __init__(self, bootstrap: str, topic: str, control_topic: str | None = None,
                 client_id: str = "compassmem-api") -> None:
        self.control_topic = control_topic
        try:
            self._producer = TurnProducer(bootstrap, topic, control_topic, client_id=client_id)
        except ProduceError as error:
            raise PublishError(str(error)) from error

    def publish_turns(self, turns: Sequence[Turn]) -> None:
        try:
            self._producer.produce(turns)
        except MessageSizeTooLargeError as error:
            # Raised by the client before sending: the record exceeds its max_request_size (1 MB by default).
            raise RecordTooLargeError(f"a turn record is larger than the Kafka producer accepts: {error}") from error
        except ProduceError as error:
            if isinstance(error.__cause__, MessageSizeTooLargeError):
                raise RecordTooLargeError(f"the broker refused a turn record as too large: {error}") from error
            raise PublishError(str(error)) from error
        except KafkaError as error:
            raise PublishError(f"the broker did not acknowledge: {error}") from error

    def publish_command(self, command: Command) -> tuple[int, int]:
        if self.control_topic is None:
            raise PublishError("this publisher has no control topic")
        try:
            return self._producer.send_command(command)
        except ProduceError as error:
            raise PublishError(str(error)) from error
        except KafkaError as error:  # e.g. no metadata for the topic within the producer's max_block_ms
            raise PublishError(f"the broker did not acknowledge: {error}") from error

    def close(self) -> None:
        self._producer.close()
