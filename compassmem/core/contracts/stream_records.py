"""The worker's own records on the streaming topics (a turn is ``models.Turn``; the control topic's commands and the
dead-letter record, which code outside the worker writes or reads too, are in ``compassmem/core/contracts/``).

- turns topic, besides turns: ``ForgetMarker``, ``RedactMarker``, ``SettingMarker`` and ``IdleCloseMarker``,
  written by the worker itself and told apart by the ``compassmem-control`` header. They sit in the log at the
  position where they took effect, so a replay of the turns topic reproduces forgets, redactions, setting changes
  and idle closes exactly ("forgets are tombstones in the log").
- control topic, besides the commands: ``ForgetDone`` and ``CommandRefused``, the worker's answers.
- change feeds (events / relations / clusters topics): ``EventChange``, ``RelationChange``, ``ClusterChange``,
  published after the stores were written, for consumers that keep caches current (e.g. a navigation view).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from compassmem.core.contracts.commands import ForgetCommand, RedactCommand, SettingCommand, SettingValue
from compassmem.core.models import TENANT_PATTERN, Cluster, Event, Relation, partition_key

CONTROL_HEADER = "compassmem-control"


class ControlKind(StrEnum):
    FORGET = "forget"
    REDACT = "redact"
    SETTING = "setting"
    IDLE_CLOSE = "idle-close"
    # On the control topic, after a command's markers are in the turns log (see ``ForgetDone``).
    FORGET_DONE = "forget-done"
    # On the control topic, for a command the worker refused (see ``CommandRefused``).
    COMMAND_REFUSED = "command-refused"


class ForgetMarker(BaseModel):
    """A forget, copied by the worker into every partition of the turns topic (the control agent of ``app.py``)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["forget"] = "forget"
    forget: ForgetCommand
    # Where the command came from, so a duplicate broadcast (a redelivered command) is recognisable in the log.
    source_partition: int
    source_offset: int


class RedactMarker(BaseModel):
    """A redaction, copied by the worker into every partition of the turns topic (as a ``ForgetMarker`` is)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["redact"] = "redact"
    redact: RedactCommand
    source_partition: int
    source_offset: int


class SettingMarker(BaseModel):
    """A runtime setting change, copied by the worker into every partition of the turns topic: each partition
    builds the turns before it with the old value and the turns after it with the new one."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["setting"] = "setting"
    setting: SettingCommand
    source_partition: int
    source_offset: int


class PartitionSettings(BaseModel):
    """The runtime settings in force in one turns partition (a worker's settings table, keyed by the partition):
    the values its setting markers set, and the offset of the last marker applied (one at or below it is a
    redelivery)."""

    model_config = ConfigDict(extra="forbid")

    offset: int = -1
    values: dict[str, SettingValue] = Field(default_factory=dict)


class ForgetDone(BaseModel):
    """Written to the control topic once a command's (a forget's, a redaction's or a setting's) markers are in
    every turns partition.

    A worker reading the control topic again (another app id, a reset consumer group) skips a command that has a
    ``ForgetDone``: its markers already sit in the turns log at the position where it took effect, and executing it
    again would delete what was built from turns produced after it.
    """

    model_config = ConfigDict(extra="forbid")

    kind: Literal["forget-done"] = "forget-done"
    source_partition: int
    source_offset: int
    # Turns partition -> offset of this command's marker there.
    markers: dict[int, int] = Field(default_factory=dict)


class CommandRefused(BaseModel):
    """Written to the control topic for a command the worker refused (a redaction of a turn no store holds): the
    sender (``compassmem redact``) reads it as the answer, and a worker reading the control topic again skips the
    command as it skips one with a ``ForgetDone``."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["command-refused"] = "command-refused"
    source_partition: int
    source_offset: int
    reason: str


class IdleCloseMarker(BaseModel):
    """Close the conversation's open segment, if nothing of it arrived after ``after_offset`` (its turns-topic
    position when the idle timer fired); otherwise the marker is stale and changes nothing."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["idle-close"] = "idle-close"
    tenant: str = Field(pattern=TENANT_PATTERN)
    conversation_id: str
    after_offset: int
    idle_s: float

    @property
    def key(self) -> str:
        return partition_key(self.tenant, self.conversation_id)


class ChangeOp(StrEnum):
    UPSERT = "upsert"
    DELETE = "delete"
    FORGET = "forget"


class EventChange(BaseModel):
    """An event written to (or deleted from) the stores. ``event`` comes without its embedding."""

    op: ChangeOp
    tenant: str
    conversation_id: str | None = None
    event_id: str | None = None
    event: Event | None = None


class RelationChange(BaseModel):
    op: Literal[ChangeOp.UPSERT] = ChangeOp.UPSERT
    relation: Relation


class ClusterChange(BaseModel):
    op: Literal[ChangeOp.UPSERT] = ChangeOp.UPSERT
    cluster: Cluster
