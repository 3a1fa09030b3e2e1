"""One turn id, one turn: what every way in does with a turn whose (tenant, conversation, turn id) was given before.

- The same turn again (same speaker, text with its attachments' captions and session: what was said) is a replay
  and changes nothing, so a file ingested twice or a producer's retry leaves memory as it is. Its timestamp may
  differ (a client or the MCP tool that stamps a resend with the time it sends it): the first one stays.
- Another turn under that id is refused, whether memory holds the first or it came earlier in the same input:
  ``Memory.add`` raises BadRequest, ``POST /v1/turns`` answers 422, the worker writes a dead letter
  (``duplicate_turn``), a JSONL file read by ``ingest`` or ``produce`` is refused at the line.

Refused rather than replaced: the earlier turn may be in a closed event by now, merged, related and clustered, and
the worker holds only its recent events, so a replacement could not be made the same on every path.

``TurnIds`` is the check, in input order; each path supplies what memory held before its input (``HeldLookup``):
the stores, and for the worker also its conversation state.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from compassmem.core.models import IndexedTurn, Observation, Turn
from compassmem.sinks.vector_store import VectorStore

# What was said in a turn, to tell a replay from another turn under the same id.
TurnContent = tuple[str, str, str | None]
HeldTurn = Turn | IndexedTurn | Observation
# The turn of this one's conversation and id that memory held before the input, if any.
HeldLookup = Callable[[Turn], HeldTurn | None]


def content_of(turn: HeldTurn) -> TurnContent:
    text = turn.indexed_text() if isinstance(turn, Turn) else turn.text
    return turn.speaker, text, turn.session_id


class TurnIdConflict(ValueError):
    """A turn under an id its conversation already has for another turn; ``earlier`` says where that one is."""

    def __init__(self, turn: Turn, earlier: str) -> None:
        self.turn = turn
        super().__init__(f"turn {turn.turn_id!r} of conversation {turn.conversation_id!r}: {earlier} has another turn "
                         "under this id; a turn id names one turn of its conversation, so send a new turn under a "
                         "new id (the same turn again changes nothing)")


def _no_lookup(turn: Turn) -> None:
    return None


class TurnIds:
    """The turns of one input (a call, a request, a file, a worker's batch) by conversation and id, each checked
    against the ones before it and against what memory held (``held``). ``where`` names a position of the input in a
    conflict's message (``[3]``, ``line 3``, ``offset 3``)."""

    def __init__(self, held: HeldLookup = _no_lookup, where: Callable[[int], str] = lambda n: f"[{n}]") -> None:
        self._held = held
        self._where = where
        # (conversation key, turn id) -> what the turn says, and its position.
        self._seen: dict[tuple[str, str], tuple[TurnContent, int]] = {}
        self._forgotten: set[str] = set()

    def check(self, turn: Turn, position: int) -> bool:
        """True for a turn to apply, False for a replay; TurnIdConflict for another turn under a known id."""
        key = (turn.key, turn.turn_id)
        content = content_of(turn)
        seen = self._seen.get(key)
        if seen is not None:
            if seen[0] != content:
                raise TurnIdConflict(turn, self._where(seen[1]))
            return False
        held = None if turn.key in self._forgotten else self._held(turn)
        if held is not None and content_of(held) != content:
            raise TurnIdConflict(turn, "memory")
        self._seen[key] = (content, position)
        return held is None

    def forget(self, key: str) -> None:
        """The conversation was forgotten at this point of the input: nothing before it counts any more."""
        self._seen = {k: v for k, v in self._seen.items() if k[0] != key}
        self._forgotten.add(key)


def stored_lookup(vectors: VectorStore, turns: Sequence[Turn]) -> Callable[[Turn], IndexedTurn | None]:
    """The stored turns of these turns' conversations and ids, read in one call per conversation."""
    wanted: dict[tuple[str, str], set[str]] = {}
    for turn in turns:
        wanted.setdefault((turn.tenant, turn.conversation_id), set()).add(turn.turn_id)
    stored = {(t.tenant, t.conversation_id, t.turn_id): t
              for (tenant, conversation_id), ids in wanted.items()
              for t in vectors.get_turns(tenant, conversation_id, sorted(ids))}
    return lambda turn: stored.get((turn.tenant, turn.conversation_id, turn.turn_id))
