"""The worker's answers on the control topic: ``ForgetDone`` for a command it executed, ``CommandRefused`` for one
it refused.

``executed_forgets`` reads them all once when the worker's control agent starts, with a consumer of its own (no
group), so the answer does not depend on the worker's app id or on its committed offsets; the control topic holds
only commands and their answers, so reading it whole stays cheap. ``follow_setting`` applies a control record to
the runtime settings in force (an API process as it reads the topic, ``settings_in_force`` for ``compassmem config
show``). Waiting for the answer to one command is ``publish/command_answers.py``'s.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import structlog
from pydantic import ValidationError

from compassmem.core.config import Settings
from compassmem.core.contracts.commands import CONTROL_COMMAND, SettingCommand
from compassmem.library.runtime_settings import RuntimeSettings, SettingValueError, UnknownSettingError
from compassmem.core.contracts.stream_records import ForgetDone
from compassmem.publish.command_answers import answer_of

log = structlog.get_logger(__name__)

def follow_setting(runtime: RuntimeSettings, record: Any) -> None:  # noqa: ANN401 - a kafka-python ConsumerRecord
    """Apply a control-topic record to the runtime settings in force: a setting change, or the worker's answer to
    one (where its markers sit); anything else is not theirs. A change that breaks its key's rule (any producer may
    write here) is skipped, as the worker refuses it."""
    answer = answer_of(record.headers, record.value)
    if isinstance(answer, ForgetDone):
        runtime.marked(answer.source_partition, answer.source_offset, answer.markers)
    if answer is not None:
        return
    try:
        command = CONTROL_COMMAND.validate_json(record.value or b"")
    except ValidationError:
        return  # the worker dead-letters what is no command
    if not isinstance(command, SettingCommand):
        return
    try:
        runtime.apply(command, record.partition, record.offset)
    except (UnknownSettingError, SettingValueError) as error:
        log.warning("control.setting_skipped", offset=record.offset, reason=str(error))
        return
    log.info("control.setting_read", setting=command.setting, value=command.value, offset=record.offset)


def settings_in_force(bootstrap: str, settings: Settings) -> RuntimeSettings:
    """The runtime settings in force after every change on the control topic (``compassmem config show``)."""
    runtime = RuntimeSettings(settings)
    _read_whole(bootstrap, settings.control_topic, lambda record: follow_setting(runtime, record))
    return runtime


def executed_forgets(bootstrap: str, topic: str) -> set[tuple[int, int]]:
    """(partition, offset) of every control-topic command the worker answered (executed or refused)."""
    done: set[tuple[int, int]] = set()

    def visit(record: Any) -> None:  # noqa: ANN401 - a kafka-python ConsumerRecord
        answer = answer_of(record.headers, record.value)
        if answer is not None:
            done.add((answer.source_partition, answer.source_offset))

    _read_whole(bootstrap, topic, visit)
    log.info("stream.executed_forgets_read", topic=topic, count=len(done))
    return done


def _read_whole(bootstrap: str, topic: str, visit: Callable[[Any], None], idle_s: float = 0.5,
                timeout_s: float = 60.0) -> None:
    """Hand every record of the topic to ``visit``, in order, with a consumer of its own (no group)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap.split(","), enable_auto_commit=False,
                             auto_offset_reset="earliest", group_id=None)
    try:
        partitions = consumer.partitions_for_topic(topic) or set()
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        if not tps:
            return
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
                    visit(record)
            if not polled and all(consumer.position(tp) >= (ends.get(tp) or 0) for tp in tps):
                break
    finally:
        consumer.close()
