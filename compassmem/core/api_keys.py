"""API keys: keys that name their tenant (``<tenant>.<secret>``), and ``TenantKeys``, the one check of a presented
key that the HTTP API and the MCP server share.

A tenant id never holds a dot (``TENANT_PATTERN``), so the tenant is everything before the first one. Such a key
tells which tenant it opens without a separate table, so ``COMPASSMEM_API_KEYS`` can be a plain list of keys, and an
answer to a key used on the wrong tenant can say whose key it is. Make one with
``python -c "import secrets; print('acme.' + secrets.token_urlsafe(32))"``.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Iterable, Mapping, Sequence

from pydantic import SecretStr

from compassmem.core.errors import Forbidden, Unauthorized
from compassmem.core.models import TENANT_PATTERN

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


class TenantKeys:
    """Who may act for which tenant: per-tenant keys (``COMPASSMEM_API_KEYS``) and admin keys
    (``COMPASSMEM_API_ADMIN_KEYS``), compared in constant time; the transports (HTTP, MCP) only say how the key
    arrives and how a refusal is answered.

    A tenant with a key needs it: Unauthorized without a key, Forbidden with another. A tenant without a key is
    open, unless ``required`` (``COMPASSMEM_API_AUTH_REQUIRED``): then every tenant needs its key, so a tenant someone
    forgot to list is refused rather than readable by anyone. Operations over a whole tenant (its deletion) and the
    runtime settings need an admin key, never a tenant's: Unauthorized without a key, Forbidden with any other, and
    Forbidden for everyone when no admin key is configured.
    """

    def __init__(self, keys: Mapping[str, SecretStr], required: bool, admin_keys: Sequence[SecretStr] = ()) -> None:
        self._keys = {tenant: key.get_secret_value().encode("utf-8") for tenant, key in keys.items()}
        self._required = required
        self._admin_keys = [key.get_secret_value().encode("utf-8") for key in admin_keys]

    def __bool__(self) -> bool:
        """Whether any tenant has a key."""
        return bool(self._keys)

    def owner(self, presented: str) -> str | None:
        """The tenant whose key this is, or None."""
        key = presented.encode("utf-8")
        # Every key compared, so the time taken does not depend on which one matched.
        matches = [tenant for tenant, expected in self._keys.items() if hmac.compare_digest(key, expected)]
        return matches[0] if matches else None

    def check(self, tenant: str, presented: str | None) -> None:
        """Return when the presented key (None: no key was sent) may act for ``tenant``; raise Unauthorized or
        Forbidden otherwise."""
        expected = self._keys.get(tenant)
        if expected is None and not self._required:
            return
        if presented is None:
            why = "requires an API key" if expected is not None else \
                "has no API key, and every tenant needs one here (COMPASSMEM_API_AUTH_REQUIRED)"
            raise Unauthorized(f"tenant {tenant!r} {why}: send 'Authorization: Bearer <key>'")
        if expected is not None and hmac.compare_digest(presented.encode("utf-8"), expected):
            return
        owner = self.owner(presented)
        if owner is not None:
            raise not_the_tenants_key(owner, tenant)
        raise Forbidden(f"the API key is not valid for tenant {tenant!r}")

    def authenticate(self, presented: str | None) -> None:
        """Return when the presented key may ask for some tenant at all, before the request says which (a body names
        it only once it is read); raise Unauthorized or Forbidden otherwise. A key must be a tenant's or an admin
        key; with ``required``, a tenant's, since no tenant is open to anyone else."""
        if presented is None:
            if self._required:
                raise Unauthorized("every tenant needs an API key here (COMPASSMEM_API_AUTH_REQUIRED): send "
                                   "'Authorization: Bearer <key>'")
            return
        if self.owner(presented) is not None:
            return
        if self._required or not self._is_admin(presented):
            raise Forbidden("the API key is no tenant's key")

    def check_admin(self, presented: str | None) -> None:
        """Return when the presented key is an admin key; raise Unauthorized or Forbidden otherwise."""
        if not self._admin_keys:
            raise Forbidden("no admin key is configured (COMPASSMEM_API_ADMIN_KEYS): tenant deletion and runtime "
                            "settings are off")
        if presented is None:
            raise Unauthorized("this needs an admin key: send 'Authorization: Bearer <admin key>'")
        if not self._is_admin(presented):
            raise Forbidden("the API key is not an admin key")

    def _is_admin(self, presented: str) -> bool:
        key = presented.encode("utf-8")
        # Every key compared, so the time taken does not depend on which one matched.
        return any([hmac.compare_digest(key, admin) for admin in self._admin_keys])


def not_the_tenants_key(owner: str, tenant: str) -> Forbidden:
    """The refusal of tenant ``owner``'s key for ``tenant``. The caller holds that key, so naming its tenant tells
    them nothing new, and says what went wrong."""
    return Forbidden(f"the API key is tenant {owner!r}'s, not tenant {tenant!r}'s")
