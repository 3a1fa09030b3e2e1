"""The worker's answer to one control command, read back from the control topic: ``ForgetDone`` once it executed
the command (its markers are in every turns partition), ``CommandRefused`` when it refused it. ``compassmem
forget``, ``redact`` and ``config set`` report it; a deletion through ``Memory`` waits for it before it answers
(``library/forget_gate.py``).
"""

from __future__ import annotations

import time

from pydantic import ValidationError

from compassmem.core.contracts.stream_records import CONTROL_HEADER, CommandRefused, ControlKind, ForgetDone

_ANSWERS: dict[bytes, type[ForgetDone] | type[CommandRefused]] = {
    ControlKind.FORGET_DONE.value.encode(): ForgetDone,
    ControlKind.COMMAND_REFUSED.value.encode(): CommandRefused,
}


def answer_of(headers: object, value: bytes | None) -> ForgetDone | CommandRefused | None:
    """The worker's answer a control-topic record holds (by its ``compassmem-control`` header), or None."""
    kind = _ANSWERS.get(dict(headers or []).get(CONTROL_HEADER))  # type: ignore[call-overload]
    if kind is None:
        return None
    try:
        return kind.model_validate_json(value or b"")
    except ValidationError:
        return None


def command_answer(bootstrap: str, topic: str, partition: int, offset: int,
                   timeout_s: float) -> ForgetDone | CommandRefused | None:
    """The worker's answer to the command at ``partition``/``offset`` of the control topic, read from there on; None
    when none came within ``timeout_s`` (no worker runs, or it is still catching up)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap.split(","), enable_auto_commit=False, group_id=None)
    try:
        where = TopicPartition(topic, partition)
        consumer.assign([where])
        consumer.seek(where, offset + 1)
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            for records in consumer.poll(timeout_ms=int(min(left, 0.5) * 1000)).values():
                for record in records:
                    answer = answer_of(record.headers, record.value)
                    if answer is not None and (answer.source_partition, answer.source_offset) == (partition, offset):
                        return answer
    finally:
        consumer.close()
    return None
