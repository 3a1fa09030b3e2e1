"""Who may read and write a tenant's memory over HTTP: per-tenant API keys (``COMPASSMEM_API_KEYS``).

A tenant with a key needs ``Authorization: Bearer <key>``: 401 without one, 403 with another. A tenant without a
key is open, unless ``COMPASSMEM_API_AUTH_REQUIRED`` is on: then the API fails closed and every tenant needs its
key, so a tenant someone forgot to list is refused rather than readable by anyone. Operations over a whole tenant
(its deletion) need an admin key (``COMPASSMEM_API_ADMIN_KEYS``), never a tenant's: 401 without a key, 403 with
any other, and 403 for everyone when no admin key is configured. Keys are compared in constant time.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping, Sequence

from fastapi import HTTPException, status
from pydantic import SecretStr


class Authorizer:
    def __init__(self, keys: Mapping[str, SecretStr], required: bool, admin_keys: Sequence[SecretStr] = ()) -> None:
        self._keys = {tenant: key.get_secret_value().encode("utf-8") for tenant, key in keys.items()}
        self._required = required
        self._admin_keys = [key.get_secret_value().encode("utf-8") for key in admin_keys]

    def check_admin(self, authorization: str | None) -> None:
        """Return when the request carries an admin key; raise the 401 or 403 otherwise."""
        if not self._admin_keys:
            raise HTTPException(status.HTTP_403_FORBIDDEN,
                                detail="no admin key is configured (COMPASSMEM_API_ADMIN_KEYS): tenant deletion is off")
        presented = _bearer(authorization)
        if presented is None:
            raise HTTPException(status.HTTP_401_UNAUTHORIZED, headers={"WWW-Authenticate": "Bearer"},
                                detail="this needs an admin key: send 'Authorization: Bearer <admin key>'")
        # Every key compared, so the time taken does not depend on which one matched.
        if not any([hmac.compare_digest(presented, key) for key in self._admin_keys]):
            raise HTTPException(status.HTTP_403_FORBIDDEN, detail="the API key is not an admin key")

    def check(self, tenant: str, authorization: str | None) -> None:
        """Return when the request may act for ``tenant``; raise the 401 or 403 otherwise."""
        expected = self._keys.get(tenant)
        if expected is None and not self._required:
            return
        presented = _bearer(authorization)
        if presented is None:
            why = "requires an API key" if expected is not None else \
                "has no API key, and every tenant needs one here (COMPASSMEM_API_AUTH_REQUIRED)"
            raise HTTPException(status.HTTP_401_UNAUTHORIZED, headers={"WWW-Authenticate": "Bearer"},
                                detail=f"tenant {tenant!r} {why}: send 'Authorization: Bearer <key>'")
        if expected is not None and hmac.compare_digest(presented, expected):
            return
        owner = self._owner(presented)
        if owner is not None:
            # The caller holds that key, so naming its tenant tells them nothing new, and says what went wrong.
            raise HTTPException(status.HTTP_403_FORBIDDEN,
                                detail=f"the API key is tenant {owner!r}'s, not tenant {tenant!r}'s")
        raise HTTPException(status.HTTP_403_FORBIDDEN, detail=f"the API key is not valid for tenant {tenant!r}")

    def _owner(self, presented: bytes) -> str | None:
        # Every key compared, so the time taken does not depend on which one matched.
        matches = [tenant for tenant, key in self._keys.items() if hmac.compare_digest(presented, key)]
        return matches[0] if matches else None


def _bearer(authorization: str | None) -> bytes | None:
    scheme, _, key = (authorization or "").partition(" ")
    key = key.strip()
    if scheme.lower() != "bearer" or not key:
        return None
    return key.encode("utf-8")
