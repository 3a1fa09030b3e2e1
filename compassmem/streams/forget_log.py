"""Which forget commands of the control topic were already executed: the ``ForgetDone`` records on that topic.

Read once when the worker's control agent starts, with a consumer of its own (no group), so the answer does not
depend on the worker's app id or on its committed offsets. The control topic holds only forget commands and
their ``ForgetDone`` records, so reading it whole stays cheap.
"""

from __future__ import annotations

import time

import structlog
from pydantic import ValidationError

from compassmem.streams.messages import CONTROL_HEADER, ControlKind, ForgetDone

log = structlog.get_logger(__name__)

_DONE = ControlKind.FORGET_DONE.value.encode()


def executed_forgets(bootstrap: str, topic: str, idle_s: float = 0.5, timeout_s: float = 60.0) -> set[tuple[int, int]]:
    """(partition, offset) of every control-topic command that has a ``ForgetDone`` record."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap.split(","), enable_auto_commit=False,
                             auto_offset_reset="earliest", group_id=None)
    done: set[tuple[int, int]] = set()
    try:
        partitions = consumer.partitions_for_topic(topic) or set()
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        if not tps:
            return done
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        deadline = time.monotonic() + timeout_s
        # Until every partition reached its end offset and nothing more arrives for idle_s (some brokers report
        # the end offset of the last batch, not of the last record).
        while time.monotonic() < deadline:
            polled = consumer.poll(timeout_ms=int(idle_s * 1000))
            for records in polled.values():
                for record in records:
                    if dict(record.headers or []).get(CONTROL_HEADER) != _DONE:
                        continue
                    try:
                        marker = ForgetDone.model_validate_json(record.value or b"")
                    except ValidationError:
                        continue
                    done.add((marker.source_partition, marker.source_offset))
            if not polled and all(consumer.position(tp) >= (ends.get(tp) or 0) for tp in tps):
                break
    finally:
        consumer.close()
    log.info("stream.executed_forgets_read", topic=topic, count=len(done))
    return done
