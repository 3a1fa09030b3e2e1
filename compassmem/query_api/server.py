"""Running the query API: service wiring, the ``compassmem api`` entry point, and a background server.

``compassmem api`` is the production split (DESIGN.md section 5): any number of API processes next to the
workers, all against a Qdrant server and an external FalkorDB. An embedded qdrant-edge shard belongs to the
one process that opened it, and an embedded FalkorDB would be a private graph no worker writes to, so this
entry point refuses both; ``compassmem dev`` runs the API inside the worker process on the embedded stores
(it calls ``build_services`` + ``create_app`` + ``BackgroundServer`` with its own objects).
"""

from __future__ import annotations

import socket
import sys
import threading
import time
from types import TracebackType

import structlog
import uvicorn
from fastapi import FastAPI
from kafka.errors import KafkaError

from compassmem.config import Settings
from compassmem.embedding import Embedder
from compassmem.llm import ChatClient, LlmAnswerer
from compassmem.query_api.app import ApiServices, create_app
from compassmem.query_api.conversation_view import ViewCache
from compassmem.query_api.engine import QueryEngine
from compassmem.query_api.turn_publisher import (
    ControlPublisher,
    KafkaControlPublisher,
    KafkaTurnPublisher,
    TurnPublisher,
)
from compassmem.sinks.factory import Stores, open_stores

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


def build_services(settings: Settings, stores: Stores, embedder: Embedder, *, views: ViewCache | None = None,
                   turn_publisher: TurnPublisher | None = None,
                   control_publisher: ControlPublisher | None = None) -> ApiServices:
    """The engine and its view cache over open stores; ``compassmem dev`` passes the view cache its pipeline
    invalidates, a separate API process lets views expire after ``api_view_max_age_s``."""
    views = views or ViewCache(stores.vectors, stores.graph, max_age_s=settings.api_view_max_age_s)
    client = ChatClient.from_settings(settings)
    engine = QueryEngine(embedder, stores.vectors, views, answerer=LlmAnswerer(client) if client else None)
    return ApiServices(engine=engine, stores=stores, views=views, settings=settings,
                       turn_publisher=turn_publisher, control_publisher=control_publisher)


def run_api(settings: Settings) -> int:
    """``compassmem api``: serve until interrupted on ``api_host:api_port``; returns the exit status."""
    try:
        check_api_topology(settings)
    except ApiStartupError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    from compassmem.embedding import SentenceTransformerEmbedder

    turns: KafkaTurnPublisher | None = None
    control: KafkaControlPublisher | None = None
    if settings.kafka_bootstrap:
        try:
            turns = KafkaTurnPublisher(settings.kafka_bootstrap, settings.turns_topic)
            control = KafkaControlPublisher(settings.kafka_bootstrap, settings.control_topic)
        except KafkaError as error:
            print(f"error: cannot reach Kafka at {settings.kafka_bootstrap}: {error}", file=sys.stderr)
            return 2
    else:
        log.warning("api.no_kafka", effect="POST /v1/turns answers 503 and DELETE records no forget command",
                    fix="set COMPASSMEM_KAFKA_BOOTSTRAP")
    embedder = SentenceTransformerEmbedder(settings.embedding_model, settings.embedding_batch_size)
    try:
        with open_stores(settings, dim=embedder.dim) as stores:
            app = create_app(build_services(settings, stores, embedder, turn_publisher=turns,
                                            control_publisher=control))
            log.info("api.listening", url=f"http://{settings.api_host}:{settings.api_port}")
            uvicorn.run(app, host=settings.api_host, port=settings.api_port, log_level=settings.log_level.lower())
    finally:
        for publisher in (turns, control):
            if publisher is not None:
                publisher.close()
    return 0


class BackgroundServer:
    """uvicorn serving an app from a daemon thread, for ``compassmem dev``, tests and benchmarks.

    The socket is bound here, before the thread starts, so the port (0 = any free one) is known and
    reserved at once and ``url`` can be handed out before the first request.
    """

    def __init__(self, app: FastAPI, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning") -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._socket = socket.socket(family, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind((host, port))
        self.port = int(self._socket.getsockname()[1])
        self.url = f"http://{f'[{host}]' if family == socket.AF_INET6 else host}:{self.port}"
        self._server = uvicorn.Server(uvicorn.Config(app, log_level=log_level, access_log=False))
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
