"""``compassmem export`` and ``compassmem import``, the command-line side of ``Memory.export`` / ``Memory.import_``,
and ``compassmem migrate-ids`` (``compassmem/transfer/id_migration.py``)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from compassmem.core.config import Settings
from compassmem.core.models import DEFAULT_TENANT
from compassmem.core.terminal import echo

STDIO = "-"
# Conversations a report names; the rest are counted.
LISTED = 10


def add_transfer_commands(commands: argparse._SubParsersAction[Any]) -> None:
    export = commands.add_parser(
        "export", help="write a tenant's memory, or one conversation's, as JSONL",
        description="Writes turns (with the passages of long ones) and events with their vectors, topic "
                    "clusters and relations (superseded ones too), conversation by conversation, for "
                    "`compassmem import` to restore elsewhere.")
    export.add_argument("--tenant", default=DEFAULT_TENANT)
    export.add_argument("--conversation", metavar="ID", help="export only this conversation")
    export.add_argument("--out", default=STDIO, metavar="FILE", help="where to write (default '-': stdout)")
    export.set_defaults(handler=cmd_export)
    restore = commands.add_parser(
        "import", help="restore a `compassmem export` file into stores that do not hold its memory yet",
        description="Refuses a file made with another embedder, and a tenant or conversation the stores already "
                    "hold (unless --replace). A bad line stops the import with its line number; a conversation is "
                    "written whole or not at all.")
    restore.add_argument("path", metavar="FILE", help="the export file, or '-' for stdin")
    restore.add_argument("--replace", action="store_true",
                         help="replace the stored conversations the file holds (the tenant's others stay)")
    restore.set_defaults(handler=cmd_import)
    migrate = commands.add_parser(
        "migrate-ids", help="rewrite ids stored before the id rule, which no command can name, to their canonical form",
        description="Finds the tenant's conversations whose id or turn ids break the id rule (stored before it, "
                    "they can be neither forgotten nor exported) in both stores, and rewrites each to the canonical "
                    "form of its ids (NFKC). One that has none, or whose canonical form another stored conversation "
                    "(or turn) holds, is reported and left as it is: --forget deletes it. Run it while no worker or "
                    "API uses the stores (docs/operations.md).")
    migrate.add_argument("--tenant", default=DEFAULT_TENANT)
    migrate.add_argument("--dry-run", action="store_true", help="report what would be rewritten; change nothing")
    migrate.add_argument("--forget", metavar="ID",
                         help="delete this conversation instead, named as the report shows it (or as stored)")
    migrate.set_defaults(handler=cmd_migrate_ids)


def cmd_export(args: argparse.Namespace, settings: Settings) -> int:
    from compassmem.library.memory import Memory

    with Memory(settings) as memory:
        summary = memory.export(sys.stdout if args.out == STDIO else args.out, tenant=args.tenant,
                                conversation_id=args.conversation)
    where = "stdout" if args.out == STDIO else args.out
    # On stderr: stdout may be the export itself.
    echo(f"exported {summary.conversations} conversation(s) of tenant {summary.tenant!r} "
          f"({summary.counts}) to {where}", file=sys.stderr)
    if summary.skipped:
        shown = ", ".join(legacy.named for legacy in summary.skipped[:LISTED])
        more = f" and {len(summary.skipped) - LISTED} more" if len(summary.skipped) > LISTED else ""
        echo(f"skipped {len(summary.skipped)} conversation(s) holding ids stored before the id rule, which no "
             f"import would take: {shown}{more}; `compassmem migrate-ids --tenant {summary.tenant}` rewrites them",
             file=sys.stderr)
    return 0


def cmd_import(args: argparse.Namespace, settings: Settings) -> int:
    from compassmem.library.memory import Memory

    def progress(written: int, total: int) -> None:
        # Ends with a carriage return: the next update overwrites the line, the last one ends it.
        echo(f"  imported {written}/{total} conversations", end="\n" if written >= total else "\r", file=sys.stderr,
             flush=True)

    with Memory(settings) as memory:  # the command exits after the import: nothing would use a warm hot tier
        summary = memory.import_(sys.stdin if args.path == STDIO else args.path, replace=args.replace, warm=False,
                                 progress=progress)
    echo(f"imported {summary.conversations} conversation(s) of tenant {summary.tenant!r} "
          f"({summary.counts}) into {settings.data_dir}")
    return 0


def cmd_migrate_ids(args: argparse.Namespace, settings: Settings) -> int:
    from compassmem.library.memory import Memory
    from compassmem.transfer.id_migration import forget_legacy, migrate_ids

    tenant = args.tenant
    with Memory(settings) as memory:
        if args.forget is not None:
            forgotten = forget_legacy(memory.stores, tenant, args.forget)
            if settings.compact_after_erasure:
                memory.compact()
            echo(f"forgot conversation {forgotten.named} of tenant {tenant!r}")
            return 0
        found = left = 0
        for migration in migrate_ids(memory.stores, tenant, vector_space=settings.vector_space,
                                     dim=memory.embedder.dim, dry_run=args.dry_run):
            found += 1
            legacy = migration.legacy
            if migration.problem is not None:
                left += 1
                echo(f"left conversation {legacy.named}: {migration.problem}")
                continue
            changes = [f"{old!r} -> {new!r}" for old, new in migration.turn_ids.items()]
            if migration.conversation_id != legacy.conversation_id:
                changes.insert(0, f"conversation id -> {migration.conversation_id!r}")
            echo(f"{'would rewrite' if args.dry_run else 'rewrote'} conversation {legacy.conversation_id!r}: "
                 f"{', '.join(changes)}")
    if not found:
        echo(f"every id of tenant {tenant!r} meets the id rule: nothing to rewrite")
        return 0
    echo(f"tenant {tenant!r}: {found - left} of {found} conversation(s) holding ids that break the id rule "
         f"{'would be ' if args.dry_run else ''}rewritten"
         + (f"; forget each one left with `compassmem migrate-ids --tenant {tenant} --forget ID`, ID as shown above"
            if left else ""))
    return 1 if left else 0
