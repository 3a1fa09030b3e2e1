"""What a store search is given: a keyword (sparse) vector and the scope it covers.

The processors make keyword vectors, the sinks store them, the read side searches with them; a query request names
its scope. So both live below all of them.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict


class SparseVector(BaseModel):
    indices: list[int]
    values: list[float]


class TurnFilter(BaseModel):
    """Which turns of a scope count (a query's ``time_from``, ``time_to`` and ``metadata``).

    Time: a turn said within [time_from, time_to] (either end open when None), or a turn of an event with a
    resolved time anchor (``Event.time_anchors``: whole days, UTC) overlapping it: "last week" said on 3 July
    puts its event in the last week of June. Metadata: every (key, value) pair equals the value of that top-level
    key of the turn's metadata, or is one of its items when that value is a list."""

    model_config = ConfigDict(frozen=True)

    time_from: datetime | None = None
    time_to: datetime | None = None
    # Pairs rather than a dict: a scope is hashable (the hot tier remembers scopes).
    metadata: tuple[tuple[str, str | int], ...] = ()

    @property
    def timed(self) -> bool:
        return self.time_from is not None or self.time_to is not None


class SearchScope(BaseModel):
    """What a search covers: always one tenant; within it a list of conversations, one subject's conversations,
    or (neither given) all of the tenant's conversations; and of their turns only those ``turns`` admits, when
    given (events carry no turn fields: a filter narrows turn and passage searches, not event searches)."""

    model_config = ConfigDict(frozen=True)

    tenant: str
    conversation_ids: tuple[str, ...] | None = None
    subject_id: str | None = None
    turns: TurnFilter | None = None

    @classmethod
    def conversation(cls, tenant: str, conversation_id: str) -> SearchScope:
        return cls(tenant=tenant, conversation_ids=(conversation_id,))
