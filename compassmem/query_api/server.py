"""Running the query API: service wiring, the ``compassmem api`` entry point, and a background server.

``compassmem api`` is the production split: any number of API processes next to the
workers, all against a Qdrant server and an external FalkorDB. An embedded qdrant-edge shard belongs to the
one process that opened it, and an embedded FalkorDB would be a private graph no worker writes to, so this
entry point refuses both; ``compassmem dev`` runs the API inside the worker process on the embedded stores,
as the sidecar ``dev_api_sidecar`` builds it.
"""

from __future__ import annotations

import socket
import sys
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING

import structlog
import uvicorn
from fastapi import FastAPI
from uvicorn.config import LOGGING_CONFIG

from compassmem.core.config import Settings
from compassmem.embedding.embedders import Embedder, make_embedder
from compassmem.core.logging_setup import library_logging_config
from compassmem.system.loopback import is_loopback_host
from compassmem.library.memory import Memory
from compassmem.monitoring.measured_stores import measure_stores
from compassmem.monitoring.metrics import MemoryMetrics
from compassmem.system.process_gc import freeze_long_lived_objects
from compassmem.publish.publisher import ControlPublisher, KafkaTurnPublisher, PublishError, TurnPublisher
from compassmem.query_api.app import create_app
from compassmem.query_api.change_listener import ChangeFeedListener
from compassmem.query_api.dependencies import ApiServices
from compassmem.sinks.factory import Stores, open_stores
from compassmem.core.terminal import echo

if TYPE_CHECKING:
    from compassmem.streams.runner import DevContext

log = structlog.get_logger(__name__)


class ApiStartupError(RuntimeError):
    """The API cannot start with these settings; the message says why and what to do instead."""


def check_api_topology(settings: Settings) -> None:
    """A separate API process needs shared stores: a Qdrant server and an external FalkorDB."""
    if not settings.qdrant_url:
        raise ApiStartupError(
            "compassmem api needs a Qdrant server (COMPASSMEM_QDRANT_URL): without one the vectors would be the "
            f"embedded qdrant-edge shard in {settings.data_dir / 'qdrant'}, which belongs to the one process that "
            "opened it, so a separate API process cannot share it with the worker. Run `compassmem dev` "
            "(worker and API in one process on the embedded stores), or point both at a Qdrant server."
        )
    if not settings.falkordb_url:
        raise ApiStartupError(
            "compassmem api needs an external FalkorDB (COMPASSMEM_FALKORDB_URL): without one it would start an "
            "embedded FalkorDB of its own, a graph no worker writes to. Run `compassmem dev`, or point both the "
            "worker and the API at one FalkorDB."
        )


def check_exposure(settings: Settings, insecure_no_auth: bool) -> None:
    """Listening beyond this machine while some tenant needs no key must be asked for (``--insecure-no-auth``):
    anyone who can reach the port could read, add to and forget that memory."""
    if is_loopback_host(settings.api_host) or settings.api_auth_required:
        return
    if insecure_no_auth:
        log.warning("api.insecure_no_auth", host=settings.api_host,
                    effect="tenants without an API key are open to anyone who can reach this address")
        return
    raise ApiStartupError(
        f"the API would listen on {settings.api_host!r}, beyond this machine, and answer tenants without an API key: "
        "set COMPASSMEM_API_KEYS and COMPASSMEM_API_AUTH_REQUIRED=true, listen on 127.0.0.1, or pass "
        "--insecure-no-auth to serve it open anyway"
    )


def build_services(settings: Settings, stores: Stores, embedder: Embedder, metrics: MemoryMetrics, *,
                   turn_publisher: TurnPublisher | None = None,
                   control_publisher: ControlPublisher | None = None) -> ApiServices:
    """The app's services: a ``Memory`` over open stores (its engine, hot tier and verbs, its deletions recording
    their commands through ``control_publisher``) and the publisher of ``POST /v1/turns``. The stores and the
    publishers stay the caller's to close."""
    return ApiServices(memory=Memory(settings, stores=stores, embedder=embedder, control=control_publisher),
                       settings=settings, metrics=metrics, turn_publisher=turn_publisher)


def use_serving_threads(settings: Settings) -> None:
    """Set torch's (process-wide) intra-op thread count for serving queries; see ``api_torch_threads``."""
    import torch

    torch.set_num_threads(settings.api_torch_threads)


def warm_store_in_background(settings: Settings, stores: Stores) -> threading.Thread:
    """Read up to ``api_warm_store_mib`` of the vector store's payload files on a daemon thread, so that the first
    queries after a start do not fault them in point by point (``VectorStore.warm_page_cache``)."""

    def warm() -> None:
        started = time.perf_counter()
        read = stores.vectors.warm_page_cache(settings.api_warm_store_mib * 1024 * 1024)
        if read:
            log.info("api.store_warmed", mib=round(read / 1024 / 1024, 1),
                     seconds=round(time.perf_counter() - started, 2))

    thread = threading.Thread(target=warm, name="compassmem-store-warm", daemon=True)
    thread.start()
    return thread


def run_api(settings: Settings, *, insecure_no_auth: bool = False) -> int:
    """``compassmem api``: serve until interrupted on ``api_host:api_port``; returns the exit status."""
    try:
        check_exposure(settings, insecure_no_auth)
        check_api_topology(settings)
    except ApiStartupError as error:
        echo(f"error: {error}", file=sys.stderr)
        return 2
    publisher: KafkaTurnPublisher | None = None
    if settings.kafka_bootstrap:
        try:
            publisher = KafkaTurnPublisher(settings.kafka_bootstrap, settings.turns_topic, settings.control_topic)
        except PublishError as error:
            echo(f"error: {error}", file=sys.stderr)
            return 2
    else:
        log.warning("api.no_kafka", effect="POST /v1/turns answers 503 and DELETE records no forget command",
                    fix="set COMPASSMEM_KAFKA_BOOTSTRAP")
    try:
        # One question per query: the configured embedder with api_torch_threads intra-op threads.
        embedder = make_embedder(settings, threads=settings.api_torch_threads)
        metrics = MemoryMetrics(conversation_labels=settings.metrics_conversation_labels)
        # Opened here rather than by Memory: every store call the memory makes goes through measure_stores.
        with open_stores(settings, dim=embedder.dim) as stores:
            services = build_services(settings, measure_stores(stores, metrics), embedder, metrics,
                                      turn_publisher=publisher, control_publisher=publisher)
            listener = (ChangeFeedListener(settings.kafka_bootstrap, settings, services.memory.hot,
                                           runtime=services.memory.runtime).start()
                        if settings.kafka_bootstrap else None)
            warm_store_in_background(settings, stores)
            try:
                app = create_app(services)
                freeze_long_lived_objects()
                log.info("api.listening", url=f"http://{settings.api_host}:{settings.api_port}")
                uvicorn.run(app, host=settings.api_host, port=settings.api_port,
                            log_level=settings.log_level.lower(), log_config=library_logging_config(LOGGING_CONFIG))
            finally:
                if listener is not None:
                    listener.stop()
    finally:
        if publisher is not None:
            publisher.close()
    return 0


class ApiSidecar:
    """The query API inside ``compassmem dev``: the worker's stores and embedder, its broker for POST /v1/turns
    and DELETE. torch keeps its default threads here, since the worker's batch embedding shares the process."""

    def __init__(self, settings: Settings, stores: Stores, embedder: Embedder, bootstrap: str,
                 metrics: MemoryMetrics, on_listening: Callable[[str], None] = lambda url: None) -> None:
        self.on_listening = on_listening
        self.publisher = KafkaTurnPublisher(bootstrap, settings.turns_topic, settings.control_topic)
        try:
            self.services = build_services(settings, stores, embedder, metrics, turn_publisher=self.publisher,
                                           control_publisher=self.publisher)
            self.server = _listening_server(create_app(self.services), settings)
            self.listener = ChangeFeedListener(bootstrap, settings, self.services.memory.hot,
                                               runtime=self.services.memory.runtime)
            warm_store_in_background(settings, stores)
        except BaseException:
            self.publisher.close()
            raise
        self.url = self.server.url

    def start(self) -> ApiSidecar:
        self.listener.start()
        self.server.start()
        log.info("api.listening", url=self.url)
        self.on_listening(self.url)
        return self

    def stop(self) -> None:
        try:
            self.server.stop()
        finally:
            self.listener.stop()
            self.publisher.close()


def _listening_server(app: FastAPI, settings: Settings) -> BackgroundServer:
    """The app's server on ``api_host:api_port``; ApiStartupError naming the port and its setting when it is taken
    (rather than an OSError, which would read as a store that stopped answering)."""
    try:
        return BackgroundServer(app, settings.api_host, settings.api_port, log_level=settings.log_level.lower())
    except OSError as error:
        raise ApiStartupError(
            f"the API cannot listen on {settings.api_host}:{settings.api_port} ({error.strerror or error}): another "
            "process (another `compassmem dev`?) uses that port; set COMPASSMEM_API_PORT to a free one") from None


def dev_api_sidecar(context: DevContext) -> ApiSidecar:
    """The sidecar factory for ``streams.runner.run_dev(settings, sidecars=[dev_api_sidecar])``: announces its URL
    through ``context.api_listening`` once it listens."""
    return ApiSidecar(context.settings, context.stores, context.embedder, context.bootstrap, context.metrics,
                      on_listening=context.api_listening)


class BackgroundServer:
    """uvicorn serving an app from a daemon thread, for ``compassmem dev``, tests and benchmarks.

    The socket is bound here, before the thread starts, so the port (0 = any free one) is known and
    reserved at once and ``url`` can be handed out before the first request.
    """

    def __init__(self, app: FastAPI, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning") -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        # proto=IPPROTO_TCP matters: asyncio sets TCP_NODELAY only on sockets that say they are TCP, and without
        # it every response on a keep-alive connection waits ~40 ms for the client's delayed ACK.
        self._socket = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind((host, port))
        self.port = int(self._socket.getsockname()[1])
        self.url = f"http://{f'[{host}]' if family == socket.AF_INET6 else host}:{self.port}"
        self._server = uvicorn.Server(uvicorn.Config(app, log_level=log_level, access_log=False,
                                                    log_config=library_logging_config(LOGGING_CONFIG)))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._socket]},
                                        name=f"api-{self.port}", daemon=True)

    def start(self, timeout_s: float = 15.0) -> BackgroundServer:
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError(f"the API server on {self.url} stopped while starting (see its log)")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the API server on {self.url} did not start within {timeout_s:g} s")
            time.sleep(0.01)
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        self._server.should_exit = True
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            # Open keep-alive connections or a long request: stop waiting for them.
            self._server.force_exit = True
            self._thread.join(timeout_s)
        self._socket.close()

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
