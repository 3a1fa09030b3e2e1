"""Who may read and write a tenant's memory over HTTP: the key check of ``compassmem.core.api_keys.TenantKeys`` on the
``Authorization: Bearer <key>`` header, its refusals answered 401 (no key) and 403 (a key that does not open the
tenant, or is not an admin key). The rules are TenantKeys'; the MCP server applies the same check.

A route authenticates its caller before anything of the request is read (``TenantRoute``, ``AdminRoute``): FastAPI
validates the body and the parameters before any dependency runs, so a check there would answer a caller without a
key with the field errors. The tenant a request names is then checked as soon as it is read (``dependencies.py``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import Any

from fastapi import HTTPException, Request, Response, status
from fastapi.routing import APIRoute

from compassmem.core.api_keys import TenantKeys
from compassmem.core.errors import Forbidden, Unauthorized


class Authorizer:
    def __init__(self, keys: TenantKeys) -> None:
        self._keys = keys

    def authenticate(self, authorization: str | None) -> None:
        """Return when the request's key may ask for some tenant; raise the 401 or 403 otherwise."""
        with _as_http_errors():
            self._keys.authenticate(_bearer(authorization))

    def check_admin(self, authorization: str | None) -> None:
        """Return when the request carries an admin key; raise the 401 or 403 otherwise."""
        with _as_http_errors():
            self._keys.check_admin(_bearer(authorization))

    def check(self, tenant: str, authorization: str | None) -> None:
        """Return when the request may act for ``tenant``; raise the 401 or 403 otherwise."""
        with _as_http_errors():
            self._keys.check(tenant, _bearer(authorization))


Handler = Callable[[Request], Coroutine[Any, Any, Response]]


class _AuthenticatedRoute(APIRoute, ABC):
    """A route whose caller is authenticated before FastAPI's handler reads the body and validates anything."""

    @abstractmethod
    def authenticate(self, authorizer: Authorizer, authorization: str | None) -> None: ...

    def get_route_handler(self) -> Handler:
        validating = super().get_route_handler()

        async def handler(request: Request) -> Response:
            authorizer: Authorizer = request.app.state.authorizer
            self.authenticate(authorizer, request.headers.get("authorization"))
            return await validating(request)

        return handler


class TenantRoute(_AuthenticatedRoute):
    """A tenant's memory: any valid key here; whether it opens the tenant named is checked once that is read."""

    def authenticate(self, authorizer: Authorizer, authorization: str | None) -> None:
        authorizer.authenticate(authorization)


class AdminRoute(_AuthenticatedRoute):
    """A whole tenant, or the runtime settings: an admin key."""

    def authenticate(self, authorizer: Authorizer, authorization: str | None) -> None:
        authorizer.check_admin(authorization)


@contextmanager
def _as_http_errors() -> Iterator[None]:
    try:
        yield
    except Unauthorized as error:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, detail=error.message,
                            headers={"WWW-Authenticate": "Bearer"}) from error
    except Forbidden as error:
        raise HTTPException(status.HTTP_403_FORBIDDEN, detail=error.message) from error


def _bearer(authorization: str | None) -> str | None:
    scheme, _, key = (authorization or "").partition(" ")
    key = key.strip()
    if scheme.lower() != "bearer" or not key:
        return None
    return key
