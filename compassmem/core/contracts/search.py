"""What a store search is given: a keyword (sparse) vector and the scope it covers.

The processors make keyword vectors, the sinks store them, the read side searches with them; a query request names
its scope. So both live below all of them.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class SparseVector(BaseModel):
    indices: list[int]
    values: list[float]


class SearchScope(BaseModel):
    """What a search covers: always one tenant; within it a list of conversations, one subject's conversations,
    or (neither given) all of the tenant's conversations."""

    model_config = ConfigDict(frozen=True)

    tenant: str
    conversation_ids: tuple[str, ...] | None = None
    subject_id: str | None = None

    @classmethod
    def conversation(cls, tenant: str, conversation_id: str) -> SearchScope:
        return cls(tenant=tenant, conversation_ids=(conversation_id,))
