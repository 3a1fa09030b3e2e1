"""``compassmem reembed``: rebuild the memory of a data directory in place with the embedding model the settings
choose (``compassmem/library/reembedding.py``), for a memory built with another one, which refuses to open."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from compassmem.core.config import ENV_PREFIX, Settings
from compassmem.core.terminal import echo


def add_reembed_command(commands: argparse._SubParsersAction[Any]) -> None:
    command = commands.add_parser(
        "reembed", help="rebuild a memory in place with the embedding model the settings choose (after changing it)",
        description="A memory's vectors come from one embedding model, so a data directory built with one refuses "
                    f"to open with another ({ENV_PREFIX}EMBEDDER, {ENV_PREFIX}EMBEDDING_MODEL). This reads every "
                    "tenant's stored turns (not what was forgotten or redacted), builds a new memory from them with "
                    "the chosen model in a sibling directory (events, relations and topics built again), and swaps "
                    "it into place; the old memory is deleted unless --keep-backup. Stopped at any point, it leaves "
                    "the old memory or the new one whole and says which. Run it while no `compassmem dev`, worker, "
                    "API or MCP server uses the directory; embedded stores only (docs/operations.md).")
    command.add_argument("--data-dir", type=Path, default=argparse.SUPPRESS,
                         help=f"the memory to re-embed ({ENV_PREFIX}DATA_DIR)")
    command.add_argument("--embedding-model", metavar="MODEL",
                         help=f"the model to re-embed with (default: {ENV_PREFIX}EMBEDDING_MODEL), e.g. "
                              "dialogue-minilm")
    command.add_argument("--embedder", choices=["onnx-int8", "torch"],
                         help=f"the embedder to run it with (default: {ENV_PREFIX}EMBEDDER)")
    command.add_argument("--keep-backup", action="store_true",
                         help="keep the old memory beside the new one as <data dir>.reembed-backup")
    command.set_defaults(handler=cmd_reembed)


def cmd_reembed(args: argparse.Namespace, settings: Settings) -> int:
    from compassmem.library.reembedding import ReembedRefused, reembed, with_model

    try:
        chosen = with_model(settings, embedder=args.embedder, embedding_model=args.embedding_model)
    except ValidationError as error:
        for item in error.errors():
            echo(f"error: {item['msg'].removeprefix('Value error, ')}", file=sys.stderr)
        return 2

    def progress(tenant: str, done: int, total: int) -> None:
        # Ends with a carriage return: the next update overwrites the line, a tenant's last one ends it.
        echo(f"  re-embedded {done}/{total} conversations of tenant {tenant!r}", end="\n" if done >= total else "\r",
             file=sys.stderr, flush=True)

    try:
        summary = reembed(chosen, keep_backup=args.keep_backup, progress=progress)
    except ReembedRefused as error:
        echo(f"error: {error}", file=sys.stderr)
        return 2
    except BaseException as error:
        # Which memory is whole, and where: before the error's own line (or traceback).
        for note in getattr(error, "__notes__", ()):
            echo(note, file=sys.stderr)
        raise
    if summary.unchanged:
        echo(f"{summary.data_dir} was built with {summary.new_space} already: nothing to re-embed")
        return 0
    kept = f"; the old memory is kept in {summary.backup}" if summary.backup else ""
    echo(f"re-embedded {summary.tenants} tenant(s), {summary.conversations} conversation(s), {summary.turns} turns of "
         f"{summary.data_dir} with {summary.new_space} (was {summary.old_space or 'unrecorded'}) in "
         f"{summary.seconds:.1f} s{kept}")
    return 0
