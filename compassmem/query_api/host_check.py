"""Answers only requests whose ``Host`` names this API: a loopback name, the address it listens on, or one of
``COMPASSMEM_API_ALLOWED_HOSTS``.

Without keys every tenant is open, and a browser sends a page's requests to whatever address the page's own name
resolves to: a page on a name its owner points at 127.0.0.1 after loading (DNS rebinding) could otherwise read, add
to and forget memory through the visitor's browser. The browser still sends the page's name as ``Host``, which is
what this refuses (400, before any endpoint runs). Plain ASGI, like the other middleware of the app.
"""

from __future__ import annotations

from collections.abc import Iterable

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from compassmem.core.config import ANY_HOST
from compassmem.core.contracts.records import ErrorResponse
from compassmem.system.loopback import host_of, is_loopback_host

# Bind addresses that are every interface: no Host name follows from them.
_WILDCARDS = frozenset({"", "0.0.0.0", "::"})


class HostCheckMiddleware:
    def __init__(self, app: ASGIApp, bind_host: str, allowed_hosts: Iterable[str]) -> None:
        self.app = app
        allowed = set(allowed_hosts)
        self._any = ANY_HOST in allowed
        bound = host_of(bind_host)
        self._names = frozenset(allowed | ({bound} if bound not in _WILDCARDS else set()))

    def answers(self, host: str) -> bool:
        name = host_of(host)
        return self._any or is_loopback_host(name) or name in self._names

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        host = next((value.decode("latin-1") for name, value in scope.get("headers", ()) if name == b"host"), "")
        if self.answers(host):
            await self.app(scope, receive, send)
            return
        detail = (f"this API does not answer to Host {host!r}: only loopback names (localhost, 127.0.0.1, [::1]), "
                  "the address it listens on and COMPASSMEM_API_ALLOWED_HOSTS, so that a web page cannot reach it "
                  "through a visitor's browser by pointing its own name at this machine (DNS rebinding)")
        await JSONResponse(status_code=400, content=ErrorResponse(detail=detail).model_dump())(scope, receive, send)
