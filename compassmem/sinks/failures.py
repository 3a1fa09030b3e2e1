"""Which store failures mean "the store is not there" and which mean "the store refused these records".

The streaming worker waits out the first kind (retrying the same batch, however long it takes) and isolates the
second kind (the conversation whose records the store keeps refusing goes to the dead-letter topic; the rest goes
on). Only errors that say nothing about the records count as unavailable: connections refused, reset or timed
out, a server still loading its data, operating-system I/O errors (a full or vanished disk).
"""

from __future__ import annotations

import httpx
import redis.exceptions

_UNAVAILABLE: tuple[type[BaseException], ...] = (
    ConnectionError,
    TimeoutError,
    OSError,
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    redis.exceptions.BusyLoadingError,
    httpx.TransportError,
)
# Messages of wrapped transport errors whose type is lost (qdrant-client re-raises some as its own exception).
_UNAVAILABLE_WORDS = ("connection refused", "connection reset", "timed out", "unavailable", "connect error")


def is_store_unavailable(error: BaseException) -> bool:
    """True when ``error`` (or anything in its cause chain) is a store being unreachable, not a refusal."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, _UNAVAILABLE):
            return True
        if type(current).__name__ in {"ResponseHandlingException", "RpcError", "AioRpcError"} and any(
                word in str(current).lower() for word in _UNAVAILABLE_WORDS):
            return True
        current = current.__cause__ or current.__context__
    return False
