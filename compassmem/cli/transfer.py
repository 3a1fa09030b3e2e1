"""``compassmem export`` and ``compassmem import``: the command-line side of ``Memory.export`` / ``Memory.import_``."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from compassmem.core.config import Settings
from compassmem.core.models import DEFAULT_TENANT
from compassmem.core.terminal import echo

STDIO = "-"


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


def cmd_export(args: argparse.Namespace, settings: Settings) -> int:
    from compassmem.library.memory import Memory

    with Memory(settings) as memory:
        summary = memory.export(sys.stdout if args.out == STDIO else args.out, tenant=args.tenant,
                                conversation_id=args.conversation)
    where = "stdout" if args.out == STDIO else args.out
    # On stderr: stdout may be the export itself.
    echo(f"exported {summary.conversations} conversation(s) of tenant {summary.tenant!r} "
          f"({summary.counts}) to {where}", file=sys.stderr)
    return 0


def cmd_import(args: argparse.Namespace, settings: Settings) -> int:
    from compassmem.library.memory import Memory

    with Memory(settings) as memory:  # the command exits after the import: nothing would use a warm hot tier
        summary = memory.import_(sys.stdin if args.path == STDIO else args.path, replace=args.replace, warm=False)
    echo(f"imported {summary.conversations} conversation(s) of tenant {summary.tenant!r} "
          f"({summary.counts}) into {settings.data_dir}")
    return 0
