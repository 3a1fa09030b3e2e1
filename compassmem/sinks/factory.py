"""Wiring: open the vector and graph stores the settings ask for (embedded defaults when no URL is set)."""

from __future__ import annotations

import os
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import structlog

from compassmem.core.config import DATA_DIR_VARIABLE, Settings
from compassmem.core.models import DEFAULT_TENANT, Event
from compassmem.sinks.failures import is_store_unavailable
from compassmem.sinks.falkordb_backend import FalkorDBGraphStore
from compassmem.sinks.falkordb_server import EmbeddedFalkorDB, FalkorDBStartupError
from compassmem.sinks.graph_store import GraphStore
from compassmem.sinks.qdrant_edge_backend import EdgeVectorStore, ShardInUse
from compassmem.sinks.qdrant_server_backend import QdrantServerVectorStore
from compassmem.sinks.vector_store import SERVER_STORES_REMEDY, VectorSpaceMismatch, VectorStore
from compassmem.system.dev_server import running_dev

log = structlog.get_logger(__name__)


class StoreOpenError(RuntimeError):
    """The stores cannot be opened (unusable data directory, stores held by another process, a server that does
    not start); the message says why, for the command line to print without a traceback."""


def check_data_dir(data_dir: Path) -> Path:
    """Create ``data_dir`` if needed and prove this process can write there (a probe file; permission bits and
    read-only mounts both show); StoreOpenError names COMPASSMEM_DATA_DIR otherwise."""
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        handle, probe = tempfile.mkstemp(prefix=".write-probe-", dir=data_dir)
        os.close(handle)
        os.unlink(probe)
    except OSError as error:
        blocking = next((path for path in (data_dir, *data_dir.parents) if _is_non_directory(path)), None)
        if blocking == data_dir:
            reason = "it is a file"
        elif blocking is not None:
            reason = f"{blocking} is a file"
        else:
            reason = error.strerror or str(error)
            if error.filename and Path(error.filename) != data_dir and not str(error.filename).startswith(
                str(data_dir / ".write-probe-")
            ):
                reason += f": {error.filename}"
        raise StoreOpenError(f"{DATA_DIR_VARIABLE}={data_dir}: not a writable directory ({reason})") from error
    return data_dir


def _is_non_directory(path: Path) -> bool:
    try:
        return path.exists() and not path.is_dir()
    except OSError:  # e.g. no permission to look: not the reason we are after
        return False


def uses_data_dir(settings: Settings) -> bool:
    """True when an embedded store keeps its files in ``settings.data_dir``."""
    return not settings.qdrant_url or not settings.falkordb_url


@dataclass
class Stores:
    vectors: VectorStore
    graph: GraphStore
    embedded_falkordb: EmbeddedFalkorDB | None = None

    @property
    def embedded_vectors(self) -> bool:
        """True when the vectors live in an in-process shard that no other process may open."""
        return isinstance(self.vectors, EdgeVectorStore)

    def delete_conversation(self, tenant: str, conversation_id: str) -> None:
        """Delete a conversation from both stores (what erasure writes: every caller forgets through here)."""
        self.vectors.delete_conversation(tenant, conversation_id)
        self.graph.delete_conversation(tenant, conversation_id)

    def delete_tenant(self, tenant: str) -> None:
        """Delete every conversation of a tenant from both stores."""
        self.vectors.delete_tenant(tenant)
        self.graph.delete_tenant(tenant)

    def open_events(self, tenant: str, conversation_id: str | None = None) -> list[Event]:
        """The open segments (provisional events, only the vector store holds them) to list beside the graph
        store's events, in time order. One under the id of an event the graph store holds is that event written
        again (the worker applying turns another path stored, a batch redone after a crash): left out, so that a
        listing shows it and counts its turns once, as stored."""
        opened = self.vectors.provisional_events(tenant, conversation_id)
        ids: dict[str, list[str]] = defaultdict(list)
        for event in opened:
            ids[event.conversation_id].append(event.event_id)
        stored = {props["event_id"] for conversation, wanted in ids.items()
                  for props in self.graph.events_by_id(tenant, conversation, wanted)}
        return [event for event in opened if event.event_id not in stored]

    def health(self) -> dict[str, str]:
        """Per store, 'ok' or the error it gave to a cheap read (what ``/healthz`` answers)."""
        return {"vectors": _check(lambda: self.vectors.count(DEFAULT_TENANT)),
                "graph": _check(lambda: self.graph.relations(DEFAULT_TENANT, "healthz"))}

    def compact(self) -> bool:
        """Rewrite both stores' files from what they hold now, so that what was deleted (a redaction, a forget)
        leaves the disk too; returns when it has. False when the vectors' files were not rewritten: a Qdrant
        server's are its operator's to compact (see docs/security.md, Erasure)."""
        started = time.perf_counter()
        vectors = self.vectors.compact()
        self.graph.compact()
        log.info("stores.compacted", vectors=vectors, seconds=round(time.perf_counter() - started, 2))
        return vectors

    def close(self) -> None:
        """Close both stores, then stop the embedded FalkorDB if this object started it."""
        try:
            self.vectors.close()
        finally:
            try:
                self.graph.close()
            finally:
                if self.embedded_falkordb is not None:
                    self.embedded_falkordb.stop()

    def __enter__(self) -> Stores:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _check(probe: Callable[[], object]) -> str:
    try:
        probe()
    except Exception as error:  # noqa: BLE001 - any failure is the answer to "does the store answer?"
        log.warning("stores.health_check_failed", error=repr(error))
        return f"{type(error).__name__}: {error}"
    return "ok"


def open_stores(settings: Settings, dim: int = 384) -> Stores:
    """Open both stores; StoreOpenError when an embedded one cannot be opened (bad data directory, held by another
    process such as a running ``compassmem dev``, a FalkorDB that does not start)."""
    if uses_data_dir(settings):
        check_data_dir(settings.data_dir)
    vectors = open_vector_store(settings, dim)
    server: EmbeddedFalkorDB | None = None
    try:
        if settings.falkordb_url:
            try:
                graph: GraphStore = FalkorDBGraphStore.from_url(settings.falkordb_url)
            except Exception as error:
                raise _unreachable("COMPASSMEM_FALKORDB_URL", settings.falkordb_url, "FalkorDB", error) from error
        else:
            try:
                server = EmbeddedFalkorDB(settings.data_dir / "falkordb").start()
            except FalkorDBStartupError as error:
                raise StoreOpenError(str(error)) from error
            except OSError as error:
                raise StoreOpenError(_embedded_failure(settings, "the embedded FalkorDB", error)) from error
            graph = FalkorDBGraphStore.from_embedded(server)
    except BaseException:
        vectors.close()
        if server is not None:
            server.stop()
        raise
    log.info(
        "stores.opened",
        vectors=type(vectors).__name__,
        graph="external" if settings.falkordb_url else "embedded",
    )
    return Stores(vectors=vectors, graph=graph, embedded_falkordb=server)


def open_vector_store(settings: Settings, dim: int = 384) -> VectorStore:
    """The configured vector store, claimed for the configured embedder (VectorStore.claim_vector_space)."""
    store = _vector_backend(settings, dim)
    try:
        store.claim_vector_space(settings.vector_space)
    except VectorSpaceMismatch as error:
        store.close()
        where = f"COMPASSMEM_QDRANT_URL={settings.qdrant_url}" if settings.qdrant_url else \
            f"{DATA_DIR_VARIABLE}={settings.data_dir}"
        # `compassmem reembed` rebuilds embedded stores only: with a server store the message names the way there.
        told = VectorSpaceMismatch(error.recorded, error.configured, remedy=SERVER_STORES_REMEDY) \
            if settings.qdrant_url or settings.falkordb_url else error
        raise StoreOpenError(f"{where}: {told}") from error
    except BaseException:
        store.close()
        raise
    return store


def _vector_backend(settings: Settings, dim: int) -> VectorStore:
    if settings.qdrant_url:
        try:
            return QdrantServerVectorStore.from_url(
                settings.qdrant_url, settings.qdrant_collection, dim, api_key=settings.qdrant_api_key
            )
        except Exception as error:
            raise _unreachable("COMPASSMEM_QDRANT_URL", settings.qdrant_url, "the Qdrant server", error) from error
    try:
        return EdgeVectorStore(settings.data_dir / "qdrant", dim)
    except ShardInUse:
        # Expected while `compassmem dev` runs: the message says where it serves; the shard's own error adds nothing.
        raise StoreOpenError(in_use_message(settings.data_dir)) from None
    except OSError as error:
        raise StoreOpenError(_embedded_failure(settings, "the qdrant-edge shard", error)) from error
    except RuntimeError as error:  # a shard made for another dimension, or by an older compassmem
        raise StoreOpenError(str(error)) from error


def in_use_message(data_dir: Path) -> str:
    """One line for a command (or a ``Memory``) that finds the embedded stores of ``data_dir`` held by another
    process: where the running server is, and what to do instead."""
    where = f"{DATA_DIR_VARIABLE}={data_dir}"
    server = running_dev(data_dir)
    if server is None or server.api_url is None:
        holder = (f"`compassmem dev` (pid {server.pid}, still starting)" if server is not None else
                  "another process (a `compassmem dev`, `worker` or `mcp`, or a program's Memory)")
        return (f"{where} is held by {holder}: ask a running `compassmem dev` over HTTP instead (--url URL on ask "
                f"and ingest, compassmem.Client(URL) in Python), stop that process, or set another {DATA_DIR_VARIABLE}")
    url = server.api_url
    return (f"{where} is held by `compassmem dev` (pid {server.pid}) serving {url}: use that server instead "
            f"(`compassmem ask --url {url} ...`, `compassmem ingest --url {url} FILE`, compassmem.Client(\"{url}\") "
            f"in Python), stop it (kill {server.pid}), or set another {DATA_DIR_VARIABLE}")


def _unreachable(variable: str, url: str, what: str, error: Exception) -> Exception:
    """A server that cannot be reached is a setting to check (one line); anything else stays the error it is."""
    if is_store_unavailable(error):
        return StoreOpenError(f"{variable}={url}: cannot reach {what} ({error})")
    return error


def _embedded_failure(settings: Settings, what: str, error: OSError) -> str:
    where = f": {error.filename}" if error.filename else ""
    return f"{DATA_DIR_VARIABLE}={settings.data_dir}: cannot open {what} ({error.strerror or error}{where})"
