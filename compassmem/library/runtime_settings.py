"""Settings that change while the processes run, without a restart: their keys, rules and values in force.

A change is a ``SettingCommand`` on the control topic (``PUT /v1/config/{key}``, ``compassmem config set``). The
worker copies it into every turns partition as a marker (``compassmem/streams/app.py``), and each partition applies
it at that marker: turns before it were built with the old value, turns after it with the new one, and a replay of
the turns topic reproduces the memory exactly. Every API process reads the control topic from its start
(``compassmem/query_api/change_listener.py``) and applies the read-path keys as it reaches them.

Each key's rule is the rule of the model field it sets (``SegmentationConfig.shift_threshold``,
``RankingConfig.fitted``, ``Settings.api_hot_turns``...), so a runtime value obeys the same bounds as a configured
one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from functools import cached_property
from typing import Annotated, Any

import annotated_types
from pydantic import BaseModel, Field, TypeAdapter, ValidationError

from compassmem.core.config import Settings
from compassmem.core.contracts.commands import SettingCommand, SettingValue
from compassmem.core.errors import BadRequest
from compassmem.processors.segmentation import SegmentationConfig
from compassmem.retrieval.engine import RankingConfig


class Scope(StrEnum):
    """Which processes a key changes."""

    WORKERS = "workers"  # the write path: each turns partition applies it at its marker
    API = "api"  # the read path: every API process applies it as it reads the control topic


class Origin(StrEnum):
    """Where the value in force came from."""

    DEFAULT = "default"
    ENVIRONMENT = "environment"  # a COMPASSMEM_* variable, .env or the TOML file
    RUNTIME = "runtime"  # a SettingCommand on the control topic


class LlmSwitch(BaseModel):
    """The switch of ``llm.events``: whether the write path's LLM steps that the settings turn on
    (COMPASSMEM_LLM_BOUNDARY_CHECK, _SUMMARY, _CATEGORIES) run; false pauses them (the offline path), e.g. while the
    endpoint is overloaded. It turns on no step the settings left off."""

    events: bool = True


class UnknownSettingError(BadRequest):
    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(f"unknown setting {key!r}: the settings are {', '.join(SPECS)}")


class SettingValueError(BadRequest):
    def __init__(self, key: str, rule: str, value: object) -> None:
        self.key, self.rule = key, rule
        super().__init__(f"setting {key!r} must be {rule} (got {value!r})")


_SETTING_VALUE: TypeAdapter[SettingValue] = TypeAdapter(SettingValue)


def _rule_of(annotation: object, metadata: list[Any]) -> str:
    """The field's rule in words, e.g. 'a finite number at least 0.0 and at most 1.0'."""
    if annotation is bool:
        return "true or false"
    words = "a whole number" if annotation is int else "a finite number"
    bounds = []
    for item in metadata:
        for kind, attribute, text in ((annotated_types.Ge, "ge", "at least"), (annotated_types.Gt, "gt", "above"),
                                      (annotated_types.Le, "le", "at most"), (annotated_types.Lt, "lt", "below")):
            if isinstance(item, kind):
                bounds.append(f"{text} {getattr(item, attribute)}")
    return f"{words} {' and '.join(bounds)}" if bounds else words


@dataclass(frozen=True)
class SettingSpec:
    """One runtime key: the model field whose rule and default it takes, and the processes it changes."""

    key: str
    scope: Scope
    model: type[BaseModel]
    field: str
    description: str

    @cached_property
    def _field(self) -> Any:  # noqa: ANN401 - pydantic's FieldInfo
        return self.model.model_fields[self.field]

    @cached_property
    def adapter(self) -> TypeAdapter[Any]:
        metadata = self._field.metadata
        return TypeAdapter(Annotated[self._field.annotation, *metadata] if metadata else self._field.annotation)

    @cached_property
    def rule(self) -> str:
        return _rule_of(self._field.annotation, self._field.metadata)

    def validate(self, value: object) -> SettingValue:
        """The value as the field holds it (a CLI's text '0.5' becomes 0.5); SettingValueError naming the rule.

        The field's rule, then the control record's (a finite bool, int or float): a field may allow infinity, which
        the record could not carry."""
        if isinstance(value, bool) and self._field.annotation is not bool:
            raise SettingValueError(self.key, self.rule, value)  # pydantic would read true as 1
        try:
            checked: SettingValue = _SETTING_VALUE.validate_python(self.adapter.validate_python(value), strict=True)
        except ValidationError:
            raise SettingValueError(self.key, self.rule, value) from None
        return checked

    def start(self, settings: Settings) -> tuple[SettingValue, Origin]:
        """The value before any runtime change: the process's settings where they set it, else the default."""
        if self.model is Settings:
            value = getattr(settings, self.field)
            return value, Origin.ENVIRONMENT if self.field in settings.model_fields_set else Origin.DEFAULT
        default = self._field.get_default(call_default_factory=True)
        return default, Origin.DEFAULT


SPECS: dict[str, SettingSpec] = {spec.key: spec for spec in (
    SettingSpec("segmentation.shift_threshold", Scope.WORKERS, SegmentationConfig, "shift_threshold",
                "Cut an event before a turn when the topic-shift probability reaches this: lower cuts more often."),
    SettingSpec("segmentation.request_threshold", Scope.WORKERS, SegmentationConfig, "request_threshold",
                "Cut an event before a requester's turn when the request probability reaches this."),
    SettingSpec("llm.events", Scope.WORKERS, LlmSwitch, "events",
                "Whether the write path's LLM steps the settings turn on run (false: the offline path)."),
    SettingSpec("ranking.fitted", Scope.API, RankingConfig, "fitted",
                "Rank by the shipped fitted weights (true) or by the hand weights ranking.* alone (false)."),
    SettingSpec("ranking.turn_weight", Scope.API, RankingConfig, "turn_weight",
                "Hand weight: a turn's own score against its event's (with ranking.fitted false)."),
    SettingSpec("ranking.context_weight", Scope.API, RankingConfig, "context_weight",
                "Hand weight of the neighbouring turns of the same session (with ranking.fitted false)."),
    SettingSpec("ranking.question_penalty", Scope.API, RankingConfig, "question_penalty",
                "Hand weight: how much a turn that asks is lowered (with ranking.fitted false)."),
    SettingSpec("ranking.rerank_candidates", Scope.API, RankingConfig, "rerank_candidates",
                "How many of a query's best turns the reranker reads (COMPASSMEM_RERANKER); 0 reranks none. Its "
                "cost per query follows this number."),
    SettingSpec("ranking.rerank_budget_ms", Scope.API, RankingConfig, "rerank_budget_ms",
                "The most a query waits for the reranker, in ms (never past the query deadline); past it the query "
                "ranks without it and says reranked: 0."),
    SettingSpec("hot_tier.max_turns", Scope.API, Settings, "api_hot_turns",
                "Most turns the API's hot tier keeps (COMPASSMEM_API_HOT_TURNS); least recently used go first."),
)}


def spec_of(key: str) -> SettingSpec:
    spec = SPECS.get(key)
    if spec is None:
        raise UnknownSettingError(key)
    return spec


def setting_command(key: str, value: object) -> SettingCommand:
    """A checked command: UnknownSettingError or SettingValueError (both name the key) otherwise."""
    return SettingCommand(setting=key, value=spec_of(key).validate(value))


def overrides(model: type[BaseModel], values: Mapping[str, SettingValue]) -> dict[str, SettingValue]:
    """The fields of ``model`` that ``values`` (key -> value) set: for ``model_copy(update=...)``."""
    return {SPECS[key].field: value for key, value in values.items() if key in SPECS and SPECS[key].model is model}


class SettingRecorded(BaseModel):
    """A change written to the control topic (the answer of ``PUT /v1/config/{key}``)."""

    setting: str
    value: SettingValue
    requested_at: datetime
    control_partition: int
    control_offset: int


class SettingChange(BaseModel):
    """A runtime change: when it was asked for and where it sits on the control topic."""

    requested_at: datetime
    control_partition: int
    control_offset: int
    # Turns partition -> offset of the change's marker there (where each worker applies it), once the worker
    # answered; empty before, and for a read-path key before a worker ran.
    markers: dict[int, int] = Field(default_factory=dict)


class SettingInForce(BaseModel):
    key: str
    value: SettingValue
    origin: Origin = Field(description="default, environment (COMPASSMEM_* / .env / TOML) or runtime (a change on "
                                       "the control topic)")
    scope: Scope = Field(description="workers: applied by every turns partition at its marker; api: applied by "
                                     "every API process as it reads the control topic")
    rule: str
    description: str
    change: SettingChange | None = Field(default=None, description="The runtime change in force, for origin runtime.")


class RuntimeSettings:
    """The values in force in one process: the start values and the runtime changes it has read, in order.

    ``on_change`` is called with each key and value a change sets (the API applies its read-path keys there).
    Thread-safe: the control topic's reader writes, the endpoints read."""

    def __init__(self, settings: Settings, on_change: Callable[[str, SettingValue], None] | None = None) -> None:
        self._start = {key: spec.start(settings) for key, spec in SPECS.items()}
        self._changes: dict[str, tuple[SettingValue, SettingChange]] = {}
        self._on_change = on_change
        self._lock = threading.Lock()

    def apply(self, command: SettingCommand, partition: int, offset: int) -> None:
        """A change read from the control topic (already checked by its writer; checked again, since any producer
        may write there: UnknownSettingError or SettingValueError)."""
        value = spec_of(command.setting).validate(command.value)
        change = SettingChange(requested_at=command.requested_at, control_partition=partition, control_offset=offset)
        with self._lock:
            self._changes[command.setting] = (value, change)
        if self._on_change is not None:
            self._on_change(command.setting, value)

    def marked(self, partition: int, offset: int, markers: Mapping[int, int]) -> None:
        """The worker's answer to the command at ``partition``/``offset``: where its markers sit."""
        with self._lock:
            for _, change in self._changes.values():
                if (change.control_partition, change.control_offset) == (partition, offset):
                    change.markers = dict(markers)

    def in_force(self) -> list[SettingInForce]:
        with self._lock:
            shown = []
            for key, spec in SPECS.items():
                value, origin = self._start[key]
                change = None
                if key in self._changes:
                    value, change = self._changes[key][0], self._changes[key][1].model_copy()
                    origin = Origin.RUNTIME
                shown.append(SettingInForce(key=key, value=value, origin=origin, scope=spec.scope, rule=spec.rule,
                                            description=spec.description, change=change))
            return shown
