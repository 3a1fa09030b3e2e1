"""Process wiring: ``compassmem worker`` (against configured servers) and ``compassmem dev`` (everything in one).

``dev`` starts the memory-only dev broker, opens the embedded stores and runs the worker in this process. Other
parts that must share those in-process stores (the query API: an embedded qdrant-edge shard belongs to one
process) join as *sidecars*: factories that receive the ``DevContext`` and return something with
``start()``/``stop()``, e.g. ``query_api.server.BackgroundServer`` around an ASGI app. They are started before
the worker runs and stopped after it returns.
"""

from __future__ import annotations

import asyncio
import faulthandler
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import structlog
from prometheus_client import start_http_server

from compassmem.core.config import Settings
from compassmem.embedding.embedders import Embedder, make_embedder
from compassmem.core.logging_setup import library_logging_config
from compassmem.monitoring.measured_stores import measure_stores
from compassmem.monitoring.metrics import MemoryMetrics
from compassmem.system.process_gc import freeze_long_lived_objects
from compassmem.sinks.factory import StoreOpenError, Stores, in_use_message, open_stores
from compassmem.streams.broker import DevBroker
from compassmem.streams.topics import ensure_topics, topic_specs
from compassmem.system.dev_server import DevServer, announced, running_dev
from compassmem.core.terminal import echo

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
    metrics: MemoryMetrics
    # What a sidecar that serves the query API calls with its URL once it listens: `dev` announces it.
    api_listening: Callable[[str], None] = lambda url: None


SidecarFactory = Callable[[DevContext], Sidecar]


def run_streaming_worker(settings: Settings, bootstrap: str, stores: Stores, embedder: Embedder,
                         metrics: MemoryMetrics, sidecars: Sequence[Sidecar] = ()) -> int:
    """Run the Faust worker in this thread until SIGINT/SIGTERM; returns the exit status."""
    import faust

    from compassmem.streams.app import StreamingWorker

    streaming = StreamingWorker(settings, stores, embedder, bootstrap, metrics=metrics)
    worker = faust.Worker(streaming.app, loglevel=_faust_level(settings.log_level), redirect_stdouts=False,
                          quiet=True, logging_config=library_logging_config(None))
    worker.spinner = None  # a terminal spinner would write escape codes into every log file
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
    # `kill -QUIT <pid>` prints every thread's stack to stderr: the way to see where a stuck worker waits.
    faulthandler.register(signal.SIGQUIT, all_threads=True)
    bootstrap = settings.bootstrap_servers
    ensure_topics(bootstrap, topic_specs(settings))
    embedder = make_embedder(settings)
    metrics = MemoryMetrics(conversation_labels=settings.metrics_conversation_labels, api_keys=settings.api_keys)
    try:
        server, _ = start_http_server(settings.metrics_port, settings.metrics_host, registry=metrics.registry)
    except OSError as error:
        echo(f"error: COMPASSMEM_METRICS_HOST/COMPASSMEM_METRICS_PORT: cannot serve /metrics on "
              f"{settings.metrics_host}:{settings.metrics_port}: {error.strerror or error}", file=sys.stderr)
        return 2
    log.info("worker.metrics", url=f"http://{settings.metrics_host}:{server.server_port}/metrics")
    try:
        with open_stores(settings, dim=embedder.dim) as stores:
            freeze_long_lived_objects()
            return run_streaming_worker(settings, bootstrap, measure_stores(stores, metrics), embedder, metrics)
    finally:
        server.shutdown()


def run_dev(settings: Settings, sidecars: Sequence[SidecarFactory] = ()) -> int:
    """``compassmem dev``: dev broker + embedded stores + worker (+ sidecars) in this process, announced in the
    data directory while it runs (``system/dev_server.py``)."""
    if running_dev(settings.data_dir) is not None:
        # Before the broker takes a port: say which process holds the directory, not that a port is taken.
        raise StoreOpenError(in_use_message(settings.data_dir))
    with DevBroker(port=settings.dev_broker_port, log_path=settings.data_dir / "dev-broker.log") as broker:
        # The worker must use this broker whatever COMPASSMEM_KAFKA_BOOTSTRAP says.
        settings = settings.model_copy(update={"kafka_bootstrap": broker.bootstrap})
        echo(f"dev broker on {broker.bootstrap} (memory-only: topics and offsets vanish when `compassmem dev` "
              "stops; the stores keep the memory built)", file=sys.stderr)
        # `compassmem produce` and the other commands find it in the data directory; a client of your own needs this.
        echo(f"export COMPASSMEM_KAFKA_BOOTSTRAP={broker.bootstrap}", file=sys.stderr)
        ensure_topics(broker.bootstrap, topic_specs(settings))
        embedder = make_embedder(settings)
        # One registry for the worker and its sidecars: the API's /metrics shows both.
        metrics = MemoryMetrics(conversation_labels=settings.metrics_conversation_labels, api_keys=settings.api_keys)
        with open_stores(settings, dim=embedder.dim) as opened, \
                announced(settings.data_dir, DevServer(pid=os.getpid(), broker=broker.bootstrap)) as api_listening:
            stores = measure_stores(opened, metrics)
            context = DevContext(settings=settings, bootstrap=broker.bootstrap, stores=stores, embedder=embedder,
                                 metrics=metrics, api_listening=api_listening)
            made = [factory(context) for factory in sidecars]
            freeze_long_lived_objects()
            return run_streaming_worker(settings, broker.bootstrap, stores, embedder, metrics, made)


def _faust_level(level: str) -> str:
    # Faust's own INFO lines are many and unstructured (ours come through structlog): only DEBUG shows them.
    return {"DEBUG": "info", "INFO": "warning"}.get(level, level.lower())




class InProcessWorker:
    """The streaming worker on a thread of this process, for benchmarks and tests that must read the embedded
    stores while it runs (a qdrant-edge shard belongs to one process). Production runs ``compassmem worker``.

    Faust gets its own event loop on the thread and installs no signal handlers (those belong to the main
    thread); ``stop()`` stops it the way SIGTERM would.
    """

    def __init__(self, settings: Settings, bootstrap: str, stores: Stores, embedder: Embedder,
                 metrics: MemoryMetrics | None = None) -> None:
        self.settings = settings
        self.metrics = metrics
        self.bootstrap = bootstrap
        self.stores = stores
        self.embedder = embedder
        self.streaming: object | None = None
        self.exit_code: int | None = None
        self._ready = threading.Event()
        # What ended the thread before the worker was built (bad settings, stores): start() raises it.
        self._failed: BaseException | None = None
        self._worker: object | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._run, name="compassmem-worker", daemon=True)

    def _run(self) -> None:
        import faust

        from compassmem.streams.app import StreamingWorker

        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self._loop = loop
        try:
            streaming = StreamingWorker(self.settings, self.stores, self.embedder, self.bootstrap,
                                        metrics=self.metrics)
        except Exception as error:  # noqa: BLE001 - handed to start(), which raises it in the caller's thread
            self._failed = error
            self._ready.set()
            return
        self.streaming = streaming

        class _ThreadWorker(faust.Worker):
            def install_signal_handlers(self) -> None:
                """Signals are the main thread's business."""

        worker = _ThreadWorker(streaming.app, loop=loop, loglevel=_faust_level(self.settings.log_level),
                               redirect_stdouts=False, quiet=True, override_logging=False)
        worker.spinner = None
        self._worker = worker
        self._ready.set()
        try:
            worker.execute_from_commandline()
        except SystemExit as exit_:
            self.exit_code = int(exit_.code or 0)
        finally:
            streaming.executor.shutdown(wait=True)

    def start(self, timeout_s: float = 30.0) -> InProcessWorker:
        self._thread.start()
        if not self._ready.wait(timeout_s):
            raise RuntimeError(f"the in-process worker did not start within {timeout_s:g} s")
        if self._failed is not None:
            raise RuntimeError(f"the in-process worker failed to start: {self._failed}") from self._failed
        return self

    def stop(self, timeout_s: float = 30.0) -> None:
        worker, loop = self._worker, self._loop
        if worker is not None and loop is not None and self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(worker.stop(), loop)  # type: ignore[attr-defined]
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            raise RuntimeError(f"the in-process worker did not stop within {timeout_s:g} s")
