"""API keys that name their tenant: ``<tenant>.<secret>``.

A tenant id never holds a dot (``TENANT_PATTERN``), so the tenant is everything before the first one. Such a key
tells which tenant it opens without a separate table, so ``COMPASSMEM_API_KEYS`` can be a plain list of keys, and an
answer to a key used on the wrong tenant can say whose key it is. Make one with
``python -c "import secrets; print('acme.' + secrets.token_urlsafe(32))"``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from compassmem.models import TENANT_PATTERN

KEY_SEPARATOR = "."
# Guessing a key must be hopeless: at least 16 characters after the tenant (token_urlsafe(32) gives 43).
MIN_SECRET_CHARS = 16
_SECRET = re.compile(r"[A-Za-z0-9_~+/=-]+")


def tenant_of_key(key: str) -> str | None:
    """The tenant a key names, or None when it is not a ``<tenant>.<secret>`` key."""
    tenant, separator, secret = key.partition(KEY_SEPARATOR)
    if not separator or not re.fullmatch(TENANT_PATTERN, tenant) or not _SECRET.fullmatch(secret):
        return None
    return tenant


def keys_by_tenant(keys: Iterable[str]) -> dict[str, str]:
    """Tenant -> key for a list of keys that name their tenant; ValueError naming the key's position otherwise."""
    found: dict[str, str] = {}
    for position, key in enumerate(keys):
        tenant = tenant_of_key(key) if isinstance(key, str) else None
        if tenant is None:
            raise ValueError(f"key {position}: a key in a list must name its tenant, '<tenant>.<secret>' (the "
                             "secret of letters, digits and -_~+/=)")
        if len(key) - len(tenant) - len(KEY_SEPARATOR) < MIN_SECRET_CHARS:
            raise ValueError(f"key {position} (tenant {tenant!r}): the secret after the tenant needs at least "
                             f"{MIN_SECRET_CHARS} characters")
        if tenant in found:
            raise ValueError(f"key {position}: a second key for tenant {tenant!r}; one key per tenant")
        found[tenant] = key
    return found
