"""What ``compassmem ingest`` prints when it is done: what memory holds of the conversations of the file, read from
the stores before and after the run (so that a run finishing an interrupted one, or finding every turn there
already, says what is in memory rather than what it added), then what the run built."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from pydantic import BaseModel

from compassmem.core.contracts.search import SearchScope
from compassmem.core.terminal import echo

if TYPE_CHECKING:  # the CLI imports this module at start: the stores and the write path load only when used
    from compassmem.sinks.factory import Stores
    from compassmem.write.pipeline import IngestSummary


class StoredTotals(BaseModel):
    """What the stores hold of some conversations."""

    conversations: int
    turns: int
    events: int


def stored_totals(stores: Stores, conversations: Iterable[tuple[str, str]]) -> StoredTotals:
    """The totals of these (tenant, conversation id) pairs; a conversation counts once it holds a turn."""
    keys = sorted(set(conversations))
    turns = [stores.vectors.count_turns(SearchScope.conversation(tenant, conversation_id))
             for tenant, conversation_id in keys]
    return StoredTotals(conversations=sum(1 for held in turns if held), turns=sum(turns),
                        events=sum(stores.vectors.count(tenant, conversation_id) for tenant, conversation_id in keys))


def print_summary(summary: IngestSummary, stored: tuple[StoredTotals, StoredTotals] | None = None) -> None:
    """The run's summary; with ``stored`` (the totals before and after the run), what is in memory first."""
    if stored is None:
        rows: list[tuple[str, object]] = [("conversations", summary.conversations), ("turns", summary.turns),
                                          ("events", summary.events)]
    else:
        before, after = stored
        added = after.turns - before.turns
        rows = [("conversations", f"{after.conversations} in memory ({before.conversations} already there)"),
                ("turns", f"{after.turns} in memory ({before.turns} already there, {added} added)"),
                ("events", f"{after.events} in memory")]
    if summary.turns:
        rows += [
            ("mean turns per event", f"{summary.mean_turns_per_event:.2f}"),
            ("segments", summary.segments),
            ("merged segments", summary.merged_segments),
            ("duplicate rate", f"{summary.duplicate_rate:.1%}"),
            *((f"relations: {kind}", count) for kind, count in summary.relations_by_type.items()),
            ("superseded relations", summary.superseded_relations),
            ("rejected (contradicting) relations", summary.rejected_relations),
            ("clusters", summary.clusters),
            ("average degree", f"{summary.average_degree:.2f}"),
            ("average degree without adjacency edges", f"{summary.average_degree_without_adjacency:.2f}"),
            ("time taken", f"{summary.seconds:.1f} s ({summary.turns_per_second:.0f} turns/s)"),
        ]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        echo(f"  {name:<{width}}  {value}")
    if not summary.turns:
        echo("  nothing to add: memory already held every turn of the input")
