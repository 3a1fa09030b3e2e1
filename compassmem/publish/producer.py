"""Writing to the worker's input topics with kafka-python: turns (optionally paced) and forget commands.

The message schema of the turns topic is ``compassmem.core.models.Turn`` as JSON (the JSONL import format, one
object per record), keyed by ``tenant/conversation_id`` as UTF-8: the key puts a conversation in one partition,
which is what keeps it in order. Any Kafka client can produce turns this way; the worker sends records that
break the schema to the dead-letter topic.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from types import TracebackType

import structlog
from kafka import KafkaProducer
from kafka.errors import KafkaError
from pydantic import BaseModel

from compassmem.core.contracts.commands import Command
from compassmem.core.models import Turn

log = structlog.get_logger(__name__)

_SEND_TIMEOUT_S = 30.0


class ProduceError(RuntimeError):
    """The broker did not acknowledge what was sent."""


class ProduceSummary(BaseModel):
    turns: int
    conversations: int
    seconds: float
    turns_per_second: float


def encode_turn(turn: Turn) -> tuple[bytes, bytes]:
    """(key, value) of a turn as the worker expects them."""
    return turn.key.encode("utf-8"), turn.model_dump_json().encode("utf-8")


class TurnProducer:
    def __init__(self, bootstrap: str, turns_topic: str, control_topic: str | None = None,
                 client_id: str = "compassmem-produce") -> None:
        self.turns_topic = turns_topic
        self.control_topic = control_topic
        try:
            # One request in flight: a retried batch cannot overtake the next one and reorder a conversation.
            # A retry may duplicate a record; the worker's idempotent writes absorb that.
            self._producer = KafkaProducer(
                bootstrap_servers=bootstrap.split(","), client_id=client_id, acks="all",
                max_in_flight_requests_per_connection=1, retries=5, linger_ms=2,
            )
        except KafkaError as error:
            raise ProduceError(f"cannot reach Kafka at {bootstrap}: {error}") from error

    def produce(self, turns: Iterable[Turn], rate: float | None = None,
                on_sent: Callable[[Turn, float], None] | None = None,
                progress: Callable[[int], None] | None = None) -> ProduceSummary:
        """Send turns in order. ``rate``: turns per second (paced like live traffic); None: as fast as possible.

        ``on_sent(turn, wall_time)`` is called as each turn is handed to the client (freshness measurements).
        """
        started = time.perf_counter()
        interval = 1.0 / rate if rate else 0.0
        futures = []
        conversations: set[str] = set()
        count = 0
        for count, turn in enumerate(turns, start=1):
            if interval:
                # Against the schedule, not the previous send: pacing does not drift with send latency.
                delay = started + (count - 1) * interval - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
            key, value = encode_turn(turn)
            futures.append(self._producer.send(self.turns_topic, key=key, value=value))
            if on_sent is not None:
                on_sent(turn, time.time())
            conversations.add(turn.key)
            if interval:
                self._producer.flush(timeout=_SEND_TIMEOUT_S)  # live traffic: each turn leaves now
            if progress is not None:
                progress(1)
            if len(futures) >= 1000:
                self._settle(futures)
        self._settle(futures)
        seconds = time.perf_counter() - started
        log.info("produce.done", topic=self.turns_topic, turns=count, seconds=round(seconds, 3))
        return ProduceSummary(turns=count, conversations=len(conversations), seconds=round(seconds, 3),
                              turns_per_second=count / seconds if seconds else 0.0)

    def send_command(self, command: Command) -> tuple[int, int]:
        """Append a control command (forget, redact, set) to the control topic, keyed like what it covers; its
        partition and offset there (what the worker's answer names, ``forget_log.command_answer``)."""
        if self.control_topic is None:
            raise ValueError("this producer was made without a control topic")
        future = self._producer.send(self.control_topic, key=command.key.encode("utf-8"),
                                     value=command.model_dump_json().encode("utf-8"))
        self._settle([future])
        metadata = future.get(timeout=_SEND_TIMEOUT_S)
        log.info("produce.command", command=command.command, key=command.key, partition=metadata.partition,
                 offset=metadata.offset)
        return metadata.partition, metadata.offset

    def _settle(self, futures: list) -> None:  # noqa: ANN001 - kafka-python FutureRecordMetadata
        try:
            self._producer.flush(timeout=_SEND_TIMEOUT_S)
            for future in futures:
                future.get(timeout=_SEND_TIMEOUT_S)
        except KafkaError as error:
            raise ProduceError(f"the broker did not acknowledge: {error}") from error
        futures.clear()

    def close(self) -> None:
        self._producer.close(timeout=_SEND_TIMEOUT_S)

    def __enter__(self) -> TurnProducer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
