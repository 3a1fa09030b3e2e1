"""``CompassmemStore``: compassmem as a LangGraph store (``langgraph.store.base.BaseStore``).

    store = CompassmemStore(memory)           # a compassmem.Memory, or a compassmem.Client
    graph = builder.compile(store=store)      # nodes read and write it through their `store` argument

Namespaces are ``(tenant, subject, conversation)``: an item is one turn, its key the turn id.

- ``tenant``: a compassmem tenant (``[a-z0-9][a-z0-9_-]{0,62}``).
- ``subject``: the subject id the turns are about (a user, customer or account; ``subject_id``), or ``"-"`` for
  turns without a subject.
- ``conversation``: the conversation id.

Subject and conversation follow compassmem's id rule (``compassmem.core.models.ID_RULE``) and LangGraph's own (no '.').
``put``, ``get`` and ``delete`` take the whole namespace; ``search`` takes a prefix of one to three labels (the
tenant, a subject of it, one conversation), and ``list_namespaces`` a prefix that names the tenant (compassmem does
not list tenants). Anything else is an ``InvalidNamespaceError`` naming the namespace and the rule.

``put`` writes a turn: the value holds ``text`` and ``speaker``, optionally ``timestamp`` (ISO 8601 with a UTC offset;
default now, a millisecond apart in the order given) and ``session_id``; any other key is a ValueError naming it.
A batch's puts are written with one ``add``. Putting a key that exists replaces the turn (it is redacted first);
putting ``None`` (``delete``) redacts the turn, whose event is rebuilt from its other turns. ``get`` reads a turn
back (its value, plus the ``event_id`` that holds it). ``search`` with a query asks compassmem and returns the ranked
source turns, each with its evidence (``event_id``, ``event_score``, ``event_turn_ids``, ``rank``, ``subgoal``; the
item's ``score`` is its event's); without a query it lists the turns under the prefix in the order they were said.
``filter`` matches value keys exactly, or with ``$eq``/``$ne``. TTLs and per-item ``index`` are not supported:
compassmem indexes every turn.

Over HTTP (``Client``) a put reaches the turns topic and becomes readable once the worker has processed it.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, NamedTuple

from pydantic import BaseModel, ConfigDict, Strict, StrictStr, ValidationError

from compassmem.core.contracts.limits import MAX_BUDGET_TURNS
from compassmem.core.contracts.query import QueryRequest
from compassmem.core.errors import NotFound, field_rules
from compassmem.integrations.verbs import (
    MemoryVerbs,
    StoredTurn,
    conversation_ids,
    conversation_turns,
    event_nodes,
    find_turn,
)
from compassmem.core.models import TENANT_PATTERN, Turn, check_id

try:
    from langgraph.store.base import (
        BaseStore,
        GetOp,
        InvalidNamespaceError,
        Item,
        ListNamespacesOp,
        MatchCondition,
        Op,
        PutOp,
        Result,
        SearchItem,
        SearchOp,
        validate_op_namespace,
    )
except ImportError as missing:  # pragma: no cover - depends on the environment
    raise ImportError("compassmem.integrations.langgraph needs LangGraph: pip install 'compassmem[langchain]'") \
        from missing

NO_SUBJECT = "-"
NAMESPACE_RULE = ("namespaces are (tenant, subject, conversation): the tenant matches " + TENANT_PATTERN
                  + f", the subject is a subject id or {NO_SUBJECT!r} for none, the conversation a conversation id")
_TENANT = re.compile(TENANT_PATTERN)
_OPERATORS = {"$eq": lambda value, wanted: value == wanted, "$ne": lambda value, wanted: value != wanted}


class Place(NamedTuple):
    """Where a namespace (or a prefix of one) points in compassmem; subject and conversation None when not named."""

    tenant: str
    subject: str | None
    conversation_id: str | None

    @property
    def subject_id(self) -> str | None:
        return None if self.subject == NO_SUBJECT else self.subject


class TurnValue(BaseModel):
    """The value of a put: what a turn holds besides its place and id."""

    model_config = ConfigDict(extra="forbid")

    text: str
    speaker: str
    # Strict, so that a number stays a number: Turn refuses it, as it refuses a time without an offset.
    timestamp: StrictStr | Annotated[datetime, Strict()] | None = None
    session_id: str | None = None


def place_of(namespace: tuple[str, ...], *, whole: bool) -> Place:
    """The tenant, subject and conversation a namespace names; ``whole``: all three are required."""
    if not namespace:
        raise InvalidNamespaceError(f"namespace () names no tenant: {NAMESPACE_RULE}")
    if len(namespace) > 3 or (whole and len(namespace) != 3):
        wanted = "three labels" if whole else "one to three labels"
        raise InvalidNamespaceError(f"namespace {namespace!r} has {len(namespace)} labels, not {wanted}: "
                                    f"{NAMESPACE_RULE}")
    tenant, *rest = namespace
    if not _TENANT.match(tenant):
        raise InvalidNamespaceError(f"namespace {namespace!r}: the tenant {tenant!r} does not match {TENANT_PATTERN}")
    labels: list[str | None] = [None, None]
    for index, (what, label) in enumerate(zip(("subject", "conversation"), rest, strict=False)):
        if what == "subject" and label == NO_SUBJECT:
            labels[index] = label
            continue
        try:
            labels[index] = check_id(label)
        except ValueError as error:
            raise InvalidNamespaceError(f"namespace {namespace!r}: the {what} {label!r} {error}") from None
    return Place(tenant, labels[0], labels[1])


def namespace_of(turn: StoredTurn) -> tuple[str, str, str]:
    return turn.tenant, turn.subject_id or NO_SUBJECT, turn.conversation_id


def matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    """LangGraph's namespace match: the path's labels, '*' matching any, at the start (prefix) or end (suffix)."""
    path = condition.path
    if len(namespace) < len(path):
        return False
    pairs = zip(namespace, path) if condition.match_type == "prefix" else zip(reversed(namespace), reversed(path))
    return all(wanted in ("*", label) for label, wanted in pairs)


def passes(value: Mapping[str, Any], wanted: Mapping[str, Any] | None) -> bool:
    """Whether an item's value meets a search filter: each key equal, or compared with ``$eq``/``$ne``."""
    for key, condition in (wanted or {}).items():
        if isinstance(condition, Mapping) and any(str(name).startswith("$") for name in condition):
            for name, operand in condition.items():
                if name not in _OPERATORS:
                    raise ValueError(f"filter on {key!r}: operator {name!r} is not supported (use a value, "
                                     f"{', '.join(_OPERATORS)})")
                if not _OPERATORS[name](value.get(key), operand):
                    return False
        elif value.get(key) != condition:
            return False
    return True


def _value(turn: StoredTurn) -> dict[str, Any]:
    value: dict[str, Any] = {"text": turn.text, "speaker": turn.speaker, "timestamp": turn.timestamp.isoformat(),
                             "event_id": turn.event_id}
    if turn.session_id is not None:
        value["session_id"] = turn.session_id
    return value


def _item(turn: StoredTurn) -> Item:
    return Item(value=_value(turn), key=turn.turn_id, namespace=namespace_of(turn), created_at=turn.timestamp,
                updated_at=turn.timestamp)


class CompassmemStore(BaseStore):
    """A LangGraph store over a ``Memory`` or ``Client``: see the module's docstring for the namespaces and values."""

    __slots__ = ("memory",)
    supports_ttl = False

    def __init__(self, memory: MemoryVerbs) -> None:
        self.memory = memory

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run the operations in order: a read sees the puts before it. Every operation is checked first, so a
        batch with a bad one writes nothing."""
        ops = list(ops)
        now = datetime.now(UTC)
        turns = {index: self._turn(op, now + timedelta(milliseconds=index))
                 for index, op in enumerate(ops) if self._check(op)}
        results: list[Result] = []
        pending: dict[tuple[tuple[str, ...], str], Turn | None] = {}
        for index, op in enumerate(ops):
            if isinstance(op, PutOp):
                pending.pop((op.namespace, op.key), None)  # the last put of a key wins, in its own place
                pending[(op.namespace, op.key)] = turns[index]
                results.append(None)
                continue
            self._write(pending)
            pending = {}
            results.append(self._read(op))
        self._write(pending)
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        # The verbs are synchronous (Memory, Client): a thread keeps the event loop free meanwhile.
        return await asyncio.to_thread(self.batch, list(ops))

    # -- checking ------------------------------------------------------------------------------------------------

    @staticmethod
    def _check(op: Op) -> bool:
        """Refuse what no compassmem call could do; True for a put (whose turn is made next)."""
        validate_op_namespace(op)
        if isinstance(op, GetOp):
            place_of(op.namespace, whole=True)
        elif isinstance(op, SearchOp):
            if op.query is not None:
                _request(op)
            else:
                place_of(op.namespace_prefix, whole=False)
        elif isinstance(op, ListNamespacesOp):
            _listed_tenant(op)
        elif isinstance(op, PutOp):
            if op.ttl is not None:
                raise ValueError(f"put {op.key!r}: TTLs are not supported by CompassmemStore (ttl={op.ttl})")
            if op.index is not None:
                raise ValueError(f"put {op.key!r}: index={op.index!r} is not supported: compassmem indexes every "
                                 "turn's text")
            return True
        else:
            raise TypeError(f"unknown store operation {type(op).__name__}")
        return False

    @staticmethod
    def _turn(op: PutOp, default_time: datetime) -> Turn | None:
        place = place_of(op.namespace, whole=True)
        if op.value is None:
            check_id(op.key)
            return None
        try:
            value = TurnValue.model_validate(dict(op.value))
            return Turn(tenant=place.tenant, subject_id=place.subject_id, conversation_id=place.conversation_id,
                        turn_id=op.key, speaker=value.speaker, text=value.text,
                        timestamp=value.timestamp or default_time, session_id=value.session_id)
        except ValidationError as error:
            raise ValueError(f"put {op.key!r} in namespace {op.namespace!r}: {field_rules(error)} (a value holds "
                             "text and speaker, optionally timestamp and session_id)") from None

    # -- writing -------------------------------------------------------------------------------------------------

    def _write(self, puts: Mapping[tuple[tuple[str, ...], str], Turn | None]) -> None:
        """Redact the turns deleted or replaced, then add the new ones in one call. A put to a key that the
        conversation holds under another subject is refused before anything is written."""
        wanted: dict[Place, dict[str, Turn | None]] = {}
        for (namespace, key), turn in puts.items():
            wanted.setdefault(place_of(namespace, whole=True), {})[check_id(key)] = turn
        redact: list[tuple[Place, str]] = []
        for place, keys in wanted.items():
            for turn_id, subject_id in self._stored_subjects(place, keys):
                if subject_id == place.subject_id:
                    redact.append((place, turn_id))
                elif keys[turn_id] is not None:  # deleting a key this namespace does not hold does nothing
                    raise ValueError(f"put {turn_id!r} in namespace {place!r}: conversation {place.conversation_id!r} "
                                     f"holds that turn under subject {subject_id or NO_SUBJECT!r}")
        for place, turn_id in redact:
            assert place.conversation_id is not None  # a whole namespace
            try:
                self.memory.redact_turn(place.conversation_id, turn_id, tenant=place.tenant)
            except NotFound:
                pass  # redacted meanwhile
        added = [turn for keys in wanted.values() for turn in keys.values() if turn is not None]
        if added:
            self.memory.add(added)

    def _stored_subjects(self, place: Place, keys: Iterable[str]) -> Iterator[tuple[str, str | None]]:
        """The keys the conversation holds, each with the subject of the event holding it."""
        assert place.conversation_id is not None
        wanted = set(keys)
        for node in event_nodes(self.memory, place.tenant, place.conversation_id):
            held = wanted.intersection(node.turn_ids)
            if held:
                subject_id = self.memory.event(node.id, tenant=place.tenant).subject_id
                yield from ((turn_id, subject_id) for turn_id in sorted(held))
                wanted -= held

    # -- reading -------------------------------------------------------------------------------------------------

    def _read(self, op: Op) -> Result:
        if isinstance(op, GetOp):
            place = place_of(op.namespace, whole=True)
            assert place.conversation_id is not None
            turn = find_turn(self.memory, place.tenant, place.conversation_id, check_id(op.key))
            return _item(turn) if turn is not None and turn.subject_id == place.subject_id else None
        if isinstance(op, SearchOp):
            found = self._ranked(op) if op.query is not None else self._listed(op)
            kept = (item for item in found if passes(item.value, op.filter))
            return [item for _, item in zip(range(op.offset + op.limit), kept)][op.offset:]
        assert isinstance(op, ListNamespacesOp)
        return self._namespaces(op)

    def _ranked(self, op: SearchOp) -> Iterator[SearchItem]:
        request = _request(op)
        try:
            response = self.memory.query(request)
        except NotFound:
            return
        subjects: dict[str, str | None] = {}
        for rank, (turn, evidence) in enumerate(response.ranked_turns(), start=1):
            if evidence.event_id not in subjects:
                subjects[evidence.event_id] = self.memory.event(evidence.event_id, tenant=request.tenant).subject_id
            stored = StoredTurn(tenant=request.tenant, conversation_id=turn.conversation_id,
                                subject_id=subjects[evidence.event_id], event_id=evidence.event_id,
                                turn_id=turn.turn_id, speaker=turn.speaker, text=turn.text, timestamp=turn.timestamp)
            namespace = namespace_of(stored)
            if namespace[:len(op.namespace_prefix)] != op.namespace_prefix:
                continue
            value = {**_value(stored), "event_score": evidence.score, "subgoal": evidence.subgoal, "rank": rank,
                     "event_turn_ids": [t.turn_id for t in evidence.turns]}
            yield SearchItem(namespace=namespace, key=turn.turn_id, value=value, created_at=turn.timestamp,
                             updated_at=turn.timestamp, score=evidence.score)

    def _listed(self, op: SearchOp) -> Iterator[SearchItem]:
        place = place_of(op.namespace_prefix, whole=False)
        if place.conversation_id is not None:
            conversations = [place.conversation_id]
        else:
            conversations = [conversation for conversation, subject_ids in
                             conversation_ids(self.memory, place.tenant)
                             if place.subject_id is None or place.subject_id in subject_ids]
        for conversation_id in conversations:
            for turn in conversation_turns(self.memory, place.tenant, conversation_id):
                namespace = namespace_of(turn)
                if namespace[:len(op.namespace_prefix)] == op.namespace_prefix:
                    yield SearchItem(namespace=namespace, key=turn.turn_id, value=_value(turn),
                                     created_at=turn.timestamp, updated_at=turn.timestamp)

    def _namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        tenant = _listed_tenant(op)
        found = {(tenant, subject, conversation_id)
                 for conversation_id, subject_ids in conversation_ids(self.memory, tenant)
                 for subject in (subject_ids or [NO_SUBJECT])}
        kept = {namespace[:op.max_depth] if op.max_depth is not None else namespace for namespace in found
                if all(matches(condition, namespace) for condition in op.match_conditions or ())}
        return sorted(kept)[op.offset:op.offset + op.limit]


def _request(op: SearchOp) -> QueryRequest:
    """The compassmem question of a search: the narrowest scope its prefix allows (items outside the prefix, e.g.
    of another subject, are left out of the answer afterwards)."""
    place = place_of(op.namespace_prefix, whole=False)
    scope: dict[str, Any] = ({"conversation_id": place.conversation_id} if place.conversation_id else
                             {"subject_id": place.subject_id} if place.subject_id else {"all_conversations": True})
    try:
        return QueryRequest(question=op.query, tenant=place.tenant,
                            budget_turns=min(MAX_BUDGET_TURNS, max(1, op.offset + op.limit)), **scope)
    except ValidationError as error:
        raise ValueError(f"search in {op.namespace_prefix!r}: {field_rules(error)}") from None


def _listed_tenant(op: ListNamespacesOp) -> str:
    """The tenant a listing's prefix names: compassmem lists the conversations of one tenant at a time."""
    for condition in op.match_conditions or ():
        if condition.match_type == "prefix" and condition.path and condition.path[0] != "*":
            return place_of(tuple(condition.path[:1]), whole=False).tenant
    raise InvalidNamespaceError("list_namespaces needs a prefix whose first label is the tenant, e.g. "
                                "prefix=('default',): compassmem lists the conversations of one tenant at a time")
