"""The active relations of a conversation, and the rule for contradictions.

Two relations contradict when they make opposite claims about the same pair of events: causal A->B against
causal B->A, or two different temporal orderings of A and B. A contradicting relation replaces the active one
only when its confidence exceeds the old by 20%; the old one is kept with ``superseded_by`` (history, not a
hard delete). A repeat of the same relation (same id) keeps the higher confidence.

Relations are only ever proposed between events of a conversation memory's hot window (its most recent events),
so a relation one of whose events has left the window can no longer be repeated or contradicted: the memory
``release``s it, and the ledger keeps only what can still change. The counts per type cover every active relation
of the conversation, released or not.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from pydantic import BaseModel, Field

from compassmem.core.models import Relation, RelationType

OVERRIDE_MARGIN = 1.2
_CONTRADICTABLE = {RelationType.CAUSAL, RelationType.TEMPORAL}


def _pair_key(relation: Relation) -> str:
    low, high = sorted((relation.source, relation.target))
    return f"{relation.type.value}|{low}|{high}"


class LedgerResult(BaseModel):
    """What to write: new or updated relations (including superseded ones), and what was turned down."""

    writes: list[Relation] = Field(default_factory=list)
    rejected: list[Relation] = Field(default_factory=list)


class RelationLedger(BaseModel):
    # The active relations that can still change (both events in the hot window).
    active: dict[str, Relation] = Field(default_factory=dict)
    # For contradictable types: the active relation id per unordered pair and type (pairs in ``active`` only).
    by_pair: dict[str, str] = Field(default_factory=dict)
    superseded: int = 0
    # Active relations of the whole conversation per type, released ones included: the totals health reports.
    active_by_type: Counter[str] = Field(default_factory=Counter)

    @property
    def active_total(self) -> int:
        return sum(self.active_by_type.values())

    def apply(self, relations: list[Relation]) -> LedgerResult:
        result = LedgerResult()
        for relation in relations:
            self._apply_one(relation, result)
        return result

    def _apply_one(self, relation: Relation, result: LedgerResult) -> None:
        existing = self.active.get(relation.relation_id)
        if existing is not None:
            if relation.confidence > existing.confidence:
                updated = existing.model_copy(update={"confidence": relation.confidence, "evidence": relation.evidence})
                self.active[relation.relation_id] = updated
                result.writes.append(updated)
            return
        if relation.type in _CONTRADICTABLE:
            key = _pair_key(relation)
            rival_id = self.by_pair.get(key)
            if rival_id is not None and rival_id in self.active:
                rival = self.active[rival_id]
                if relation.confidence < rival.confidence * OVERRIDE_MARGIN:
                    result.rejected.append(relation)
                    return
                retired = rival.model_copy(update={"superseded_by": relation.relation_id})
                del self.active[rival_id]
                self.active_by_type[rival.type.value] -= 1
                self.superseded += 1
                result.writes.append(retired)
            self.by_pair[key] = relation.relation_id
        self.active[relation.relation_id] = relation
        self.active_by_type[relation.type.value] += 1
        result.writes.append(relation)

    def remove(self, relations: Iterable[Relation]) -> None:
        """Delete relations for good (a redaction took away what they rest on): no longer held, and an active one
        no longer counted. A count never goes below zero: a memory started anew over a stored conversation did
        not count that conversation's earlier relations."""
        for relation in relations:
            self._unhold(relation.relation_id)
            if relation.superseded_by is None and self.active_by_type[relation.type.value] > 0:
                self.active_by_type[relation.type.value] -= 1

    def release(self, relation_ids: Iterable[str]) -> None:
        """Stop holding these relations (still active, and still counted): nothing can change them any more."""
        for relation_id in relation_ids:
            self._unhold(relation_id)

    def _unhold(self, relation_id: str) -> None:
        relation = self.active.pop(relation_id, None)
        if relation is not None and relation.type in _CONTRADICTABLE:
            key = _pair_key(relation)
            if self.by_pair.get(key) == relation_id:
                del self.by_pair[key]
