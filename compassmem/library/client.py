"""``Client`` and ``AsyncClient``: the verbs of ``Memory`` over the HTTP API (``compassmem dev`` or ``compassmem api``).

    with Client("http://127.0.0.1:8080", api_key="...") as client:
        response = client.query("Why was the launch moved?", conversation_id="priya-tom")

Both return the API's own records (``QueryResponse``, ``ConversationPage``, ...) and raise the classes of
``compassmem.core.errors``: BadRequest (with the server's per-field messages), Unauthorized, Forbidden, NotFound,
Unavailable (503, and a server that cannot be reached or does not answer within the timeout), ServerError.
Requests are not validated here: the server is the one authority on its rules, whatever its version.
A request is described once (``_Call``) and sent by either client, so the two cannot drift apart.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from types import TracebackType
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, ValidationError
from pydantic_core import to_jsonable_python

from compassmem.core.contracts.health import MemoryHealth
from compassmem.core.contracts.query import QueryRequest, QueryResponse
from compassmem.core.contracts.records import (
    ConversationPage,
    DeleteResult,
    ErrorResponse,
    EventOut,
    EventPage,
    FieldError,
    LimitedConversationGraph,
    RedactResult,
    TenantDeleteResult,
    TurnsAccepted,
    ValidationErrorResponse,
)
from compassmem.core.errors import (
    BadRequest,
    CompassmemError,
    Forbidden,
    NotFound,
    ServerError,
    Unauthorized,
    Unavailable,
)
from compassmem.core.models import DEFAULT_TENANT, Turn, TurnInput

DEFAULT_TIMEOUT_S = 30.0
R = TypeVar("R", bound=BaseModel)


@dataclass(frozen=True)
class _Call(Generic[R]):
    """One request and the model its successful answer holds."""

    method: str
    path: str
    returns: type[R]
    params: dict[str, str] = field(default_factory=dict)
    body: Any = None


def _segment(value: str) -> str:
    # Ids may hold '?', '#', '%' or spaces: every character but the unreserved ones is escaped.
    return quote(value, safe="")


def _add(turns: TurnInput | Iterable[TurnInput]) -> _Call[TurnsAccepted]:
    # One turn goes as one object (the API takes both), so its errors name plain fields, not '[0].text'.
    if isinstance(turns, Turn | Mapping):
        return _Call("POST", "/v1/turns", TurnsAccepted, body=_turn_json(turns))
    return _Call("POST", "/v1/turns", TurnsAccepted, body=[_turn_json(turn) for turn in turns])


def _turn_json(turn: TurnInput) -> Any:  # noqa: ANN401 - JSON
    return turn.model_dump(mode="json") if isinstance(turn, Turn) else to_jsonable_python(turn)


def _query(request: QueryRequest | str, fields: dict[str, Any]) -> _Call[QueryResponse]:
    given = {name: value for name, value in fields.items() if value is not None}
    if isinstance(request, QueryRequest):
        if given:
            raise TypeError(f"give either a QueryRequest or a question with its fields, not both ({', '.join(given)})")
        body = request.model_dump(mode="json", exclude_none=True)
        # The defaults: left out, as before the fields (a server without them takes the body).
        if body.get("explain") is False:
            del body["explain"]
        if body.get("min_relevance") == 0:
            del body["min_relevance"]
    else:
        # JSON has no NaN or infinity: such a number cannot reach the server to be refused there.
        unsendable = [FieldError(field=name, message="must be a finite number") for name, value in given.items()
                      if isinstance(value, float) and not math.isfinite(value)]
        if unsendable:
            raise BadRequest("; ".join(f"{e.field}: {e.message}" for e in unsendable), errors=unsendable)
        body = {"question": request, **to_jsonable_python(given)}
    return _Call("POST", "/v1/query", QueryResponse, body=body)


def _event(event_id: str, tenant: str) -> _Call[EventOut]:
    return _Call("GET", f"/v1/events/{_segment(event_id)}", EventOut, params=_given(tenant=tenant))


def _conversations(tenant: str, query: str | None, limit: int, cursor: str | None,
                   order: str) -> _Call[ConversationPage]:
    return _Call("GET", "/v1/conversations", ConversationPage,
                 params=_given(tenant=tenant, q=query, limit=limit, cursor=cursor, order=order))


def _events(conversation_id: str, tenant: str, limit: int, cursor: str | None) -> _Call[EventPage]:
    return _Call("GET", f"/v1/conversations/{_segment(conversation_id)}/events", EventPage,
                 params=_given(tenant=tenant, limit=limit, cursor=cursor))


def _graph(conversation_id: str, tenant: str, max_nodes: int | None,
           since: datetime | None) -> _Call[LimitedConversationGraph]:
    return _Call("GET", f"/v1/conversations/{_segment(conversation_id)}/graph", LimitedConversationGraph,
                 params=_given(tenant=tenant, max_nodes=max_nodes, since=since))


def _memory_health(tenant: str, conversation: str | None, limit: int) -> _Call[MemoryHealth]:
    return _Call("GET", "/v1/health/memory", MemoryHealth,
                 params=_given(tenant=tenant, conversation=conversation, limit=limit))


def _given(**params: object) -> dict[str, str]:
    return {name: value.isoformat() if isinstance(value, datetime) else str(value)
            for name, value in params.items() if value is not None}


def _forget(conversation_id: str, tenant: str) -> _Call[DeleteResult]:
    return _Call("DELETE", f"/v1/conversations/{_segment(conversation_id)}", DeleteResult,
                 params=_given(tenant=tenant))


def _redact(conversation_id: str, turn_id: str, tenant: str) -> _Call[RedactResult]:
    return _Call("DELETE", f"/v1/conversations/{_segment(conversation_id)}/turns/{_segment(turn_id)}",
                 RedactResult, params=_given(tenant=tenant))


def _delete_tenant(tenant: str) -> _Call[TenantDeleteResult]:
    return _Call("DELETE", f"/v1/tenants/{_segment(tenant)}", TenantDeleteResult)


_ERRORS: dict[int, Callable[[str, int], CompassmemError]] = {
    401: Unauthorized, 403: Forbidden, 404: NotFound, 503: Unavailable,
}


def _answer(call: _Call[R], response: httpx.Response) -> R:
    """The answer's model, or the error class its status stands for with the server's message."""
    if response.is_success:
        return call.returns.model_validate_json(response.content)
    status = response.status_code
    where = f"{call.method} {call.path}: {status}"
    if status in (400, 413, 422):
        try:
            errors = ValidationErrorResponse.model_validate_json(response.content).detail
        except ValidationError:
            raise BadRequest(f"{where} {_detail(response)}", status) from None
        listed = "; ".join(f"{error.field}: {error.message}" for error in errors)
        raise BadRequest(f"{where} {listed}", status, errors)
    kind = _ERRORS.get(status, ServerError if status >= 500 else CompassmemError)
    raise kind(f"{where} {_detail(response)}", status)


def _detail(response: httpx.Response) -> str:
    try:
        return ErrorResponse.model_validate_json(response.content).detail
    except ValidationError:
        return response.text[:500] or response.reason_phrase


def _unreachable(client: httpx.Client | httpx.AsyncClient, error: httpx.TransportError) -> Unavailable:
    return Unavailable(f"no answer from the compassmem API at {client.base_url} ({type(error).__name__}: {error})")


def _headers(api_key: str | None) -> dict[str, str]:
    # What the API checks for a tenant that has a key (COMPASSMEM_API_KEYS).
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


class Client:
    """The HTTP API, synchronously. ``api_key``: the tenant's key, sent as ``Authorization: Bearer``;
    ``timeout``: seconds per request (connect, read, write each); ``transport``: an httpx transport (tests)."""

    def __init__(self, base_url: str, *, api_key: str | None = None, timeout: float = DEFAULT_TIMEOUT_S,
                 transport: httpx.BaseTransport | None = None) -> None:
        self._http = httpx.Client(base_url=base_url, headers=_headers(api_key), timeout=timeout, transport=transport)

    def _send(self, call: _Call[R]) -> R:
        try:
            response = self._http.request(call.method, call.path, params=call.params, json=call.body)
        except httpx.TransportError as error:
            raise _unreachable(self._http, error) from error
        return _answer(call, response)

    def add(self, turns: TurnInput | Iterable[TurnInput]) -> TurnsAccepted:
        """Append turns to the turns topic (POST /v1/turns); the worker makes them queryable shortly after."""
        return self._send(_add(turns))

    def query(self, request: QueryRequest | str, *, conversation_id: str | None = None,
              conversation_ids: Sequence[str] | None = None, subject_id: str | None = None,
              all_conversations: bool | None = None, tenant: str | None = None, budget_turns: int | None = None,
              max_hops: int | None = None, explain: bool | None = None, time_from: datetime | None = None,
              time_to: datetime | None = None, metadata: Mapping[str, str | int] | None = None,
              min_relevance: float | None = None) -> QueryResponse:
        """Ask a question (POST /v1/query): a ``QueryRequest``, or the question and its fields, as in ``Memory``;
        ``explain=True`` asks for ``explanation`` (why each turn ranks where it does), ``time_from``, ``time_to``
        and ``metadata`` filter the turns, ``min_relevance`` (0-1) drops those whose calibrated ``relevance`` is
        below it."""
        return self._send(_query(request, {
            "conversation_id": conversation_id, "conversation_ids": conversation_ids, "subject_id": subject_id,
            "all_conversations": all_conversations, "tenant": tenant, "budget_turns": budget_turns,
            "max_hops": max_hops, "explain": explain, "time_from": time_from, "time_to": time_to,
            "metadata": metadata, "min_relevance": min_relevance}))

    def event(self, event_id: str, *, tenant: str = DEFAULT_TENANT) -> EventOut:
        """One event with its source turns (GET /v1/events/{id})."""
        return self._send(_event(event_id, tenant))

    def conversations(self, *, tenant: str = DEFAULT_TENANT, query: str | None = None, limit: int = 50,
                      cursor: str | None = None, order: str = "recent") -> ConversationPage:
        """One page of the tenant's conversations (GET /v1/conversations); pass ``next_cursor`` for the next."""
        return self._send(_conversations(tenant, query, limit, cursor, order))

    def events(self, conversation_id: str, *, tenant: str = DEFAULT_TENANT, limit: int = 50,
               cursor: str | None = None) -> EventPage:
        """One page of a conversation's events in time order (GET /v1/conversations/{id}/events)."""
        return self._send(_events(conversation_id, tenant, limit, cursor))

    def graph(self, conversation_id: str, *, tenant: str = DEFAULT_TENANT, max_nodes: int | None = None,
              since: datetime | None = None) -> LimitedConversationGraph:
        """A conversation's event graph (GET /v1/conversations/{id}/graph)."""
        return self._send(_graph(conversation_id, tenant, max_nodes, since))

    def memory_health(self, *, tenant: str = DEFAULT_TENANT, conversation: str | None = None,
                      limit: int = 20) -> MemoryHealth:
        """The tenant's memory health with the last samples of each figure (GET /v1/health/memory): the
        conversation named, or the ``limit`` most recently updated ones, and the worker's figures."""
        return self._send(_memory_health(tenant, conversation, limit))

    def forget(self, conversation_id: str, *, tenant: str = DEFAULT_TENANT) -> DeleteResult:
        """Forget a conversation (DELETE /v1/conversations/{id})."""
        return self._send(_forget(conversation_id, tenant))

    def redact_turn(self, conversation_id: str, turn_id: str, *, tenant: str = DEFAULT_TENANT) -> RedactResult:
        """Delete one turn (DELETE /v1/conversations/{id}/turns/{turn_id}): its event is rebuilt from its other
        turns, or deleted when it was the last; NotFound when the conversation has no such turn."""
        return self._send(_redact(conversation_id, turn_id, tenant))

    def delete_tenant(self, tenant: str) -> TenantDeleteResult:
        """Delete every conversation of a tenant (DELETE /v1/tenants/{tenant}): the client's key must be an admin
        key (COMPASSMEM_API_ADMIN_KEYS), else Forbidden."""
        return self._send(_delete_tenant(tenant))

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


class AsyncClient:
    """The HTTP API for asyncio code: the verbs of ``Client``, awaited."""

    def __init__(self, base_url: str, *, api_key: str | None = None, timeout: float = DEFAULT_TIMEOUT_S,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self._http = httpx.AsyncClient(base_url=base_url, headers=_headers(api_key), timeout=timeout,
                                       transport=transport)

    async def _send(self, call: _Call[R]) -> R:
        try:
            response = await self._http.request(call.method, call.path, params=call.params, json=call.body)
        except httpx.TransportError as error:
            raise _unreachable(self._http, error) from error
        return _answer(call, response)

    async def add(self, turns: TurnInput | Iterable[TurnInput]) -> TurnsAccepted:
        """Append turns to the turns topic (POST /v1/turns); the worker makes them queryable shortly after."""
        return await self._send(_add(turns))

    async def query(self, request: QueryRequest | str, *, conversation_id: str | None = None,
                    conversation_ids: Sequence[str] | None = None, subject_id: str | None = None,
                    all_conversations: bool | None = None, tenant: str | None = None,
                    budget_turns: int | None = None, max_hops: int | None = None,
                    explain: bool | None = None, time_from: datetime | None = None,
                    time_to: datetime | None = None, metadata: Mapping[str, str | int] | None = None,
                    min_relevance: float | None = None) -> QueryResponse:
        """Ask a question (POST /v1/query): a ``QueryRequest``, or the question and its fields, as in ``Memory``;
        ``explain=True`` asks for ``explanation`` (why each turn ranks where it does), ``time_from``, ``time_to``
        and ``metadata`` filter the turns, ``min_relevance`` (0-1) drops those whose calibrated ``relevance`` is
        below it."""
        return await self._send(_query(request, {
            "conversation_id": conversation_id, "conversation_ids": conversation_ids, "subject_id": subject_id,
            "all_conversations": all_conversations, "tenant": tenant, "budget_turns": budget_turns,
            "max_hops": max_hops, "explain": explain, "time_from": time_from, "time_to": time_to,
            "metadata": metadata, "min_relevance": min_relevance}))

    async def event(self, event_id: str, *, tenant: str = DEFAULT_TENANT) -> EventOut:
        """One event with its source turns (GET /v1/events/{id})."""
        return await self._send(_event(event_id, tenant))

    async def conversations(self, *, tenant: str = DEFAULT_TENANT, query: str | None = None, limit: int = 50,
                            cursor: str | None = None, order: str = "recent") -> ConversationPage:
        """One page of the tenant's conversations (GET /v1/conversations); pass ``next_cursor`` for the next."""
        return await self._send(_conversations(tenant, query, limit, cursor, order))

    async def events(self, conversation_id: str, *, tenant: str = DEFAULT_TENANT, limit: int = 50,
                     cursor: str | None = None) -> EventPage:
        """One page of a conversation's events in time order (GET /v1/conversations/{id}/events)."""
        return await self._send(_events(conversation_id, tenant, limit, cursor))

    async def graph(self, conversation_id: str, *, tenant: str = DEFAULT_TENANT, max_nodes: int | None = None,
                    since: datetime | None = None) -> LimitedConversationGraph:
        """A conversation's event graph (GET /v1/conversations/{id}/graph)."""
        return await self._send(_graph(conversation_id, tenant, max_nodes, since))

    async def memory_health(self, *, tenant: str = DEFAULT_TENANT, conversation: str | None = None,
                            limit: int = 20) -> MemoryHealth:
        """The tenant's memory health with the last samples of each figure (GET /v1/health/memory)."""
        return await self._send(_memory_health(tenant, conversation, limit))

    async def forget(self, conversation_id: str, *, tenant: str = DEFAULT_TENANT) -> DeleteResult:
        """Forget a conversation (DELETE /v1/conversations/{id})."""
        return await self._send(_forget(conversation_id, tenant))

    async def redact_turn(self, conversation_id: str, turn_id: str, *, tenant: str = DEFAULT_TENANT) -> RedactResult:
        """Delete one turn (DELETE /v1/conversations/{id}/turns/{turn_id}): its event is rebuilt from its other
        turns, or deleted when it was the last; NotFound when the conversation has no such turn."""
        return await self._send(_redact(conversation_id, turn_id, tenant))

    async def delete_tenant(self, tenant: str) -> TenantDeleteResult:
        """Delete every conversation of a tenant (DELETE /v1/tenants/{tenant}): the client's key must be an admin
        key (COMPASSMEM_API_ADMIN_KEYS), else Forbidden."""
        return await self._send(_delete_tenant(tenant))

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()
