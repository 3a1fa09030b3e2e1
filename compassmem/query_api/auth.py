"""Who may read and write a tenant's memory over HTTP: the key check of ``compassmem.core.api_keys.TenantKeys`` on the
``Authorization: Bearer <key>`` header, its refusals answered 401 (no key) and 403 (a key that does not open the
tenant, or is not an admin key). The rules are TenantKeys'; the MCP server applies the same check.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from fastapi import HTTPException, status

from compassmem.core.api_keys import TenantKeys
from compassmem.core.errors import Forbidden, Unauthorized


class Authorizer:
    def __init__(self, keys: TenantKeys) -> None:
        self._keys = keys

    def check_admin(self, authorization: str | None) -> None:
        """Return when the request carries an admin key; raise the 401 or 403 otherwise."""
        with _as_http_errors():
            self._keys.check_admin(_bearer(authorization))

    def check(self, tenant: str, authorization: str | None) -> None:
        """Return when the request may act for ``tenant``; raise the 401 or 403 otherwise."""
        with _as_http_errors():
            self._keys.check(tenant, _bearer(authorization))


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
