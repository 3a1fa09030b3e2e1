"""``compassmem migrate-ids``: memory stored before the id rule (``models.ID_RULE``) rewritten to ids that can be
named.

Ids were once stored as they came. Every verb now reads an id as its canonical form (``models.check_id``: NFKC, then
the rule), so a conversation stored as 'ｐｒｉｙａ-ｔｏｍ' or 'priya tom' can be neither forgotten nor exported, and a
turn stored as 'D1 :1' not redacted. ``exporter.find_legacy_ids`` finds them in both stores.

A conversation whose id and turn ids all have a canonical form that no other stored conversation (or other turn of
it) holds is rewritten: its records, with the ids rewritten and everything else as it was (event and relation ids
too), are exported into a temporary file readable by this user only, imported back in place of the stored
conversation (with the import's checks and its undo), and what the stores still hold under the old id is deleted.
The others are reported with the reason and left as they are; ``forget_legacy`` deletes one by its stored id.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import structlog

from compassmem.core.errors import CompassmemError, NotFound
from compassmem.core.models import Event, IndexedTurn, TurnPassage, check_id
from compassmem.sinks.factory import Stores
from compassmem.transfer.exporter import StoredRecord, conversation_records, find_legacy_ids, write_file
from compassmem.transfer.importer import import_memory
from compassmem.transfer.records import ExportFormatError, Header, LegacyIds

log = structlog.get_logger(__name__)


class MigrationFailed(CompassmemError):
    """Rewriting a conversation failed part-way; the message says where its memory is and how to restore it."""


class _Left(Exception):
    """Why a conversation cannot be rewritten."""


@dataclass(frozen=True)
class Migration:
    """What became (or, in a dry run, would become) of one conversation holding ids that break the rule."""

    legacy: LegacyIds
    # Its id afterwards; None when it is left as it is (``problem`` says why).
    conversation_id: str | None
    # Each turn id that breaks the rule -> its canonical form.
    turn_ids: dict[str, str] = field(default_factory=dict)
    problem: str | None = None


def migrate_ids(stores: Stores, tenant: str, *, vector_space: str, dim: int,
                dry_run: bool = False) -> Iterator[Migration]:
    """Rewrite (unless ``dry_run``) each of the tenant's conversations holding ids that break the rule, one at a
    time, yielding what became of it. ``vector_space`` and ``dim`` are the stores' (an import checks its file
    against them). MigrationFailed when a store fails part-way through a conversation."""
    scan = find_legacy_ids(stores, tenant)
    taken = set(scan.conversations)
    for legacy in scan.legacy.values():
        migration = _plan(stores, tenant, legacy, taken)
        if migration.problem is None and not dry_run:
            migration = _rewrite(stores, tenant, migration, vector_space, dim)
        if migration.conversation_id is not None:
            taken.add(migration.conversation_id)
        yield migration


def forget_legacy(stores: Stores, tenant: str, named: str) -> LegacyIds:
    """Delete from both stores a conversation holding ids that break the rule, named by its stored id or as a report
    shows it (its ``repr``): no verb can name it otherwise. NotFound for any other name."""
    legacy = find_legacy_ids(stores, tenant).legacy
    found = legacy.get(named) or next((c for c in legacy.values() if repr(c.conversation_id) == named), None)
    if found is None:
        raise NotFound(f"tenant {tenant!r} has no conversation {named!r} holding ids that break the id rule "
                       "(`compassmem migrate-ids --dry-run` lists them; `compassmem forget` forgets any other)")
    stores.delete_conversation(tenant, found.conversation_id)
    log.info("migrate_ids.conversation_forgotten", tenant=tenant, conversation_id=found.conversation_id)
    return found


def _plan(stores: Stores, tenant: str, legacy: LegacyIds, taken: set[str]) -> Migration:
    stored = legacy.conversation_id
    try:
        canonical = _canonical("its id", stored)
        if canonical != stored and canonical in taken:
            raise _Left(f"its canonical form {canonical!r} is the id of another stored conversation")
        turn_ids = _turn_ids(stores, tenant, legacy)
    except _Left as left:
        return Migration(legacy, None, problem=str(left))
    return Migration(legacy, canonical, turn_ids)


def _turn_ids(stores: Stores, tenant: str, legacy: LegacyIds) -> dict[str, str]:
    if not legacy.turn_ids:
        return {}
    others = {t for _, t in stores.vectors.stored_ids(tenant, legacy.conversation_id) if t is not None}
    others -= set(legacy.turn_ids)
    renamed: dict[str, str] = {}
    for turn_id in legacy.turn_ids:
        canonical = _canonical(f"its turn id {turn_id!r}", turn_id)
        if canonical in others or canonical in renamed.values():
            raise _Left(f"its turn id {turn_id!r} would become {canonical!r}, the id of another of its turns")
        renamed[turn_id] = canonical
    return renamed


def _canonical(what: str, value: str) -> str:
    try:
        return check_id(value)
    except ValueError as error:
        raise _Left(f"{what} has no form the id rule accepts ({error})") from None


def _rewrite(stores: Stores, tenant: str, migration: Migration, vector_space: str, dim: int) -> Migration:
    stored, canonical = migration.legacy.conversation_id, migration.conversation_id
    assert canonical is not None, "only a planned rewrite is written"
    handle, name = tempfile.mkstemp(prefix="compassmem-migrate-ids-", suffix=".jsonl")
    path = Path(name)
    try:
        with open(handle, "w", encoding="utf-8") as out:
            records = (_renamed(record, canonical, migration.turn_ids)
                       for record in conversation_records(stores, tenant, stored))
            write_file(out, Header(tenant=tenant, conversation_id=canonical, vector_space=vector_space, dim=dim,
                                   exported_at=datetime.now(UTC)), [(canonical, records)])
    except BaseException as error:
        path.unlink()
        if not isinstance(error, ExportFormatError):
            raise
        # It holds something else no import would take: it stays as it is.
        return Migration(migration.legacy, None, problem=str(error).replace("nothing was exported",
                                                                            "nothing was rewritten"))
    try:
        with path.open(encoding="utf-8") as source:
            import_memory(stores, source, vector_space=vector_space, dim=dim, replace=True)
        if canonical != stored:
            stores.delete_conversation(tenant, stored)
    except Exception as error:
        forget = f"`compassmem migrate-ids --tenant {tenant} --forget {stored!r}`, then " if canonical != stored \
            else ""
        raise MigrationFailed(f"rewriting conversation {stored!r} of tenant {tenant!r} failed: {error}. All of its "
                              f"memory, with the new ids, is in {path}: once the stores answer, run {forget}"
                              f"`compassmem import --replace {path}`") from error
    path.unlink()
    log.info("migrate_ids.conversation_rewritten", tenant=tenant, conversation_id=canonical,
             turn_ids=len(migration.turn_ids))
    return migration


def _renamed(record: StoredRecord, conversation_id: str, turn_ids: Mapping[str, str]) -> StoredRecord:
    """The record under the conversation's new id, its turn ids (wherever it names one) rewritten."""
    if isinstance(record, Event):
        return record.model_copy(update={
            "conversation_id": conversation_id,
            "observations": [o.model_copy(update={"turn_id": turn_ids.get(o.turn_id, o.turn_id)})
                             for o in record.observations],
            "time_anchors": [a.model_copy(update={"turn_id": turn_ids.get(a.turn_id, a.turn_id)})
                             if a.turn_id is not None else a for a in record.time_anchors]})
    if isinstance(record, IndexedTurn | TurnPassage):
        return record.model_copy(update={"conversation_id": conversation_id,
                                         "turn_id": turn_ids.get(record.turn_id, record.turn_id)})
    return record.model_copy(update={"conversation_id": conversation_id})
