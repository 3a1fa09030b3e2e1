"""API keys that name their tenant: ``<tenant>.<secret>``.

A tenant id never holds a dot (``TENANT_PATTERN``), so the tenant is everything before the first one. Such a key
tells which tenant it opens without a separate table, so ``COMPASSMEM_API_KEYS`` can be a plain list of keys, and an
answer to a key used on the wrong tenant can say whose key it is. Make one with
``python -c "import secrets; print('acme.' + secrets.token_urlsafe(32))"``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

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


def secret_chars(key: str) -> int:
    """How many characters of a key are secret: those after ``<tenant>.`` for a key that names its tenant, else all."""
    tenant = tenant_of_key(key)
    return len(key) - len(tenant) - len(KEY_SEPARATOR) if tenant is not None else len(key)


def check_tenant_keys(keys: Mapping[str, str]) -> None:
    """Tenant -> key, as configured: each tenant a tenant id, each key long enough, naming no other tenant, and
    opening one tenant only. ValueError naming the tenant (never the key) otherwise."""
    owners: dict[str, str] = {}
    for tenant, key in keys.items():
        if not re.fullmatch(TENANT_PATTERN, tenant):
            raise ValueError(f"{tenant!r} is not a tenant id ({TENANT_PATTERN})")
        named = tenant_of_key(key)
        if named is not None and named != tenant:
            raise ValueError(f"tenant {tenant!r}: the key names tenant {named!r}")
        if secret_chars(key) < MIN_SECRET_CHARS:
            raise ValueError(f"tenant {tenant!r}: the key has {secret_chars(key)} characters of secret; at least "
                             f"{MIN_SECRET_CHARS} (make one with python -c \"import secrets; "
                             f"print(secrets.token_urlsafe(32))\")")
        if key in owners:
            # Either tenant's holder could act for the other.
            raise ValueError(f"tenants {owners[key]!r} and {tenant!r} have the same key: a key opens one tenant only")
        owners[key] = tenant


def keys_by_tenant(keys: Iterable[str]) -> dict[str, str]:
    """Tenant -> key for a list of keys that name their tenant; ValueError naming the key's position otherwise."""
    found: dict[str, str] = {}
    for position, key in enumerate(keys):
        tenant = tenant_of_key(key) if isinstance(key, str) else None
        if tenant is None:
            raise ValueError(f"key {position}: a key in a list must name its tenant, '<tenant>.<secret>' (the "
                             "secret of letters, digits and -_~+/=)")
        if secret_chars(key) < MIN_SECRET_CHARS:
            raise ValueError(f"key {position} (tenant {tenant!r}): the secret after the tenant needs at least "
                             f"{MIN_SECRET_CHARS} characters")
        if tenant in found:
            raise ValueError(f"key {position}: a second key for tenant {tenant!r}; one key per tenant")
        found[tenant] = key
    return found
