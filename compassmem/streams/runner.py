"""Process wiring: ``compassmem worker`` (against configured servers) and ``compassmem dev`` (everything in one).

``dev`` starts the memory-only dev broker, opens the embedded stores and runs the worker in this process. Other
parts that must share those in-process stores (the query API: an embedded qdrant-edge shard belongs to one
process) join as *sidecars*: factories that receive the ``DevContext`` and return something with
``start()``/``stop()``, e.g. ``query_api.server.BackgroundServer`` around an ASGI app. They are started before
the worker runs and stopped after it returns.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import structlog

from compassmem.config import Settings
from compassmem.embedding import Embedder
from compassmem.sinks.factory import Stores, open_stores
from compassmem.streams.broker import DevBroker
from compassmem.streams.topics import ensure_topics, topic_specs

log = structlog.get_logger(__name__)


class Sidecar(Protocol):
    def start(self) -> object: ...

    def stop(self) -> None: ...


@dataclass
class DevContext:
    settings: Settings
    bootstrap: str
    stores: Stores
    embedder: Embedder


SidecarFactory = Callable[[DevContext], Sidecar]


def load_embedder(settings: Settings) -> Embedder:
    from compassmem.embedding import SentenceTransformerEmbedder

    return SentenceTransformerEmbedder(settings.embedding_model, settings.embedding_batch_size)


def run_streaming_worker(settings: Settings, bootstrap: str, stores: Stores, embedder: Embedder,
                         sidecars: Sequence[Sidecar] = ()) -> int:
    """Run the Faust worker in this thread until SIGINT/SIGTERM; returns the exit status."""
    import faust

    from compassmem.streams.app import StreamingWorker

    streaming = StreamingWorker(settings, stores, embedder, bootstrap)
    worker = faust.Worker(streaming.app, loglevel=_faust_level(settings.log_level), redirect_stdouts=False,
                          quiet=True)
    started: list[Sidecar] = []
    code = 0
    try:
        for sidecar in sidecars:
            sidecar.start()
            started.append(sidecar)
        log.info("worker.starting", bootstrap=bootstrap, group=settings.kafka_app_id,
                 turns_topic=settings.turns_topic, partitions=settings.kafka_partitions)
        worker.execute_from_commandline()
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    finally:
        for sidecar in reversed(started):
            sidecar.stop()
        # A batch may still be writing (the loop stopped while its thread ran): let it finish before the stores
        # close under it. Its offsets were not committed, so it will be applied again; writes are idempotent.
        streaming.executor.shutdown(wait=True)
    log.info("worker.stopped", exit_code=code, **streaming.totals)
    return code


def run_worker(settings: Settings) -> int:
    """``compassmem worker``: the pipeline against the configured broker and stores."""
    bootstrap = settings.bootstrap_servers
    ensure_topics(bootstrap, topic_specs(settings))
    embedder = load_embedder(settings)
    with open_stores(settings, dim=embedder.dim) as stores:
        return run_streaming_worker(settings, bootstrap, stores, embedder)


def run_dev(settings: Settings, sidecars: Sequence[SidecarFactory] = ()) -> int:
    """``compassmem dev``: dev broker + embedded stores + worker (+ sidecars) in this process."""
    with DevBroker(port=settings.dev_broker_port, log_path=settings.data_dir / "dev-broker.log") as broker:
        # The worker must use this broker whatever COMPASSMEM_KAFKA_BOOTSTRAP says.
        settings = settings.model_copy(update={"kafka_bootstrap": broker.bootstrap})
        print(f"dev broker on {broker.bootstrap} (memory-only: topics and offsets vanish when `compassmem dev` "
              "stops; the stores keep the memory built)", file=sys.stderr)
        ensure_topics(broker.bootstrap, topic_specs(settings))
        embedder = load_embedder(settings)
        with open_stores(settings, dim=embedder.dim) as stores:
            context = DevContext(settings=settings, bootstrap=broker.bootstrap, stores=stores, embedder=embedder)
            return run_streaming_worker(settings, broker.bootstrap, stores, embedder,
                                        [factory(context) for factory in sidecars])


def _faust_level(level: str) -> str:
    # Faust's own INFO lines are many and unstructured; ours come through structlog.
    return "warning" if level in {"DEBUG", "INFO"} else level.lower()


