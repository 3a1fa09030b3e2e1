"""Import: an export file into the stores, through the same sinks the write pipeline uses.

Refused before anything is written when the file's vectors come from another embedder or dimension than the
target's, or (unless ``replace``) when the target already holds memory where the file would write: the tenant for a
tenant export, the conversation for a conversation export. A conversation is written only once all of its lines
have been read and checked; if writing it fails, what was written of it is deleted again, so a conversation is
either restored whole or absent.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import structlog

from compassmem.contracts.search import SearchScope
from compassmem.sinks.batching import GraphSink, VectorSink
from compassmem.sinks.factory import Stores
from compassmem.transfer.reader import Conversation, numbered, read_conversations, read_header
from compassmem.transfer.records import Counts, Header, ImportRefused, TransferSummary

log = structlog.get_logger(__name__)


def import_memory(stores: Stores, lines: Iterable[str], *, vector_space: str, dim: int, replace: bool = False,
                  on_written: Callable[[str, str], None] | None = None) -> TransferSummary:
    """Restore the export file whose lines are ``lines``; ``replace`` deletes each conversation of the file from
    the target before writing it (the tenant's other conversations stay). ``on_written(tenant, conversation_id)``
    runs after each conversation is written."""
    numbered_lines = numbered(lines)
    header = read_header(numbered_lines)
    _check_vectors(header, vector_space, dim)
    if not replace:
        _refuse_existing(stores, header.tenant, header.conversation_id)
    total, conversations = Counts(), 0
    for conversation in read_conversations(numbered_lines, header):
        if replace:
            _delete(stores, header.tenant, conversation.conversation_id)
        else:
            # The file may name a conversation twice, or a writer may have added it since the check above.
            _refuse_existing(stores, header.tenant, conversation.conversation_id)
        _write(stores, header.tenant, conversation)
        total, conversations = total + conversation.counts, conversations + 1
        log.info("import.conversation_written", tenant=header.tenant, conversation_id=conversation.conversation_id,
                 **conversation.counts.model_dump())
        if on_written is not None:
            on_written(header.tenant, conversation.conversation_id)
    return TransferSummary(tenant=header.tenant, conversations=conversations, counts=total)


def _check_vectors(header: Header, vector_space: str, dim: int) -> None:
    if header.vector_space != vector_space or header.dim != dim:
        raise ImportRefused(f"the file's vectors were made by the embedder {header.vector_space!r} ({header.dim}-d) "
                            f"and the settings choose {vector_space!r} ({dim}-d): their vectors cannot be searched "
                            f"together (set COMPASSMEM_EMBEDDER and COMPASSMEM_EMBEDDING_MODEL to the file's)")


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


def _write(stores: Stores, tenant: str, conversation: Conversation) -> None:
    vectors, graph = VectorSink(stores.vectors), GraphSink(stores.graph)
    for event in conversation.events:
        vectors.add(event)
        # An open segment lives in the vector store only, as the pipeline's ProvisionalSink writes it.
        if not event.provisional:
            graph.add(event)
    for turn in conversation.turns:
        vectors.add(turn)
    for record in (*conversation.clusters, *conversation.relations):
        graph.add(record)
    try:
        vectors.flush()
        graph.flush()
    except BaseException:
        # The conversation was absent (or deleted for ``replace``) before: leave it absent, not half written.
        _delete(stores, tenant, conversation.conversation_id)
        raise


def _delete(stores: Stores, tenant: str, conversation_id: str) -> None:
    stores.vectors.delete_conversation(tenant, conversation_id)
    stores.graph.delete_conversation(tenant, conversation_id)
