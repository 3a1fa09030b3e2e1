"""Every public verb of ``Memory``, ``Client`` and ``AsyncClient``, given a bad argument, raises ``BadRequest`` (a
documented error, docs/library.md) whose message names the argument: never pydantic's ValidationError, a bare
ValueError or anything else (issue #57 item 6).

The verbs and their arguments are found by introspection, so a new verb or argument is covered as soon as it exists:
``BAD`` holds a bad value for each argument name (the same on every surface) and what the message must then name,
and ``test_every_argument_of_every_verb_has_a_bad_value`` fails for an argument it does not know.
"""

from __future__ import annotations

import asyncio
import inspect
import io
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any, NamedTuple

import pytest

from compassmem import AsyncClient, BadRequest, Client, Memory
from compassmem.core.config import Settings
from compassmem.core.models import Turn
from compassmem.monitoring.metrics import MemoryMetrics
from compassmem.query_api.app import create_app
from compassmem.query_api.server import BackgroundServer, build_services

SURFACES = (Memory, Client, AsyncClient)


class Bad(NamedTuple):
    value: Any
    named: str  # what the error's message must contain: the argument (or the field of it) that broke a rule


def _turn(turn_id: str, text: str) -> Turn:
    return Turn(conversation_id="c1", turn_id=turn_id, speaker="Ann", text=text,
                timestamp=datetime(2024, 3, 4, 9, 15, tzinfo=UTC))


# A bad value for each argument name, the same on every surface.
BAD: dict[str, Bad] = {
    "turns": Bad([{"conversation_id": "c1", "turn_id": "1", "speaker": "Ann", "text": "hi"}], "[0].timestamp"),
    "request": Bad("What happened?", "conversation_id"),  # no scope
    "conversation_id": Bad("bad id", "conversation_id"),
    "conversation_ids": Bad(["bad id"], "conversation_ids"),
    "subject_id": Bad("bad id", "subject_id"),
    "turn_id": Bad("bad id", "turn_id"),
    "event_id": Bad("bad id", "event_id"),
    "event_ids": Bad(["bad id"], "event_ids"),
    "tenant": Bad("Bad Tenant", "tenant"),
    "budget_turns": Bad(0, "budget_turns"),
    "max_hops": Bad(-1, "max_hops"),
    "deadline_s": Bad(-1.0, "deadline_s"),
    "query": Bad("x" * 201, "query"),
    "limit": Bad(0, "limit"),
    "cursor": Bad("not-a-cursor", "cursor"),
    "order": Bad("sideways", "order"),
    "max_nodes": Bad(0, "max_nodes"),
    "since": Bad("yesterday", "since"),
    "time_from": Bad("yesterday", "time_from"),
    "time_to": Bad("yesterday", "time_to"),
    "metadata": Bad({"team": ["a", "list"]}, "metadata"),
    "min_relevance": Bad(1.5, "min_relevance"),
    "topics": Bad(["bad id"], "topics"),
    "events": Bad(["bad id"], "events"),
    "types": Bad(["no-such-type"], "types"),
    "min_confidence": Bad(2.0, "min_confidence"),
    "links": Bad(0, "links"),
    "conversation": Bad("bad id", "conversation"),
    "key": Bad("no_such_setting", "'no_such_setting'"),
    "value": Bad("not a number", "'ranking.turn_weight'"),
    "source": Bad(io.StringIO("{not json\n"), "line 1"),
}
# One verb's own bad value where the shared one does not fit it.
BAD_FOR: dict[tuple[str, str], Bad] = {
    # Turns already validated: the rule left to break is one turn id, one turn.
    ("new_turns", "turns"): Bad([_turn("1", "We moved the trip."), _turn("1", "Something else.")], "[1].turn_id"),
}
# Arguments no value of their type can make bad, and why.
UNBREAKABLE = {
    "warm": "a switch", "replace": "a switch", "explain": "a switch", "unclustered": "a switch",
    "all_conversations": "a switch (a false one is no scope: 'request' covers that)",
    "progress": "the caller's callback", "stored": "the caller's own lookup of what memory holds (a callable)",
    "destination": "a path or stream: what the operating system refuses is its own OSError",
}
# Valid values for the arguments a verb needs besides the bad one.
VALID: dict[str, Any] = {"request": "What happened?", "conversation_id": "c1", "turn_id": "1", "event_id": "e1",
                         "event_ids": ["e1"], "tenant": "default", "key": "ranking.turn_weight", "value": 0.5,
                         "destination": io.StringIO()}
# Over HTTP an argument may travel under another name: the message names the one the server read.
SENT_AS = {"query": "q"}
ADMIN_KEY = "admin-key-of-these-tests"


def verbs(surface: type) -> Iterator[tuple[str, inspect.Signature]]:
    for name, member in inspect.getmembers(surface, inspect.isfunction):
        if not name.startswith("_"):
            yield name, inspect.signature(member)


def arguments(signature: inspect.Signature) -> list[inspect.Parameter]:
    return [p for p in signature.parameters.values() if p.name != "self"]


CASES = [pytest.param(surface, verb, parameter.name, id=f"{surface.__name__}.{verb}({parameter.name})")
         for surface in SURFACES for verb, signature in verbs(surface) for parameter in arguments(signature)
         if parameter.name not in UNBREAKABLE]


def test_every_argument_of_every_verb_has_a_bad_value() -> None:
    unknown = sorted({f"{surface.__name__}.{verb}({parameter.name})"
                      for surface in SURFACES for verb, signature in verbs(surface) for parameter in arguments(signature)
                      if parameter.name not in BAD and (verb, parameter.name) not in BAD_FOR
                      and parameter.name not in UNBREAKABLE})
    assert not unknown, f"give these arguments a bad value in BAD (or a reason in UNBREAKABLE): {unknown}"
    assert {"add", "query", "forget", "conversations"} <= {verb for verb, _ in verbs(Memory)}


@pytest.fixture(scope="module")
def memory(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Iterator[Memory]:
    settings = Settings(_env_file=None, data_dir=tmp_path_factory.mktemp("verb-errors"),  # type: ignore[call-arg]
                        api_admin_keys=[ADMIN_KEY])
    with Memory(settings, embedder=embedder) as opened:
        yield opened


class _Accepting:
    """POST /v1/turns's publisher: takes every turn (no broker in these tests)."""

    def publish_turns(self, turns: Any) -> None:
        pass


@pytest.fixture(scope="module")
def api_url(memory: Memory, embedder: Any) -> Iterator[str]:
    services = build_services(memory.settings, memory.stores, embedder, MemoryMetrics(process_collectors=False),
                              turn_publisher=_Accepting())
    with BackgroundServer(create_app(services)) as server:
        yield server.url


def _caller(surface: type, verb: str, memory: Memory, api_url: str) -> Callable[..., Any]:
    if surface is Memory:
        return getattr(memory, verb)
    # Deleting a tenant over HTTP needs an admin key (else Forbidden, before its argument is read).
    key = ADMIN_KEY if verb == "delete_tenant" else None
    if surface is Client:
        def call(**kwargs: Any) -> Any:
            with Client(api_url, api_key=key) as client:
                return getattr(client, verb)(**kwargs)
        return call

    async def call_async(**kwargs: Any) -> Any:
        async with AsyncClient(api_url, api_key=key) as client:
            return await getattr(client, verb)(**kwargs)
    return lambda **kwargs: asyncio.run(call_async(**kwargs))


@pytest.mark.parametrize(("surface", "verb", "argument"), CASES)
def test_a_bad_argument_is_a_bad_request_naming_it(surface: type, verb: str, argument: str, memory: Memory,
                                                   api_url: str) -> None:
    bad = BAD_FOR.get((verb, argument)) or BAD[argument]
    signature = dict(verbs(surface))[verb]
    needed = {p.name: VALID[p.name] for p in arguments(signature)
              if p.default is inspect.Parameter.empty and p.name != argument}
    value = bad.value
    if isinstance(value, io.StringIO):
        value = io.StringIO(value.getvalue())  # each call reads it from the start
    with pytest.raises(Exception) as raised:  # which class comes out is what is checked
        _caller(surface, verb, memory, api_url)(**needed, **{argument: value})
    error = raised.value
    assert isinstance(error, BadRequest), f"{type(error).__module__}.{type(error).__name__}: {error}"
    assert (bad.named if surface is Memory else SENT_AS.get(bad.named, bad.named)) in str(error), str(error)


def test_a_single_turn_is_named_without_an_index(memory: Memory) -> None:
    with pytest.raises(BadRequest) as raised:
        memory.add({"conversation_id": "c1", "turn_id": "1", "speaker": "Ann", "text": "hi"})
    assert [(e.field, e.message) for e in raised.value.errors] == [("timestamp", "is required")]
    assert str(raised.value) == "timestamp: is required"


def test_the_scope_missing_from_a_query_is_named(memory: Memory) -> None:
    with pytest.raises(BadRequest, match="give exactly one scope: conversation_id, conversation_ids, subject_id or "
                                         "all_conversations=true"):
        memory.query("What happened?")
