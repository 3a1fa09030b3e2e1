"""The embedded vector store: Qdrant's own engine in-process (qdrant-edge), one directory = one collection.

A shard belongs to one process (its write-ahead log is locked, and so is ``<shard>.lock`` beside it), so this
backend serves the single-process topology (`compassmem dev`); the production split uses the Qdrant server backend.
The point layout and the store logic live in ``event_payload``; this module only speaks qdrant-edge.

Erasure: a deleted point stays in its segment's files until an optimiser rewrites the segment, and the write-ahead
log keeps every operation, the deleted point's upsert included, until its file is recycled; qdrant-edge offers no
call that purges the log. ``compact()`` therefore rewrites the shard: the live points are copied into a new shard
beside it, which then replaces the old one (``_finish_compaction``: the steps, and what an interruption leaves).
"""

from __future__ import annotations

import fcntl
import functools
import json
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import structlog
from qdrant_edge import (
    CountRequest,
    Distance,
    EdgeConfig,
    EdgeShard,
    EdgeSparseVectorParams,
    EdgeVectorParams,
    FieldCondition,
    Filter,
    HasIdCondition,
    KeywordIndexParams,
    MatchAny,
    MatchValue,
    Modifier,
    NestedCondition,
    PayloadSchemaType,
    Point,
    Query,
    QueryBatchRequest,
    QueryRequest,
    RangeDateTime,
    ScrollRequest,
    UpdateOperation,
)
from qdrant_edge import SparseVector as EdgeSparseVector

from compassmem.core.contracts.search import SparseVector
from compassmem.sinks import event_payload as layout
from compassmem.sinks.event_payload import Nearest, Payload, PointData, PointFilter, PointStore

log = structlog.get_logger(__name__)

# Siblings of the shard's directory during a compaction: the copy being written, the finished copy (its rename to
# this name is the commit point), and the old shard on its way out.
_COPYING, _COPIED, _REPLACED = ".compacting", ".compacted", ".erased"
_COPY_PAGE = 256
_Args = ParamSpec("_Args")
_Result = TypeVar("_Result")


class _Gate:
    """Store calls share the shard; a compaction, which closes and replaces it, has it alone. A waiting compaction
    holds back new calls, so a busy API cannot starve it. Not re-entrant: a call never makes another."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._sharing = 0
        self._alone = False
        self._waiting = 0

    @contextmanager
    def shared(self) -> Iterator[None]:
        with self._condition:
            self._condition.wait_for(lambda: not self._alone and not self._waiting)
            self._sharing += 1
        try:
            yield
        finally:
            with self._condition:
                self._sharing -= 1
                self._condition.notify_all()

    @contextmanager
    def alone(self) -> Iterator[None]:
        with self._condition:
            self._waiting += 1
            self._condition.wait_for(lambda: not self._alone and not self._sharing)
            self._waiting -= 1
            self._alone = True
        try:
            yield
        finally:
            with self._condition:
                self._alone = False
                self._condition.notify_all()


def _sharing(method: Callable[_Args, _Result]) -> Callable[_Args, _Result]:
    @functools.wraps(method)
    def shared(*args: _Args.args, **kwargs: _Args.kwargs) -> _Result:
        with args[0]._gate.shared():  # type: ignore[attr-defined]
            return method(*args, **kwargs)

    return shared


# Inside the shard's folder: which embedder made its vectors (``VectorStore.claim_vector_space``).
VECTOR_SPACE_FILE = "compassmem-vector-space.json"


class ShardInUse(RuntimeError):
    """Another process (or another store object of this one) holds the shard."""


class EdgeVectorStore(PointStore):
    """Events and turns as points of an embedded qdrant-edge shard at ``path`` (created on first use).

    Until ``build_search_index()`` runs, dense searches are exact over the points their filter selects: fine for a
    few thousand turns, 13 ms per search over a 100k-turn tenant. It runs the shard's ``optimize()``, which builds
    the HNSW graph (0.3-0.5 ms per search afterwards, same shard) but holds the GIL for its whole run (28 s for 100k
    points on 2 cores), so it is never called on a live worker or API: ``compassmem build-index`` runs it while
    the memory is closed. Points written later go to a new segment searched exactly until the next run.
    Returned embeddings are unit-normalised: Qdrant stores cosine vectors normalised.
    """

    def __init__(self, path: Path, dim: int = 384) -> None:
        self.path = Path(path)
        self.dim = dim
        self._config = EdgeConfig(
            vectors={layout.DENSE_VECTOR: EdgeVectorParams(size=dim, distance=Distance.Cosine)},
            sparse_vectors={name: EdgeSparseVectorParams(modifier=Modifier.Idf) for name in layout.SPARSE_VECTORS},
        )
        self._gate = _Gate()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = _lock(self.path)
        try:
            _finish_compaction(self.path)
            existing = self.path.is_dir() and any(self.path.iterdir())
            self._shard: EdgeShard | None = _open_shard(self.path, self._config, existing)
        except BaseException:
            os.close(self._lock)
            raise
        log.info("vector_store.opened", backend="qdrant-edge", path=str(self.path), dim=dim, existing=existing)

    @property
    def shard(self) -> EdgeShard:
        if self._shard is None:
            raise RuntimeError(f"the qdrant-edge store at {self.path} is closed")
        return self._shard

    @_sharing
    def flush(self) -> None:
        self.shard.flush()

    @_sharing
    def build_search_index(self) -> None:
        started = time.perf_counter()
        self.shard.optimize()
        info = self.shard.info()
        log.info("vector_store.index_built", backend="qdrant-edge", path=str(self.path), points=info.points_count,
                 segments=info.segments_count, seconds=round(time.perf_counter() - started, 1))

    def compact(self) -> bool:
        """Rewrite the shard with its live points only, so that nothing deleted stays in its files (segments and
        write-ahead log). Calls wait meanwhile (about 13 s per 100k points on 2 cores). The copy has no search
        index: dense searches are exact until ``build_search_index`` runs again."""
        with self._gate.alone():
            started = time.perf_counter()
            shard = self.shard
            shard.flush()
            copied = _write_copy(shard, self.path, self._config)
            # The copy is complete and renamed into place as <path>.compacted: from here an interruption completes
            # the swap at the next open instead of undoing it.
            self._shard = None
            shard.close()
            _finish_compaction(self.path)
            self._shard = _open_shard(self.path, self._config, existing=True)
        log.info("vector_store.compacted", backend="qdrant-edge", path=str(self.path), points=copied,
                 seconds=round(time.perf_counter() - started, 2))
        return True

    def warm_page_cache(self, max_bytes: int) -> int:
        """Read the segments' payload files (``segments/*/payload_storage``) in order, up to ``max_bytes``.

        qdrant-edge maps them and reads a point's payload where it lies; after a restart or an index build their
        pages are not cached, and every point read faulted one in from disk (about 80 us each, most of a cold
        query's load). A sequential read caches them for a fraction of that."""
        read = 0
        chunk = memoryview(bytearray(1 << 20))
        for file in sorted(self.path.glob("segments/*/payload_storage/*")):
            try:
                with file.open("rb", buffering=0) as handle:
                    while read < max_bytes and (size := handle.readinto(chunk[: max_bytes - read])):
                        read += size
            except OSError:  # a segment an optimisation replaced meanwhile: nothing to warm there
                continue
            if read >= max_bytes:
                break
        return read

    @property
    def _vector_space_file(self) -> Path:
        # Inside the shard's folder, so that copying the folder carries it (qdrant-edge ignores the file).
        return self.path / VECTOR_SPACE_FILE

    def recorded_vector_space(self) -> str | None:
        try:
            return str(json.loads(self._vector_space_file.read_text())["vector_space"])
        except FileNotFoundError:
            return None

    def record_vector_space(self, space: str) -> None:
        temporary = self._vector_space_file.with_suffix(".tmp")
        temporary.write_text(json.dumps({"vector_space": space}))
        os.replace(temporary, self._vector_space_file)

    def close(self) -> None:
        with self._gate.alone():
            if self._shard is None:
                return
            shard, self._shard = self._shard, None
            try:
                shard.flush()
                shard.close()
            finally:
                os.close(self._lock)
        log.info("vector_store.closed", backend="qdrant-edge", path=str(self.path))

    @_sharing
    def _upsert(self, points: Sequence[PointData]) -> None:
        self.shard.update(
            UpdateOperation.upsert_points(
                [
                    Point(
                        id=p.id,
                        vector=p.vectors(_sparse),
                        payload=p.payload,
                    )
                    for p in points
                ]
            )
        )

    @_sharing
    def _scroll_page(self, where: PointFilter, offset: Any, limit: int, payload_keys: Sequence[str] | None = None,
                     vectors: bool = True) -> tuple[list[tuple[Payload, Any]], Any]:
        records, next_offset = self.shard.scroll(
            ScrollRequest(
                offset=offset, limit=limit, filter=_filter(where),
                with_payload=list(payload_keys) if payload_keys is not None else True,
                with_vector=[layout.DENSE_VECTOR] if vectors else False,
            )
        )
        return [(record.payload, record.vector) for record in records], next_offset

    @_sharing
    def _query_keys(self, queries: Sequence[Nearest],
                    payload_keys: Sequence[Sequence[str] | None]) -> list[list[tuple[int, Payload | None, float]]]:
        answers = self._run([self._request(query, keys) for query, keys in zip(queries, payload_keys, strict=True)])
        return [[(hit.id.int, hit.payload if keys is not None else None, float(hit.score)) for hit in hits]
                for hits, keys in zip(answers, payload_keys, strict=True)]

    @_sharing
    def _payloads(self, keys: Sequence[int], payload_keys: Sequence[str]) -> dict[int, Payload]:
        records = self.shard.retrieve([uuid.UUID(int=key) for key in keys], with_payload=list(payload_keys),
                                      with_vector=False)
        return {record.id.int: record.payload for record in records}

    @staticmethod
    def _request(query: Nearest, payload_keys: Sequence[str] | None) -> QueryRequest:
        """The engine request of a search, with the payload's ``payload_keys`` (None: no payload)."""
        return QueryRequest(limit=query.limit, filter=_filter(query.where),
                            with_payload=list(payload_keys) if payload_keys is not None else False,
                            with_vector=False,
                            query=Query.Nearest(_sparse(query.query) if isinstance(query.query, SparseVector)
                                                else query.query, using=query.using))

    def _run(self, requests: list[QueryRequest]) -> list[Any]:
        if len(requests) > 1:
            return self.shard.query_batch(QueryBatchRequest(requests))
        return [self.shard.query(requests[0])]

    @_sharing
    def _delete(self, where: PointFilter) -> None:
        self.shard.update(UpdateOperation.delete_points_by_filter(_filter(where)))

    @_sharing
    def _count(self, where: PointFilter) -> int:
        return int(self.shard.count(CountRequest(exact=True, filter=_filter(where))))


def _sparse(vector: SparseVector) -> EdgeSparseVector:
    return EdgeSparseVector(indices=list(vector.indices), values=list(vector.values))


def _filter(where: PointFilter) -> Filter:
    must: list[Any] = [
        FieldCondition(key=key, match=MatchAny(list(value)) if isinstance(value, tuple) else MatchValue(value))
        for key, value in where.match.items()
    ]
    must.extend(FieldCondition(key=bound.key, range=RangeDateTime(gte=_iso(bound.since), lte=_iso(bound.until)))
                for bound in where.within)
    must.extend(NestedCondition(key=key, filter=_filter(inner)) for key, inner in where.some)
    if where.point_ids is not None:
        must.append(HasIdCondition(point_ids=set(where.point_ids)))
    should: list[Any] | None = [_filter(option) for option in where.any_of] or None
    return Filter(must=must, should=should)


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def _open_shard(path: Path, config: EdgeConfig, existing: bool) -> EdgeShard:
    """The shard at ``path`` (created when not ``existing``) with the payload indexes the store's filters use."""
    try:
        # load() with a config checks it against the stored segments, so a dimension change fails here
        # (and so does a shard written before turns had their own sparse vector).
        shard = EdgeShard.load(str(path), config) if existing else EdgeShard.create(str(path), config)
    except Exception as exc:
        hint = ""
        if "WAL" in str(exc):
            raise ShardInUse(f"cannot open the qdrant-edge shard at {path} (is another process or store object "
                             f"using this directory?): {exc}") from exc
        if "incompatible" in str(exc).lower():
            hint = " (made for another dimension, or by a compassmem without turn vectors? start a new directory)"
        raise RuntimeError(f"cannot open the qdrant-edge shard at {path}{hint}: {exc}") from exc
    shard.update(UpdateOperation.create_field_index(layout.TENANT_FIELD, KeywordIndexParams(is_tenant=True)))
    for field in layout.KEYWORD_INDEX_FIELDS:
        shard.update(UpdateOperation.create_field_index(field, PayloadSchemaType.Keyword))
    for field in layout.DATETIME_INDEX_FIELDS:
        shard.update(UpdateOperation.create_field_index(field, PayloadSchemaType.Datetime))
    return shard


def _lock(path: Path) -> int:
    """Hold ``<path>.lock`` for the store's lifetime: the shard's own lock (its write-ahead log) cannot cover the
    compaction's sibling directories, which an open in another process would otherwise tidy away mid-copy."""
    handle = os.open(_sibling(path, ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(handle)
        raise ShardInUse(f"cannot open the qdrant-edge shard at {path} (is another process or store object using "
                         "this directory?)") from None
    return handle


def _sibling(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)


def _write_copy(shard: EdgeShard, path: Path, config: EdgeConfig) -> int:
    """Copy the live points of ``shard`` (whose directory is ``path``) into a new shard and rename it to
    ``<path>.compacted``; the number of points copied."""
    copying = _sibling(path, _COPYING)
    shutil.rmtree(copying, ignore_errors=True)
    copy = _open_shard(copying, config, existing=False)
    try:
        copied, offset = 0, None
        while True:
            records, offset = shard.scroll(ScrollRequest(offset=offset, limit=_COPY_PAGE, with_payload=True,
                                                         with_vector=True))
            if records:
                copy.update(UpdateOperation.upsert_points(
                    [Point(id=record.id, vector=record.vector, payload=record.payload) for record in records]))
            copied += len(records)
            if offset is None:
                break
        copy.flush()
    finally:
        copy.close()
    live = int(shard.count(CountRequest(exact=True)))
    if copied != live:
        raise RuntimeError(f"compacting {path}: copied {copied} points of {live}; the shard is left as it was")
    for extra in path.glob("compassmem-*.json"):  # the store's own records (the vector space) travel with it
        shutil.copy2(extra, copying / extra.name)
    _sync_tree(copying)
    os.rename(copying, _sibling(path, _COPIED))
    _sync_directory(path.parent)
    return copied


def _finish_compaction(path: Path) -> None:
    """Bring a compaction to its end, or undo one that had not reached its commit point; every open calls it too.

    The steps: the copy is written as ``<path>.compacting``; renamed to ``<path>.compacted`` (the commit point); the
    old shard renamed to ``<path>.erased``; the copy renamed to ``<path>``; the old shard deleted. A process killed
    before the commit point leaves the old shard whole (the partial copy is deleted here); one killed after it
    leaves a complete copy, which this puts in place. At no point is the shard's data in neither directory."""
    copied, replaced = _sibling(path, _COPIED), _sibling(path, _REPLACED)
    if copied.is_dir():
        if path.exists():
            shutil.rmtree(replaced, ignore_errors=True)
            os.rename(path, replaced)
        os.rename(copied, path)
        _sync_directory(path.parent)
    shutil.rmtree(replaced, ignore_errors=True)
    shutil.rmtree(_sibling(path, _COPYING), ignore_errors=True)


def _sync_tree(root: Path) -> None:
    """fsync every file and directory under ``root``: the copy must be on disk before it may replace the shard."""
    for directory, _, files in os.walk(root):
        for name in files:
            handle = os.open(os.path.join(directory, name), os.O_RDONLY)
            try:
                os.fsync(handle)
            finally:
                os.close(handle)
        _sync_directory(Path(directory))


def _sync_directory(directory: Path) -> None:
    handle = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)
