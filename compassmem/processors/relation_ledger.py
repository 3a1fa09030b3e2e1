"""The active relations of a conversation, and the rule for contradictions.

Two relations contradict when they make opposite claims about the same pair of events: causal A->B against
causal B->A, or two different temporal orderings of A and B. A contradicting relation replaces the active one
only when its confidence exceeds the old by 20%; the old one is kept with ``superseded_by`` (history, not a
hard delete). A repeat of the same relation (same id) keeps the higher confidence.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from compassmem.models import Relation, RelationType

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
    active: dict[str, Relation] = Field(default_factory=dict)
    # For contradictable types: the active relation id per unordered pair and type.
    by_pair: dict[str, str] = Field(default_factory=dict)
    superseded: int = 0

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
                self.superseded += 1
                result.writes.append(retired)
            self.by_pair[key] = relation.relation_id
        self.active[relation.relation_id] = relation
        result.writes.append(relation)
