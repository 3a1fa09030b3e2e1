"""The commands of the control topic: forget a conversation or a tenant, redact one turn, change a runtime setting.

The query API's DELETE and ``PUT /v1/config`` endpoints, ``compassmem forget`` / ``redact`` / ``config set`` and any
Kafka producer write them;
the streaming worker (``compassmem/streams/app.py``) executes them and copies them into the turns log as markers
(``compassmem/core/contracts/stream_records.py``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator
from pydantic.types import AllowInfNan

from compassmem.core.models import TENANT_PATTERN, check_id, partition_key, utc_now


class ForgetCommand(BaseModel):
    """Forget one conversation, or a whole tenant when ``conversation_id`` is None.

    ``{"command": "forget", "tenant": ..., "conversation_id": ... or null, "requested_at": ISO 8601}``; key it by
    ``tenant/conversation_id`` (or the tenant). A forget removes what the turns topic held for the conversation up
    to the moment the worker applies it, from both stores and from the worker's tables; turns produced after it
    start a new memory.
    """

    model_config = ConfigDict(extra="forbid")

    command: Literal["forget"] = "forget"
    tenant: str = Field(pattern=TENANT_PATTERN)
    conversation_id: str | None = None
    requested_at: datetime = Field(default_factory=utc_now)

    @field_validator("conversation_id")
    @classmethod
    def _ids(cls, value: str | None) -> str | None:
        return value if value is None else check_id(value)

    @property
    def key(self) -> str:
        return partition_key(self.tenant, self.conversation_id) if self.conversation_id else self.tenant

    def covers(self, tenant: str, conversation_id: str) -> bool:
        return tenant == self.tenant and self.conversation_id in (None, conversation_id)


IfAbsent = Literal["refuse", "block", "checked"]


class RedactCommand(BaseModel):
    """Redact one turn: its point leaves the vector store and its event is rebuilt from the other turns.

    ``{"command": "redact", "tenant": ..., "conversation_id": ..., "turn_id": ..., "if_absent": "refuse",
    "requested_at": ...}``, keyed like the conversation's turns. Its marker in the turns log takes the turn out of
    the worker's state where it took effect, and the conversation's table record keeps the turn id, so a turn of
    that id is dropped (with a dead letter) if it comes again. ``if_absent`` says what the worker does when the
    stores do not hold the turn: a redaction must not block a turn id by mistake.
    """

    model_config = ConfigDict(extra="forbid")

    command: Literal["redact"] = "redact"
    tenant: str = Field(pattern=TENANT_PATTERN)
    conversation_id: str
    turn_id: str
    if_absent: IfAbsent = Field(
        default="refuse",
        description="When no store holds the turn: 'refuse' (the default, as the API's DELETE answers 404): nothing "
                    "is redacted, the command goes to the dead-letter topic (reason unknown_turn); 'block' "
                    "(`compassmem redact --unseen`): the turn id is blocked on purpose, so a turn of that id "
                    "arriving later is dropped, refused only for a conversation with no memory at all (reason "
                    "unknown_conversation); 'checked': the sender saw the turn in the stores and deletes it itself "
                    "(the API's DELETE), so its absence here is no reason to refuse.")
    requested_at: datetime = Field(default_factory=utc_now)

    @field_validator("conversation_id", "turn_id")
    @classmethod
    def _ids(cls, value: str) -> str:
        return check_id(value)

    @property
    def key(self) -> str:
        return partition_key(self.tenant, self.conversation_id)


# A runtime setting's value: JSON true/false, a whole number or a finite number (bool first: JSON true is no 1).
# Finite: JSON has no infinity or NaN, so such a value would be written as null, and every reader would drop it.
SettingValue = Annotated[bool | int | float, AllowInfNan(False)]
SETTING_KEY_PATTERN = r"^[a-z_]+(\.[a-z_]+)+$"


class SettingCommand(BaseModel):
    """Change a runtime setting (``compassmem/library/runtime_settings.py`` lists the keys and their rules).

    ``{"command": "set", "setting": "segmentation.shift_threshold", "value": 0.5, "requested_at": ...}``. The worker
    copies it into every turns partition as a marker and each partition applies it there; API processes apply
    read-path keys as they read it. Its writers check the key and value first; the worker refuses a bad one.
    """

    model_config = ConfigDict(extra="forbid")

    command: Literal["set"] = "set"
    setting: str = Field(pattern=SETTING_KEY_PATTERN, max_length=100)
    value: SettingValue
    requested_at: datetime = Field(default_factory=utc_now)

    @property
    def key(self) -> str:
        """The Kafka key: no tenant/conversation, so no worker takes it for a conversation's record."""
        return f"setting:{self.setting}"


Command = ForgetCommand | RedactCommand | SettingCommand
ControlCommand = Annotated[Command, Field(discriminator="command")]
CONTROL_COMMAND: TypeAdapter[Command] = TypeAdapter(ControlCommand)
