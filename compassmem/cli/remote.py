"""``ask`` and ``ingest`` with ``--url``: the same commands against a running query API.

While ``compassmem dev`` runs, the embedded stores of its data directory are its own, so a second process cannot
open them; these reach that memory through the API instead (``compassmem.Client``). ``ingest --url`` reads the file
with the same reader as a local ingest, then posts the turns to ``POST /v1/turns`` in batches the API accepts; the
worker makes them queryable (what ``dev`` streams is built as a local ingest would build it).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Sequence
from types import TracebackType

from compassmem.cli.api_key import resolve_api_key
from compassmem.cli.progress import Progress
from compassmem.core.contracts.limits import MAX_TURNS_PER_REQUEST
from compassmem.core.contracts.query import QueryRequest, QueryResponse
from compassmem.core.models import Event, Turn
from compassmem.core.terminal import echo
from compassmem.library.client import Client

# A batch's JSON stays this small: well under the API's default body limit (COMPASSMEM_API_MAX_BODY_BYTES, 4 MiB),
# whatever the size of each turn (up to 16 KiB of text, attachments, metadata).
BATCH_BYTES = 1024 * 1024


def turn_batches(turns: Sequence[Turn], max_turns: int = MAX_TURNS_PER_REQUEST,
                 max_bytes: int = BATCH_BYTES) -> Iterator[list[Turn]]:
    """``turns`` in order, in batches of at most ``max_turns`` turns and (but for a single larger turn)
    ``max_bytes`` of JSON."""
    batch: list[Turn] = []
    size = 0
    for turn in turns:
        length = len(turn.model_dump_json().encode("utf-8")) + 1
        if batch and (len(batch) == max_turns or size + length > max_bytes):
            yield batch
            batch, size = [], 0
        batch.append(turn)
        size += length
    if batch:
        yield batch


class RemoteMemory:
    """What ``ask`` and ``ingest`` use of ``Memory``, over the HTTP API at ``url``."""

    def __init__(self, url: str, api_key: str | None) -> None:
        self.url = url
        self._client = Client(url, api_key=api_key)

    def query(self, request: QueryRequest) -> QueryResponse:
        return self._client.query(request)

    def get_events(self, event_ids: Sequence[str], *, tenant: str) -> list[Event]:
        return [Event.model_validate(self._client.event(event_id, tenant=tenant).model_dump())
                for event_id in event_ids]

    def send(self, turns: Sequence[Turn], progress: Progress) -> int:
        """Post the turns in order; how many the API accepted (a turn memory has is not sent on)."""
        accepted = 0
        for batch in turn_batches(turns):
            accepted += self._client.add(batch).accepted
            progress(len(batch))
        return accepted

    def __enter__(self) -> RemoteMemory:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._client.close()


def remote(args: argparse.Namespace) -> RemoteMemory:
    """The API ``--url`` names, with the tenant's key (``--api-key-file`` or COMPASSMEM_API_KEY)."""
    return RemoteMemory(args.url, resolve_api_key(args))


def ingest_over_http(args: argparse.Namespace, turns: Sequence[Turn]) -> int:
    with remote(args) as memory:
        accepted = memory.send(turns, Progress(len(turns)))
    had = len(turns) - accepted
    echo(f"sent {len(turns)} turns to {args.url}: {accepted} new" + (f", {had} memory had already" if had else "")
         + "; the worker makes them queryable within seconds")
    return 0
