"""A server span per HTTP request when traces are on (``compassmem/core/tracing.py``): the parent of what the request
does (the query's span), itself the child of the caller's span when the request carries a W3C ``traceparent``.

Named ``METHOD /route/{template}`` once the router matched (bounded names, like the request metrics' labels), with
the method, the route, the path, the status and the request id. Never the query string: a listing's ``query``
parameter is text a tenant searched for. Installed just inside the request id middleware, so the id is bound and
every answer, the other middleware's refusals included, gets a span; off, it passes requests straight through.
"""

from __future__ import annotations

from opentelemetry.trace import SpanKind, StatusCode
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from compassmem.core.logging_setup import current_request_id
from compassmem.core.tracing import enabled, propagation_headers, span

_SERVER_ERROR = 500


class ServerSpanMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not enabled():
            await self.app(scope, receive, send)
            return
        method = scope["method"]
        headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in scope.get("headers", ())
                   if name in propagation_headers()}
        with span(method, kind=SpanKind.SERVER, parent_headers=headers, request_id=current_request_id()) as opened:
            assert opened is not None  # traces are on

            async def send_with_status(message: Message) -> None:
                if message["type"] == "http.response.start":
                    status = int(message["status"])
                    opened.set_attribute("http.response.status_code", status)
                    if status >= _SERVER_ERROR:
                        opened.set_status(StatusCode.ERROR)
                await send(message)

            opened.set_attributes({"http.request.method": method, "url.path": scope["path"]})
            try:
                await self.app(scope, receive, send_with_status)
            finally:
                # The router records the matched route in the scope it was given, which is this one.
                route = getattr(scope.get("route"), "path", None)
                if route is not None:
                    opened.set_attribute("http.route", route)
                    opened.update_name(f"{method} {route}")
