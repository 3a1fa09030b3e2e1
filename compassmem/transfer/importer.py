"""Import: an export file into the stores, through the same sinks the write pipeline uses.

All of the file is checked before anything is written (``reader.check_file``): a bad line anywhere, a file cut off
or broken in its last conversation, vectors of another embedder, refuses the whole file. So is memory already where
the file would write (the tenant for a tenant export, each conversation), unless ``replace``. Then the file is read
again and written conversation by conversation, a few hundred records at a time, so memory holds a page of records
however large the file is. Either all of it lands or none of it: if writing fails part-way, what this import wrote
is deleted again (with ``replace``, the conversations already written stay, having replaced the stored ones, and
the error says exactly which). The summary counts what was written.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TextIO

import structlog

from compassmem.core.contracts.search import SearchScope
from compassmem.core.errors import Interrupted
from compassmem.system.interrupts import interrupts_deferred
from compassmem.sinks.batching import GraphSink, VectorSink, WrittenEvents
from compassmem.sinks.factory import Stores
from compassmem.transfer.reader import FilePlan, check_file, replay
from compassmem.transfer.records import (
    ClusterLine,
    Counts,
    EventLine,
    ExportFormatError,
    ImportFailed,
    ImportRefused,
    RecordLine,
    RelationLine,
    TransferSummary,
)

log = structlog.get_logger(__name__)

# Records handed to the stores at a time.
WRITE_BATCH = 256
_LISTED = 10


def import_memory(stores: Stores, source: TextIO, *, vector_space: str, dim: int, replace: bool = False,
                  on_written: Callable[[str, str], None] | None = None,
                  written_events: WrittenEvents | None = None,
                  progress: Callable[[int, int], None] | None = None) -> TransferSummary:
    """Restore the export file ``source`` (a seekable text stream, read twice from where it stands); ``replace``
    deletes each conversation of the file from the target before writing it (the tenant's other conversations
    stay). ``on_written(tenant, conversation_id)`` runs after each conversation is written; ``written_events``
    notes the events each write stored (what ``Memory.import_`` reads into the hot tier afterwards);
    ``progress(written, total)`` runs after each conversation too (conversations of the file)."""
    start = source.tell()
    try:
        plan = check_file(source, vector_space=vector_space, dim=dim)
    except ExportFormatError as error:
        raise ExportFormatError(f"{error}; nothing of the file was imported") from None
    tenant = plan.header.tenant
    if not replace:
        _refuse_existing(stores, tenant, plan.header.conversation_id)
        for conversation in plan.conversations:
            _refuse_existing(stores, tenant, conversation.conversation_id)
    source.seek(start)
    writer = _Writer(stores, tenant, replace, written_events)
    try:
        for conversation_id, line in replay(source, plan):
            if line is not None:
                writer.add(conversation_id, line)
                continue
            writer.finish(conversation_id)
            if on_written is not None:
                on_written(tenant, conversation_id)
            if progress is not None:
                progress(len(writer.written), len(plan.conversations))
    except BaseException as error:
        with interrupts_deferred():  # a second Ctrl-C must not stop the undo half-way
            message = writer.undo(plan, error)
        if isinstance(error, KeyboardInterrupt):  # still an interrupt, now saying what the stores hold
            raise Interrupted(message) from error
        if not isinstance(error, Exception):  # SystemExit: undone, and still what it was
            raise
        raise ImportFailed(message) from error
    return TransferSummary(tenant=tenant, conversations=len(writer.written), counts=writer.counts)


class _Writer:
    """Writes the second pass's records, a conversation at a time, and knows what it wrote (to undo it)."""

    def __init__(self, stores: Stores, tenant: str, replace: bool, written_events: WrittenEvents | None) -> None:
        self.stores, self.tenant, self.replace = stores, tenant, replace
        self.vectors, self.graph = VectorSink(stores.vectors), GraphSink(stores.graph)
        self.written_events = written_events if written_events is not None else WrittenEvents()
        self.written: list[str] = []
        self.current: str | None = None
        self._counts = dict.fromkeys(Counts.model_fields, 0)
        self._pending = 0

    def add(self, conversation_id: str, line: RecordLine) -> None:
        if conversation_id != self.current:
            self.current = conversation_id
            if self.replace:
                self.stores.delete_conversation(self.tenant, conversation_id)
            else:
                # A writer may have added it since the first pass.
                _refuse_existing(self.stores, self.tenant, conversation_id)
        if isinstance(line, EventLine):
            self.vectors.add(line.event)
            # An open segment lives in the vector store only, as the pipeline's ProvisionalSink writes it.
            if not line.event.provisional:
                self.graph.add(line.event)
            self.written_events.add(line.event)
        elif isinstance(line, ClusterLine | RelationLine):
            self.graph.add(line.record)
        else:  # a turn, or a passage of one: the pipeline's VectorSink writes both
            self.vectors.add(line.record)
        self._counts[f"{line.kind}s"] += 1
        self._pending += 1
        if self._pending >= WRITE_BATCH:
            self._flush()

    @property
    def counts(self) -> Counts:
        return Counts(**self._counts)

    def finish(self, conversation_id: str) -> None:
        self._flush()
        self.vectors.settle()
        self.written.append(conversation_id)
        self.current = None
        log.info("import.conversation_written", tenant=self.tenant, conversation_id=conversation_id)

    def _flush(self) -> None:
        # Nodes before the edges that need them: every event of the conversation comes before its topics and
        # relations in the file, and the vector sink's events before the graph's.
        self.vectors.flush()
        self.graph.flush()
        self.written_events.flush()
        self._pending = 0

    def undo(self, plan: FilePlan, error: BaseException) -> str:
        """Delete what this import wrote (all of it; with ``replace`` only the conversation it stopped in) and say
        what the stores hold of the file now."""
        self.vectors.discard()
        self.graph.discard()
        self.written_events.discard()
        stopped = self.current
        doomed = ([] if self.replace else list(self.written)) + ([stopped] if stopped is not None else [])
        failed: list[str] = []
        for conversation_id in doomed:
            try:
                self.stores.delete_conversation(self.tenant, conversation_id)
            except Exception:  # noqa: BLE001 - the store that failed the write may refuse this too; say so below
                failed.append(conversation_id)
        where = f"conversation {stopped!r}" if stopped is not None else "the end of a conversation"
        told = f"the import stopped in {where}: " + ("interrupted (Ctrl-C)" if isinstance(error, KeyboardInterrupt)
                                                       else repr(error))
        log.error("import.failed", tenant=self.tenant, stopped_in=stopped, error=repr(error),
                  written=len(self.written), undo_failed=failed)
        if failed:
            return (f"{told}; deleting what it had written failed too, so the stores may still hold these "
                    f"conversations of the file: {_listed(failed)}; forget them, or import the file again with "
                    "--replace")
        if not self.replace:
            return f"{told}; what it had written was deleted again: the stores hold nothing of the file"
        parts = [told, f"written whole, replacing what the stores held: {_listed(self.written) or 'none'}"]
        if stopped is not None:
            parts.append(f"{stopped!r}: absent (its stored memory was deleted to be replaced)")
        left = [c.conversation_id for c in plan.conversations if c.conversation_id not in {*self.written, stopped}]
        if left:
            parts.append(f"not written, their stored memory unchanged: {_listed(left)}")
        return "; ".join(parts)


def _listed(ids: Sequence[str]) -> str:
    shown = ", ".join(repr(i) for i in ids[:_LISTED])
    return shown + (f" and {len(ids) - _LISTED} more" if len(ids) > _LISTED else "")


def _refuse_existing(stores: Stores, tenant: str, conversation_id: str | None) -> None:
    if conversation_id is None:
        scope, what = SearchScope(tenant=tenant), f"tenant {tenant!r}"
        in_graph = bool(stores.graph.conversation_stats(tenant))
    else:
        scope, what = SearchScope.conversation(tenant, conversation_id), \
            f"conversation {conversation_id!r} of tenant {tenant!r}"
        in_graph = bool(stores.graph.event_page(tenant, conversation_id, None, 1))
    if in_graph or stores.vectors.count(tenant, conversation_id) or stores.vectors.count_turns(scope):
        raise ImportRefused(f"the target already holds memory for {what}: import into empty stores, or replace the "
                            f"file's conversations (compassmem import --replace, Memory.import_(replace=True))")

