"""A turn acknowledged after a forget answered is kept.

A forget takes effect in the stream at its markers, which the worker writes into every turns partition when it
reads the command (``streams/app.py``): a turn produced before the marker of its partition is erased with the
conversation, one produced after it starts a new memory. So a deletion waits for the worker's answer (the markers
are in the log) before it answers; until then, and for as long as no worker has answered, the conversations it
covers take no new turn here (``Unavailable``: a turn produced now would be erased by the markers still to come).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import structlog

from compassmem.core.errors import Unavailable

log = structlog.get_logger(__name__)

# (control partition, offset, seconds to wait) -> whether the worker answered the command there.
AnswerWait = Callable[[int, int, float], bool]


@dataclass(frozen=True)
class _Pending:
    tenant: str
    conversation_id: str | None  # None: the whole tenant
    partition: int
    offset: int

    def covers(self, tenant: str, conversation_id: str) -> bool:
        return tenant == self.tenant and self.conversation_id in (None, conversation_id)


class ForgetGate:
    """Forgets recorded by this process whose markers no worker has confirmed yet, and the turns they hold back.

    ``wait_s``: how long a deletion waits for the answer; ``recheck_s``: how long a turn for a conversation with a
    forget still unconfirmed waits for it before it is refused."""

    def __init__(self, answered: AnswerWait, wait_s: float, recheck_s: float = 2.0) -> None:
        self._answered = answered
        self.wait_s = wait_s
        self.recheck_s = recheck_s
        self._pending: set[_Pending] = set()
        self._lock = threading.Lock()

    def recorded(self, tenant: str, conversation_id: str | None, partition: int, offset: int) -> bool:
        """A forget's command is at ``partition``/``offset`` of the control topic: hold its conversations' turns
        until the worker answers it. True when it answered within ``wait_s`` (its markers are in the log)."""
        pending = _Pending(tenant, conversation_id, partition, offset)
        with self._lock:
            self._pending.add(pending)
        return self._settled(pending, self.wait_s)

    def check(self, keys: Iterable[tuple[str, str]]) -> None:
        """Unavailable naming the conversation when a turn of one of these (tenant, conversation) would be produced
        before the markers of a forget of it that this process answered for."""
        asked = set(keys)
        with self._lock:
            pending = {p for p in self._pending if any(p.covers(*key) for key in asked)}
        for forget in sorted(pending, key=lambda p: (p.partition, p.offset)):
            if not self._settled(forget, self.recheck_s):
                what = (f"conversation {forget.conversation_id!r}" if forget.conversation_id is not None
                        else "every conversation")
                raise Unavailable(
                    f"a forget of {what} of tenant {forget.tenant!r} is recorded (control offset {forget.offset}) "
                    "but no worker has placed its markers yet: a turn produced now would be erased with it. Retry "
                    "once a worker runs (compassmem worker, or compassmem dev)")

    def _settled(self, pending: _Pending, wait_s: float) -> bool:
        if not self._answered(pending.partition, pending.offset, wait_s):
            log.warning("memory.forget_unconfirmed", tenant=pending.tenant, offset=pending.offset, waited_s=wait_s)
            return False
        with self._lock:
            self._pending.discard(pending)
        return True
