"""A request id on every HTTP response and on every log line written while serving the request.

The id comes from the client's ``X-Request-ID`` when it is a sensible one (1-128 characters of letters, digits and
``-_.:``: it goes into log lines and a response header, so nothing else may pass through), and is made up (32 hex
digits) otherwise. It is bound with ``structlog.contextvars`` for the request's task, so log lines of the endpoint
(run on the thread pool, which copies the context), of the middleware and of the error handler carry it as
``request_id``.

``install_request_ids`` adds the middleware as the outermost one the app may have, so answers made by the other
middleware (413 of the body limit) carry the header too; and it wraps the app's catch-all exception handler,
whose 500 answer is sent by Starlette's ``ServerErrorMiddleware``, outside every user middleware.
"""

from __future__ import annotations

import inspect
import re
import uuid

import structlog
from fastapi import FastAPI, Request
from starlette.datastructures import MutableHeaders
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from compassmem.core.logging_setup import REQUEST_ID_KEY, current_request_id

REQUEST_ID_HEADER = "X-Request-ID"
_VALID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


def request_id_of(incoming: str | None) -> str:
    """The client's id when it is a valid one, else a new one."""
    if incoming is not None and _VALID.fullmatch(incoming):
        return incoming
    return uuid.uuid4().hex


class RequestIdMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        incoming = next((value.decode("latin-1") for name, value in scope.get("headers", ())
                         if name == b"x-request-id"), None)
        request_id = request_id_of(incoming)
        # Not unbound on the way out: the error handler runs after this returns (see install_request_ids), and the
        # binding lives in this request's own task context, which no other request shares.
        structlog.contextvars.bind_contextvars(**{REQUEST_ID_KEY: request_id})

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message)[REQUEST_ID_HEADER] = request_id
            await send(message)

        await self.app(scope, receive, send_with_id)


def install_request_ids(app: FastAPI) -> None:
    """Call last in ``create_app``: after the other middleware (so this one is outermost) and after the
    ``Exception`` handler is registered."""
    app.add_middleware(RequestIdMiddleware)
    handler = app.exception_handlers.get(Exception)
    if handler is None:
        return

    async def with_request_id(request: Request, exc: Exception) -> Response:
        response = handler(request, exc)
        if inspect.isawaitable(response):
            response = await response
        request_id = current_request_id()
        if request_id is not None:
            response.headers[REQUEST_ID_HEADER] = request_id
        return response

    app.exception_handlers[Exception] = with_request_id

