"""What the worker keeps per conversation in its Faust table, and how that is laid out as bytes.

A table value is one ``ConversationRecord``: the conversation's memory-building state plus the position in the
turns log it reflects (``last_offset``). The state is what the next decisions need, not the whole memory (the
stores hold that): the open segment, a bounded hot window of recent events, the relations that can still change,
the cluster centroids and running totals (see ``conversation_memory.py``), so a record stops growing once its
conversation is past the window. The position is what makes a replay harmless: after a kill -9 the table may hold
state written for turns whose offsets were never committed, and those turns come again; any record at or below
``last_offset`` is already in the state and is skipped (see ``processor.py``).

Layout: ``MAGIC`` + 4-byte header length + header JSON + zlib(body JSON). The header is small (ids, offsets,
the open segment's size, when it last changed, the health counts), so the worker's timer reads it for every
conversation without decoding the body. The body is zlib of the state as JSON with the event embeddings and the
cluster centroids (most of the bytes) in one binary block: JSON digits would triple the size, and the restored
state must be bit-identical for a resumed worker to decide exactly as an uninterrupted one would.
"""

from __future__ import annotations

import json
import struct
import zlib

import numpy as np
from pydantic import BaseModel, Field

from compassmem.core.models import Event, partition_key
from compassmem.processors.conversation_memory import ConversationHealth, ConversationMemoryState

MAGIC = b"CMS1"
_HEADER_LENGTH = struct.Struct(">I")
# zlib level 1: most of the gain at a fraction of the cost; this runs once per conversation per batch.
_ZLIB_LEVEL = 1


class RecordHeader(BaseModel):
    tenant: str
    conversation_id: str
    # The turns-topic partition the conversation lives on; each partition's worker only touches its own.
    partition: int
    # Offset of the last turns-topic record of this conversation that is reflected in the state (-1: none).
    last_offset: int = -1
    # Offset of the last record that changed the conversation itself (a turn, a redaction): idle-close markers are
    # requested at and compared with this one, not last_offset, which markers move too. A marker that came stale
    # would otherwise make every marker requested before it was applied stale as well, one round after another
    # (seen after a restart with a backlog). None in records written before it existed: last_offset stands in.
    last_content_offset: int | None = None
    last_turn_id: str | None = None
    # The open segment's event id, upserted to the vector store as a provisional event (freshness).
    provisional_event_id: str | None = None
    open_turns: int = 0
    # Wall-clock seconds of the last turn applied: the idle-close timer compares it with now.
    updated_at: float = 0.0
    # The counts behind the memory-health metrics (degree, duplicate rate) as of this state.
    health: ConversationHealth = Field(default_factory=ConversationHealth)
    # Turns redacted from this conversation: dropped if they come again (a producer's retry, a re-sent export).
    # Bounded by the conversation's own turns, and gone with its record when the conversation is forgotten; in
    # the header because a turn is checked against it before the body is ever decoded.
    redacted_turn_ids: list[str] = Field(default_factory=list)

    @property
    def key(self) -> str:
        return partition_key(self.tenant, self.conversation_id)

    @property
    def content_offset(self) -> int:
        return self.last_offset if self.last_content_offset is None else self.last_content_offset


class ConversationRecord(BaseModel):
    header: RecordHeader
    memory: ConversationMemoryState | None = Field(
        default=None, description="None only until the conversation's first turn is applied."
    )


def _vector_block(vectors: list[list[float] | None]) -> tuple[str, list[int], bytes]:
    """Event embeddings as one binary block: float32 when every value is exactly a float32 (the embedder's
    output and everything derived from it in float32 are), else float64, so the round trip is always exact."""
    lengths = [-1 if v is None else len(v) for v in vectors]
    flat = np.asarray([x for v in vectors if v is not None for x in v], dtype=np.float64)
    as32 = flat.astype(np.float32)
    if np.array_equal(as32.astype(np.float64), flat):
        return "f4", lengths, as32.tobytes()
    return "f8", lengths, flat.tobytes()


def _events(memory: ConversationMemoryState) -> list[Event]:
    """The events whose embeddings go in the binary block, in block order (the centroids follow them)."""
    return [*memory.events, *memory.evicted_pending]


def _frame(*parts: bytes) -> bytes:
    return b"".join(_HEADER_LENGTH.pack(len(part)) + part for part in parts)


def _unframe(data: bytes, count: int) -> list[bytes]:
    parts, position = [], 0
    for _ in range(count):
        (length,) = _HEADER_LENGTH.unpack(data[position : position + _HEADER_LENGTH.size])
        position += _HEADER_LENGTH.size
        parts.append(data[position : position + length])
        position += length
    return parts


def encode_record(record: ConversationRecord) -> bytes:
    header = record.header.model_dump_json().encode("utf-8")
    body = b""
    if record.memory is not None:
        # pydantic's Rust serialiser for the structure; the embeddings and centroids (most of the bytes) go binary.
        without = {"__all__": {"embedding"}}
        state_json = record.memory.model_dump_json(
            exclude={"events": without, "evicted_pending": without, "clusters": {"centroids"}})
        centroids = record.memory.clusters.centroids
        dtype, lengths, block = _vector_block([event.embedding for event in _events(record.memory)] + centroids)
        meta = json.dumps({"dtype": dtype, "lengths": lengths, "centroids": len(centroids)}).encode("utf-8")
        body = zlib.compress(_frame(state_json.encode("utf-8"), meta, block), _ZLIB_LEVEL)
    return MAGIC + _HEADER_LENGTH.pack(len(header)) + header + body


def _decode_memory(body: bytes) -> ConversationMemoryState:
    state_json, meta_json, block = _unframe(zlib.decompress(body), 3)
    memory = ConversationMemoryState.model_validate_json(state_json)
    meta = json.loads(meta_json)
    flat = np.frombuffer(block, dtype=np.float32 if meta["dtype"] == "f4" else np.float64).astype(np.float64)
    vectors: list[list[float] | None] = []
    position = 0
    for length in meta["lengths"]:
        vectors.append(flat[position : position + length].tolist() if length >= 0 else None)
        position += max(length, 0)
    # A record written before the centroids went binary has them in its JSON (and no "centroids" count).
    centroids = meta.get("centroids", 0)
    if centroids:
        memory.clusters.centroids = [vector for vector in vectors[-centroids:] if vector is not None]
    for event, vector in zip(_events(memory), vectors[: len(vectors) - centroids], strict=True):
        if vector is not None:
            event.embedding = vector
    return memory


def _split(data: bytes) -> tuple[bytes, bytes]:
    if not data.startswith(MAGIC):
        raise ValueError(f"not a conversation record (expected the {MAGIC!r} prefix, got {data[:4]!r})")
    start = len(MAGIC) + _HEADER_LENGTH.size
    (length,) = _HEADER_LENGTH.unpack(data[len(MAGIC) : start])
    return data[start : start + length], data[start + length :]


def decode_header(data: bytes) -> RecordHeader:
    header, _ = _split(data)
    return RecordHeader.model_validate_json(header)


def decode_record(data: bytes) -> ConversationRecord:
    header, body = _split(data)
    memory = _decode_memory(body) if body else None
    return ConversationRecord(header=RecordHeader.model_validate_json(header), memory=memory)
