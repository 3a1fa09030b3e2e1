"""The errors of the public surface: the same classes whether memory is used in-process (``Memory``) or over
HTTP (``Client``, ``AsyncClient``), so a caller handles "no such conversation" once for both."""

from __future__ import annotations

from pydantic import ValidationError

from compassmem.core.contracts.records import FieldError


class CompassmemError(Exception):
    """Anything compassmem refuses or fails to do; ``status`` is the HTTP status when a server answered."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


class BadRequest(CompassmemError, ValueError):
    """A field breaks a rule (HTTP 400/413/422). ``errors`` names each field and the rule it broke, as the server
    wrote them. Also a ValueError, like the pydantic ValidationError that ``Memory`` raises for the same fields."""

    def __init__(self, message: str, status: int | None = None, errors: list[FieldError] | None = None) -> None:
        super().__init__(message, status)
        self.errors = errors or []


class Unauthorized(CompassmemError):
    """The tenant needs an API key and none was sent (HTTP 401)."""


class Forbidden(CompassmemError):
    """The API key is not valid for the tenant (HTTP 403)."""


class NotFound(CompassmemError, LookupError):
    """No memory for that tenant and conversation, or no such event (HTTP 404)."""


class Unavailable(CompassmemError):
    """Try again later: a store or topic did not answer, or a query ran past its deadline (HTTP 503)."""


class ServerError(CompassmemError):
    """The server failed (another 5xx); its log has the traceback."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C stopped a write that cleans up after itself (an import): still a KeyboardInterrupt, so it ends the
    program as one would, with ``message`` saying what the stores hold now."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def field_rules(error: ValidationError) -> str:
    """Each broken rule as 'field: rule' (pydantic's own text also repeats the input and a documentation link)."""
    return "; ".join(f"{'.'.join(str(part) for part in item['loc']) or 'arguments'}: "
                     f"{item['msg'].removeprefix('Value error, ')}" for item in error.errors())
