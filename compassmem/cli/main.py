"""One entry point, ``compassmem <command>``: the parser, ``main``, and the commands ingest, ask, api, openapi,
build-index and mcp (``streaming.py``, ``transfer.py`` and ``evaluate.py`` add the others)."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import structlog
from pydantic import ValidationError

from compassmem import __version__
from compassmem.cli.api_key import add_api_key_options
from compassmem.cli.command_parser import CommandParser
from compassmem.cli.errors import one_line
from compassmem.cli.evaluate import add_eval_command
from compassmem.cli.ingest_report import print_summary, stored_totals
from compassmem.cli.progress import Progress
from compassmem.cli.reembed import add_reembed_command
from compassmem.cli.status import add_status_command
from compassmem.cli.streaming import add_insecure_no_auth, add_streaming_commands
from compassmem.cli.transfer import add_transfer_commands
from compassmem.cli.wait_ready import add_wait_ready_command
from compassmem.core.config import ENV_PREFIX, Settings, SettingsFileError
from compassmem.core.contracts.query import QueryResponse
from compassmem.write.importers import SUBJECT_HELP, ImportFormatError, read_turns
from compassmem.core.logging_setup import configure_logging
from compassmem.core.models import Event
from compassmem.core.terminal import echo
from compassmem.core.tracing import configure_tracing

log = structlog.get_logger(__name__)


def cmd_ingest(args: argparse.Namespace, settings: Settings) -> int:
    from compassmem.core.errors import Interrupted
    from compassmem.library.memory import Memory

    try:
        turns = list(read_turns(Path(args.path), timezone=settings.import_timezone, tenant=args.tenant,
                                subject_id=args.subject))
    except ImportFormatError as error:
        echo(f"error: {error}", file=sys.stderr)
        return 2
    echo(f"read {len(turns)} turns from {args.path}")
    if args.url:
        from compassmem.cli.remote import ingest_over_http

        return ingest_over_http(args, turns)
    progress = Progress(len(turns))
    try:
        with Memory(settings) as memory:
            touched = {(turn.tenant, turn.conversation_id) for turn in turns}
            before = stored_totals(memory.stores, touched)
            summary = memory.add(turns, progress=progress, warm=False)
            after = stored_totals(memory.stores, touched)
    except KeyboardInterrupt:
        echo("", file=sys.stderr)  # ends the progress line
        raise Interrupted(f"the ingest stopped after {progress.done} of {len(turns)} turns; what it wrote stays in "
                          f"{settings.data_dir}: run the same command again to add the rest (turns memory already "
                          "has are skipped)") from None
    echo(f"memory built in {settings.data_dir}:")
    print_summary(summary, (before, after))
    return 0


def print_answer(question: str, response: QueryResponse, shown: int,
                 frames: dict[str, Event] | None = None) -> None:
    """The answer, whether memory likely holds one, the ranked turns with their relevance and the first three
    evidence events: each event's frame (what happened, who, the main entities, when; from ``frames``, by event id,
    where given), then its turns."""
    from compassmem.processors.event_frames import frame_lines

    echo(f"\nQ: {question}")
    if response.answer:
        echo(f"A: {response.answer}")
    echo(f"   answerable: {'yes' if response.answerable else 'no'} "
         f"(probability {response.answerable_probability:.2f})")
    ranked = ", ".join(ref.turn_id + (f" ({ref.relevance:.2f})" if ref.relevance is not None else "")
                       for ref in response.turn_refs[:shown]) or "none"
    echo(f"   ranked turns: {ranked}  ({response.timings_ms.get('total', 0):.0f} ms)")
    for item in response.evidence[:3]:
        path = " -> ".join(f"{step.type}" + (f"/{step.subtype}" if step.subtype else "") for step in item.path)
        anchors = ", ".join(f"{a.expression} = {a.start}" + (f"..{a.end}" if a.end != a.start else "")
                            for a in item.time_anchors[:3])
        event = (frames or {}).get(item.event_id)
        echo(f"   event {item.event_id[:8]} of {item.conversation_id} score {item.score:.2f}"
              + (f" relevance {item.relevance:.2f}" if item.relevance is not None else "")
              + (f" via {path}" if path else " (seed)")
              + (f"; time: {anchors}" if anchors else ""))
        if event is not None:
            for label, text in frame_lines(event):
                echo(f"      {label + ':':<9} {text}")
        for turn in item.turns:
            relevance = f" ({turn.relevance:.2f})" if turn.relevance is not None else ""
            echo(f"      {turn.turn_id}{relevance} {turn.timestamp:%Y-%m-%d} {turn.speaker}: {turn.text}")


def cmd_ask(args: argparse.Namespace, settings: Settings) -> int:
    from compassmem.cli.remote import remote
    from compassmem.core.contracts.query import QueryRequest
    from compassmem.core.errors import NotFound
    from compassmem.library.memory import Memory

    scope: dict[str, object]
    words = list(args.words)
    if args.subject:
        scope = {"subject_id": args.subject}
    elif args.conversations:
        scope = {"conversation_ids": [c for c in args.conversations.split(",") if c]}
    elif args.all:
        scope = {"all_conversations": True}
    else:
        scope = {"conversation_id": words.pop(0)}
    if not words:
        echo("error: give at least one question", file=sys.stderr)
        return 2
    try:
        requests = [QueryRequest(**scope, question=q, tenant=args.tenant, budget_turns=args.budget,
                                 min_relevance=args.min_relevance) for q in words]
    except ValueError as error:
        echo(f"error: {error}", file=sys.stderr)
        return 2
    with remote(args) if args.url else Memory(settings) as memory:
        for request in requests:
            try:
                response = memory.query(request)
            except NotFound:
                response = None
            # No turn at all is no memory, unless --min-relevance left them out (the answer says so).
            if response is None or not (response.turn_ids or request.min_relevance):
                echo(f"error: no memory for {request.scope_label} of tenant {args.tenant!r}", file=sys.stderr)
                return 1
            shown = list(dict.fromkeys(item.event_id for item in response.evidence[:3]))
            frames = {event.event_id: event for event in memory.get_events(shown, tenant=args.tenant)}
            print_answer(request.question, response, args.budget, frames)
    return 0


def cmd_build_index(args: argparse.Namespace, settings: Settings) -> int:
    from compassmem.embedding.embedders import make_embedder
    from compassmem.sinks.factory import open_vector_store

    # The model's dimension is what the store checks its collection against.
    dim = make_embedder(settings).dim
    started = time.perf_counter()
    vectors = open_vector_store(settings, dim)
    try:
        vectors.build_search_index()
    finally:
        vectors.close()
    echo(f"search index built in {time.perf_counter() - started:.1f} s")
    return 0


def cmd_compact(args: argparse.Namespace, settings: Settings) -> int:
    from compassmem.library.memory import Memory

    started = time.perf_counter()
    with Memory(settings) as memory:
        rewrote_vectors = memory.compact()
        if args.build_index:
            memory.stores.vectors.build_search_index()
    echo(f"stores compacted in {time.perf_counter() - started:.1f} s: what redactions and forgets deleted has left "
         "their files")
    if rewrote_vectors:
        echo(f"  vectors: the shard in {settings.data_dir / 'qdrant'} was rewritten with its live points only"
             + ("; search index built" if args.build_index else
                " (dense searches are exact until `compassmem build-index`)"))
    else:
        echo(f"  vectors: the Qdrant server ({settings.qdrant_url}) keeps deleted points in its own files until its "
             "operator compacts them: see docs/security.md, Erasure")
    echo(f"  graph: FalkorDB rewrote its append-only file{'' if settings.falkordb_url else ' and deleted the old one'}")
    return 0


def cmd_api(args: argparse.Namespace, settings: Settings) -> int:
    from compassmem.query_api.server import run_api

    overrides = {key: value for key, value in (("api_host", args.host), ("api_port", args.port)) if value}
    return run_api(settings.model_copy(update=overrides), insecure_no_auth=args.insecure_no_auth)


def cmd_openapi(args: argparse.Namespace, settings: Settings) -> int:
    from compassmem.query_api.openapi import openapi_json

    document = openapi_json()
    if args.out == "-":
        sys.stdout.write(document)
    else:
        Path(args.out).write_text(document, encoding="utf-8")
    return 0


def cmd_mcp(args: argparse.Namespace, settings: Settings) -> int:
    from compassmem.mcp.server import check_exposure, run_mcp
    from compassmem.library.memory import Memory

    if args.port is not None:
        check_exposure(settings, args.host, args.insecure_no_auth)
    with Memory(settings) as memory:
        run_mcp(memory, args.host, args.port)
    return 0


def add_url_options(command: argparse.ArgumentParser, help_text: str) -> None:
    """``--url`` and the API key options of a command that can run against a running API."""
    command.add_argument("--url", help=help_text)
    add_api_key_options(command, whose="the tenant")


def _probability(text: str) -> float:
    """A command-line number from 0 to 1."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number from 0 to 1") from None
    if not 0.0 <= value <= 1.0:  # NaN too
        raise argparse.ArgumentTypeError(f"{text} is not a number from 0 to 1")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="compassmem", description="Event-graph long-term memory for LLM agents.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--data-dir", type=Path, help="where the embedded stores live (COMPASSMEM_DATA_DIR)")
    commands = parser.add_subparsers(dest="command", required=True)
    ingest = commands.add_parser("ingest", help="build memory from a LoCoMo JSON or JSONL turns file")
    ingest.add_argument("path", help="a LoCoMo-format .json file or a .jsonl file of turns")
    ingest.add_argument("--tenant", default="default")
    ingest.add_argument("--subject", metavar="ID", help=SUBJECT_HELP)
    add_url_options(ingest, "post the turns to the query API at URL (POST /v1/turns) instead of the data "
                            "directory: what to use while `compassmem dev` runs there")
    ingest.set_defaults(handler=cmd_ingest)
    ask = commands.add_parser("ask", help="answer questions from memory, with evidence",
                              usage="compassmem ask [--subject ID | --conversations A,B | --all] "
                                    "[CONVERSATION_ID] QUESTION [QUESTION ...]")
    ask.add_argument("words", nargs="+", metavar="[CONVERSATION_ID] QUESTION",
                     help="the conversation to ask (unless a scope option is given), then one or more questions")
    scope = ask.add_mutually_exclusive_group()
    scope.add_argument("--subject", help="ask every conversation about this subject (the turns' subject_id)")
    scope.add_argument("--conversations", help="ask these conversations together (comma-separated ids)")
    scope.add_argument("--all", action="store_true", help="ask every conversation of the tenant")
    ask.add_argument("--tenant", default="default")
    ask.add_argument("--budget", type=int, default=5, help="ranked turns to return per question")
    ask.add_argument("--min-relevance", type=_probability, default=0.0, metavar="P",
                     help="leave out the turns whose relevance (the calibrated probability, 0-1, that a turn is "
                          "evidence; shown after each turn) is below P (default 0: every ranked turn)")
    add_url_options(ask, "ask the query API at URL (POST /v1/query) instead of the data directory: what to use "
                         "while `compassmem dev` runs there")
    ask.set_defaults(handler=cmd_ask)
    api = commands.add_parser("api", help="serve the query API against a Qdrant server and an external FalkorDB")
    api.add_argument("--host", help="bind address (COMPASSMEM_API_HOST, default 127.0.0.1)")
    api.add_argument("--port", type=int, help="port (COMPASSMEM_API_PORT, default 8080)")
    add_insecure_no_auth(api)
    api.set_defaults(handler=cmd_api)
    openapi = commands.add_parser("openapi", help="write the query API's OpenAPI document (JSON) without serving it",
                                  description="The document /openapi.json serves, for generating typed clients "
                                              "(clients/typescript/ generates its types from it).")
    openapi.add_argument("--out", default="-", metavar="FILE", help="where to write (default '-': stdout)")
    openapi.set_defaults(handler=cmd_openapi)
    build_index = commands.add_parser(
        "build-index", help="index the embedded vector store for fast search (run while no other process uses it)",
        description="Builds the embedded qdrant-edge store's HNSW index over every point not indexed yet. Until "
                    "then dense searches are exact: fine for thousands of turns, slow for a tenant of 100k. It "
                    "cannot run beside a live worker or API (the store belongs to one process) and holds the "
                    "process for its whole run (about 30 s per 100k turns on 2 cores). A Qdrant server indexes "
                    "by itself: there it does nothing.")
    build_index.set_defaults(handler=cmd_build_index)
    compact = commands.add_parser(
        "compact", help="rewrite both stores' files so that deleted memory leaves the disk (erasure)",
        description="A redaction or a forget deletes memory from the stores, but the engines keep the deleted words "
                    "in their files until those are rewritten: qdrant-edge in its segments and write-ahead log, "
                    "FalkorDB in its append-only file. This rewrites both from what they hold now (run it while no "
                    "other process uses the embedded stores; COMPASSMEM_COMPACT_AFTER_ERASURE does it after every "
                    "erasure). A Qdrant server's files are its operator's: see docs/security.md.")
    compact.add_argument("--build-index", action="store_true",
                         help="build the vector store's search index afterwards (as `compassmem build-index`)")
    compact.set_defaults(handler=cmd_compact)
    mcp = commands.add_parser("mcp", help="serve memory as MCP tools for an agent (stdio, or HTTP with --port)",
                              description="Tools remember, recall, list_conversations, forget and redact_turn over "
                                          "the memory of the data directory (or the store servers the settings "
                                          "name). Over HTTP with COMPASSMEM_API_KEYS every request needs a key and "
                                          "the tools act for its tenant; COMPASSMEM_MCP_TENANT pins one tenant "
                                          "otherwise.")
    mcp.add_argument("--port", type=int, help="serve streamable HTTP on this port (at /mcp) instead of stdio")
    mcp.add_argument("--host", default="127.0.0.1", help="bind address with --port (default 127.0.0.1)")
    mcp.add_argument("--insecure-no-auth", action="store_true",
                     help="serve HTTP on a --host other than loopback without COMPASSMEM_API_KEYS (refused "
                          "otherwise): anyone who reaches the port may read and delete every tenant's memory")
    mcp.set_defaults(handler=cmd_mcp)
    add_status_command(commands)
    add_streaming_commands(commands)
    add_transfer_commands(commands)
    add_reembed_command(commands)
    add_eval_command(commands)
    add_wait_ready_command(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    overrides = {"data_dir": args.data_dir} if args.data_dir else {}
    try:
        settings = Settings(**overrides)
    except SettingsFileError as error:
        echo(f"error: {error}", file=sys.stderr)
        return 2
    except ValidationError as error:
        # Name the environment variable (and the file key), not just the field: that is what the user changes.
        for item in error.errors():
            field = ".".join(str(p) for p in item["loc"])
            name = f"{ENV_PREFIX}{field.upper()} ({field})" if field else "settings"
            echo(f"error: {name}: {item['msg']}", file=sys.stderr)
        return 2
    configure_logging(settings.log_level, settings.log_format)
    try:
        configure_tracing(settings, service=f"compassmem-{args.command}")
        # A command given --url reaches a running API: the data directory is not its business.
        if args.command in _DATA_DIR_COMMANDS | _STORE_COMMANDS | {"eval"} and not getattr(args, "url", None):
            from compassmem.sinks.factory import check_data_dir, uses_data_dir

            # Before any slow set-up (the embedder; the dev broker, whose log lives there too): fail in a second.
            if args.command in _DATA_DIR_COMMANDS or uses_data_dir(settings):
                check_data_dir(settings.data_dir)
        return int(args.handler(args, settings))
    except KeyboardInterrupt as error:
        # Ctrl-C is how a person stops a command: one line (what an import undid, where it says), no traceback.
        echo(f"interrupted: {error}" if str(error) else "interrupted", file=sys.stderr)
        return 130
    except Exception as error:
        # Bad COMPASSMEM_DATA_DIR, stores held by another process (`compassmem dev`) or gone, an unreadable input
        # file, a missing model: one line that says what to change. Anything else keeps its traceback.
        message = one_line(error)
        if message is None:
            raise
        echo(f"error: {message}", file=sys.stderr)
        return 2


# Commands that always write under the data directory (dev broker log, Faust's directory), and commands that
# open the stores, which need it only for an embedded store.
_DATA_DIR_COMMANDS = frozenset({"dev", "worker", "broker"})
_STORE_COMMANDS = frozenset({"ingest", "ask", "build-index", "compact", "mcp", "export", "import",
                             "migrate-ids"})

